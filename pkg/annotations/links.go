package annotations

import (
	"fmt"
	"slices"
	"strings"
)

// Links between a node's cards (NVLink, NVSwitch, the PCIe hierarchy) in the contract. The device
// plugin publishes them in the inventory's optional "links" field; the extender reads them to give a
// multi-card container its best-connected cards and to keep well-linked sets whole for the pods that
// need them; a pod may require NVLink with the GPULink annotation.

// GPULink is a pod annotation a user writes: "nvlink" requires every pair of cards of each of the
// pod's containers to be NVLink-connected (directly or through NVSwitch). Absent: no requirement
// (links still steer the choice).
const GPULink = "cardinal.io/gpu-link"

// Link requirements a pod may name in GPULink.
const (
	// LinkNVLink: every pair of a container's cards has NVLink between them.
	LinkNVLink = "nvlink"
)

// PCIe levels of Link.PCIe: the closest common ancestor of two cards in the PCIe hierarchy, as
// NVML's GetTopologyCommonAncestor reports it, nearest first.
const (
	// PCIeBoard: the same board (a multi-GPU board).
	PCIeBoard = "board"
	// PCIeSwitch: below one PCIe switch.
	PCIeSwitch = "switch"
	// PCIeSwitches: through several PCIe switches, not through the host bridge.
	PCIeSwitches = "switches"
	// PCIeHostBridge: through one CPU's host bridge.
	PCIeHostBridge = "host-bridge"
	// PCIeNUMA: through the host bridges of one NUMA node.
	PCIeNUMA = "numa"
	// PCIeSystem: across sockets (the inter-socket link).
	PCIeSystem = "system"
)

// PCIeLevels are the PCIe levels, nearest first.
var PCIeLevels = []string{PCIeBoard, PCIeSwitch, PCIeSwitches, PCIeHostBridge, PCIeNUMA, PCIeSystem}

// MaxNVLinks bounds Link.NVLinks (an NVLink 5 GPU has 18 links).
const MaxNVLinks = 64

// Link is how two cards of the node reach each other. Added in v1 without a version change.
type Link struct {
	// A and B are the two cards' positions in the inventory's gpus list, A < B.
	A int `json:"a"`
	B int `json:"b"`
	// NVLinks is the number of active NVLink links between the two (through NVSwitch: the links of
	// A to the switches); 0 when they are not NVLink-connected.
	NVLinks int `json:"nvlinks,omitempty"`
	// NVSwitch is true when the NVLink path goes through NVSwitch.
	NVSwitch bool `json:"nvswitch,omitempty"`
	// PCIe is the closest common PCIe ancestor (PCIeLevels); empty when NVML did not say.
	PCIe string `json:"pcie,omitempty"`
}

// NVLink reports whether the pair is NVLink-connected.
func (l *Link) NVLink() bool { return l.NVLinks > 0 }

// validateLinks checks the inventory's links against its n cards.
func validateLinks(links []Link, n int) error {
	seen := make(map[[2]int]bool, len(links))
	for i := range links {
		l := &links[i]
		at := fmt.Sprintf("links[%d]", i)
		switch {
		case l.A < 0 || l.B >= n || l.A >= l.B:
			return errorf(GPUInventory, "%s: cards a %d, b %d: want 0 <= a < b < %d (positions in gpus)", at, l.A, l.B, n)
		case seen[[2]int{l.A, l.B}]:
			return errorf(GPUInventory, "%s: pair %d-%d appears twice", at, l.A, l.B)
		case l.NVLinks < 0 || l.NVLinks > MaxNVLinks:
			return errorf(GPUInventory, "%s.nvlinks: %d is not in 0..%d", at, l.NVLinks, MaxNVLinks)
		case l.NVSwitch && l.NVLinks == 0:
			return errorf(GPUInventory, "%s: nvswitch without nvlinks", at)
		case l.PCIe != "" && !slices.Contains(PCIeLevels, l.PCIe):
			return errorf(GPUInventory, "%s.pcie: %q is not one of %s", at, l.PCIe, strings.Join(PCIeLevels, ", "))
		}
		seen[[2]int{l.A, l.B}] = true
	}
	return nil
}

// parseLink reads the GPULink annotation's value.
func parseLink(v string) (string, error) {
	switch s := strings.ToLower(strings.TrimSpace(v)); s {
	case LinkNVLink:
		return s, nil
	case "":
		return "", nil
	}
	return "", errorf(GPULink, "%q is not a link requirement (known: %s)", v, LinkNVLink)
}
