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
	// Owner is the container; nil when the devices go to a pod Cardinal did not schedule.
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

// resolve finds the container a set of device IDs belongs to (DESIGN.md, "How Allocate knows the
// pod"). holders are every GPU container of the pods bound to this node, oldest pod first.
func resolve(t *deviceTable, holders []holder, ids []string) (outcome, *AllocateError) {
	if err := checkIDs(t, ids); err != nil {
		return outcome{}, err
	}
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
		return outcome{Owner: exact[0], IDs: ids, Exact: true}, nil
	}

	// 2. Not an assignment: the kubelet chose other IDs (TopologyManager, drift), or the pod is not
	// Cardinal's. Serve only an unambiguous owner whose selectors accept the cards.
	var managed, unmanaged []*holder
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
		}
	}
	switch {
	case len(managed) == 0 && len(unmanaged) == 0:
		return outcome{}, refuse(ReasonNoOwner, nil, "devices %s match no assignment, and no container in flight on this node asks for %d device(s)%s",
			strings.Join(ids, ","), len(ids), malformedHint(holders))
	case len(managed) == 0:
		if c := conflicting(holders, nil, ids); c != nil {
			return outcome{}, refuse(ReasonConflict, []*podEntry{c.Pod}, "devices %s would go to a pod Cardinal did not schedule, but %s is assigned %s",
				strings.Join(ids, ","), c, strings.Join(c.ids(), ","))
		}
		return outcome{IDs: ids}, nil
	case len(managed)+len(unmanaged) > 1:
		all := append(managed, unmanaged...)
		return outcome{}, refuse(ReasonAmbiguous, podsOf(all), "devices %s match no assignment, and %d containers in flight on this node ask for %d device(s): %s",
			strings.Join(ids, ","), len(all), len(ids), describeAll(all))
	}
	owner := managed[0]
	if c := conflicting(holders, owner, ids); c != nil {
		return outcome{}, refuse(ReasonConflict, []*podEntry{owner.Pod, c.Pod}, "devices %s differ from the assignment of %s (%s) and include cards assigned to %s (%s)",
			strings.Join(ids, ","), owner, strings.Join(owner.ids(), ","), c, strings.Join(c.ids(), ","))
	}
	if err := checkSelector(t, owner, ids); err != nil {
		return outcome{}, err
	}
	return outcome{Owner: owner, IDs: ids}, nil
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

// preferred answers GetPreferredAllocation for one container: the assignment of the oldest in-flight
// container whose device count is size, whose IDs are all available and which includes mustInclude;
// otherwise a NUMA-compact choice. The bool says whether an assignment answered.
func preferred(t *deviceTable, holders []holder, available, mustInclude []string, size int) ([]string, bool) {
	for i := range holders {
		h := &holders[i]
		if h.Assigned == nil || !inFlight(h) || len(h.Assigned.Devices) != size {
			continue
		}
		ids := h.ids()
		if allIn(ids, available) && allIn(mustInclude, ids) {
			return ids, true
		}
	}
	reserved := map[string]bool{}
	for i := range holders {
		if h := &holders[i]; h.Assigned != nil && inFlight(h) {
			for _, id := range h.ids() {
				reserved[id] = true
			}
		}
	}
	return compact(t, available, mustInclude, size, reserved), false
}

func allIn(xs, set []string) bool {
	for _, x := range xs {
		if !slices.Contains(set, x) {
			return false
		}
	}
	return true
}

// compact picks size IDs on distinct cards: mustInclude first, then preferably on one NUMA node (the
// one of mustInclude when it has room, else the one with the fewest free cards that still fits, lowest
// NUMA index on ties), avoiding IDs assigned to containers in flight where possible.
func compact(t *deviceTable, available, mustInclude []string, size int, reserved map[string]bool) []string {
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
		d, ok := t.devices[id]
		if !ok || used[d.Card] || slices.Contains(chosen, id) {
			continue
		}
		if b, seen := best[d.Card]; !seen || better(d, b, reserved) {
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
		sort.Slice(ds, func(i, j int) bool { return better(ds[i], ds[j], reserved) })
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

// better orders candidate IDs: unreserved first, then by card index, then slot.
func better(a, b advertised, reserved map[string]bool) bool {
	if reserved[a.ID] != reserved[b.ID] {
		return !reserved[a.ID]
	}
	if a.Card != b.Card {
		return a.Card < b.Card
	}
	return a.Slot < b.Slot
}
