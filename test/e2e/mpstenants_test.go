package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// TestMPSTenants (issue 34 item 5): two tenants' shared pods, one after the other, on one mps node.
// Each shared container gets the daemon's pipe folder read-only (no tenant can remove or replace
// the daemon's socket or its ready file), and when the second namespace's pod comes the plugin asks
// the daemon for a fresh start: the shm folder the first tenant wrote into is empty before the
// second tenant's container is created, and the daemon's ready file names the new epoch.
func TestMPSTenants(t *testing.T) {
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	pipe, err := os.MkdirTemp("", "mps-pipe") // short: a unix socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pipe) })
	shm, tenants := t.TempDir(), t.TempDir()
	startFakeMPSDaemon(t, pipe, shm, tenants)
	const node = "node-b" // 8 simulated H100s
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries, Nodes: []stack.NodeSpec{{Name: node, Shares: 4, PluginArgs: []string{
		"--sharing-mode=mps", "--mps-pipe-dir=" + pipe, "--mps-shm-dir=" + shm, "--mps-tenant-dir=" + tenants, "--sharing-check-interval=200ms",
	}}}})
	e := &env{Stack: s, client: s.Cluster.Client}
	const other = namespace + "-b"
	for _, ns := range []string{namespace, other} {
		if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace: %v", err)
		}
	}
	e.waitSharingReady(t, node, true)
	k := s.Kubelets[node]

	request := func() string {
		b, err := os.ReadFile(filepath.Join(tenants, "request"))
		if err != nil {
			t.Fatalf("the plugin's tenant request: %v", err)
		}
		return string(b)
	}
	// mountsOf returns the container's host mounts: container path -> host path, read-only.
	type mount struct {
		Host     string
		ReadOnly bool
	}
	mountsOf := func(c *runtimeapi.ContainerConfig) map[string]mount {
		out := map[string]mount{}
		for _, m := range c.GetMounts() {
			out[m.GetContainerPath()] = mount{m.GetHostPath(), m.GetReadonly()}
		}
		return out
	}
	checkMounts := func(ns, name string) {
		t.Helper()
		c := k.ContainerConfig(ns, name, "main")
		if c == nil {
			t.Fatalf("the kubelet created no container %s/%s/main", ns, name)
		}
		m := mountsOf(c)
		if got := m["/run/cardinal/mps/pipe"]; got != (mount{pipe, true}) {
			t.Errorf("%s/%s: pipe folder mounted %+v, want %s read-only", ns, name, got, pipe)
		}
		if got := m["/dev/shm"]; got != (mount{shm, false}) {
			t.Errorf("%s/%s: /dev/shm mounted %+v, want %s read-write", ns, name, got, shm)
		}
	}

	// Tenant A.
	e.create(t, pod("a", nil, ctr("main", gpu{cards: 1, memMiB: 20000})))
	e.waitRunning(t, "a")
	checkMounts(namespace, "a")
	if got, want := request(), "epoch=1\nnamespace="+namespace+"\n"; got != want {
		t.Errorf("tenant request for A: %q, want %q", got, want)
	}
	// What A's processes leave in /dev/shm (the fake runtime runs none: the test writes for them).
	for _, f := range []string{"a-segment", ".a-hidden"} {
		if err := os.WriteFile(filepath.Join(shm, f), []byte("tenant A"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A second pod of A: no fresh start, A's files stay.
	e.create(t, pod("a2", nil, ctr("main", gpu{cards: 1, memMiB: 20000})))
	e.waitRunning(t, "a2")
	if got := request(); got != "epoch=1\nnamespace="+namespace+"\n" {
		t.Errorf("a second pod of the same tenant asked for a fresh start: %q", got)
	}
	if des, _ := os.ReadDir(shm); len(des) != 2 {
		t.Errorf("shm of tenant A after its second pod: %d entries, want its 2 files", len(des))
	}
	e.delete(t, "a")
	e.delete(t, "a2")

	// Tenant B.
	b := pod("b", nil, ctr("main", gpu{cards: 1, memMiB: 20000}))
	b.Namespace = other
	if _, err := e.client.CoreV1().Pods(other).Create(ctx(t), b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/b: %v", other, err)
	}
	stack.Wait(t, runTimeout, "pod "+other+"/b Running", func() (bool, string, error) {
		p, err := e.client.CoreV1().Pods(other).Get(context.Background(), "b", metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, "", err
		}
		if err == nil && p.Status.Phase == corev1.PodFailed {
			return false, "", fmt.Errorf("pod %s/b failed: %s: %s", other, p.Status.Reason, p.Status.Message)
		}
		return err == nil && p.Status.Phase == corev1.PodRunning, "waiting", nil
	})
	checkMounts(other, "b")
	if got, want := request(), "epoch=2\nnamespace="+other+"\n"; got != want {
		t.Errorf("tenant request for B: %q, want %q", got, want)
	}
	var left []string
	des, err := os.ReadDir(shm)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		left = append(left, de.Name())
	}
	if len(left) > 0 {
		t.Errorf("tenant B's /dev/shm holds tenant A's %v", left)
	}
	ready, err := os.ReadFile(filepath.Join(pipe, "cardinal-ready"))
	if err != nil || !slices.Contains([]string{"shares=4 computeMode=EXCLUSIVE_PROCESS activeThreadPercentage=25 epoch=2\n"}, string(ready)) {
		t.Errorf("daemon's ready file %q (%v), want it to name epoch 2", ready, err)
	}
}
