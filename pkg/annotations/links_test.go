package annotations

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sampleLinksInventory is four PCIe cards on one socket with NVLink bridges 0-1 and 2-3, each pair
// below its own PCIe switch; docs/contract.md's links example.
func sampleLinksInventory() Inventory {
	inv := Inventory{}
	for i, u := range []string{uuid0, uuid1, uuid2, "GPU-9a7d3b21-4c5e-4f60-8e1a-2b3c4d5e6f71"} {
		inv.GPUs = append(inv.GPUs, GPU{UUID: u, Index: i, Model: "NVIDIA A100 80GB PCIe", MemoryMiB: 81920, NUMA: 0, Healthy: true, Shares: 1})
	}
	inv.Links = []Link{
		{A: 0, B: 1, NVLinks: 12, PCIe: PCIeSwitch},
		{A: 0, B: 2, PCIe: PCIeNUMA}, {A: 0, B: 3, PCIe: PCIeNUMA},
		{A: 1, B: 2, PCIe: PCIeNUMA}, {A: 1, B: 3, PCIe: PCIeNUMA},
		{A: 2, B: 3, NVLinks: 12, PCIe: PCIeSwitch},
	}
	return inv
}

func TestLinksInventoryRoundTrip(t *testing.T) {
	in := sampleLinksInventory()
	in.Links = append(in.Links[:5:5], Link{A: 2, B: 3, NVLinks: 18, NVSwitch: true, PCIe: PCIeSystem})
	s, err := EncodeInventory(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeInventory(s)
	if err != nil {
		t.Fatal(err)
	}
	in.V = Version
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// A pair with nothing but its PCIe level writes no NVLink fields; an inventory without links no
	// links field.
	if !strings.Contains(s, `{"a":0,"b":2,"pcie":"numa"}`) {
		t.Errorf("encoding %s does not write pair 0-2 compactly", s)
	}
	plain, err := EncodeInventory(sampleInventory())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain, "links") {
		t.Errorf("an inventory without links writes %s", plain)
	}
}

func TestLinksValidationNamesTheFieldAndValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		link Link
		want string
	}{
		{"a after b", Link{A: 2, B: 1}, "links[1]: cards a 2, b 1: want 0 <= a < b < 4"},
		{"a equals b", Link{A: 1, B: 1}, "links[1]: cards a 1, b 1"},
		{"negative a", Link{A: -1, B: 1}, "links[1]: cards a -1, b 1"},
		{"b past the cards", Link{A: 0, B: 4}, "links[1]: cards a 0, b 4: want 0 <= a < b < 4"},
		{"pair twice", Link{A: 0, B: 1, PCIe: PCIeSystem}, "links[1]: pair 0-1 appears twice"},
		{"negative nvlinks", Link{A: 1, B: 2, NVLinks: -1}, "links[1].nvlinks: -1 is not in 0..64"},
		{"too many nvlinks", Link{A: 1, B: 2, NVLinks: 65}, "links[1].nvlinks: 65 is not in 0..64"},
		{"nvswitch without nvlinks", Link{A: 1, B: 2, NVSwitch: true}, "links[1]: nvswitch without nvlinks"},
		{"unknown level", Link{A: 1, B: 2, PCIe: "bridge"}, `links[1].pcie: "bridge" is not one of board, switch, switches, host-bridge, numa, system`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := sampleLinksInventory()
			inv.Links = []Link{inv.Links[0], tc.link}
			s, err := EncodeInventory(inv)
			if err == nil {
				_, err = DecodeInventory(s)
			}
			if err == nil || !strings.HasPrefix(err.Error(), GPUInventory+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s and containing %q", err, GPUInventory, tc.want)
			}
		})
	}
}

func TestGPULinkAnnotation(t *testing.T) {
	for _, tc := range []struct {
		value, want, err string
	}{
		{"nvlink", LinkNVLink, ""},
		{" NVLink ", LinkNVLink, ""}, // case and spaces, as for policies
		{"", "", ""},
		{"pcie", "", `cardinal.io/gpu-link: "pcie" is not a link requirement (known: nvlink)`},
	} {
		s, err := ParseSelector(map[string]string{GPULink: tc.value})
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.value, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.value, err, tc.err)
		case tc.err == "" && s.Link != tc.want:
			t.Errorf("%q: Link %q, want %q", tc.value, s.Link, tc.want)
		}
	}
}

// FuzzGPULink: any value of cardinal.io/gpu-link is either a known requirement, which reads back
// the same, or an error naming the annotation.
func FuzzGPULink(f *testing.F) {
	for _, s := range []string{"nvlink", " NVLINK ", "", "pcie", "nvlink,pcie", "nvswitch", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		s, err := ParseSelector(map[string]string{GPULink: v})
		if err != nil {
			checkKey(t, err, GPULink+": ")
			return
		}
		if s.Link != "" && s.Link != LinkNVLink {
			t.Fatalf("%q read as requirement %q", v, s.Link)
		}
		again, err := ParseSelector(map[string]string{GPULink: s.Link})
		if err != nil || again.Link != s.Link {
			t.Fatalf("%q read as %q, which reads back as %q (%v)", v, s.Link, again.Link, err)
		}
	})
}
