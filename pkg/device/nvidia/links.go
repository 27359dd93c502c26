package nvidia

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// pcieLevels names NVML's common ancestors (GetTopologyCommonAncestor) as the contract does.
var pcieLevels = map[nvml.GpuTopologyLevel]string{
	nvml.TOPOLOGY_INTERNAL:   annotations.PCIeBoard,
	nvml.TOPOLOGY_SINGLE:     annotations.PCIeSwitch,
	nvml.TOPOLOGY_MULTIPLE:   annotations.PCIeSwitches,
	nvml.TOPOLOGY_HOSTBRIDGE: annotations.PCIeHostBridge,
	nvml.TOPOLOGY_NODE:       annotations.PCIeNUMA,
	nvml.TOPOLOGY_SYSTEM:     annotations.PCIeSystem,
}

// PCIeLevel names an NVML common ancestor as the contract does (annotations.PCIeLevels); "" for a
// level NVML added after this code.
func PCIeLevel(l nvml.GpuTopologyLevel) string { return pcieLevels[l] }

// DiscoverLinks initialises NVML, asks how every pair of cards reaches each other and shuts NVML
// down again. cards are what Discover returned; the links' A and B are positions in it. Only NVML
// failing to initialise is an error: a call failing for a card or a pair leaves what it would have
// told unknown (no NVLink counted, PCIe empty), and a pair of which nothing is known is left out.
func DiscoverLinks(lib Library, cards []Card) ([]annotations.Link, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initialise NVML: %w", ret)
	}
	defer func() { _ = lib.Shutdown() }()
	return links(lib, cards), nil
}

// links finds the NVLink and PCIe links between cards (NVML initialised).
//
// NVLink: each active link of a card (GetNvLinkState) goes either to an NVSwitch
// (GetNvLinkRemoteDeviceType) or to another card, found by the PCI bus id at its far end
// (GetNvLinkRemotePciInfo). Two cards are linked directly by the links between them (the larger count
// as either side sees it, should one side's calls fail); cards that both have links to NVSwitches
// reach each other through the switches, with as many links as the lower card has to them. PCIe: the
// closest common ancestor of the two (GetTopologyCommonAncestor).
func links(lib Library, cards []Card) []annotations.Link {
	handles := cardHandles(lib, cards)
	byBus := map[string]int{}
	for p, c := range cards {
		if c.PCIBusID != "" {
			byBus[c.PCIBusID] = p
		}
	}
	direct := map[[2]int]int{}
	toSwitch := make([]int, len(cards))
	for p, d := range handles {
		if d == nil {
			continue
		}
		for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
			if st, ret := d.GetNvLinkState(l); ret != nvml.SUCCESS || st != nvml.FEATURE_ENABLED {
				continue // inactive, beyond the card's links, or no NVLink at all
			}
			typ, ret := d.GetNvLinkRemoteDeviceType(l)
			switch {
			case ret == nvml.SUCCESS && typ == nvml.NVLINK_DEVICE_TYPE_SWITCH:
				toSwitch[p]++
				continue
			case ret == nvml.SUCCESS && typ != nvml.NVLINK_DEVICE_TYPE_GPU:
				continue // a CPU (IBM NPU) or a device NVML cannot name
			}
			// A GPU, or a driver that cannot tell the type: the bus id at the far end names the peer.
			pci, ret := d.GetNvLinkRemotePciInfo(l)
			if ret != nvml.SUCCESS {
				continue
			}
			if q, ok := byBus[NormalizeBusID(busID(pci))]; ok && q != p {
				direct[[2]int{p, q}]++
			}
		}
	}
	var out []annotations.Link
	for a := range cards {
		for b := a + 1; b < len(cards); b++ {
			l := annotations.Link{A: a, B: b, NVLinks: max(direct[[2]int{a, b}], direct[[2]int{b, a}])}
			if l.NVLinks == 0 && toSwitch[a] > 0 && toSwitch[b] > 0 {
				l.NVLinks, l.NVSwitch = toSwitch[a], true
			}
			l.NVLinks = min(l.NVLinks, annotations.MaxNVLinks)
			if handles[a] != nil && handles[b] != nil {
				if lvl, ret := handles[a].GetTopologyCommonAncestor(handles[b]); ret == nvml.SUCCESS {
					l.PCIe = PCIeLevel(lvl)
				}
			}
			if l.NVLinks > 0 || l.PCIe != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// cardHandles finds the NVML handle of each card by its UUID (nil where NVML gives none: a card
// without a UUID, or lost since Discover).
func cardHandles(lib Library, cards []Card) []nvml.Device {
	handles := make([]nvml.Device, len(cards))
	byUUID := map[string]int{}
	for p, c := range cards {
		if c.UUID != "" {
			byUUID[c.UUID] = p
		}
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return handles
	}
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		u, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		if p, ok := byUUID[u]; ok && handles[p] == nil {
			handles[p] = d
		}
	}
	return handles
}
