package nvidia_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

// dynamicSim is a node of two A100-80GB in MIG mode (the second with a 3g.40gb at 0-3 from the
// file) and one card without MIG.
func dynamicSim(t *testing.T) (*sim.Server, []nvidia.Card) {
	t.Helper()
	f, err := sim.Parse([]byte(`nodes:
  node1:
    - {model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920, mig: {current: enabled}}
    - {model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920, mig: {current: enabled, instances: [{profile: 3g.40gb}]}}
    - {model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920}
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
	return srv, found
}

// Profiles are read for the cards in MIG mode only: every legal placement, whatever is held.
func TestDiscoverMIGProfilesOnTheSimulation(t *testing.T) {
	srv, cards := dynamicSim(t)
	failed, err := nvidia.DiscoverMIGProfiles(srv, cards)
	if err != nil || len(failed) != 0 {
		t.Fatalf("DiscoverMIGProfiles: %v, %v", failed, err)
	}
	for i, want := range []int{7, 7, 0} {
		if len(cards[i].Profiles) != want {
			t.Errorf("card %d: %d profiles, want %d", i, len(cards[i].Profiles), want)
		}
	}
	// The 3g.40gb of card 1 holds 0-3, yet both starts are listed: placements are the legal ones.
	for _, p := range cards[1].Profiles {
		if p.Name == "3g.40gb" && !cmp.Equal(p.Starts, []int{0, 4}) {
			t.Errorf("3g.40gb starts %v, want [0 4]", p.Starts)
		}
	}
}

// Create and Destroy through the simulated NVML: the new MIG device is described as discovery
// would, and NVML's refusals come back classified.
func TestMIGCreateDestroyOnTheSimulation(t *testing.T) {
	srv, cards := dynamicSim(t)
	ctl := nvidia.MIG{Lib: srv}
	in, err := ctl.Create(cards[0].UUID, "3g.40gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	want := nvidia.MIGInstance{UUID: in.UUID, Profile: "3g.40gb", GI: 1, CI: 0, Start: 4, Size: 4, MemoryMiB: 40960, SMs: 3 * sim.SMsPerSlice}
	if diff := cmp.Diff(want, in); diff != "" || !strings.HasPrefix(in.UUID, "MIG-") {
		t.Errorf("created (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		card    int
		profile string
		start   int
		want    error
	}{
		{0, "1g.10gb", 6, nvml.ERROR_INSUFFICIENT_RESOURCES}, // slice 6 is the new 3g's
		{1, "4g.40gb", 0, nvml.ERROR_INSUFFICIENT_RESOURCES}, // the file's 3g holds 0-3
		{0, "3g.40gb", 2, nvml.ERROR_INVALID_ARGUMENT},       // 3g starts at 0 or 4
		{0, "3g.40gb", -1, nvml.ERROR_INVALID_ARGUMENT},
		{0, "5g.50gb", 0, nvidia.ErrNoProfile},
		{2, "1g.10gb", 0, nvidia.ErrNoProfile}, // no MIG: no profiles
	} {
		if _, err := ctl.Create(cards[tc.card].UUID, tc.profile, tc.start); !errors.Is(err, tc.want) {
			t.Errorf("create %s at %d on card %d: %v, want %v", tc.profile, tc.start, tc.card, err, tc.want)
		}
	}
	if err := ctl.Destroy(cards[0].UUID, in.GI, in.CI); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Destroy(cards[0].UUID, in.GI, in.CI); !errors.Is(err, nvml.ERROR_NOT_FOUND) {
		t.Errorf("destroy again: %v, want NOT_FOUND", err)
	}
	if _, err := ctl.Create(cards[0].UUID, "4g.40gb", 0); err != nil {
		t.Errorf("create on the emptied card: %v", err)
	}
}

// mockParent is an A100-80GB mock with one profile (3g.40gb, ID 9) whose placements are pls.
func mockParent(pls []nvml.GpuInstancePlacement, placementsErr nvml.Return) *mock.Device {
	info := nvml.GpuInstanceProfileInfo{Id: 9, SliceCount: 3, InstanceCount: 2, MemorySizeMB: 40192}
	return &mock.Device{
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 81920 << 20}, nvml.SUCCESS },
		GetGpuInstanceProfileInfoFunc: func(p int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
			if p != nvml.GPU_INSTANCE_PROFILE_3_SLICE {
				return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
			}
			return info, nvml.SUCCESS
		},
		GetGpuInstancePossiblePlacementsFunc: func(*nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
			return pls, placementsErr
		},
	}
}

func TestMIGProfilesFromNVML(t *testing.T) {
	card := nvidia.Card{UUID: "GPU-a", MemoryMiB: 81920}
	for _, tc := range []struct {
		name    string
		pls     []nvml.GpuInstancePlacement
		ret     nvml.Return
		want    []nvidia.MIGProfile
		wantErr string
	}{
		{name: "starts sorted, repeats dropped", pls: []nvml.GpuInstancePlacement{{Start: 4, Size: 4}, {Start: 0, Size: 4}, {Start: 4, Size: 4}},
			want: []nvidia.MIGProfile{{Name: "3g.40gb", Index: nvml.GPU_INSTANCE_PROFILE_3_SLICE, ID: 9, Slices: 3, Size: 4, Starts: []int{0, 4}}}},
		{name: "not supported: left out", ret: nvml.ERROR_NOT_SUPPORTED},
		{name: "no placement: left out", pls: []nvml.GpuInstancePlacement{}},
		{name: "two sizes", pls: []nvml.GpuInstancePlacement{{Start: 0, Size: 4}, {Start: 4, Size: 2}}, wantErr: "sizes 4 and 2"},
		{name: "no permission", ret: nvml.ERROR_NO_PERMISSION, wantErr: "ERROR_NO_PERMISSION"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nvidia.MIGProfiles(mockParent(tc.pls, tc.ret), card)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("profiles (-want +got):\n%s", diff)
			}
		})
	}
}

// Create asks NVML for exactly the profile and placement named, then one compute instance of the
// whole GPU instance; when that fails the GPU instance is destroyed again.
func TestMIGCreateUndoesAGPUInstanceWithoutComputeInstance(t *testing.T) {
	d := mockParent([]nvml.GpuInstancePlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}, nvml.SUCCESS)
	gi := &mock.GpuInstance{
		GetInfoFunc: func() (nvml.GpuInstanceInfo, nvml.Return) { return nvml.GpuInstanceInfo{Id: 2}, nvml.SUCCESS },
		GetComputeInstanceProfileInfoFunc: func(int, int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
			return nvml.ComputeInstanceProfileInfo{Id: 2, SliceCount: 3}, nvml.SUCCESS
		},
		CreateComputeInstanceFunc: func(*nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		},
		DestroyFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	d.CreateGpuInstanceWithPlacementFunc = func(*nvml.GpuInstanceProfileInfo, *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		return gi, nvml.SUCCESS
	}
	lib := &mock.Interface{DeviceGetHandleByUUIDFunc: func(string) (nvml.Device, nvml.Return) { return d, nvml.SUCCESS }}
	_, err := nvidia.MIG{Lib: lib}.Create("GPU-a", "3g.40gb", 4)
	if !errors.Is(err, nvml.ERROR_INSUFFICIENT_RESOURCES) {
		t.Fatalf("error %v, want INSUFFICIENT_RESOURCES", err)
	}
	calls := d.CreateGpuInstanceWithPlacementCalls()
	if len(calls) != 1 || calls[0].GpuInstanceProfileInfo.Id != 9 || *calls[0].GpuInstancePlacement != (nvml.GpuInstancePlacement{Start: 4, Size: 4}) {
		t.Errorf("CreateGpuInstanceWithPlacement calls %+v, want profile ID 9 at 4:4", calls)
	}
	ci := gi.GetComputeInstanceProfileInfoCalls()
	if len(ci) != 1 || ci[0].N1 != nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE || ci[0].N2 != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
		t.Errorf("compute instance profile asked %+v, want 3 slices, shared engines", ci)
	}
	if len(gi.DestroyCalls()) != 1 {
		t.Errorf("GPU instance destroyed %d times, want 1", len(gi.DestroyCalls()))
	}
}

// Destroy goes compute instance first, then the GPU instance; a GPU instance still in use is
// NVML's IN_USE.
func TestMIGDestroyOrder(t *testing.T) {
	var order []string
	ci := &mock.ComputeInstance{DestroyFunc: func() nvml.Return { order = append(order, "ci"); return nvml.SUCCESS }}
	gi := &mock.GpuInstance{
		GetComputeInstanceByIdFunc: func(int) (nvml.ComputeInstance, nvml.Return) { return ci, nvml.SUCCESS },
		DestroyFunc:                func() nvml.Return { order = append(order, "gi"); return nvml.ERROR_IN_USE },
	}
	d := &mock.Device{GetGpuInstanceByIdFunc: func(int) (nvml.GpuInstance, nvml.Return) { return gi, nvml.SUCCESS }}
	lib := &mock.Interface{DeviceGetHandleByUUIDFunc: func(string) (nvml.Device, nvml.Return) { return d, nvml.SUCCESS }}
	err := nvidia.MIG{Lib: lib}.Destroy("GPU-a", 2, 0)
	if !errors.Is(err, nvml.ERROR_IN_USE) {
		t.Errorf("error %v, want IN_USE", err)
	}
	if !cmp.Equal(order, []string{"ci", "gi"}) {
		t.Errorf("destroyed %v, want [ci gi]", order)
	}
}
