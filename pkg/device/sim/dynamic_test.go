package sim_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

// The three modelled cards, as NVML names them and with the memory it reports.
var dynamicModels = []struct {
	name      string
	model     string
	memoryMiB int64
}{
	{"A100-40GB", "NVIDIA A100-SXM4-40GB", 40960},
	{"A100-80GB", "NVIDIA A100-SXM4-80GB", 81920},
	{"H100-80GB", "NVIDIA H100 80GB HBM3", 81920},
}

// migCard is one simulated card of model in MIG mode (or with MIG off).
func migCard(model string, memoryMiB int64, on bool) sim.Card {
	return sim.Card{UUID: "GPU-dyn", Model: model, MemoryMiB: memoryMiB, NUMA: -1, Healthy: true, MIG: &nvidia.MIGMode{Current: on, Pending: on}}
}

func handle(t *testing.T, srv *sim.Server) nvml.Device {
	t.Helper()
	d, ret := srv.DeviceGetHandleByUUID("GPU-dyn")
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return d
}

// GetGpuInstancePossiblePlacements answers every legal placement of each profile of the model (the
// MIG user guide's -lgipp listing), whatever the card holds and even with MIG mode off.
func TestPossiblePlacementsAreTheModelsForEachCard(t *testing.T) {
	// The listing's seven profiles, in NVML's profile index order (1g, 2g, 3g, 4g, 7g, then 1g+me
	// and 1g with two slices, REV1 and REV2).
	type p = nvidia.MIGProfile
	forty := []p{
		{Name: "1g.5gb", ID: 19, Slices: 1, Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
		{Name: "2g.10gb", ID: 14, Slices: 2, Size: 2, Starts: []int{0, 2, 4}},
		{Name: "3g.20gb", ID: 9, Slices: 3, Size: 4, Starts: []int{0, 4}},
		{Name: "4g.20gb", ID: 5, Slices: 4, Size: 4, Starts: []int{0}},
		{Name: "7g.40gb", ID: 0, Slices: 7, Size: 8, Starts: []int{0}},
		{Name: "1g.5gb+me", ID: 20, Slices: 1, Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
		{Name: "1g.10gb", ID: 15, Slices: 1, Size: 2, Starts: []int{0, 2, 4, 6}},
	}
	eighty := []p{
		{Name: "1g.10gb", ID: 19, Slices: 1, Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
		{Name: "2g.20gb", ID: 14, Slices: 2, Size: 2, Starts: []int{0, 2, 4}},
		{Name: "3g.40gb", ID: 9, Slices: 3, Size: 4, Starts: []int{0, 4}},
		{Name: "4g.40gb", ID: 5, Slices: 4, Size: 4, Starts: []int{0}},
		{Name: "7g.80gb", ID: 0, Slices: 7, Size: 8, Starts: []int{0}},
		{Name: "1g.10gb+me", ID: 20, Slices: 1, Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
		{Name: "1g.20gb", ID: 15, Slices: 1, Size: 2, Starts: []int{0, 2, 4, 6}},
	}
	want := map[string][]p{"A100-40GB": forty, "A100-80GB": eighty, "H100-80GB": eighty}
	for _, m := range dynamicModels {
		for _, on := range []bool{true, false} {
			t.Run(m.name, func(t *testing.T) {
				c := migCard(m.model, m.memoryMiB, on)
				srv := sim.New([]sim.Card{c})
				got, err := nvidia.MIGProfiles(handle(t, srv), nvidia.Card{UUID: c.UUID, MemoryMiB: c.MemoryMiB})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want[m.name], got, cmpopts.IgnoreFields(nvidia.MIGProfile{}, "Index")); diff != "" {
					t.Errorf("profiles (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// A card pkg/migplace does not model answers no placements; nor does a card without MIG.
func TestPossiblePlacementsNotSupportedOffModel(t *testing.T) {
	for _, c := range []sim.Card{
		migCard("NVIDIA H100 NVL", 95830, true),
		{UUID: "GPU-dyn", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: -1, Healthy: true},
	} {
		srv := sim.New([]sim.Card{c})
		d := handle(t, srv)
		if _, ret := d.GetGpuInstancePossiblePlacements(&nvml.GpuInstanceProfileInfo{Id: 19}); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s: placements answered %v, want NOT_SUPPORTED", c.Model, ret)
		}
	}
}

// CreateGpuInstanceWithPlacement refuses as a real card does: an illegal start is INVALID_ARGUMENT,
// an overlap or a profile at its most instances INSUFFICIENT_RESOURCES; destroying frees the slices.
func TestCreateWithPlacementRefusesLikeNVML(t *testing.T) {
	type create struct {
		profile string
		start   int
		want    nvml.Return
	}
	// Profile names per model: small (1 slice, 1g), me (1g+me), half (3g, 4 slices), four (4g), whole.
	names := map[string][5]string{
		"A100-40GB": {"1g.5gb", "1g.5gb+me", "3g.20gb", "4g.20gb", "7g.40gb"},
		"A100-80GB": {"1g.10gb", "1g.10gb+me", "3g.40gb", "4g.40gb", "7g.80gb"},
		"H100-80GB": {"1g.10gb", "1g.10gb+me", "3g.40gb", "4g.40gb", "7g.80gb"},
	}
	for _, m := range dynamicModels {
		n := names[m.name]
		small, me, half, four, whole := n[0], n[1], n[2], n[3], n[4]
		cases := []struct {
			name  string
			steps []create
		}{
			{"3g at 4 then 4g at 0 fill the card", []create{
				{half, 4, nvml.SUCCESS},                       // slices 4-7, 3 compute
				{four, 0, nvml.SUCCESS},                       // slices 0-3, 4 compute: 7 of 7
				{small, 0, nvml.ERROR_INSUFFICIENT_RESOURCES}, // slice 0 is the 4g's
				{small, 6, nvml.ERROR_INSUFFICIENT_RESOURCES}, // slice 6 is the 3g's
			}},
			{"an illegal start is an invalid argument", []create{
				{half, 2, nvml.ERROR_INVALID_ARGUMENT},  // 3g starts at 0 or 4
				{four, 4, nvml.ERROR_INVALID_ARGUMENT},  // 4g only at 0
				{small, 7, nvml.ERROR_INVALID_ARGUMENT}, // 1g of one slice at 0-6
				{whole, 0, nvml.SUCCESS},
			}},
			{"the whole card leaves no room", []create{
				{whole, 0, nvml.SUCCESS},
				{small, 3, nvml.ERROR_INSUFFICIENT_RESOURCES},
				{whole, 0, nvml.ERROR_INSUFFICIENT_RESOURCES},
			}},
			{"one +me per card", []create{
				{me, 0, nvml.SUCCESS},
				{me, 1, nvml.ERROR_INSUFFICIENT_RESOURCES}, // MaxCount 1
				{small, 1, nvml.SUCCESS},
			}},
			{"seven 1g, one per slice 0-6", []create{
				{small, 0, nvml.SUCCESS}, {small, 1, nvml.SUCCESS}, {small, 2, nvml.SUCCESS}, {small, 3, nvml.SUCCESS},
				{small, 4, nvml.SUCCESS}, {small, 5, nvml.SUCCESS}, {small, 6, nvml.SUCCESS},
				{small, 6, nvml.ERROR_INSUFFICIENT_RESOURCES},
			}},
		}
		for _, tc := range cases {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				srv := sim.New([]sim.Card{migCard(m.model, m.memoryMiB, true)})
				d := handle(t, srv)
				for k, s := range tc.steps {
					_, ret := createGI(t, d, s.profile, s.start, m.memoryMiB)
					if ret != s.want {
						t.Errorf("step %d: create %s at %d: %v, want %v", k, s.profile, s.start, ret, s.want)
					}
				}
			})
		}
	}
}

// createGI creates a GPU instance of the named profile at start through the raw NVML calls.
func createGI(t *testing.T, d nvml.Device, profile string, start int, memoryMiB int64) (nvml.GpuInstance, nvml.Return) {
	t.Helper()
	profiles, err := nvidia.MIGProfiles(d, nvidia.Card{UUID: "GPU-dyn", MemoryMiB: memoryMiB})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range profiles {
		if p.Name != profile {
			continue
		}
		info, ret := d.GetGpuInstanceProfileInfo(p.Index)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		return d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(p.Size)})
	}
	t.Fatalf("no profile %s", profile)
	return nil, nvml.ERROR_UNKNOWN
}

// With MIG mode off (or only pending) nothing is created.
func TestCreateWithPlacementNeedsMIGMode(t *testing.T) {
	srv := sim.New([]sim.Card{migCard("NVIDIA A100-SXM4-80GB", 81920, false)})
	d := handle(t, srv)
	info := nvml.GpuInstanceProfileInfo{Id: 9}
	if _, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 4, Size: 4}); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("create with MIG off: %v, want NOT_SUPPORTED", ret)
	}
}

// A GPU instance with its compute instance is a MIG device discovery lists; destroying goes compute
// instance first (the GPU instance is IN_USE before), a handle destroyed twice is an invalid
// argument, and the freed slices take a new instance.
func TestCreateComputeInstanceAndDestroyLikeNVML(t *testing.T) {
	for _, m := range dynamicModels {
		t.Run(m.name, func(t *testing.T) {
			card := migCard(m.model, m.memoryMiB, true)
			srv := sim.New([]sim.Card{card})
			d := handle(t, srv)
			half := map[string]string{"A100-40GB": "3g.20gb"}[m.name]
			if half == "" {
				half = "3g.40gb"
			}
			gi, ret := createGI(t, d, half, 4, m.memoryMiB)
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			ciInfo, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			ci, ret := gi.CreateComputeInstance(&ciInfo)
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
				t.Errorf("a second whole compute instance: %v, want INSUFFICIENT_RESOURCES", ret)
			}
			cards, err := nvidia.Discover(srv, srv.NUMA)
			if err != nil {
				t.Fatal(err)
			}
			want := []nvidia.MIGInstance{{Profile: half, GI: 1, CI: 0, Start: 4, Size: 4, MemoryMiB: m.memoryMiB / 2, SMs: 3 * sim.SMsPerSlice}}
			if diff := cmp.Diff(want, cards[0].Instances, cmpopts.IgnoreFields(nvidia.MIGInstance{}, "UUID")); diff != "" {
				t.Errorf("discovered (-want +got):\n%s", diff)
			}
			if u := cards[0].Instances[0].UUID; len(u) < 5 || u[:4] != "MIG-" {
				t.Errorf("UUID %q is not a MIG UUID", u)
			}
			for _, s := range []struct {
				what string
				call func() nvml.Return
				want nvml.Return
			}{
				{"GPU instance with its compute instance", gi.Destroy, nvml.ERROR_IN_USE},
				{"compute instance", ci.Destroy, nvml.SUCCESS},
				{"compute instance again", ci.Destroy, nvml.ERROR_INVALID_ARGUMENT},
				{"GPU instance", gi.Destroy, nvml.SUCCESS},
				{"GPU instance again", gi.Destroy, nvml.ERROR_INVALID_ARGUMENT},
			} {
				if ret := s.call(); ret != s.want {
					t.Errorf("destroy %s: %v, want %v", s.what, ret, s.want)
				}
			}
			cards, err = nvidia.Discover(srv, srv.NUMA)
			if err != nil {
				t.Fatal(err)
			}
			if len(cards[0].Instances) != 0 {
				t.Errorf("after destroy, discovery lists %v", cards[0].Instances)
			}
			if _, ret := createGI(t, d, half, 4, m.memoryMiB); ret != nvml.SUCCESS {
				t.Errorf("create at the freed placement: %v", ret)
			}
		})
	}
}

// A file's instance is a GPU instance like a created one: its slices are held, and it goes only
// after its compute instance.
func TestFileInstancesHoldTheirSlices(t *testing.T) {
	f, err := sim.Parse([]byte(`nodes:
  node1:
    - {model: NVIDIA A100-SXM4-80GB, memoryMiB: 81920, mig: {current: enabled, instances: [{profile: 3g.40gb}]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	cards, err := f.Cards("node1")
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.New(cards)
	d, _ := srv.DeviceGetHandleByIndex(0)
	// The file's 3g.40gb is first-fit at slices 0-3.
	profiles, err := nvidia.MIGProfiles(d, nvidia.Card{UUID: cards[0].UUID, MemoryMiB: 81920})
	if err != nil {
		t.Fatal(err)
	}
	var four nvml.GpuInstanceProfileInfo
	for _, p := range profiles {
		if p.Name == "4g.40gb" {
			four, _ = d.GetGpuInstanceProfileInfo(p.Index)
		}
	}
	if _, ret := d.CreateGpuInstanceWithPlacement(&four, &nvml.GpuInstancePlacement{Start: 0, Size: 4}); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("4g over the file's 3g: %v, want INSUFFICIENT_RESOURCES", ret)
	}
	gi, ret := d.GetGpuInstanceById(1)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroy the file's GPU instance with its compute instance: %v, want IN_USE", ret)
	}
}
