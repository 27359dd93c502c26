package core

import (
	"math"
	"slices"

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
// Classes below fragMinShare of the mix are left out, as FGD keeps only "typical" tasks (but see
// fragMinShare).
//
// A placement is scored by how much it raises F(M) (ΔF, in cards): the node score is
// MaxScore / (1 + e^(fragSlope·ΔF)) — 5 for a placement that leaves F(M) as it was, towards 10 as it
// removes fragmentation, towards 0 as it adds some — and each card is scored −ΔF of its own change.
// Equal ΔF: see fragTieBreak.
//
// MIG: instances are a partition the operator fixed, not capacity a placement can fragment, so the
// measure leaves them out (they count as held cards: no free capacity, hosting no class) and the
// mix counts no MIG request (TaskMix.AddPod). Among instances the card score is binpack's (fill
// partly used parents first); a MIG pod's node score therefore sees ΔF = 0 (5) and the tie-break.
//
// Host resources: as FGD does, a node's free GPUs all count as fragmented for a task the node lacks
// CPU or memory for; for whole-card tasks, so do the free cards the node's CPU and memory cannot
// feed (hostCapacity), which keeps CPU-hungry pods off nodes whose CPU the free cards need. The
// node score compares the node's CPU and memory before and after the pod (Plan.Host); the card
// score sees them after the pod (the same for every card of the node). When the node's CPU and
// memory are unknown (NodeState.Host zero) or the mix carries none (TaskMix.Add without host), they
// keep no class out and the policy measures GPU fragmentation only. Without a mix (nothing seen
// yet) both fall back to binpack.
//
// Cost: the mix keeps the classes that count, grouped by what a card needs to host one of their
// devices (fragIndex: classes that differ only in card count or host CPU and memory host alike),
// rebuilt by TaskMix.Add, so scoring never looks at the others. Per node, the distinct card states
// and which groups each one hosts are found once per Fit and kept for every card score and for the
// node score after it (fragState, in the Scratch). A card score is then one walk per group over
// the other cards' distinct states and one pass over the counted classes, and cards alike (same
// state, same usage before and after) share one; the node score is the same walk and pass before
// and after the plan. The sums are taken in the order of the walk over every class and card view
// the policy was first written as (kept in fragaware_oracle_test.go), so every score is the same to
// the bit. No allocation per node once the Scratch's buffers have grown; Pod.Fit and Pod.Score,
// without a Scratch, allocate a fragState each.

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
// handful of request kinds that make up a cluster's load. One exception: a model-constrained kind
// of GPU request (sameKind: cards, whole or memory and cores, models) that the host buckets
// (TaskClass.HostCPUMilli, HostMemMiB) split into classes each below the threshold, but that
// reaches it summed over them, counts as one class: its heaviest, with the kind's weight. Without
// it frag-aware kept no room for such requests: the spec=0.5 blend of the four shared traces (core
// scoring) allocated 84.56 % of the GPUs at 130 % arrival on seed 42 and 87.13 % on seeds 43–46,
// against 88.11 and 88.92 % with it (binpack 86.93 on seed 42); on seeds 47–51, checked before it
// was kept, 87.31 → 88.92 % (binpack 86.49), and the cpu=3 blend 84.31 → 84.41 % (binpack 73.27).
// Unconstrained kinds stay out:
// counting them too (all of a kind's classes, or one as here) cost up to 0.7 on the cpu=3 blend.
const fragMinShare = 0.005

// fragSlope is how steeply the node score falls with ΔF (in cards): ΔF ±0.25 of a card moves the
// score from 5 to 2.7 or 7.3, so the extender's integer scores (0..10) still tell such placements apart.
const fragSlope = 4

// fragAwareNode scores a node by the change of its expected fragmentation under the plan.
func fragAwareNode(in *NodeInput) float64 {
	if in.Mix == nil || in.Mix.Total <= 0 {
		return binpackNode(in)
	}
	s := in.frag.get()
	s.prepare(in.Node, in.Mix, 0)
	// Cards the plan does not touch appear alike before and after, so they cancel in ΔF exactly.
	s.listNode()
	before := s.expected(&in.Node.Host, HostRequest{})
	s.listAfter(in)
	after := s.expected(&in.Node.Host, in.Plan.Host)
	delta := after - before
	if len(in.Plan.Devices) == 0 {
		// A pod without cards (a CPU-only pod routed to Cardinal): ΔF sees only what its CPU and
		// memory take from the mix; shared classes are counted by shortfall, and the CPU and
		// memory it leaves idle by hostLeft; ties: hostOnlyTie.
		delta += s.shortfall(in) + fragHostPack*hostLeft(in)
		return MaxScore/(1+math.Exp(fragSlope*delta)) - fragTieBreak*hostOnlyTie(in)
	}
	// A card the plan shares keeps capacity that only more shared pods can take, each with its CPU
	// and memory: shortfall counts what the node could not feed them (nothing for cards taken whole).
	delta += s.shortfall(in)
	// Tie-break (see fragTieBreak): the larger of card and CPU use after the placement.
	tie := utilizationAfter(in)
	if h := &in.Node.Host; h.AllocCPUMilli > 0 {
		tie = max(tie, float64(h.UsedCPUMilli+in.Plan.Host.CPUMilli)/float64(h.AllocCPUMilli))
	}
	return MaxScore/(1+math.Exp(fragSlope*delta)) - fragTieBreak*tie
}

// fragHostPack is what a CPU-only pod's placement costs, in cards, per node whose CPU and memory it
// leaves wholly free (hostLeft): the pod packs onto nodes already in use, keeping large free blocks
// of CPU and memory whole for the GPU pods (and larger CPU-only pods) to come. ΔF alone prices only
// what the pod's CPU and memory take from the mix on the node it lands on; where CPU ran short
// across the cluster, ΔF 0 on every node with CPU to spare sent CPU-only pods to the nodes with the
// most CPU left, which GPU pods then lacked. Half a card per node is the weight BestFit gives each
// of its two terms (Weng et al., ATC'23). Measured (cardinal protocol, core scoring, GPU allocated
// at 130 % arrival, seeds 42–44): blend cpu=3 87.48 → 88.45 %, cpu=5,8=2 76.78 → 77.92 %, cpu=4
// 76.40 → 77.43 % (BestFit 88.13, 77.07, 76.29); blends without more CPU-only pods moved by under
// 0.05. An eighth of a card gained a third to two thirds as much; a card cost spec=0.5 0.13,
// three cards 0.8. Free cards are not counted again here (ΔF prices them; a node without free
// cards wins ties, hostOnlyTie): adding the node's free card share, or its untouched cards', cost
// gpushare100 0.15 (seeds 42–45) and changed no blend.
const fragHostPack = 0.5

// hostLeft is the share of a node's CPU and memory free after the plan: the mean of the two, or the
// one the node reports (0 when it reports neither).
func hostLeft(in *NodeInput) float64 {
	h := &in.Node.Host
	left, known := 0.0, 0
	if h.AllocCPUMilli > 0 {
		left += float64(max(h.AllocCPUMilli-h.UsedCPUMilli-in.Plan.Host.CPUMilli, 0)) / float64(h.AllocCPUMilli)
		known++
	}
	if h.AllocMemMiB > 0 {
		left += float64(max(h.AllocMemMiB-h.UsedMemMiB-in.Plan.Host.MemMiB, 0)) / float64(h.AllocMemMiB)
		known++
	}
	if known == 0 {
		return 0
	}
	return left / float64(known)
}

// hostOnlyTie is the tie-break of a placement that takes no card, only CPU and memory (a CPU-only
// pod), between nodes of equal ΔF (with shortfall); lower wins. The node's free GPU capacity first (in cards, healthy
// cards only: a node without cards, or whose cards are all held, comes first): the fewer free cards
// a node has, the less of its CPU and memory they can still need, so the pod takes it where it
// strands the least should the mix change. Then the fuller node (the larger of its CPU and memory
// use after the pod): CPU-only pods pack onto the nodes they already use, keeping the others' CPU
// and memory whole for the GPU pods to come. The emptier-node rule of GPU placements (fragTieBreak)
// would do the opposite here: with ΔF 0 on every node whose CPU is plentiful, it sent CPU-only pods
// to untouched nodes, as kube-scheduler's least-allocated scoring does.
func hostOnlyTie(in *NodeInput) float64 {
	free := 0.0
	for i := range in.Node.Cards {
		c := &in.Node.Cards[i]
		if c.Healthy {
			free += in.Node.cardWeight(c) * (1 - c.Utilization(in.After(i)))
		}
	}
	use := 0.0
	if h := &in.Node.Host; h.AllocCPUMilli > 0 {
		use = float64(h.UsedCPUMilli+in.Plan.Host.CPUMilli) / float64(h.AllocCPUMilli)
	}
	if h := &in.Node.Host; h.AllocMemMiB > 0 {
		use = max(use, float64(h.UsedMemMiB+in.Plan.Host.MemMiB)/float64(h.AllocMemMiB))
	}
	return free + 1 - min(use, 1)
}

// shortfall is the rise, in cards, of the free GPU capacity the node's CPU and memory could not
// feed, for the shared classes of the mix, when the plan's CPU and memory (in.Plan.Host) are taken:
// for each counted shared class m, max(0, G − pods × share_m × cards_m), where G is sharedFree (the
// free capacity, after the plan, of the cards of m's models that the plan shares, or of every card
// when it takes none) and pods how many pods of m the node's free CPU and memory hold (fractions
// included); the after less the before, weighted by w_m over the whole mix's weight (as ΔF is).
// ΔF's host rule (hostCapacity) already counts whole-card classes this way, but sees a shared class
// only when not one more pod of it fits: it misses that a card shared by pods of m needs the CPU of
// 1 / share_m pods.
//
// For a CPU-only pod, whose ΔF is its host part only, leaving shortfall out sent CPU-only pods of the
// gpushare100 trace onto nodes whose shared cards then lacked CPU (cardinal protocol, core scoring,
// seeds 42–43: 86.95 % GPU allocated at 130 % arrival without, 87.25 % with it). For a shared GPU
// pod it counts the card being split: a pod that opens a card on a node short of CPU leaves the rest
// of that card to pods that will not fit there (multigpu50, seeds 42–44, core: 97.21 → 97.34 %).
// Counting every card of the node for a GPU pod too cost 0.8 on the spec=0.5 blend (seeds 42–47):
// it pushed shared pods onto the CPU-rich nodes whose cards the model-constrained pods needed.
func (s *fragState) shortfall(in *NodeInput) float64 {
	h := &in.Node.Host
	if !h.Known() || !leavesShareable(in) {
		return 0
	}
	sum, total := 0.0, 0.0
	for i := range s.idx.active {
		t := &s.idx.active[i]
		total += t.weight
		if t.whole {
			continue // ΔF counts them already (hostCapacity)
		}
		if g := sharedFree(in, &s.mix.Classes[s.idx.groups[t.group]]); g > 0 {
			sum += t.weight * (t.short(h, in.Plan.Host, g) - t.short(h, HostRequest{}, g))
		}
	}
	if total <= 0 {
		return 0
	}
	return sum / total
}

// leavesShareable reports whether some card shortfall could count has capacity left after the plan:
// any card for a plan without devices, else a card the plan holds a device on. A plan that takes
// its cards whole leaves none, and shortfall is 0 without walking the mix (most GPU placements).
func leavesShareable(in *NodeInput) bool {
	if len(in.Plan.Devices) == 0 {
		return true
	}
	for _, d := range in.Plan.Devices {
		if c := &in.Node.Cards[d.Card]; c.Healthy && !c.Instance() && c.Utilization(in.After(d.Card)) < 1 {
			return true
		}
	}
	return false
}

// sharedFree is shortfall's G for class t: the free capacity after the plan of the healthy cards t
// accepts, only those the plan holds a device on when it holds any.
func sharedFree(in *NodeInput, t *TaskClass) float64 {
	g := 0.0
	for j := range in.Node.Cards {
		c := &in.Node.Cards[j]
		if !c.Healthy || c.Instance() || !t.Accepts(c) || (len(in.Plan.Devices) > 0 && !in.Plan.holds(j)) {
			continue
		}
		g += 1 - c.Utilization(in.After(j))
	}
	return g
}

// short is the free GPU capacity g (in cards) of a node that pods of the class could not reach for
// want of the CPU and memory h has free less extra (see fragState.shortfall).
func (t *fragClass) short(h *HostState, extra HostRequest, g float64) float64 {
	pods := math.Inf(1)
	if h.AllocCPUMilli > 0 && t.cpu > 0 {
		pods = float64(max(h.AllocCPUMilli-h.UsedCPUMilli-extra.CPUMilli, 0)) / float64(t.cpu)
	}
	if h.AllocMemMiB > 0 && t.mem > 0 {
		pods = min(pods, float64(max(h.AllocMemMiB-h.UsedMemMiB-extra.MemMiB, 0))/float64(t.mem))
	}
	return max(g-pods*t.share*float64(t.cards), 0)
}

// fragAwareCard scores one card for one device by the change of the node's expected fragmentation
// when this card goes from Before to After (the other cards as they are).
func fragAwareCard(in *CardInput) float64 {
	if in.Mix == nil || in.Mix.Total <= 0 || in.Card.Instance() {
		return binpackCard(in)
	}
	s := in.frag.get()
	s.prepare(in.Node, in.Mix, in.frag.fitOf())
	tie := fragTieBreak * in.Card.Utilization(in.After)
	key, memo := s.memoKey(in)
	if memo {
		for i := range s.memo {
			if s.memo[i].key == key {
				return s.memo[i].score + tie
			}
		}
		if len(s.memo) == cap(s.memo) && len(s.memo) >= fragMemo {
			s.memo = s.memo[:0]
		}
	}
	s.clearList()
	for j := range in.Node.Cards {
		if &in.Node.Cards[j] != in.Card {
			s.push(s.of[j])
		}
	}
	free := s.sums()
	// The card before and after, as views of the table (whose hosting bits are known).
	var kb int
	if key.view >= 0 && in.Before == in.Card.Usage {
		kb = key.view
	} else {
		kb = s.find(in.Card, in.Before)
	}
	ka := s.find(in.Card, in.After)
	b, a := &s.views[kb], &s.views[ka]
	// Each group's sums with the card added, before and after: among the cards that host the
	// group, or its free capacity among the fragmented.
	totalBefore, totalAfter := free+b.free, free+a.free
	for g := range s.idx.groups {
		word, bit := g/64, uint64(1)<<(g%64)
		e := &s.ends[g]
		e.countBefore, e.fragBefore, e.countAfter, e.fragAfter = s.count[g], s.frag[g], s.count[g], s.frag[g]
		if s.host[kb*s.words+word]&bit != 0 {
			e.countBefore++
		} else {
			e.fragBefore += b.free
		}
		if s.host[ka*s.words+word]&bit != 0 {
			e.countAfter++
		} else {
			e.fragAfter += a.free
		}
	}
	caps := s.hostCaps(&in.Node.Host, in.Host)
	delta, total := 0.0, 0.0
	for i := range s.idx.active {
		t := &s.idx.active[i]
		total += t.weight
		if caps[i] <= 0 {
			// The class cannot run on the node once the pod is there: all free capacity counts.
			delta += t.weight * (a.free - b.free)
			continue
		}
		e := &s.ends[t.group]
		fb := t.fragOf(e.countBefore, e.fragBefore, totalBefore, caps[i])
		fa := t.fragOf(e.countAfter, e.fragAfter, totalAfter, caps[i])
		delta += t.weight * (fa - fb)
	}
	score := -delta / total
	if memo {
		s.memo = append(s.memo, cardMemo{key: key, score: score})
	}
	return score + tie
}

// cardKey is what a card score reads: the card's view and whether it is the first card of the
// node in that view (the other cards' views, in the order of their first appearance, are then the
// same for every card with an equal key), what the view does not fix of the card, its usage before
// and after, and the node's and the pod's CPU and memory.
type cardKey struct {
	view          int
	first         bool
	slots         int
	healthy       bool
	before, after Usage
	host          HostState
	pod           HostRequest
}

// cardMemo is the fragmentation part of a card score, −ΔF/Σw, for a key.
type cardMemo struct {
	key   cardKey
	score float64
}

// memoKey returns the key of the card scored by in, false (and view −1) when the card is not one of
// the node's.
func (s *fragState) memoKey(in *CardInput) (cardKey, bool) {
	for i := range in.Node.Cards {
		if c := &in.Node.Cards[i]; c == in.Card {
			k := s.of[i]
			return cardKey{view: k, first: s.first[k] == i, slots: c.Slots(), healthy: c.Healthy, before: in.Before, after: in.After,
				host: in.Node.Host, pod: in.Host}, true
		}
	}
	return cardKey{view: -1}, false
}

// fragIndex is what the policy reads of a mix: the classes that count (fragMinShare), in the mix's
// order, each with its weight and hosting group. Classes that differ only in card count or host CPU
// and memory host a device on exactly the same cards (cardView.hosts), so a walk over a node's
// cards serves the whole group. TaskMix.Add rebuilds it.
type fragIndex struct {
	// built, total and classes say for which mix it was built (TaskMix.Total, len(Classes)).
	built   bool
	total   float64
	classes int
	active  []fragClass
	// groups holds, per group, the index in TaskMix.Classes of its first class.
	groups []int
	// kinds is build's buffer (fragKind).
	kinds []fragKind
}

// fragKind is a kind of GPU request (sameKind) while fragIndex.build reads the mix: its heaviest
// class (the first of equals), its classes' summed weight, and whether one of them counts alone.
type fragKind struct {
	top    int
	weight float64
	seen   bool
}

// fragClass is a class that counts: what the policy reads of it.
type fragClass struct {
	weight   float64
	cards    int
	whole    bool
	cpu, mem int64
	group    int
	// share is the part of a card one device of the class takes: 1 for whole cards, else its
	// compute share (Cores), else its memory share when given in percent, else 1.
	share float64
}

func (x *fragIndex) build(m *TaskMix) {
	x.built, x.total, x.classes = true, m.Total, len(m.Classes)
	x.active, x.groups, x.kinds = x.active[:0], x.groups[:0], x.kinds[:0]
	least := fragMinShare * m.Total
	for ci := range m.Classes {
		t := &m.Classes[ci]
		if len(t.Models) == 0 {
			continue
		}
		k := slices.IndexFunc(x.kinds, func(k fragKind) bool { return sameKind(&m.Classes[k.top], t) })
		if k < 0 {
			k = len(x.kinds)
			x.kinds = append(x.kinds, fragKind{top: ci})
		}
		e := &x.kinds[k]
		e.weight += t.Weight
		e.seen = e.seen || t.Weight >= least
		if t.Weight > m.Classes[e.top].Weight {
			e.top = ci
		}
	}
	for ci := range m.Classes {
		t := &m.Classes[ci]
		w := t.Weight
		if w < least || w <= 0 {
			// Counted only as the heaviest class of an unseen model-constrained kind that is not rare.
			k := slices.IndexFunc(x.kinds, func(k fragKind) bool { return k.top == ci })
			if k < 0 || x.kinds[k].seen || x.kinds[k].weight < least || w <= 0 {
				continue
			}
			w = x.kinds[k].weight
		}
		g := slices.IndexFunc(x.groups, func(r int) bool { return sameHosting(&m.Classes[r], t) })
		if g < 0 {
			g = len(x.groups)
			x.groups = append(x.groups, ci)
		}
		x.active = append(x.active, fragClass{weight: w, cards: t.Cards, whole: t.Whole, cpu: t.HostCPUMilli, mem: t.HostMemMiB, group: g,
			share: classShare(t)})
	}
}

// sameKind reports whether classes a and b ask the same of the cards (they differ at most in host
// CPU and memory).
func sameKind(a, b *TaskClass) bool {
	return a.Cards == b.Cards && sameHosting(a, b)
}

// sameHosting reports whether classes a and b host a device on the same cards (cardView.hosts).
func sameHosting(a, b *TaskClass) bool {
	return a.Whole == b.Whole && a.Cores == b.Cores && a.MemMiB == b.MemMiB && a.MemPercent == b.MemPercent &&
		slices.Equal(a.Models, b.Models)
}

// fragState is the policy's working state for one node: its distinct card states (views), which
// hosting groups each one hosts, and buffers. The Scratch keeps one, so that the card scores of a
// Fit and the node score after it share the work; it rebuilds itself when the node, its cards'
// usage or the mix changed. The zero value is ready.
type fragState struct {
	node    *NodeState
	mix     *TaskMix
	fit     uint64  // the Fit call (fragKeep.fit) that last checked the cards' usage; 0: none
	total   float64 // mix.Total and len(mix.Classes) when built
	classes int
	usage   []Usage // the cards' usage when built
	idx     *fragIndex
	own     fragIndex // the index, when the mix's is stale (a mix changed other than by Add)

	// views are the distinct card states: first the node's cards' in order of first appearance
	// (nodeViews of them), then others met since (after a plan). host holds words bits per view,
	// bit g set when the view hosts group g; n is how many of the node's cards are in each view,
	// and of is each card's view.
	views     []cardView
	host      []uint64
	words     int
	n         []int
	nodeViews int
	of        []int

	// list is the views being summed, in order of first appearance, with their counts; at is
	// each view's place in list (-1: not in it).
	list []viewCount
	at   []int
	// first is, per view of the node's cards, the first card in it; memo holds the card scores
	// taken since prepare built the state.
	first []int
	memo  []cardMemo
	// Per group: the cards of list that host it and the free capacity of those that do not
	// (sums), and whether the scored card hosts it before and after.
	count []int
	frag  []float64
	// fs is, per entry of list, its free capacity; ends, per group, the sums with the scored card
	// added before and after; caps, per counted class, its host capacity (hostCapacity) on the
	// node's CPU and memory less a pod's, for two node and pod pairs (the node score asks with and
	// without the pod).
	fs   []float64
	ends []groupEnds
	caps [2]hostCaps

	// The first buffers of the slices above, so that a fragState new to a node of up to
	// fragStackCards cards and a mix of up to fragStackGroups groups allocates nothing more.
	bufViews        [2 * fragStackCards]cardView
	bufUsage        [fragStackCards]Usage
	bufHost         [2 * fragStackCards]uint64
	bufN, bufAt     [2 * fragStackCards]int
	bufOf, bufFirst [fragStackCards]int
	bufMemo         [fragStackCards]cardMemo
	bufList         [fragStackCards]viewCount
	bufFS           [fragStackCards]float64
	bufCount        [fragStackGroups]int
	bufFrag         [fragStackGroups]float64
	bufEnds         [fragStackGroups]groupEnds
	bufCaps         [2][2 * fragStackGroups]float64
}

// hostCaps is, per counted class, its host capacity (fragClass.hostCapacity) on a node's CPU and
// memory (host) less a pod's (pod); ok is false until computed since fragState.prepare built the
// state.
type hostCaps struct {
	ok   bool
	last bool // the last one filled of fragState.caps
	host HostState
	pod  HostRequest
	caps []float64
}

// groupEnds are a group's sums (count and frag of fragState.sums) with the scored card added, in
// its usage before and after.
type groupEnds struct {
	countBefore, countAfter int
	fragBefore, fragAfter   float64
}

// fragStackCards and fragStackGroups size the buffers a fragState starts with; fragMoreViews and
// fragMemo bound what it keeps between rebuilds.
const (
	fragStackCards  = 16
	fragStackGroups = 32
	fragMoreViews   = 64
	fragMemo        = 64
)

type viewCount struct{ view, n int }

// fragKeep holds a fragState for a Scratch, made on first use so that other policies do not pay for
// it. fit counts the Scratch's Fit calls: within one, the node does not change.
type fragKeep struct {
	s   *fragState
	fit uint64
}

// fitOf returns the Fit call the card scores come from, 0 when not known (nothing kept).
func (k *fragKeep) fitOf() uint64 {
	if k == nil {
		return 0
	}
	return k.fit
}

// get returns the kept fragState, or a new one when k is nil (nothing kept).
func (k *fragKeep) get() *fragState {
	if k == nil {
		return &fragState{}
	}
	if k.s == nil {
		k.s = &fragState{}
	}
	return k.s
}

// prepare makes s describe node n under mix m. fit, when not 0, is the Fit call asking: the cards'
// usage was checked already when an earlier call of the same Fit was for the same node.
func (s *fragState) prepare(n *NodeState, m *TaskMix, fit uint64) {
	// Views met after the node's own (plans, cards before and after a device) stay until a rebuild,
	// at most fragMoreViews of them.
	if s.node == n && s.mix == m && s.total == m.Total && s.classes == len(m.Classes) && len(s.usage) == len(n.Cards) &&
		len(s.views) <= s.nodeViews+fragMoreViews {
		if fit != 0 && fit == s.fit {
			return
		}
		same := true
		for i := range n.Cards {
			if n.Cards[i].Usage != s.usage[i] {
				same = false
				break
			}
		}
		if same {
			s.fit = fit
			return
		}
	}
	s.fit = fit
	if s.views == nil {
		s.views, s.usage, s.host, s.n, s.of, s.at = s.bufViews[:0], s.bufUsage[:0], s.bufHost[:0], s.bufN[:0], s.bufOf[:0], s.bufAt[:0]
		s.list, s.count, s.frag = s.bufList[:0], s.bufCount[:0], s.bufFrag[:0]
		s.first, s.memo = s.bufFirst[:0], s.bufMemo[:0]
		s.fs, s.ends, s.caps[0].caps, s.caps[1].caps = s.bufFS[:0], s.bufEnds[:0], s.bufCaps[0][:0], s.bufCaps[1][:0]
	}
	s.node, s.mix, s.total, s.classes = n, m, m.Total, len(m.Classes)
	s.idx = m.fragIndex(&s.own)
	groups := len(s.idx.groups)
	s.words = (groups + 63) / 64
	s.count, s.frag = resize(s.count, groups), resize(s.frag, groups)
	s.ends, s.caps[0].ok, s.caps[1].ok = resize(s.ends, groups), false, false
	s.usage, s.views, s.host, s.n, s.of = s.usage[:0], s.views[:0], s.host[:0], s.n[:0], s.of[:0]
	s.list, s.at, s.first, s.memo = s.list[:0], s.at[:0], s.first[:0], s.memo[:0]
	for i := range n.Cards {
		c := &n.Cards[i]
		s.usage = append(s.usage, c.Usage)
		k := s.sameAsPrevious(i)
		if k < 0 {
			k = s.find(c, c.Usage)
		}
		if k == len(s.first) {
			s.first = append(s.first, i)
		}
		s.n[k]++
		s.of = append(s.of, k)
	}
	s.nodeViews = len(s.views)
}

// sameAsPrevious returns the view of card i−1 when card i is of the same kind and in the same
// usage (then its view is the same), else -1.
func (s *fragState) sameAsPrevious(i int) int {
	if i == 0 {
		return -1
	}
	c, e := &s.node.Cards[i], &s.node.Cards[i-1]
	if e.Usage == c.Usage && e.MemoryMiB == c.MemoryMiB && e.Shares == c.Shares && e.Healthy == c.Healthy && e.modelLower == c.modelLower &&
		e.Instance() == c.Instance() {
		return s.of[i-1]
	}
	return -1
}

// find returns the view of card c in usage u, adding it when it is new.
func (s *fragState) find(c *Card, u Usage) int {
	v := newView(c, u)
	for k := range s.views {
		if s.views[k].same(&v) {
			return k
		}
	}
	s.views, s.n, s.at = append(s.views, v), append(s.n, 0), append(s.at, -1)
	at := len(s.host)
	for range s.words {
		s.host = append(s.host, 0)
	}
	for g, ci := range s.idx.groups {
		if v.hosts(&s.mix.Classes[ci]) {
			s.host[at+g/64] |= 1 << (g % 64)
		}
	}
	return len(s.views) - 1
}

// push adds one card of view k to list.
func (s *fragState) push(k int) {
	if p := s.at[k]; p >= 0 {
		s.list[p].n++
		return
	}
	s.at[k] = len(s.list)
	s.list = append(s.list, viewCount{view: k, n: 1})
}

func (s *fragState) clearList() {
	for _, e := range s.list {
		s.at[e.view] = -1
	}
	s.list = s.list[:0]
}

// listNode lists the node's cards as they are.
func (s *fragState) listNode() {
	s.clearList()
	for k := 0; k < s.nodeViews; k++ {
		s.at[k] = len(s.list)
		s.list = append(s.list, viewCount{view: k, n: s.n[k]})
	}
}

// listAfter lists the node's cards once the plan is applied.
func (s *fragState) listAfter(in *NodeInput) {
	s.clearList()
	for i := range in.Node.Cards {
		c := &in.Node.Cards[i]
		k := s.of[i]
		if u := in.After(i); u != c.Usage {
			k = s.find(c, u)
		}
		s.push(k)
	}
}

// sums walks list as classFrag would for each group: it returns the free capacity of every card
// listed and sets, per group, the cards that host it (count) and the free capacity of those that
// do not (frag), each sum taken in list order.
func (s *fragState) sums() float64 {
	total := 0.0
	s.fs = s.fs[:0]
	for _, e := range s.list {
		f := s.views[e.view].free * float64(e.n)
		s.fs = append(s.fs, f)
		total += f
	}
	for g := range s.count {
		count, frag := 0, 0.0
		word, bit := g/64, uint64(1)<<(g%64)
		for i, e := range s.list {
			if s.host[e.view*s.words+word]&bit != 0 {
				count += e.n
			} else {
				frag += s.fs[i]
			}
		}
		s.count[g], s.frag[g] = count, frag
	}
	return total
}

// hostCaps returns, per counted class, its host capacity on node CPU and memory h less the pod's.
func (s *fragState) hostCaps(h *HostState, pod HostRequest) []float64 {
	for i := range s.caps {
		if c := &s.caps[i]; c.ok && c.host == *h && c.pod == pod {
			return c.caps
		}
	}
	// Fill the one not filled last.
	c := &s.caps[0]
	if c.last {
		c = &s.caps[1]
	}
	s.caps[0].last, s.caps[1].last = false, false
	c.ok, c.last, c.host, c.pod, c.caps = true, true, *h, pod, c.caps[:0]
	for i := range s.idx.active {
		c.caps = append(c.caps, s.idx.active[i].hostCapacity(h, pod))
	}
	return c.caps
}

// expected is F(M) of the listed cards, in cards, on a node with host resources h less extra.
func (s *fragState) expected(h *HostState, extra HostRequest) float64 {
	total := s.sums()
	caps := s.hostCaps(h, extra)
	sum, weight := 0.0, 0.0
	for i := range s.idx.active {
		t := &s.idx.active[i]
		weight += t.weight
		sum += t.weight * t.fragOf(s.count[t.group], s.frag[t.group], total, caps[i])
	}
	if weight == 0 {
		return 0
	}
	return sum / weight
}

// cardView is what fragmentation needs of one card in one usage.
type cardView struct {
	card *Card
	// free is the card's free capacity in cards, in [0, 1]; 0 when unhealthy or held whole.
	free      float64
	freeMem   int64
	freeCores int
	freeSlots int
	held      int
	whole     bool
}

func newView(c *Card, u Usage) cardView {
	// A MIG instance hosts no class of the mix (the mix counts card requests only), like a card
	// held whole; its parent is unhealthy.
	v := cardView{card: c, held: u.Held, whole: u.Whole > 0 || !c.Healthy || c.Instance()}
	if v.whole {
		return v
	}
	v.free = 1 - c.Utilization(u)
	v.freeMem = max(c.MemoryMiB-u.MemMiB, 0)
	v.freeCores = max(100-u.Cores, 0)
	v.freeSlots = max(c.Slots()-u.Held, 0)
	return v
}

// same reports whether views w and v count alike: same free capacity, model and memory, so that
// every class is hosted by both or neither.
func (w *cardView) same(v *cardView) bool {
	return w.free == v.free && w.freeMem == v.freeMem && w.freeCores == v.freeCores && w.freeSlots == v.freeSlots &&
		w.held == v.held && w.whole == v.whole && w.card.MemoryMiB == v.card.MemoryMiB && w.card.modelLower == v.card.modelLower
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

// classShare is fragClass.share of t.
func classShare(t *TaskClass) float64 {
	switch {
	case t.Whole:
		return 1
	case t.Cores > 0 && t.Cores < 100:
		return float64(t.Cores) / 100
	case t.MemPercent > 0 && t.MemPercent < 100:
		return float64(t.MemPercent) / 100
	}
	return 1
}
