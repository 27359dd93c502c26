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

// Issue 21 item 4: an app container whose limits name the card resource with 0 still gets the
// kubelet's device hints, which must hold the card its init container hands on. n1: NUMA 0 has a
// held card and 8 free CPUs; NUMA 1 a free card and 2 free CPUs (6 exclusive). The init container
// gets NUMA 1's card; the app container (0 cards, 4 CPUs) can have its CPUs only on NUMA 0, so
// single-numa-node refuses the pod. Before the fix the extender admitted it (0 read as "no
// preference") and the kubelet failed it with TopologyAffinityError.
func TestFilterFollowsKubeletForZeroCardLimit(t *testing.T) {
	inv := annotations.Inventory{Kubelet: &annotations.KubeletTopology{
		TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "container", CPUManagerPolicy: "static", DeviceTopology: true,
		NUMA: []annotations.NUMACPUs{{ID: 0, CPUs: 8}, {ID: 1, CPUs: 8, ExclusiveCPUs: 6}},
	}}
	for i := range 2 {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: uuidOf("n1", i), Index: i, Model: a40, MemoryMiB: 100, NUMA: i, Healthy: true, Shares: 1})
	}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{annotations.GPUInventory: enc}}}
	h := newHarness(t, harnessOptions{}, node, benchHolder(t, "n1", 0, uuidOf("n1", 0), 100, 100))

	pod := func(listZero bool) *corev1.Pod {
		p := gpuPod("z", nil, ctr{name: "init", gpu: 1, init: true}, ctr{name: "app"})
		set := func(c *corev1.Container, cpu string) {
			c.Resources.Limits[corev1.ResourceCPU], c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse(cpu), resource.MustParse("1Gi")
			c.Resources.Requests = c.Resources.Limits.DeepCopy()
		}
		set(&p.Spec.InitContainers[0], "500m") // not a whole CPU: no exclusive CPUs
		app := &p.Spec.Containers[0]
		if listZero {
			app.Resources.Limits[annotations.DefaultResourceNames().GPU] = resource.MustParse("0")
		}
		set(app, "4")
		p.Status.QOSClass = corev1.PodQOSGuaranteed
		return p
	}
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod(true), NodeNames: names("n1")}))
	reason := res.FailedNodes["n1"] + res.FailedAndUnresolvableNodes["n1"]
	if !strings.Contains(reason, `container "app"`) || !strings.Contains(reason, "lists the card resource with 0") {
		t.Fatalf("app lists nvidia.com/gpu: 0: fit %v, reason %q; want the kubelet's refusal", res.NodeNames, reason)
	}
	// Without the resource in its limits the app container has no device preference: it fits.
	res = decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod(false), NodeNames: names("n1")}))
	if res.NodeNames == nil || len(*res.NodeNames) != 1 {
		t.Fatalf("app without the resource: failed %v %v", res.FailedNodes, res.FailedAndUnresolvableNodes)
	}
}
