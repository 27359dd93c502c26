package nvidia_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

// migFile is the test bed's MIG node: one A100-80GB split in 7× 1g.10gb, one in 3g.40gb + 2g.20gb +
// 1g.10gb (the last with a fixed UUID, unhealthy), and a card with MIG mode pending.
const migFile = `nodes:
  node1:
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled, instances: [{profile: 1g.10gb, count: 7}]}}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 1, mig: {current: enabled, instances: [{profile: 3g.40gb}, {profile: 2g.20gb}, {profile: 1g.10gb, uuid: "MIG-5c6d", healthy: false}]}}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 1, mig: {current: disabled, pending: enabled}}
`

func migCards(t *testing.T) []sim.Card {
	t.Helper()
	f, err := sim.Parse([]byte(migFile))
	if err != nil {
		t.Fatal(err)
	}
	cards, err := f.Cards("node1")
	if err != nil {
		t.Fatal(err)
	}
	return cards
}

// Discovery on the simulated NVML finds every MIG device of the cards in MIG mode, as nvidia-smi
// lists them: UUID, GPU and compute instance, placement, profile name, memory and SMs.
func TestDiscoverMIGInstances(t *testing.T) {
	srv := sim.New(migCards(t))
	cards, err := nvidia.Discover(srv, srv.NUMA)
	if err != nil {
		t.Fatal(err)
	}
	if len(cards) != 3 {
		t.Fatalf("got %d cards, want 3", len(cards))
	}
	var want0 []nvidia.MIGInstance
	for k := 0; k < 7; k++ {
		// 1g.10gb: one memory slice each, first-fit from 0; 10×1024 MiB; 14 SMs.
		want0 = append(want0, nvidia.MIGInstance{UUID: sim.DerivedMIGUUID("node1", 0, k), Profile: "1g.10gb", GI: k + 1, CI: 0, Start: k, Size: 1, MemoryMiB: 10240, SMs: 14})
	}
	want1 := []nvidia.MIGInstance{
		{UUID: sim.DerivedMIGUUID("node1", 1, 0), Profile: "3g.40gb", GI: 1, Start: 0, Size: 4, MemoryMiB: 40960, SMs: 42},
		{UUID: sim.DerivedMIGUUID("node1", 1, 1), Profile: "2g.20gb", GI: 2, Start: 4, Size: 2, MemoryMiB: 20480, SMs: 28},
		// Unhealthy in the file: described all the same (the health watcher finds it failing).
		{UUID: "MIG-5c6d", Profile: "1g.10gb", GI: 3, Start: 6, Size: 1, MemoryMiB: 10240, SMs: 14},
	}
	if diff := cmp.Diff(want0, cards[0].Instances); diff != "" {
		t.Errorf("card 0 instances (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want1, cards[1].Instances); diff != "" {
		t.Errorf("card 1 instances (-want +got):\n%s", diff)
	}
	if cards[2].Instances != nil || !cards[2].MIG.Pending || cards[2].MIG.Current {
		t.Errorf("card 2 = %+v, want MIG pending and no instances", cards[2])
	}
	for i, c := range cards {
		if c.Fault != "" {
			t.Errorf("card %d has fault %q", i, c.Fault)
		}
	}
}

// A card whose MIG mode is only pending has no MIG device yet: discovery does not ask for any (the
// DGX A100 mock panics on a MIG device call it was not given).
func TestDiscoverMIGPendingAsksForNoInstances(t *testing.T) {
	srv := dgxa100.New()
	srv.Devices[2].(*server.Device).GetMigModeFunc = func() (int, int, nvml.Return) {
		return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
	}
	cards, err := nvidia.Discover(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := cards[2]; !c.MIG.Pending || c.Instances != nil || c.Fault != "" {
		t.Errorf("card 2 = %+v, want MIG pending, sound, no instances", c)
	}
}

// a100 is an A100-SXM4-80GB as NVML describes it (81920 MiB), with its GPU instance profiles by
// NVML profile index: IDs and memory sizes as nvidia-smi mig -lgip reports them, which are not the
// index and a little under the eighths of the card.
var a100Profiles = map[int]nvml.GpuInstanceProfileInfo{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:      {Id: 19, SliceCount: 1, MemorySizeMB: 9856},
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: {Id: 20, SliceCount: 1, MemorySizeMB: 9856},
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: {Id: 15, SliceCount: 1, MemorySizeMB: 19968},
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:      {Id: 14, SliceCount: 2, MemorySizeMB: 19968},
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      {Id: 9, SliceCount: 3, MemorySizeMB: 40192},
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:      {Id: 5, SliceCount: 4, MemorySizeMB: 40192},
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      {Id: 0, SliceCount: 7, MemorySizeMB: 80896},
}

// migSpec is one MIG device of migParent.
type migSpec struct {
	uuid       string
	gi, ci     int
	profileID  uint32
	start, sz  uint32
	c, sms     uint32
	memMiB     uint64
	handleErr  nvml.Return // GetMigDeviceHandleByIndex fails with it
	attrErr    nvml.Return // GetAttributes fails with it
	giErr      nvml.Return // GetGpuInstanceById fails with it
	memErr     nvml.Return // GetMemoryInfo fails with it
	notPresent bool        // no MIG device at this index
}

// migParent builds an A100-80GB in MIG mode whose MIG devices are specs, in index order.
func migParent(uuid string, specs []migSpec) *mock.Device {
	d := &mock.Device{}
	gis := map[int]nvml.GpuInstanceInfo{}
	for _, s := range specs {
		gis[s.gi] = nvml.GpuInstanceInfo{Device: d, Id: uint32(s.gi), ProfileId: s.profileID, Placement: nvml.GpuInstancePlacement{Start: s.start, Size: s.sz}}
	}
	d.GetUUIDFunc = func() (string, nvml.Return) { return uuid, nvml.SUCCESS }
	d.GetIndexFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return "NVIDIA A100-SXM4-80GB", nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 81920 << 20}, nvml.SUCCESS }
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.SUCCESS }
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 40, nvml.SUCCESS }
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeXidCriticalError, nvml.SUCCESS }
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return len(specs), nvml.SUCCESS }
	d.GetGpuInstanceProfileInfoFunc = func(p int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		info, ok := a100Profiles[p]
		if !ok {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return info, nvml.SUCCESS
	}
	giErrs := map[int]nvml.Return{}
	for _, s := range specs {
		if s.giErr != nvml.SUCCESS {
			giErrs[s.gi] = s.giErr
		}
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		if ret, ok := giErrs[id]; ok {
			return nil, ret
		}
		info, ok := gis[id]
		if !ok {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return &mock.GpuInstance{GetInfoFunc: func() (nvml.GpuInstanceInfo, nvml.Return) { return info, nvml.SUCCESS }}, nvml.SUCCESS
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		s := specs[i]
		switch {
		case s.notPresent:
			return nil, nvml.ERROR_NOT_FOUND
		case s.handleErr != nvml.SUCCESS:
			return nil, s.handleErr
		}
		return &mock.Device{
			GetUUIDFunc: func() (string, nvml.Return) { return s.uuid, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				if s.memErr != nvml.SUCCESS {
					return nvml.Memory{}, s.memErr
				}
				return nvml.Memory{Total: s.memMiB << 20}, nvml.SUCCESS
			},
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return s.gi, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return s.ci, nvml.SUCCESS },
			GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
				if s.attrErr != nvml.SUCCESS {
					return nvml.DeviceAttributes{}, s.attrErr
				}
				return nvml.DeviceAttributes{MemorySizeMB: s.memMiB, MultiprocessorCount: s.sms, ComputeInstanceSliceCount: s.c}, nvml.SUCCESS
			},
		}, nvml.SUCCESS
	}
	return d
}

// oneCard is an NVML with one card.
type oneCard struct {
	mock.Interface
}

func newOneCard(d nvml.Device) *oneCard {
	l := &oneCard{}
	l.InitFunc = func() nvml.Return { return nvml.SUCCESS }
	l.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	l.DeviceGetCountFunc = func() (int, nvml.Return) { return 1, nvml.SUCCESS }
	l.DeviceGetHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return d, nvml.SUCCESS }
	return l
}

// Profile names come from the GPU instance's profile (found by its ID, not its NVML index), its
// compute instance and the card's memory, as nvidia-smi prints them; a MIG device NVML cannot
// describe is listed with a fault (and its UUID when NVML told it), and the others are still
// described.
func TestDiscoverMIGProfileNamesAndFaults(t *testing.T) {
	specs := []migSpec{
		// A 3g GPU instance (profile ID 9) split in two compute instances of 1 and 2 slices.
		{uuid: "MIG-a", gi: 1, ci: 0, profileID: 9, start: 0, sz: 4, c: 1, sms: 14, memMiB: 40192},
		{uuid: "MIG-b", gi: 1, ci: 1, profileID: 9, start: 0, sz: 4, c: 2, sms: 28, memMiB: 40192},
		{notPresent: true},
		// 1g.10gb+me: profile ID 20, NVML's 1-slice REV1 profile (with the media extensions).
		{uuid: "MIG-c", gi: 13, ci: 0, profileID: 20, start: 6, sz: 1, c: 1, sms: 14, memMiB: 9856},
		// 1g.20gb: REV2, no attribute, two memory slices.
		{uuid: "MIG-d", gi: 11, ci: 0, profileID: 15, start: 4, sz: 2, c: 1, sms: 14, memMiB: 19968},
		{uuid: "MIG-e", gi: 12, attrErr: nvml.ERROR_UNKNOWN},
		{handleErr: nvml.ERROR_GPU_IS_LOST},
		// A GPU instance whose profile the card does not list.
		{uuid: "MIG-f", gi: 14, ci: 0, profileID: 77, start: 7, sz: 1, c: 1, sms: 14, memMiB: 9856},
		// A GPU instance NVML does not show this process.
		{uuid: "MIG-g", gi: 10, ci: 0, c: 1, sms: 14, memMiB: 9856, giErr: nvml.ERROR_NO_PERMISSION},
		// A UUID reported twice: the second is kept, nameless and faulty.
		{uuid: "MIG-a", gi: 1, ci: 0, profileID: 9, start: 0, sz: 4, c: 1, sms: 14, memMiB: 40192},
	}
	cards, err := nvidia.Discover(newOneCard(migParent("GPU-p", specs)), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []nvidia.MIGInstance{
		{UUID: "MIG-a", Profile: "1c.3g.40gb", GI: 1, CI: 0, Start: 0, Size: 4, MemoryMiB: 40192, SMs: 14},
		{UUID: "MIG-b", Profile: "2c.3g.40gb", GI: 1, CI: 1, Start: 0, Size: 4, MemoryMiB: 40192, SMs: 28},
		{UUID: "MIG-c", Profile: "1g.10gb+me", GI: 13, Start: 6, Size: 1, MemoryMiB: 9856, SMs: 14},
		{UUID: "MIG-d", Profile: "1g.20gb", GI: 11, Start: 4, Size: 2, MemoryMiB: 19968, SMs: 14},
		{UUID: "MIG-e", GI: 12, Fault: "get attributes of MIG-e: ERROR_UNKNOWN"},
		{Fault: "get handle of MIG device 6 of GPU-p: ERROR_GPU_IS_LOST"},
		{UUID: "MIG-f", GI: 14, Start: 7, Size: 1, MemoryMiB: 9856, SMs: 14, Fault: "GPU instance 14 of GPU-p (for MIG-f) has profile ID 77, which the card does not list"},
		{UUID: "MIG-g", GI: 10, MemoryMiB: 9856, SMs: 14, Fault: "get GPU instance 10 of GPU-p (for MIG-g): ERROR_NO_PERMISSION (NVML lets a process see GPU instances " +
			"with the MIG monitor capability: give the device plugin NVIDIA_MIG_MONITOR_DEVICES=all and the SYS_ADMIN capability, as NVIDIA's device plugin has)"},
		{Profile: "1c.3g.40gb", GI: 1, Start: 0, Size: 4, MemoryMiB: 40192, SMs: 14, Fault: "UUID MIG-a reported again (first by device 0)"},
	}
	if len(cards) != 1 {
		t.Fatalf("got %d cards, want 1", len(cards))
	}
	if diff := cmp.Diff(want, cards[0].Instances); diff != "" {
		t.Errorf("instances (-want +got):\n%s", diff)
	}
	if cards[0].Fault != "" || cards[0].UUID != "GPU-p" {
		t.Errorf("card = %+v, want GPU-p without fault (its instances' faults are theirs)", cards[0])
	}
}

// A card in MIG mode whose MIG devices NVML cannot count is the card's fault.
func TestDiscoverMIGCountFailureIsTheCardsFault(t *testing.T) {
	d := migParent("GPU-p", nil)
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	cards, err := nvidia.Discover(newOneCard(d), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cards[0].Fault != "count MIG devices of GPU-p: ERROR_UNKNOWN" || cards[0].UUID != "GPU-p" {
		t.Errorf("card = %+v, want GPU-p with the count fault", cards[0])
	}
}

func TestMIGProfileName(t *testing.T) {
	for _, tc := range []struct {
		name          string
		profile, g, c int
		mib, card     int64
		want          string
	}{
		// A100-40GB (40960 MiB): 4864 MiB is under 1/8 of 40 GB, 5gb.
		{"a100-40 1g", nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, 4864, 40960, "1g.5gb"},
		{"a100-40 7g", nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 7, 40192, 40960, "7g.40gb"},
		{"a100-80 7g", nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 0, 80896, 81920, "7g.80gb"},
		// H100 NVL (95830 MiB, 94 GB): 1/8 of 94 GB is 11.75, nvidia-smi's 1g.12gb.
		{"h100 nvl 1g", nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, 11008, 95830, "1g.12gb"},
		// H200 (143771 MiB, 141 GB): 1/8 is 17.6, 1g.18gb.
		{"h200 1g", nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, 16640, 143771, "1g.18gb"},
		{"+me", nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, 1, 9856, 81920, "1g.10gb+me"},
		{"2g +me", nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, 2, 2, 19968, 81920, "2g.20gb+me"},
		{"-me", nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, 1, 1, 9856, 81920, "1g.10gb-me"},
		{"+me.all", nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, 1, 1, 9856, 81920, "1g.10gb+me.all"},
		{"+gfx", nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX, 4, 4, 40192, 81920, "4g.40gb+gfx"},
		{"rev2", nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1, 1, 19968, 81920, "1g.20gb"},
		{"compute instance", nvml.GPU_INSTANCE_PROFILE_3_SLICE, 3, 1, 40192, 81920, "1c.3g.40gb"},
		{"compute instance +me", nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, 2, 1, 19968, 81920, "1c.2g.20gb+me"},
	} {
		if got := nvidia.MIGProfileName(tc.profile, tc.g, tc.c, tc.mib, tc.card); got != tc.want {
			t.Errorf("%s: MIGProfileName = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := nvidia.MIGMemoryGB(9856, 0); got != 0 {
		t.Errorf("MIGMemoryGB on a card of unknown memory = %d, want 0", got)
	}
}

// migHealth starts the health watcher on the MIG node: the first card events say the MIG cards
// are not served whole; the unhealthy instance of the file is then reported.
func migHealth(t *testing.T, wrap func(*sim.Server) nvidia.Library) *healthRun {
	t.Helper()
	h := startHealth(t, migCards(t), wrap)
	seen := map[string]bool{}
	for i := 0; i < 4; i++ {
		e := h.next(t)
		seen[e.UUID] = true
		if e.Healthy {
			t.Fatalf("event %+v at start, want unhealthy ones", e)
		}
		if e.UUID == "MIG-5c6d" && (e.Parent != h.cards[1].UUID || !strings.Contains(e.Reason, "memory query of MIG device MIG-5c6d failed")) {
			t.Fatalf("event %+v, want MIG-5c6d of card 1 unhealthy for its failing query", e)
		}
	}
	want := map[string]bool{h.cards[0].UUID: true, h.cards[1].UUID: true, h.cards[2].UUID: true, "MIG-5c6d": true}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Fatalf("unhealthy at start (-want +got):\n%s", diff)
	}
	return h
}

// An XID that names a GPU and compute instance marks that instance only; it recovers once its
// fault is RecoveryInterval old and it answers (its probe passes).
func TestHealthXidOnMIGInstanceMarksOnlyIt(t *testing.T) {
	lib := &chanLib{events: make(chan nvml.EventData, 1)}
	h := migHealth(t, func(s *sim.Server) nvidia.Library { lib.Server = s; return lib })
	in := h.cards[1].Instances[1] // 2g.20gb, GI 2
	d, _ := h.srv.DeviceGetHandleByIndex(1)
	lib.events <- nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: 62, GpuInstanceId: 2, ComputeInstanceId: 0}
	got := h.next(t)
	want := nvidia.HealthEvent{UUID: in.UUID, Parent: h.cards[1].UUID, Xid: 62, Reason: "critical XID 62 on GPU instance 2, compute instance 0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("instance event (-want +got):\n%s", diff)
	}
	got = h.next(t)
	want = nvidia.HealthEvent{UUID: in.UUID, Parent: h.cards[1].UUID, Healthy: true, Reason: "the instance and its card are sound again"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("recovery event (-want +got):\n%s", diff)
	}
	h.noEventFor(t, 5)
}

// The simulator's unhealthy instance fails its probe until the file says healthy again; then it
// recovers.
func TestHealthSimulatedMIGInstanceRecovers(t *testing.T) {
	h := migHealth(t, nil)
	h.noEventFor(t, 5)
	h.srv.SetInstanceHealth("MIG-5c6d", true)
	got := h.next(t)
	if got.UUID != "MIG-5c6d" || !got.Healthy || got.Parent != h.cards[1].UUID {
		t.Fatalf("event %+v, want MIG-5c6d healthy again", got)
	}
	h.noEventFor(t, 5)
}

// An XID without instance IDs is the card's: every instance of it turns unhealthy (the card itself
// is already advertised unhealthy, for its MIG mode). A reset-class one holds them until the card
// is reset; then they recover, and the card is still not reported healthy (never served whole).
func TestHealthMIGXidWithoutInstanceMarksTheCard(t *testing.T) {
	lib := &chanLib{events: make(chan nvml.EventData, 1)}
	h := migHealth(t, func(s *sim.Server) nvidia.Library { lib.Server = s; return lib })
	card := h.cards[0]
	d, _ := h.srv.DeviceGetHandleByIndex(0)
	lib.events <- nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: nvidia.NoInstance, ComputeInstanceId: nvidia.NoInstance}
	got := h.next(t)
	want := nvidia.HealthEvent{UUID: card.UUID, Xid: 79, ResetRequired: true, Reason: "critical XID 79 (needs a GPU reset)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("card event (-want +got):\n%s", diff)
	}
	for k, in := range card.Instances {
		got := h.next(t)
		want := nvidia.HealthEvent{UUID: in.UUID, Parent: card.UUID, Xid: 79, ResetRequired: true, Reason: "its card " + card.UUID + " is unhealthy: critical XID 79 (needs a GPU reset)"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("instance %d event (-want +got):\n%s", k, diff)
		}
	}
	h.noEventFor(t, 5)
	// The simulator's reset: the card falls off the bus, then answers again.
	h.srv.SetFault(card.UUID, sim.FaultLost)
	h.noEventFor(t, 2)
	h.srv.SetFault(card.UUID, sim.FaultNone)
	for range card.Instances {
		if got := h.next(t); !got.Healthy || got.Parent != card.UUID {
			t.Fatalf("event %+v, want an instance of %s healthy again", got, card.UUID)
		}
	}
	h.noEventFor(t, 5)
}

// A non-reset XID naming no instance marks the card's instances until RecoveryInterval passes; one
// naming an instance the card does not have is the card's too; a reset-class XID naming an instance
// is the card's.
func TestHealthMIGXidsOfTheCard(t *testing.T) {
	lib := &chanLib{events: make(chan nvml.EventData, 1)}
	h := migHealth(t, func(s *sim.Server) nvidia.Library { lib.Server = s; return lib })
	card := h.cards[1]
	d, _ := h.srv.DeviceGetHandleByIndex(1)
	sound := card.Instances[:2] // the third is unhealthy from the start
	for _, tc := range []struct {
		name   string
		gi, ci uint32
		reason string
	}{
		{"no instance", nvidia.NoInstance, nvidia.NoInstance, "critical XID 62"},
		{"unknown instance", 9, 0, "critical XID 62"},
	} {
		lib.events <- nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: 62, GpuInstanceId: tc.gi, ComputeInstanceId: tc.ci}
		if got := h.next(t); got.UUID != card.UUID || got.Healthy {
			t.Fatalf("%s: event %+v, want the card", tc.name, got)
		}
		for _, in := range sound {
			got := h.next(t)
			want := nvidia.HealthEvent{UUID: in.UUID, Parent: card.UUID, Xid: 62, Reason: "its card " + card.UUID + " is unhealthy: " + tc.reason}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s: instance event (-want +got):\n%s", tc.name, diff)
			}
		}
		for range sound {
			if got := h.next(t); !got.Healthy {
				t.Fatalf("%s: event %+v, want an instance recovering", tc.name, got)
			}
		}
	}
	lib.events <- nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: 94, GpuInstanceId: 1, ComputeInstanceId: 0}
	if got := h.next(t); got.UUID != card.UUID || !got.ResetRequired {
		t.Fatalf("event %+v, want the card needing a reset", got)
	}
	for range sound {
		if got := h.next(t); got.Parent != card.UUID || got.Healthy || !got.ResetRequired {
			t.Fatalf("event %+v, want an instance down with its card", got)
		}
	}
	h.noEventFor(t, 5)
}

// An XID naming a GPU instance and a compute instance marks that compute instance's MIG device
// only; one naming the GPU instance and no compute instance marks all of them.
func TestHealthMIGXidNamesAComputeInstance(t *testing.T) {
	d := migParent("GPU-p", []migSpec{
		{uuid: "MIG-a", gi: 1, ci: 0, profileID: 9, start: 0, sz: 4, c: 1, sms: 14, memMiB: 40192},
		{uuid: "MIG-b", gi: 1, ci: 1, profileID: 9, start: 0, sz: 4, c: 2, sms: 28, memMiB: 40192},
		{uuid: "MIG-c", gi: 13, ci: 0, profileID: 20, start: 6, sz: 1, c: 1, sms: 14, memMiB: 9856},
	})
	events, _, next := watchOneCard(t, d)
	if e := next(); e.UUID != "GPU-p" || e.Healthy || !strings.Contains(e.Reason, "MIG mode is enabled") {
		t.Fatalf("event %+v, want GPU-p unhealthy for its MIG mode", e)
	}
	for _, tc := range []struct {
		ci   uint32
		want []string
	}{
		{1, []string{"MIG-b"}},
		{nvidia.NoInstance, []string{"MIG-a", "MIG-b"}},
	} {
		events <- nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: 62, GpuInstanceId: 1, ComputeInstanceId: tc.ci}
		var down, up []string
		for range tc.want {
			e := next()
			if e.Healthy || e.Xid != 62 || e.Parent != "GPU-p" {
				t.Fatalf("ci %d: event %+v, want an instance of GPU-p down for XID 62", tc.ci, e)
			}
			down = append(down, e.UUID)
		}
		for range tc.want {
			e := next()
			if !e.Healthy {
				t.Fatalf("ci %d: event %+v, want an instance recovering", tc.ci, e)
			}
			up = append(up, e.UUID)
		}
		if diff := cmp.Diff(tc.want, down); diff != "" {
			t.Errorf("ci %d: instances down (-want +got):\n%s", tc.ci, diff)
		}
		if diff := cmp.Diff(tc.want, up); diff != "" {
			t.Errorf("ci %d: instances recovered (-want +got):\n%s", tc.ci, diff)
		}
	}
}

// A MIG instance NVML could not describe at discovery (its UUID known) is reported unhealthy at
// start, needing a restart, and stays so; its card's other instances are served.
func TestHealthMIGInstanceFaultyAtDiscovery(t *testing.T) {
	d := migParent("GPU-p", []migSpec{
		{uuid: "MIG-a", gi: 1, ci: 0, profileID: 9, start: 0, sz: 4, c: 3, sms: 42, memMiB: 40192},
		{uuid: "MIG-e", gi: 12, attrErr: nvml.ERROR_UNKNOWN},
	})
	_, reports, next := watchOneCard(t, d)
	if e := next(); e.UUID != "GPU-p" || e.Healthy {
		t.Fatalf("event %+v, want GPU-p unhealthy for its MIG mode", e)
	}
	want := nvidia.HealthEvent{UUID: "MIG-e", Parent: "GPU-p", ResetRequired: true,
		Reason: "not described at discovery (get attributes of MIG-e: ERROR_UNKNOWN); restart the plugin once it is fixed"}
	if diff := cmp.Diff(want, next()); diff != "" {
		t.Fatalf("instance event (-want +got):\n%s", diff)
	}
	// Five recovery intervals: it does not recover, nor does anything else change.
	select {
	case e := <-reports:
		t.Fatalf("unexpected event %+v", e)
	case <-time.After(100 * time.Millisecond):
	}
}

// watchOneCard runs WatchHealth on card d alone (discovered first) until the test ends: the test
// sends NVML events on the channel it returns, and reads the reports with next (or from reports).
func watchOneCard(t *testing.T, d *mock.Device) (chan<- nvml.EventData, <-chan nvidia.HealthEvent, func() nvidia.HealthEvent) {
	t.Helper()
	lib := newOneCard(d)
	cards, err := nvidia.Discover(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan nvml.EventData, 1)
	lib.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				select {
				case e := <-events:
					return e, nvml.SUCCESS
				case <-time.After(time.Duration(ms) * time.Millisecond):
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
		}, nvml.SUCCESS
	}
	reports := make(chan nvidia.HealthEvent, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- nvidia.WatchHealth(ctx, nvidia.HealthConfig{Lib: lib, Cards: cards, RecoveryInterval: 20 * time.Millisecond,
			WaitTimeout: 5 * time.Millisecond, Log: logr.Discard()}, func(e nvidia.HealthEvent) { reports <- e })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	next := func() nvidia.HealthEvent {
		t.Helper()
		select {
		case e := <-reports:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no health event")
			return nvidia.HealthEvent{}
		}
	}
	return events, reports, next
}

// A MIG instance whose memory use the driver cannot tell (NOT_SUPPORTED) passes its probe; one whose
// query fails otherwise does not.
func TestHealthMIGInstanceProbe(t *testing.T) {
	d := migParent("GPU-p", []migSpec{
		{uuid: "MIG-a", gi: 1, ci: 0, profileID: 9, start: 0, sz: 4, c: 3, sms: 42, memMiB: 40192, memErr: nvml.ERROR_NOT_SUPPORTED},
		{uuid: "MIG-b", gi: 2, ci: 0, profileID: 9, start: 4, sz: 4, c: 3, sms: 42, memMiB: 40192, memErr: nvml.ERROR_UNKNOWN},
	})
	_, reports, next := watchOneCard(t, d)
	if e := next(); e.UUID != "GPU-p" || e.Healthy {
		t.Fatalf("event %+v, want GPU-p unhealthy for its MIG mode", e)
	}
	want := nvidia.HealthEvent{UUID: "MIG-b", Parent: "GPU-p", Reason: "memory query of MIG device MIG-b failed: ERROR_UNKNOWN"}
	if diff := cmp.Diff(want, next()); diff != "" {
		t.Fatalf("instance event (-want +got):\n%s", diff)
	}
	select {
	case e := <-reports:
		t.Fatalf("unexpected event %+v", e)
	case <-time.After(100 * time.Millisecond):
	}
}
