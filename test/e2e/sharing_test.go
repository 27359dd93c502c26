package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// fakeDaemon stands for the chart's MPS daemon (nvidia-cuda-mps-control under mps-daemon.sh).
type fakeDaemon struct {
	l         net.Listener
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// Close stops the daemon: its socket goes, its ready file is no longer refreshed.
func (d *fakeDaemon) Close() error {
	var err error
	d.closeOnce.Do(func() {
		close(d.stop)
		<-d.done
		err = d.l.Close()
	})
	return err
}

// fakeMPSDaemon is startFakeMPSDaemon with no tenant requests read.
func fakeMPSDaemon(t *testing.T, dir string) *fakeDaemon { return startFakeMPSDaemon(t, dir, "", "") }

// startFakeMPSDaemon listens on <pipe>/control as nvidia-cuda-mps-control does, accepting and
// closing every connection, and does what the chart's daemon script does for the device plugin's
// readiness check: it writes the ready file (a server started with the limits of 4 shares) and
// rewrites it every 100 ms while it runs. With tenantDir set it reads the plugin's tenant request
// there, and for each new epoch empties shm, then names the epoch in its ready file.
func startFakeMPSDaemon(t *testing.T, pipe, shm, tenantDir string) *fakeDaemon {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(pipe, "control"))
	if err != nil {
		t.Fatalf("fake MPS daemon: %v", err)
	}
	d := &fakeDaemon{l: l, stop: make(chan struct{}), done: make(chan struct{})}
	epochOf := func() string {
		if tenantDir == "" {
			return "0"
		}
		b, _ := os.ReadFile(filepath.Join(tenantDir, "request"))
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "epoch="); ok {
				return v
			}
		}
		return "0"
	}
	served := ""
	serve := func() error {
		if epoch := epochOf(); epoch != served {
			if shm != "" {
				des, err := os.ReadDir(shm)
				if err != nil {
					return err
				}
				for _, de := range des {
					if err := os.RemoveAll(filepath.Join(shm, de.Name())); err != nil {
						return err
					}
				}
			}
			served = epoch
		}
		ready := filepath.Join(pipe, "cardinal-ready")
		content := "shares=4 computeMode=EXCLUSIVE_PROCESS activeThreadPercentage=25 epoch=" + served + "\n"
		if err := os.WriteFile(ready+".tmp", []byte(content), 0o644); err != nil {
			return err
		}
		return os.Rename(ready+".tmp", ready)
	}
	if err := serve(); err != nil {
		t.Fatalf("fake MPS daemon: %v", err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	go func() {
		defer close(d.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-tick.C:
				if err := serve(); err != nil {
					t.Errorf("fake MPS daemon: %v", err)
					return
				}
			}
		}
	}()
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// inventorySharing is the sharing field of node's published inventory (nil when absent).
func (e *env) inventorySharing(t *testing.T, node string) (*annotations.Sharing, error) {
	n, err := e.client.CoreV1().Nodes().Get(ctx(t), node, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	inv, err := annotations.DecodeInventory(n.Annotations[annotations.GPUInventory])
	if err != nil {
		return nil, err
	}
	return inv.Sharing, nil
}

func (e *env) waitSharingReady(t *testing.T, node string, ready bool) {
	t.Helper()
	stack.Wait(t, runTimeout, "inventory sharing ready="+map[bool]string{true: "true", false: "false"}[ready], func() (bool, string, error) {
		s, err := e.inventorySharing(t, node)
		if err != nil {
			return false, "", err
		}
		if s == nil {
			return false, "no sharing field", nil
		}
		if s.Mode != annotations.SharingMPS {
			return false, "", fmt.Errorf("inventory sharing mode %q, want mps", s.Mode)
		}
		return s.Ready == ready, "ready=" + map[bool]string{true: "true", false: "false"}[s.Ready], nil
	})
}

// runtimeView is what the test checks of the configuration the kubelet gave the runtime.
type runtimeView struct {
	Env    map[string]string
	Mounts map[string]string // container path -> host path
}

func viewOfConfig(c *runtimeapi.ContainerConfig) runtimeView {
	v := runtimeView{Env: map[string]string{}, Mounts: map[string]string{}}
	for _, kv := range c.GetEnvs() {
		v.Env[kv.GetKey()] = string(kv.GetValue())
	}
	for _, m := range c.GetMounts() {
		v.Mounts[m.GetContainerPath()] = m.GetHostPath()
	}
	return v
}

// TestSharing (issue #17) runs a node whose device plugin is in sharing mode mps against a fake MPS
// control daemon: the kubelet hands a shared container the pipe directory, /dev/shm and the MPS
// limits, and a whole-card container none of them; while the daemon is down the inventory says so,
// the extender places no shared pod there, and whole cards are still served.
func TestSharing(t *testing.T) {
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	pipe, err := os.MkdirTemp("", "mps-pipe") // short: a unix socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pipe) })
	shm := t.TempDir()
	daemon := fakeMPSDaemon(t, pipe)
	const node = "node-b" // 8 simulated H100s (81559 MiB)
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries, Nodes: []stack.NodeSpec{{Name: node, Shares: 4, PluginArgs: []string{
		"--sharing-mode=mps", "--mps-pipe-dir=" + pipe, "--mps-shm-dir=" + shm, "--sharing-check-interval=200ms",
	}}}})
	e := &env{Stack: s, client: s.Cluster.Client}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	e.waitSharingReady(t, node, true)
	k := s.Kubelets[node]

	e.create(t, pod("shared", nil, ctr("main", gpu{cards: 1, memMiB: 20000, cores: 30})), pod("whole", nil))
	e.waitRunning(t, "shared", "whole")
	uuid := e.truth(t, "shared")["shared/main"].UUIDs()
	if len(uuid) != 1 {
		t.Fatalf("shared/main holds cards %v, want one", uuid)
	}
	c := k.ContainerConfig(namespace, "shared", "main")
	if c == nil {
		t.Fatal("the kubelet created no container shared/main")
	}
	want := runtimeView{
		Env: map[string]string{
			"NVIDIA_VISIBLE_DEVICES":            uuid[0],
			"CUDA_DEVICE_ORDER":                 "PCI_BUS_ID",
			"CUDA_MPS_PIPE_DIRECTORY":           "/run/cardinal/mps/pipe",
			"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=20000M",
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
		},
		Mounts: map[string]string{"/run/cardinal/mps/pipe": pipe, "/dev/shm": shm},
	}
	got := viewOfConfig(c)
	for k := range got.Env {
		if _, ok := want.Env[k]; !ok && !strings.HasPrefix(k, "CUDA_") && !strings.HasPrefix(k, "NVIDIA_") {
			delete(got.Env, k) // the kubelet's own (service links, HOSTNAME…)
		}
	}
	// The kubelet adds /etc/hosts and the termination log to every container.
	for p := range got.Mounts {
		if p == "/etc/hosts" || p == "/dev/termination-log" {
			delete(got.Mounts, p)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("shared/main as the kubelet created it (-want +got):\n%s", diff)
	}
	wc := k.ContainerConfig(namespace, "whole", "main")
	if wc == nil {
		t.Fatal("the kubelet created no container whole/main")
	}
	for _, kv := range wc.GetEnvs() {
		if strings.HasPrefix(kv.GetKey(), "CUDA_MPS_") || strings.HasPrefix(kv.GetKey(), "CUDA_DEVICE_MEMORY_LIMIT") {
			t.Errorf("whole/main got %s=%s; a whole-card container is no MPS client", kv.GetKey(), kv.GetValue())
		}
	}
	for _, m := range wc.GetMounts() {
		if m.GetHostPath() == pipe || m.GetHostPath() == shm {
			t.Errorf("whole/main mounts %s at %s", m.GetHostPath(), m.GetContainerPath())
		}
	}

	// The daemon goes away: the inventory says not ready, a new shared pod is not placed (the
	// extender names the cause), a whole-card pod still runs.
	if err := daemon.Close(); err != nil {
		t.Fatal(err)
	}
	e.waitSharingReady(t, node, false)
	e.create(t, pod("shared-2", nil, ctr("main", gpu{cards: 1, memMiB: 20000})), pod("whole-2", nil))
	msg := e.waitUnschedulable(t, "shared-2")
	if !strings.Contains(msg, "mps sharing cannot enforce limits now") {
		t.Errorf("shared-2 unschedulable with %q, want the node's mps sharing named", msg)
	}
	e.waitRunning(t, "whole-2")
	// The daemon comes back: a new shared pod is placed. (shared-2 waits for kube-scheduler's own
	// retry: the readiness change is a Node annotation change, which no in-tree plugin registers
	// for, so it is retried when the scheduler flushes its unschedulable pods, within 5 minutes.)
	fakeMPSDaemon(t, pipe)
	e.waitSharingReady(t, node, true)
	e.create(t, pod("shared-3", nil, ctr("main", gpu{cards: 1, memMiB: 20000})))
	start := time.Now()
	e.waitRunning(t, "shared-3")
	t.Logf("shared-3 ran %s after creation, the daemon back", time.Since(start).Round(time.Millisecond))
}
