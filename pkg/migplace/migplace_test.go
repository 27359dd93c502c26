package migplace

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// pl is a placement, start:size.
func pl(start, size int) Placement { return Placement{Start: start, Size: size} }

// card places the instances named "profile@start" on an empty card of m, failing the test on any refusal.
func card(t *testing.T, m *Model, instances ...string) Card {
	t.Helper()
	c := NewCard(m)
	for _, s := range instances {
		name, start, _ := strings.Cut(s, "@")
		i, ok := m.Profile(name)
		if !ok {
			t.Fatalf("%s has no profile %s", m.Name, name)
		}
		var st int
		for _, ch := range start {
			st = st*10 + int(ch-'0')
		}
		var err error
		if c, err = c.Place(i, pl(st, m.Profiles[i].Size)); err != nil {
			t.Fatalf("placing %s: %v", s, err)
		}
	}
	return c
}

// TestProfilesAsTheMIGUserGuideListsThem pins every profile of every model: name, profile ID,
// compute and memory slices, instances per card, and placements as "nvidia-smi mig -lgipp" prints
// them ({starts}:size).
func TestProfilesAsTheMIGUserGuideListsThem(t *testing.T) {
	type row struct {
		Name       string
		ID         int
		Compute    int
		MaxCount   int
		Placements string
	}
	eighty := []row{
		{"1g.10gb", 19, 1, 7, "{0,1,2,3,4,5,6}:1"},
		{"1g.10gb+me", 20, 1, 1, "{0,1,2,3,4,5,6}:1"},
		{"1g.20gb", 15, 1, 4, "{0,2,4,6}:2"},
		{"2g.20gb", 14, 2, 3, "{0,2,4}:2"},
		{"3g.40gb", 9, 3, 2, "{0,4}:4"},
		{"4g.40gb", 5, 4, 1, "{0}:4"},
		{"7g.80gb", 0, 7, 1, "{0}:8"},
	}
	want := map[string][]row{
		"A100-40GB": {
			{"1g.5gb", 19, 1, 7, "{0,1,2,3,4,5,6}:1"},
			{"1g.5gb+me", 20, 1, 1, "{0,1,2,3,4,5,6}:1"},
			{"1g.10gb", 15, 1, 4, "{0,2,4,6}:2"},
			{"2g.10gb", 14, 2, 3, "{0,2,4}:2"},
			{"3g.20gb", 9, 3, 2, "{0,4}:4"},
			{"4g.20gb", 5, 4, 1, "{0}:4"},
			{"7g.40gb", 0, 7, 1, "{0}:8"},
		},
		"A100-80GB": eighty,
		"H100-80GB": eighty,
	}
	got := map[string][]row{}
	for _, m := range Models() {
		for _, p := range m.Profiles {
			got[m.Name] = append(got[m.Name], row{p.Name, p.ID, p.Compute, p.MaxCount, p.placementsText()})
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("profiles (-want +got):\n%s", d)
	}
}

// TestEmptyCardHoldsWhatTheGuideSays: on an empty card, the most instances of each profile that fit
// together is the guide's "Number of Instances Available" (the 7th 1g.10gb at 6:1 leaves slice 7
// unused; four 1g.20gb take every slice with 4 compute slices).
func TestEmptyCardHoldsWhatTheGuideSays(t *testing.T) {
	for _, m := range Models() {
		c := NewCard(m)
		for i, p := range m.Profiles {
			if got := c.Fits(i); got != p.MaxCount {
				t.Errorf("%s %s: Fits %d on an empty card, want %d", m.Name, p.Name, got, p.MaxCount)
			}
			if got := len(c.Free(i)); got != len(p.Starts) {
				t.Errorf("%s %s: %d free placements on an empty card, want all %d", m.Name, p.Name, got, len(p.Starts))
			}
		}
	}
}

// TestFreePlacementsOnOccupiedCards lists what each profile may still take on A100-80GB cards that
// hold instances.
func TestFreePlacementsOnOccupiedCards(t *testing.T) {
	m := A100_80GB
	tests := []struct {
		name string
		held []string
		free map[string][]Placement // profile -> free placements; profiles not listed: none
	}{{
		name: "3g.40gb at 4 leaves the left half: 4g, a 3g at 0, 2g at 0 and 2",
		held: []string{"3g.40gb@4"},
		free: map[string][]Placement{
			"1g.10gb": {pl(0, 1), pl(1, 1), pl(2, 1), pl(3, 1)}, "1g.10gb+me": {pl(0, 1), pl(1, 1), pl(2, 1), pl(3, 1)},
			"1g.20gb": {pl(0, 2), pl(2, 2)}, "2g.20gb": {pl(0, 2), pl(2, 2)},
			"3g.40gb": {pl(0, 4)}, "4g.40gb": {pl(0, 4)},
		},
	}, {
		name: "1g.10gb at 6 (the slot frag-aware picks first) leaves 4g and every 2g",
		held: []string{"1g.10gb@6"},
		free: map[string][]Placement{
			"1g.10gb": {pl(0, 1), pl(1, 1), pl(2, 1), pl(3, 1), pl(4, 1), pl(5, 1)}, "1g.10gb+me": {pl(0, 1), pl(1, 1), pl(2, 1), pl(3, 1), pl(4, 1), pl(5, 1)},
			"1g.20gb": {pl(0, 2), pl(2, 2), pl(4, 2)}, "2g.20gb": {pl(0, 2), pl(2, 2), pl(4, 2)},
			"3g.40gb": {pl(0, 4)}, "4g.40gb": {pl(0, 4)},
		},
	}, {
		name: "4g.40gb and 3g.40gb fill the card: 7 compute slices, 8 memory slices",
		held: []string{"4g.40gb@0", "3g.40gb@4"},
		free: map[string][]Placement{},
	}, {
		name: "three 2g.20gb and a 1g.10gb at 6: 7 compute slices, slice 7 free but no compute left",
		held: []string{"2g.20gb@0", "2g.20gb@2", "2g.20gb@4", "1g.10gb@6"},
		free: map[string][]Placement{},
	}, {
		name: "four 1g.20gb: every memory slice held with 3 compute slices to spare",
		held: []string{"1g.20gb@0", "1g.20gb@2", "1g.20gb@4", "1g.20gb@6"},
		free: map[string][]Placement{},
	}, {
		name: "1g.10gb+me once per card: a second is refused though slices are free",
		held: []string{"1g.10gb+me@0"},
		free: map[string][]Placement{
			"1g.10gb": {pl(1, 1), pl(2, 1), pl(3, 1), pl(4, 1), pl(5, 1), pl(6, 1)},
			"1g.20gb": {pl(2, 2), pl(4, 2), pl(6, 2)}, "2g.20gb": {pl(2, 2), pl(4, 2)},
			"3g.40gb": {pl(4, 4)},
		},
	}, {
		name: "2g.20gb at 4 blocks both halves' large profiles but the left 3g and 4g",
		held: []string{"2g.20gb@4"},
		free: map[string][]Placement{
			"1g.10gb": {pl(0, 1), pl(1, 1), pl(2, 1), pl(3, 1), pl(6, 1)}, "1g.10gb+me": {pl(0, 1), pl(1, 1), pl(2, 1), pl(3, 1), pl(6, 1)},
			"1g.20gb": {pl(0, 2), pl(2, 2), pl(6, 2)}, "2g.20gb": {pl(0, 2), pl(2, 2)},
			"3g.40gb": {pl(0, 4)}, "4g.40gb": {pl(0, 4)},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := card(t, m, tt.held...)
			got := map[string][]Placement{}
			for i, p := range m.Profiles {
				if f := c.Free(i); len(f) > 0 {
					got[p.Name] = f
				}
			}
			if d := cmp.Diff(tt.free, got); d != "" {
				t.Errorf("free placements (-want +got):\n%s", d)
			}
		})
	}
}

func TestCheckSaysWhy(t *testing.T) {
	m := A100_40GB
	tests := []struct {
		name    string
		held    []string
		profile string
		at      Placement
		want    error
	}{
		{"2g at 6 is not a placement", nil, "2g.10gb", pl(6, 2), ErrNotLegal},
		{"3g at 2 is not a placement", nil, "3g.20gb", pl(2, 4), ErrNotLegal},
		{"a size that is not the profile's", nil, "1g.5gb", pl(0, 2), ErrNotLegal},
		{"4g over a 1g", []string{"1g.5gb@3"}, "4g.20gb", pl(0, 4), ErrOverlap},
		{"1g.5gb on slice 7 is not a placement", nil, "1g.5gb", pl(7, 1), ErrNotLegal},
		{"1g.10gb at 6 after 4g and two 1g: 7 compute slices held",
			[]string{"4g.20gb@0", "1g.5gb@4", "1g.5gb@5", "1g.5gb@6"}, "1g.10gb", pl(6, 2), ErrOverlap},
		{"a second +me", []string{"1g.5gb+me@0"}, "1g.5gb+me", pl(1, 1), ErrCount},
		{"fits", []string{"3g.20gb@0"}, "3g.20gb", pl(4, 4), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := card(t, m, tt.held...)
			i, _ := m.Profile(tt.profile)
			err := c.Check(i, tt.at)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("Check(%s at %s) = %v, want %v", tt.profile, tt.at, err, tt.want)
			}
		})
	}
}

// TestComputeRunsOutBeforeMemory: a 1g.10gb at 6 on a 40GB A100 holding 1g.5gb at 0..5 would fit
// in memory (slices 6 and 7 free) and compute (6 held, 1 more); a 1g.5gb there takes the 7th compute
// slice and the card refuses anything more though slice 7 is free.
func TestComputeRunsOutBeforeMemory(t *testing.T) {
	m := A100_40GB
	c := card(t, m, "1g.5gb@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3", "1g.5gb@4", "1g.5gb@5", "1g.5gb@6")
	if c.Compute != 7 || c.Used.String() != "#######." {
		t.Fatalf("card %s with %d compute slices, want #######. with 7", c.Used, c.Compute)
	}
	for i := range m.Profiles {
		if f := c.Free(i); f != nil {
			t.Errorf("%s: free %v on a card with every compute slice held", m.Profiles[i].Name, f)
		}
	}
}

// TestComputeRefusesWhereMemoryWouldNot: on the three models the placements alone keep the compute
// slices within 7, so the compute check is for models whose placements do not (here one made up:
// a 1g on each of the 8 memory slices).
func TestComputeRefusesWhereMemoryWouldNot(t *testing.T) {
	m := newModel("eight-ones", []Profile{{Name: "1g.1gb", Compute: 1, Size: 1, MaxCount: 8, Starts: []int{0, 1, 2, 3, 4, 5, 6, 7}}})
	c := card(t, m, "1g.1gb@0", "1g.1gb@1", "1g.1gb@2", "1g.1gb@3", "1g.1gb@4", "1g.1gb@5", "1g.1gb@6")
	if err := c.Check(0, pl(7, 1)); !errors.Is(err, ErrCompute) {
		t.Errorf("8th 1g: %v, want ErrCompute", err)
	}
	if got := NewCard(m).Fits(0); got != 7 {
		t.Errorf("Fits on an empty card %d, want 7 (compute slices)", got)
	}
}

func TestPlaceThenRemoveRestoresTheCard(t *testing.T) {
	m := H100_80GB
	c := card(t, m, "3g.40gb@4", "1g.10gb@0")
	i, _ := m.Profile("2g.20gb")
	after, err := c.Place(i, pl(2, 2))
	if err != nil {
		t.Fatal(err)
	}
	back, err := after.Remove(i, pl(2, 2))
	if err != nil {
		t.Fatal(err)
	}
	if back != c {
		t.Errorf("Remove after Place: %+v, want %+v", back, c)
	}
	if _, err := c.Remove(i, pl(2, 2)); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Remove of a placement not held: %v, want ErrNotHeld", err)
	}
	if _, err := c.Remove(i, pl(6, 2)); !errors.Is(err, ErrNotLegal) {
		t.Errorf("Remove of a placement not the profile's: %v, want ErrNotLegal", err)
	}
}

// TestCardWithCountsOneGPUInstancePerPlacement: an inventory lists a 3g.40gb split into three 1c
// compute instances as three entries at one placement; that is one GPU instance of 3 compute slices.
// A profile the model lacks (a 40GB name on an 80GB card) still holds its slices.
func TestCardWithCountsOneGPUInstancePerPlacement(t *testing.T) {
	m := A100_80GB
	c, err := CardWith(m, []Held{
		{"1c.3g.40gb", pl(4, 4)}, {"1c.3g.40gb", pl(4, 4)}, {"1c.3g.40gb", pl(4, 4)},
		{"2g.10gb", pl(0, 2)},
	})
	if err != nil {
		t.Fatal(err)
	}
	i3, _ := m.Profile("3g.40gb")
	if c.Used.String() != "##..####" || c.Compute != 5 || c.Count[i3] != 1 {
		t.Errorf("card %s, %d compute slices, %d 3g.40gb: want ##..####, 5, 1", c.Used, c.Compute, c.Count[i3])
	}
	if _, err := CardWith(m, []Held{{"4g.40gb", pl(0, 4)}, {"2g.20gb", pl(2, 2)}}); !errors.Is(err, ErrOverlap) {
		t.Errorf("overlapping instances: %v, want ErrOverlap", err)
	}
	if _, err := CardWith(m, []Held{{"1g.10gb", pl(7, 2)}}); err == nil {
		t.Error("placement past slice 7 accepted")
	}
}

// TestRandomPlacementsNeverOverlap places random free options on random cards of every model and
// checks the card never holds two instances on one slice nor more than 7 compute slices, that
// Fits matches what placing one by one achieves for the profile alone, and that removal frees.
func TestRandomPlacementsNeverOverlap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, m := range Models() {
		for range 300 {
			c := NewCard(m)
			type inst struct {
				i  int
				at Placement
			}
			var held []inst
			for range 12 {
				i := r.IntN(len(m.Profiles))
				free := c.Free(i)
				if len(free) == 0 {
					continue
				}
				at := free[r.IntN(len(free))]
				next, err := c.Place(i, at)
				if err != nil {
					t.Fatalf("%s: Free offered %s at %s, Place refused: %v", m.Name, m.Profiles[i].Name, at, err)
				}
				var mask Mask
				compute := 0
				for _, h := range append(held, inst{i, at}) {
					if mask&h.at.Mask() != 0 {
						t.Fatalf("%s: overlap at %s", m.Name, h.at)
					}
					mask |= h.at.Mask()
					compute += m.Profiles[h.i].Compute
				}
				if mask != next.Used || compute != next.Compute || compute > ComputeSlices {
					t.Fatalf("%s: card %s/%d, instances give %s/%d", m.Name, next.Used, next.Compute, mask, compute)
				}
				held, c = append(held, inst{i, at}), next
			}
			for i := range m.Profiles {
				// Greedy in start order is optimal for one profile alone: its placements are
				// aligned to their size (buddy-like), so an earlier start never blocks two later ones.
				greedy, g := 0, c
				for {
					f := g.Free(i)
					if len(f) == 0 {
						break
					}
					g, _ = g.Place(i, f[0])
					greedy++
				}
				if got := c.Fits(i); got != greedy {
					t.Fatalf("%s %s on %s/%d: Fits %d, placing one by one %d", m.Name, m.Profiles[i].Name, c.Used, c.Compute, got, greedy)
				}
			}
			for _, h := range held {
				var err error
				if c, err = c.Remove(h.i, h.at); err != nil {
					t.Fatal(err)
				}
			}
			if c != NewCard(m) {
				t.Fatalf("%s: after removing everything %+v", m.Name, c)
			}
		}
	}
}

func TestModelFor(t *testing.T) {
	tests := []struct {
		name string
		mib  int64
		want string // "" none
	}{
		{"NVIDIA A100-SXM4-40GB", 40960, "A100-40GB"},
		{"NVIDIA A100-PCIE-40GB", 40960, "A100-40GB"},
		{"NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"},
		{"NVIDIA A100 80GB PCIe", 81920, "A100-80GB"},
		{"NVIDIA H100 80GB HBM3", 81559, "H100-80GB"},
		{"NVIDIA H100 PCIe", 81559, "H100-80GB"},
		{"NVIDIA H100 NVL", 95830, ""},
		{"NVIDIA A30", 24576, ""},
		{"NVIDIA H200", 143771, ""},
		{"Tesla T4", 15360, ""},
	}
	for _, tt := range tests {
		m, ok := ModelFor(tt.name, tt.mib)
		got := ""
		if ok {
			got = m.Name
		}
		if got != tt.want {
			t.Errorf("ModelFor(%q, %d) = %q, want %q", tt.name, tt.mib, got, tt.want)
		}
	}
}

func TestMaskAndPlacementText(t *testing.T) {
	if got := pl(4, 4).Mask().String(); got != "....####" {
		t.Errorf("4:4 mask %s", got)
	}
	if got := pl(4, 4).String(); got != "4:4" {
		t.Errorf("String %s", got)
	}
	for _, bad := range []Placement{pl(-1, 1), pl(0, 0), pl(7, 2), pl(0, 9)} {
		if bad.Valid() || bad.Mask() != 0 {
			t.Errorf("%+v valid", bad)
		}
	}
}
