package sim

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Topology is a named layout of the links between a node's cards (see the package documentation).
type Topology string

// Simulated topologies.
const (
	// TopologyNVSwitch: every card has NVSwitchLinks NVLink links, spread over NVSwitches switches,
	// so every pair of cards is connected alike (an HGX/DGX baseboard).
	TopologyNVSwitch Topology = "nvswitch"
	// TopologyNVLinkPairs: PCIe cards with NVLink bridges between cards 0-1, 2-3, … (BridgeLinks
	// links each); a last odd card has its links inactive.
	TopologyNVLinkPairs Topology = "nvlink-pairs"
	// TopologyPCIeSwitches: PCIe cards without NVLink.
	TopologyPCIeSwitches Topology = "pcie-switches"
)

// Topologies lists the values of the topology field.
var Topologies = []Topology{TopologyNVSwitch, TopologyNVLinkPairs, TopologyPCIeSwitches}

// The simulated topologies' geometry. In every topology the PCIe tree puts CardsPerSwitch
// consecutive cards below one PCIe switch and SwitchesPerSocket switches on one socket (NUMA node):
// cards 0-1 on switch 0 and 2-3 on switch 1 of socket 0, 4-5 and 6-7 on socket 1, and so on.
const (
	CardsPerSwitch    = 2
	SwitchesPerSocket = 2
	NVSwitchLinks     = 12
	NVSwitches        = 6
	BridgeLinks       = 4
)

// NVLinkPort is one NVLink link of a simulated card.
type NVLinkPort struct {
	// Active is the link's state (GetNvLinkState).
	Active bool
	// Switch is true when the far end is an NVSwitch, false when it is a card.
	Switch bool
	// RemoteBusID is the PCI bus id at the far end, in NVML's form (GetNvLinkRemotePciInfo).
	RemoteBusID string
}

// PCIePlace is where a simulated card sits in the PCIe tree.
type PCIePlace struct {
	// Switch is the PCIe switch the card is below (numbered across the node), Socket the CPU socket
	// (and NUMA node) the switch hangs from.
	Switch, Socket int
}

// SwitchBusID is the PCI bus id the simulator gives NVSwitch k, in NVML's form.
func SwitchBusID(k int) string { return fmt.Sprintf("00000000:%02X:00.0", 0xC0+k) }

// lay sets the links of a node's cards (in index order) as topology t describes them. entries are
// the node's entries, to name the one a card comes from.
func (t Topology) lay(node string, entries []Entry, cards []Card) error {
	if !slices.Contains(Topologies, t) {
		return fmt.Errorf("simulation file: topology.%s: %q is not one of %s", node, t, topologyList())
	}
	perSocket := CardsPerSwitch * SwitchesPerSocket
	entry := 0
	left := entryCount(entries, 0)
	for i := range cards {
		for left == 0 {
			entry++
			left = entryCount(entries, entry)
		}
		left--
		c := &cards[i]
		c.PCIe = &PCIePlace{Switch: i / CardsPerSwitch, Socket: i / perSocket}
		if c.NUMA >= 0 && c.NUMA != c.PCIe.Socket {
			return fmt.Errorf("simulation file: nodes.%s[%d].numa: %d, but topology %s puts card %d on socket %d (cards %d-%d): give it numa %d or leave numa out",
				node, entry, c.NUMA, t, i, c.PCIe.Socket, c.PCIe.Socket*perSocket, c.PCIe.Socket*perSocket+perSocket-1, c.PCIe.Socket)
		}
		if c.NUMA < 0 {
			c.NUMA = c.PCIe.Socket
		}
		switch t {
		case TopologyNVSwitch:
			for l := 0; l < NVSwitchLinks; l++ {
				c.NVLink = append(c.NVLink, NVLinkPort{Active: true, Switch: true, RemoteBusID: SwitchBusID(l % NVSwitches)})
			}
		case TopologyNVLinkPairs:
			peer := i ^ 1
			for l := 0; l < BridgeLinks; l++ {
				p := NVLinkPort{Active: peer < len(cards)}
				if p.Active {
					p.RemoteBusID = BusID(peer)
				}
				c.NVLink = append(c.NVLink, p)
			}
		}
	}
	return nil
}

// entryCount is how many cards entry k of entries describes.
func entryCount(entries []Entry, k int) int {
	if k >= len(entries) {
		return 1 << 30
	}
	return max(entries[k].Count, 1)
}

func topologyList() string {
	parts := make([]string, len(Topologies))
	for i, t := range Topologies {
		parts[i] = string(t)
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// setLinkFuncs answers the NVLink and PCIe topology calls of card d as NVML does: per link its state,
// the type of device at the far end and that device's PCI info; per pair of cards their closest common
// PCIe ancestor.
func (d *device) setLinkFuncs() {
	c := d.card
	gone := func() bool { return d.faultIs(FaultLost) }
	port := func(l int) (NVLinkPort, nvml.Return) {
		switch {
		case gone():
			return NVLinkPort{}, nvml.ERROR_GPU_IS_LOST
		case c.NVLink == nil:
			return NVLinkPort{}, nvml.ERROR_NOT_SUPPORTED
		case l < 0 || l >= len(c.NVLink):
			return NVLinkPort{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return c.NVLink[l], nvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		p, ret := port(l)
		if ret != nvml.SUCCESS || !p.Active {
			return nvml.FEATURE_DISABLED, ret
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		p, ret := port(l)
		switch {
		case ret != nvml.SUCCESS:
			return nvml.NVLINK_DEVICE_TYPE_UNKNOWN, ret
		case p.Switch:
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
		return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
		var pci nvml.PciInfo
		p, ret := port(l)
		if ret != nvml.SUCCESS {
			return pci, ret
		}
		if !p.Active {
			return pci, nvml.ERROR_NOT_SUPPORTED
		}
		setBusID(&pci, p.RemoteBusID)
		return pci, nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		o, ok := other.(*device)
		switch {
		case gone():
			return 0, nvml.ERROR_GPU_IS_LOST
		case !ok || o.srv != d.srv:
			return 0, nvml.ERROR_INVALID_ARGUMENT
		case o.faultIs(FaultLost):
			return 0, nvml.ERROR_GPU_IS_LOST
		case c.PCIe == nil || o.card.PCIe == nil:
			return 0, nvml.ERROR_NOT_SUPPORTED
		case o == d:
			return nvml.TOPOLOGY_INTERNAL, nvml.SUCCESS
		case c.PCIe.Socket != o.card.PCIe.Socket:
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		case c.PCIe.Switch != o.card.PCIe.Switch:
			return nvml.TOPOLOGY_NODE, nvml.SUCCESS
		}
		return nvml.TOPOLOGY_SINGLE, nvml.SUCCESS
	}
}
