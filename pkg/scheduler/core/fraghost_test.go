package core

import (
	"math"
	"testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// hostMix is a mix of one class: req's container, its pod asking host of the node.
func hostMix(req annotations.ContainerRequest, host HostRequest) *TaskMix {
	m := &TaskMix{}
	m.AddPodHost(&annotations.PodRequest{Containers: []annotations.ContainerRequest{req}}, &annotations.Selector{}, host)
	return m
}

// F(m) counts the free cards that m could use card by card but never reaches, for want of CPU: as
// many of m's pods as the free CPU holds (fractions included), each taking its cards.
func TestExpectedFragCountsCardsTheHostCannotFeed(t *testing.T) {
	oneCard := hostMix(faWhole(1), HostRequest{CPUMilli: 10000})
	cases := []struct {
		name string
		node *NodeState
		cpu  int64 // the node's free CPU, millicores
		mix  *TaskMix
		want float64 // cards
	}{
		// 5 free cards, CPU for 30/10 = 3 pods of one card: 5 − 3 = 2 cards out of reach.
		{name: "CPU for fewer pods than free cards", node: faNode("n", "A", 0, 0, 0, 0, 0), cpu: 30000, mix: oneCard, want: 2},
		// CPU for 25/10 = 2.5 pods: 5 − 2.5 = 2.5 (the class stands for a spread of requests).
		{name: "a fraction of a pod counts", node: faNode("n", "A", 0, 0, 0, 0, 0), cpu: 25000, mix: oneCard, want: 2.5},
		// CPU for 100/10 = 10 pods ≥ 5 cards: nothing out of reach.
		{name: "CPU to spare", node: faNode("n", "A", 0, 0, 0, 0, 0), cpu: 100000, mix: oneCard, want: 0},
		// CPU for 0.8 of a pod: not one pod runs, every free card counts (FGD's rule).
		{name: "not one pod", node: faNode("n", "A", 0, 0, 0, 0, 0), cpu: 8000, mix: oneCard, want: 5},
		// Card 0 (free 0.6) cannot host a whole card; of cards 1 and 2, CPU feeds one: 0.6 + 1.
		{name: "cards too full and CPU both", node: faNode("n", "A", 40, 0, 0), cpu: 10000, mix: oneCard, want: 1.6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.node.SetHost(c.cpu, 0)
			var s fragState
			s.prepare(c.node, c.mix, 0)
			s.listNode()
			if got := s.expected(&c.node.Host, HostRequest{}); math.Abs(got-c.want) > 1e-9 {
				t.Errorf("F(M) = %v, want %v", got, c.want)
			}
		})
	}
}

// A one-card pod asking 30 CPUs, in a mix of one-card pods asking 10. On a (3 empty cards, 40 CPUs)
// it leaves 2 cards and 10 CPUs: CPU for one more pod, one card out of reach, ΔF = +1. On b (2 of 4
// cards held whole, 100 CPUs) it leaves 1 card and 70 CPUs, ΔF = 0: frag-aware must take b. FGD's
// rule (a node counts as fragmented for m only when not one pod of m fits) sees ΔF = 0 on both,
// and the tie-break (card and CPU use after: 0.75 on both) gives a, the smaller name.
func TestFragAwareKeepsCPUForTheFreeCards(t *testing.T) {
	mix := hostMix(faWhole(1), HostRequest{CPUMilli: 10000})
	a, b := faNode("a", "A", 0, 0, 0), faNode("b", "A", 100, 100, 0, 0)
	a.SetHost(40000, 0)
	b.SetHost(100000, 0)
	p := hostPod(t, annotations.PolicyFragAware, faWhole(1), HostRequest{CPUMilli: 30000})
	if best := bestNode(t, p, mix, a, b); best.Name != "b" {
		t.Errorf("frag-aware chose %s, want b (a keeps a card it has no CPU for)", best.Name)
	}
}

// A pod sharing a quarter of a card opens the rest of that card to pods like it, each with its CPU
// (8 CPUs here). On p (16 CPUs free of 32) the pod leaves CPU for one more such pod, a quarter of
// the three quarters left: half a card out of reach (shortfall); on q (100 CPUs free of 1000) CPU
// for 11. Both still fit one more pod, so ΔF's host rule sees the same on both, and the tie-break
// (the emptier node: p's CPU is 75 % used after the pod, q's 91 %) would take p. frag-aware must
// take q.
func TestFragAwareSharedPodCountsTheCPUTheRestOfItsCardNeeds(t *testing.T) {
	mix := hostMix(faShare(25), HostRequest{CPUMilli: 8000})
	pn, qn := faNode("p", "A", 0), faNode("q", "A", 0)
	pn.SetHost(32000, 0)
	pn.HoldHost(HostRequest{CPUMilli: 16000})
	qn.SetHost(1000000, 0)
	qn.HoldHost(HostRequest{CPUMilli: 900000})
	pod := hostPod(t, annotations.PolicyFragAware, faShare(25), HostRequest{CPUMilli: 8000})
	if best := bestNode(t, pod, mix, pn, qn); best.Name != "q" {
		t.Errorf("chose %s, want q (on p the rest of the card would lack CPU)", best.Name)
	}
}
