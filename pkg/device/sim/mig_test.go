package sim_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

// The profiles of the file come back from discovery under the same names, with the placement the
// file's order gives (first-fit, each at a multiple of its size), the profile's memory and SMs
// unless overridden, GPU instance IDs from 1 in file order.
func TestMIGInstancesRoundTripThroughDiscovery(t *testing.T) {
	f, err := sim.Parse([]byte(`nodes:
  node1:
    - {model: A100, memoryMiB: 81920, mig: {current: enabled, instances: [{profile: 3g.40gb}, {profile: 1c.2g.20gb}, {profile: 1g.20gb, memoryMiB: 20000, sms: 16}]}}
    - {model: A100, memoryMiB: 40960, mig: {current: enabled, pending: disabled, instances: [{profile: 7g.40gb, uuid: MIG-whole}]}}
    - {model: A100, memoryMiB: 81920, mig: {current: enabled, instances: [{profile: 4g.40gb+gfx}, {profile: 1g.10gb-me}, {profile: 1g.10gb+me.all, count: 2}]}}
    - {model: A100, memoryMiB: 81920, mig: {current: enabled, instances: [{profile: 1g.10gb+me}]}}
    - {model: H100 NVL, memoryMiB: 95830, mig: {current: enabled, instances: [{profile: 1g.12gb}, {profile: 3g.47gb}]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	cards, err := f.Cards("node1")
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.New(cards)
	got, err := nvidia.Discover(srv, srv.NUMA)
	if err != nil {
		t.Fatal(err)
	}
	u := func(card, k int) string { return sim.DerivedMIGUUID("node1", card, k) }
	want := [][]nvidia.MIGInstance{
		{
			// 3g.40gb: 4 eighths of the card, slices 0-3; 14 SMs × 3.
			{UUID: u(0, 0), Profile: "3g.40gb", GI: 1, Start: 0, Size: 4, MemoryMiB: 40960, SMs: 42},
			// A 2g GPU instance with a 1-slice compute instance: 14 SMs.
			{UUID: u(0, 1), Profile: "1c.2g.20gb", GI: 2, Start: 4, Size: 2, MemoryMiB: 20480, SMs: 14},
			// 1g with two eighths (NVML's REV2 profile): slices 6-7; memory and SMs overridden.
			{UUID: u(0, 2), Profile: "1g.20gb", GI: 3, Start: 6, Size: 2, MemoryMiB: 20000, SMs: 16},
		},
		{{UUID: "MIG-whole", Profile: "7g.40gb", GI: 1, Start: 0, Size: 8, MemoryMiB: 40960, SMs: 98}},
		{
			{UUID: u(2, 0), Profile: "4g.40gb+gfx", GI: 1, Start: 0, Size: 4, MemoryMiB: 40960, SMs: 56},
			{UUID: u(2, 1), Profile: "1g.10gb-me", GI: 2, Start: 4, Size: 1, MemoryMiB: 10240, SMs: 14},
			{UUID: u(2, 2), Profile: "1g.10gb+me.all", GI: 3, Start: 5, Size: 1, MemoryMiB: 10240, SMs: 14},
			{UUID: u(2, 3), Profile: "1g.10gb+me.all", GI: 4, Start: 6, Size: 1, MemoryMiB: 10240, SMs: 14},
		},
		{{UUID: u(3, 0), Profile: "1g.10gb+me", GI: 1, Start: 0, Size: 1, MemoryMiB: 10240, SMs: 14}},
		{
			// 94 GB: one eighth is 11.75 GB, named 12gb; four are 47gb.
			{UUID: u(4, 0), Profile: "1g.12gb", GI: 1, Start: 0, Size: 1, MemoryMiB: 12288, SMs: 14},
			{UUID: u(4, 1), Profile: "3g.47gb", GI: 2, Start: 4, Size: 4, MemoryMiB: 48128, SMs: 42},
		},
	}
	var have [][]nvidia.MIGInstance
	for _, c := range got {
		have = append(have, c.Instances)
	}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("instances (-want +got):\n%s", diff)
	}
}

func TestMIGParseErrors(t *testing.T) {
	card := func(mig string) string {
		return `nodes: {node1: [{model: T4, memoryMiB: 15360}, {model: A100, memoryMiB: 81920, mig: ` + mig + `}]}`
	}
	const at = "simulation file: nodes.node1[1].mig.instances"
	for _, tc := range []struct{ name, in, want string }{
		{"mode disabled", card(`{current: disabled, pending: enabled, instances: [{profile: 1g.10gb}]}`), at + ": a card has MIG instances only with mig.current enabled"},
		{"no profile", card(`{current: enabled, instances: [{count: 2}]}`), at + `[0].profile: "" is not a MIG profile`},
		{"bad syntax", card(`{current: enabled, instances: [{profile: 1g.10gb}, {profile: 1g.10}]}`), at + `[1].profile: "1g.10" is not a MIG profile`},
		{"unknown attribute", card(`{current: enabled, instances: [{profile: 1g.10gb+xx}]}`), at + `[0].profile: "1g.10gb+xx" is not a MIG profile`},
		{"size", card(`{current: enabled, instances: [{profile: 5g.50gb}]}`), at + `[0].profile: "5g.50gb": 5g is not a simulated GPU instance size`},
		{"attribute size", card(`{current: enabled, instances: [{profile: 3g.40gb+me}]}`), at + `[0].profile: "3g.40gb+me": NVML has no 3g profile with +me`},
		{"compute prefix", card(`{current: enabled, instances: [{profile: 3c.3g.40gb}]}`), at + `[0].profile: "3c.3g.40gb": a compute instance prefix names fewer slices`},
		{"memory name", card(`{current: enabled, instances: [{profile: 1g.12gb}]}`), at + `[0].profile: "1g.12gb": on a card of 81920 MiB, NVML names profiles by eighths of its memory: 10gb, 20gb, 30gb, 40gb, 50gb, 60gb, 70gb, 80gb`},
		{"two 2g sizes", card(`{current: enabled, instances: [{profile: 2g.20gb}, {profile: 2g.30gb}]}`), at + `[1].profile: "2g.30gb": the card already has 2g.20gb`},
		{"memory slices", card(`{current: enabled, instances: [{profile: 3g.40gb}, {profile: 2g.20gb}, {profile: 1g.20gb}, {profile: 1g.10gb}]}`), at + `[3].profile: instance 3 (1g.10gb, 1 memory slices) does not fit`},
		{"compute slices", card(`{current: enabled, instances: [{profile: 1g.10gb, count: 7}, {profile: 1g.10gb}]}`), at + `[1].profile: instance 7 (1g.10gb) needs 8 compute slices in all, a card has 7`},
		{"count", card(`{current: enabled, instances: [{profile: 1g.10gb, count: -1}]}`), at + `[0].count: -1 is not in 1..7`},
		{"uuid with count", card(`{current: enabled, instances: [{profile: 1g.10gb, count: 2, uuid: MIG-x}]}`), at + `[0].uuid: set, so count must be 1 (not 2)`},
		{"uuid prefix", card(`{current: enabled, instances: [{profile: 1g.10gb, uuid: GPU-x}]}`), at + `[0].uuid: "GPU-x" is not a MIG UUID`},
		{"uuid twice", card(`{current: enabled, instances: [{profile: 1g.10gb, uuid: MIG-x}, {profile: 1g.10gb, uuid: MIG-x}]}`), at + `[1].uuid: instance 1 of card 1 has UUID MIG-x, like a device of card 1`},
		{"card count with uuid", `nodes: {node1: [{model: A100, memoryMiB: 81920, count: 2, mig: {current: enabled, instances: [{profile: 1g.10gb, uuid: MIG-x}]}}]}`, `nodes.node1[0].mig.instances[0].uuid: instance 0 of card 1 has UUID MIG-x, like a device of card 0`},
		{"memory", card(`{current: enabled, instances: [{profile: 1g.10gb, memoryMiB: 90000}]}`), at + `[0].memoryMiB: 90000 is not in 0..81920`},
		{"sms", card(`{current: enabled, instances: [{profile: 1g.10gb, sms: -1}]}`), at + `[0].sms: -1 is not in 0..1024`},
		{"unknown field", card(`{current: enabled, instances: [{profile: 1g.10gb, helthy: false}]}`), `unknown field "helthy"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sim.Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A MIG instance turning unhealthy in the file raises a critical XID naming its GPU and compute
// instance, on its card's handle, and fails its memory query; healthy again, it answers.
func TestWatchAppliesMIGInstanceHealth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpus.yaml")
	write := func(healthy string) {
		t.Helper()
		replaceFile(t, path, "nodes:\n  node1:\n    - {model: A100, memoryMiB: 81920, uuid: GPU-x, mig: {current: enabled, instances: [{profile: 3g.40gb}, {profile: 2g.20gb, uuid: MIG-y, healthy: "+healthy+"}]}}\n")
	}
	write("true")
	srv := watched(t, path)
	set, _ := srv.EventSetCreate()
	d, _ := srv.DeviceGetHandleByIndex(0)
	if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	m, ret := d.GetMigDeviceHandleByIndex(1)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	write("false")
	ev, ret := set.Wait(10000)
	if ret != nvml.SUCCESS {
		t.Fatalf("no XID event: %v", ret)
	}
	want := nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: sim.XidInstanceFault, GpuInstanceId: 2, ComputeInstanceId: 0}
	if ev != want {
		t.Fatalf("event %+v, want %+v", ev, want)
	}
	if _, ret := m.GetMemoryInfo(); ret != nvml.ERROR_UNKNOWN || srv.InstanceHealthy("MIG-y") {
		t.Fatalf("memory query of the unhealthy instance: %v, want ERROR_UNKNOWN", ret)
	}
	write("true")
	deadline := time.Now().Add(10 * time.Second)
	for !srv.InstanceHealthy("MIG-y") {
		if time.Now().After(deadline) {
			t.Fatal("instance never became healthy")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, ret := m.GetMemoryInfo(); ret != nvml.SUCCESS {
		t.Fatalf("memory query of the healthy instance: %v", ret)
	}
}

// A card off the bus takes its MIG devices with it; a card whose MIG mode is no longer in force
// has none.
func TestMIGDevicesFollowTheirCard(t *testing.T) {
	f, err := sim.Parse([]byte(`nodes: {node1: [{model: A100, memoryMiB: 81920, uuid: GPU-x, mig: {current: enabled, instances: [{profile: 7g.80gb}]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cards, _ := f.Cards("node1")
	srv := sim.New(cards)
	d, _ := srv.DeviceGetHandleByIndex(0)
	m, ret := d.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if p, ret := m.GetDeviceHandleFromMigDeviceHandle(); ret != nvml.SUCCESS || p != d {
		t.Errorf("parent of the MIG device: %v, %v", p, ret)
	}
	srv.SetFault("GPU-x", sim.FaultLost)
	if _, ret := m.GetUUID(); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("UUID of a MIG device of a lost card: %v, want ERROR_GPU_IS_LOST", ret)
	}
	srv.SetFault("GPU-x", sim.FaultNone)
	srv.SetMIG("GPU-x", &nvidia.MIGMode{})
	if _, ret := d.GetMigDeviceHandleByIndex(0); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("MIG device of a card out of MIG mode: %v, want ERROR_NOT_FOUND", ret)
	}
}
