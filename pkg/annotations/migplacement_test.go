package annotations

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMIGPlacementIDRoundTrip(t *testing.T) {
	for _, r := range []PlacementRef{
		{Parent: uuid0, Profile: "3g.40gb", Start: 4},
		{Parent: uuid0, Profile: "1g.10gb+me", Start: 6},
		{Parent: "GPU-a", Profile: "7g.80gb", Start: 0},
	} {
		id := r.String()
		got, err := ParseMIGPlacementID(id)
		if err != nil {
			t.Fatalf("ParseMIGPlacementID(%q): %v", id, err)
		}
		if diff := cmp.Diff(r, got); diff != "" {
			t.Errorf("ParseMIGPlacementID(%q) (-want +got):\n%s", id, diff)
		}
		// A placement ID is one device ID of its own to every reader of device IDs.
		if u, slot, err := ParseDeviceID(id); err != nil || u != id || slot != -1 {
			t.Errorf("ParseDeviceID(%q) = %q, %d, %v; want the ID itself, -1", id, u, slot, err)
		}
	}
	if got := MIGPlacementID(uuid0, "3g.40gb", 4); got != uuid0+"/3g.40gb@4" {
		t.Errorf("MIGPlacementID = %q", got)
	}
}

func TestParseMIGPlacementIDRefusals(t *testing.T) {
	for _, c := range []struct{ id, names string }{
		{"GPU-a/3g.40gb", `no "@"`},
		{"GPU-a3g.40gb@4", `no "/"`},
		{"/3g.40gb@4", `parent ""`},
		{"GPU-a::1/3g.40gb@4", `parent "GPU-a::1"`},
		{"GPU-a/1c.3g.40gb@4", `profile "1c.3g.40gb"`},
		{"GPU-a/3g@4", `profile "3g"`},
		{"GPU-a/3g.40gb@04", `start "04"`},
		{"GPU-a/3g.40gb@-1", `start "-1"`},
		{"GPU-a/3g.40gb@64", `start "64"`},
		{"GPU-a/3g.40gb@", `start ""`},
	} {
		_, err := ParseMIGPlacementID(c.id)
		if err == nil || !strings.Contains(err.Error(), c.names) {
			t.Errorf("ParseMIGPlacementID(%q) = %v, want an error naming %s", c.id, err, c.names)
		}
	}
}

func TestAssignmentPlacement(t *testing.T) {
	id := MIGPlacementID("GPU-a", "3g.40gb", 4)
	ok := Assignment{V: Version, Node: "n", Containers: []ContainerAssignment{{Name: "c", Devices: []DeviceAssignment{
		{UUID: id, ID: id, Cores: 100, Parent: "GPU-a", Profile: "3g.40gb", Placement: &MIGPlacement{Start: 4, Size: 4}}}}}}
	s, err := EncodeAssignment(ok)
	if err != nil {
		t.Fatalf("EncodeAssignment: %v", err)
	}
	if !strings.Contains(s, `"placement":{"start":4,"size":4}`) {
		t.Errorf("encoding %s lacks the placement", s)
	}
	back, err := DecodeAssignment(s)
	if err != nil {
		t.Fatalf("DecodeAssignment: %v", err)
	}
	if diff := cmp.Diff(ok, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		name  string
		edit  func(d *DeviceAssignment)
		names string
	}{
		{"start differs from the ID", func(d *DeviceAssignment) { d.Placement.Start = 0 }, "not the placement ID"},
		{"no profile", func(d *DeviceAssignment) { d.Profile, d.Parent = "", "" }, "without parent and profile"},
		{"size out of range", func(d *DeviceAssignment) { d.Placement.Size = 0 }, "size 0"},
		{"placement ID without placement", func(d *DeviceAssignment) { d.Placement = nil }, "placement is not set"},
	} {
		a := ok
		d := ok.Containers[0].Devices[0]
		pl := *d.Placement
		d.Placement = &pl
		c.edit(&d)
		a.Containers = []ContainerAssignment{{Name: "c", Devices: []DeviceAssignment{d}}}
		if _, err := EncodeAssignment(a); err == nil || !strings.Contains(err.Error(), c.names) || !strings.Contains(err.Error(), GPUAssignment) {
			t.Errorf("%s: EncodeAssignment = %v, want an error naming %q", c.name, err, c.names)
		}
	}
}

func FuzzParseMIGPlacementID(f *testing.F) {
	for _, s := range []string{uuid0 + "/3g.40gb@4", "GPU-a/1g.10gb+me@6", "GPU-a/3g.40gb@04", "a/b@c", "/@", "GPU-a//3g.40gb@4", "GPU-a/3g.40gb@4@4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		r, err := ParseMIGPlacementID(id)
		if err != nil {
			checkKey(t, err, "placement ID ")
			return
		}
		if back := r.String(); back != id {
			t.Fatalf("ParseMIGPlacementID(%q) = %+v, which formats as %q", id, r, back)
		}
		if !IsMIGPlacementID(id) {
			t.Fatalf("IsMIGPlacementID(%q) false for a placement ID", id)
		}
		if u, slot, err := ParseDeviceID(id); err != nil || u != id || slot != -1 {
			t.Fatalf("ParseDeviceID(%q) = %q, %d, %v", id, u, slot, err)
		}
	})
}
