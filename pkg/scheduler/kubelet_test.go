package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// kubeletGPUNode is a node of 2 A100s, one per NUMA node, whose kubelet runs single-numa-node with
// the static CPU manager; free[i] CPUs of NUMA node i's 16 are free.
func kubeletGPUNode(name string, free0, free1 int) *corev1.Node {
	inv := annotations.Inventory{Kubelet: &annotations.KubeletTopology{
		TopologyManagerPolicy: annotations.TopologyPolicySingleNUMANode, TopologyManagerScope: annotations.TopologyScopeContainer,
		CPUManagerPolicy: annotations.CPUManagerPolicyStatic, DeviceTopology: true,
		NUMA: []annotations.NUMACPUs{{ID: 0, CPUs: 16, ExclusiveCPUs: 16 - free0}, {ID: 1, CPUs: 16, ExclusiveCPUs: 16 - free1}},
	}}
	for i := 0; i < 2; i++ {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: uuidOf(name, i), Index: i, Model: a100, MemoryMiB: 81920, NUMA: i, Healthy: true, Shares: 1})
	}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		panic(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotations.GPUInventory: enc}}}
}

// sixCPUs prepares a Guaranteed pod of 1 card and 6 CPUs.
func sixCPUs(t *testing.T) *core.Pod {
	t.Helper()
	d, err := core.New(core.Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Prepare(annotations.PodRequest{Containers: []annotations.ContainerRequest{{Name: "m", Count: 1}},
		Guaranteed: true, CPUs: []annotations.ContainerCPU{{Name: "m", Milli: 6000}}}, annotations.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCacheFollowsKubeletCPUs(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	p := sixCPUs(t)
	h.cache.UpsertNode(kubeletGPUNode("a", 16, 16))
	if v := h.cache.Evaluate("uid-x", p, []string{"a"}, nil); v[0].Reason != nil {
		t.Fatalf("16 free CPUs per NUMA node: %v", v[0].Reason)
	}
	// The same cards; the plugin now reports 2 and 4 CPUs free: no NUMA node has 6.
	h.cache.UpsertNode(kubeletGPUNode("a", 2, 4))
	v := h.cache.Evaluate("uid-x", p, []string{"a"}, nil)
	if v[0].Reason == nil || v[0].Reason.Kind != core.ReasonKubeletRefuses {
		t.Fatalf("after the CPUs were taken: %v, want the kubelet's refusal", v[0].Reason)
	}
}

func TestCacheSharesNoVerdictAcrossKubeletTopologies(t *testing.T) {
	// Nodes a and b have the same cards and usage; only b's CPUs are taken. Their verdicts differ.
	h := newHarness(t, harnessOptions{})
	h.cache.UpsertNode(kubeletGPUNode("a", 16, 16))
	h.cache.UpsertNode(kubeletGPUNode("b", 2, 4))
	v := h.cache.Evaluate("uid-x", sixCPUs(t), []string{"a", "b"}, nil)
	if v[0].Reason != nil {
		t.Errorf("a: %v", v[0].Reason)
	}
	if v[1].Reason == nil || v[1].Reason.Kind != core.ReasonKubeletRefuses {
		t.Errorf("b: %v, want the kubelet's refusal", v[1].Reason)
	}
	want := "container \"m\": the kubelet's single-numa-node policy needs 1 card and 6 CPUs on one NUMA node; NUMA 0 has 1 free card and 2 free CPUs, NUMA 1 has 1 free card and 4 free CPUs"
	if v[1].Reason != nil && v[1].Reason.String() != want {
		t.Errorf("b: %q, want %q", v[1].Reason, want)
	}
}
