package core

import (
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Helpers of this file are prefixed fa so they stay independent of the other tests' builders.

const faMem = 10000 // MiB per card: 1% of a card is 100 MiB

// faNode builds a node named name with one card per entry of used: the share held on it in percent
// (memory and cores alike, one device ID), 100 meaning held whole. Cards offer 10 share slots.
func faNode(name, model string, used ...int) *NodeState {
	inv := annotations.Inventory{V: 1}
	for i := range used {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: fmt.Sprintf("%s-G%d", name, i), Index: i, Model: model,
			MemoryMiB: faMem, Healthy: true, Shares: 10})
	}
	n := NewNodeState(name, inv)
	for i, u := range used {
		if u == 0 {
			continue
		}
		if !n.Hold(Holding{UUID: n.Cards[i].UUID, Slot: 0, MemMiB: faMem * int64(u) / 100, Cores: u}) {
			panic("hold")
		}
	}
	return n
}

// faShare is a container asking for pct percent of one card's memory and compute.
func faShare(pct int) annotations.ContainerRequest {
	return annotations.ContainerRequest{Name: "main", Count: 1, Shared: true, MemoryPercent: pct, Cores: pct}
}

func faWhole(cards int) annotations.ContainerRequest {
	return annotations.ContainerRequest{Name: "main", Count: cards}
}

// faMix builds a mix from (request, weight) pairs, all without selectors.
func faMix(pairs ...any) *TaskMix {
	m := &TaskMix{}
	for i := 0; i < len(pairs); i += 2 {
		r := pairs[i].(annotations.ContainerRequest)
		m.Add(ClassOf(&r, &annotations.Selector{}), pairs[i+1].(float64))
	}
	return m
}

// faPlace runs the decision a scheduler makes: Fit and Score on every node, the best by
// Candidate.Better. It returns the chosen node and the cards of its plan.
func faPlace(t *testing.T, policy annotations.Policy, req annotations.ContainerRequest, mix *TaskMix, nodes ...*NodeState) (string, []int) {
	t.Helper()
	d, err := New(Options{NodePolicy: policy, GPUPolicy: policy})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Prepare(annotations.PodRequest{Containers: []annotations.ContainerRequest{req}}, annotations.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	var best Candidate
	var bestCards []int
	for i, n := range nodes {
		plan, r := p.Fit(n, mix)
		if r != nil {
			continue
		}
		c := Candidate{Name: n.Name, Score: p.Score(n, plan, mix)}
		if bestCards == nil || c.Better(best) {
			best, bestCards = c, nil
			for _, dv := range plan.Devices {
				bestCards = append(bestCards, dv.Card)
			}
			_ = i
		}
	}
	return best.Name, bestCards
}

// faExpectedFrag is F(M) of node n's cards as they are, host resources ignored.
func faExpectedFrag(n *NodeState, mix *TaskMix) float64 {
	var s fragState
	s.prepare(n, mix, 0)
	s.listNode()
	return s.expected(&HostState{}, HostRequest{})
}

func TestExpectedFrag(t *testing.T) {
	half := faShare(50)
	cases := []struct {
		name string
		node *NodeState
		mix  *TaskMix
		want float64 // cards
	}{
		{
			// Class 50%: card 0 (free 0.6) hosts it, card 1 (free 0.3) cannot: F = 0.3.
			name: "share class counts only the cards too full for it",
			node: faNode("n", "T4", 40, 70), mix: faMix(half, 1.0), want: 0.3,
		},
		{
			// Class 2 whole cards: only card 2 is empty, 1 < 2 cards, so all free counts:
			// 0.6 + 0.3 + 1 = 1.9.
			name: "multi-card class that cannot run counts everything free",
			node: faNode("n", "T4", 40, 70, 0), mix: faMix(faWhole(2), 1.0), want: 1.9,
		},
		{
			// Class 1 whole card: card 2 hosts it; cards 0 and 1 (free 0.6 + 0.3) cannot: 0.9.
			// Class 50% (weight 3): card 1 (0.3) cannot: 0.3. F(M) = (1×0.9 + 3×0.3)/4 = 0.45.
			name: "expectation over the mix",
			node: faNode("n", "T4", 40, 70, 0), mix: faMix(faWhole(1), 1.0, half, 3.0), want: 0.45,
		},
		{
			// A card held whole is not free: only card 1 (free 1) counts, and it hosts 50%: F = 0.
			name: "card held whole has nothing free",
			node: faNode("n", "T4", 100, 0), mix: faMix(half, 1.0), want: 0,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := faExpectedFrag(c.node, c.mix); math.Abs(got-c.want) > 1e-9 {
				t.Errorf("F(M) = %v, want %v", got, c.want)
			}
		})
	}
}

func TestExpectedFragModelRule(t *testing.T) {
	// A class that only accepts A100s cannot use a T4 at all: all free counts, 0.6 + 1 = 1.6.
	m := &TaskMix{}
	r := faShare(50)
	m.Add(ClassOf(&r, &annotations.Selector{UseTypes: []string{"a100"}}), 1)
	n := faNode("n", "Tesla T4", 40, 0)
	if got := faExpectedFrag(n, m); math.Abs(got-1.6) > 1e-9 {
		t.Errorf("F(M) = %v, want 1.6", got)
	}
}

// A model-constrained kind of request counts when its classes together reach fragMinShare of the
// mix, though host buckets split it into classes that each weigh less. The mix: half-card shares,
// weight 1000, and one-card T4-only pods asking 1 to 10 CPUs, weight 1 each: each 1/1010 < 0.5 %,
// together 10/1010 ≈ 1 %, counted as one class of weight 10. A half-card share on a (one empty T4)
// leaves no whole T4 card: F(T4) goes from 0 to 0.5, ΔF = +10·0.5/1010. On b (one empty A100),
// which the T4 pods cannot use: F(T4) goes from 1 to 0.5, ΔF = −10·0.5/1010. frag-aware must take
// b; with each class held to the threshold alone only the shares count, ΔF = 0 on both, and the
// tie goes to a (equal use after, the smaller name).
func TestFragAwareCountsAKindSplitByHostBuckets(t *testing.T) {
	mix := &TaskMix{}
	share, t4 := faShare(50), faWhole(1)
	mix.Add(ClassOf(&share, &annotations.Selector{}), 1000)
	for cpu := range 10 {
		c := ClassOf(&t4, &annotations.Selector{UseTypes: []string{"t4"}})
		c.HostCPUMilli = int64(cpu+1) * HostCPUBucket
		mix.Add(c, 1)
	}
	if got, _ := faPlace(t, annotations.PolicyFragAware, share, mix, faNode("a", "Tesla T4", 0), faNode("b", "NVIDIA A100", 0)); got != "b" {
		t.Errorf("frag-aware chose %s, want b (a's only card is the T4 pods')", got)
	}
}

// TestFragAwareChoosesDifferentlyFromBinpack: small clusters where binpack and frag-aware must
// disagree, with the arithmetic of both.
func TestFragAwareChoosesDifferentlyFromBinpack(t *testing.T) {
	cases := []struct {
		name        string
		req         annotations.ContainerRequest
		mix         *TaskMix
		nodes       []*NodeState
		binpackNode string
		binpackCard []int
		fragNode    string
		fragCard    []int
	}{
		{
			// Pod 50%, mix: all 50% requests.
			// a: cards 40% 40%. binpack card 0 (tie, lower index) -> 90%; node 10×(0.9+0.4)/2 = 6.5.
			// b: cards 0% 50%. binpack card 1 -> 100%; node 10×(0+1)/2 = 5. binpack picks a.
			// Fragmentation for 50%: a before: free 0.6 0.6, both host -> F 0; after 0.1 0.6 -> F 0.1,
			// ΔF +0.1, score 10/(1+e^(4×0.1)) = 4.01. b before: free 1 0.5, both host -> F 0; after on
			// card 1: free 1 0 -> F 0, ΔF 0, score 5. frag-aware picks b, card 1.
			name:        "node: binpack's fuller node leaves a sliver no request can use",
			req:         faShare(50),
			mix:         faMix(faShare(50), 1.0),
			nodes:       []*NodeState{faNode("a", "T4", 40, 40), faNode("b", "T4", 0, 50)},
			binpackNode: "a", binpackCard: []int{0},
			fragNode: "b", fragCard: []int{1},
		},
		{
			// Pod 30%, mix: all 50% requests; one node, cards 20% and 50%.
			// binpack: card 0 -> 50%, card 1 -> 80%: card 1.
			// frag-aware: before free 0.8 0.5, both host 50% -> F 0. On card 0: free 0.5 0.5 -> F 0,
			// ΔF 0. On card 1: free 0.8 0.2, card 1 cannot host 50% -> F 0.2, ΔF +0.2: card 0.
			name:        "card: binpack's fuller card ends too small for the usual request",
			req:         faShare(30),
			mix:         faMix(faShare(50), 1.0),
			nodes:       []*NodeState{faNode("a", "T4", 20, 50)},
			binpackNode: "a", binpackCard: []int{1},
			fragNode: "a", fragCard: []int{0},
		},
		{
			// Pod 1 whole card, mix: 2-card requests (weight 1) and 1-card requests (weight 1).
			// a: 3 cards, 1 held whole, 2 empty. binpack: 10×(1+1+0)/3 = 6.67.
			// b: 4 cards, 1 held whole, 3 empty. binpack: 10×2/4 = 5. binpack picks a.
			// frag-aware on a: before (free 0 1 1) 2-card: 2 hosts -> 0; 1-card: 0. After (0 0 1):
			// 2-card: 1 < 2 -> all free 1; 1-card: 0. ΔF = (1+0)/2 = +0.5.
			// On b: after (0 0 1 1): 2-card: 2 hosts -> 0; 1-card 0. ΔF = 0. frag-aware picks b.
			name:        "node: binpack breaks the last pair a two-card request needs",
			req:         faWhole(1),
			mix:         faMix(faWhole(2), 1.0, faWhole(1), 1.0),
			nodes:       []*NodeState{faNode("a", "T4", 100, 0, 0), faNode("b", "T4", 100, 0, 0, 0)},
			binpackNode: "a", binpackCard: []int{1},
			fragNode: "b", fragCard: []int{1},
		},
		{
			// Pod 1 whole card, mix: 1-card requests only.
			// a: cards held whole + empty; b: 2 empty cards. binpack: a 10×2/2 = 10, b 10×1/2 = 5: a.
			// frag-aware: a before (free 0 1): the empty card hosts, F 0; after (0 0): F 0; ΔF 0.
			// b before (1 1) F 0; after (0 1) F 0; ΔF 0. A tie, which goes to the emptier node: b
			// (by name alone it would be a).
			name:        "node: equal fragmentation goes to the emptier node",
			req:         faWhole(1),
			mix:         faMix(faWhole(1), 1.0),
			nodes:       []*NodeState{faNode("a", "T4", 100, 0), faNode("b", "T4", 0, 0)},
			binpackNode: "a", binpackCard: []int{1},
			fragNode: "b", fragCard: []int{0},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			node, cards := faPlace(t, annotations.PolicyBinpack, c.req, c.mix, c.nodes...)
			if d := cmp.Diff([]any{c.binpackNode, c.binpackCard}, []any{node, cards}); d != "" {
				t.Errorf("binpack (-want +got):\n%s", d)
			}
			node, cards = faPlace(t, annotations.PolicyFragAware, c.req, c.mix, c.nodes...)
			if d := cmp.Diff([]any{c.fragNode, c.fragCard}, []any{node, cards}); d != "" {
				t.Errorf("frag-aware (-want +got):\n%s", d)
			}
		})
	}
}

func TestFragAwareScoreValues(t *testing.T) {
	// First case of TestFragAwareChoosesDifferentlyFromBinpack, node a: ΔF = +0.1.
	d, _ := New(Options{NodePolicy: annotations.PolicyFragAware, GPUPolicy: annotations.PolicyFragAware})
	p, _ := d.Prepare(annotations.PodRequest{Containers: []annotations.ContainerRequest{faShare(50)}}, annotations.Selector{})
	n := faNode("a", "T4", 40, 40)
	mix := faMix(faShare(50), 1.0)
	plan, r := p.Fit(n, mix)
	if r != nil {
		t.Fatal(r.String())
	}
	// 10/(1+e^(4×0.1)) = 4.0131; the tie-break takes 1e-9 × 0.65 off.
	if got, want := p.Score(n, plan, mix), 10/(1+math.Exp(0.4)); math.Abs(got-want) > 1e-6 {
		t.Errorf("score %v, want %v", got, want)
	}
}

func TestFragAwareWithoutMixIsBinpack(t *testing.T) {
	// Nothing seen yet: frag-aware decides as binpack does (first case above: node a, card 0).
	nodes := []*NodeState{faNode("a", "T4", 40, 40), faNode("b", "T4", 0, 50)}
	for _, mix := range []*TaskMix{nil, {}} {
		node, cards := faPlace(t, annotations.PolicyFragAware, faShare(50), mix, nodes...)
		if node != "a" || len(cards) != 1 || cards[0] != 0 {
			t.Errorf("mix %v: got %s %v, want a [0]", mix, node, cards)
		}
	}
}

func TestFragAwareIsAvailable(t *testing.T) {
	if _, err := New(Options{NodePolicy: annotations.PolicyFragAware, GPUPolicy: annotations.PolicyFragAware}); err != nil {
		t.Errorf("New(frag-aware) = %v", err)
	}
	d, err := New(Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack})
	if err != nil {
		t.Fatal(err)
	}
	sel, err := annotations.ParseSelector(map[string]string{annotations.NodePolicy: "frag-aware", annotations.GPUPolicy: "frag-aware"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Prepare(annotations.PodRequest{Containers: []annotations.ContainerRequest{faWhole(1)}}, sel)
	if err != nil || p.NodePolicy != annotations.PolicyFragAware || p.GPUPolicy != annotations.PolicyFragAware {
		t.Errorf("Prepare with frag-aware annotations = %+v, %v", p, err)
	}
}

// BenchmarkFragAware is S1's share for this policy: FitWith and ScoreWith (one Scratch, as the
// extender's Evaluate) of a one-card share on 500
// nodes of 8 cards, half used, against a mix of 24 classes (as many as the default trace has).
func BenchmarkFragAware(b *testing.B) {
	for _, policy := range []annotations.Policy{annotations.PolicyBinpack, annotations.PolicyFragAware} {
		b.Run(string(policy), func(b *testing.B) {
			d, _ := New(Options{NodePolicy: policy, GPUPolicy: policy})
			p, _ := d.Prepare(annotations.PodRequest{Containers: []annotations.ContainerRequest{faShare(30)}}, annotations.Selector{})
			mix := &TaskMix{}
			for i := range 20 {
				r := faShare(5 + 4*i)
				mix.Add(ClassOf(&r, &annotations.Selector{}), float64(1+i))
			}
			for _, c := range []int{1, 2, 4, 8} {
				r := faWhole(c)
				mix.Add(ClassOf(&r, &annotations.Selector{}), 10)
			}
			nodes := make([]*NodeState, 500)
			for i := range nodes {
				nodes[i] = faNode(fmt.Sprint("n", i), "G2", 100, 100, 100, 100, (i*7)%60, (i*13)%50, 0, 0)
			}
			var s Scratch
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for _, n := range nodes {
					if plan, r := p.FitWith(n, mix, &s); r == nil {
						p.ScoreWith(n, plan, mix, &s)
					}
				}
			}
		})
	}
}
