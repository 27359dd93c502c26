package deviceplugin

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

// The links of a simulated nvlink-pairs node, from the file through discovery to the published
// inventory: a lost card is left out of the gpus list and its links with it, the others' positions
// follow the list; a card in MIG mode keeps its links. The inventory survives its encoding.
func TestInventoryLinksOfSimulatedNode(t *testing.T) {
	f, err := sim.Parse([]byte(`nodes:
  node1:
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, mig: {current: enabled, instances: [{profile: 7g.80gb}]}}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, fault: lost}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, count: 2}
topology:
  node1: nvlink-pairs
`))
	if err != nil {
		t.Fatal(err)
	}
	cards, err := f.Cards("node1")
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.New(cards)
	found, err := nvidia.Discover(srv, srv.NUMA)
	if err != nil {
		t.Fatal(err)
	}
	links, err := nvidia.DiscoverLinks(srv, found)
	if err != nil {
		t.Fatal(err)
	}
	p := newPlugin(pluginOptions{Node: testNode, Names: annotations.DefaultResourceNames(), Cards: found, Links: links, Shares: 1, Log: logr.Discard()})
	s, err := annotations.EncodeInventory(p.Inventory())
	if err != nil {
		t.Fatal(err)
	}
	inv, err := annotations.DecodeInventory(s)
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for _, g := range inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	// NVML cards 0, 2, 3 (card 1 is lost): gpus positions 0, 1, 2.
	if diff := cmp.Diff([]string{sim.DerivedUUID("node1", 0), sim.DerivedUUID("node1", 2), sim.DerivedUUID("node1", 3)}, uuids); diff != "" {
		t.Fatalf("gpus (-want +got):\n%s", diff)
	}
	want := []annotations.Link{
		{A: 0, B: 1, PCIe: annotations.PCIeNUMA},               // NVML 0-2: switches 0 and 1 of socket 0
		{A: 0, B: 2, PCIe: annotations.PCIeNUMA},               // NVML 0-3
		{A: 1, B: 2, NVLinks: 4, PCIe: annotations.PCIeSwitch}, // NVML 2-3: the bridge, one switch
	}
	if diff := cmp.Diff(want, inv.Links); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
}

// Links the inventory cannot carry (a card left out, a pair twice, a value out of the contract) are
// dropped rather than making the inventory invalid.
func TestInventoryLinksDropWhatTheContractRefuses(t *testing.T) {
	cards := []nvidia.Card{{UUID: "GPU-a", NUMA: -1}, {NUMA: -1, Fault: "lost"}, {UUID: "GPU-c", Index: 2, NUMA: -1}, {UUID: "GPU-d", Index: 3, NUMA: -1}}
	links := []annotations.Link{
		{A: 0, B: 2, NVLinks: 4, PCIe: annotations.PCIeSwitch}, // gpus 0-1
		{A: 0, B: 1, NVLinks: 4},                               // card 1 has no UUID: not in gpus
		{A: 0, B: 2, NVLinks: 2},                               // the pair again
		{A: 0, B: 3, PCIe: "bridge"},                           // no such level
		{A: 3, B: 2, PCIe: annotations.PCIeSwitch},             // reversed: gpus 1-2
	}
	tbl := newDeviceTable(cards, 1)
	tbl.setLinks(cards, links)
	want := []annotations.Link{{A: 0, B: 1, NVLinks: 4, PCIe: annotations.PCIeSwitch}, {A: 1, B: 2, PCIe: annotations.PCIeSwitch}}
	if diff := cmp.Diff(want, tbl.inventory().Links); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
}
