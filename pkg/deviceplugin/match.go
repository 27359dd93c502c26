package deviceplugin

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

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
	// ReasonAmbiguous: several containers in flight could be the one the kubelet is admitting (its
	// order among them is not certain), and they would not get the same answer.
	ReasonAmbiguous Reason = "ambiguous-owner"
	// ReasonConflict: the IDs are assigned to another container in flight (or to two pods at once).
	ReasonConflict Reason = "conflict"
	// ReasonUnusable: the container the kubelet is admitting carries an assignment that cannot be
	// used: it does not decode, names another node or not this container, or reserves on a card
	// less than the container's request or more than its pod's requests ask.
	ReasonUnusable Reason = "unusable-assignment"
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
	// Admitted is the pod the kubelet is certainly admitting, when known: the kubelet rejects it
	// for good on this refusal, so it is no longer in flight.
	Admitted *podEntry
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
	// Certain is true when the kubelet is certainly admitting the owner (owner.go).
	Certain bool
	// Guess is true when the owner is one of several candidates that would not get the same answer:
	// PreStartContainer then decides, from the kubelet's record (verify.go).
	Guess bool
}

// inFlight: the kubelet may still admit the container (a pod being deleted is not admitted again).
func inFlight(h *holder) bool { return !h.Allocated && h.Pod.Pending && !h.Pod.Gone && !h.Pod.Deleting }

// checkIDs validates one container's IDs: well formed, advertised here under resource res, no
// repeats, distinct cards (or distinct MIG instances: several instances of one card are distinct
// devices).
func checkIDs(t *deviceTable, res corev1.ResourceName, ids []string) *AllocateError {
	if len(ids) == 0 {
		return refuse(ReasonInvalidID, nil, "no device IDs in the request")
	}
	units := map[int]string{}
	for i, id := range ids {
		if _, _, err := annotations.ParseDeviceID(id); err != nil {
			return refuse(ReasonInvalidID, nil, "%v", err)
		}
		d, ok := t.devices[id]
		if !ok {
			return refuse(ReasonUnknownDevice, nil, "device %s is not advertised by this plugin", id)
		}
		if r := t.resourceOf(d); r != res {
			return refuse(ReasonUnknownDevice, nil, "device %s is advertised as %s, not %s", id, r, res)
		}
		if slices.Contains(ids[:i], id) {
			return refuse(ReasonDuplicateID, nil, "device %s requested twice", id)
		}
		if prev, dup := units[t.unit(d)]; dup {
			return refuse(ReasonDuplicateID, nil, "devices %s and %s are slots of the same card %s", prev, id, t.cards[d.Card].UUID)
		}
		units[t.unit(d)] = id
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
// next container of the pod the kubelet admits first (owner.go): its assignment when that is certain
// (or every candidate is interchangeable with it) and all of it is available and includes
// mustInclude. Otherwise a NUMA-compact choice among the cards that have room
// for that container (for a pod Cardinal did not schedule, or when none is known: free cards), never
// an ID assigned to another container in flight; when too few qualify the answer is short and the
// kubelet picks the rest, which Allocate then judges. The bool says whether an assignment answered.
func preferred(t *deviceTable, holders []holder, available, mustInclude []string, size int) ([]string, bool) {
	first, certain, cands := admittingNext(holders, size)
	// Steer to an assignment only when the container is certainly the one being admitted, or when
	// every candidate is a Cardinal container that would be served its IDs alike (owner.go): a guess
	// would hand one container another's assignment. (With a pod Cardinal did not schedule among
	// them, Allocate serves only IDs nobody is assigned.)
	steer := first != nil && first.Assigned != nil && unusable(first) == ""
	for _, c := range cands {
		if steer && !certain && c != first && (!c.Pod.HasAssignment || !interchangeable(t, first, c, first.ids())) {
			steer = false
		}
	}
	if steer {
		ids := first.ids()
		if allIn(ids, available) && allIn(mustInclude, ids) {
			return ids, true
		}
	}
	reserved := map[string]bool{}
	for i := range holders {
		if h := &holders[i]; h.Assigned != nil && inFlight(h) && (h != first || !steer) {
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
	fits := func(d advertised) bool { return !reserved[d.ID] && loads.misfit(t, probe, t.unit(d)) == "" }
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

// compact picks up to size IDs on distinct cards (or distinct MIG instances) among those ok accepts: mustInclude first, then
// preferably on one NUMA node (the one of mustInclude when it has room, else the one with the fewest
// acceptable cards that still fits, lowest NUMA index on ties).
func compact(t *deviceTable, available, mustInclude []string, size int, ok func(advertised) bool) []string {
	chosen := []string{}
	used := map[int]bool{}
	for _, id := range mustInclude {
		if d, ok := t.devices[id]; ok && !used[t.unit(d)] && len(chosen) < size {
			chosen = append(chosen, id)
			used[t.unit(d)] = true
		}
	}
	// Candidates: one ID per card or instance (the best one), grouped by NUMA node.
	best := map[int]advertised{}
	for _, id := range available {
		d, known := t.devices[id]
		if !known || used[t.unit(d)] || slices.Contains(chosen, id) || !ok(d) {
			continue
		}
		if b, seen := best[t.unit(d)]; !seen || better(d, b) {
			best[t.unit(d)] = d
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

// better orders candidate IDs: by card index, then slot, then MIG instance in NVML's order.
func better(a, b advertised) bool {
	switch {
	case a.Card != b.Card:
		return a.Card < b.Card
	case a.MIG != nil && b.MIG != nil:
		return a.MIG.index < b.MIG.index
	}
	return a.Slot < b.Slot
}
