package sim_test

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

func TestTopologyErrorsNameTheField(t *testing.T) {
	const cards = "nodes:\n  node1:\n    - {model: A100, memoryMiB: 81920, count: 4}\n    - {model: A100, memoryMiB: 81920, numa: 0, count: 4}\n"
	for _, tc := range []struct {
		name, topology, want string
	}{
		{"unknown preset", "topology:\n  node1: ring\n", `topology.node1: "ring" is not one of nvswitch, nvlink-pairs, pcie-switches`},
		{"unknown node", "topology:\n  node2: nvswitch\n", "topology.node2: no such node (nodes: node1)"},
		// Cards 4-7 are on socket 1 in every topology; the second entry says NUMA 0.
		{"numa against the socket", "topology:\n  node1: pcie-switches\n", "nodes.node1[1].numa: 0, but topology pcie-switches puts card 4 on socket 1 (cards 4-7)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sim.Parse([]byte(cards + tc.topology))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A card of a node with a topology whose NUMA node the file leaves out is on its socket's.
func TestTopologyGivesCardsTheirSocketsNUMA(t *testing.T) {
	f, err := sim.Parse([]byte("nodes:\n  node1:\n    - {model: A100, memoryMiB: 81920, count: 8}\ntopology:\n  node1: nvlink-pairs\n"))
	if err != nil {
		t.Fatal(err)
	}
	cards, err := f.Cards("node1")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cards {
		if c.NUMA != i/4 {
			t.Errorf("card %d: NUMA %d, want %d (4 cards per socket)", i, c.NUMA, i/4)
		}
	}
}

// The simulated NVML answers as NVML does past a card's links, and NOT_SUPPORTED without a topology.
func TestLinkCallsAnswerAsNVML(t *testing.T) {
	for _, tc := range []struct {
		topology string
		link     int
		want     nvml.Return
	}{
		{"topology:\n  node1: nvswitch\n", 11, nvml.SUCCESS},
		{"topology:\n  node1: nvswitch\n", 12, nvml.ERROR_INVALID_ARGUMENT}, // 12 links: 0..11
		{"topology:\n  node1: nvlink-pairs\n", 4, nvml.ERROR_INVALID_ARGUMENT},
		{"topology:\n  node1: pcie-switches\n", 0, nvml.ERROR_NOT_SUPPORTED},
		{"", 0, nvml.ERROR_NOT_SUPPORTED},
	} {
		f, err := sim.Parse([]byte("nodes:\n  node1:\n    - {model: A100, memoryMiB: 81920, count: 2}\n" + tc.topology))
		if err != nil {
			t.Fatal(err)
		}
		cards, err := f.Cards("node1")
		if err != nil {
			t.Fatal(err)
		}
		srv := sim.New(cards)
		d, _ := srv.DeviceGetHandleByIndex(0)
		if _, ret := d.GetNvLinkState(tc.link); ret != tc.want {
			t.Errorf("%q link %d: %v, want %v", tc.topology, tc.link, ret, tc.want)
		}
		other, _ := srv.DeviceGetHandleByIndex(1)
		_, ret := d.GetTopologyCommonAncestor(other)
		if want := map[bool]nvml.Return{true: nvml.ERROR_NOT_SUPPORTED, false: nvml.SUCCESS}[tc.topology == ""]; ret != want {
			t.Errorf("%q: common ancestor %v, want %v", tc.topology, ret, want)
		}
	}
}
