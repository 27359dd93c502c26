package scheduler

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// n1: 2 A40 cards of 10000 MiB, 4 shares each: IDs GPU-n1-0::0..3, GPU-n1-1::0..3.
func cacheNode() *corev1.Node {
	return gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 2, shares: 4})
}

func bound(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.NodeName = node
	return p
}

func withAssignment(t *testing.T, p *corev1.Pod, node string, cs ...annotations.ContainerAssignment) *corev1.Pod {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[annotations.GPUAssignment] = mustEncode(t, annotations.Assignment{Node: node, Containers: cs})
	return p
}

func withAllocation(t *testing.T, p *corev1.Pod, node string, cs ...annotations.ContainerAllocation) *corev1.Pod {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	enc, err := annotations.EncodeAllocation(annotations.Allocation{Node: node, Containers: cs})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[annotations.GPUAllocated] = enc
	return p
}

func dev(id string, mem int64, cores int) annotations.DeviceAssignment {
	uuid, _, _ := annotations.ParseDeviceID(id)
	return annotations.DeviceAssignment{UUID: uuid, ID: id, MemoryMiB: mem, Cores: cores}
}

func usages(s *core.NodeState) []core.Usage {
	if s == nil {
		return nil
	}
	out := make([]core.Usage, len(s.Cards))
	for i := range s.Cards {
		out[i] = s.Cards[i].Usage
	}
	return out
}

func TestCacheCountsRecords(t *testing.T) {
	s0, s1 := uuidOf("n1", 0)+"::0", uuidOf("n1", 1)+"::1"
	share := func(name string) *corev1.Pod { return gpuPod(name, nil, ctr{name: "m", gpu: 1, mem: 2000, cores: 30}) }
	cases := []struct {
		name string
		pod  func(t *testing.T) *corev1.Pod
		want []core.Usage
	}{
		{
			name: "bound pod with an assignment holds its slot",
			pod: func(t *testing.T) *corev1.Pod {
				return withAssignment(t, bound(share("p"), "n1"), "n1", annotations.ContainerAssignment{Name: "m", Devices: []annotations.DeviceAssignment{dev(s0, 2000, 30)}})
			},
			want: []core.Usage{{MemMiB: 2000, Cores: 30, Held: 1}, {}},
		},
		{
			name: "finished pod frees its cards",
			pod: func(t *testing.T) *corev1.Pod {
				p := withAssignment(t, bound(share("p"), "n1"), "n1", annotations.ContainerAssignment{Name: "m", Devices: []annotations.DeviceAssignment{dev(s0, 2000, 30)}})
				p.Status.Phase = corev1.PodSucceeded
				return p
			},
			want: []core.Usage{{}, {}},
		},
		{
			name: "terminating pod keeps its cards until gone",
			pod: func(t *testing.T) *corev1.Pod {
				p := withAssignment(t, bound(share("p"), "n1"), "n1", annotations.ContainerAssignment{Name: "m", Devices: []annotations.DeviceAssignment{dev(s0, 2000, 30)}})
				now := metav1.Now()
				p.DeletionTimestamp = &now
				p.Status.Phase = corev1.PodRunning
				return p
			},
			want: []core.Usage{{MemMiB: 2000, Cores: 30, Held: 1}, {}},
		},
		{
			name: "assignment for another node than the pod's is ignored",
			pod: func(t *testing.T) *corev1.Pod {
				return withAssignment(t, bound(share("p"), "n1"), "n2", annotations.ContainerAssignment{Name: "m", Devices: []annotations.DeviceAssignment{dev(s0, 2000, 30)}})
			},
			want: []core.Usage{{}, {}},
		},
		{
			name: "assigned but not bound (bind failed earlier) holds nothing",
			pod: func(t *testing.T) *corev1.Pod {
				return withAssignment(t, share("p"), "n1", annotations.ContainerAssignment{Name: "m", Devices: []annotations.DeviceAssignment{dev(s0, 2000, 30)}})
			},
			want: []core.Usage{{}, {}},
		},
		{
			name: "pod of another scheduler recorded from PodResources: its request gives 2000 MiB / 30%",
			pod: func(t *testing.T) *corev1.Pod {
				return withAllocation(t, bound(share("p"), "n1"), "n1", annotations.ContainerAllocation{Name: "m", IDs: []string{s1}, Source: annotations.SourcePodResources})
			},
			want: []core.Usage{{}, {MemMiB: 2000, Cores: 30, Held: 1}},
		},
		{
			name: "recorded pod with no readable request holds the whole card",
			pod: func(t *testing.T) *corev1.Pod {
				return withAllocation(t, bound(gpuPod("p", nil, ctr{name: "other"}), "n1"), "n1", annotations.ContainerAllocation{Name: "m", IDs: []string{s1}, Source: annotations.SourcePodResources})
			},
			want: []core.Usage{{}, {MemMiB: 10000, Cores: 100, Held: 1, Whole: 1}},
		},
		{
			name: "kubelet gave other IDs than assigned: the allocation wins, the reservation stays",
			pod: func(t *testing.T) *corev1.Pod {
				p := withAssignment(t, bound(share("p"), "n1"), "n1", annotations.ContainerAssignment{Name: "m", Devices: []annotations.DeviceAssignment{dev(s0, 2000, 30)}})
				return withAllocation(t, p, "n1", annotations.ContainerAllocation{Name: "m", IDs: []string{s1}, Source: annotations.SourceAllocate})
			},
			want: []core.Usage{{}, {MemMiB: 2000, Cores: 30, Held: 1}},
		},
		{
			name: "init card reused by the app container counts once, at the larger reservation",
			pod: func(t *testing.T) *corev1.Pod {
				p := gpuPod("p", nil, ctr{name: "i", init: true, gpu: 1, mem: 1000, cores: 10}, ctr{name: "m", gpu: 1, mem: 3000, cores: 20})
				return withAssignment(t, bound(p, "n1"), "n1",
					annotations.ContainerAssignment{Name: "i", Init: true, Devices: []annotations.DeviceAssignment{dev(s0, 3000, 20)}},
					annotations.ContainerAssignment{Name: "m", Devices: []annotations.DeviceAssignment{dev(s0, 3000, 20)}})
			},
			want: []core.Usage{{MemMiB: 3000, Cores: 20, Held: 1}, {}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cache := NewCache(annotations.DefaultResourceNames(), "cardinal-scheduler")
			cache.UpsertNode(cacheNode())
			pod := c.pod(t)
			cache.UpsertPod(pod)
			if diff := cmp.Diff(c.want, usages(cache.NodeUsage("n1"))); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			// Deleting the pod frees everything.
			cache.DeletePod(pod.UID)
			if diff := cmp.Diff([]core.Usage{{}, {}}, usages(cache.NodeUsage("n1"))); diff != "" {
				t.Errorf("after delete (-want +got):\n%s", diff)
			}
		})
	}
}

// The node may arrive after its pods (informers start in any order), and may change its cards.
func TestCacheNodeLateAndChanging(t *testing.T) {
	cache := NewCache(annotations.DefaultResourceNames(), "cardinal-scheduler")
	p := withAssignment(t, bound(gpuPod("p", nil, ctr{name: "m", gpu: 1}), "n1"), "n1",
		annotations.ContainerAssignment{Name: "m", Devices: []annotations.DeviceAssignment{dev(uuidOf("n1", 1)+"::0", 10000, 100)}})
	cache.UpsertPod(p)
	cache.UpsertNode(cacheNode())
	want := []core.Usage{{}, {MemMiB: 10000, Cores: 100, Held: 1, Whole: 1}}
	if diff := cmp.Diff(want, usages(cache.NodeUsage("n1"))); diff != "" {
		t.Errorf("node after pod (-want +got):\n%s", diff)
	}
	// Card 1 turns unhealthy: the holding stays.
	sickNode := gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 2, shares: 4, sick: []int{1}})
	cache.UpsertNode(sickNode)
	if diff := cmp.Diff(want, usages(cache.NodeUsage("n1"))); diff != "" {
		t.Errorf("after health change (-want +got):\n%s", diff)
	}
}

// A restarted extender rebuilds the same state from the same objects, whatever happened before.
func TestCacheRebuildsAfterRestart(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true}, cacheNode())
	pods := []*corev1.Pod{
		gpuPod("a", nil, ctr{name: "m", gpu: 1, mem: 2000, cores: 30}),
		gpuPod("b", nil, ctr{name: "m", gpu: 1, mem: 2000, cores: 30}),
		gpuPod("c", nil, ctr{name: "m", gpu: 1, mem: 5000, cores: 30}),
	}
	for _, p := range pods {
		if _, err := h.client.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		res := h.srv.Bind(t.Context(), &bindArgs{PodName: p.Name, PodNamespace: "default", Node: "n1"})
		if res.Error != "" {
			t.Fatal(res.Error)
		}
		h.allocate(p.Name) // c asks more memory than a and b: it would wait for them while in flight
	}
	before := usages(h.cache.NodeUsage("n1"))
	fresh := NewCache(annotations.DefaultResourceNames(), "cardinal-scheduler")
	list, err := h.client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		fresh.UpsertPod(&list.Items[i])
	}
	fresh.UpsertNode(cacheNode())
	// binpack: a and b share card 0 (4000 MiB, 60%), c fits beside them? 10000-4000 = 6000 >= 5000
	// but 100-60 = 40 >= 30 too: all three on card 0: 9000 MiB, 90%, 3 slots.
	want := []core.Usage{{MemMiB: 9000, Cores: 90, Held: 3}, {}}
	if diff := cmp.Diff(want, before); diff != "" {
		t.Errorf("before restart (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, usages(fresh.NodeUsage("n1"))); diff != "" {
		t.Errorf("after restart (-before +after):\n%s", diff)
	}
}

// TestNodesInOneStateShareOneKey: nodes in the same state hold the same key string (one copy, so
// Evaluate's key check stops at the pointer), a node that changes state gets the other state's
// copy, and keys no node holds are dropped once the table outgrows the nodes.
func TestNodesInOneStateShareOneKey(t *testing.T) {
	cache := NewCache(annotations.DefaultResourceNames(), "cardinal-scheduler")
	for i := range 3 {
		cache.UpsertNode(gpuNode(nodeSpec{name: fmt.Sprintf("n%d", i), model: a100, memMiB: 40960, count: 8}))
	}
	cache.UpsertNode(gpuNode(nodeSpec{name: "other", model: a100, memMiB: 40960, count: 4}))
	data := func(name string) *byte { return unsafe.StringData(cache.nodes[name].key) }
	if cache.nodes["n0"].key == "" || data("n0") != data("n1") || data("n1") != data("n2") {
		t.Fatal("three nodes in one state hold different copies of its key")
	}
	if data("other") == data("n0") {
		t.Fatal("nodes in different states share a key")
	}
	cache.UpsertNode(gpuNode(nodeSpec{name: "n2", model: a100, memMiB: 40960, count: 4}))
	if data("n2") != data("other") || cache.nodes["n2"].hash != cache.nodes["other"].hash {
		t.Error("a node that changed to another node's state did not take that state's key")
	}
	for i := range 3000 {
		cache.UpsertNode(gpuNode(nodeSpec{name: "churn", model: a100, memMiB: int64(1000 + i), count: 1}))
	}
	if n := len(cache.keys); n > 2*len(cache.nodes)+1024 {
		t.Errorf("%d keys kept for %d nodes: keys no node holds are never dropped", n, len(cache.nodes))
	}
	if _, ok := cache.keys[cache.nodes["n0"].key]; !ok {
		t.Error("a key a node holds was dropped")
	}
}
