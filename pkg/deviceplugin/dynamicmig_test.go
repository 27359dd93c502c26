package deviceplugin

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
)

// With an allow-list, an A100-80GB in MIG mode publishes the allowed profiles it has, each with
// every legal start (the user guide's -lgipp listing), whatever its instances hold; the instances
// still say what is occupied. A profile of another card (2g.10gb is a 40 GB name) is not listed,
// and neither is a card whose MIG mode is only pending, nor one without MIG. The inventory decodes.
func TestInventoryPublishesDynamicProfilesOfA100_80GB(t *testing.T) {
	srv, found := discoverSim(t, `nodes:
  node1:
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled, instances: [{profile: 3g.40gb, uuid: MIG-held}]}}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: disabled, pending: enabled}}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 1}
`)
	allow := []string{"7g.80gb", "1g.10gb", "2g.10gb", "3g.40gb", "1g.10gb+me", "1g.20gb"}
	if err := validDynamicProfiles(allow); err != nil {
		t.Fatal(err)
	}
	found, err := withDynamicMIG(srv, found, allow, logr.Discard())
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
	want := &annotations.MIG{Mode: annotations.MIGEnabled, DynamicV: annotations.MIGDynamicVersion,
		// The file's 3g.40gb is first-fit at 0-3: the one occupied placement.
		Instances: []annotations.MIGInstance{{UUID: "MIG-held", Profile: "3g.40gb", GI: 1, Start: 0, Size: 4, MemoryMiB: 40960, SMs: 42, Healthy: true}},
		// In the allow-list's order; 2g.10gb is not an 80 GB card's.
		Dynamic: []annotations.MIGDynamicProfile{
			{Profile: "7g.80gb", Size: 8, Starts: []int{0}},
			{Profile: "1g.10gb", Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
			{Profile: "3g.40gb", Size: 4, Starts: []int{0, 4}},
			{Profile: "1g.10gb+me", Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
			{Profile: "1g.20gb", Size: 2, Starts: []int{0, 2, 4, 6}},
		}}
	if diff := cmp.Diff(want, inv.GPUs[0].MIG); diff != "" {
		t.Errorf("card 0 mig (-want +got):\n%s", diff)
	}
	if m := inv.GPUs[1].MIG; m == nil || m.Mode != annotations.MIGEnabling || m.Dynamic != nil {
		t.Errorf("card 1 (MIG pending) mig = %+v, want mode enabling and no dynamic profiles", m)
	}
	if inv.GPUs[2].MIG != nil {
		t.Errorf("card 2 (no MIG) mig = %+v, want none", inv.GPUs[2].MIG)
	}
}

// Without an allow-list nothing dynamic is published (static MIG as before).
func TestInventoryWithoutAllowListHasNoDynamicProfiles(t *testing.T) {
	cards := []nvidia.Card{{UUID: "GPU-a", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, MIG: nvidia.MIGMode{Current: true, Pending: true}}}
	if m := newDeviceTable(cards, 1).inventory().GPUs[0].MIG; m.DynamicV != 0 || m.Dynamic != nil {
		t.Errorf("mig = %+v, want no dynamic profiles", m)
	}
}

// What NVML reports that the contract cannot carry is left out, not published invalid.
func TestMIGDynamicLeavesOutWhatTheContractRefuses(t *testing.T) {
	c := nvidia.Card{UUID: "GPU-a", MIG: nvidia.MIGMode{Current: true}, Profiles: []nvidia.MIGProfile{
		{Name: "3g.40gb", Size: 4, Starts: []int{0, 4}},
		{Name: "3g.40gb", Size: 4, Starts: []int{0}},    // a repeat
		{Name: "1c.3g.40gb", Size: 4, Starts: []int{0}}, // a compute instance profile
		{Name: "4g.40gb", Size: 4, Starts: []int{62}},   // beyond 64 slices
		{Name: "2g.20gb", Size: 2},                      // no start
		{Name: "7g.80gb", Size: 8, Starts: []int{0, 0}}, // repeats dropped
		{Name: "1g.10gb", Size: 1, Starts: []int{3, 1}}, // not ascending
	}}
	want := []annotations.MIGDynamicProfile{{Profile: "3g.40gb", Size: 4, Starts: []int{0, 4}}, {Profile: "7g.80gb", Size: 8, Starts: []int{0}}}
	if diff := cmp.Diff(want, migDynamic(c)); diff != "" {
		t.Errorf("dynamic (-want +got):\n%s", diff)
	}
}

func TestDynamicProfilesFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		allow   []string
		wantErr string
	}{
		{allow: nil},
		{allow: []string{"1g.10gb", "3g.40gb", "1g.10gb+me"}},
		{allow: []string{"1c.3g.40gb"}, wantErr: "not a GPU instance profile"},
		{allow: []string{"3g"}, wantErr: "not a GPU instance profile"},
		{allow: []string{"1g.10gb+me", "1g.10gb.me"}, wantErr: "not a GPU instance profile"},
		{allow: []string{"3g.40gb", "3g.40gb"}, wantErr: "twice"},
	} {
		err := validDynamicProfiles(tc.allow)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.allow, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: error %v, want one saying %q", tc.allow, err, tc.wantErr)
		}
	}
	cfg := DefaultConfig()
	cfg.NodeName = "n"
	cfg.MIGDynamicProfiles = []string{"3g.40gb", "3g.40gb"}
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("Config.validate: %v, want the allow-list refused", err)
	}
}
