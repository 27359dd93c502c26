package scheduler

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// The extender reads a pod's QoS and whole CPUs, so a node whose kubelet aligns CPUs with cards
// (static CPU manager, single-numa-node) is refused when no NUMA node has both free: without it the
// pod is bound and the kubelet fails it with TopologyAffinityError.
func TestFilterPredictsKubeletCPUAlignment(t *testing.T) {
	// n1: NUMA 0 has cards 0-1 and 8 CPUs of which 6 are held exclusively (2 free); NUMA 1 has
	// cards 2-3 (both held) and 8 free CPUs. A Guaranteed pod of 2 cards + 6 CPUs fits no NUMA node.
	inv := annotations.Inventory{Kubelet: &annotations.KubeletTopology{
		TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "container", CPUManagerPolicy: "static", DeviceTopology: true,
		NUMA: []annotations.NUMACPUs{{ID: 0, CPUs: 8, ExclusiveCPUs: 6}, {ID: 1, CPUs: 8}},
	}}
	for i := 0; i < 4; i++ {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: uuidOf("n1", i), Index: i, Model: a40, MemoryMiB: 100, NUMA: i / 2, Healthy: true, Shares: 1})
	}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{annotations.GPUInventory: enc}}}
	h := newHarness(t, harnessOptions{}, node,
		benchHolder(t, "n1", 0, uuidOf("n1", 2), 100, 100), benchHolder(t, "n1", 1, uuidOf("n1", 3), 100, 100))

	guaranteed := func(cpu string) *corev1.Pod {
		p := gpuPod("g", nil, ctr{name: "m", gpu: 2})
		c := &p.Spec.Containers[0]
		q := resource.MustParse(cpu)
		mem := resource.MustParse("1Gi")
		c.Resources.Limits[corev1.ResourceCPU], c.Resources.Limits[corev1.ResourceMemory] = q, mem
		c.Resources.Requests = c.Resources.Limits.DeepCopy()
		p.Status.QOSClass = corev1.PodQOSGuaranteed
		return p
	}
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: guaranteed("6"), NodeNames: names("n1")}))
	reason := res.FailedNodes["n1"] + res.FailedAndUnresolvableNodes["n1"]
	if !strings.Contains(reason, "single-numa-node") || !strings.Contains(reason, "6 CPUs") {
		t.Fatalf("filter of 2 cards + 6 CPUs: fit %v, reason %q; want the kubelet's refusal", res.NodeNames, reason)
	}
	// 2 CPUs fit beside the 2 cards of NUMA 0.
	res = decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: guaranteed("2"), NodeNames: names("n1")}))
	if res.NodeNames == nil || len(*res.NodeNames) != 1 {
		t.Fatalf("2 cards + 2 CPUs: failed %v %v", res.FailedNodes, res.FailedAndUnresolvableNodes)
	}
}
