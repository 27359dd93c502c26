package deviceplugin

import (
	"fmt"
	"slices"
	"strings"
)

// use is what one pod reserves on one card.
type use struct {
	MemoryMiB int64
	Cores     int
	// Exclusive: the pod wants the card to itself (a whole-card request, cores 100, or a pod Cardinal
	// did not schedule, which the plugin gives no limits).
	Exclusive bool
}

// cardLoads is what the pods on this node reserve on each card, by unit (deviceTable.unit: a card's
// index in deviceTable.cards, or a MIG instance) and pod. A pod's containers on one card count
// once, at the largest of their reservations: an app container reuses its init container's cards,
// so summing would count the same card use twice. A MIG instance is always held whole.
type cardLoads map[int]map[*podEntry]use

// heldIDs are the IDs a container holds or is about to hold: what the kubelet gave it (as this
// process served it or learned from PodResources; a record alone does not count), else its
// assignment. Containers of pods that ended hold nothing; a pod being deleted holds what the kubelet
// gave it until it ends (its grace period), and nothing it was never given.
func heldIDs(h *holder) []string {
	if h.Pod.Gone || (h.Pod.Deleting && h.Held == nil) {
		return nil
	}
	if h.Held != nil {
		return h.Held
	}
	return h.ids()
}

// demand is what container h reserves on unit c (a card, or a MIG instance: held whole) when it
// holds it.
func demand(t *deviceTable, h *holder, c int) use {
	if t.instanceOf(c) != nil {
		return use{Exclusive: true}
	}
	card := &t.cards[c]
	if h.Assigned != nil {
		for _, d := range h.Assigned.Devices {
			if d.UUID == card.UUID {
				req, ok := h.Pod.Requests[h.Name]
				return use{MemoryMiB: d.MemoryMiB, Cores: d.Cores, Exclusive: !ok || req.Exclusive() || d.Cores >= 100}
			}
		}
	}
	if h.Pod.HasAssignment {
		if req, ok := h.Pod.Requests[h.Name]; ok {
			return use{MemoryMiB: req.MemoryOn(card.MemoryMiB), Cores: req.CoresOn(), Exclusive: req.Exclusive()}
		}
	}
	return use{MemoryMiB: card.MemoryMiB, Cores: 100, Exclusive: true}
}

func loadsOf(t *deviceTable, holders []holder) cardLoads { return loadsOn(t, holders, nil) }

// loadsOn is loadsOf for the units of ids only (all units when ids is nil): Allocate judges those.
func loadsOn(t *deviceTable, holders []holder, ids []string) cardLoads {
	var only map[int]bool
	if ids != nil {
		only = make(map[int]bool, len(ids))
		for _, id := range ids {
			if d, ok := t.devices[id]; ok {
				only[t.unit(d)] = true
			}
		}
	}
	l := cardLoads{}
	for i := range holders {
		h := &holders[i]
		for _, id := range heldIDs(h) {
			d, ok := t.devices[id]
			if !ok || (only != nil && !only[t.unit(d)]) {
				continue
			}
			c := t.unit(d)
			u := demand(t, h, c)
			if l[c] == nil {
				l[c] = map[*podEntry]use{}
			}
			prev := l[c][h.Pod]
			l[c][h.Pod] = use{MemoryMiB: max(prev.MemoryMiB, u.MemoryMiB), Cores: max(prev.Cores, u.Cores), Exclusive: prev.Exclusive || u.Exclusive}
		}
	}
	return l
}

// misfit says why container h cannot have unit c besides what other pods reserve there; "" when it
// fits (memory, cores, and exclusivity both ways; a MIG instance: nobody else holds it).
func (l cardLoads) misfit(t *deviceTable, h *holder, c int) string {
	if m := t.instanceOf(c); m != nil {
		var others []string
		for pod := range l[c] {
			if pod != h.Pod {
				others = append(others, pod.key())
			}
		}
		if len(others) == 0 {
			return ""
		}
		slices.Sort(others)
		return fmt.Sprintf("MIG instance %s (%s on card %s) is held by pod %s", m.Instance.UUID, m.Instance.Profile, t.cards[m.Parent].UUID, strings.Join(others, ", "))
	}
	want := demand(t, h, c)
	card := &t.cards[c]
	var mem int64
	var cores int
	var others []string
	for pod, u := range l[c] {
		if pod == h.Pod {
			continue
		}
		if u.Exclusive {
			return fmt.Sprintf("card %s is held whole by pod %s", card.UUID, pod.key())
		}
		mem += u.MemoryMiB
		cores += u.Cores
		others = append(others, pod.key())
	}
	slices.Sort(others)
	switch {
	case len(others) == 0:
		return ""
	case want.Exclusive:
		return fmt.Sprintf("%s wants card %s to itself, but pods %s use it", h, card.UUID, strings.Join(others, ", "))
	case mem+want.MemoryMiB > card.MemoryMiB:
		return fmt.Sprintf("card %s has %d of %d MiB reserved by pods %s; %s needs %d MiB", card.UUID, mem, card.MemoryMiB,
			strings.Join(others, ", "), h, want.MemoryMiB)
	case cores+want.Cores > 100:
		return fmt.Sprintf("card %s has %d %% of its cores reserved by pods %s; %s needs %d %%", card.UUID, cores,
			strings.Join(others, ", "), h, want.Cores)
	}
	return ""
}
