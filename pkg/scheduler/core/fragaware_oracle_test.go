package core

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// The frag-aware policy as it was before its speed-up (fragaware.go and fraghost.go of commit
// 1870a9b, the host-capacity rule on the code of 2a65af6), kept verbatim but for the names as the
// oracle of TestFragAwareMatchesOracle: the fast implementation must return the same scores, bit
// for bit.

// oracleFragAwareNode scores a node by the change of its expected fragmentation under the plan.
func oracleFragAwareNode(in *NodeInput) float64 {
	if in.Mix == nil || in.Mix.Total <= 0 {
		return binpackNode(in)
	}
	var bufBefore, bufAfter [fragStackCards]oracleView
	before, after := bufBefore[:0], bufAfter[:0]
	if len(in.Node.Cards) > fragStackCards {
		before, after = make([]oracleView, 0, len(in.Node.Cards)), make([]oracleView, 0, len(in.Node.Cards))
	}
	// Cards the plan does not touch appear alike before and after, so they cancel in ΔF exactly.
	for i := range in.Node.Cards {
		c := &in.Node.Cards[i]
		before = oracleAppendView(before, c, c.Usage)
		after = oracleAppendView(after, c, in.After(i))
	}
	delta := oracleExpectedFragHost(after, in.Mix, &in.Node.Host, in.Plan.Host) - oracleExpectedFragHost(before, in.Mix, &in.Node.Host, HostRequest{})
	delta += oracleShortfall(in)
	// Tie-break (see fragTieBreak): the larger of card and CPU use after the placement.
	tie := utilizationAfter(in)
	if h := &in.Node.Host; h.AllocCPUMilli > 0 {
		tie = max(tie, float64(h.UsedCPUMilli+in.Plan.Host.CPUMilli)/float64(h.AllocCPUMilli))
	}
	return MaxScore/(1+math.Exp(fragSlope*delta)) - fragTieBreak*tie
}

// oracleShortfall is fragState.shortfall written plainly (added after the speed-up, not verbatim
// old code): per counted shared class, the free capacity after the plan of the healthy cards of its
// models that the plan holds (every card when it holds none) less what its pods' share of it the
// node's free CPU and memory can feed, after the plan's host less before.
func oracleShortfall(in *NodeInput) float64 {
	h := &in.Node.Host
	if !h.Known() {
		return 0
	}
	short := func(t *TaskClass, extra HostRequest, g float64) float64 {
		pods := math.Inf(1)
		if h.AllocCPUMilli > 0 && t.HostCPUMilli > 0 {
			pods = float64(max(h.AllocCPUMilli-h.UsedCPUMilli-extra.CPUMilli, 0)) / float64(t.HostCPUMilli)
		}
		if h.AllocMemMiB > 0 && t.HostMemMiB > 0 {
			pods = min(pods, float64(max(h.AllocMemMiB-h.UsedMemMiB-extra.MemMiB, 0))/float64(t.HostMemMiB))
		}
		return max(g-pods*classShare(t)*float64(t.Cards), 0)
	}
	weights := oracleWeights(in.Mix)
	sum, total := 0.0, 0.0
	for ci := range in.Mix.Classes {
		t, w := &in.Mix.Classes[ci], weights[ci]
		if w == 0 {
			continue
		}
		total += w
		if t.Whole {
			continue
		}
		g := 0.0
		for j := range in.Node.Cards {
			c := &in.Node.Cards[j]
			held := slices.ContainsFunc(in.Plan.Devices, func(d Device) bool { return d.Card == j })
			if c.Healthy && !c.Instance() && t.Accepts(c) && (len(in.Plan.Devices) == 0 || held) {
				g += 1 - c.Utilization(in.After(j))
			}
		}
		if g > 0 {
			sum += w * (short(t, in.Plan.Host, g) - short(t, HostRequest{}, g))
		}
	}
	if total <= 0 {
		return 0
	}
	return sum / total
}

// oracleFragAwareCard scores one card for one device by the change of the node's expected fragmentation
// when this card goes from Before to After (the other cards as they are).
func oracleFragAwareCard(in *CardInput) float64 {
	if in.Mix == nil || in.Mix.Total <= 0 {
		return binpackCard(in)
	}
	var buf [fragStackCards]oracleView
	views := buf[:0]
	if len(in.Node.Cards) > len(buf) {
		views = make([]oracleView, 0, len(in.Node.Cards))
	}
	for i := range in.Node.Cards {
		c := &in.Node.Cards[i]
		if c == in.Card {
			continue
		}
		views = oracleAppendView(views, c, c.Usage)
	}
	b, a := oracleNewView(in.Card, in.Before), oracleNewView(in.Card, in.After)
	delta, total := 0.0, 0.0
	weights := oracleWeights(in.Mix)
	for ci := range in.Mix.Classes {
		t, w := &in.Mix.Classes[ci], weights[ci]
		if w == 0 {
			continue
		}
		total += w
		count, frag, free := oracleClassFrag(views, t)
		hostCap := oracleHostCapacity(t, &in.Node.Host, in.Host)
		if hostCap <= 0 {
			// The class cannot run on the node once the pod is there: all free capacity counts.
			delta += w * (a.free - b.free)
			continue
		}
		fb := oracleFinishFrag(t, count, frag, free, hostCap, &b)
		fa := oracleFinishFrag(t, count, frag, free, hostCap, &a)
		delta += w * (fa - fb)
	}
	return -delta/total + fragTieBreak*in.Card.Utilization(in.After)
}

// oracleWeights is, per class of mix, the weight it counts with (0: it does not count): its own
// when positive and at least fragMinShare of the mix; for the heaviest class (the first of equals)
// of a model-constrained kind (the classes equal in all but weight and host CPU and memory) none of
// whose classes reaches fragMinShare alone, the kind's summed weight when that reaches it.
func oracleWeights(mix *TaskMix) []float64 {
	least := fragMinShare * mix.Total
	weights := make([]float64, len(mix.Classes))
	for i := range mix.Classes {
		t := &mix.Classes[i]
		if t.Weight <= 0 {
			continue
		}
		if t.Weight >= least {
			weights[i] = t.Weight
			continue
		}
		if len(t.Models) == 0 {
			continue
		}
		kind, top, seen := 0.0, -1, false
		for j := range mix.Classes {
			u := &mix.Classes[j]
			if u.Cards == t.Cards && u.Whole == t.Whole && u.MemMiB == t.MemMiB && u.MemPercent == t.MemPercent &&
				u.Cores == t.Cores && slices.Equal(u.Models, t.Models) {
				kind += u.Weight
				seen = seen || u.Weight >= least
				if top < 0 || u.Weight > mix.Classes[top].Weight {
					top = j
				}
			}
		}
		if top == i && !seen && kind >= least {
			weights[i] = kind
		}
	}
	return weights
}

// oracleView is what fragmentation needs of one card in one usage, with how many identical cards
// (same model, same usage) it stands for.
type oracleView struct {
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

func oracleNewView(c *Card, u Usage) oracleView {
	v := oracleView{card: c, n: 1, held: u.Held, whole: u.Whole > 0 || !c.Healthy}
	if v.whole {
		return v
	}
	v.free = 1 - c.Utilization(u)
	v.freeMem = max(c.MemoryMiB-u.MemMiB, 0)
	v.freeCores = max(100-u.Cores, 0)
	v.freeSlots = max(c.Slots()-u.Held, 0)
	return v
}

// oracleAppendView adds card c in usage u, merging it into an equal view already there.
func oracleAppendView(views []oracleView, c *Card, u Usage) []oracleView {
	v := oracleNewView(c, u)
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
func (v *oracleView) hosts(t *TaskClass) bool {
	switch {
	case v.whole || !t.Accepts(v.card):
		return false
	case t.Whole:
		return v.held == 0
	}
	return v.freeSlots > 0 && v.freeCores >= t.Cores && v.freeMem >= oracleClassMemOn(t, v.card.MemoryMiB)
}

// oracleClassMemOn is the memory a device of class t reserves on a card of total MiB, as
// annotations.ContainerRequest.MemoryOn computes it.
func oracleClassMemOn(t *TaskClass, total int64) int64 {
	switch {
	case t.MemMiB > 0:
		return t.MemMiB
	case t.MemPercent > 0:
		return total * int64(t.MemPercent) / 100
	}
	return 0
}

// oracleClassFrag sums, over views, the cards that can host a device of t (count), the free capacity of
// those that cannot (frag) and all free capacity (total).
func oracleClassFrag(views []oracleView, t *TaskClass) (count int, frag, total float64) {
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

// oracleFinishFrag adds one more card (view v) to the sums of oracleClassFrag and returns F(t), the
// class's host capacity being hostCap (oracleHostCapacity).
func oracleFinishFrag(t *TaskClass, count int, frag, total, hostCap float64, v *oracleView) float64 {
	total += v.free
	if v.hosts(t) {
		count++
	} else {
		frag += v.free
	}
	return oracleFragOf(t, count, frag, total, hostCap)
}

// oracleExpectedFragHost is F(M) of the cards in views, in cards, on a node with host resources h less extra.
func oracleExpectedFragHost(views []oracleView, mix *TaskMix, h *HostState, extra HostRequest) float64 {
	sum, weight := 0.0, 0.0
	weights := oracleWeights(mix)
	for ci := range mix.Classes {
		t, w := &mix.Classes[ci], weights[ci]
		if w == 0 {
			continue
		}
		weight += w
		count, frag, total := oracleClassFrag(views, t)
		sum += w * oracleFragOf(t, count, frag, total, oracleHostCapacity(t, h, extra))
	}
	if weight == 0 {
		return 0
	}
	return sum / weight
}

// oracleHostCapacity is the GPU capacity, in cards, that pods of class t can still take on a node
// whose CPU and memory are h less extra. For a whole-card class: as many pods as the free CPU and
// memory hold, fractions included, times the class's cards; +Inf when neither resource limits the
// class (unknown, or not asked for); 0 when not one pod fits. A shared class keeps FGD's rule
// alone: +Inf when one pod fits, else 0.
func oracleHostCapacity(t *TaskClass, h *HostState, extra HostRequest) float64 {
	if !t.Whole {
		if t.HostFits(h, extra) {
			return math.Inf(1)
		}
		return 0
	}
	pods := math.Inf(1)
	if h.AllocCPUMilli > 0 && t.HostCPUMilli > 0 {
		pods = float64(h.AllocCPUMilli-h.UsedCPUMilli-extra.CPUMilli) / float64(t.HostCPUMilli)
	}
	if h.AllocMemMiB > 0 && t.HostMemMiB > 0 {
		pods = min(pods, float64(h.AllocMemMiB-h.UsedMemMiB-extra.MemMiB)/float64(t.HostMemMiB))
	}
	if pods < 1 {
		return 0
	}
	return pods * float64(t.Cards)
}

// oracleFragOf is F(t) of a node from the sums of oracleClassFrag (count, frag, total) and
// oracleHostCapacity: all free capacity when t cannot run on the node, otherwise what t cannot
// reach, card by card or for want of CPU and memory.
func oracleFragOf(t *TaskClass, count int, frag, total, hostCap float64) float64 {
	if count < t.Cards || hostCap <= 0 {
		return total
	}
	return max(frag, total-hostCap)
}

// TestFragAwareMatchesOracle compares the frag-aware scores with the oracle's (the implementation
// before its speed-up), bit for bit, on random nodes, mixes and pods: node scores (Scratch and
// plain), card scores for random before and after usages, and the plans Fit makes with either.
// Nodes are drawn from few card states, so identical cards, empty nodes and ties are common; some
// mixes have no class that counts (the scores are NaN then, alike), and some are changed other than
// by Add (the index is rebuilt on the fly).
func TestFragAwareMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	d, err := New(Options{NodePolicy: annotations.PolicyFragAware, GPUPolicy: annotations.PolicyFragAware})
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }
	var s Scratch
	var st fragKeep
	nodes, cards, plans := 0, 0, 0
	for iter := range 400 {
		mix := oracleRandomMix(rng)
		req, host := oracleRandomPod(rng)
		p, err := d.PrepareHost(req, annotations.Selector{}, host)
		if err != nil {
			t.Fatal(err)
		}
		old := *p
		old.nodeScore, old.card = oracleFragAwareNode, CardStrategy{Score: oracleFragAwareCard, Tight: true}
		for range 12 {
			n := oracleRandomNode(rng, fmt.Sprint("n", iter))
			nodes++
			for i := range n.Cards {
				c := &n.Cards[i]
				before := c.Usage
				if rng.IntN(3) == 0 {
					before = before.plus(int64(rng.IntN(4))*1024, 5*rng.IntN(4))
				}
				mem := []int64{0, 1024, 4096, 20480}[rng.IntN(4)]
				after := before.plus(mem, []int{0, 10, 50, 100}[rng.IntN(4)])
				in := CardInput{Node: n, Card: c, Before: before, After: after, Mix: mix, Host: host}
				want := oracleFragAwareCard(&in)
				if got := fragAwareCard(&in); !same(got, want) {
					t.Fatalf("iter %d node %v card %d: card score %v, oracle %v", iter, n.Cards, i, got, want)
				}
				in.frag = &st
				if got := fragAwareCard(&in); !same(got, want) {
					t.Fatalf("iter %d node %v card %d: card score (kept state) %v, oracle %v", iter, n.Cards, i, got, want)
				}
				cards++
			}
			planOld, rOld := old.Fit(n, mix)
			plan, r := p.FitWith(n, mix, &s)
			if (r == nil) != (rOld == nil) {
				t.Fatalf("iter %d: fit %v, oracle %v", iter, r, rOld)
			}
			if r != nil {
				continue
			}
			if diff := cmp.Diff(planOld.Devices, plan.Devices); diff != "" {
				t.Fatalf("iter %d node %v: plan (-oracle +got):\n%s", iter, n.Cards, diff)
			}
			want := old.Score(n, planOld, mix)
			if got := p.ScoreWith(n, plan, mix, &s); !same(got, want) {
				t.Fatalf("iter %d: node score %v, oracle %v", iter, got, want)
			}
			if got := p.Score(n, plan, mix); !same(got, want) {
				t.Fatalf("iter %d: node score (no Scratch) %v, oracle %v", iter, got, want)
			}
			plans++
			// The node's CPU and memory change, its cards do not: what the Scratch keeps must follow.
			if n.Host.Known() {
				n.HoldHost(HostRequest{CPUMilli: 2000, MemMiB: 4096})
				if got, want := p.ScoreWith(n, plan, mix, &s), old.Score(n, planOld, mix); !same(got, want) {
					t.Fatalf("iter %d: node score after HoldHost %v, oracle %v", iter, got, want)
				}
				c := &n.Cards[plan.Devices[0].Card]
				in := CardInput{Node: n, Card: c, Before: c.Usage, After: plan.After(n, plan.Devices[0].Card), Mix: mix, Host: host, frag: &st}
				if got, want := fragAwareCard(&in), oracleFragAwareCard(&in); !same(got, want) {
					t.Fatalf("iter %d: card score after HoldHost %v, oracle %v", iter, got, want)
				}
			}
			// The pod is placed; the next one on the same node, with the same Scratch, sees it.
			n.Apply(plan)
			planOld, rOld = old.Fit(n, mix)
			plan, r = p.FitWith(n, mix, &s)
			if (r == nil) != (rOld == nil) {
				t.Fatalf("iter %d: second fit %v, oracle %v", iter, r, rOld)
			}
			if r == nil {
				if diff := cmp.Diff(planOld.Devices, plan.Devices); diff != "" {
					t.Fatalf("iter %d node %v: second plan (-oracle +got):\n%s", iter, n.Cards, diff)
				}
				if got, want := p.ScoreWith(n, plan, mix, &s), old.Score(n, planOld, mix); !same(got, want) {
					t.Fatalf("iter %d: second node score %v, oracle %v", iter, got, want)
				}
			}
		}
	}
	t.Logf("%d nodes, %d card scores, %d plans", nodes, cards, plans)
	if plans < 1000 {
		t.Errorf("only %d plans compared", plans)
	}
}

var oracleModels = []string{"NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA A10"}

// oracleRandomNode is a node of 1 to 20 cards drawn from a few card kinds and usages.
func oracleRandomNode(rng *rand.Rand, name string) *NodeState {
	count := []int{1, 2, 4, 8, 8, 8, 20}[rng.IntN(7)]
	kinds := 1 + rng.IntN(2)
	type kind struct {
		model  string
		mem    int64
		shares int
	}
	ks := make([]kind, kinds)
	for i := range ks {
		ks[i] = kind{oracleModels[rng.IntN(len(oracleModels))], []int64{16384, 40960, 81920}[rng.IntN(3)], []int{1, 2, 4, 8}[rng.IntN(4)]}
	}
	inv := annotations.Inventory{V: 1}
	for i := range count {
		k := ks[rng.IntN(kinds)]
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: fmt.Sprintf("%s-G%d", name, i), Index: i, Model: k.model,
			MemoryMiB: k.mem, NUMA: i * 2 / count, Healthy: rng.IntN(20) != 0, Shares: k.shares})
	}
	n := NewNodeState(name, inv)
	if rng.IntN(2) == 0 {
		n.SetHost(int64(8+rng.IntN(56))*1000, int64(32+rng.IntN(224))*1024)
		n.HoldHost(HostRequest{CPUMilli: int64(rng.IntN(8)) * 1000, MemMiB: int64(rng.IntN(32)) * 1024})
	}
	// A few usages, so that cards repeat.
	usages := 1 + rng.IntN(3)
	for i := range n.Cards {
		c := &n.Cards[i]
		switch u := rng.IntN(usages + 1); {
		case u == 0:
		case c.Shares <= 1 || u == 1:
			if rng.IntN(2) == 0 {
				n.Hold(Holding{UUID: c.UUID, Slot: -1, MemMiB: c.MemoryMiB, Cores: 100})
			}
		default:
			for slot := range min(u, c.Shares) {
				n.Hold(Holding{UUID: c.UUID, Slot: slot, MemMiB: int64(u) * 2048, Cores: 10 * u})
			}
		}
	}
	return n
}

// oracleRandomMix is a mix of up to 60 classes, some rare, with or without host requests; one in
// eight is built without Add, one in twelve has only rare classes.
func oracleRandomMix(rng *rand.Rand) *TaskMix {
	m := &TaskMix{}
	if rng.IntN(12) == 0 {
		for i := range 300 {
			m.Add(TaskClass{Cards: 1, MemMiB: int64(1 + i), Cores: 10}, 1)
		}
		return m
	}
	for range 1 + rng.IntN(60) {
		t := TaskClass{Cards: 1 + rng.IntN(3)}
		switch rng.IntN(4) {
		case 0:
			t.Whole, t.Cores = true, 100
		case 1:
			t.MemMiB, t.Cores = int64(1+rng.IntN(16))*1024, 5*rng.IntN(20)
		case 2:
			t.MemPercent, t.Cores = 5*(1+rng.IntN(19)), 5*rng.IntN(20)
		default:
			t.Cores = 5 * (1 + rng.IntN(19))
		}
		switch rng.IntN(4) {
		case 0:
			t.Models = []string{"a100"}
		case 1:
			t.Models = []string{"t4", "a10"}
		}
		if rng.IntN(2) == 0 {
			t.HostCPUMilli, t.HostMemMiB = int64(rng.IntN(16))*HostCPUBucket, int64(rng.IntN(64))*HostMemBucket
		}
		m.Add(t, []float64{0.01, 1, 1, 3, 10}[rng.IntN(5)])
	}
	if rng.IntN(8) == 0 {
		return &TaskMix{Classes: m.Classes, Total: m.Total}
	}
	return m
}

// oracleRandomPod is one or two GPU containers, whole cards or shares, with a host request or none.
func oracleRandomPod(rng *rand.Rand) (annotations.PodRequest, HostRequest) {
	var req annotations.PodRequest
	for i := range 1 + rng.IntN(2) {
		c := annotations.ContainerRequest{Name: fmt.Sprint("c", i), Count: 1 + rng.IntN(2)}
		if rng.IntN(2) == 0 {
			c.Shared = true
			c.Cores = 5 * (1 + rng.IntN(10))
			if rng.IntN(2) == 0 {
				c.MemoryPercent = 5 * (1 + rng.IntN(10))
			} else {
				c.MemoryMiB = int64(1+rng.IntN(8)) * 1024
			}
		}
		req.Containers = append(req.Containers, c)
	}
	var host HostRequest
	if rng.IntN(2) == 0 {
		host = HostRequest{CPUMilli: int64(rng.IntN(8)) * 1000, MemMiB: int64(rng.IntN(16)) * 1024}
	}
	return req, host
}
