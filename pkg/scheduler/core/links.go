package core

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Links between a node's cards (the inventory's links: NVLink, NVSwitch, the PCIe hierarchy) steer
// where a container's cards go; they never override a hard rule. Every filter of Fit (selector,
// health, room, numa-bind, the kubelet model) decides which cards a container may have; links
// only choose among them:
//
//   - a container of k >= 2 cards gets the best-linked set of k among its candidates (quality: the
//     worst pair's class first, so all pairs NVLink wins, then the sum of the pairs' classes, then
//     the most NVLink pairs), ties going to the card strategy's ranking. On a node whose NUMA nodes could each hold the
//     container, the NUMA node with the best-linked set wins before the card strategy's choice.
//     Sets are enumerated when there are few (at most maxEnumerated); otherwise a greedy search
//     grows a set from each of a few seeds (at most greedySeeds, fewer on large nodes: see greedy),
//     adding the card best linked to the set so far. Up to maxDegreeScan
//     candidates, the greedy search finds an all-NVLink set whenever NVLink joins cards in cliques
//     (NVSwitch domains, bridged pairs or quads), the shapes real nodes have; beyond, it may miss
//     one (the seeds are then the best-ranked candidates).
//   - a container of one card (whole or shared) takes, among the cards its strategy scores
//     equally best, the one whose use breaks the fewest well-linked sets (breakage): a card
//     already in use breaks nothing; a free card breaks its free NVLink partners' pairs, then
//     its free partners under one PCIe switch. So single-card pods fill broken NVLink pairs first.
//   - the pod annotation cardinal.io/gpu-link: nvlink makes "every pair NVLink" a hard rule for
//     each container of two cards or more (ReasonNVLink).
//   - the node score (Pod.Score) loses up to linkPenalty for a plan that uses the node's links
//     badly (linkScore: its multi-card containers' link quality, and the NVLink pairs it breaks),
//     so a 4-card pod goes where 4 linked cards are free, and a pod that needs no NVLink goes where
//     it breaks none. A node that publishes no links loses nothing (nothing is known).
//
// A MIG instance has its parent card's links; two instances of one card are linked as well as
// can be (classNVLink).

// Link classes of a pair of cards, best first.
const (
	classNVLink     uint8 = iota // NVLink, directly or through NVSwitch
	classBoard                   // PCIe: one board
	classSwitch                  // PCIe: one switch
	classSwitches                // PCIe: several switches
	classHostBridge              // PCIe: one host bridge
	classNUMA                    // PCIe: host bridges of one NUMA node
	classSystem                  // PCIe: across sockets
	classUnknown                 // not published
)

// classWorst is the worst class (unknown).
const classWorst = classUnknown

// maxEnumerated bounds the number of sets takeLinked enumerates; above it, it searches greedily.
const maxEnumerated = 1024

// greedySeeds bounds the candidates the greedy search starts from; maxDegreeScan bounds the
// candidates whose NVLink partners it counts to choose them.
const (
	greedySeeds   = 16
	maxDegreeScan = 256
	// greedyBudget bounds seeds × k × candidates (fewer seeds on large nodes).
	greedyBudget = 1 << 14
)

// classOf is the class of a published link.
func classOf(l *annotations.Link) uint8 {
	if l.NVLink() {
		return classNVLink
	}
	if i := slices.Index(annotations.PCIeLevels, l.PCIe); i >= 0 {
		return classBoard + uint8(i)
	}
	return classUnknown
}

// linkMatrix is a node's links: class[a*n+b] for the cards (not MIG instances) a and b, by their
// position in the inventory. Built once per inventory and shared by clones.
type linkMatrix struct {
	n     int
	class []uint8
	// pos is each of NodeState.Cards' position in the inventory (a MIG instance: its parent's).
	pos []int
	// nvlink is true when some pair is NVLink-connected.
	nvlink bool
}

// newLinkMatrix reads the inventory's links for node s (its cards built); nil when it has none.
func newLinkMatrix(inv *annotations.Inventory, s *NodeState) *linkMatrix {
	if len(inv.Links) == 0 {
		return nil
	}
	n := len(inv.GPUs)
	m := &linkMatrix{n: n, class: make([]uint8, n*n)}
	for i := range m.class {
		m.class[i] = classUnknown
	}
	for i := range n {
		m.class[i*n+i] = classNVLink
	}
	for i := range inv.Links {
		l := &inv.Links[i]
		if l.A < 0 || l.B < 0 || l.A >= n || l.B >= n {
			continue // the inventory decoder refuses this
		}
		c := classOf(l)
		m.class[l.A*n+l.B], m.class[l.B*n+l.A] = c, c
		if c == classNVLink {
			m.nvlink = true
		}
	}
	m.pos = make([]int, len(s.Cards))
	for i := range s.Cards {
		p := i
		if s.Cards[i].Instance() {
			p = s.Cards[i].parent
		}
		if p >= n {
			return nil // not a node DecodeInventory accepts
		}
		m.pos[i] = p
	}
	return m
}

// HasLinks reports whether the node's inventory publishes links between its cards.
func (n *NodeState) HasLinks() bool { return n.links != nil }

// linkClass is the class of the link between cards i and j of n (MIG instances by their parent);
// the node must have links.
func (n *NodeState) linkClass(i, j int) uint8 {
	m := n.links
	return m.class[m.pos[i]*m.n+m.pos[j]]
}

// SameLinks reports whether n and o have the same links between their cards (none included).
func (n *NodeState) SameLinks(o *NodeState) bool {
	a, b := n.links, o.links
	if a == nil || b == nil {
		return a == b
	}
	return a.n == b.n && slices.Equal(a.class, b.class)
}

// AppendLinksKey appends the node's links to a key of its state (see the extender's cache): two
// nodes whose keys are equal get the same verdict and plan positions.
func (n *NodeState) AppendLinksKey(b []byte) []byte {
	if n.links == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(n.links.n))
	return append(b, n.links.class...)
}

// quality is how well a set of cards is linked: the worst pair's class, then the sum of the
// pairs' classes (lower is better), then the number of NVLink pairs (higher is better).
type quality struct {
	worst  uint8
	sum    int
	nvlink int
}

func (q quality) better(o quality) bool {
	switch {
	case q.worst != o.worst:
		return q.worst < o.worst
	case q.sum != o.sum:
		return q.sum < o.sum
	}
	return q.nvlink > o.nvlink
}

// add counts a pair of class c.
func (q *quality) add(c uint8) {
	q.worst = max(q.worst, c)
	q.sum += int(c)
	if c == classNVLink {
		q.nvlink++
	}
}

// allNVLink reports whether every pair of the set is NVLink-connected.
func (q quality) allNVLink() bool { return q.worst == classNVLink }

// setQuality is the quality of the cards set (indexes into n.Cards).
func (n *NodeState) setQuality(set []int) quality {
	var q quality
	for x := range set {
		for y := x + 1; y < len(set); y++ {
			q.add(n.linkClass(set[x], set[y]))
		}
	}
	return q
}

// linkScore is, for a plan on n (which has links), how well it uses them, in [0, 1] (1: as well
// as can be): the mean over the plan's containers of two cards or more of their link quality (1
// when every pair is NVLink, down to 0 when the worst pair and the mean pair are unknown), less up
// to breakWeight for the NVLink pairs the plan breaks: pairs between a card it takes that was free
// and a free card it leaves, as a share of the most it could break there. So of two nodes that
// give a 2-card pod NVLink, the one where it takes a bridged pair beats the NVSwitch node, which
// stays whole for a larger pod; and a single card goes where it breaks no pair.
func (n *NodeState) linkScore(p *Plan, buf []int) float64 {
	sum, count := 0.0, 0
	for _, c := range p.Containers {
		if len(c.Devices) < 2 {
			continue
		}
		count++
		buf = buf[:0]
		for _, di := range c.Devices {
			buf = append(buf, p.Devices[di].Card)
		}
		q := n.setQuality(buf)
		pairs := len(buf) * (len(buf) - 1) / 2
		mean := float64(q.sum) / float64(pairs)
		sum += 1 - (float64(q.worst)+mean)/(2*float64(classWorst))
	}
	score := 1.0
	if count > 0 {
		score = sum / float64(count)
	}
	// The cards the plan takes that were free, and the free cards it leaves.
	taken, left, broken := 0, 0, 0
	for i := range n.Cards {
		c := &n.Cards[i]
		if c.Instance() || c.MIG != nil || !c.Healthy || c.Held > 0 {
			continue
		}
		if !planHolds(p, i) {
			left++
			continue
		}
		taken++
		for j := range n.Cards {
			o := &n.Cards[j]
			if j != i && !o.Instance() && o.MIG == nil && o.Healthy && o.Held == 0 && !planHolds(p, j) && n.linkClass(i, j) == classNVLink {
				broken++
			}
		}
	}
	if taken > 0 && left > 0 {
		score -= breakWeight * float64(broken) / float64(taken*left)
	}
	return max(score, 0)
}

// planHolds reports whether plan p holds a device of card i.
func planHolds(p *Plan, i int) bool {
	for _, d := range p.Devices {
		if d.Card == i {
			return true
		}
	}
	return false
}

// linkPenalty is how much of the node score (of MaxScore) a plan loses when it uses the node's
// links as badly as can be (linkScore 0); breakWeight is the share of linkScore that breaking
// NVLink pairs can take.
const (
	linkPenalty = 0.5 * MaxScore
	breakWeight = 0.1
)

// breakage is how many well-linked sets using card i (free for this pod) breaks: 0 for a card
// already in use; else its free NVLink partners, weighted above its free partners under one PCIe
// switch (board, switch). Lower is better.
func (f *fit) breakage(i int) int {
	n := f.node
	if n.Cards[i].Instance() || n.Cards[i].Held+f.extra[i].Held > 0 {
		return 0 // a MIG instance is chosen by its parent's use alone
	}
	nv, sw := 0, 0
	for j := range n.Cards {
		if j == i || !f.ok[j] || n.Cards[j].Held+f.extra[j].Held > 0 || n.Cards[j].Instance() {
			continue
		}
		switch c := n.linkClass(i, j); {
		case c == classNVLink:
			nv++
		case c <= classSwitch:
			sw++
		}
	}
	return nv*(len(n.Cards)+1) + sw
}

// takeOne picks the single card to take among the ranked candidates eligible (on NUMA node numa
// unless any): of those the card strategy scores equally best, the one with the least breakage.
func (f *fit) takeOne(numa int, any bool) []int {
	f.picked = f.picked[:0]
	best, bestScore, bestBreak := -1, 0.0, 0
	for _, o := range f.order {
		i := f.cand[o]
		if !any && f.node.Cards[i].NUMA != numa {
			continue
		}
		if best >= 0 && f.score[o] != bestScore {
			break
		}
		b := f.breakage(i)
		if best < 0 || b < bestBreak {
			best, bestScore, bestBreak = i, f.score[o], b
		}
		if b == 0 {
			break
		}
	}
	if best >= 0 {
		f.picked = append(f.picked, best)
	}
	return f.picked
}

// takeLinked picks k cards among the ranked candidates eligible (on NUMA node numa unless any)
// that, with the container's cards so far (fixed, indexes into n.Cards), are best linked; ties
// go to the ranking. It returns the set's quality with fixed.
func (f *fit) takeLinked(k, numa int, any bool, fixed []int) ([]int, quality) {
	f.elig = f.elig[:0]
	for _, o := range f.order {
		if i := f.cand[o]; any || f.node.Cards[i].NUMA == numa {
			f.elig = append(f.elig, i)
		}
	}
	f.picked = f.picked[:0]
	if len(f.elig) < k {
		return f.picked, quality{worst: classWorst + 1}
	}
	f.set = append(f.set[:0], fixed...)
	if len(f.elig) == k || combinations(len(f.elig), k) <= maxEnumerated {
		f.enumerate(k)
	} else {
		f.greedy(k, fixed)
	}
	f.set = append(f.set[:0], fixed...)
	f.set = append(f.set, f.picked...)
	return f.picked, f.node.setQuality(f.set)
}

// combinations is C(m, k), or maxEnumerated+1 when larger.
func combinations(m, k int) int {
	k = min(k, m-k)
	c := 1
	for i := 1; i <= k; i++ {
		c = c * (m - k + i) / i
		if c > maxEnumerated {
			return maxEnumerated + 1
		}
	}
	return c
}

// enumerate sets f.picked to the best-linked k of f.elig (with f.set's fixed cards), visiting sets
// in the ranking's lexicographic order so that the first best wins ties.
func (f *fit) enumerate(k int) {
	fixed := len(f.set)
	idx := f.idx[:0]
	for i := range k {
		idx = append(idx, i)
	}
	f.idx = idx
	var best quality
	found := false
	for {
		f.set = f.set[:fixed]
		for _, x := range idx {
			f.set = append(f.set, f.elig[x])
		}
		if q := f.node.setQuality(f.set); !found || q.better(best) {
			best, found = q, true
			f.picked = append(f.picked[:0], f.set[fixed:]...)
			if q.worst == classNVLink && q.sum == 0 {
				return
			}
		}
		// Next combination.
		i := k - 1
		for i >= 0 && idx[i] == len(f.elig)-k+i {
			i--
		}
		if i < 0 {
			return
		}
		idx[i]++
		for j := i + 1; j < k; j++ {
			idx[j] = idx[j-1] + 1
		}
	}
}

// greedy sets f.picked to a well-linked k of f.elig: from each of at most greedySeeds seeds (or
// from the fixed cards alone), it adds the candidate whose quality with the set so far is best
// (ties: the ranking), and keeps the best set found. Each candidate's classes to the set are kept
// as the set grows: O(seeds × k × candidates). Seeds are the candidates with at least k−1 NVLink
// partners among the candidates first (those that can be in an all-NVLink set), then the rest, in
// the ranking's order; counting partners costs candidates²/2, done only up to maxDegreeScan of them.
func (f *fit) greedy(k int, fixed []int) {
	m := len(f.elig)
	seeds := min(m, greedySeeds, max(greedyBudget/(k*m), 1))
	if len(fixed) > 0 {
		seeds = 1
	}
	f.idx = f.idx[:0]
	if len(fixed) == 0 && m <= maxDegreeScan {
		f.deg = resize(f.deg, m)
		for x, i := range f.elig {
			for y := x + 1; y < m; y++ {
				if f.node.linkClass(i, f.elig[y]) == classNVLink {
					f.deg[x]++
					f.deg[y]++
				}
			}
		}
		for pass := 0; pass < 2 && len(f.idx) < seeds; pass++ {
			for x := range f.elig {
				if (f.deg[x] >= k-1) == (pass == 0) {
					f.idx = append(f.idx, x)
					if len(f.idx) == seeds {
						break
					}
				}
			}
		}
	} else {
		for x := range seeds {
			f.idx = append(f.idx, x)
		}
	}
	var best quality
	found := false
	f.taken = resize(f.taken, len(f.elig))
	f.toSet = resize(f.toSet, len(f.elig))
	for _, s := range f.idx[:seeds] {
		clear(f.taken)
		clear(f.toSet)
		f.set = f.set[:0]
		add := func(i int) {
			f.set = append(f.set, i)
			for x, j := range f.elig {
				f.toSet[x].add(f.node.linkClass(i, j))
			}
		}
		for _, i := range fixed {
			add(i)
		}
		start := len(f.set)
		if len(fixed) == 0 {
			f.taken[s] = true
			add(f.elig[s])
		}
		for len(f.set)-start < k {
			bx := -1
			for x := range f.elig {
				if !f.taken[x] && (bx < 0 || f.toSet[x].better(f.toSet[bx])) {
					bx = x
				}
			}
			f.taken[bx] = true
			add(f.elig[bx])
		}
		if q := f.node.setQuality(f.set); !found || q.better(best) {
			best, found = q, true
			f.picked = append(f.picked[:0], f.set[start:]...)
		}
	}
	// The plan lists a container's cards in the ranking's order.
	clear(f.taken)
	for _, i := range f.picked {
		f.taken[slices.Index(f.elig, i)] = true
	}
	f.picked = f.picked[:0]
	for x, i := range f.elig {
		if f.taken[x] {
			f.picked = append(f.picked, i)
		}
	}
}

// requireNVLink enforces cardinal.io/gpu-link: nvlink on container c, whose cards are those of
// mine (reused) and chosen (k new ones): when they are not all pairwise NVLink-connected, it looks
// for an all-NVLink set across NUMA nodes (unless numa-bind), else refuses the node.
func (f *fit) requireNVLink(c *annotations.ContainerRequest, mine, chosen []int, k int) ([]int, *Reason) {
	f.fixed = f.fixed[:0]
	for _, di := range mine {
		f.fixed = append(f.fixed, f.plan.Devices[di].Card)
	}
	if f.node.links != nil {
		f.set = append(append(f.set[:0], f.fixed...), chosen...)
		if f.node.setQuality(f.set).allNVLink() {
			return chosen, nil
		}
		if !f.pod.Selector.NUMABind {
			if got, q := f.takeLinked(k, 0, true, f.fixed); q.allNVLink() {
				return got, nil
			}
		}
	}
	return nil, f.nvlinkReason(c, f.cand)
}

// checkNVLink enforces cardinal.io/gpu-link: nvlink on the devices mine of container c (the
// kubelet model's path, where the kubelet may hand devices over outright).
func (f *fit) checkNVLink(c *annotations.ContainerRequest, mine []int) *Reason {
	if f.pod.Selector.Link != annotations.LinkNVLink || c.Count < 2 {
		return nil
	}
	f.set = f.set[:0]
	for _, di := range mine {
		f.set = append(f.set, f.plan.Devices[di].Card)
	}
	if f.node.links != nil && f.node.setQuality(f.set).allNVLink() {
		return nil
	}
	return f.nvlinkReason(c, append(f.fixed[:0], f.set...))
}

// nvlinkReason is ReasonNVLink for container c, the free cards it could have being cands: Have is
// the largest NVLink group among them, Of the largest among the node's cards its selector accepts
// (healthy or not).
func (f *fit) nvlinkReason(c *annotations.ContainerRequest, cands []int) *Reason {
	r := &Reason{Kind: ReasonNVLink, Need: c.Count}
	n := f.node
	if n.links == nil {
		r.Detail = "node publishes no NVLink topology"
		return r
	}
	if !n.links.nvlink {
		r.Detail = "node has no NVLink between its cards"
		return r
	}
	var all []int
	for i := range n.Cards {
		// Healthy or not: a card that recovers may complete a group.
		if card := &n.Cards[i]; card.Serves(c) && f.pod.Accepts(card) {
			all = append(all, i)
		}
	}
	_, r.Of = n.nvlinkGroups(all)
	var groups string
	groups, r.Have = n.nvlinkGroups(cands)
	if groups == "" {
		r.Detail = "node has no free card"
	} else {
		r.Detail = fmt.Sprintf("its %s free form NVLink groups of %s", cards(len(cands)), groups)
	}
	return r
}

// nvlinkGroups describes the NVLink groups of the cards in cands (indexes into n.Cards): the
// sizes of the connected components of the NVLink graph, largest first, e.g. "2, 2 and 1", and
// the largest.
func (n *NodeState) nvlinkGroups(cands []int) (string, int) {
	comp := make([]int, len(cands))
	for i := range comp {
		comp[i] = i
	}
	find := func(x int) int {
		for comp[x] != x {
			comp[x] = comp[comp[x]]
			x = comp[x]
		}
		return x
	}
	for x := range cands {
		for y := x + 1; y < len(cands); y++ {
			if n.linkClass(cands[x], cands[y]) == classNVLink {
				comp[find(x)] = find(y)
			}
		}
	}
	size := map[int]int{}
	for x := range cands {
		size[find(x)]++
	}
	sizes := make([]int, 0, len(size))
	for _, s := range size {
		sizes = append(sizes, s)
	}
	slices.SortFunc(sizes, func(a, b int) int { return b - a })
	parts := make([]string, 0, reasonListEntries+1)
	for i, s := range sizes {
		if i == reasonListEntries+1 {
			parts = append(parts, fmt.Sprintf("%d more", len(sizes)-i))
			break
		}
		parts = append(parts, fmt.Sprint(s))
	}
	switch len(parts) {
	case 0:
		return "", 0
	case 1:
		return parts[0], sizes[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1], sizes[0]
}
