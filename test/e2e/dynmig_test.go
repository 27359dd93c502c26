package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// The nodes of TestDynamicMIG: cards already in MIG mode with no instance, in a dynamic pool.
// dyn-a has two A100-80GB; dyn-b an H100-80GB and an A100-40GB (whose profiles have other names:
// 3g.20gb, 2g.10gb; its 1g.10gb takes two memory slices).
const (
	nodeDynA = "dyn-a"
	nodeDynB = "dyn-b"
	dynSim   = `nodes:
  dyn-a:
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled}}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled}}
  dyn-b:
    - {model: "NVIDIA H100 80GB HBM3", memoryMiB: 81920, numa: 0, mig: {current: enabled}}
    - {model: "NVIDIA A100-SXM4-40GB", memoryMiB: 40960, numa: 0, mig: {current: enabled}}
`
	dynAllow = "--mig-dynamic-profiles=1g.10gb,2g.20gb,3g.40gb,4g.40gb,7g.80gb,2g.10gb,3g.20gb"
)

// TestDynamicMIG sends a mixed burst of MIG profiles onto two nodes of a dynamic pool (real
// kube-apiserver, kube-scheduler and kubelets; the simulated NVML creates and destroys instances
// with the rules of pkg/migplace). Every pod runs on the placement its assignment names, the
// kubelet holds exactly that placement ID, the node's inventory lists an instance at each placement
// and no other, no two placements of a card overlap; a pod asking more than is left stays Pending
// with a reason naming its profile; once the pods are deleted every instance is destroyed.
func TestDynamicMIG(t *testing.T) {
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	path := filepath.Join(t.TempDir(), "dyn-gpus.yaml")
	if err := os.WriteFile(path, []byte(dynSim), 0o644); err != nil {
		t.Fatalf("simulation file: %v", err)
	}
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries, SimFile: path, Reconcile: 2 * time.Second,
		Nodes: []stack.NodeSpec{{Name: nodeDynA, Shares: 1, PluginArgs: []string{dynAllow}}, {Name: nodeDynB, Shares: 1, PluginArgs: []string{dynAllow}}}})
	e := &env{Stack: s, client: s.Cluster.Client}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	e.waitDynamicAdvertised(t)

	// The burst: 22 memory slices of 80 GB cards' profiles (24 on the three 80 GB cards) and 6 of
	// the 40 GB card's, created at once.
	burst := map[string]int{"3g.40gb": 2, "4g.40gb": 1, "2g.20gb": 3, "1g.10gb": 4, "3g.20gb": 1, "2g.10gb": 1}
	var pods []*corev1.Pod
	for _, profile := range slices.Sorted(maps.Keys(burst)) {
		for i := range burst[profile] {
			pods = append(pods, pod(fmt.Sprintf("dyn-%s-%d", strings.ReplaceAll(profile, ".", "-"), i), nil, migCtr("main", profile, 1)))
		}
	}
	e.create(t, pods...)
	e.waitRunning(t, podNames(pods)...)

	type placed struct {
		pod, node, parent, profile, id string
		start, size                    int
	}
	var all []placed
	records := map[string]map[stack.ContainerRef][]string{}
	for _, p := range pods {
		got, a := e.assignment(t, p.Name)
		if len(a.Containers) != 1 || len(a.Containers[0].Devices) != 1 {
			t.Fatalf("pod %s: assignment %+v, want one device", p.Name, a)
		}
		d := a.Containers[0].Devices[0]
		if d.Placement == nil || d.ID != annotations.MIGPlacementID(d.Parent, d.Profile, d.Placement.Start) {
			t.Fatalf("pod %s: device %+v names no placement", p.Name, d)
		}
		if records[a.Node] == nil {
			devs, err := e.MIGDevices(ctx(t), a.Node)
			if err != nil {
				t.Fatalf("%v", err)
			}
			records[a.Node] = devs
		}
		ref := stack.ContainerRef{Namespace: namespace, Pod: p.Name, Container: "main"}
		if diff := cmp.Diff([]string{d.ID}, records[a.Node][ref]); diff != "" {
			t.Errorf("%s on %s: PodResources MIG devices differ from the assignment (-assigned +kubelet):\n%s", ref, a.Node, diff)
		}
		all = append(all, placed{pod: got.Name, node: a.Node, parent: d.Parent, profile: d.Profile, id: d.ID, start: d.Placement.Start, size: d.Placement.Size})
	}
	overlaps := 0
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.parent == b.parent && a.start < b.start+b.size && b.start < a.start+a.size {
				overlaps++
				t.Errorf("%s (%s at %d:%d) and %s (%s at %d:%d) overlap on %s", a.pod, a.profile, a.start, a.size, b.pod, b.profile, b.start, b.size, a.parent)
			}
		}
	}
	t.Logf("%d pods placed, %d overlapping placements", len(all), overlaps)
	// Each node's inventory lists an instance at each assigned placement, and no other.
	for _, node := range []string{nodeDynA, nodeDynB} {
		var want []string
		for _, p := range all {
			if p.node == node {
				want = append(want, fmt.Sprintf("%s %s@%d:%d", p.parent, p.profile, p.start, p.size))
			}
		}
		slices.Sort(want)
		e.waitInstances(t, node, want)
	}
	var b strings.Builder
	for _, p := range all {
		fmt.Fprintf(&b, "\n  %-18s %-8s %s", p.pod, p.node, p.id)
	}
	t.Logf("placements:%s", b.String())

	// A 7g.80gb needs a whole 80 GB card: none is left.
	e.create(t, pod("dyn-7g", nil, migCtr("main", "7g.80gb", 1)))
	if msg := e.waitUnschedulable(t, "dyn-7g"); !strings.Contains(msg, "7g.80gb") {
		t.Errorf("the reason does not name the profile 7g.80gb: %s", msg)
	}

	e.deleteAll(t)
	for _, node := range []string{nodeDynA, nodeDynB} {
		e.waitInstances(t, node, nil)
	}
}

// waitDynamicAdvertised waits until both nodes publish their cards' dynamic profiles and their
// kubelets count the placements of 3g.40gb (two per 80 GB card) as allocatable.
func (e *env) waitDynamicAdvertised(t *testing.T) {
	t.Helper()
	for node, want := range map[string]int{nodeDynA: 4, nodeDynB: 2} {
		stack.Wait(t, runTimeout, "node "+node+" advertising its dynamic MIG placements", func() (bool, string, error) {
			inv, err := e.Inventory(context.Background(), node)
			if err != nil {
				return false, err.Error(), nil //nolint:nilerr // polling: not published yet
			}
			for _, g := range inv.GPUs {
				if g.MIG == nil || len(g.MIG.Dynamic) == 0 {
					return false, fmt.Sprintf("card %s publishes no dynamic profiles", g.UUID), nil
				}
			}
			alloc, err := e.MIGAllocatable(context.Background(), node)
			if err != nil {
				return false, err.Error(), nil //nolint:nilerr // polling: the kubelet may not answer yet
			}
			r := string(e.Names.MIGResource("3g.40gb"))
			return len(alloc[r]) == want, fmt.Sprintf("kubelet has %d allocatable %s, want %d", len(alloc[r]), r, want), nil
		})
	}
}

// waitInstances waits until node's inventory lists exactly the instances want ("<parent>
// <profile>@<start>:<size>", sorted; nil: none).
func (e *env) waitInstances(t *testing.T, node string, want []string) {
	t.Helper()
	stack.Wait(t, runTimeout, fmt.Sprintf("node %s listing %d MIG instances", node, len(want)), func() (bool, string, error) {
		inv, err := e.Inventory(context.Background(), node)
		if err != nil {
			return false, err.Error(), nil //nolint:nilerr // polling
		}
		var got []string
		for _, g := range inv.GPUs {
			if g.MIG == nil {
				continue
			}
			for _, in := range g.MIG.Instances {
				got = append(got, fmt.Sprintf("%s %s@%d:%d", g.UUID, in.Profile, in.Start, in.Size))
			}
		}
		slices.Sort(got)
		return slices.Equal(got, want), fmt.Sprintf("instances %v, want %v", got, want), nil
	})
}
