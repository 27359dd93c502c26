package nvidia_test

import (
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

// topologyServer is a simulated node of 8 A100s laid out as topology, with extra entries' fields
// (e.g. `fault: lost`) on card 3.
func topologyServer(t *testing.T, topology, card3 string) *sim.Server {
	t.Helper()
	file := fmt.Sprintf(`nodes:
  node1:
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, count: 3}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920%s}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, count: 4}
topology:
  node1: %s
`, card3, topology)
	f, err := sim.Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	cards, err := f.Cards("node1")
	if err != nil {
		t.Fatal(err)
	}
	return sim.New(cards)
}

func discoverLinks(t *testing.T, lib nvidia.Library) []annotations.Link {
	t.Helper()
	cards, err := nvidia.Discover(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	links, err := nvidia.DiscoverLinks(lib, cards)
	if err != nil {
		t.Fatal(err)
	}
	return links
}

// pcie is the simulated PCIe tree's answer for cards a and b: two cards per switch, two switches per
// socket.
func pcie(a, b int) string {
	switch {
	case a/4 != b/4:
		return annotations.PCIeSystem
	case a/2 != b/2:
		return annotations.PCIeNUMA
	}
	return annotations.PCIeSwitch
}

func TestDiscoverLinksOfEachTopology(t *testing.T) {
	for _, tc := range []struct {
		topology string
		// nvlink gives the NVLink count and NVSwitch of pair a-b.
		nvlink func(a, b int) (int, bool)
	}{
		{"nvswitch", func(a, b int) (int, bool) { return 12, true }}, // every card: 12 links to the switches
		{"nvlink-pairs", func(a, b int) (int, bool) {
			if a/2 == b/2 {
				return 4, false // a bridge of 4 links between 0-1, 2-3, 4-5, 6-7
			}
			return 0, false
		}},
		{"pcie-switches", func(a, b int) (int, bool) { return 0, false }},
	} {
		t.Run(tc.topology, func(t *testing.T) {
			var want []annotations.Link
			for a := 0; a < 8; a++ {
				for b := a + 1; b < 8; b++ {
					n, sw := tc.nvlink(a, b)
					want = append(want, annotations.Link{A: a, B: b, NVLinks: n, NVSwitch: sw, PCIe: pcie(a, b)})
				}
			}
			got := discoverLinks(t, topologyServer(t, tc.topology, ""))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("links (-want +got):\n%s", diff)
			}
			inv := annotations.Inventory{V: annotations.Version, Links: got}
			for i := 0; i < 8; i++ {
				inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: fmt.Sprintf("GPU-%d", i), Index: i, Model: "m", MemoryMiB: 1, NUMA: i / 4, Healthy: true, Shares: 1})
			}
			enc, err := annotations.EncodeInventory(inv)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := annotations.DecodeInventory(enc); err != nil {
				t.Fatalf("the links discovered do not make a valid inventory: %v", err)
			}
		})
	}
}

// A node without a topology answers NOT_SUPPORTED for NVLink and the common ancestor: no links.
func TestDiscoverLinksWithoutTopologyFindsNone(t *testing.T) {
	f, err := sim.Parse([]byte("nodes:\n  node1:\n    - {model: T4, memoryMiB: 15360, numa: 0, count: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cards, err := f.Cards("node1")
	if err != nil {
		t.Fatal(err)
	}
	if got := discoverLinks(t, sim.New(cards)); got != nil {
		t.Fatalf("links %+v, want none", got)
	}
}

// A lost card answers nothing: its pairs are unknown and left out, the others are all there.
func TestDiscoverLinksLeavesOutTheLostCard(t *testing.T) {
	got := discoverLinks(t, topologyServer(t, "nvlink-pairs", ", fault: lost"))
	if len(got) != 21 { // 8 cards: 28 pairs, 7 of them with card 3
		t.Errorf("%d links, want 21", len(got))
	}
	for _, l := range got {
		if l.A == 3 || l.B == 3 {
			t.Errorf("link %+v of the lost card", l)
		}
		if l.A == 0 && l.B == 1 && l.NVLinks != 4 {
			t.Errorf("pair 0-1 has %d NVLinks, want 4", l.NVLinks)
		}
	}
}

// failing wraps a simulated NVML so that chosen calls fail, as a driver may for one card or pair.
type failing struct {
	nvidia.Library
	// ancestor fails GetTopologyCommonAncestor from card a to card b.
	ancestor [2]int
	// remotePCI fails GetNvLinkRemotePciInfo on every link of this card; remoteType fails
	// GetNvLinkRemoteDeviceType with FUNCTION_NOT_FOUND (an old driver) on every card.
	remotePCI  int
	remoteType bool
}

type failingDevice struct {
	nvml.Device
	f     *failing
	index int
}

func (f *failing) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := f.Library.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return d, ret
	}
	return &failingDevice{Device: d, f: f, index: i}, nvml.SUCCESS
}

func (d *failingDevice) GetTopologyCommonAncestor(o nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
	other := o.(*failingDevice)
	if [2]int{d.index, other.index} == d.f.ancestor {
		return 0, nvml.ERROR_UNKNOWN
	}
	return d.Device.GetTopologyCommonAncestor(other.Device)
}

func (d *failingDevice) GetNvLinkRemotePciInfo(l int) (nvml.PciInfo, nvml.Return) {
	if d.index == d.f.remotePCI {
		return nvml.PciInfo{}, nvml.ERROR_UNKNOWN
	}
	return d.Device.GetNvLinkRemotePciInfo(l)
}

func (d *failingDevice) GetNvLinkRemoteDeviceType(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
	if d.f.remoteType {
		return nvml.NVLINK_DEVICE_TYPE_UNKNOWN, nvml.ERROR_FUNCTION_NOT_FOUND
	}
	return d.Device.GetNvLinkRemoteDeviceType(l)
}

// A call failing for one pair or one card leaves that field unknown; discovery goes on.
func TestDiscoverLinksWhenNVMLFailsForAPair(t *testing.T) {
	lib := &failing{Library: topologyServer(t, "nvlink-pairs", ""), ancestor: [2]int{0, 2}, remotePCI: 4, remoteType: true}
	got := discoverLinks(t, lib)
	byPair := map[[2]int]annotations.Link{}
	for _, l := range got {
		byPair[[2]int{l.A, l.B}] = l
	}
	if len(got) != 27 {
		t.Errorf("%d links, want 27 (every pair of the 28 but 0-2 knows its PCIe level)", len(got))
	}
	for _, tc := range []struct {
		pair [2]int
		want annotations.Link
	}{
		// The common ancestor of 0 and 2 failed: not NVLink-connected, nothing known: left out.
		{[2]int{0, 2}, annotations.Link{}},
		// Without the device type (an old driver) the far end's bus id still names the peer.
		{[2]int{0, 1}, annotations.Link{A: 0, B: 1, NVLinks: 4, PCIe: annotations.PCIeSwitch}},
		// Card 4 cannot tell its links' far ends; card 5 sees the same 4 links from its side.
		{[2]int{4, 5}, annotations.Link{A: 4, B: 5, NVLinks: 4, PCIe: annotations.PCIeSwitch}},
		{[2]int{1, 2}, annotations.Link{A: 1, B: 2, PCIe: annotations.PCIeNUMA}},
	} {
		if diff := cmp.Diff(tc.want, byPair[tc.pair]); diff != "" {
			t.Errorf("pair %v (-want +got):\n%s", tc.pair, diff)
		}
	}
}

// NVML's common ancestors get the contract's names, nearest first.
func TestPCIeLevelNamesEveryNVMLLevel(t *testing.T) {
	levels := []nvml.GpuTopologyLevel{nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE, nvml.TOPOLOGY_MULTIPLE,
		nvml.TOPOLOGY_HOSTBRIDGE, nvml.TOPOLOGY_NODE, nvml.TOPOLOGY_SYSTEM}
	var got []string
	for _, l := range levels {
		got = append(got, nvidia.PCIeLevel(l))
	}
	if diff := cmp.Diff(annotations.PCIeLevels, got); diff != "" {
		t.Fatalf("levels (-want +got):\n%s", diff)
	}
	if l := nvidia.PCIeLevel(60); l != "" {
		t.Fatalf("an unknown level is named %q", l)
	}
}
