package deviceplugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

// A card in MIG mode is published unhealthy with its mig field: mode enabled and its instances
// while the mode is in force (each healthy unless it or its card has a fault), mode enabling and no
// instances while it is pending. Instances the inventory cannot carry are left out rather than
// making the node's inventory invalid. The inventory survives its encoding.
func TestInventoryOfMIGCards(t *testing.T) {
	sound := nvidia.MIGInstance{UUID: "MIG-a1", Profile: "3g.40gb", GI: 1, CI: 0, Start: 0, Size: 4, MemoryMiB: 40960, SMs: 42}
	cards := []nvidia.Card{
		{UUID: "GPU-a", Index: 0, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: 0, MIG: nvidia.MIGMode{Current: true, Pending: true},
			Instances: []nvidia.MIGInstance{
				sound,
				// Described, then faulty (a duplicate, an XID at discovery…): listed unhealthy.
				{UUID: "MIG-a2", Profile: "1g.10gb+me", GI: 7, CI: 0, Start: 6, Size: 1, MemoryMiB: 10240, SMs: 14, Fault: "something"},
				// NVML told its UUID, not its profile: not servable, left out.
				{UUID: "MIG-a3", GI: 8, Fault: "get attributes of MIG-a3: ERROR_UNKNOWN"},
				{UUID: "MIG-a4", GI: 9, Start: 7, Size: 1, MemoryMiB: 9856, SMs: 14, Fault: "GPU instance 9 of GPU-a (for MIG-a4) has profile ID 77, which the card does not list"},
				// No UUID: left out.
				{Fault: "get handle of MIG device 3 of GPU-a: ERROR_UNKNOWN"},
			}},
		// A faulty card's instances are all unhealthy.
		{UUID: "GPU-b", Index: 1, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: 1, Fault: "temperature", MIG: nvidia.MIGMode{Current: true},
			Instances: []nvidia.MIGInstance{{UUID: "MIG-b1", Profile: "7g.80gb", GI: 0, CI: 0, Start: 0, Size: 8, MemoryMiB: 81920, SMs: 98}}},
		{UUID: "GPU-c", Index: 2, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: 1, MIG: nvidia.MIGMode{Pending: true}},
		{UUID: "GPU-d", Index: 3, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, NUMA: 1},
	}
	inv := newDeviceTable(cards, 1).inventory()
	s, err := annotations.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := annotations.DecodeInventory(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []annotations.GPU{
		{UUID: "GPU-a", Index: 0, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: 0, Shares: 1, MIG: &annotations.MIG{Mode: annotations.MIGEnabled,
			Instances: []annotations.MIGInstance{
				{UUID: "MIG-a1", Profile: "3g.40gb", GI: 1, CI: 0, Start: 0, Size: 4, MemoryMiB: 40960, SMs: 42, Healthy: true},
				{UUID: "MIG-a2", Profile: "1g.10gb+me", GI: 7, CI: 0, Start: 6, Size: 1, MemoryMiB: 10240, SMs: 14},
			}}},
		{UUID: "GPU-b", Index: 1, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: 1, Shares: 1, MIG: &annotations.MIG{Mode: annotations.MIGEnabled,
			Instances: []annotations.MIGInstance{{UUID: "MIG-b1", Profile: "7g.80gb", Size: 8, MemoryMiB: 81920, SMs: 98}}}},
		{UUID: "GPU-c", Index: 2, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: 1, Shares: 1, MIG: &annotations.MIG{Mode: annotations.MIGEnabling}},
		{UUID: "GPU-d", Index: 3, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, NUMA: 1, Healthy: true, Shares: 1},
	}
	if diff := cmp.Diff(want, got.GPUs); diff != "" {
		t.Errorf("inventory (-want +got):\n%s", diff)
	}
}

// The test bed's MIG node, from the simulation file through discovery to the inventory.
func TestInventoryOfSimulatedMIGNode(t *testing.T) {
	f, err := sim.Parse([]byte(`nodes:
  node1:
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled, instances: [{profile: 1g.10gb, count: 7}]}}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 1, mig: {current: enabled, instances: [{profile: 3g.40gb}, {profile: 2g.20gb}, {profile: 1g.10gb, uuid: "MIG-5c6d", healthy: false}]}}
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
	s, err := annotations.EncodeInventory(newDeviceTable(found, 1).inventory())
	if err != nil {
		t.Fatal(err)
	}
	inv, err := annotations.DecodeInventory(s)
	if err != nil {
		t.Fatal(err)
	}
	type short struct {
		Profile     string
		Start, Size int
	}
	var got [][]short
	for _, g := range inv.GPUs {
		if g.Healthy || g.MIG == nil || g.MIG.Mode != annotations.MIGEnabled {
			t.Errorf("card %s: healthy %v, mig %+v; want unhealthy, mig enabled", g.UUID, g.Healthy, g.MIG)
			continue
		}
		var s []short
		for _, in := range g.MIG.Instances {
			// Healthy at discovery: the health watcher reports MIG-5c6d, as for cards.
			if !in.Healthy {
				t.Errorf("instance %s unhealthy in the first inventory", in.UUID)
			}
			s = append(s, short{in.Profile, in.Start, in.Size})
		}
		got = append(got, s)
	}
	want := [][]short{
		{{"1g.10gb", 0, 1}, {"1g.10gb", 1, 1}, {"1g.10gb", 2, 1}, {"1g.10gb", 3, 1}, {"1g.10gb", 4, 1}, {"1g.10gb", 5, 1}, {"1g.10gb", 6, 1}},
		{{"3g.40gb", 0, 4}, {"2g.20gb", 4, 2}, {"1g.10gb", 6, 1}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("instances (-want +got):\n%s", diff)
	}
}
