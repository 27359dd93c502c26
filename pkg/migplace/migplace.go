// Package migplace is the geometry of MIG GPU instances on a card, for dynamic MIG: which
// placements of a profile are legal, which of them are free given the instances a card holds, and
// which free placement to choose so that the profiles a cluster asks for stay placeable.
//
// A card in MIG mode (A100, H100) has MemorySlices memory slices and ComputeSlices compute slices.
// A GPU instance of a profile takes Profile.Compute compute slices and Profile.Size memory slices at
// one of the profile's legal start slots (NVML's GpuInstancePlacement: start and size, in memory
// slices). Two GPU instances never share a memory slice, and together never take more than
// ComputeSlices compute slices; a profile has at most Profile.MaxCount instances on a card. NVML
// refuses anything else (CreateGpuInstanceWithPlacement, "Creation of new GPU instance will fail if
// there is overlap with the already occupied memory slices"); this package answers the same
// questions without NVML, so the scheduler can decide and the simulator can refuse alike.
//
// Pure: no NVML, no I/O, no mutable package state (the models are built once and never changed).
package migplace

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
)

// Slices of a card in MIG mode (A100, H100): memory in eighths, compute in sevenths.
const (
	MemorySlices  = 8
	ComputeSlices = 7
)

// MaxProfiles bounds the profiles of one model.
const MaxProfiles = 8

// Mask is a set of memory slices: bit i set means slice i is held.
type Mask uint8

// Count is the number of slices in m.
func (m Mask) Count() int { return bits.OnesCount8(uint8(m)) }

// String shows the slices from 0 to 7, '#' held and '.' free: "####...." holds 0 to 3.
func (m Mask) String() string {
	var b strings.Builder
	for i := range MemorySlices {
		if m&(1<<i) != 0 {
			b.WriteByte('#')
		} else {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// Placement is where a GPU instance sits: Size memory slices from Start, as NVML's
// GpuInstancePlacement.
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// Valid reports whether p lies within the card's memory slices.
func (p Placement) Valid() bool {
	return p.Start >= 0 && p.Size >= 1 && p.Size <= MemorySlices && p.Start <= MemorySlices-p.Size
}

// Mask is the set of slices p takes; zero when p is not Valid.
func (p Placement) Mask() Mask {
	if !p.Valid() {
		return 0
	}
	return Mask((1<<p.Size - 1) << p.Start)
}

// String writes p as nvidia-smi mig -lgipp does, start:size ("4:4").
func (p Placement) String() string { return fmt.Sprintf("%d:%d", p.Start, p.Size) }

// Profile is a GPU instance profile of a model.
type Profile struct {
	// Name is the profile as nvidia-smi names it (3g.40gb, 1g.10gb+me).
	Name string
	// ID is the GPU instance profile ID (nvidia-smi mig -lgip; NVML GpuInstanceProfileInfo.Id).
	ID int
	// Compute is the compute slices an instance takes; Size its memory slices.
	Compute, Size int
	// MaxCount is how many instances of the profile one card holds at most.
	MaxCount int
	// Starts are the legal start slots, ascending.
	Starts []int
}

// Placements are the profile's legal placements, in start order (what NVML's
// GetGpuInstancePossiblePlacements returns).
func (p *Profile) Placements() []Placement {
	out := make([]Placement, len(p.Starts))
	for i, s := range p.Starts {
		out[i] = Placement{Start: s, Size: p.Size}
	}
	return out
}

// Legal reports whether pl is one of the profile's placements.
func (p *Profile) Legal(pl Placement) bool {
	if pl.Size != p.Size {
		return false
	}
	for _, s := range p.Starts {
		if s == pl.Start {
			return true
		}
	}
	return false
}

// Model is a card model's MIG geometry: its profiles, and for each the most instances that still
// fit for every state of a card (precomputed: a card has 2^8 memory states and 8 compute ones).
type Model struct {
	Name     string
	Profiles []Profile
	// fit[i][mask][compute] is how many more instances of profile i fit on a card whose GPU
	// instances hold the memory slices mask and compute compute slices, MaxCount aside.
	fit [][1 << MemorySlices][ComputeSlices + 1]uint8
}

func newModel(name string, profiles []Profile) *Model {
	if len(profiles) > MaxProfiles {
		panic("migplace: " + name + " has more than MaxProfiles profiles")
	}
	m := &Model{Name: name, Profiles: profiles, fit: make([][1 << MemorySlices][ComputeSlices + 1]uint8, len(profiles))}
	for i := range profiles {
		p := &profiles[i]
		for _, pl := range p.Placements() {
			if !pl.Valid() {
				panic(fmt.Sprintf("migplace: %s %s: placement %s is outside the card", name, p.Name, pl))
			}
		}
		for mask := range 1 << MemorySlices {
			for c := 0; c <= ComputeSlices; c++ {
				m.fit[i][mask][c] = uint8(mostFit(p, Mask(mask), c, 0))
			}
		}
	}
	return m
}

// mostFit is how many instances of p fit, pairwise apart, on the slices mask leaves free with
// compute compute slices held, using only placements from index from on (an exhaustive search:
// at most 7 placements).
func mostFit(p *Profile, mask Mask, compute, from int) int {
	best := 0
	for k := from; k < len(p.Starts); k++ {
		pl := Placement{Start: p.Starts[k], Size: p.Size}
		if pl.Mask()&mask != 0 || compute+p.Compute > ComputeSlices {
			continue
		}
		best = max(best, 1+mostFit(p, mask|pl.Mask(), compute+p.Compute, k+1))
	}
	return best
}

// Profile returns the index of the profile named name (as nvidia-smi names it, or its resource key
// with '+' written '.', 1g.10gb.me), or false.
func (m *Model) Profile(name string) (int, bool) {
	for i := range m.Profiles {
		if m.Profiles[i].Name == name || strings.ReplaceAll(m.Profiles[i].Name, "+", ".") == name {
			return i, true
		}
	}
	return 0, false
}

// Errors of Card.Check, for callers that classify a refusal.
var (
	ErrNotLegal = errors.New("not a placement of the profile")
	ErrOverlap  = errors.New("overlaps a GPU instance")
	ErrCompute  = errors.New("not enough compute slices left")
	ErrCount    = errors.New("the card holds the most instances of the profile it can")
	ErrUnknown  = errors.New("no such profile on this model")
	ErrNotHeld  = errors.New("no GPU instance of the profile there")
)

// Card is the state of one card in MIG mode: the memory and compute slices its GPU instances hold,
// and how many instances of each of its model's profiles it has. A Card is a value: Place and
// Remove return the new state.
type Card struct {
	Model *Model
	// Used are the memory slices held; Compute the compute slices held.
	Used    Mask
	Compute int
	// Count is the instances of each of Model's profiles, by index.
	Count [MaxProfiles]uint8
}

// NewCard is an empty card of model m.
func NewCard(m *Model) Card { return Card{Model: m} }

// Held is a GPU instance found on a card: its profile (as nvidia-smi names it; a compute instance
// profile such as 1c.3g.40gb names its GPU instance's 3g.40gb) and placement.
type Held struct {
	Profile   string
	Placement Placement
}

// CardWith is a card of model m holding the GPU instances held (an inventory lists one entry per
// compute instance: entries at one placement are one GPU instance). An instance of a profile the
// model does not list still holds its slices (compute from its name, 1 when unreadable).
func CardWith(m *Model, held []Held) (Card, error) {
	c := NewCard(m)
	seen := map[Placement]bool{}
	for _, h := range held {
		if seen[h.Placement] {
			continue
		}
		if !h.Placement.Valid() {
			return Card{}, fmt.Errorf("instance %s at %s: placement is outside the card's %d slices", h.Profile, h.Placement, MemorySlices)
		}
		if c.Used&h.Placement.Mask() != 0 {
			return Card{}, fmt.Errorf("instance %s at %s: %w (slices %s held)", h.Profile, h.Placement, ErrOverlap, c.Used)
		}
		seen[h.Placement] = true
		gi, err := ParseProfile(h.Profile)
		compute := 1
		if err == nil {
			compute = gi.G
		}
		c.Used |= h.Placement.Mask()
		c.Compute = min(c.Compute+compute, ComputeSlices)
		if err == nil {
			if i, ok := m.Profile(gi.GPUInstance()); ok {
				c.Count[i]++
			}
		}
	}
	return c, nil
}

// Check says why profile i cannot go at pl on c, or nil when it can.
func (c Card) Check(i int, pl Placement) error {
	if i < 0 || i >= len(c.Model.Profiles) {
		return ErrUnknown
	}
	p := &c.Model.Profiles[i]
	switch {
	case !p.Legal(pl):
		return fmt.Errorf("%s at %s: %w (%s)", p.Name, pl, ErrNotLegal, p.placementsText())
	case c.Used&pl.Mask() != 0:
		return fmt.Errorf("%s at %s: %w (slices %s held)", p.Name, pl, ErrOverlap, c.Used)
	case c.Compute+p.Compute > ComputeSlices:
		return fmt.Errorf("%s at %s: %w (%d of %d held, it needs %d)", p.Name, pl, ErrCompute, c.Compute, ComputeSlices, p.Compute)
	case int(c.Count[i]) >= p.MaxCount:
		return fmt.Errorf("%s at %s: %w (%d)", p.Name, pl, ErrCount, p.MaxCount)
	}
	return nil
}

func (p *Profile) placementsText() string {
	parts := make([]string, len(p.Starts))
	for k, s := range p.Starts {
		parts[k] = fmt.Sprint(s)
	}
	return fmt.Sprintf("{%s}:%d", strings.Join(parts, ","), p.Size)
}

// Place returns c with an instance of profile i at pl, or Check's error.
func (c Card) Place(i int, pl Placement) (Card, error) {
	if err := c.Check(i, pl); err != nil {
		return c, err
	}
	c.Used |= pl.Mask()
	c.Compute += c.Model.Profiles[i].Compute
	c.Count[i]++
	return c, nil
}

// Remove returns c without the instance of profile i at pl. It trusts the caller that the instance
// is of that profile (a Card does not remember which profile holds which slices); it refuses a
// placement that is not the profile's or not held.
func (c Card) Remove(i int, pl Placement) (Card, error) {
	if i < 0 || i >= len(c.Model.Profiles) {
		return c, ErrUnknown
	}
	p := &c.Model.Profiles[i]
	if !p.Legal(pl) {
		return c, fmt.Errorf("%s at %s: %w", p.Name, pl, ErrNotLegal)
	}
	if c.Used&pl.Mask() != pl.Mask() || c.Count[i] == 0 || c.Compute < p.Compute {
		return c, fmt.Errorf("%s at %s: %w", p.Name, pl, ErrNotHeld)
	}
	c.Used &^= pl.Mask()
	c.Compute -= p.Compute
	c.Count[i]--
	return c, nil
}

// Free lists the placements of profile i that are free on c now, in start order.
func (c Card) Free(i int) []Placement {
	if i < 0 || i >= len(c.Model.Profiles) {
		return nil
	}
	var out []Placement
	for _, pl := range c.Model.Profiles[i].Placements() {
		if c.Check(i, pl) == nil {
			out = append(out, pl)
		}
	}
	return out
}

// Fits is how many more instances of profile i fit on c, together.
func (c Card) Fits(i int) int {
	if i < 0 || i >= len(c.Model.Profiles) {
		return 0
	}
	p := &c.Model.Profiles[i]
	return min(int(c.Model.fit[i][c.Used][c.Compute]), max(p.MaxCount-int(c.Count[i]), 0))
}
