package deviceplugin

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
)

// advertised is one device ID the plugin advertises: a whole card, one share slot of a card, or a
// MIG instance of a card (mig.go).
type advertised struct {
	ID string
	// Card indexes deviceTable.cards: the card, or the instance's parent.
	Card int
	// Slot is the share slot, -1 for a whole card or a MIG instance.
	Slot int
	// MIG is the instance, nil for a card or a slot.
	MIG *migDevice
}

// deviceTable is the node's cards and the device IDs that stand for them. The set of cards and
// configured IDs is fixed at start; health, and the IDs held from an earlier share count, change
// (under Plugin.mu).
type deviceTable struct {
	// shares is the configured share count.
	shares int
	// extra are IDs pods hold that the configured share count does not advertise (the plugin ran
	// with another --shares when they were allocated): advertised while held, so the kubelet keeps
	// counting them as allocated. withheld are configured IDs advertised Unhealthy meanwhile, so that
	// the kubelet cannot hand out a card that is held whole, or more sharers than shares.
	extra    []advertised
	withheld map[string]bool
	cards    []annotations.GPU
	// bus is each card's PCI bus id (sysfs form; "" when unknown), by the index of cards.
	bus     []string
	byUUID  map[string]int
	devices map[string]advertised
	order   []string
	// instances are the MIG instances served (mig.go), migOrder their IDs by resource, and
	// migResources those resources in the order they were first met.
	instances    []*migDevice
	migOrder     map[corev1.ResourceName][]string
	migResources []corev1.ResourceName
	// inMIG says, by the index of cards, that a card is in MIG mode (now or pending): never healthy
	// as a whole card, whatever its health events say.
	inMIG []bool
	// gpu is the GPU resource's name: the resource of cards and share slots.
	gpu corev1.ResourceName
	// links are the inventory's links between cards (positions in cards; links.go), fixed at start.
	links []annotations.Link
}

// newDeviceTable builds the table. A card NVML could not describe (Fault set) starts unhealthy, and so
// does a card in MIG mode (current or pending: it must not be served whole); one
// without a UUID cannot be advertised at all and is left out (namedCards gives it its old name when
// the Node's inventory still has it).
func newDeviceTable(cards []nvidia.Card, shares int) *deviceTable {
	t := &deviceTable{byUUID: map[string]int{}, devices: map[string]advertised{}, shares: shares, withheld: map[string]bool{}}
	for _, c := range cards {
		if c.UUID == "" {
			continue
		}
		i := len(t.cards)
		g := annotations.GPU{UUID: c.UUID, Index: c.Index, Model: c.Model, MemoryMiB: c.MemoryMiB, NUMA: c.NUMA, Healthy: c.Fault == "" && !c.MIG.Enabled(), Shares: shares}
		g.MIG = migInventory(c)
		t.cards = append(t.cards, g)
		t.bus = append(t.bus, c.PCIBusID)
		t.byUUID[c.UUID] = i
		for k, id := range g.DeviceIDs() {
			slot := -1
			if shares > 1 {
				slot = k
			}
			t.devices[id] = advertised{ID: id, Card: i, Slot: slot}
			t.order = append(t.order, id)
		}
	}
	return t
}

// migInventory is the inventory's mig field for a card: nil unless the card is in MIG mode (now or
// after its next reset), mode enabling while the mode is only pending, and mode enabled with the
// card's instances while it is in force. An instance is healthy when neither it nor its card has a
// fault. An instance the inventory cannot carry (no UUID, or NVML could not tell its profile or
// placement) is left out: it cannot be served, and it must not make the node's inventory invalid.
// A card with dynamic MIG profiles (withDynamicMIG) lists them too.
func migInventory(c nvidia.Card) *annotations.MIG {
	switch {
	case !c.MIG.Enabled():
		return nil
	case !c.MIG.Current:
		return &annotations.MIG{Mode: annotations.MIGEnabling}
	}
	m := &annotations.MIG{Mode: annotations.MIGEnabled}
	for _, in := range c.Instances {
		if in.UUID == "" || !annotations.ValidMIGProfile(in.Profile) || in.GI < 0 || in.CI < 0 || in.Start < 0 || in.Size < 1 ||
			in.Start+in.Size > 64 || in.MemoryMiB < 0 || in.SMs < 0 || len(m.Instances) == annotations.MaxMIGInstances {
			continue
		}
		m.Instances = append(m.Instances, annotations.MIGInstance{UUID: in.UUID, Profile: in.Profile, GI: in.GI, CI: in.CI,
			Start: in.Start, Size: in.Size, MemoryMiB: in.MemoryMiB, SMs: in.SMs, Healthy: in.Fault == "" && c.Fault == ""})
	}
	if m.Dynamic = migDynamic(c); len(m.Dynamic) > 0 {
		m.DynamicV = annotations.MIGDynamicVersion
	}
	return m
}

func (t *deviceTable) card(id string) *annotations.GPU {
	d, ok := t.devices[id]
	if !ok {
		return nil
	}
	return &t.cards[d.Card]
}

// pluginDevices is the ListAndWatch answer: every ID with its card's health and, when topology is
// on and the NUMA node is known, its TopologyInfo.
func (t *deviceTable) pluginDevices(topology bool) []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(t.order)+len(t.extra))
	ids := slices.Clone(t.order)
	for _, e := range t.extra {
		ids = append(ids, e.ID)
	}
	for _, id := range ids {
		c := &t.cards[t.devices[id].Card]
		d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
		if !c.Healthy || t.withheld[id] {
			d.Health = pluginapi.Unhealthy
		}
		if topology && c.NUMA >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(c.NUMA)}}}
		}
		out = append(out, d)
	}
	return out
}

// inventory is the Node annotation value.
func (t *deviceTable) inventory() annotations.Inventory {
	inv := annotations.Inventory{V: annotations.Version, GPUs: make([]annotations.GPU, len(t.cards))}
	copy(inv.GPUs, t.cards)
	inv.Links = slices.Clone(t.links)
	return inv
}

// namedCards gives cards whose UUID NVML could not read (a card lost before the plugin started) the
// UUID, model and memory the Node's last published inventory recorded at the same NVML index, so the
// card is advertised unhealthy under its own name rather than vanishing. Cards it cannot name stay
// nameless (and are left out of the table). It returns a new slice.
func namedCards(cards []nvidia.Card, prev *annotations.Inventory) []nvidia.Card {
	out := slices.Clone(cards)
	if prev == nil {
		return out
	}
	used := map[string]bool{}
	for _, c := range out {
		used[c.UUID] = true
	}
	for i := range out {
		c := &out[i]
		if c.UUID != "" {
			continue
		}
		for _, g := range prev.GPUs {
			if g.Index != c.Index || used[g.UUID] {
				continue
			}
			c.UUID, used[g.UUID] = g.UUID, true
			if c.Model == "" {
				c.Model = g.Model
			}
			if c.MemoryMiB == 0 {
				c.MemoryMiB = g.MemoryMiB
			}
			if c.NUMA < 0 {
				c.NUMA = g.NUMA
			}
			break
		}
	}
	return out
}

// cudaOrder sorts card UUIDs as CUDA numbers the visible devices with CUDA_DEVICE_ORDER=PCI_BUS_ID:
// by PCI bus id, which is also NVML's index order; cards whose bus id is unknown by NVML index.
func (t *deviceTable) cudaOrder(uuids []string) {
	slices.SortStableFunc(uuids, func(a, b string) int { return t.cudaCompare(t.byUUID[a], t.byUUID[b]) })
}

// cudaCompare orders cards i and j (indexes of cards) as cudaOrder does.
func (t *deviceTable) cudaCompare(i, j int) int {
	if t.bus[i] != "" && t.bus[j] != "" && t.bus[i] != t.bus[j] {
		return strings.Compare(t.bus[i], t.bus[j])
	}
	return t.cards[i].Index - t.cards[j].Index
}

// setHeld adapts the table to the IDs pods hold (as the kubelet gave them: this process's Allocate
// answers and PodResources; a record on a pod alone does not count, since anyone who can annotate a
// pod can forge one) after a change of the share count, and reports whether what is advertised changed:
//   - a held ID the configured count does not advertise (the whole card <UUID> under shares N > 1, or
//     a slot <UUID>::k with k >= N, or any slot under shares 1) is advertised as long as it is held;
//   - a card held whole that way has every configured ID withheld (advertised Unhealthy);
//   - under shares N > 1, each held slot beyond N withholds one free configured slot of the card
//     (the highest first), so no more than N pods share it;
//   - under shares 1, a card with held slots has its UUID withheld.
//
// When the holders end, the IDs go and the withheld ones come back.
func (t *deviceTable) setHeld(held map[string]bool) bool {
	var extra []advertised
	withheld := map[string]bool{}
	perCard := map[int][]advertised{}
	for id := range held {
		if _, configured := t.devices[id]; configured && !t.isExtra(id) {
			continue
		}
		u, slot, err := annotations.ParseDeviceID(id)
		if err != nil {
			continue
		}
		c, ok := t.byUUID[u]
		if !ok {
			continue
		}
		a := advertised{ID: id, Card: c, Slot: slot}
		extra = append(extra, a)
		perCard[c] = append(perCard[c], a)
	}
	slices.SortFunc(extra, func(a, b advertised) int { return strings.Compare(a.ID, b.ID) })
	for c, held0 := range perCard {
		ids := t.cards[c].DeviceIDs()
		whole := slices.ContainsFunc(held0, func(a advertised) bool { return a.Slot < 0 })
		if whole || t.shares <= 1 {
			for _, id := range ids {
				withheld[id] = true
			}
			continue
		}
		n := len(held0)
		for k := len(ids) - 1; k >= 0 && n > 0; k-- {
			if !held[ids[k]] {
				withheld[ids[k]] = true
				n--
			}
		}
	}
	changed := !slices.Equal(extra, t.extra) || len(withheld) != len(t.withheld)
	for id := range withheld {
		changed = changed || !t.withheld[id]
	}
	for _, e := range t.extra {
		if !slices.Contains(extra, e) {
			delete(t.devices, e.ID)
		}
	}
	for _, e := range extra {
		t.devices[e.ID] = e
	}
	t.extra, t.withheld = extra, withheld
	return changed
}

func (t *deviceTable) isExtra(id string) bool {
	return slices.ContainsFunc(t.extra, func(a advertised) bool { return a.ID == id })
}
