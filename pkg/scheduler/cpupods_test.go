package scheduler

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// routedPod is a CPU-only pod as the webhook routes it: Cardinal's scheduler, and the marker
// cardinal.io/host: 0 on its container.
func routedPod(name, cpu, mem string) *corev1.Pod {
	p := cpuPod(name, "", cpu, mem)
	p.Spec.SchedulerName = "cardinal-scheduler"
	p.Status.Phase = corev1.PodPending
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{annotations.ResourceHostRoute: resource.MustParse("0")}
	return p
}

// A routed CPU-only pod is decided by the extender, not passed through: nodes whose CPU or memory
// cannot hold it are refused with the host's arithmetic, and prioritize ranks the others by the
// policy. A CPU-only pod without the marker is still passed through untouched.
func TestFilterDecidesRoutedCPUOnlyPods(t *testing.T) {
	node := func(name, cpu, mem string, cards int) *corev1.Node {
		return withAlloc(gpuNode(nodeSpec{name: name, model: a40, memMiB: 100, count: cards}), cpu, mem)
	}
	h := newHarness(t, harnessOptions{}, node("big", "16", "64Gi", 2), node("busy", "16", "64Gi", 2), node("tiny", "4", "2Gi", 2),
		cpuPod("load", "busy", "11", "1Gi"))
	args := extenderv1.ExtenderArgs{Pod: routedPod("web", "6", "4Gi"), NodeNames: names("big", "busy", "tiny")}
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", args))
	if res.Error != "" {
		t.Fatalf("filter error: %s", res.Error)
	}
	if diff := cmp.Diff([]string{"big"}, *res.NodeNames); diff != "" {
		t.Errorf("fit (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"busy": "needs 6000m CPU, node has 5000m free"}, map[string]string(res.FailedNodes)); diff != "" {
		t.Errorf("failed (-want +got):\n%s", diff)
	}
	want := map[string]string{"tiny": "needs 6000m CPU, node has 4000m free; needs 4096 MiB memory, node has 2048 MiB free"}
	if diff := cmp.Diff(want, map[string]string(res.FailedAndUnresolvableNodes)); diff != "" {
		t.Errorf("unresolvable (-want +got):\n%s", diff)
	}
	prio := decodeInto[extenderv1.HostPriorityList](t, h.post("/prioritize", extenderv1.ExtenderArgs{Pod: args.Pod, NodeNames: names("big")}))
	if len(prio) != 1 || prio[0].Score != 10 {
		t.Errorf("prioritize %+v, want big ranked 10", prio)
	}

	plain := cpuPod("plain", "", "6", "4Gi")
	plain.Spec.SchedulerName = "cardinal-scheduler"
	res = decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: plain, NodeNames: names("big", "busy", "tiny")}))
	if diff := cmp.Diff([]string{"big", "busy", "tiny"}, *res.NodeNames); diff != "" || len(res.FailedNodes)+len(res.FailedAndUnresolvableNodes) > 0 {
		t.Errorf("a CPU-only pod without the marker: want every node passed, got %+v (%s)", res, diff)
	}
}

// Bind of a routed CPU-only pod posts the Binding with no assignment: no card to record, nothing the
// device plugin would read.
func TestBindRoutedCPUOnlyPodWritesNoAssignment(t *testing.T) {
	pod := routedPod("web", "1", "1Gi")
	h := newHarness(t, harnessOptions{informer: true}, withAlloc(gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 1}), "8", "8Gi"), pod)
	if msg := h.bind("web", "n1"); msg != "" {
		t.Fatal(msg)
	}
	got, err := h.client.CoreV1().Pods("default").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "n1" || len(got.Annotations) != 0 {
		t.Errorf("bound to %q with annotations %v; want n1 and none", got.Spec.NodeName, got.Annotations)
	}
	if free := h.cache.NodeUsage("n1").Cards[0].FreeSlots(); free != 1 {
		t.Errorf("card slots free after the bind: %d, want 1", free)
	}
}

// PreparePod (kubectl cardinal explain) reads a routed CPU-only pod as filter does.
func TestPreparePodRoutedCPUOnly(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	p, err := PreparePod(h.srv.decider, annotations.DefaultResourceNames(), routedPod("web", "2", "1Gi"))
	if err != nil || p == nil {
		t.Fatalf("PreparePod: %v, %v; want a pod", p, err)
	}
	if !p.Request.Empty() || p.Host.CPUMilli != 2000 || p.Host.MemMiB != 1024 {
		t.Errorf("prepared %+v host %+v; want no GPU containers, 2000m and 1024 MiB", p.Request, p.Host)
	}
	if p, err := PreparePod(h.srv.decider, annotations.DefaultResourceNames(), cpuPod("plain", "", "2", "1Gi")); p != nil || err != nil {
		t.Errorf("a CPU-only pod without the marker: %v, %v; want nil, nil", p, err)
	}
}

// A node without GPUs (no inventory) holds a routed CPU-only pod when its CPU and memory do, with
// what pods there already hold counted; it still refuses every GPU pod with the inventory reason.
func TestRoutedCPUOnlyPodsFitNodesWithoutGPUs(t *testing.T) {
	h := newHarness(t, harnessOptions{}, withAlloc(plainNode("cpu-1"), "8", "16Gi"), withAlloc(plainNode("cpu-2"), "8", "16Gi"),
		cpuPod("load", "cpu-2", "5", "1Gi"))
	args := extenderv1.ExtenderArgs{Pod: routedPod("web", "4", "2Gi"), NodeNames: names("cpu-1", "cpu-2")}
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", args))
	if diff := cmp.Diff([]string{"cpu-1"}, *res.NodeNames); diff != "" {
		t.Errorf("fit (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"cpu-2": "needs 4000m CPU, node has 3000m free"}, map[string]string(res.FailedNodes)); diff != "" {
		t.Errorf("failed (-want +got):\n%s", diff)
	}
	// The load leaves: cpu-2 holds the pod again.
	h.cache.DeletePod("uid-load")
	res = decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", args))
	if diff := cmp.Diff([]string{"cpu-1", "cpu-2"}, *res.NodeNames); diff != "" {
		t.Errorf("fit after the load left (-want +got):\n%s", diff)
	}
	gpu := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{
		Pod: gpuPod("train", nil, ctr{name: "m", gpu: 1}), NodeNames: names("cpu-1")}))
	if len(gpu.FailedAndUnresolvableNodes) != 1 || gpu.NodeNames != nil && len(*gpu.NodeNames) > 0 {
		t.Errorf("a GPU pod on a node without GPUs: %+v, want refused", gpu)
	}
}

// Issue 33 item 7: a routed CPU-only pod needs no card, so a node whose inventory Cardinal cannot
// read (more NUMA nodes than the TopologyManager model takes, a newer version) does not refuse it:
// it is decided on the node's CPU and memory, and scores 0 (what it would strand there is unknown),
// below a node without GPUs. Before the fix the pod was refused with the inventory's
// reason, where without the routing marker it fits. GPU pods are still refused there.
func TestRoutedCPUOnlyPodFitsNodeWithUnreadableInventory(t *testing.T) {
	twelveNUMA := annotations.Inventory{Kubelet: &annotations.KubeletTopology{TopologyManagerPolicy: annotations.TopologyPolicySingleNUMANode,
		TopologyManagerScope: annotations.TopologyScopeContainer, CPUManagerPolicy: annotations.CPUManagerPolicyStatic, MaxAllowableNUMANodes: 12}}
	for i := range 12 {
		twelveNUMA.Kubelet.NUMA = append(twelveNUMA.Kubelet.NUMA, annotations.NUMACPUs{ID: i, CPUs: 8})
	}
	enc, err := annotations.EncodeInventory(twelveNUMA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := annotations.DecodeInventory(enc); err == nil {
		t.Fatal("the decoder reads a 12-NUMA TopologyManager inventory: pick another unreadable one")
	}
	unreadable := func(name, inv string) *corev1.Node {
		n := withAlloc(plainNode(name), "16", "64Gi")
		n.Annotations = map[string]string{annotations.GPUInventory: inv}
		return n
	}
	known := withAlloc(gpuNode(nodeSpec{name: "known", model: a40, memMiB: 100, count: 2}), "16", "64Gi")
	h := newHarness(t, harnessOptions{},
		unreadable("numa12", enc), unreadable("v2", `{"v":2,"gpus":[]}`), known, withAlloc(plainNode("cpu"), "16", "64Gi"),
		cpuPod("load", "v2", "13", "1Gi"))
	args := extenderv1.ExtenderArgs{Pod: routedPod("web", "4", "2Gi"), NodeNames: names("numa12", "v2", "known")}
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", args))
	// numa12: 16 CPUs free >= 4; v2: 16 - 13 = 3 < 4, refused for CPU like any node.
	if diff := cmp.Diff([]string{"numa12", "known"}, *res.NodeNames); diff != "" {
		t.Errorf("fit (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"v2": "needs 4000m CPU, node has 3000m free"}, map[string]string(res.FailedNodes)); diff != "" {
		t.Errorf("failed (-want +got):\n%s", diff)
	}
	// A node without GPUs strands nothing and ranks first; numa12's cards are unknown: it must not
	// pass for a node without cards, and scores 0.
	prio := decodeInto[extenderv1.HostPriorityList](t, h.post("/prioritize", extenderv1.ExtenderArgs{Pod: args.Pod, NodeNames: names("numa12", "cpu")}))
	scores := map[string]int64{}
	for _, hp := range prio {
		scores[hp.Host] = hp.Score
	}
	if scores["numa12"] >= scores["cpu"] {
		t.Errorf("prioritize %v: the node with cards Cardinal cannot read must rank below the node without GPUs", scores)
	}
	gpu := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{
		Pod: gpuPod("train", nil, ctr{name: "m", gpu: 1}), NodeNames: names("numa12")}))
	if len(gpu.FailedAndUnresolvableNodes) != 1 || gpu.NodeNames != nil && len(*gpu.NodeNames) > 0 {
		t.Errorf("a GPU pod on a node with an unreadable inventory: %+v, want refused", gpu)
	}
}
