package deviceplugin

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Reason classifies why Allocate refused a request. Messages start with "cardinal: <reason>:".
type Reason string

const (
	// ReasonInvalidID: a device ID is not of the form <UUID> or <UUID>::<k>.
	ReasonInvalidID Reason = "invalid-device-id"
	// ReasonUnknownDevice: a device ID is not advertised by this plugin on this node.
	ReasonUnknownDevice Reason = "unknown-device"
	// ReasonDuplicateID: the same device ID twice in one container's request, or two slots of one card.
	ReasonDuplicateID Reason = "duplicate-device-id"
	// ReasonNoOwner: the IDs match no assignment and no container in flight on the node asks for that
	// many devices.
	ReasonNoOwner Reason = "no-owner"
	// ReasonAmbiguous: the IDs match no assignment and several containers in flight could own them.
	ReasonAmbiguous Reason = "ambiguous-owner"
	// ReasonConflict: the IDs are assigned to another container in flight (or to two pods at once).
	ReasonConflict Reason = "conflict"
	// ReasonSelector: the only possible owner's selectors refuse the cards the kubelet chose.
	ReasonSelector Reason = "selector-mismatch"
	// ReasonCapacity: the kubelet chose cards other than the owner's assignment (or the owner has
	// none) and a card lacks the memory, cores or exclusivity the owner needs beside the pods on it.
	ReasonCapacity Reason = "insufficient-capacity"
	// ReasonSharingNotReady: the container shares its cards and the node's sharing mode (mps,
	// hami-core) cannot enforce limits now (the MPS control daemon does not answer, the HAMi-core
	// library is missing).
	ReasonSharingNotReady Reason = "sharing-not-ready"
)

// AllocateError is a refused Allocate; the message names the cause so a person reading the pod's
// events (the kubelet copies it there) can act on it.
type AllocateError struct {
	Reason  Reason
	Message string
	// Pods are the pods the error is about, for events.
	Pods []*podEntry
}

func (e *AllocateError) Error() string { return "cardinal: " + string(e.Reason) + ": " + e.Message }

func refuse(r Reason, pods []*podEntry, format string, args ...any) *AllocateError {
	return &AllocateError{Reason: r, Message: fmt.Sprintf(format, args...), Pods: pods}
}

// outcome is who gets the devices of one container request.
type outcome struct {
	// Owner is the container (of a pod Cardinal did not schedule when its pod has no assignment).
	Owner *holder
	// IDs are the requested IDs, in the kubelet's order.
	IDs []string
	// Exact is true when the IDs are exactly the owner's assignment.
	Exact bool
}

func inFlight(h *holder) bool { return !h.Allocated && h.Pod.Pending && !h.Pod.Gone }

// checkIDs validates one container's IDs: well formed, advertised here, no repeats, distinct cards.
func checkIDs(t *deviceTable, ids []string) *AllocateError {
	if len(ids) == 0 {
		return refuse(ReasonInvalidID, nil, "no device IDs in the request")
	}
	cards := map[int]string{}
	for i, id := range ids {
		if _, _, err := annotations.ParseDeviceID(id); err != nil {
			return refuse(ReasonInvalidID, nil, "%v", err)
		}
		d, ok := t.devices[id]
		if !ok {
			return refuse(ReasonUnknownDevice, nil, "device %s is not advertised by this plugin", id)
		}
		if slices.Contains(ids[:i], id) {
			return refuse(ReasonDuplicateID, nil, "device %s requested twice", id)
		}
		if prev, dup := cards[d.Card]; dup {
			return refuse(ReasonDuplicateID, nil, "devices %s and %s are slots of the same card %s", prev, id, t.cards[d.Card].UUID)
		}
		cards[d.Card] = id
	}
	return nil
}

// admitting returns the container the kubelet is admitting when it asks for size devices: the first
// in-flight container of that size in admission order (holders are in that order; see
// admittedBefore), or nil.
func admitting(holders []holder, size int) *holder {
	for i := range holders {
		if h := &holders[i]; inFlight(h) && h.Count == size {
			return h
		}
	}
	return nil
}

// resolve finds the container a set of device IDs belongs to (DESIGN.md, "How Allocate knows the
// pod"). holders are every GPU container of the pods bound to this node, in admission order.
//
// Which pod the kubelet is admitting: it admits one pod at a time, in bind order, and allocates its
// containers in order; candidates are the in-flight containers (Pending, not yet allocated) that ask
// for as many devices as the request holds, and the first of them in admission order is the one.
// Rules, so that no pod gets another's cards and no Cardinal pod is served as if unmanaged:
//   - The IDs are exactly a container's assignment: served to it, unless an in-flight container of a
//     pod Cardinal did not schedule, admitted before it, asks for as many devices — then the kubelet
//     is admitting that pod, which must not take the assigned cards: refused (conflict).
//   - Other IDs: the first candidate gets them when the order is certain (every other candidate was
//     seen bound after it; see certainlyBefore) and at most one candidate has an assignment — an
//     unmanaged one as is (whole, free cards; no limits), one with an assignment as a substitute
//     (its selectors accept the cards, each card has room for its memory, cores and exclusivity
//     beside the pods on it; limits from its request). Several unmanaged candidates are
//     interchangeable (no limits, no selectors; PodResources corrects a swap).
//   - When the order is not certain (pods first seen in the same listing, bound in the same second),
//     the IDs are served only if every candidate would get the same answer (the Cardinal container
//     wants whole cards and its selectors and the cards' room accept it); otherwise refused
//     (ambiguous), as when several candidates have assignments. Serving by a guess could hand a
//     Cardinal pod a card without its limits.
func resolve(t *deviceTable, holders []holder, ids []string) (outcome, *AllocateError) {
	if err := checkIDs(t, ids); err != nil {
		return outcome{}, err
	}
	first := admitting(holders, len(ids))
	// 1. Exactly someone's assignment. In-flight containers first; an already allocated one matches
	// only a repeated call (e.g. after a plugin restart).
	var exactInFlight, exactDone []*holder
	for i := range holders {
		h := &holders[i]
		if h.Assigned == nil || h.Pod.Gone || !sameSet(h.ids(), ids) {
			continue
		}
		if inFlight(h) {
			exactInFlight = append(exactInFlight, h)
		} else {
			exactDone = append(exactDone, h)
		}
	}
	for _, exact := range [][]*holder{exactInFlight, exactDone} {
		if len(exact) == 0 {
			continue
		}
		// An app container that reuses its init container's cards has the same IDs in the same pod.
		if pods := podsOf(exact); len(pods) > 1 {
			return outcome{}, refuse(ReasonConflict, pods, "devices %s are assigned to %s", strings.Join(ids, ","), describeAll(exact))
		}
		h := exact[0]
		if inFlight(h) && first != nil && !first.Pod.HasAssignment && first.Pod != h.Pod && certainlyBefore(first.Pod, h.Pod) {
			return outcome{}, refuse(ReasonConflict, []*podEntry{first.Pod, h.Pod},
				"devices %s are the assignment of %s, but the kubelet admits pods in bind order and %s, which Cardinal did not schedule, was bound first and still waits for %d device(s): it must not take another pod's cards",
				strings.Join(ids, ","), h, first, len(ids))
		}
		return outcome{Owner: h, IDs: ids, Exact: true}, nil
	}

	// 2. Not an assignment: the kubelet chose other IDs (TopologyManager, drift), or the pod is not
	// Cardinal's.
	var managed, unmanaged []*holder
	certain := true
	for i := range holders {
		h := &holders[i]
		if !inFlight(h) || h.Count != len(ids) {
			continue
		}
		switch {
		case h.Assigned != nil:
			managed = append(managed, h)
		case !h.Pod.HasAssignment:
			unmanaged = append(unmanaged, h)
		default:
			continue // an unusable assignment: named in the no-owner hint
		}
		if h != first && h.Pod != first.Pod && !certainlyBefore(first.Pod, h.Pod) {
			certain = false
		}
	}
	all := append(append([]*holder(nil), managed...), unmanaged...)
	if len(all) == 0 {
		return outcome{}, refuse(ReasonNoOwner, nil, "devices %s match no assignment, and no container in flight on this node asks for %d device(s)%s",
			strings.Join(ids, ","), len(ids), malformedHint(holders))
	}
	loads := loadsOf(t, holders)
	fitsFor := func(h *holder) *AllocateError {
		if h.Assigned != nil {
			return substitute(t, holders, loads, h, ids)
		}
		if c := conflicting(holders, nil, ids); c != nil {
			return refuse(ReasonConflict, []*podEntry{c.Pod}, "devices %s would go to a pod Cardinal did not schedule, but %s is assigned %s",
				strings.Join(ids, ","), c, strings.Join(c.ids(), ","))
		}
		return checkCapacity(t, loads, h, ids)
	}
	if len(managed) <= 1 && (certain || len(managed) == 0) {
		if err := fitsFor(first); err != nil {
			return outcome{}, err
		}
		return outcome{Owner: first, IDs: ids}, nil
	}
	if len(managed) == 1 && !managed[0].Pod.Requests[managed[0].Name].Shared {
		// The order is not certain: serve only if whichever it is gets the same answer.
		if fitsFor(managed[0]) == nil && fitsFor(unmanaged[0]) == nil {
			return outcome{Owner: first, IDs: ids}, nil
		}
	}
	return outcome{}, refuse(ReasonAmbiguous, podsOf(all), "devices %s match no assignment, and %d containers in flight on this node ask for %d device(s): %s",
		strings.Join(ids, ","), len(all), len(ids), describeAll(all))
}

// substitute checks that owner may have ids instead of its assignment: no card of another in-flight
// assignment, its selectors, and room on every card.
func substitute(t *deviceTable, holders []holder, loads cardLoads, owner *holder, ids []string) *AllocateError {
	if c := conflicting(holders, owner, ids); c != nil {
		return refuse(ReasonConflict, []*podEntry{owner.Pod, c.Pod}, "devices %s differ from the assignment of %s (%s) and include cards assigned to %s (%s)",
			strings.Join(ids, ","), owner, strings.Join(owner.ids(), ","), c, strings.Join(c.ids(), ","))
	}
	if err := checkSelector(t, owner, ids); err != nil {
		return err
	}
	return checkCapacity(t, loads, owner, ids)
}

// checkCapacity refuses ids for owner when a card lacks room for it beside the other pods on it.
func checkCapacity(t *deviceTable, loads cardLoads, owner *holder, ids []string) *AllocateError {
	for _, id := range ids {
		if why := loads.misfit(t, owner, t.devices[id].Card); why != "" {
			return refuse(ReasonCapacity, []*podEntry{owner.Pod}, "the kubelet chose devices %s for %s, but %s", strings.Join(ids, ","), owner, why)
		}
	}
	return nil
}

// conflicting returns an in-flight container other than owner whose assignment shares a card with ids.
func conflicting(holders []holder, owner *holder, ids []string) *holder {
	for i := range holders {
		h := &holders[i]
		if h == owner || h.Assigned == nil || !inFlight(h) || (owner != nil && h.Pod == owner.Pod) {
			continue
		}
		for _, id := range h.ids() {
			if slices.Contains(ids, id) {
				return h
			}
		}
	}
	return nil
}

func checkSelector(t *deviceTable, owner *holder, ids []string) *AllocateError {
	p := owner.Pod
	if p.SelectorErr != nil {
		return refuse(ReasonSelector, []*podEntry{p}, "devices %s differ from the assignment of %s, and its selectors do not parse: %v",
			strings.Join(ids, ","), owner, p.SelectorErr)
	}
	numa := map[int]bool{}
	for _, id := range ids {
		c := t.card(id)
		if m := p.Selector.Check(c.Model, c.UUID); m != annotations.MatchOK {
			return refuse(ReasonSelector, []*podEntry{p}, "the kubelet chose devices %s for %s instead of its assignment %s, but %s refuses card %s (%s)",
				strings.Join(ids, ","), owner, strings.Join(owner.ids(), ","), m.Key(), c.UUID, c.Model)
		}
		numa[c.NUMA] = true
	}
	if p.Selector.NUMABind && len(numa) > 1 {
		return refuse(ReasonSelector, []*podEntry{p}, "the kubelet chose devices %s for %s instead of its assignment %s, but they span %d NUMA nodes and %s=true",
			strings.Join(ids, ","), owner, strings.Join(owner.ids(), ","), len(numa), annotations.NUMABind)
	}
	return nil
}

func podsOf(hs []*holder) []*podEntry {
	var out []*podEntry
	for _, h := range hs {
		if !slices.Contains(out, h.Pod) {
			out = append(out, h.Pod)
		}
	}
	return out
}

func describeAll(hs []*holder) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = h.String()
	}
	return strings.Join(parts, ", ")
}

// malformedHint names pods on the node whose assignment could not be used, since one of them is
// probably the owner.
func malformedHint(holders []holder) string {
	var parts []string
	for i := range holders {
		p := holders[i].Pod
		if p.AssignmentErr != nil && p.Pending && !p.Gone {
			s := fmt.Sprintf("pod %s: %v", p.key(), p.AssignmentErr)
			if !slices.Contains(parts, s) {
				parts = append(parts, s)
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; unusable assignments on this node: " + strings.Join(parts, "; ")
}

// preferred answers GetPreferredAllocation for one container. The container being admitted is the
// first in-flight one of that size in admission order (see resolve): its assignment when all of it is
// available and includes mustInclude. Otherwise a NUMA-compact choice among the cards that have room
// for that container (for a pod Cardinal did not schedule, or when none is known: free cards), never
// an ID assigned to another container in flight; when too few qualify the answer is short and the
// kubelet picks the rest, which Allocate then judges. The bool says whether an assignment answered.
func preferred(t *deviceTable, holders []holder, available, mustInclude []string, size int) ([]string, bool) {
	first := admitting(holders, size)
	if first != nil && first.Assigned != nil {
		ids := first.ids()
		if allIn(ids, available) && allIn(mustInclude, ids) {
			return ids, true
		}
	}
	reserved := map[string]bool{}
	for i := range holders {
		if h := &holders[i]; h.Assigned != nil && inFlight(h) && h != first {
			for _, id := range h.ids() {
				reserved[id] = true
			}
		}
	}
	loads := loadsOf(t, holders)
	probe := first
	if probe == nil {
		// Nobody known: ask for room as a pod Cardinal did not schedule would (whole, free cards).
		probe = &holder{Pod: &podEntry{}, Name: "?"}
	}
	fits := func(d advertised) bool { return !reserved[d.ID] && loads.misfit(t, probe, d.Card) == "" }
	return compact(t, available, mustInclude, size, fits), false
}

func allIn(xs, set []string) bool {
	for _, x := range xs {
		if !slices.Contains(set, x) {
			return false
		}
	}
	return true
}

// compact picks up to size IDs on distinct cards among those ok accepts: mustInclude first, then
// preferably on one NUMA node (the one of mustInclude when it has room, else the one with the fewest
// acceptable cards that still fits, lowest NUMA index on ties).
func compact(t *deviceTable, available, mustInclude []string, size int, ok func(advertised) bool) []string {
	chosen := []string{}
	used := map[int]bool{}
	for _, id := range mustInclude {
		if d, ok := t.devices[id]; ok && !used[d.Card] && len(chosen) < size {
			chosen = append(chosen, id)
			used[d.Card] = true
		}
	}
	// Candidates: one ID per card (the best one), grouped by NUMA node.
	best := map[int]advertised{}
	for _, id := range available {
		d, known := t.devices[id]
		if !known || used[d.Card] || slices.Contains(chosen, id) || !ok(d) {
			continue
		}
		if b, seen := best[d.Card]; !seen || better(d, b) {
			best[d.Card] = d
		}
	}
	byNUMA := map[int][]advertised{}
	for _, d := range best {
		n := t.cards[d.Card].NUMA
		byNUMA[n] = append(byNUMA[n], d)
	}
	numas := make([]int, 0, len(byNUMA))
	for n, ds := range byNUMA {
		numas = append(numas, n)
		sort.Slice(ds, func(i, j int) bool { return better(ds[i], ds[j]) })
	}
	need := size - len(chosen)
	home := -2
	if len(chosen) > 0 {
		home = t.cards[t.devices[chosen[0]].Card].NUMA
	}
	sort.Slice(numas, func(i, j int) bool {
		a, b := numas[i], numas[j]
		fa, fb := len(byNUMA[a]) >= need, len(byNUMA[b]) >= need
		switch {
		case (a == home && fa) != (b == home && fb):
			return a == home && fa
		case fa != fb:
			return fa
		case fa && len(byNUMA[a]) != len(byNUMA[b]):
			return len(byNUMA[a]) < len(byNUMA[b]) // tightest fit
		case !fa && len(byNUMA[a]) != len(byNUMA[b]):
			return len(byNUMA[a]) > len(byNUMA[b]) // fewest NUMA nodes when none fits alone
		}
		return a < b
	})
	for _, n := range numas {
		for _, d := range byNUMA[n] {
			if len(chosen) == size {
				return chosen
			}
			chosen = append(chosen, d.ID)
		}
	}
	return chosen
}

// better orders candidate IDs: by card index, then slot.
func better(a, b advertised) bool {
	if a.Card != b.Card {
		return a.Card < b.Card
	}
	return a.Slot < b.Slot
}
