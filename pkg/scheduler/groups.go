package scheduler

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// Pod groups (issue 38; docs/pod-groups.md). Pods that name a group with Kueue's keys
// (annotations.DecodePodGroup) are placed all or nothing:
//
//   - Filter of a member that holds no reservation plans the group (PlanGroup): once the group's
//     total count of pods exist, it reserves cards for every member not yet bound, one after the
//     other with the very decision and hold a bind makes (reserveOn), and, if any member fits no
//     node, takes every one of those reservations back: a group that cannot be placed whole holds
//     nothing, and each member's reason says what the group lacks.
//   - A planned member's reservation is an ordinary reservation (podRecord.reserved, with its
//     assignment) marked with its group: Filter passes only its node and Bind writes exactly the
//     reserved assignment, as for a pod whose earlier bind may still commit.
//   - A member gone before it was bound (deleted, or failed) leaves its cards to the group as a
//     vacant slot (vacate); a member created again with the same request takes the slot over
//     (claim), so a job controller's replacement rejoins the plan.
//   - The plan's reservations are not settled one by one by the reservation sweeper: the whole
//     plan expires (ExpireGroups) when no member was bound or placed for the reservation TTL, and
//     then holds nothing; the next member's filter plans again.
//
// A member bound before (or placed by another scheduler) counts as placed and keeps what it holds.

// vacantPrefix starts the UID a vacant slot's reservation is held under (never a pod's UID: pod
// UIDs have no colon).
const vacantPrefix = "group-slot:"

// groupMember is what the cache keeps of a pod that names a group.
type groupMember struct {
	pod   *corev1.Pod
	bound bool
}

// podGroup is what the cache knows of one pod group.
type podGroup struct {
	key string // namespace/name
	// members are the group's pods that are not finished or being deleted.
	members map[types.UID]*groupMember
	// slots are the UIDs the plan's reservations are held under: members not yet bound, and
	// vacant slots (vacantPrefix).
	slots map[types.UID]struct{}
	// since is when the plan was made or last made progress (a member bound or placed again).
	since time.Time
}

// groupKeyOf returns the key (namespace/name) of the group a pod of this scheduler names, or ""
// for a pod that names none or names one it cannot read.
func (c *Cache) groupKeyOf(pod *corev1.Pod) string {
	if !c.ours(pod.Spec.SchedulerName) {
		return ""
	}
	g, ok, err := annotations.DecodePodGroup(pod.Labels, pod.Annotations)
	if !ok || err != nil {
		return ""
	}
	return pod.Namespace + "/" + g.Name
}

// group returns a group's entry, creating it. Callers hold c.mu for writing.
func (c *Cache) group(key string) *podGroup {
	g := c.groups[key]
	if g == nil {
		if c.groups == nil {
			c.groups, c.memberOf = map[string]*podGroup{}, map[types.UID]string{}
		}
		g = &podGroup{key: key, members: map[types.UID]*groupMember{}, slots: map[types.UID]struct{}{}}
		c.groups[key] = g
	}
	return g
}

// gcGroup forgets a group with no members and no reservations. Callers hold c.mu for writing.
func (c *Cache) gcGroup(g *podGroup) {
	if len(g.members) == 0 && len(g.slots) == 0 {
		delete(c.groups, g.key)
	}
}

// trackGroup records pod as a member of group key ("": of none). Callers hold c.mu for writing.
func (c *Cache) trackGroup(pod *corev1.Pod, key string) {
	if prev, ok := c.memberOf[pod.UID]; ok && prev != key {
		c.untrackGroup(pod.UID)
	}
	if key == "" || finished(pod) || pod.DeletionTimestamp != nil {
		c.untrackGroup(pod.UID)
		return
	}
	g := c.group(key)
	g.members[pod.UID] = &groupMember{pod: pod, bound: pod.Spec.NodeName != ""}
	c.memberOf[pod.UID] = key
}

// untrackGroup forgets a pod as a group member. Callers hold c.mu for writing.
func (c *Cache) untrackGroup(uid types.UID) {
	key, ok := c.memberOf[uid]
	if !ok {
		return
	}
	delete(c.memberOf, uid)
	if g := c.groups[key]; g != nil {
		delete(g.members, uid)
		c.gcGroup(g)
	}
}

// slotChanged keeps the groups' slots equal to the group reservations; replace calls it. Callers
// hold c.mu for writing.
func (c *Cache) slotChanged(uid types.UID, old, rec *podRecord) {
	if old != nil && old.group != "" {
		if g := c.groups[old.group]; g != nil {
			delete(g.slots, uid)
			if rec == nil || rec.group != old.group {
				c.gcGroup(g)
			}
		}
	}
	if rec != nil && rec.group != "" {
		c.group(rec.group).slots[uid] = struct{}{}
	}
}

// vacate moves the reservation of a group member whose pod is gone (deleted, finished unbound,
// or proven gone after a bind) to a vacant slot of its group: the cards stay the group's, for a
// member created again, until the plan expires. It reports whether it did. Callers hold c.mu for
// writing; they release the pod's CPU and memory reservations themselves.
func (c *Cache) vacate(uid types.UID) bool {
	old := c.pods[uid]
	if old == nil || !old.reserved || old.group == "" || strings.HasPrefix(string(uid), vacantPrefix) {
		return false
	}
	slot := *old
	slot.uid = types.UID(vacantPrefix + string(uid))
	slot.applied, slot.posting, slot.unsettled = nil, 0, false
	c.replace(uid, old, nil)
	c.replace(slot.uid, nil, &slot)
	return true
}

// sameShape reports whether two members ask for the same thing (a vacant slot made for one can
// serve the other).
func sameShape(a, b *core.Pod) bool {
	return a != nil && b != nil && a.Host == b.Host && reflect.DeepEqual(a.Request, b.Request) && reflect.DeepEqual(a.Selector, b.Selector)
}

// GroupAnswer is PlanGroup's answer for one member.
type GroupAnswer struct {
	// Node is the node the group's plan holds for the pod; "" when it holds none.
	Node string
	// Reason says why the group holds nothing for the pod (Node == ""): ReasonGroup.
	Reason *core.Reason
	// Planned is true when this call reserved cards for members (a new plan or a slot taken over).
	Planned bool
}

// groupReason is a ReasonGroup with its text.
func groupReason(format string, args ...any) *core.Reason {
	return &core.Reason{Kind: core.ReasonGroup, Detail: fmt.Sprintf(format, args...)}
}

// maxGroupNodeReasons bounds the nodes a group's reason quotes for its first member that fits none.
const maxGroupNodeReasons = 3

// PlanGroup answers where the plan of group g holds the member pod (uid, prepared as p), planning
// the group when it has no reservation for the pod: vacant slots of the group are taken over by
// members with the same request first; then, once the group's total count of pods exist, every
// member not yet placed is reserved on names (the nodes kube-scheduler found feasible for the pod:
// a group's members are replicas with one template) or, when one fits nowhere, none is. prepare
// reads the other members' requests (the server's prepare).
func (c *Cache) PlanGroup(pod *corev1.Pod, g annotations.PodGroup, p *core.Pod, names []string, prepare func(*corev1.Pod) (*core.Pod, error)) GroupAnswer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rec := c.pods[pod.UID]; rec != nil {
		return GroupAnswer{Node: rec.node} // planned before, or bound: kube-scheduler's own check refuses the rest
	}
	key := pod.Namespace + "/" + g.Name
	if c.ours(pod.Spec.SchedulerName) {
		c.trackGroup(pod, key) // the informer may not have shown the pod yet
	}
	grp := c.group(key)
	now := c.clock.Now()
	// The group's pods: bound, reserved, and the rest (oldest first).
	bound := 0
	var waiting []*corev1.Pod
	for uid, m := range grp.members {
		switch _, reserved := grp.slots[uid]; {
		case m.bound:
			bound++
		case !reserved && c.pods[uid] == nil:
			waiting = append(waiting, m.pod)
		}
	}
	slices.SortFunc(waiting, func(a, b *corev1.Pod) int {
		if d := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	prepared := make([]*core.Pod, len(waiting))
	for i, m := range waiting {
		if m.UID == pod.UID {
			prepared[i] = p
			continue
		}
		if mp, err := prepare(m); err == nil {
			prepared[i] = mp
		}
	}
	// Vacant slots go to members of the same request first.
	claimed := false
	for i, m := range waiting {
		if prepared[i] == nil || prepared[i].Request.Empty() {
			continue
		}
		if c.claim(grp, m, prepared[i]) {
			claimed = true
			grp.since = now
		}
	}
	if rec := c.pods[pod.UID]; rec != nil {
		return GroupAnswer{Node: rec.node, Planned: claimed}
	}
	var rest []int
	for i, m := range waiting {
		if c.pods[m.UID] == nil {
			rest = append(rest, i)
		}
	}
	placed := bound + len(grp.slots)
	need := g.Total - placed
	exist := placed + len(rest)
	switch {
	case need <= 0:
		return GroupAnswer{Reason: groupReason("group %s has all its %d pods placed or planned; this pod is one more than %s", g.Name, g.Total, annotations.PodGroupTotalCount), Planned: claimed}
	case len(rest) < need:
		return GroupAnswer{Reason: groupReason("group %s needs %d pods; %d exist, waiting for the rest (%d placed)", g.Name, g.Total, exist, placed), Planned: claimed}
	}
	take := rest[:need]
	if !slices.ContainsFunc(take, func(i int) bool { return waiting[i].UID == pod.UID }) {
		return GroupAnswer{Reason: groupReason("group %s has %d pods, more than its %s %d; this pod waits for a place in it", g.Name, exist, annotations.PodGroupTotalCount, g.Total), Planned: claimed}
	}
	// Plan: each member on the node that keeps the group on the fewest nodes (nodes the group
	// already uses first, then those with the most free cards), with the decision a bind makes.
	cands := c.groupCandidates(names)
	used := map[string]int{}
	for _, m := range grp.members {
		if m.bound {
			used[m.pod.Spec.NodeName]++
		}
	}
	for uid := range grp.slots {
		if rec := c.pods[uid]; rec != nil {
			used[rec.node]++
		}
	}
	var made []types.UID
	fit := placed
	var unfit string
	for _, i := range take {
		m, mp := waiting[i], prepared[i]
		if mp == nil {
			if unfit == "" {
				unfit = fmt.Sprintf("%s/%s: its request cannot be read", m.Namespace, m.Name)
			}
			continue
		}
		if mp.Request.Empty() {
			fit++ // no card to hold: kube-scheduler places it
			continue
		}
		node, why := c.placeMember(m, mp, key, cands, used)
		if node == "" {
			if unfit == "" {
				unfit = fmt.Sprintf("%s/%s fits no node: %s", m.Namespace, m.Name, why)
			}
			continue
		}
		made = append(made, m.UID)
		used[node]++
		fit++
	}
	if unfit != "" {
		for _, uid := range made {
			c.drop(uid)
		}
		return GroupAnswer{Reason: groupReason("group %s needs %d pods; %d fit now (%s)", g.Name, g.Total, fit, unfit), Planned: claimed}
	}
	grp.since = now
	rec := c.pods[pod.UID]
	if rec == nil {
		// A member without cards to hold: nothing pins it.
		return GroupAnswer{Planned: true}
	}
	return GroupAnswer{Node: rec.node, Planned: true}
}

// claim gives member m (prepared as p) a vacant slot of its group with the same request, reserved
// again on the slot's node with the decision a bind makes; it reports whether it did. Callers hold
// c.mu for writing.
func (c *Cache) claim(grp *podGroup, m *corev1.Pod, p *core.Pod) bool {
	var vacant []types.UID
	for uid := range grp.slots {
		if strings.HasPrefix(string(uid), vacantPrefix) {
			vacant = append(vacant, uid)
		}
	}
	slices.Sort(vacant)
	for _, uid := range vacant {
		slot := c.pods[uid]
		if slot == nil || !sameShape(slot.memberReq, p) {
			continue
		}
		// The slot's cards are freed and taken again in one step under the lock: nobody else
		// can take them between.
		c.replace(uid, slot, nil)
		if _, r, _ := c.reserveOn(m.UID, m.Namespace+"/"+m.Name, p, slot.node, grp.key); r == nil {
			c.pods[m.UID].memberReq = p
			return true
		}
		slot.applied = nil
		c.replace(uid, nil, slot)
	}
	return false
}

// groupCandidate is a node a group's member may be planned on.
type groupCandidate struct {
	n    *nodeEntry
	at   int // position in the filter's names
	free int // cards with nothing held
}

// groupCandidates returns the nodes of names the cache has cards of, once each.
func (c *Cache) groupCandidates(names []string) []groupCandidate {
	out := make([]groupCandidate, 0, len(names))
	seen := make(map[string]bool, len(names))
	for i, name := range names {
		n, ok := c.nodes[name]
		if !ok || n.state == nil || seen[name] {
			continue
		}
		seen[name] = true
		out = append(out, groupCandidate{n: n, at: i})
	}
	return out
}

// freeCards counts a node's cards (MIG instances included) that are in service and hold nothing.
func freeCards(s *core.NodeState) int {
	free := 0
	for i := range s.Cards {
		c := &s.Cards[i]
		if c.Healthy && c.Cordoned == "" && c.Held == 0 && !c.InMIGMode() {
			free++
		}
	}
	return free
}

// placeMember reserves member m (prepared as p) of group key on the first node of cands, in the
// order that keeps the group on the fewest nodes, where it fits and need not wait; it returns the
// node, or "" and why not (the first nodes' reasons). Callers hold c.mu for writing.
func (c *Cache) placeMember(m *corev1.Pod, p *core.Pod, key string, cands []groupCandidate, used map[string]int) (string, string) {
	for i := range cands {
		cands[i].free = freeCards(cands[i].n.state)
	}
	slices.SortStableFunc(cands, func(a, b groupCandidate) int {
		if d := used[b.n.name] - used[a.n.name]; d != 0 {
			return d
		}
		if d := b.free - a.free; d != 0 {
			return d
		}
		return a.at - b.at
	})
	var why []string
	for _, cand := range cands {
		_, r, _ := c.reserveOn(m.UID, m.Namespace+"/"+m.Name, p, cand.n.name, key)
		if r == nil {
			c.pods[m.UID].memberReq = p
			return cand.n.name, ""
		}
		if len(why) < maxGroupNodeReasons {
			why = append(why, cand.n.name+": "+r.String())
		}
	}
	switch {
	case len(cands) == 0:
		return "", "no GPU node is feasible for it"
	case len(cands) > len(why):
		why = append(why, fmt.Sprintf("and %d more", len(cands)-len(why)))
	}
	return "", strings.Join(why, "; ")
}

// ExpireGroups frees the plans of groups that made no progress since cutoff (no member bound or
// placed again): their reservations of members not yet bound, and their vacant slots. A
// reservation whose Binding may still commit is handed to the reservation sweeper instead, which
// frees it only on proof. It returns the keys of the groups whose plans expired.
func (c *Cache) ExpireGroups(cutoff time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for key, g := range c.groups {
		if len(g.slots) == 0 || !g.since.Before(cutoff) {
			continue
		}
		uids := make([]types.UID, 0, len(g.slots))
		for uid := range g.slots {
			uids = append(uids, uid)
		}
		for _, uid := range uids {
			rec := c.pods[uid]
			if rec == nil {
				delete(g.slots, uid)
				continue
			}
			if rec.posting > 0 || rec.unsettled {
				rec.group = "" // the sweeper settles it like any reservation
				delete(g.slots, uid)
				continue
			}
			c.drop(uid)
		}
		c.gcGroup(g)
		out = append(out, key)
	}
	slices.Sort(out)
	return out
}

// GroupSlots returns, for tests and debugging, the nodes the plan of group key (namespace/name)
// holds cards on, one entry per reservation (vacant slots included), sorted.
func (c *Cache) GroupSlots(key string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	g := c.groups[key]
	if g == nil {
		return nil
	}
	var out []string
	for uid := range g.slots {
		if rec := c.pods[uid]; rec != nil {
			out = append(out, rec.node)
		}
	}
	slices.Sort(out)
	return out
}

// groupVerdicts is Filter for a member of a pod group: the node the group's plan holds for it
// passes (PlanGroup plans the group when it holds none), every other node fails with the group's
// reason.
func (s *Server) groupVerdicts(pod *corev1.Pod, g annotations.PodGroup, p *core.Pod, names []string) []Verdict {
	a := s.cache.PlanGroup(pod, g, p, names, s.prepare)
	if a.Planned {
		s.log.V(2).Info("group planned", logging.KeyPod, pod.Namespace+"/"+pod.Name, "group", g.Name, logging.KeyNode, a.Node)
	}
	out := make([]Verdict, len(names))
	if a.Node == "" && a.Reason == nil {
		// A member without cards to hold in a group that can be placed: decided as a single pod.
		return s.cache.Evaluate(pod.UID, p, names, out[:0])
	}
	r := a.Reason
	if r == nil {
		r = groupReason("group %s's plan holds node %s for this pod", g.Name, a.Node)
	}
	for i, name := range names {
		if name == a.Node {
			out[i] = Verdict{Score: core.MaxScore}
			continue
		}
		out[i] = Verdict{Reason: r}
	}
	return out
}

// groupBindable refuses the bind of a group member that the group's plan holds no reservation for:
// only its filter places it, with the rest of its group. Pods of no group, and members without
// cards to hold, are bindable.
func (s *Server) groupBindable(pod *corev1.Pod) error {
	g, inGroup, err := annotations.DecodePodGroup(pod.Labels, pod.Annotations)
	switch {
	case err != nil:
		return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	case !inGroup || s.cache.holds(pod.UID):
		return nil
	}
	return fmt.Errorf("pod %s/%s: group %s holds no cards for it yet; its filter places it with the rest of the group: %w", pod.Namespace, pod.Name, g.Name, ErrNoFit)
}

// holds reports whether the cache has a record (a reservation or what a bound pod holds) of uid.
func (c *Cache) holds(uid types.UID) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.pods[uid] != nil
}
