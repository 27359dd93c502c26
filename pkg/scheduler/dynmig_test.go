package scheduler

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// dynNodeObj is a node of a dynamic MIG pool: two empty A100-80GB cards allowing 1g.10gb, 2g.20gb,
// 3g.40gb, 4g.40gb and 7g.80gb at their legal starts.
func dynNodeObj(name string) *corev1.Node {
	card := func(k int) annotations.GPU {
		return annotations.GPU{UUID: "GPU-" + name + "-d" + itoa(k), Index: k, Model: a100, MemoryMiB: 81920, Shares: 1,
			MIG: &annotations.MIG{Mode: annotations.MIGEnabled, DynamicV: annotations.MIGDynamicVersion, Dynamic: []annotations.MIGDynamicProfile{
				{Profile: "1g.10gb", Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
				{Profile: "2g.20gb", Size: 2, Starts: []int{0, 2, 4}},
				{Profile: "3g.40gb", Size: 4, Starts: []int{0, 4}},
				{Profile: "4g.40gb", Size: 4, Starts: []int{0}},
				{Profile: "7g.80gb", Size: 8, Starts: []int{0}},
			}}}
	}
	enc, err := annotations.EncodeInventory(annotations.Inventory{GPUs: []annotations.GPU{card(0), card(1)}})
	if err != nil {
		panic(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotations.GPUInventory: enc}}}
}

// A burst of mixed profiles bound one after the other (each in flight, none allocated yet) gets
// placements that never overlap on a card, each named by parent, profile and placement; once the
// cards are full the next pod is refused with a reason that names the profile; deleting a pod
// frees its placement.
func TestDynamicMIGBurstNeverOverlaps(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true}, dynNodeObj("dyn"))
	// 2 cards × 8 slices: 4g+3g on one card, 2g+2g+2g+1g on the other. The 3g goes beside the
	// 4g (equal loss, the fuller card), which keeps the other card whole for the 2g.
	burst := []string{"4g.40gb", "3g.40gb", "2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"}
	used := map[string]uint64{}
	for i, profile := range burst {
		p := migPod("p"+itoa(i), nil, profile, 1)
		h.createPods(p)
		if err := h.bind(p.Name, "dyn"); err != "" {
			t.Fatalf("pod %d (%s): %s", i, profile, err)
		}
		a, _ := h.assignmentOf("default", p.Name)
		d := a.Containers[0].Devices[0]
		if d.Placement == nil || d.Profile != profile || d.ID != annotations.MIGPlacementID(d.Parent, profile, d.Placement.Start) {
			t.Fatalf("pod %d: assignment %+v does not name parent, profile and placement", i, d)
		}
		mask := (uint64(1)<<uint(d.Placement.Size) - 1) << uint(d.Placement.Start)
		if used[d.Parent]&mask != 0 {
			t.Fatalf("pod %d: %s at %d:%d overlaps %b on %s", i, profile, d.Placement.Start, d.Placement.Size, used[d.Parent], d.Parent)
		}
		used[d.Parent] |= mask
		t.Logf("%s -> %s", profile, d.ID)
	}
	// The cards are full (slice 7 of the 2g card has no 1g start).
	full := migPod("full", nil, "3g.40gb", 1)
	h.createPods(full)
	if err := h.bind(full.Name, "dyn"); !strings.Contains(err, "no free 3g.40gb instance") {
		t.Fatalf("a 3g.40gb on full cards: %q, want no free 3g.40gb instance", err)
	}
	h.cache.DeletePod("uid-p0") // the 4g.40gb
	if err := h.bind(full.Name, "dyn"); err != "" {
		t.Fatalf("after the 4g.40gb's pod is gone: %s", err)
	}
}
