package deviceplugin

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Who owns the IDs of an Allocate call (DESIGN.md, "How Allocate knows the pod").
//
// The kubelet admits one pod at a time (order.go) and allocates its GPU containers in order, init
// containers first, each in an Allocate call of its own. So the call is for the next container of
// the pod being admitted: the first of that pod's containers not yet served. Candidates are, per pod
// in flight (bound, Pending, not ended), that next container, when it asks for as many devices as
// the call holds. Within a pod, a request belongs to its next container whatever IDs it names: the
// kubelet hands on an init container's devices to the app containers in map order, so app1 may get
// the ID planned for app2, and those IDs are judged as app1's substitute.
//
// The owner is the candidate the kubelet certainly admits before every other (certainlyBefore). It
// is served when judge accepts the IDs for it; its limits are its own request's. When no candidate
// is certainly first, the IDs are served only if every candidate would get the same answer: they
// are interchangeable (pods Cardinal did not schedule, or Cardinal pods with the same request whose
// selectors accept each other's cards) and the IDs pass judge for the one they are assigned to (or
// for each, when they are nobody's). Otherwise the call is refused as ambiguous: serving a guess
// could give a container another's limits, or a Cardinal pod's cards to a pod that ignores them.

// nextContainers returns the candidates for a request of size devices, in holders' order (the
// guess of admittedBefore). A pod's holders are consecutive, in the kubelet's container order.
func nextContainers(holders []holder, size int) []*holder {
	var out []*holder
	var pod *podEntry
	found := false
	for i := range holders {
		h := &holders[i]
		if h.Pod != pod {
			pod, found = h.Pod, false
		}
		if found || h.Allocated {
			continue
		}
		found = true
		if inFlight(h) && h.Count == size && !h.NotAdmitting {
			out = append(out, h)
		}
	}
	return out
}

// admittingNext returns the candidates for size devices and the one the kubelet admits first:
// certain is false when no candidate is certainly first, and first is then the guess.
func admittingNext(holders []holder, size int) (first *holder, certain bool, cands []*holder) {
	cands = nextContainers(holders, size)
	if len(cands) == 0 {
		return nil, false, nil
	}
	for _, c := range cands {
		if firstOf(c, cands) {
			return c, true, cands
		}
	}
	return cands[0], false, cands
}

func firstOf(c *holder, cands []*holder) bool {
	for _, d := range cands {
		if d != c && !certainlyBefore(c.Pod, d.Pod) {
			return false
		}
	}
	return true
}

// unusable says why h's pod carries an assignment that cannot serve h ("" when it can, or has none):
// such a container is never served, and never served as a pod Cardinal did not schedule.
func unusable(h *holder) string {
	switch {
	case h.Mixed != "":
		return h.Mixed
	case !h.Pod.HasAssignment || h.Assigned != nil:
		return ""
	case h.Pod.AssignmentErr != nil:
		return h.Pod.AssignmentErr.Error()
	}
	return fmt.Sprintf("the assignment names no container %q", h.Name)
}

// resolve finds the container a set of device IDs belongs to (see above). holders are every GPU
// container of the pods bound to this node, in admittedBefore's order.
func resolve(t *deviceTable, res corev1.ResourceName, holders []holder, ids []string) (outcome, *AllocateError) {
	if err := checkIDs(t, res, ids); err != nil {
		return outcome{}, err
	}
	first, certain, cands := admittingNext(holders, len(ids))
	if first == nil {
		return outcome{}, refuse(ReasonNoOwner, nil, "devices %s match no assignment, and no container in flight on this node asks for %d device(s) of %s next%s",
			strings.Join(ids, ","), len(ids), res, malformedHint(holders))
	}
	loads := loadsOn(t, holders, ids)
	if certain {
		if err := judge(t, holders, loads, first, ids); err != nil {
			err.Admitted = first.Pod
			return outcome{}, err
		}
		o := served(first, ids)
		o.Certain = true
		return o, nil
	}
	// Not certain. The IDs' natural owner is the candidate they are assigned to, else the guess; with
	// both pods Cardinal did not schedule and whole-card Cardinal pods among the candidates, one of
	// the former, so that whichever the kubelet admits later is judged as the Cardinal pod (its
	// selectors, its assignment) if it is one.
	owner := first
	for _, c := range cands {
		if c.Assigned != nil && sameSet(c.ids(), ids) {
			owner = c
			break
		}
	}
	for _, c := range cands {
		if !c.Pod.HasAssignment {
			owner = c
			break
		}
	}
	ambiguous := func(why string) *AllocateError {
		return refuse(ReasonAmbiguous, podsOf(cands),
			"devices %s: %d containers in flight on this node ask for %d device(s) next, the kubelet's order among them is not certain (created in the same second, or bound and created in opposite orders), and none of them may have them (%s): %s",
			strings.Join(ids, ","), len(cands), len(ids), why, describeAll(cands))
	}
	harmless := true
	for _, c := range cands {
		if c != owner && !interchangeable(t, owner, c, ids) {
			harmless = false
			break
		}
	}
	exact := owner.Assigned != nil && sameSet(owner.ids(), ids)
	if harmless {
		for _, c := range cands {
			if c != owner && exact {
				continue // a swap between interchangeable containers: the kubelet's record decides
			}
			if err := judge(t, holders, loads, c, ids); err != nil {
				harmless = false
				break
			}
		}
	}
	if harmless {
		return served(owner, ids), nil
	}
	// Not interchangeable: serve the likeliest candidate that may have the IDs, the natural owner
	// first. A wrong guess never runs: PreStartContainer finds, in the kubelet's record, that the
	// container holding the IDs was given another's response, refuses to start it, and has its pod
	// re-created (verify.go). Refusing here instead would fail the pod's admission for good,
	// whoever it is, right guess or not.
	order := append([]*holder{owner}, cands...)
	var why []string
	for i, c := range order {
		if i > 0 && c == owner {
			continue
		}
		err := judge(t, holders, loads, c, ids)
		if err == nil {
			o := served(c, ids)
			o.Guess = true
			return o, nil
		}
		why = append(why, fmt.Sprintf("%s: %s: %s", c, err.Reason, err.Message))
	}
	return outcome{}, ambiguous(strings.Join(why, "; "))
}

func served(h *holder, ids []string) outcome {
	return outcome{Owner: h, IDs: ids, Exact: h.Assigned != nil && sameSet(h.ids(), ids)}
}

// judge checks that owner, when it is the container the kubelet is admitting, may have ids: never
// with an unusable assignment; its assignment (checkReservation, no other pod's in-flight IDs, room
// on each card); other IDs as a substitute; a pod Cardinal did not schedule whole free cards nobody
// in flight is assigned.
func judge(t *deviceTable, holders []holder, loads cardLoads, owner *holder, ids []string) *AllocateError {
	if owner.Mixed != "" {
		return refuse(ReasonUnusable, []*podEntry{owner.Pod}, "the kubelet is admitting %s (devices %s), but it cannot be served: %s",
			owner, strings.Join(ids, ","), owner.Mixed)
	}
	if why := unusable(owner); why != "" {
		return refuse(ReasonUnusable, []*podEntry{owner.Pod}, "the kubelet is admitting %s (devices %s), but its assignment cannot be used: %s",
			owner, strings.Join(ids, ","), why)
	}
	if owner.Assigned == nil {
		if c := conflicting(holders, nil, ids); c != nil {
			return refuse(ReasonConflict, []*podEntry{owner.Pod, c.Pod}, "devices %s would go to %s, which Cardinal did not schedule, but %s is assigned %s",
				strings.Join(ids, ","), owner, c, strings.Join(c.ids(), ","))
		}
		return checkCapacity(t, loads, owner, ids)
	}
	if err := checkReservation(t, owner); err != nil {
		return err
	}
	if !sameSet(owner.ids(), ids) {
		return substitute(t, holders, loads, owner, ids)
	}
	if c := conflicting(holders, owner, ids); c != nil {
		return refuse(ReasonConflict, []*podEntry{owner.Pod, c.Pod}, "devices %s are assigned to both %s and %s",
			strings.Join(ids, ","), owner, c)
	}
	return checkCapacity(t, loads, owner, ids)
}

// interchangeable reports whether b would get the same answer as a for ids, and a later call the
// same answer for a's and b's cards swapped: both pods Cardinal did not schedule (whole cards, no
// limits); one such pod and a Cardinal container of whole cards whose selectors accept ids (no
// limits either; the later call is judged as the Cardinal one, see resolve); or both Cardinal's
// with usable assignments, the same request, and selectors that accept ids and each other's cards.
func interchangeable(t *deviceTable, a, b *holder, ids []string) bool {
	if unusable(a) != "" || unusable(b) != "" {
		return false
	}
	if !a.Pod.HasAssignment && !b.Pod.HasAssignment {
		return true
	}
	if !a.Pod.HasAssignment || !b.Pod.HasAssignment {
		m := a
		if !a.Pod.HasAssignment {
			m = b
		}
		r, ok := m.Pod.Requests[m.Name]
		return ok && !r.Shared && checkSelector(t, m, ids) == nil
	}
	ra, oka := a.Pod.Requests[a.Name]
	rb, okb := b.Pod.Requests[b.Name]
	if !oka || !okb || !ra.Interchangeable(&rb) {
		return false
	}
	return checkSelector(t, a, ids) == nil && checkSelector(t, b, ids) == nil &&
		checkSelector(t, a, b.ids()) == nil && checkSelector(t, b, a.ids()) == nil
}
