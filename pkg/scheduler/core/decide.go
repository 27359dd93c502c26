package core

import (
	"fmt"
	"slices"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Options configure a Decider: the policies used when a pod names none.
type Options struct {
	NodePolicy annotations.Policy
	GPUPolicy  annotations.Policy
}

// Decider holds the default policies. It is immutable and safe for concurrent use.
type Decider struct {
	nodePolicy annotations.Policy
	gpuPolicy  annotations.Policy
}

// New returns a Decider; an unknown or unimplemented policy is an error.
func New(o Options) (*Decider, error) {
	if _, err := lookup(nodeStrategies, o.NodePolicy, "node"); err != nil {
		return nil, err
	}
	if _, err := lookup(cardStrategies, o.GPUPolicy, "gpu"); err != nil {
		return nil, err
	}
	return &Decider{nodePolicy: o.NodePolicy, gpuPolicy: o.GPUPolicy}, nil
}

// Pod is a pod ready to be placed: its GPU request, its selector and the strategies its policies
// resolve to. Build it once with Decider.Prepare, then Fit and Score it against any number of
// nodes. It is immutable and safe for concurrent use.
type Pod struct {
	Request  annotations.PodRequest
	Selector annotations.Selector
	// NodePolicy and GPUPolicy are the policies in force (the pod's, else the Decider's).
	NodePolicy annotations.Policy
	GPUPolicy  annotations.Policy

	nodeScore NodeScoreFunc
	card      CardStrategy
	rules     string // the card rules of Selector, as a person writes them
}

// Prepare resolves a pod's policies. It fails when the pod names a policy this build cannot apply.
func (d *Decider) Prepare(req annotations.PodRequest, sel annotations.Selector) (*Pod, error) {
	cardRules := sel
	cardRules.NUMABind = false
	p := &Pod{Request: req, Selector: sel, NodePolicy: d.nodePolicy, GPUPolicy: d.gpuPolicy, rules: cardRules.String()}
	if sel.NodePolicy != "" {
		p.NodePolicy = sel.NodePolicy
	}
	if sel.GPUPolicy != "" {
		p.GPUPolicy = sel.GPUPolicy
	}
	var err error
	if p.nodeScore, err = lookup(nodeStrategies, p.NodePolicy, "node"); err != nil {
		return nil, fmt.Errorf("%s: %w", annotations.NodePolicy, err)
	}
	if p.card, err = lookup(cardStrategies, p.GPUPolicy, "gpu"); err != nil {
		return nil, fmt.Errorf("%s: %w", annotations.GPUPolicy, err)
	}
	return p, nil
}

// Device is one device ID a pod gets on a node.
type Device struct {
	// Card is the index of the card in NodeState.Cards.
	Card int
	// Slot is the share slot, -1 when the card is advertised by its UUID alone (Shares <= 1).
	Slot int
	// MemMiB and Cores are reserved on the card; for an ID several containers of the pod share (an
	// init container's, reused by an app container), the larger of their reservations.
	MemMiB int64
	Cores  int
}

// ContainerPlan is the devices one container gets, indexes into Plan.Devices.
type ContainerPlan struct {
	Name    string
	Init    bool
	Devices []int
}

// Plan is where a pod's GPU containers go on one node.
type Plan struct {
	// Containers follow the pod request's order: init containers first.
	Containers []ContainerPlan
	// Devices are the distinct device IDs the pod holds on the node.
	Devices []Device
}

// After returns the usage of card i of n once the plan is applied.
func (p *Plan) After(n *NodeState, i int) Usage {
	u := n.Cards[i].Usage
	for _, d := range p.Devices {
		if d.Card == i {
			u = u.plus(d.MemMiB, d.Cores)
		}
	}
	return u
}

func (u Usage) plus(mem int64, cores int) Usage {
	u.Held++
	u.MemMiB += mem
	u.Cores += cores
	if cores >= 100 {
		u.Whole++
	}
	return u
}

func (u Usage) add(o Usage) Usage {
	return Usage{MemMiB: u.MemMiB + o.MemMiB, Cores: u.Cores + o.Cores, Held: u.Held + o.Held, Whole: u.Whole + o.Whole}
}

// Assignment renders the plan as the cardinal.io/gpu-assignment record for node n.
func (p *Plan) Assignment(n *NodeState) annotations.Assignment {
	a := annotations.Assignment{V: annotations.Version, Node: n.Name, Containers: make([]annotations.ContainerAssignment, len(p.Containers))}
	for i, c := range p.Containers {
		ca := annotations.ContainerAssignment{Name: c.Name, Init: c.Init, Devices: make([]annotations.DeviceAssignment, len(c.Devices))}
		for j, di := range c.Devices {
			d := p.Devices[di]
			card := &n.Cards[d.Card]
			ca.Devices[j] = annotations.DeviceAssignment{UUID: card.UUID, ID: card.DeviceID(d.Slot), MemoryMiB: d.MemMiB, Cores: d.Cores}
		}
		a.Containers[i] = ca
	}
	return a
}

// Score rates a plan made by Fit on n by the pod's node policy: 0 to MaxScore.
func (p *Pod) Score(n *NodeState, plan *Plan, mix *TaskMix) float64 {
	return p.nodeScore(&NodeInput{Node: n, Plan: plan, Mix: mix})
}

// fit is the working state of one Fit call.
type fit struct {
	pod   *Pod
	node  *NodeState
	mix   *TaskMix
	plan  *Plan
	ok    []bool  // card is healthy and accepted by the selector
	extra []Usage // what this pod holds so far, per card
	cand  []int
	score []float64
}

// Fit decides whether the pod fits node n and on which cards: every GPU container is placed, or
// none (the Reason says why, for the first container that does not fit). App containers get the
// cards of finished init containers where the kubelet would hand them on: the kubelet takes
// devices of earlier non-sidecar init containers first and asks the plugin only for the rest.
// mix may be nil.
func (p *Pod) Fit(n *NodeState, mix *TaskMix) (*Plan, *Reason) {
	f := fit{pod: p, node: n, mix: mix, plan: &Plan{Containers: make([]ContainerPlan, 0, len(p.Request.Containers))},
		ok: make([]bool, len(n.Cards)), extra: make([]Usage, len(n.Cards))}
	match, healthy, unhealthyUUID := 0, 0, ""
	for i := range n.Cards {
		c := &n.Cards[i]
		if p.Selector.CheckLower(c.modelLower, c.UUID) != annotations.MatchOK {
			continue
		}
		match++
		if !c.Healthy {
			unhealthyUUID = c.UUID
			continue
		}
		healthy++
		f.ok[i] = true
	}
	var pool []int
	for ci := range p.Request.Containers {
		c := &p.Request.Containers[ci]
		if healthy < c.Count {
			return nil, f.reason(c, f.countReason(c, match, healthy, unhealthyUUID))
		}
		mine, r := f.reuse(c, pool)
		if r != nil {
			return nil, f.reason(c, r)
		}
		reused := len(mine)
		mine, r = f.pickNew(c, mine, healthy)
		if r != nil {
			return nil, f.reason(c, r)
		}
		f.plan.Containers = append(f.plan.Containers, ContainerPlan{Name: c.Name, Init: c.Init, Devices: mine})
		if c.Init && !c.Sidecar {
			pool = append(pool, mine[reused:]...)
		} else {
			pool = slices.DeleteFunc(pool, func(di int) bool { return slices.Contains(mine[:reused], di) })
		}
	}
	return f.plan, nil
}

func (f *fit) reason(c *annotations.ContainerRequest, r *Reason) *Reason {
	if len(f.pod.Request.Containers) > 1 {
		r.Container = c.Name
	}
	return r
}

func (f *fit) countReason(c *annotations.ContainerRequest, match, healthy int, unhealthyUUID string) *Reason {
	r := &Reason{Need: c.Count, Have: healthy, Of: match, Selector: f.pod.rules, Models: f.node.Models}
	switch {
	case match == 0:
		r.Kind = ReasonNoMatch
	case match >= c.Count:
		r.Kind = ReasonUnhealthy
		if match-healthy == 1 {
			r.UUID = unhealthyUUID
		}
	default:
		r.Kind = ReasonTooFewCards
	}
	return r
}

// reuse gives container c the devices the kubelet hands on from init containers (pool): all of
// them when they are no more than c needs, else the best of them by the card strategy.
func (f *fit) reuse(c *annotations.ContainerRequest, pool []int) ([]int, *Reason) {
	if len(pool) == 0 {
		return nil, nil
	}
	fits := make([]int, 0, len(pool))
	for _, di := range pool {
		if f.reuseFits(c, di) {
			fits = append(fits, di)
		}
	}
	if len(pool) <= c.Count {
		if len(fits) < len(pool) {
			return nil, &Reason{Kind: ReasonReuse}
		}
	} else {
		if len(fits) < c.Count {
			return nil, &Reason{Kind: ReasonReuse}
		}
		scores := make([]float64, len(fits))
		for i, di := range fits {
			d := f.plan.Devices[di]
			card := &f.node.Cards[d.Card]
			before := card.Usage.add(f.extra[d.Card])
			newMem, newCores := f.reused(c, d)
			after := before
			after.MemMiB += newMem - d.MemMiB
			after.Cores += newCores - d.Cores
			if newCores >= 100 && d.Cores < 100 {
				after.Whole++
			}
			scores[i] = f.pod.card.Score(&CardInput{Node: f.node, Card: card, Before: before, After: after, Request: c, Mix: f.mix})
		}
		order := make([]int, len(fits))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int {
			return compareScore(scores[a], scores[b], f.plan.Devices[fits[a]].Card, f.plan.Devices[fits[b]].Card)
		})
		picked := make([]int, c.Count)
		for i := range picked {
			picked[i] = fits[order[i]]
		}
		fits = picked
	}
	for _, di := range fits {
		d := &f.plan.Devices[di]
		newMem, newCores := f.reused(c, *d)
		e := &f.extra[d.Card]
		e.MemMiB += newMem - d.MemMiB
		e.Cores += newCores - d.Cores
		if newCores >= 100 && d.Cores < 100 {
			e.Whole++
		}
		d.MemMiB, d.Cores = newMem, newCores
	}
	return fits, nil
}

// reused is what device d reserves once container c shares it: the larger of both reservations.
func (f *fit) reused(c *annotations.ContainerRequest, d Device) (int64, int) {
	card := &f.node.Cards[d.Card]
	return max(d.MemMiB, c.MemoryOn(card.MemoryMiB)), max(d.Cores, c.CoresOn())
}

func (f *fit) reuseFits(c *annotations.ContainerRequest, di int) bool {
	d := f.plan.Devices[di]
	card := &f.node.Cards[d.Card]
	e := f.extra[d.Card]
	if !f.ok[d.Card] {
		return false
	}
	if c.Exclusive() {
		if card.Held != 0 || e.Held != 1 {
			return false
		}
	} else if card.Whole > 0 {
		return false
	}
	newMem, newCores := f.reused(c, d)
	return card.FreeMemMiB()-e.MemMiB >= newMem-d.MemMiB && card.FreeCores()-e.Cores >= newCores-d.Cores
}

// fits reports whether card i can take one more device of container c.
func (f *fit) fits(c *annotations.ContainerRequest, i int) bool {
	card := &f.node.Cards[i]
	e := f.extra[i]
	switch {
	case !f.ok[i], card.Whole+e.Whole > 0:
		return false
	case c.Exclusive():
		return card.Held+e.Held == 0
	}
	return f.hasSlot(i) &&
		card.FreeMemMiB()-e.MemMiB >= c.MemoryOn(card.MemoryMiB) &&
		card.FreeCores()-e.Cores >= c.CoresOn()
}

// pickNew adds the devices container c still needs beyond those in mine (reused ones), choosing
// cards by the card strategy within the best NUMA node.
func (f *fit) pickNew(c *annotations.ContainerRequest, mine []int, healthy int) ([]int, *Reason) {
	k := c.Count - len(mine)
	if k == 0 {
		return mine, nil
	}
	f.cand, f.score = f.cand[:0], f.score[:0]
	for i := range f.node.Cards {
		if !f.fits(c, i) || f.usedBy(mine, i) {
			continue
		}
		card := &f.node.Cards[i]
		before := card.Usage.add(f.extra[i])
		after := before.plus(c.MemoryOn(card.MemoryMiB), c.CoresOn())
		f.cand = append(f.cand, i)
		f.score = append(f.score, f.pod.card.Score(&CardInput{Node: f.node, Card: card, Before: before, After: after, Request: c, Mix: f.mix}))
	}
	if len(f.cand) < k {
		return nil, &Reason{Kind: ReasonNoCapacity, Need: c.Count, Have: len(f.cand) + len(mine), Of: healthy,
			Shared: !c.Exclusive(), MemMiB: c.MemoryMiB, MemPercent: c.MemoryPercent, Cores: c.Cores}
	}
	order := make([]int, len(f.cand))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return compareScore(f.score[a], f.score[b], f.cand[a], f.cand[b]) })
	chosen, r := f.chooseNUMA(c, mine, order, k)
	if r != nil {
		return nil, r
	}
	for _, i := range chosen {
		card := &f.node.Cards[i]
		mem, cores := c.MemoryOn(card.MemoryMiB), c.CoresOn()
		f.plan.Devices = append(f.plan.Devices, Device{Card: i, Slot: f.freeSlot(i), MemMiB: mem, Cores: cores})
		f.extra[i] = f.extra[i].plus(mem, cores)
		mine = append(mine, len(f.plan.Devices)-1)
	}
	return mine, nil
}

// chooseNUMA picks k cards from the ranked candidates (order indexes f.cand). A container of more
// than one card gets them on one NUMA node when some NUMA node has enough (required with
// numa-bind, preferred otherwise); cards it already has (reused) fix that NUMA node.
func (f *fit) chooseNUMA(c *annotations.ContainerRequest, mine []int, order []int, k int) ([]int, *Reason) {
	take := func(numa int, any bool) []int {
		out := make([]int, 0, k)
		for _, o := range order {
			if i := f.cand[o]; any || f.node.Cards[i].NUMA == numa {
				out = append(out, i)
				if len(out) == k {
					break
				}
			}
		}
		return out
	}
	if c.Count <= 1 {
		return take(0, true), nil
	}
	fixed, mixed, fixedN := 0, false, 0
	for j, di := range mine {
		n := f.node.Cards[f.plan.Devices[di].Card].NUMA
		if j == 0 {
			fixed = n
		} else if n != fixed {
			mixed = true
		}
		fixedN++
	}
	type group struct {
		numa, n int
		sum     float64
	}
	var groups []group
	for _, o := range order {
		numa := f.node.Cards[f.cand[o]].NUMA
		gi := slices.IndexFunc(groups, func(g group) bool { return g.numa == numa })
		if gi < 0 {
			groups = append(groups, group{numa: numa})
			gi = len(groups) - 1
		}
		g := &groups[gi]
		if g.n < k {
			g.sum += f.score[o]
		}
		g.n++
	}
	best, bestHave := -1, 0
	for gi, g := range groups {
		have := g.n
		if fixedN > 0 && !mixed && g.numa == fixed {
			have += fixedN
		}
		bestHave = max(bestHave, have)
		if g.n < k || mixed || (fixedN > 0 && g.numa != fixed) {
			continue
		}
		if best < 0 || f.betterGroup(g.sum, g.n, g.numa, groups[best].sum, groups[best].n, groups[best].numa) {
			best = gi
		}
	}
	if best >= 0 {
		return take(groups[best].numa, false), nil
	}
	if f.pod.Selector.NUMABind {
		if fixedN > 0 && !mixed {
			bestHave = max(bestHave, fixedN)
		}
		return nil, &Reason{Kind: ReasonNUMA, Need: c.Count, Have: bestHave}
	}
	return take(0, true), nil
}

func (f *fit) betterGroup(sum float64, n, numa int, bSum float64, bN, bNUMA int) bool {
	switch {
	case sum != bSum:
		return sum > bSum
	case n != bN:
		return (n < bN) == f.pod.card.Tight
	}
	return numa < bNUMA
}

// usedBy reports whether one of the devices in mine is on card i.
func (f *fit) usedBy(mine []int, i int) bool {
	for _, di := range mine {
		if f.plan.Devices[di].Card == i {
			return true
		}
	}
	return false
}

// hasSlot reports whether card i has a device ID left for this pod.
func (f *fit) hasSlot(i int) bool {
	if f.node.Cards[i].Shares <= 1 {
		return f.node.Cards[i].Held+f.extra[i].Held == 0
	}
	return f.freeSlot(i) >= 0
}

// freeSlot returns the lowest slot of card i neither held on the node nor taken by this plan
// (-1 for a card advertised by its UUID alone).
func (f *fit) freeSlot(i int) int {
	card := &f.node.Cards[i]
	if card.Shares <= 1 {
		return -1
	}
	for k := 0; k < card.Shares; k++ {
		if !card.slotFree(k) {
			continue
		}
		taken := false
		for _, d := range f.plan.Devices {
			if d.Card == i && d.Slot == k {
				taken = true
				break
			}
		}
		if !taken {
			return k
		}
	}
	return -1
}

// compareScore orders by higher score first, then lower card index.
func compareScore(sa, sb float64, ia, ib int) int {
	switch {
	case sa > sb:
		return -1
	case sa < sb:
		return 1
	}
	return ia - ib
}
