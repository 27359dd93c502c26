package core

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core/topology"
)

// Options configure a Decider: the policies used when a pod names none.
type Options struct {
	NodePolicy annotations.Policy
	GPUPolicy  annotations.Policy
	// RequireEnforcedSharing refuses containers that share a card on nodes whose inventory says no
	// enforcing sharing mode (mode none, or absent). Nodes whose mps or hami-core mode is not
	// ready are refused for shares either way.
	RequireEnforcedSharing bool
}

// Decider holds the default policies. It is immutable and safe for concurrent use.
type Decider struct {
	nodePolicy      annotations.Policy
	gpuPolicy       annotations.Policy
	requireEnforced bool
}

// New returns a Decider; an unknown or unimplemented policy is an error.
func New(o Options) (*Decider, error) {
	if _, err := lookup(nodeStrategies, o.NodePolicy, "node"); err != nil {
		return nil, err
	}
	if _, err := lookup(cardStrategies, o.GPUPolicy, "gpu"); err != nil {
		return nil, err
	}
	return &Decider{nodePolicy: o.NodePolicy, gpuPolicy: o.GPUPolicy, requireEnforced: o.RequireEnforcedSharing}, nil
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
	// Host is the pod's CPU and memory request (zero: none, or not known). Fit refuses a node whose
	// known CPU or memory cannot hold it; Plan.Host carries it so that Apply accounts it; the
	// fragmentation-aware policy weighs the node's CPU and memory after it. Set by PrepareHost.
	Host HostRequest
	// Tenant is the pod's namespace: a node in sharing mode mps serves shared containers of one
	// namespace at a time (the extender's cache applies that rule; the core does not read it).
	Tenant string
	// Created is the pod's creation time in whole seconds: the order the kubelet admits pods in
	// (the extender's cache reads it; the core does not).
	Created int64
	// Priority is the pod's priority (spec.priority, 0 when unset): a pod nominated to a node
	// keeps the cards it preempted from pods of lower priority (the extender's cache reads it;
	// the core does not).
	Priority int32

	nodeScore NodeScoreFunc
	card      CardStrategy
	rules     string // the card rules of Selector, as a person writes them (long lists cut)
	uuids     *uuidRules
	// kubelet is the pod as the kubelet's TopologyManager admits it (every container with cards or
	// exclusive CPUs, in admission order); kubeletGPU maps its containers to Request.Containers
	// (-1: no cards).
	kubelet    topology.Request
	kubeletGPU []int
	// handsOn: an init container hands its cards on to a later GPU container.
	handsOn bool
	// shared names a container that shares cards (the first); requireEnforced is the Decider's
	// RequireEnforcedSharing.
	shared          string
	requireEnforced bool
	// mig names a container that takes MIG instances (the first), "" when none does.
	mig string
}

// uuidRules are a selector's UUID lists as sets, for lists long enough that a scan per card would
// cost more than a lookup (admission accepts up to annotations.MaxListEntries entries).
type uuidRules struct {
	types annotations.Selector // the selector without its UUID rules
	use   map[string]struct{}  // nil: no use-gpuuuid rule
	noUse map[string]struct{}
}

// uuidSetMin is the list length from which Prepare builds sets.
const uuidSetMin = 8

// reasonListEntries is how many entries of each list a reason shows.
const reasonListEntries = 3

func newUUIDRules(sel *annotations.Selector) *uuidRules {
	if len(sel.UseUUIDs) < uuidSetMin && len(sel.NoUseUUIDs) < uuidSetMin {
		return nil
	}
	r := &uuidRules{types: *sel}
	r.types.UseUUIDs, r.types.NoUseUUIDs = nil, nil
	set := func(l []string) map[string]struct{} {
		m := make(map[string]struct{}, len(l))
		for _, u := range l {
			m[u] = struct{}{}
		}
		return m
	}
	if len(sel.UseUUIDs) > 0 {
		r.use = set(sel.UseUUIDs)
	}
	r.noUse = set(sel.NoUseUUIDs)
	return r
}

// accepts is Selector.CheckDeviceLower(...) == MatchOK with set lookups for the UUID rules: a MIG
// instance (parent set) is accepted by its own UUID or its parent's, refused by either.
func (r *uuidRules) accepts(modelLower, uuid, parent string) bool {
	if r.types.CheckLower(modelLower, "") != annotations.MatchOK {
		return false
	}
	in := func(m map[string]struct{}) bool {
		_, ok := m[uuid]
		if !ok && parent != "" {
			_, ok = m[parent]
		}
		return ok
	}
	if r.use != nil && !in(r.use) {
		return false
	}
	return !in(r.noUse)
}

// Prepare resolves a pod's policies. It fails when the pod names a policy this build cannot apply.
func (d *Decider) Prepare(req annotations.PodRequest, sel annotations.Selector) (*Pod, error) {
	cardRules := sel
	cardRules.NUMABind = false
	p := &Pod{Request: req, Selector: sel, NodePolicy: d.nodePolicy, GPUPolicy: d.gpuPolicy, rules: cardRules.StringN(reasonListEntries),
		uuids: newUUIDRules(&sel)}
	if sel.NodePolicy != "" {
		p.NodePolicy = sel.NodePolicy
	}
	if sel.GPUPolicy != "" {
		p.GPUPolicy = sel.GPUPolicy
	}
	p.kubelet, p.kubeletGPU = kubeletRequest(&p.Request)
	p.requireEnforced = d.requireEnforced
	for i := range req.Containers {
		c := &req.Containers[i]
		if c.Init && !c.Sidecar && i+1 < len(req.Containers) {
			p.handsOn = true
		}
		if c.Shared && p.shared == "" {
			p.shared = c.Name
		}
		if c.MIG() && p.mig == "" {
			p.mig = c.Name
		}
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

// kubeletRequest is the pod as the kubelet's TopologyManager sees it: its GPU containers, the
// containers whose limits name the GPU resource with 0 (req.ZeroGPU: the device manager still
// gives them hints) and, in a Guaranteed pod (req.CPUs), every container with a whole number of
// CPUs, in admission order; and for each of them its index in req.Containers (-1 when it has no
// cards). When req.CPUs does not list the GPU containers in their order, the GPU and zero-GPU
// containers alone are used.
func kubeletRequest(req *annotations.PodRequest) (topology.Request, []int) {
	r := topology.Request{Guaranteed: req.Guaranteed}
	gpu := make([]int, 0, len(req.Containers)+len(req.ZeroGPU))
	zero := func(name string) bool {
		for i := range req.ZeroGPU {
			if req.ZeroGPU[i].Name == name {
				return true
			}
		}
		return false
	}
	next := 0
	for i := range req.CPUs {
		c := &req.CPUs[i]
		gi, devices := -1, 0
		if next < len(req.Containers) && req.Containers[next].Name == c.Name {
			gi, devices = next, req.Containers[next].Count
			next++
		}
		cpus := 0
		if req.Guaranteed {
			cpus = c.WholeCPUs()
		}
		listed := devices == 0 && zero(c.Name)
		if devices == 0 && cpus == 0 && !listed {
			continue
		}
		res := ""
		if gi >= 0 {
			res = req.Containers[gi].MIGProfile
		}
		r.Containers = append(r.Containers, topology.Container{Name: c.Name, Init: c.Init, Restartable: c.Sidecar, Devices: devices, Resource: res,
			CPUs: cpus, ListsDevices: listed})
		gpu = append(gpu, gi)
	}
	if next == len(req.Containers) && len(req.CPUs) > 0 {
		return r, gpu
	}
	r.Containers, gpu = r.Containers[:0], gpu[:0]
	z := 0
	for i := 0; i <= len(req.Containers); i++ {
		for ; z < len(req.ZeroGPU) && req.ZeroGPU[z].Before <= i; z++ {
			c := &req.ZeroGPU[z]
			r.Containers = append(r.Containers, topology.Container{Name: c.Name, Init: c.Init, Restartable: c.Sidecar, ListsDevices: true})
			gpu = append(gpu, -1)
		}
		if i == len(req.Containers) {
			break
		}
		c := &req.Containers[i]
		r.Containers = append(r.Containers, topology.Container{Name: c.Name, Init: c.Init, Restartable: c.Sidecar, Devices: c.Count, Resource: c.MIGProfile})
		gpu = append(gpu, i)
	}
	return r, gpu
}

// PrepareHost is Prepare for a pod that also requests host CPU (millicores) and memory (MiB), as
// kube-scheduler's NodeResourcesFit counts them (the pod's effective requests).
func (d *Decider) PrepareHost(req annotations.PodRequest, sel annotations.Selector, host HostRequest) (*Pod, error) {
	p, err := d.Prepare(req, sel)
	if err != nil {
		return nil, err
	}
	p.Host = HostRequest{CPUMilli: max(host.CPUMilli, 0), MemMiB: max(host.MemMiB, 0)}
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
	// Host is the pod's CPU and memory (Pod.Host), which Apply adds to the node.
	Host HostRequest
	// CPUs are the exclusive CPUs the kubelet model predicts the pod holds on each NUMA node
	// (indexed like NodeState.Kubelet.NUMA); nil when none or the node has no model.
	CPUs []int
}

// holds reports whether the plan holds a device on card i.
func (p *Plan) holds(i int) bool {
	for _, d := range p.Devices {
		if d.Card == i {
			return true
		}
	}
	return false
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
			ca.Devices[j] = annotations.DeviceAssignment{UUID: card.UUID, ID: card.DeviceID(d.Slot), MemoryMiB: d.MemMiB, Cores: d.Cores,
				Parent: card.Parent, Profile: card.Profile}
			if card.place != nil {
				ca.Devices[j].Placement = &annotations.MIGPlacement{Start: card.place.start, Size: card.place.size}
			}
		}
		a.Containers[i] = ca
	}
	a.CPUs = p.assignedCPUs(n)
	return a
}

// Score rates a plan made by Fit on n by the pod's node policy: 0 to MaxScore. On a node that
// publishes links, the score loses up to linkPenalty as the plan uses them badly (linkScore): a
// multi-card pod goes where well-linked cards are free, any pod where it breaks the fewest NVLink
// pairs.
func (p *Pod) Score(n *NodeState, plan *Plan, mix *TaskMix) float64 {
	return withLinks(n, plan, p.nodeScore(&NodeInput{Node: n, Plan: plan, Mix: mix}), nil)
}

// ScoreWith is Score using the buffers of s (no allocation).
func (p *Pod) ScoreWith(n *NodeState, plan *Plan, mix *TaskMix, s *Scratch) float64 {
	s.node = NodeInput{Node: n, Plan: plan, Mix: mix, frag: &s.f.frag}
	score := p.nodeScore(&s.node)
	s.f.set = s.f.set[:0]
	return withLinks(n, plan, score, s.f.set)
}

// withLinks is the policy's score of a plan on n less its link penalty (see Score).
func withLinks(n *NodeState, plan *Plan, score float64, buf []int) float64 {
	if n.links == nil {
		return score
	}
	return max(score-linkPenalty*(1-n.linkScore(plan, buf)), 0)
}

// Scratch holds the buffers of Fit calls so that deciding a pod on many nodes does not allocate.
// The plan FitWith returns lives in the scratch and is valid until its next use. A Scratch is not
// safe for concurrent use; the zero value is ready.
type Scratch struct {
	f    fit
	node NodeInput
	// The selector's verdict on the last model seen, when the selector has no UUID rule (then the
	// verdict depends on the model alone, and a cluster has few models).
	selPod    *Pod
	selModel  string
	selAccept bool
}

// Accepts reports whether the pod's selector accepts card c (a MIG instance by its parent's model
// and by its own or its parent's UUID: annotations.Selector.CheckDevice).
func (p *Pod) Accepts(c *Card) bool {
	if p.uuids != nil {
		return p.uuids.accepts(c.modelLower, c.UUID, c.Parent)
	}
	return p.Selector.CheckDeviceLower(c.modelLower, c.UUID, c.Parent) == annotations.MatchOK
}

// accepts is p.Accepts for card c, remembering the verdict per model.
func (s *Scratch) accepts(p *Pod, c *Card) bool {
	sel := &p.Selector
	if p.uuids != nil {
		return p.uuids.accepts(c.modelLower, c.UUID, c.Parent)
	}
	if len(sel.UseUUIDs)+len(sel.NoUseUUIDs) > 0 {
		return sel.CheckDeviceLower(c.modelLower, c.UUID, c.Parent) == annotations.MatchOK
	}
	if len(sel.UseTypes)+len(sel.NoUseTypes) == 0 {
		return true
	}
	if s.selPod != p || s.selModel != c.modelLower {
		s.selPod = p
		s.selAccept = sel.CheckLower(c.modelLower, c.UUID) == annotations.MatchOK
	}
	// This node's string: its other cards of the model share it and compare by pointer.
	s.selModel = c.modelLower
	return s.selAccept
}

// fit is the working state of one Fit call.
type fit struct {
	pod    *Pod
	node   *NodeState
	mix    *TaskMix
	plan   *Plan
	ok     []bool  // card is healthy and accepted by the selector
	extra  []Usage // what this pod holds so far, per card
	cand   []int
	score  []float64
	order  []int
	picked []int
	pool   []int
	kind   []int // the devices of pool a container's kind can reuse (nodes with MIG instances)
	groups []numaGroup
	ids    []int // backing store of the containers' device indexes
	in     CardInput
	plan0  Plan
	// The whole cards the pod's selector accepts (match), of them the healthy ones (healthy), and
	// an unhealthy one's UUID; cards in MIG mode it accepts (inMIG). MIG instances are counted per
	// profile (counts), from accepted (set only for a pod with MIG containers).
	match, healthy, inMIG int
	unhealthyUUID         string
	// cordoned counts the whole cards the selector accepts that are cordoned, and names one (-1: none).
	cordoned, cordonedCard int
	accepted               []bool
	// prefer is a NUMA node the cards should go to when they can (-1: none); see retryNUMA.
	prefer int
	// allow, when not nil, limits the cards pickNew may choose (the kubelet's pool).
	allow []bool
	// The kubelet model's inputs and the first reason a container cannot take what the kubelet
	// gives it (fitKubelet).
	kdevs   []topology.Device
	kreason *Reason
	kids    []string
	// frag keeps the frag-aware policy's work on the node for the card scores and ScoreWith.
	frag fragKeep
	// The link-aware choice's buffers (links.go): eligible candidates, a set, an enumeration's
	// indexes, the container's cards so far, the greedy search's taken marks and classes.
	elig, set, idx, fixed, bestSet, deg []int
	taken                               []bool
	toSet                               []quality
}

type numaGroup struct {
	numa, n int
	sum     float64
}

// Fit decides whether the pod fits node n and on which cards: every GPU container is placed, or
// none (the Reason says why, for the first container that does not fit). App containers get the
// cards of finished init containers where the kubelet would hand them on: the kubelet takes
// devices of earlier non-sidecar init containers first and asks the plugin only for the rest.
// mix may be nil. The plan is the caller's.
func (p *Pod) Fit(n *NodeState, mix *TaskMix) (*Plan, *Reason) {
	return p.FitWith(n, mix, &Scratch{})
}

// FitWith is Fit with the buffers of s: the returned plan is valid until s is used again.
func (p *Pod) FitWith(n *NodeState, mix *TaskMix, s *Scratch) (*Plan, *Reason) {
	plan, r := p.fitWith(n, mix, s)
	if r == nil && plan != nil && n.dynamic {
		if why := n.validDynamicPlan(plan); why != "" {
			return nil, &Reason{Kind: ReasonMIGPlacement, Detail: why}
		}
	}
	return plan, r
}

func (p *Pod) fitWith(n *NodeState, mix *TaskMix, s *Scratch) (*Plan, *Reason) {
	f := &s.f
	f.pod, f.node, f.mix = p, n, mix
	f.frag.fit++
	f.plan0.Host = p.Host
	f.plan0.CPUs = nil
	f.plan = &f.plan0
	f.allow = nil
	if !n.Host.Fits(p.Host.CPUMilli, p.Host.MemMiB, HostRequest{}) {
		return nil, &Reason{Kind: ReasonHost, HostNeed: p.Host, HostFree: HostRequest{CPUMilli: n.Host.FreeCPUMilli(), MemMiB: n.Host.FreeMemMiB()},
			HostAlloc: HostRequest{CPUMilli: n.Host.AllocCPUMilli, MemMiB: n.Host.AllocMemMiB}}
	}
	if r := p.sharingRefusal(n); r != nil {
		return nil, r
	}
	if r := p.exclusiveCardsRefusal(n); r != nil {
		return nil, r
	}
	f.ok = resize(f.ok, len(n.Cards))
	if cap(f.extra) < len(n.Cards) {
		f.extra = make([]Usage, len(n.Cards))
	}
	f.extra = f.extra[:len(n.Cards)] // cleared by start
	total := 0
	for i := range p.Request.Containers {
		total += p.Request.Containers[i].Count
	}
	f.ids = resize(f.ids, total)
	f.match, f.healthy, f.inMIG, f.unhealthyUUID = 0, 0, 0, ""
	f.cordoned, f.cordonedCard = 0, -1
	mig := p.mig != "" && n.MIG > 0
	if mig {
		f.accepted = resize(f.accepted, len(n.Cards))
	}
	for i := range n.Cards {
		c := &n.Cards[i]
		if !s.accepts(p, c) {
			continue
		}
		if c.Cordoned != "" {
			// Out of service: nothing new goes there (its holders keep it).
			if c.MIG == nil && !c.Instance() {
				f.cordoned++
				f.cordonedCard = i
			}
			continue
		}
		if c.MIG != nil || c.Instance() {
			// MIG devices: a parent serves nothing; instances are counted per profile (counts).
			if c.InMIGMode() {
				f.inMIG++
			}
			f.ok[i] = c.Healthy
			if mig {
				f.accepted[i] = true
			}
			continue
		}
		f.match++
		if !c.Healthy {
			f.unhealthyUUID = c.UUID
			continue
		}
		f.healthy++
		f.ok[i] = true
	}
	if n.kubelet != nil {
		if p.mig != "" && n.kubelet.node.Scope == topology.ScopePod && !p.kubelet.OneResource() {
			r := &Reason{Kind: ReasonKubeletMIG, Policy: string(n.kubelet.node.Policy)}
			if len(p.Request.Containers) > 1 {
				r.Container = p.mig
			}
			return nil, r
		}
		return f.fitKubelet()
	}
	plan, r := f.place(-1)
	if r != nil && p.handsOn && p.Selector.NUMABind && r.Kind == ReasonNUMA {
		if plan, ok := f.retryNUMA(); ok {
			return plan, nil
		}
		// The last try changed the buffers; the reason is the first try's, which it owns.
	}
	return plan, r
}

// place places every GPU container in order, the cards going to NUMA node prefer when they can.
func (f *fit) place(prefer int) (*Plan, *Reason) {
	p := f.pod
	f.start(prefer)
	for ci := range p.Request.Containers {
		c := &p.Request.Containers[ci]
		match, healthy, unhealthy := f.counts(c)
		if healthy < c.Count {
			return nil, f.reason(c, f.countReason(c, match, healthy, unhealthy))
		}
		// This container's device indexes: at most c.Count entries of the backing store.
		at := len(f.ids)
		mine := f.ids[at : at : at+c.Count]
		mine, r := f.reuse(c, mine)
		if r != nil {
			return nil, f.reason(c, r)
		}
		reused := len(mine)
		mine, r = f.pickNew(c, mine, healthy)
		if r != nil {
			return nil, f.reason(c, r)
		}
		f.placed(c, mine, reused)
	}
	return f.plan, nil
}

// counts returns, for container c, the devices of its kind (Card.Serves) the selector accepts,
// the healthy ones among them, and an unhealthy one's UUID.
func (f *fit) counts(c *annotations.ContainerRequest) (match, healthy int, unhealthy string) {
	if !c.MIG() {
		return f.match, f.healthy, f.unhealthyUUID
	}
	if f.node.MIG == 0 {
		return 0, 0, ""
	}
	for i := range f.node.Cards {
		card := &f.node.Cards[i]
		if !f.accepted[i] || !card.Serves(c) {
			continue
		}
		match++
		if f.ok[i] {
			healthy++
		} else {
			unhealthy = card.UUID
		}
	}
	return match, healthy, unhealthy
}

// start empties the plan and what this pod holds, for a new try.
func (f *fit) start(prefer int) {
	f.plan0.Containers, f.plan0.Devices = f.plan0.Containers[:0], f.plan0.Devices[:0]
	clear(f.extra)
	f.ids = f.ids[:0]
	f.pool = f.pool[:0]
	f.prefer = prefer
}

// placed records container c's devices (mine, the first reused of them handed on by init
// containers) in the plan, and what it hands on: an init container (not a sidecar) hands on all
// of its devices; a container that reuses devices takes them out of the pool.
func (f *fit) placed(c *annotations.ContainerRequest, mine []int, reused int) {
	f.ids = f.ids[:len(f.ids)+len(mine)]
	f.plan.Containers = append(f.plan.Containers, ContainerPlan{Name: c.Name, Init: c.Init, Devices: mine})
	if c.Init && !c.Sidecar {
		f.pool = append(f.pool, mine[reused:]...)
	} else {
		f.pool = slices.DeleteFunc(f.pool, func(di int) bool { return slices.Contains(mine[:reused], di) })
	}
}

// retryNUMA places a numa-bind pod whose init containers hand cards on again, once per NUMA node
// (ascending) with every container's cards preferring that NUMA node: placing the init container
// first on its own could pick a NUMA node where a later container that reuses its cards does not
// fit (NUMA 0 with 2 free cards, NUMA 1 with 4: init 1 card, app 3 cards fits only on NUMA 1).
func (f *fit) retryNUMA() (*Plan, bool) {
	var tried topology.Mask
	for {
		numa := -1
		for i := range f.node.Cards {
			if u := f.node.Cards[i].NUMA; f.ok[i] && u >= 0 && !tried.Has(u) && (numa < 0 || u < numa) {
				numa = u
			}
		}
		if numa < 0 || numa > 63 {
			return nil, false
		}
		tried |= topology.MaskOf(numa)
		if plan, r := f.place(numa); r == nil {
			return plan, true
		}
	}
}

// resize returns a zeroed slice of length n, reusing b's array when it is large enough.
func resize[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	b = b[:n]
	clear(b)
	return b
}

func (f *fit) reason(c *annotations.ContainerRequest, r *Reason) *Reason {
	if len(f.pod.Request.Containers) > 1 {
		r.Container = c.Name
	}
	if c.MIG() {
		f.migReason(c, r)
	}
	return r
}

func (f *fit) countReason(c *annotations.ContainerRequest, match, healthy int, unhealthyUUID string) *Reason {
	r := &Reason{Need: c.Count, Have: healthy, Of: match, Selector: f.pod.rules, Models: f.node.Models}
	if !c.MIG() {
		r.InMIG = f.inMIG
	}
	switch {
	case !c.MIG() && f.cordoned > 0 && match < c.Count && match+f.cordoned >= c.Count:
		card := &f.node.Cards[f.cordonedCard]
		r.Kind, r.Have, r.Of, r.UUID, r.Index, r.Detail = ReasonCordoned, match, f.cordoned, card.UUID, card.Index, card.Cordoned
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

// reuse appends to mine the devices the kubelet hands container c from init containers (f.pool).
// When they are no more than c needs, the kubelet takes them all. When there are more, the kubelet
// takes c.Count of them in its set's order, which is random: then every one of them must be able
// to hold c, and each reserves the larger of its requests and c's, so that whichever the kubelet
// takes is accounted; the plan names the best of them by the card strategy (the device plugin
// corrects the record when the kubelet took others: they are this pod's and fit the container).
func (f *fit) reuse(c *annotations.ContainerRequest, mine []int) ([]int, *Reason) {
	pool := f.pool
	if f.node.MIG > 0 {
		// The kubelet hands devices on per resource: a container reuses those of its own kind.
		f.kind = f.kind[:0]
		for _, di := range pool {
			if f.node.Cards[f.plan.Devices[di].Card].Serves(c) {
				f.kind = append(f.kind, di)
			}
		}
		pool = f.kind
	}
	if len(pool) == 0 {
		return mine, nil
	}
	// The pool never holds two devices of one card: an init container reuses the pool before it
	// takes new cards, and takes none it already has.
	for _, di := range pool {
		if !f.reuseFits(c, di) {
			return nil, &Reason{Kind: ReasonReuse}
		}
	}
	chosen := pool
	if len(pool) > c.Count {
		scores := make([]float64, len(pool))
		for i, di := range pool {
			d := f.plan.Devices[di]
			card := &f.node.Cards[d.Card]
			before := card.add(f.extra[d.Card])
			newMem, newCores := f.reused(c, d)
			after := before
			after.MemMiB += newMem - d.MemMiB
			after.Cores += newCores - d.Cores
			if newCores >= 100 && d.Cores < 100 {
				after.Whole++
			}
			scores[i] = f.cardScore(card, before, after, c)
		}
		order := make([]int, len(pool))
		for i := range order {
			order[i] = i
		}
		sortOrder(order, scores, func(o int) int { return f.plan.Devices[pool[o]].Card })
		for i := 0; i < c.Count; i++ {
			order[i] = pool[order[i]]
		}
		chosen = order[:c.Count]
	}
	// Reserve on every device the kubelet may hand on, checking each card as it fills.
	for _, di := range pool {
		d := &f.plan.Devices[di]
		card := &f.node.Cards[d.Card]
		newMem, newCores := f.reused(c, *d)
		e := &f.extra[d.Card]
		if card.FreeMemMiB()-e.MemMiB < newMem-d.MemMiB || card.FreeCores()-e.Cores < newCores-d.Cores {
			return nil, &Reason{Kind: ReasonReuse}
		}
		e.MemMiB += newMem - d.MemMiB
		e.Cores += newCores - d.Cores
		if newCores >= 100 && d.Cores < 100 {
			e.Whole++
		}
		d.MemMiB, d.Cores = newMem, newCores
	}
	return append(mine, chosen...), nil
}

// cardScore runs the card strategy on the scratch's CardInput (no allocation per card).
func (f *fit) cardScore(card *Card, before, after Usage, c *annotations.ContainerRequest) float64 {
	f.in = CardInput{Node: f.node, Card: card, Before: before, After: after, Request: c, Mix: f.mix, Host: f.pod.Host, frag: &f.frag}
	if card.place != nil {
		return f.dynamicScore(f.node.byUUID[card.UUID])
	}
	if card.Instance() {
		// This pod's earlier devices on the parent count as held.
		var extra int64
		for _, d := range f.plan.Devices {
			if o := &f.node.Cards[d.Card]; o.Instance() && o.parent == card.parent && o.Held == 0 && o != card {
				extra += o.weight
			}
		}
		f.in.ParentBefore = f.node.parentUsed(card, extra)
		f.in.ParentAfter = f.node.parentUsed(card, extra+card.weight)
	}
	return f.pod.card.Score(&f.in)
}

// sortOrder sorts order (indexes into score) by higher score, then lower card index: an insertion
// sort, as the lists are one node's cards.
func sortOrder(order []int, score []float64, card func(int) int) {
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && compareScore(score[order[j]], score[order[j-1]], card(order[j]), card(order[j-1])) < 0; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
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
	if !f.ok[d.Card] || !card.Serves(c) {
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
	case !f.ok[i], card.Whole+e.Whole > 0, !card.Serves(c):
		return false
	case card.Instance() && f.node.Cards[card.parent].Held > 0:
		// A holder of the whole parent (recorded before MIG mode) still runs on it.
		return false
	case overMPSSlot(f.node, c, card):
		return false
	case card.place != nil:
		return card.Held+e.Held == 0 && f.dynamicFits(i)
	case c.Exclusive():
		return card.Held+e.Held == 0
	}
	return f.hasSlot(i) &&
		card.FreeMemMiB()-e.MemMiB >= c.MemoryOn(card.MemoryMiB) &&
		card.FreeCores()-e.Cores >= c.CoresOn()
}

// pickNew adds the devices container c still needs beyond those in mine (reused ones), choosing
// cards by the card strategy within the best NUMA node, and by links on a node that publishes them
// (links.go; cardinal.io/gpu-link: nvlink checked here).
func (f *fit) pickNew(c *annotations.ContainerRequest, mine []int, healthy int) ([]int, *Reason) {
	k := c.Count - len(mine)
	if k == 0 {
		return mine, nil
	}
	f.cand, f.score = f.cand[:0], f.score[:0]
	for i := range f.node.Cards {
		if !f.fits(c, i) || f.usedBy(mine, i) || (f.allow != nil && !f.allow[i]) {
			continue
		}
		card := &f.node.Cards[i]
		before := card.add(f.extra[i])
		after := before.plus(c.MemoryOn(card.MemoryMiB), c.CoresOn())
		f.cand = append(f.cand, i)
		f.score = append(f.score, f.cardScore(card, before, after, c))
	}
	if len(f.cand) < k {
		return nil, &Reason{Kind: ReasonNoCapacity, Need: c.Count, Have: len(f.cand) + len(mine), Of: healthy,
			Shared: !c.Exclusive(), MemMiB: c.MemoryMiB, MemPercent: c.MemoryPercent, Cores: c.Cores}
	}
	f.order = f.order[:0]
	for i := range f.cand {
		f.order = append(f.order, i)
	}
	sortOrder(f.order, f.score, func(o int) int { return f.cand[o] })
	chosen, r := f.chooseNUMA(c, mine, k)
	if r != nil {
		return nil, r
	}
	if f.pod.Selector.Link == annotations.LinkNVLink && c.Count > 1 {
		if chosen, r = f.requireNVLink(c, mine, chosen, k); r != nil {
			return nil, r
		}
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

// add puts a device of container c on card i, slot slot, in the plan and returns its index.
func (f *fit) add(c *annotations.ContainerRequest, i, slot int) int {
	card := &f.node.Cards[i]
	mem, cores := c.MemoryOn(card.MemoryMiB), c.CoresOn()
	f.plan.Devices = append(f.plan.Devices, Device{Card: i, Slot: slot, MemMiB: mem, Cores: cores})
	f.extra[i] = f.extra[i].plus(mem, cores)
	return len(f.plan.Devices) - 1
}

// take returns the first k ranked candidates, on NUMA node numa unless any.
func (f *fit) take(k, numa int, any bool) []int {
	f.picked = f.picked[:0]
	for _, o := range f.order {
		if i := f.cand[o]; any || f.node.Cards[i].NUMA == numa {
			f.picked = append(f.picked, i)
			if len(f.picked) == k {
				break
			}
		}
	}
	return f.picked
}

// chooseNUMA picks k cards from the ranked candidates (f.order indexes f.cand). A container of more
// than one card gets them on one NUMA node when some NUMA node has enough (required with
// numa-bind, preferred otherwise); cards it already has (reused) fix that NUMA node. f.prefer, when
// set, is the NUMA node to take when it qualifies. On a node with links, the NUMA node whose
// best-linked set is best wins first, and the cards are that set (takeLinked); a single card is the
// one of the best-ranked that breaks the fewest linked sets (takeOne).
func (f *fit) chooseNUMA(c *annotations.ContainerRequest, mine []int, k int) ([]int, *Reason) {
	if c.Count <= 1 {
		take := f.take
		if f.node.links != nil {
			take = func(_, numa int, any bool) []int { return f.takeOne(numa, any) }
		}
		if f.prefer >= 0 {
			if got := take(k, f.prefer, false); len(got) == k {
				return got, nil
			}
		}
		return take(k, 0, true), nil
	}
	linked := f.node.links != nil
	if linked {
		f.fixed = f.fixed[:0]
		for _, di := range mine {
			f.fixed = append(f.fixed, f.plan.Devices[di].Card)
		}
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
	f.groups = f.groups[:0]
	for _, o := range f.order {
		numa := f.node.Cards[f.cand[o]].NUMA
		gi := -1
		for j := range f.groups {
			if f.groups[j].numa == numa {
				gi = j
				break
			}
		}
		if gi < 0 {
			f.groups = append(f.groups, numaGroup{numa: numa})
			gi = len(f.groups) - 1
		}
		g := &f.groups[gi]
		if g.n < k {
			g.sum += f.score[o]
		}
		g.n++
	}
	best, most, onFixed := -1, 0, 0
	var bestQ quality
	for gi, g := range f.groups {
		most = max(most, g.n)
		if fixedN > 0 && !mixed && g.numa == fixed {
			onFixed = g.n
		}
		if g.n < k || mixed || (fixedN > 0 && g.numa != fixed) {
			continue
		}
		if f.prefer >= 0 && g.numa == f.prefer {
			best = gi
			break
		}
		var q quality
		if linked {
			// The best-linked set first; the card strategy's choice among equally linked ones.
			_, q = f.takeLinked(k, g.numa, false, f.fixed)
			if best >= 0 && q != bestQ {
				if q.better(bestQ) {
					best, bestQ = gi, q
					f.bestSet = append(f.bestSet[:0], f.picked...)
				}
				continue
			}
		}
		if b := f.groups[max(best, 0)]; best < 0 || f.betterGroup(g.sum, g.n, g.numa, b.sum, b.n, b.numa) {
			best, bestQ = gi, q
			if linked {
				f.bestSet = append(f.bestSet[:0], f.picked...)
			}
		}
	}
	if best >= 0 {
		if linked && f.prefer >= 0 && f.groups[best].numa == f.prefer {
			got, _ := f.takeLinked(k, f.prefer, false, f.fixed)
			return got, nil
		}
		if linked {
			// The best group's set, as takeLinked found it.
			return append(f.picked[:0], f.bestSet...), nil
		}
		return f.take(k, f.groups[best].numa, false), nil
	}
	if f.pod.Selector.NUMABind {
		// Only NUMA nodes the container may use count: with reused cards, theirs.
		r := &Reason{Kind: ReasonNUMA, Need: c.Count, Have: most, Reused: fixedN}
		switch {
		case mixed:
			r.Have, r.NUMA = 0, -1
		case fixedN > 0:
			r.Have, r.NUMA = fixedN+onFixed, fixed
		}
		return nil, r
	}
	if linked {
		got, _ := f.takeLinked(k, 0, true, f.fixed)
		return got, nil
	}
	return f.take(k, 0, true), nil
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
	card := &f.node.Cards[i]
	if card.Shares <= 1 {
		return card.Held+f.extra[i].Held == 0
	}
	// Held also counts device IDs the card no longer offers (see NodeState.Hold).
	return card.Held+f.extra[i].Held < card.Slots() && f.freeSlot(i) >= 0
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

// sharingRefusal refuses a node for a pod that shares cards when the node cannot enforce its
// limits: its mps or hami-core enforcement is not ready (the device plugin would refuse the
// container), or it enforces nothing and the Decider requires enforced sharing.
func (p *Pod) sharingRefusal(n *NodeState) *Reason {
	if p.shared == "" {
		return nil
	}
	if n.Sharing.Enforced() {
		return p.mpsSlotRefusal(n)
	}
	mode := n.Sharing.ModeOrNone()
	if mode == annotations.SharingMPS || mode == annotations.SharingHAMiCore {
		return &Reason{Kind: ReasonSharingNotReady, Container: p.shared, Detail: mode}
	}
	if p.requireEnforced {
		return &Reason{Kind: ReasonSharingNotEnforced, Container: p.shared, Detail: mode}
	}
	return nil
}

// overMPSSlot reports whether shared container c would reserve more than one share slot of card
// on a node in sharing mode mps: the node's MPS daemon gives each client one slot (card memory ÷
// shares) and its device plugin refuses more at Allocate (deviceplugin ReasonMPSSlot).
func overMPSSlot(n *NodeState, c *annotations.ContainerRequest, card *Card) bool {
	return c.Shared && card.Shares > 1 && n.Sharing.ModeOrNone() == annotations.SharingMPS &&
		c.MemoryOn(card.MemoryMiB) > card.MemoryMiB/int64(card.Shares)
}

// exclusiveCardsRefusal returns ReasonExclusiveCards when a container of p takes cards whole on a
// node whose MPS daemon runs the cards in EXCLUSIVE_PROCESS (nil otherwise).
func (p *Pod) exclusiveCardsRefusal(n *NodeState) *Reason {
	if !n.Sharing.WholeCardsRefused() {
		return nil
	}
	for i := range p.Request.Containers {
		if c := &p.Request.Containers[i]; c.Count > 0 && !c.Shared && !c.MIG() {
			return &Reason{Kind: ReasonExclusiveCards, Container: c.Name}
		}
	}
	return nil
}

// mpsSlotRefusal returns ReasonMPSSlot when a shared container of p reserves more than one slot
// on every shared card of an mps node, so that no card of the node can ever serve it (nil
// otherwise: on a node with cards of several sizes, fits skips only the cards too small).
func (p *Pod) mpsSlotRefusal(n *NodeState) *Reason {
	if n.Sharing.ModeOrNone() != annotations.SharingMPS {
		return nil
	}
	for i := range p.Request.Containers {
		c := &p.Request.Containers[i]
		if !c.Shared || c.MIG() {
			continue
		}
		var need, slot int64
		over := 0
		for j := range n.Cards {
			card := &n.Cards[j]
			if card.Shares <= 1 || card.MIG != nil || card.Instance() {
				continue
			}
			if !overMPSSlot(n, c, card) {
				over = -1
				break
			}
			over++
			if s := card.MemoryMiB / int64(card.Shares); s >= slot {
				slot, need = s, c.MemoryOn(card.MemoryMiB)
			}
		}
		if over > 0 {
			return &Reason{Kind: ReasonMPSSlot, Container: c.Name, Need: int(need), Have: int(slot)}
		}
	}
	return nil
}

// SharedContainer names the pod's first container that shares cards ("" when none does).
func (p *Pod) SharedContainer() string { return p.shared }

// migReason completes reason r of MIG container c: the profile (its text then counts instances),
// and for reasons that count instances, the node's free instances (and with ReasonNoMatch, the
// node's instances of the profile and their parents' models, whatever the selector).
func (f *fit) migReason(c *annotations.ContainerRequest, r *Reason) {
	r.Profile = c.MIGProfile
	switch r.Kind {
	case ReasonNoMatch, ReasonTooFewCards, ReasonUnhealthy, ReasonNoCapacity:
	default:
		return
	}
	r.Free = f.node.freeInstances(f.extra)
	if r.Kind != ReasonNoMatch {
		return
	}
	var models []string
	for i := range f.node.Cards {
		if card := &f.node.Cards[i]; card.Serves(c) {
			r.Of++
			if !slices.Contains(models, card.Model) {
				models = append(models, card.Model)
			}
		}
	}
	r.Models = strings.Join(models, ", ")
}
