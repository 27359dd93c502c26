package nvidia

import (
	"errors"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Dynamic MIG (issue 40): the GPU instance profiles a card in MIG mode has, with every legal
// placement of each (what a dynamic pool's inventory publishes), and the creation and destruction
// of one MIG device (a GPU instance at a placement, with one compute instance of the whole of it).
// NVML must be initialised around these calls (Discover's Init and Shutdown are its own).

// MIGProfile is a GPU instance profile of a card, with where NVML can place it.
type MIGProfile struct {
	// Name is the profile as nvidia-smi names it: 3g.40gb, 1g.10gb+me.
	Name string
	// Index is NVML's profile index (GPU_INSTANCE_PROFILE_*); ID the card's profile ID
	// (GpuInstanceProfileInfo.Id, what placements and GPU instances are asked by).
	Index int
	ID    uint32
	// Slices is the profile's compute slices.
	Slices int
	// Size is every placement's size in memory slices; Starts the legal starts, ascending (NVML's
	// GetGpuInstancePossiblePlacements).
	Size   int
	Starts []int
}

// maxPlacements bounds the placements NVML may report for a profile (a card has 8 memory slices).
const maxPlacements = 64

// MIGProfiles lists the GPU instance profiles card c (handle d) has, in NVML's profile index order,
// each with its legal placements. A profile the card does not have (GetGpuInstanceProfileInfo
// answers NOT_SUPPORTED or INVALID_ARGUMENT), or has no placement for, is not listed; a profile
// index that repeats an earlier one's ID is the same profile and is listed once. Any other NVML
// failure is an error.
func MIGProfiles(d nvml.Device, c Card) ([]MIGProfile, error) {
	var out []MIGProfile
	seen := map[uint32]bool{}
	for k := 0; k < nvml.GPU_INSTANCE_PROFILE_COUNT; k++ {
		info, ret := d.GetGpuInstanceProfileInfo(k)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue
		default:
			return nil, fmt.Errorf("get GPU instance profile %d of %s: %w", k, c.UUID, ret)
		}
		if seen[info.Id] || info.SliceCount == 0 || MIGMemoryGB(int64(info.MemorySizeMB), c.MemoryMiB) == 0 {
			continue
		}
		seen[info.Id] = true
		p := MIGProfile{Name: MIGProfileName(k, int(info.SliceCount), 0, int64(info.MemorySizeMB), c.MemoryMiB), Index: k, ID: info.Id,
			Slices: int(info.SliceCount)}
		pls, ret := d.GetGpuInstancePossiblePlacements(&info)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED:
			continue
		default:
			return nil, fmt.Errorf("get placements of %s (profile ID %d) on %s: %w", p.Name, info.Id, c.UUID, ret)
		}
		if len(pls) == 0 {
			continue
		}
		if len(pls) > maxPlacements {
			return nil, fmt.Errorf("%s on %s: NVML reports %d placements (at most %d)", p.Name, c.UUID, len(pls), maxPlacements)
		}
		p.Size = int(pls[0].Size)
		for _, pl := range pls {
			if int(pl.Size) != p.Size || pl.Size == 0 {
				return nil, fmt.Errorf("%s on %s: NVML reports placements of sizes %d and %d (one profile has one size)", p.Name, c.UUID, p.Size, pl.Size)
			}
			p.Starts = append(p.Starts, int(pl.Start))
		}
		slices.Sort(p.Starts)
		p.Starts = slices.Compact(p.Starts)
		out = append(out, p)
	}
	return out, nil
}

// DiscoverMIGProfiles sets the Profiles of every card of cards whose MIG mode is in force, and
// reports the cards NVML could not answer for (by UUID; their Profiles stay empty). It
// initialises NVML and shuts it down again, as Discover does.
func DiscoverMIGProfiles(lib Library, cards []Card) (map[string]error, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initialise NVML: %w", ret)
	}
	defer func() { _ = lib.Shutdown() }()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("count devices: %w", ret)
	}
	byUUID := map[string]*Card{}
	for i := range cards {
		if c := &cards[i]; c.UUID != "" && c.Fault == "" && c.MIG.Current {
			byUUID[c.UUID] = c
		}
	}
	failed := map[string]error{}
	for i := 0; i < n && len(byUUID) > 0; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		u, ret := d.GetUUID()
		c, ok := byUUID[u]
		if ret != nvml.SUCCESS || !ok {
			continue
		}
		delete(byUUID, u)
		profiles, err := MIGProfiles(d, *c)
		if err != nil {
			failed[u] = err
			continue
		}
		c.Profiles = profiles
	}
	for u := range byUUID {
		failed[u] = fmt.Errorf("card %s: NVML lists it no longer", u)
	}
	return failed, nil
}

// MIGControl creates and destroys MIG devices on the cards of a node (dynamic MIG). NVML must be
// initialised while it is used.
type MIGControl interface {
	// Create creates a GPU instance of the named profile at start on the card parent (its UUID),
	// then one compute instance of the whole of it, and describes the new MIG device. A refusal of
	// NVML is the error (errors.Is with nvml.ERROR_INSUFFICIENT_RESOURCES: the placement overlaps
	// or the card is full; nvml.ERROR_INVALID_ARGUMENT: not a placement of the profile); a GPU
	// instance whose compute instance could not be created is destroyed again.
	Create(parent, profile string, start int) (MIGInstance, error)
	// Destroy destroys compute instance ci of GPU instance gi on card parent, then the GPU
	// instance (nvml.ERROR_IN_USE while another compute instance or a process holds it).
	Destroy(parent string, gi, ci int) error
	// Instances describes the MIG devices of card parent as discovery does.
	Instances(parent string) ([]MIGInstance, error)
}

// UUIDLibrary is a Library that finds cards by UUID. nvml.Interface satisfies it.
type UUIDLibrary interface {
	Library
	DeviceGetHandleByUUID(string) (nvml.Device, nvml.Return)
}

var _ UUIDLibrary = nvml.Interface(nil)

// MIG is the MIGControl of an NVML library: the real one, a go-nvml mock or the simulated NVML.
type MIG struct {
	Lib UUIDLibrary
}

var _ MIGControl = MIG{}

// ErrNoProfile is Create's error for a profile the card does not have.
var ErrNoProfile = errors.New("the card has no such GPU instance profile")

// computeProfiles are the compute instance profiles (COMPUTE_INSTANCE_PROFILE_*) that take a whole
// GPU instance, by its compute slices.
var computeProfiles = map[int]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

// card finds the card parent and describes what naming its profiles needs (its memory).
func (m MIG) card(parent string) (nvml.Device, Card, error) {
	d, ret := m.Lib.DeviceGetHandleByUUID(parent)
	if ret != nvml.SUCCESS {
		return nil, Card{}, fmt.Errorf("get handle of %s: %w", parent, ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, Card{}, fmt.Errorf("get memory of %s: %w", parent, ret)
	}
	return d, Card{UUID: parent, MemoryMiB: int64(mem.Total >> 20)}, nil
}

// Create implements MIGControl.
func (m MIG) Create(parent, profile string, start int) (MIGInstance, error) {
	d, c, err := m.card(parent)
	if err != nil {
		return MIGInstance{}, err
	}
	profiles, err := MIGProfiles(d, c)
	if err != nil {
		return MIGInstance{}, err
	}
	i := slices.IndexFunc(profiles, func(p MIGProfile) bool { return p.Name == profile })
	if i < 0 {
		return MIGInstance{}, fmt.Errorf("%s on %s: %w", profile, parent, ErrNoProfile)
	}
	p := profiles[i]
	info, ret := d.GetGpuInstanceProfileInfo(p.Index)
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("get GPU instance profile %s of %s: %w", profile, parent, ret)
	}
	if start < 0 {
		return MIGInstance{}, fmt.Errorf("create %s at %d on %s: %w", profile, start, parent, nvml.ERROR_INVALID_ARGUMENT)
	}
	pl := nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(p.Size)}
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &pl)
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("create GPU instance %s at %d:%d on %s: %w", profile, pl.Start, pl.Size, parent, ret)
	}
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return MIGInstance{}, errors.Join(fmt.Errorf("get new GPU instance %s at %d:%d on %s: %w", profile, pl.Start, pl.Size, parent, ret), undo(gi, parent))
	}
	ci, err := createWholeCI(gi, p)
	if err != nil {
		return MIGInstance{}, errors.Join(fmt.Errorf("GPU instance %d (%s at %d:%d) on %s: %w", giInfo.Id, profile, pl.Start, pl.Size, parent, err), undo(gi, parent))
	}
	ciInfo, ret := ci.GetInfo()
	if ret != nvml.SUCCESS {
		return MIGInstance{}, fmt.Errorf("get compute instance of GPU instance %d on %s: %w", giInfo.Id, parent, ret)
	}
	return findInstance(d, c, int(giInfo.Id), int(ciInfo.Id))
}

// createWholeCI creates one compute instance of the whole GPU instance gi of profile p.
func createWholeCI(gi nvml.GpuInstance, p MIGProfile) (nvml.ComputeInstance, error) {
	k, ok := computeProfiles[p.Slices]
	if !ok {
		return nil, fmt.Errorf("no compute instance profile of %d slices", p.Slices)
	}
	info, ret := gi.GetComputeInstanceProfileInfo(k, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get compute instance profile of %d slices: %w", p.Slices, ret)
	}
	ci, ret := gi.CreateComputeInstance(&info)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("create compute instance of %d slices: %w", p.Slices, ret)
	}
	return ci, nil
}

// undo destroys a GPU instance Create could not finish.
func undo(gi nvml.GpuInstance, parent string) error {
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("destroy it again on %s: %w", parent, ret)
	}
	return nil
}

// findInstance describes the MIG device of GPU instance gi and compute instance ci of card c.
func findInstance(d nvml.Device, c Card, gi, ci int) (MIGInstance, error) {
	all, err := instances(d, c)
	if err != nil {
		return MIGInstance{}, err
	}
	for _, in := range all {
		if in.GI == gi && in.CI == ci && in.UUID != "" {
			if in.Fault != "" {
				return in, errors.New(in.Fault)
			}
			return in, nil
		}
	}
	return MIGInstance{}, fmt.Errorf("GPU instance %d, compute instance %d of %s: created, but NVML lists no MIG device for it", gi, ci, c.UUID)
}

// Destroy implements MIGControl.
func (m MIG) Destroy(parent string, gi, ci int) error {
	d, ret := m.Lib.DeviceGetHandleByUUID(parent)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("get handle of %s: %w", parent, ret)
	}
	g, ret := d.GetGpuInstanceById(gi)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("get GPU instance %d of %s: %w", gi, parent, ret)
	}
	c, ret := g.GetComputeInstanceById(ci)
	switch ret {
	case nvml.SUCCESS:
		if ret := c.Destroy(); ret != nvml.SUCCESS {
			return fmt.Errorf("destroy compute instance %d of GPU instance %d on %s: %w", ci, gi, parent, ret)
		}
	case nvml.ERROR_NOT_FOUND: // destroyed already: the GPU instance still goes
	default:
		return fmt.Errorf("get compute instance %d of GPU instance %d on %s: %w", ci, gi, parent, ret)
	}
	if ret := g.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("destroy GPU instance %d on %s: %w", gi, parent, ret)
	}
	return nil
}

// Instances implements MIGControl.
func (m MIG) Instances(parent string) ([]MIGInstance, error) {
	d, c, err := m.card(parent)
	if err != nil {
		return nil, err
	}
	return instances(d, c)
}

// Initialised is a MIGControl that initialises its NVML library around each call (NVML counts
// its initialisations: the device plugin's health watch may hold one meanwhile).
type Initialised struct {
	Lib     Library
	Control MIGControl
}

var _ MIGControl = Initialised{}

func (i Initialised) with(f func() error) error {
	if ret := i.Lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("initialise NVML: %w", ret)
	}
	defer func() { _ = i.Lib.Shutdown() }()
	return f()
}

// Create implements MIGControl.
func (i Initialised) Create(parent, profile string, start int) (in MIGInstance, err error) {
	err = i.with(func() error { in, err = i.Control.Create(parent, profile, start); return err })
	return in, err
}

// Destroy implements MIGControl.
func (i Initialised) Destroy(parent string, gi, ci int) error {
	return i.with(func() error { return i.Control.Destroy(parent, gi, ci) })
}

// Instances implements MIGControl.
func (i Initialised) Instances(parent string) (out []MIGInstance, err error) {
	err = i.with(func() error { out, err = i.Control.Instances(parent); return err })
	return out, err
}
