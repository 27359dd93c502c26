package deviceplugin

import (
	"slices"

	"github.com/go-logr/logr"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
)

// setLinks keeps the links discovery found (nvidia.DiscoverLinks: A and B are positions in cards,
// the cards the table was built from) as the inventory's, with A and B moved to positions in the
// table's cards. A link of a card the table leaves out (no UUID) goes with it, and so does one the
// inventory could not carry, so the links never make the node's inventory invalid. A card in MIG
// mode keeps its links: its instances reach others through it.
func (t *deviceTable) setLinks(cards []nvidia.Card, links []annotations.Link) {
	at := func(p int) (int, bool) {
		if p < 0 || p >= len(cards) || cards[p].UUID == "" {
			return 0, false
		}
		i, ok := t.byUUID[cards[p].UUID]
		return i, ok
	}
	t.links = nil
	seen := map[[2]int]bool{}
	for _, l := range links {
		a, okA := at(l.A)
		b, okB := at(l.B)
		if !okA || !okB || a == b {
			continue
		}
		l.A, l.B = min(a, b), max(a, b)
		if seen[[2]int{l.A, l.B}] || l.NVLinks < 0 || l.NVLinks > annotations.MaxNVLinks || (l.NVSwitch && l.NVLinks == 0) ||
			(l.PCIe != "" && !slices.Contains(annotations.PCIeLevels, l.PCIe)) {
			continue
		}
		seen[[2]int{l.A, l.B}] = true
		t.links = append(t.links, l)
	}
}

// logLinks says what discovery found between the cards: each NVLink-connected pair, and how many
// pairs have each PCIe common ancestor.
func logLinks(log logr.Logger, cards []nvidia.Card, links []annotations.Link) {
	pcie := map[string]int{}
	for _, l := range links {
		if l.NVLink() {
			log.Info("NVLink between cards", "a", cards[l.A].UUID, "b", cards[l.B].UUID, "nvlinks", l.NVLinks, "nvswitch", l.NVSwitch, "pcie", l.PCIe)
		}
		if l.PCIe != "" {
			pcie[l.PCIe]++
		}
	}
	log.Info("links between cards discovered", "pairs", len(links), "pairsByPCIe", pcie)
}
