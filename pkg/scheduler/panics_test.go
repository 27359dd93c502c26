package scheduler

import (
	"runtime"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// kubeletNode is a node n with two cards (one per NUMA node) whose kubelet runs policy over the
// given NUMA nodes, its inventory written as the device plugin writes it.
func kubeletNode(t *testing.T, name, policy string, numa []annotations.NUMACPUs) *corev1.Node {
	t.Helper()
	inv := annotations.Inventory{Kubelet: &annotations.KubeletTopology{
		TopologyManagerPolicy: policy, TopologyManagerScope: "container", CPUManagerPolicy: "static", DeviceTopology: true,
		MaxAllowableNUMANodes: 64, NUMA: numa}}
	for i := range 2 {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: uuidOf(name, i), Index: i, Model: a40, MemoryMiB: 100, NUMA: i, Healthy: true, Shares: 1})
	}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotations.GPUInventory: enc}}}
}

func numaCPUs(n int) []annotations.NUMACPUs {
	out := make([]annotations.NUMACPUs, n)
	for i := range out {
		out[i] = annotations.NUMACPUs{ID: i, CPUs: 4}
	}
	return out
}

// Issue 21 item 2: a node whose kubelet reports 64 NUMA nodes under a TopologyManager policy made
// the model allocate 2^64 masks and panic; the filter answered 500 and lost every good node. Its
// inventory is now refused at decode: that node alone fails, with a reason.
func TestNodeWithTooManyNUMANodesFailsAlone(t *testing.T) {
	h := newHarness(t, harnessOptions{},
		kubeletNode(t, "wide", "restricted", numaCPUs(64)), kubeletNode(t, "two", "restricted", numaCPUs(2)),
		gpuNode(nodeSpec{name: "plain", model: a40, memMiB: 100, count: 1}))
	x := gpuPod("x", nil, ctr{name: "m", gpu: 1})
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: x, NodeNames: names("wide", "two", "plain")}))
	if res.NodeNames == nil || strings.Join(*res.NodeNames, ",") != "two,plain" {
		t.Fatalf("fit %v, failed %v %v; want two and plain", res.NodeNames, res.FailedNodes, res.FailedAndUnresolvableNodes)
	}
	if r := res.FailedAndUnresolvableNodes["wide"]; !strings.Contains(r, "GPU inventory is unreadable") || !strings.Contains(r, "64 NUMA nodes") {
		t.Errorf("wide's reason %q, want the bad inventory naming its 64 NUMA nodes", r)
	}
}

// breakNode leaves node's state inconsistent (its kubelet model names a card the state no longer
// has), so that deciding any pod on it panics in the decision core.
func breakNode(h *harness, node string) {
	h.cache.mu.Lock()
	defer h.cache.mu.Unlock()
	s := h.cache.nodes[node].state
	s.Cards = s.Cards[:1]
}

// A panic while deciding one node fails that node only, in the serial path and in Evaluate's
// parallel parts (≥ 512 names, outside gin's recovery: before, the process exited); it is counted
// and its reason says what happened. Bind's decision recovers the same way.
func TestPanicDecidingOneNodeFailsThatNodeOnly(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // Evaluate splits long lists by GOMAXPROCS
	for _, total := range []int{3, 2 * evaluateMinPart * 2} {
		h := newHarness(t, harnessOptions{},
			kubeletNode(t, "bad", "single-numa-node", numaCPUs(2)), gpuNode(nodeSpec{name: "good", model: a40, memMiB: 100, count: 1}))
		breakNode(h, "bad")
		x := gpuPod("x", nil, ctr{name: "m", gpu: 1})
		h.createPods(x)
		list := make([]string, 0, total)
		for i := range total - 2 {
			list = append(list, "unknown-"+itoa(i))
		}
		list = append(list, "bad", "good") // last: in the last part of a parallel Evaluate
		if total > 3 && evaluateParts(len(list)) < 2 {
			t.Fatalf("%d names are decided in %d part", len(list), evaluateParts(len(list)))
		}
		res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: x, NodeNames: &list}))
		if res.NodeNames == nil || len(*res.NodeNames) != 1 || (*res.NodeNames)[0] != "good" {
			t.Fatalf("%d names: fit %v, bad's reason %q; want good", total, res.NodeNames, res.FailedNodes["bad"])
		}
		if r := res.FailedNodes["bad"]; !strings.Contains(r, "failed deciding this node (internal error, logged)") || !strings.Contains(r, "index out of range") {
			t.Errorf("%d names: bad's reason %q", total, r)
		}
		var m dto.Metric
		if err := h.srv.metrics.panics.Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got < 1 {
			t.Errorf("%d names: %v panics counted, want at least 1", total, got)
		}
		// Bind on the broken node fails with the same reason; bind on the good node goes on.
		if err := h.bind("x", "bad"); !strings.Contains(err, "internal error") || !strings.Contains(err, ErrNoFit.Error()) {
			t.Errorf("bind on the broken node: %q", err)
		}
		if err := h.bind("x", "good"); err != "" {
			t.Errorf("bind on the good node: %q", err)
		}
	}
}
