package deviceplugin

import (
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
)

// advertised is one device ID the plugin advertises: a whole card, or one share slot of a card.
type advertised struct {
	ID string
	// Card indexes deviceTable.cards.
	Card int
	// Slot is the share slot, -1 for a whole card.
	Slot int
}

// deviceTable is the node's cards and the device IDs that stand for them. The set of cards and IDs is
// fixed at start; only health changes (under Plugin.mu).
type deviceTable struct {
	cards   []annotations.GPU
	byUUID  map[string]int
	devices map[string]advertised
	order   []string
}

func newDeviceTable(cards []nvidia.Card, shares int) *deviceTable {
	t := &deviceTable{byUUID: map[string]int{}, devices: map[string]advertised{}}
	for i, c := range cards {
		g := annotations.GPU{UUID: c.UUID, Index: c.Index, Model: c.Model, MemoryMiB: c.MemoryMiB, NUMA: c.NUMA, Healthy: true, Shares: shares}
		t.cards = append(t.cards, g)
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
	out := make([]*pluginapi.Device, 0, len(t.order))
	for _, id := range t.order {
		c := &t.cards[t.devices[id].Card]
		d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
		if !c.Healthy {
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
	return inv
}
