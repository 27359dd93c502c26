package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// linkedGPUNode is gpuNode with links between its cards: link(a, b) for every pair a < b (nil:
// none published).
func linkedGPUNode(s nodeSpec, link func(a, b int) annotations.Link) *corev1.Node {
	inv := annotations.Inventory{}
	for i := 0; i < s.count; i++ {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: uuidOf(s.name, i), Index: i, Model: s.model, MemoryMiB: s.memMiB, Healthy: true, Shares: 1})
		for j := i + 1; link != nil && j < s.count; j++ {
			l := link(i, j)
			l.A, l.B = i, j
			inv.Links = append(inv.Links, l)
		}
	}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		panic(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.name, Annotations: map[string]string{annotations.GPUInventory: enc}}}
}

// Nodes whose cards and usage are equal but whose links differ are not in the same state: the
// cache's node keys must tell them apart, or one node's verdict and score would stand for the
// other's.
func TestCacheKeysTellLinksApart(t *testing.T) {
	pairs := func(a, b int) annotations.Link {
		l := annotations.Link{PCIe: annotations.PCIeHostBridge}
		if a/2 == b/2 {
			l.NVLinks = 4
		}
		return l
	}
	pcie := func(a, b int) annotations.Link { return annotations.Link{PCIe: annotations.PCIeHostBridge} }
	spec := func(name string) nodeSpec { return nodeSpec{name: name, model: a40, memMiB: 10000, count: 4} }
	h := newHarness(t, harnessOptions{})
	h.cache.UpsertNode(linkedGPUNode(spec("a-pairs"), pairs))
	h.cache.UpsertNode(linkedGPUNode(spec("b-none"), nil))
	h.cache.UpsertNode(linkedGPUNode(spec("c-pcie"), pcie))
	h.cache.UpsertNode(linkedGPUNode(spec("d-pairs"), pairs))
	names := []string{"a-pairs", "b-none", "c-pcie", "d-pairs"}

	required := gpuPod("req", map[string]string{annotations.GPULink: annotations.LinkNVLink}, ctr{name: "m", gpu: 2})
	p, err := h.srv.prepare(required)
	if err != nil {
		t.Fatal(err)
	}
	got := h.cache.Evaluate(required.UID, p, names, nil)
	want := []string{"", "needs 2 NVLink-connected cards; node publishes no NVLink topology",
		"needs 2 NVLink-connected cards; node has no NVLink between its cards", ""}
	for i := range names {
		if reasonText(got[i].Reason) != want[i] {
			t.Errorf("required NVLink on %s: %q, want %q", names[i], reasonText(got[i].Reason), want[i])
		}
	}

	two := gpuPod("two", nil, ctr{name: "m", gpu: 2})
	p, err = h.srv.prepare(two)
	if err != nil {
		t.Fatal(err)
	}
	got = h.cache.Evaluate(two.UID, p, names, nil)
	for i := range got {
		if got[i].Reason != nil {
			t.Fatalf("%s: %s", names[i], got[i].Reason)
		}
	}
	if got[0].Score != got[3].Score || got[0].Score <= got[2].Score {
		t.Errorf("scores %v, %v, %v, %v: want the pairs nodes equal and above the PCIe node", got[0].Score, got[1].Score, got[2].Score, got[3].Score)
	}

	// A node whose inventory gains links (the plugin published them later) is a new state.
	h.cache.UpsertNode(linkedGPUNode(spec("b-none"), pairs))
	p, err = h.srv.prepare(required)
	if err != nil {
		t.Fatal(err)
	}
	if v := h.cache.Evaluate(required.UID, p, []string{"b-none"}, nil); v[0].Reason != nil {
		t.Errorf("required NVLink after the node published its links: %s", v[0].Reason)
	}
}
