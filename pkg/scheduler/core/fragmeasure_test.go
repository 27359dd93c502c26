package core

import (
	"math"
	"testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Fragmentation reports the node's F(M) and free capacity, the numbers the policy's node score
// compares: a node with one card 70% used and one empty, under a mix of half-card shares and
// whole cards (equal weights).
func TestFragmentationOfNode(t *testing.T) {
	n := faNode("n", "A100", 70, 0)
	mix := faMix(faShare(50), 1.0, faWhole(1), 1.0)
	frag, free := mix.Fragmentation(n)
	// Free: 0.3 + 1 cards. Shares of 50%: the 70% card cannot host one, so its 0.3 is fragmented.
	// Whole cards: the 70% card cannot host one either (0.3). F(M) = (0.3 + 0.3) / 2 = 0.3.
	if math.Abs(free-1.3) > 1e-9 || math.Abs(frag-0.3) > 1e-9 {
		t.Errorf("Fragmentation = %v, %v; want 0.3 of 1.3 cards", frag, free)
	}
	// The node score's own measure agrees: placing nothing changes nothing, and an empty mix
	// fragments nothing.
	if f, fr := (&TaskMix{}).Fragmentation(n); f != 0 || math.Abs(fr-1.3) > 1e-9 {
		t.Errorf("empty mix: Fragmentation = %v, %v; want 0, 1.3", f, fr)
	}
	var nilMix *TaskMix
	if f, _ := nilMix.Fragmentation(n); f != 0 {
		t.Errorf("nil mix: fragmented %v, want 0", f)
	}
}

// FreeCapacity counts nothing free on a card held whole or unhealthy.
func TestFreeCapacity(t *testing.T) {
	n := faNode("n", "A100", 100, 25, 0)
	inv := annotations.Inventory{V: 1, GPUs: []annotations.GPU{{UUID: "sick", Model: "A100", MemoryMiB: faMem, Healthy: false, Shares: 10}}}
	sick := NewNodeState("s", inv)
	for i, want := range []float64{0, 0.75, 1} {
		if got := n.Cards[i].FreeCapacity(); math.Abs(got-want) > 1e-9 {
			t.Errorf("card %d: FreeCapacity %v, want %v", i, got, want)
		}
	}
	if got := sick.Cards[0].FreeCapacity(); got != 0 {
		t.Errorf("unhealthy card: FreeCapacity %v, want 0", got)
	}
}
