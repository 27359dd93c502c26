package scheduler

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	policylisters "k8s.io/client-go/listers/policy/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// Preemption at card level (issue 25). kube-scheduler's dry run (framework/preemption) knows
// nvidia.com/gpu as a count: it picks victims that free some count of devices, not the cards a
// pod's selectors, memory and NUMA rules need. With a preemptVerb, kube-scheduler sends the
// extender its candidate nodes and their victims (UIDs: the extender is node-cache-capable) and
// takes back, per node, the victims the extender names; a node left out is no candidate. It looks
// each named victim up among the pods on that node in its own snapshot (extender.go,
// convertToVictims), so the extender may name pods kube-scheduler did not propose, and nodes it
// did not send; it does not check their priority again, so the extender must never name a pod
// whose priority is not lower than the preemptor's.
//
// Cardinal answers, for each node, the fewest lower-priority pods whose cards, once freed, make
// the preemptor fit by core.Pod.Fit (then the lowest highest priority among them, then the lowest
// sum of priorities, then the fewest PodDisruptionBudget violations, then the most of those
// kube-scheduler proposed), decided on a copy of the node's state: the live cache never changes.
// Proposed victims that hold no cards on the node (kube-scheduler chose them for CPU, memory or
// something else Cardinal does not model) are always kept. Victims come in decreasing priority,
// as kube-scheduler's node choice (pickOneNodeForPreemption) reads them.
//
// Freed cards go to the nominated pod: while a pod is nominated to a node (status.
// nominatedNodeName) and not bound, a pod of lower priority is decided on the node as if the
// nominee held what it will take there once the pods being deleted on the node are gone (the same
// rule kube-scheduler applies to its own resources: nominated pods of equal or higher priority
// count as present). See nominatedState.

// podMeta is what preemption reads of a bound pod.
type podMeta struct {
	name, namespace string
	priority        int32
	// start is when the pod started (its creation when it has not): among victims of equal
	// priority the one that started last loses the least work.
	start  time.Time
	labels map[string]string
	// terminating: the pod is being deleted, its cards come back soon.
	terminating bool
}

// nominee is a pod kube-scheduler nominated to a node after preempting pods there.
type nominee struct {
	uid      types.UID
	node     string
	priority int32
	raw      *corev1.Pod
	// pod is raw prepared by the cache's preparer; nil until one is set.
	pod *core.Pod
}

// preemption is the cache's state for preemption; its fields are guarded by Cache.mu.
type preemption struct {
	meta     map[types.UID]podMeta
	nominees map[string][]*nominee // by node, highest priority first
	byUID    map[types.UID]*nominee
	prepare  func(*corev1.Pod) (*core.Pod, error)
	// answers are the last non-empty answers given to preemptors not yet bound (preempt_repeat.go).
	answers map[types.UID]*preemptAnswer
}

// PrepareNominees sets how the cache reads a nominated pod's request (the server's prepare): the
// cards a nominee will take are decided with it. Nominees seen before are prepared now.
func (c *Cache) PrepareNominees(prepare func(*corev1.Pod) (*core.Pod, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.preempt.prepare = prepare
	noms := make([]*nominee, 0, len(c.preempt.byUID))
	for _, nm := range c.preempt.byUID {
		noms = append(noms, nm)
	}
	for _, nm := range noms {
		c.setNominee(nm.raw, nm.node)
	}
}

// trackPreemption records what preemption reads of a pod: its priority and labels while it is
// bound, and its nomination while it is not. Called with c.mu held.
func (c *Cache) trackPreemption(pod *corev1.Pod) {
	pp := &c.preempt
	if pod.Spec.NodeName != "" && !finished(pod) {
		if pp.meta == nil {
			pp.meta = map[types.UID]podMeta{}
		}
		start := pod.CreationTimestamp.Time
		if pod.Status.StartTime != nil {
			start = pod.Status.StartTime.Time
		}
		pp.meta[pod.UID] = podMeta{name: pod.Name, namespace: pod.Namespace, priority: corev1helpers.PodPriority(pod),
			start: start, labels: pod.Labels, terminating: pod.DeletionTimestamp != nil}
		delete(pp.answers, pod.UID) // bound: its preemption is over
	} else {
		delete(pp.meta, pod.UID)
		if finished(pod) {
			delete(pp.answers, pod.UID)
		}
	}
	node := ""
	if pod.Spec.NodeName == "" && !finished(pod) && pod.DeletionTimestamp == nil && c.ours(pod.Spec.SchedulerName) {
		node = pod.Status.NominatedNodeName
	}
	c.setNominee(pod, node)
}

// forgetPreemption forgets a deleted pod. Called with c.mu held.
func (c *Cache) forgetPreemption(uid types.UID) {
	delete(c.preempt.meta, uid)
	delete(c.preempt.answers, uid)
	c.dropNominee(uid)
}

// setNominee records pod as nominated to node ("": not nominated). Called with c.mu held.
func (c *Cache) setNominee(pod *corev1.Pod, node string) {
	pp := &c.preempt
	old := pp.byUID[pod.UID]
	if old == nil && node == "" {
		return
	}
	c.dropNominee(pod.UID)
	if node == "" {
		return
	}
	nm := &nominee{uid: pod.UID, node: node, priority: corev1helpers.PodPriority(pod), raw: pod}
	if pp.prepare != nil {
		p, err := pp.prepare(pod)
		if err != nil || p == nil || p.Request.Empty() {
			return // no GPUs (a routed CPU-only pod), or a request Cardinal cannot read: it holds no cards anywhere
		}
		nm.pod = p
	}
	if pp.byUID == nil {
		pp.byUID, pp.nominees = map[types.UID]*nominee{}, map[string][]*nominee{}
	}
	pp.byUID[pod.UID] = nm
	list := append(pp.nominees[node], nm)
	slices.SortStableFunc(list, func(a, b *nominee) int {
		if a.priority != b.priority {
			return int(b.priority) - int(a.priority)
		}
		return strings.Compare(string(a.uid), string(b.uid))
	})
	pp.nominees[node] = list
	if n := c.nodes[node]; n != nil && nm.pod != nil {
		c.bump(n)
	}
}

func (c *Cache) dropNominee(uid types.UID) {
	pp := &c.preempt
	old := pp.byUID[uid]
	if old == nil {
		return
	}
	delete(pp.byUID, uid)
	list := slices.DeleteFunc(pp.nominees[old.node], func(nm *nominee) bool { return nm.uid == uid })
	if len(list) == 0 {
		delete(pp.nominees, old.node)
	} else {
		pp.nominees[old.node] = list
	}
	if n := c.nodes[old.node]; n != nil && old.pod != nil {
		c.bump(n)
	}
}

// nominatedState returns the node's state as pod p (uid) must see it when pods of equal or higher
// priority are nominated to the node: each of them (highest priority first) holds the devices, the
// CPU and memory and the exclusive CPUs it would take once the node's pods being deleted are gone,
// on top of what the node holds now. nil when no nominee applies (the node's own state is the
// answer). A nominee that would not fit even then holds nothing: kube-scheduler will preempt for it
// again. Called with c.mu held (read).
func (c *Cache) nominatedState(n *nodeEntry, p *core.Pod, uid types.UID) *core.NodeState {
	noms := c.preempt.nominees[n.name]
	if len(noms) == 0 || n.state == nil {
		return nil
	}
	var st *core.NodeState
	for _, nm := range noms {
		if nm.uid == uid || nm.pod == nil || nm.priority < p.Priority {
			continue
		}
		if _, reserved := c.pods[nm.uid]; reserved {
			continue // its bind reserved its cards already
		}
		if st == nil {
			st = n.state.Clone()
		}
		future := st.Clone()
		for _, rec := range n.pods {
			if m, ok := c.preempt.meta[rec.uid]; ok && m.terminating {
				c.release(future, n, rec)
			}
		}
		if plan, _, _ := c.fitOn(n.name, future, nm.pod, nil); plan != nil {
			// The nominee holds its cards, its CPU and memory, and the exclusive CPUs the kubelet
			// model predicts it takes on each NUMA node.
			st.Apply(plan)
			st.HoldCPUs(plan.CPUs)
		}
	}
	return st
}

// release removes what rec holds on its node n (its cards, its CPU and memory, its exclusive CPUs
// per NUMA node) from st, a copy of the node's state. Called with c.mu held (read).
func (c *Cache) release(st *core.NodeState, n *nodeEntry, rec *podRecord) {
	for _, h := range rec.applied {
		st.Unhold(h)
	}
	if hr, ok := c.hosts[rec.uid]; ok && hr.node == rec.node {
		st.UnholdHost(hr.req)
	}
	st.UnholdCPUs(c.cpusHeldBy(n, rec.uid))
}

// fitOn is Fit of p on st (a copy of node name's state), then its score when s is not nil; a
// panic fails the node with ReasonInternal. Called with c.mu held.
func (c *Cache) fitOn(name string, st *core.NodeState, p *core.Pod, s *core.Scratch) (plan *core.Plan, score float64, r *core.Reason) {
	defer func() {
		if v := recover(); v != nil {
			if s != nil {
				*s = core.Scratch{}
			}
			plan, score, r = nil, 0, c.recovered(name, v)
		}
	}()
	if s == nil {
		plan, r = p.Fit(st, &c.mix)
		return plan, 0, r
	}
	plan, r = p.FitWith(st, &c.mix, s)
	if plan != nil {
		score = p.ScoreWith(st, plan, &c.mix, s)
	}
	return plan, score, r
}

// decideNominated is evaluate's verdict for node n, whose state nominees change for p (st, from
// nominatedState): never shared with other nodes. It reports whether the node is free for p and
// whether p must wait there for a container in flight.
func (c *Cache) decideNominated(n *nodeEntry, st *core.NodeState, p *core.Pod, uid types.UID, s *core.Scratch) (v Verdict, free, waiting bool) {
	v.gen = n.gen
	var plan *core.Plan
	plan, v.Score, v.Reason = c.fitOn(n.name, st, p, s)
	if v.Reason == nil {
		v.Reason = otherTenant(n, p)
	}
	if v.Reason == nil {
		if r := c.waits(n, p, planCards(nil, plan), uid); r != nil {
			v.Reason, waiting = r, true
		} else {
			free = true
		}
	}
	return v, free, waiting
}

// fitReserve is Reserve's Fit: on the node's state, or on what nominees of higher priority leave
// of it. Called with c.mu held.
func (c *Cache) fitReserve(n *nodeEntry, p *core.Pod, uid types.UID) (*core.Plan, *core.Reason) {
	if st := c.nominatedState(n, p, uid); st != nil {
		plan, _, r := c.fitOn(n.name, st, p, nil)
		return plan, r
	}
	return c.fitNode(n, p)
}

// Proposal is what kube-scheduler proposes on one node: its victims' UIDs and the PDB violations
// it counted.
type Proposal struct {
	Victims       []types.UID
	PDBViolations int64
}

// Victims is Cardinal's answer for one node: the pods to preempt, in decreasing priority.
type Victims struct {
	Pods          []types.UID
	Keys          []string // namespace/name of each, for people
	PDBViolations int64
}

// PDBLister lists the PodDisruptionBudgets of a namespace (nil lister: none are known).
type PDBLister func(namespace string) []*policyv1.PodDisruptionBudget

// preemptFitBudget bounds the Fit calls the search for a minimum set makes on one node; past it,
// the set is made minimal (no victim can be spared) instead of minimum, as kube-scheduler does:
// every candidate removed, then each reprieved, most important first, while the pod still fits.
const preemptFitBudget = 4096

// preemptSearchTime bounds the time one preempt call spends searching for minimum sets: nodes
// decided after it get a minimal set at once (a Fit per candidate), so the answer reaches
// kube-scheduler well within the extender's httpTimeout (3 s in the chart) even for the hundreds
// of candidate nodes its dry run may send.
const preemptSearchTime = time.Second

// preemptTimeLimit is when a preempt call stops deciding nodes: the nodes left are left out of
// the answer (no candidates), which keeps it within the extender's httpTimeout whatever the
// cluster's size.
const preemptTimeLimit = 2 * time.Second

// preemptExtraNodes is how many nodes kube-scheduler did not propose (refused by filter) one
// preempt call offers at most: kube-scheduler's own dry run offers max(10 % of the nodes, 100).
const preemptExtraNodes = 100

// ChooseVictims decides, for each node of proposals and of extra (nodes kube-scheduler did not
// propose), the victims whose cards make pod p (uid) fit there; nodes where no set of
// lower-priority pods works are left out. The cache is only read, and only while each node's
// inputs are copied (preemptInputOf): the search runs on the copy, so a long search never holds
// the lock another verb or an informer event waits for. The search stops at preemptSearchTime
// (minimal sets after it) and the call at preemptTimeLimit, checked between Fit calls.
//
// While an earlier preemption for the pod is still under way (PreemptionUnderWay) the answer is
// empty: its victims are leaving, and a fresh preemption elsewhere would evict twice what the pod
// needs. The answer given is remembered for that rule (rememberPreemption).
func (c *Cache) ChooseVictims(uid types.UID, p *core.Pod, proposals map[string]Proposal, extra []string, pdbs PDBLister) map[string]Victims {
	out := map[string]Victims{}
	start := time.Now()
	deadline, limit := start.Add(preemptSearchTime), start.Add(preemptTimeLimit)
	c.mu.RLock()
	if _, waiting := c.preemptionUnderWay(uid, p); waiting {
		c.mu.RUnlock()
		return out
	}
	mix, onPanic := c.mix.Clone(), c.onPanic
	c.mu.RUnlock()
	var s core.Scratch
	decide := func(node string, prop Proposal) {
		if time.Now().After(limit) {
			return
		}
		c.mu.RLock()
		in, ok := c.preemptInputOf(node, uid, p, prop)
		c.mu.RUnlock()
		if !ok {
			return
		}
		in.mix, in.onPanic, in.scratch = mix, onPanic, &s
		in.deadline, in.limit = deadline, limit
		budget := preemptFitBudget
		if time.Now().After(deadline) {
			budget = 0
		}
		if v, ok := in.choose(p, pdbs, budget); ok {
			out[node] = v
		}
	}
	for node, prop := range proposals {
		decide(node, prop)
	}
	offered := 0
	for _, node := range extra {
		if offered == preemptExtraNodes {
			break
		}
		if _, proposed := proposals[node]; !proposed {
			decide(node, Proposal{})
			offered++
		}
	}
	c.rememberPreemption(uid, out)
	return out
}

// setCost orders victim sets of equal size: lower is better.
type setCost struct {
	maxPrio, sumPrio int64
	pdb              int64
	notProposed      int
}

func (a setCost) less(b setCost) bool {
	switch {
	case a.maxPrio != b.maxPrio:
		return a.maxPrio < b.maxPrio
	case a.sumPrio != b.sumPrio:
		return a.sumPrio < b.sumPrio
	case a.pdb != b.pdb:
		return a.pdb < b.pdb
	}
	return a.notProposed < b.notProposed
}

// candidate is a pod that may be preempted on a node, with what it holds there (copied).
type candidate struct {
	uid   types.UID
	holds []core.Holding
	// host is the CPU and memory it holds on the node (hasHost), cpus its exclusive CPUs per
	// NUMA node (nil: none counted).
	host     core.HostRequest
	hasHost  bool
	cpus     []int
	meta     podMeta
	proposed bool
}

// release gives back on st what the candidate holds; hold takes it again.
func (cd *candidate) release(st *core.NodeState) {
	for _, h := range cd.holds {
		st.Unhold(h)
	}
	if cd.hasHost {
		st.UnholdHost(cd.host)
	}
	st.UnholdCPUs(cd.cpus)
}

func (cd *candidate) hold(st *core.NodeState) {
	for _, h := range cd.holds {
		st.Hold(h)
	}
	if cd.hasHost {
		st.HoldHost(cd.host)
	}
	st.HoldCPUs(cd.cpus)
}

// candidateOf copies what rec holds on node n. Called with c.mu held (read).
func (c *Cache) candidateOf(n *nodeEntry, rec *podRecord, m podMeta, proposed bool) candidate {
	cd := candidate{uid: rec.uid, holds: slices.Clone(rec.applied), cpus: c.cpusHeldBy(n, rec.uid), meta: m, proposed: proposed}
	if hr, ok := c.hosts[rec.uid]; ok && hr.node == rec.node {
		cd.host, cd.hasHost = hr.req, true
	}
	return cd
}

// preemptInput is what the search for victims on one node reads: copied from the cache under its
// lock (preemptInputOf), searched without it (choose).
type preemptInput struct {
	name string
	// work is the node's state as the preemptor sees it (nominees of equal or higher priority
	// hold theirs), with the pods being deleted and the proposed victims without cards released.
	work *core.NodeState
	// pool are the candidates, least important first; kept the proposed victims without cards.
	pool     []candidate
	kept     []podMeta
	keptUIDs []types.UID
	// leaving: lower-priority pods being deleted here hold what the preemptor can use.
	leaving bool
	prop    Proposal
	// metas are what victimsOf reads of every pod the answer may name.
	metas map[types.UID]podMeta
	// Set by ChooseVictims: the call's copy of the task mix, panic handler, Fit buffers and
	// deadlines (minimum sets until deadline, nothing after limit).
	mix             *core.TaskMix
	onPanic         PanicHandler
	scratch         *core.Scratch
	deadline, limit time.Time
}

// preemptInputOf copies what the search for victims of p (uid) on node reads; false when the node
// is no candidate whatever the search finds. Called with c.mu held (read).
func (c *Cache) preemptInputOf(node string, uid types.UID, p *core.Pod, prop Proposal) (*preemptInput, bool) {
	n, ok := c.nodes[node]
	if !ok || n.state == nil {
		return nil, false
	}
	in := &preemptInput{name: node, prop: prop, metas: map[types.UID]podMeta{}}
	in.work = c.nominatedState(n, p, uid)
	if in.work == nil {
		in.work = n.state.Clone()
	}
	work := in.work
	proposed := map[types.UID]bool{}
	for _, v := range prop.Victims {
		proposed[v] = true
		m, known := c.preempt.meta[v]
		in.metas[v] = m
		if rec := n.pods[v]; rec != nil && len(rec.applied) > 0 {
			continue
		}
		// Holds no cards here: kube-scheduler chose it for what it models alone. It stays.
		if known && m.priority >= p.Priority {
			return nil, false // never happens with kube-scheduler's own proposals
		}
		if hr, ok := c.hosts[v]; ok && hr.node == n.name {
			work.UnholdHost(hr.req)
		}
		work.UnholdCPUs(c.cpusHeldBy(n, v))
		in.kept, in.keptUIDs = append(in.kept, m), append(in.keptUIDs, v)
	}
	// Candidates whose cards the pod cannot use free nothing it needs, unless it lacks CPU or
	// memory, or exclusive CPUs on a node whose kubelet aligns them: then every pod holding some
	// may help.
	hostShort := !work.Host.Fits(p.Host.CPUMilli, p.Host.MemMiB, core.HostRequest{})
	cpuShort := p.HoldsExclusiveCPUs() && work.CountsCPUs()
	useful := func(cd *candidate) bool {
		if (hostShort && cd.hasHost) || (cpuShort && cd.cpus != nil) {
			return true
		}
		for _, h := range cd.holds {
			if i, ok := work.CardIndex(h.UUID); ok && p.Accepts(&work.Cards[i]) && servesAny(&work.Cards[i], p) {
				return true
			}
		}
		return false
	}
	// Pods being deleted free their cards anyway: released from the start, never named as victims.
	// Naming one races with its end: kube-scheduler's preemption of a pod already gone fails ("not
	// found") and leaves the preemptor waiting for a deletion it never sees again.
	for _, rec := range n.pods {
		if rec.uid == uid || rec.reserved || len(rec.applied) == 0 {
			continue
		}
		m, ok := c.preempt.meta[rec.uid]
		if ok && m.terminating {
			cd := c.candidateOf(n, rec, m, false)
			in.leaving = in.leaving || (m.priority < p.Priority && useful(&cd))
			cd.release(work)
			continue
		}
		if !ok || m.priority >= p.Priority {
			continue
		}
		cd := c.candidateOf(n, rec, m, proposed[rec.uid])
		if !useful(&cd) {
			continue
		}
		in.metas[rec.uid] = m
		in.pool = append(in.pool, cd)
	}
	// Least important first: lowest priority, proposed by kube-scheduler, started last.
	slices.SortFunc(in.pool, func(a, b candidate) int {
		switch {
		case a.meta.priority != b.meta.priority:
			return int(a.meta.priority) - int(b.meta.priority)
		case a.proposed != b.proposed:
			if a.proposed {
				return -1
			}
			return 1
		case !a.meta.start.Equal(b.meta.start):
			return b.meta.start.Compare(a.meta.start)
		}
		return strings.Compare(string(a.uid), string(b.uid))
	})
	return in, true
}

// fits reports whether p fits the work state once the candidates of set are released; a panic in
// Fit counts as no fit (and is told to the panic handler).
func (in *preemptInput) fits(p *core.Pod, set []int) (ok bool) {
	for _, i := range set {
		in.pool[i].release(in.work)
	}
	defer func() {
		for _, i := range set {
			in.pool[i].hold(in.work)
		}
		if v := recover(); v != nil {
			*in.scratch = core.Scratch{}
			if in.onPanic != nil {
				in.onPanic(in.name, v, debug.Stack())
			}
			ok = false
		}
	}()
	plan, _ := p.FitWith(in.work, in.mix, in.scratch)
	return plan != nil
}

// choose decides the victims on the node from its copied inputs, without the cache (victimsOf
// reads in.metas). budget bounds the Fit calls of the minimum-set search.
func (in *preemptInput) choose(p *core.Pod, pdbs PDBLister, budget int) (Victims, bool) {
	fits := func(set []int) bool { return in.fits(p, set) }
	if fits(nil) {
		if in.leaving {
			// Pods already leaving make room: no pod need go. The node is no candidate now; the
			// pod fits once they are gone, and kube-scheduler tries it again when they are.
			return Victims{}, false
		}
		// No card needs freeing: kube-scheduler's victims stand for what it models itself.
		if len(in.prop.Victims) == 0 {
			return Victims{}, false
		}
		return victimsOf(in.prop.Victims, in.metas, in.prop.PDBViolations, pdbs), true
	}
	all := make([]int, len(in.pool))
	for i := range all {
		all[i] = i
	}
	if len(in.pool) == 0 || !fits(all) {
		return Victims{}, false
	}
	cost := func(set []int) setCost {
		var sc setCost
		metas := slices.Clone(in.kept)
		for k, i := range set {
			pr := int64(in.pool[i].meta.priority)
			if k == 0 || pr > sc.maxPrio {
				sc.maxPrio = pr
			}
			sc.sumPrio += pr
			if !in.pool[i].proposed {
				sc.notProposed++
			}
			metas = append(metas, in.pool[i].meta)
		}
		sc.pdb = pdbViolations(metas, pdbs)
		return sc
	}
	pastDeadline := func() bool { return time.Now().After(in.deadline) }
	best := minimumSet(len(in.pool), budget, fits, cost, pastDeadline)
	if best == nil {
		pastLimit := func() bool { return time.Now().After(in.limit) }
		if best = minimalSet(all, fits, pastLimit); best == nil {
			return Victims{}, false // out of time: the node is left out of the answer
		}
	}
	uids := slices.Clone(in.keptUIDs)
	for _, i := range best {
		uids = append(uids, in.pool[i].uid)
	}
	return victimsOf(uids, in.metas, -1, pdbs), true
}

// minimumSet finds the smallest set of indexes below k that fits, the best by cost among sets of
// that size; nil when the budget of Fit calls runs out, or stop says so (checked before every
// Fit: a search on a large node must not run past the call's deadline), first.
func minimumSet(k, budget int, fits func([]int) bool, cost func([]int) setCost, stop func() bool) []int {
	for size := 1; size <= k; size++ {
		var best []int
		var bestCost setCost
		combo := make([]int, size)
		for i := range combo {
			combo[i] = i
		}
		for {
			if budget == 0 || stop() {
				return nil
			}
			budget--
			if fits(combo) {
				if sc := cost(combo); best == nil || sc.less(bestCost) {
					best, bestCost = slices.Clone(combo), sc
				}
			}
			// Next combination in lexicographic order.
			i := size - 1
			for i >= 0 && combo[i] == k-size+i {
				i--
			}
			if i < 0 {
				break
			}
			combo[i]++
			for j := i + 1; j < size; j++ {
				combo[j] = combo[j-1] + 1
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// minimalSet starts from every candidate of all (least important first) and spares each one,
// most important first, while the pod still fits without it; nil when stop says so (checked
// before every Fit) first.
func minimalSet(all []int, fits func([]int) bool, stop func() bool) []int {
	set := slices.Clone(all)
	for j := len(all) - 1; j >= 0; j-- {
		if stop() {
			return nil
		}
		without := slices.DeleteFunc(slices.Clone(set), func(i int) bool { return i == all[j] })
		if fits(without) {
			set = without
		}
	}
	return set
}

// victimsOf renders victims in decreasing priority (earliest started first among equals, as
// kube-scheduler's MoreImportantPod orders them), with their PDB violations (pdb < 0: count them).
func victimsOf(uids []types.UID, metas map[types.UID]podMeta, pdb int64, pdbs PDBLister) Victims {
	type victim struct {
		uid types.UID
		m   podMeta
	}
	vs := make([]victim, len(uids))
	for i, u := range uids {
		vs[i] = victim{uid: u, m: metas[u]}
	}
	slices.SortStableFunc(vs, func(a, b victim) int {
		if a.m.priority != b.m.priority {
			return int(b.m.priority) - int(a.m.priority)
		}
		return a.m.start.Compare(b.m.start)
	})
	out := Victims{PDBViolations: pdb}
	ms := make([]podMeta, len(vs))
	for i, v := range vs {
		out.Pods = append(out.Pods, v.uid)
		key := string(v.uid)
		if v.m.name != "" {
			key = v.m.namespace + "/" + v.m.name
		}
		out.Keys = append(out.Keys, key)
		ms[i] = v.m
	}
	if pdb < 0 {
		out.PDBViolations = pdbViolations(ms, pdbs)
	}
	return out
}

// listPDBs lists a namespace's PodDisruptionBudgets from an informer's lister (none when it fails).
func listPDBs(l policylisters.PodDisruptionBudgetLister) PDBLister {
	return func(namespace string) []*policyv1.PodDisruptionBudget {
		pdbs, err := l.PodDisruptionBudgets(namespace).List(labels.Everything())
		if err != nil {
			return nil
		}
		return pdbs
	}
}

// pdbViolations counts the victims whose eviction a PodDisruptionBudget does not allow, as
// kube-scheduler counts them (filterPodsWithPDBViolation): each matching budget's allowed
// disruptions are spent victim by victim; a victim the budget already counts as disrupted spends
// nothing.
func pdbViolations(victims []podMeta, pdbs PDBLister) int64 {
	if pdbs == nil {
		return 0
	}
	allowed := map[*policyv1.PodDisruptionBudget]int32{}
	var n int64
	for _, v := range victims {
		if len(v.labels) == 0 {
			continue
		}
		violated := false
		for _, pdb := range pdbs(v.namespace) {
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(v.labels)) {
				continue
			}
			if _, disrupted := pdb.Status.DisruptedPods[v.name]; disrupted {
				continue
			}
			left, seen := allowed[pdb]
			if !seen {
				left = pdb.Status.DisruptionsAllowed
			}
			left--
			allowed[pdb] = left
			if left < 0 {
				violated = true
			}
		}
		if violated {
			n++
		}
	}
	return n
}

// EventPreemption is the reason of the Event that tells a preemptor which pods Cardinal would
// preempt for it.
const EventPreemption = "GPUPreemption"

// preemptEventNodes is how many nodes the Event names.
const preemptEventNodes = 3

// Preempt answers kube-scheduler's preemption call: for each candidate node, the victims whose
// cards let the pod fit there; nodes where none do are left out.
func (s *Server) Preempt(ctx context.Context, args *extenderv1.ExtenderPreemptionArgs) *extenderv1.ExtenderPreemptionResult {
	res := &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	if args.Pod == nil {
		s.metrics.requests.WithLabelValues("preempt", "error").Inc()
		return res
	}
	proposals := map[string]Proposal{}
	for node, v := range args.NodeNameToMetaVictims {
		prop := Proposal{}
		if v != nil {
			prop.PDBViolations = v.NumPDBViolations
			for _, mp := range v.Pods {
				if mp != nil {
					prop.Victims = append(prop.Victims, types.UID(mp.UID))
				}
			}
		}
		proposals[node] = prop
	}
	for node, v := range args.NodeNameToVictims {
		if _, ok := proposals[node]; ok {
			continue
		}
		prop := Proposal{}
		if v != nil {
			prop.PDBViolations = v.NumPDBViolations
			for _, pod := range v.Pods {
				if pod != nil {
					prop.Victims = append(prop.Victims, pod.UID)
				}
			}
		}
		proposals[node] = prop
	}
	log := s.log.WithValues(logging.KeyPod, args.Pod.Namespace+"/"+args.Pod.Name)
	p, err := s.prepare(args.Pod)
	if err != nil {
		// A request Cardinal cannot read fits no node: preempting for it frees nothing it can use.
		s.metrics.requests.WithLabelValues("preempt", "error").Inc()
		log.Info("preempt: pod request unreadable; no node", logging.KeyReason, err.Error())
		return res
	}
	if p == nil || p.Request.Empty() {
		// No GPUs: kube-scheduler's own victims stand (the chart asks no preemption for a routed
		// CPU-only pod; this serves a configuration that does).
		s.metrics.requests.WithLabelValues("preempt", "passthrough").Inc()
		for node, prop := range proposals {
			if len(prop.Victims) > 0 {
				res.NodeNameToMetaVictims[node] = metaVictims(prop.Victims, prop.PDBViolations)
			}
		}
		return res
	}
	if _, inGroup, _ := annotations.DecodePodGroup(args.Pod.Labels, args.Pod.Annotations); inGroup {
		// A member of a pod group preempts nothing (docs/pod-groups.md): cards freed for one
		// member do not place its group, and a group that cannot be placed whole holds nothing.
		s.metrics.requests.WithLabelValues("preempt", "ok").Inc()
		log.V(2).Info("preempt: a pod group's member preempts no pod; no node")
		return res
	}
	if s.misses.missed(args.Pod.UID, s.cache.clock.Now()) {
		// Its filter missed a sample while nodes outside it fit (sampling.go): the next sample
		// places it without evicting anyone.
		s.metrics.requests.WithLabelValues("preempt", "ok").Inc()
		log.V(2).Info("preempt: nodes outside kube-scheduler's sample fit the pod; no node")
		return res
	}
	if why, waiting := s.cache.PreemptionUnderWay(args.Pod.UID, p); waiting {
		// No node: kube-scheduler keeps the pod's nomination and tries it again when the pods
		// leaving are gone (preempt_repeat.go).
		s.metrics.requests.WithLabelValues("preempt", "ok").Inc()
		log.V(2).Info("preempt: an earlier preemption of the pod is under way; no node", logging.KeyReason, why)
		return res
	}
	chosen := s.cache.ChooseVictims(args.Pod.UID, p, proposals, s.refusedNodes(args.Pod.UID), s.pdbs)
	nodes := make([]string, 0, len(chosen))
	for node, v := range chosen {
		res.NodeNameToMetaVictims[node] = metaVictims(v.Pods, v.PDBViolations)
		nodes = append(nodes, node)
	}
	s.metrics.requests.WithLabelValues("preempt", "ok").Inc()
	slices.SortFunc(nodes, func(a, b string) int {
		if d := len(chosen[a].Pods) - len(chosen[b].Pods); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	for i, node := range nodes {
		if i == preemptEventNodes {
			fmt.Fprintf(&b, "; and %d more nodes", len(nodes)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "node %s: %s", node, strings.Join(chosen[node].Keys, ", "))
	}
	if len(nodes) > 0 {
		s.recorder.Eventf(args.Pod, corev1.EventTypeNormal, EventPreemption, "lower-priority pods whose GPUs would let the pod run: %s", b.String())
	}
	log.V(2).Info("preempt", "proposed", len(proposals), "nodes", len(nodes))
	return res
}

func metaVictims(uids []types.UID, pdb int64) *extenderv1.MetaVictims {
	mv := &extenderv1.MetaVictims{Pods: make([]*extenderv1.MetaPod, len(uids)), NumPDBViolations: pdb}
	for i, u := range uids {
		mv.Pods[i] = &extenderv1.MetaPod{UID: string(u)}
	}
	return mv
}

// refused remembers, for the last pod filter saw, the nodes it refused for a reason preemption
// may resolve. Those nodes passed kube-scheduler's own filters, so its dry run finds the pod fits
// there without victims and proposes none (it errs "expected at least one victim pod"): the
// preempt call that follows may offer them itself.
type refused struct {
	uid   types.UID
	nodes []string
}

// refusedNodes returns the nodes filter refused the pod uid on for a resolvable reason in its
// last call for that pod.
func (s *Server) refusedNodes(uid types.UID) []string {
	s.memoMu.Lock()
	defer s.memoMu.Unlock()
	if s.refused.uid != uid {
		return nil
	}
	return s.refused.nodes
}

// PreemptionNotes returns, for each of names whose verdict refuses pod p (uid), what preemption
// adds to its reason, "" for none: on a node where pods of equal or higher priority are
// nominated, that its cards are kept for them; on the node the pod is nominated to itself, the
// pods being deleted there that it waits for. nil when no pod is nominated anywhere.
func (c *Cache) PreemptionNotes(uid types.UID, p *core.Pod, names []string, verdicts []Verdict) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.preempt.byUID) == 0 {
		return nil
	}
	self := c.preempt.byUID[uid]
	var notes []string
	for i, name := range names {
		if verdicts[i].Reason == nil {
			continue
		}
		note := ""
		if self != nil && self.node == name {
			note = c.terminatingNote(name, p.Priority)
		}
		if note == "" {
			note = c.nomineesNote(name, p.Priority, uid)
		}
		if note == "" {
			continue
		}
		if notes == nil {
			notes = make([]string, len(names))
		}
		notes[i] = note
	}
	return notes
}

// noteList is how many pods a note names.
const noteList = 3

func listKeys(keys []string) string {
	slices.Sort(keys)
	if len(keys) > noteList {
		return fmt.Sprintf("%s and %d more", strings.Join(keys[:noteList], ", "), len(keys)-noteList)
	}
	return strings.Join(keys, ", ")
}

// terminatingNote names the lower-priority pods being deleted on node. Called with c.mu held.
func (c *Cache) terminatingNote(node string, prio int32) string {
	n := c.nodes[node]
	if n == nil {
		return ""
	}
	var keys []string
	for _, rec := range n.pods {
		if m, ok := c.preempt.meta[rec.uid]; ok && m.terminating && m.priority < prio {
			keys = append(keys, rec.key)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	return "; nominated here, waits for preempted pods " + listKeys(keys) + " to terminate"
}

// nomineesNote names the pods nominated to node that hold its cards for a pod of priority prio.
// Called with c.mu held.
func (c *Cache) nomineesNote(node string, prio int32, uid types.UID) string {
	var keys []string
	for _, nm := range c.preempt.nominees[node] {
		if nm.uid == uid || nm.pod == nil || nm.priority < prio {
			continue
		}
		if _, reserved := c.pods[nm.uid]; reserved {
			continue
		}
		keys = append(keys, nm.raw.Namespace+"/"+nm.raw.Name)
	}
	if len(keys) == 0 {
		return ""
	}
	return "; cards kept for nominated pods of higher or equal priority: " + listKeys(keys)
}

// servesAny reports whether device c is the kind some container of p asks for (a whole card, or a
// MIG instance of the container's profile): freeing a device of another kind gives p nothing.
func servesAny(c *core.Card, p *core.Pod) bool {
	for i := range p.Request.Containers {
		if c.Serves(&p.Request.Containers[i]) {
			return true
		}
	}
	return false
}
