package core

import (
	"math"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// The fragmentation-aware policy (annotations.PolicyFragAware), after the measure of Weng et al.,
// "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent"
// (USENIX ATC 2023), rebuilt on Cardinal's card model.
//
// Fragmentation of a node for one kind of request m, F(m), is the free GPU capacity of the node that
// m cannot use, in cards:
//   - when fewer of the node's cards can host one device of m than m needs (m.Cards), m cannot run
//     there at all and every free card fraction counts: F(m) = Σ free;
//   - the same when the node's known CPU or memory (NodeState.Host) cannot hold m's pod
//     (TaskClass.HostCPUMilli, HostMemMiB): m cannot run there, F(m) = Σ free;
//   - otherwise only the cards that cannot host a device of m count: F(m) = Σ free over those;
//   - and, for a whole-card m, at least the free cards beyond what the node's CPU and memory can
//     feed: F(m) ≥ Σ free − (pods of m the free CPU and memory hold) × m.Cards (hostCapacity).
//
// A card hosts a device of m when the card's model passes m's use-gputype, nobody holds it whole,
// and: for a whole-card m, nothing is held on it; for a shared m, it has a free device ID and the
// memory and compute m asks for. A card's free capacity is 1 − Card.Utilization (the largest of its
// memory, compute and device-ID use; 0 when held whole); unhealthy cards count for nothing.
//
// The node's expected fragmentation is F(M) = Σ_m w_m F(m) / Σ_m w_m over the TaskMix: the requests
// the cluster has seen (the extender's cache, the replay's arrivals), not a constant.
//
// Classes below fragMinShare of the mix are left out, as FGD keeps only "typical" tasks.
//
// A placement is scored by how much it raises F(M) (ΔF, in cards): the node score is
// MaxScore / (1 + e^(fragSlope·ΔF)) — 5 for a placement that leaves F(M) as it was, towards 10 as it
// removes fragmentation, towards 0 as it adds some — and each card is scored −ΔF of its own change.
// Equal ΔF: see fragTieBreak.
//
// Host resources: as FGD does, a node's free GPUs all count as fragmented for a task the node lacks
// CPU or memory for; for whole-card tasks, so do the free cards the node's CPU and memory cannot
// feed (hostCapacity), which keeps CPU-hungry pods off nodes whose CPU the free cards need. The
// node score compares the node's CPU and memory before and after the pod (Plan.Host); the card score sees them after the pod (the same for every card of the node). When
// the node's CPU and memory are unknown (NodeState.Host zero) or the mix carries none (TaskMix.Add
// without host), they keep no class out and the policy measures GPU fragmentation only. Without a
// mix (nothing seen yet) both fall back to binpack.
//
// Cost: one pass over the classes of the mix for each distinct card state of the node, and no
// allocation for nodes of up to fragStackCards cards.

func init() {
	// Self-registration, at initialisation only (strategy.go names these two for PolicyFragAware).
	nodeStrategies[annotations.PolicyFragAware] = fragAwareNode
	cardStrategies[annotations.PolicyFragAware] = CardStrategy{Score: fragAwareCard, Tight: true}
}

// fragTieBreak breaks ties between placements of equal ΔF, far below any ΔF a real mix produces:
// among nodes, the emptier node wins, "emptier" being the larger of its mean card utilization and,
// when the node's CPU is known, its CPU use after the placement (spread on the scarcer of the two: it
// keeps headroom for later pods; with CPU in the rule the default trace, core scoring, seeds 42–51,
// went from 94.24 ± 0.67 to 95.27 ± 0.20 % at 130 % arrival); then the smaller node name
// (Candidate.Better). Among cards of a node, the fuller card wins (binpack: it keeps empty cards
// whole for whole-card requests), then the lower index. Ties are common — every empty node of a model
// scores alike — and they decide a lot: on the default trace (seed 42, core scoring) breaking them
// toward the fuller node instead allocates 86.4 % of the GPUs at 130 % arrival, toward the emptier
// one 93.8 %.
const fragTieBreak = 1e-9

// fragMinShare is the smallest share of the mix a class must have to count: like FGD's "typical
// tasks", rare requests are left out of the expectation, which keeps the cost proportional to the
// handful of request kinds that make up a cluster's load.
const fragMinShare = 0.005

// fragSlope is how steeply the node score falls with ΔF (in cards): ΔF ±0.25 of a card moves the
// score from 5 to 2.7 or 7.3, so the extender's integer scores (0..10) still tell such placements apart.
const fragSlope = 4

// fragStackCards is the card count up to which a node's card views live on the stack.
const fragStackCards = 16

// fragAwareNode scores a node by the change of its expected fragmentation under the plan.
func fragAwareNode(in *NodeInput) float64 {
	if in.Mix == nil || in.Mix.Total <= 0 {
		return binpackNode(in)
	}
	var bufBefore, bufAfter [fragStackCards]cardView
	before, after := bufBefore[:0], bufAfter[:0]
	if len(in.Node.Cards) > fragStackCards {
		before, after = make([]cardView, 0, len(in.Node.Cards)), make([]cardView, 0, len(in.Node.Cards))
	}
	// Cards the plan does not touch appear alike before and after, so they cancel in ΔF exactly.
	for i := range in.Node.Cards {
		c := &in.Node.Cards[i]
		before = appendView(before, c, c.Usage)
		after = appendView(after, c, in.After(i))
	}
	delta := expectedFragHost(after, in.Mix, &in.Node.Host, in.Plan.Host) - expectedFragHost(before, in.Mix, &in.Node.Host, HostRequest{})
	// Tie-break (see fragTieBreak): the larger of card and CPU use after the placement.
	tie := utilizationAfter(in)
	if h := &in.Node.Host; h.AllocCPUMilli > 0 {
		tie = max(tie, float64(h.UsedCPUMilli+in.Plan.Host.CPUMilli)/float64(h.AllocCPUMilli))
	}
	return MaxScore/(1+math.Exp(fragSlope*delta)) - fragTieBreak*tie
}

// fragAwareCard scores one card for one device by the change of the node's expected fragmentation
// when this card goes from Before to After (the other cards as they are).
func fragAwareCard(in *CardInput) float64 {
	if in.Mix == nil || in.Mix.Total <= 0 {
		return binpackCard(in)
	}
	var buf [fragStackCards]cardView
	views := buf[:0]
	if len(in.Node.Cards) > len(buf) {
		views = make([]cardView, 0, len(in.Node.Cards))
	}
	for i := range in.Node.Cards {
		c := &in.Node.Cards[i]
		if c == in.Card {
			continue
		}
		views = appendView(views, c, c.Usage)
	}
	b, a := newView(in.Card, in.Before), newView(in.Card, in.After)
	delta, total := 0.0, 0.0
	least := fragMinShare * in.Mix.Total
	for ci := range in.Mix.Classes {
		t := &in.Mix.Classes[ci]
		if t.Weight < least || t.Weight <= 0 {
			continue
		}
		total += t.Weight
		count, frag, free := classFrag(views, t)
		hostCap := hostCapacity(t, &in.Node.Host, in.Host)
		if hostCap <= 0 {
			// The class cannot run on the node once the pod is there: all free capacity counts.
			delta += t.Weight * (a.free - b.free)
			continue
		}
		fb := finishFrag(t, count, frag, free, hostCap, &b)
		fa := finishFrag(t, count, frag, free, hostCap, &a)
		delta += t.Weight * (fa - fb)
	}
	return -delta/total + fragTieBreak*in.Card.Utilization(in.After)
}

// cardView is what fragmentation needs of one card in one usage, with how many identical cards
// (same model, same usage) it stands for.
type cardView struct {
	card *Card
	n    int
	// free is the card's free capacity in cards, in [0, 1]; 0 when unhealthy or held whole.
	free      float64
	freeMem   int64
	freeCores int
	freeSlots int
	held      int
	whole     bool
}

func newView(c *Card, u Usage) cardView {
	v := cardView{card: c, n: 1, held: u.Held, whole: u.Whole > 0 || !c.Healthy}
	if v.whole {
		return v
	}
	v.free = 1 - c.Utilization(u)
	v.freeMem = max(c.MemoryMiB-u.MemMiB, 0)
	v.freeCores = max(100-u.Cores, 0)
	v.freeSlots = max(c.Slots()-u.Held, 0)
	return v
}

// appendView adds card c in usage u, merging it into an equal view already there.
func appendView(views []cardView, c *Card, u Usage) []cardView {
	v := newView(c, u)
	for i := range views {
		w := &views[i]
		if w.free == v.free && w.freeMem == v.freeMem && w.freeCores == v.freeCores && w.freeSlots == v.freeSlots &&
			w.held == v.held && w.whole == v.whole && w.card.MemoryMiB == c.MemoryMiB && w.card.modelLower == c.modelLower {
			w.n++
			return views
		}
	}
	return append(views, v)
}

// hosts reports whether the card in view v can take one device of class t.
func (v *cardView) hosts(t *TaskClass) bool {
	switch {
	case v.whole || !t.Accepts(v.card):
		return false
	case t.Whole:
		return v.held == 0
	}
	return v.freeSlots > 0 && v.freeCores >= t.Cores && v.freeMem >= classMemOn(t, v.card.MemoryMiB)
}

// classMemOn is the memory a device of class t reserves on a card of total MiB, as
// annotations.ContainerRequest.MemoryOn computes it.
func classMemOn(t *TaskClass, total int64) int64 {
	switch {
	case t.MemMiB > 0:
		return t.MemMiB
	case t.MemPercent > 0:
		return total * int64(t.MemPercent) / 100
	}
	return 0
}

// classFrag sums, over views, the cards that can host a device of t (count), the free capacity of
// those that cannot (frag) and all free capacity (total).
func classFrag(views []cardView, t *TaskClass) (count int, frag, total float64) {
	for i := range views {
		v := &views[i]
		f := v.free * float64(v.n)
		total += f
		if v.hosts(t) {
			count += v.n
		} else {
			frag += f
		}
	}
	return count, frag, total
}

// finishFrag adds one more card (view v) to the sums of classFrag and returns F(t), the class's
// host capacity being hostCap (hostCapacity).
func finishFrag(t *TaskClass, count int, frag, total, hostCap float64, v *cardView) float64 {
	total += v.free
	if v.hosts(t) {
		count++
	} else {
		frag += v.free
	}
	return fragOf(t, count, frag, total, hostCap)
}

// expectedFrag is F(M) of the cards in views, in cards, host resources unknown.
func expectedFrag(views []cardView, mix *TaskMix) float64 {
	return expectedFragHost(views, mix, &HostState{}, HostRequest{})
}

// expectedFragHost is F(M) of the cards in views, in cards, on a node with host resources h less extra.
func expectedFragHost(views []cardView, mix *TaskMix, h *HostState, extra HostRequest) float64 {
	sum, weight := 0.0, 0.0
	least := fragMinShare * mix.Total
	for ci := range mix.Classes {
		t := &mix.Classes[ci]
		if t.Weight < least || t.Weight <= 0 {
			continue
		}
		weight += t.Weight
		count, frag, total := classFrag(views, t)
		sum += t.Weight * fragOf(t, count, frag, total, hostCapacity(t, h, extra))
	}
	if weight == 0 {
		return 0
	}
	return sum / weight
}
