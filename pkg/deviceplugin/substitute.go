package deviceplugin

import (
	"slices"
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Whether a container may have the IDs the kubelet chose: its assignment's reservation, other IDs
// as a substitute for it, and room on each card beside the pods already there.

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
		if why := loads.misfit(t, owner, t.unit(t.devices[id])); why != "" {
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
		if c == nil {
			return refuse(ReasonUnknownDevice, []*podEntry{p}, "device %s of %s is not advertised by this plugin", id, owner)
		}
		if mig := t.devices[id].MIG; mig != nil {
			// The parent's model and UUID, or the instance's own MIG UUID.
			if m := p.Selector.CheckDeviceLower(strings.ToLower(c.Model), mig.Instance.UUID, c.UUID); m != annotations.MatchOK {
				return refuse(ReasonSelector, []*podEntry{p}, "the kubelet chose devices %s for %s instead of its assignment %s, but %s refuses %s",
					strings.Join(ids, ","), owner, strings.Join(owner.ids(), ","), m.Key(), t.describe(t.devices[id]))
			}
		} else if m := p.Selector.Check(c.Model, c.UUID); m != annotations.MatchOK {
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

// checkReservation refuses an assignment whose reservation on a card is not what the container's
// request implies: at least its own request (limits follow the request, so less would let the
// card be over-committed) and at most the largest request among its pod's GPU containers (an ID
// an init container hands on is reserved at the larger of its and the app containers' requests).
// A forged assignment naming a whole card for a container that asked for a share is refused here,
// and so is one naming cards for a container that asks for MIG instances, MIG instances for one that
// asks for cards, or instances of another profile than the container's resource.
func checkReservation(t *deviceTable, owner *holder) *AllocateError {
	req, ok := owner.Pod.Requests[owner.Name]
	if !ok {
		return refuse(ReasonUnusable, []*podEntry{owner.Pod}, "%s is assigned %s, but its GPU request does not parse",
			owner, strings.Join(owner.ids(), ","))
	}
	for _, d := range owner.Assigned.Devices {
		dev, known := t.devices[d.ID]
		isMIG := d.Parent != "" || known && dev.MIG != nil
		switch {
		case isMIG && owner.Resource == t.gpu:
			return refuse(ReasonUnusable, []*podEntry{owner.Pod}, "the assignment of %s names MIG instance %s, but the container asks for %s",
				owner, d.ID, t.gpu)
		case !isMIG && owner.Resource != t.gpu:
			return refuse(ReasonUnusable, []*podEntry{owner.Pod}, "the assignment of %s names card %s, but the container asks for %s",
				owner, d.ID, owner.Resource)
		case isMIG && known && dev.MIG.Resource != owner.Resource:
			return refuse(ReasonUnusable, []*podEntry{owner.Pod}, "the assignment of %s names MIG instance %s, which is served as %s, but the container asks for %s",
				owner, d.ID, dev.MIG.Resource, owner.Resource)
		}
	}
	for _, d := range owner.Assigned.Devices {
		c, known := t.byUUID[d.UUID]
		if !known {
			continue // not a card of this node: never served as such (checkIDs)
		}
		total := t.cards[c].MemoryMiB
		hiMem, hiCores := int64(0), 0
		for _, r := range owner.Pod.Requests {
			hiMem, hiCores = max(hiMem, r.MemoryOn(total)), max(hiCores, r.CoresOn())
		}
		ownMem, ownCores := req.MemoryOn(total), req.CoresOn()
		if d.MemoryMiB < ownMem || d.Cores < ownCores || d.MemoryMiB > hiMem || d.Cores > hiCores {
			return refuse(ReasonUnusable, []*podEntry{owner.Pod},
				"the assignment of %s reserves %d MiB and %d %% of the cores on card %s (%s), but its request asks %d MiB and %d %% (its pod's containers at most %d MiB and %d %%)",
				owner, d.MemoryMiB, d.Cores, d.UUID, d.ID, ownMem, ownCores, hiMem, hiCores)
		}
	}
	return nil
}
