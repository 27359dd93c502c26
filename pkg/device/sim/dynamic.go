package sim

import (
	"errors"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/uuid"

	"github.com/cardinal-gpu/cardinal/pkg/migplace"
)

// Dynamic MIG in the simulation (issue 40): on a card that pkg/migplace models (A100-40GB,
// A100-80GB, H100-80GB; migplace.ModelFor on the card's model and memory) the simulated NVML answers
// GetGpuInstanceProfileInfo for every profile of the model, GetGpuInstancePossiblePlacements with
// the profile's legal placements, CreateGpuInstanceWithPlacement, GpuInstance.CreateComputeInstance
// and the Destroy of both, by migplace's rules and with the Return a real card gives:
//
//   - possible placements: every legal placement of the profile, whatever the card holds, and even
//     with MIG mode off (as the NVML header says); NOT_SUPPORTED on a card without MIG or not
//     modelled, or for a profile ID the card does not have.
//   - create with placement: NOT_SUPPORTED unless MIG mode is in force; INVALID_ARGUMENT for no
//     placement or one that is not the profile's; INSUFFICIENT_RESOURCES when it overlaps a GPU
//     instance, or the card has too few compute slices left or the most instances of the profile.
//   - create compute instance: one of the whole GPU instance (the compute instance profile of its
//     slice count, shared engines); INSUFFICIENT_RESOURCES when the GPU instance already has one.
//     The new MIG device is listed at the first free MIG device index.
//   - destroy: a GPU instance that still has a compute instance is IN_USE; a handle destroyed
//     already is INVALID_ARGUMENT.
//
// The instances a simulation file lists are GPU instances with one compute instance each, and can
// be destroyed the same way. Placement, compute and count rules are migplace.Card.Check's, never a
// copy.

// gpuInstance is a GPU instance of a simulated card.
type gpuInstance struct {
	mock.GpuInstance
	dev  *device
	info nvml.GpuInstanceInfo
	// profile is the GPU instance's profile name (a file's 1c.3g.40gb names 3g.40gb's), g its
	// compute slices.
	profile string
	g       int
	// ci is its compute instance (the simulation has at most one per GPU instance); destroyed is
	// set once Destroy succeeded (s.mu guards both).
	ci        *migDevice
	destroyed bool
}

// newGPUInstance builds the NVML handle of a GPU instance with ID id of profile ID pid at pl.
func (d *device) newGPUInstance(id int, pid uint32, profile string, g int, pl migplace.Placement) *gpuInstance {
	gi := &gpuInstance{dev: d, profile: profile, g: g, info: nvml.GpuInstanceInfo{Device: d, Id: uint32(id), ProfileId: pid,
		Placement: nvml.GpuInstancePlacement{Start: uint32(pl.Start), Size: uint32(pl.Size)}}}
	gone := func() bool { return d.faultIs(FaultLost) }
	gi.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
		if gone() {
			return nvml.GpuInstanceInfo{}, nvml.ERROR_GPU_IS_LOST
		}
		return gi.info, nvml.SUCCESS
	}
	gi.GetComputeInstanceProfileInfoFunc = func(profile, eng int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		switch {
		case gone():
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_GPU_IS_LOST
		case profile < 0 || profile >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT || eng < 0 || eng >= nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT:
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		whole, ok := computeProfiles[g]
		if !ok || profile != whole || eng != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.ComputeInstanceProfileInfo{Id: uint32(whole), SliceCount: uint32(g), InstanceCount: 1,
			MultiprocessorCount: uint32(SMsPerSlice * g)}, nvml.SUCCESS
	}
	gi.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		if gone() {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return gi.createComputeInstance(info)
	}
	gi.GetComputeInstanceByIdFunc = func(id int) (nvml.ComputeInstance, nvml.Return) {
		if gone() {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		switch {
		case gi.destroyed:
			return nil, nvml.ERROR_INVALID_ARGUMENT
		case gi.ci == nil || gi.ci.in.CI != id:
			return nil, nvml.ERROR_NOT_FOUND
		}
		return gi.computeInstance(gi.ci), nvml.SUCCESS
	}
	gi.DestroyFunc = func() nvml.Return {
		if gone() {
			return nvml.ERROR_GPU_IS_LOST
		}
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		switch {
		case gi.destroyed:
			return nvml.ERROR_INVALID_ARGUMENT
		case gi.ci != nil:
			return nvml.ERROR_IN_USE
		}
		gi.destroyed = true
		delete(d.gis, int(gi.info.Id))
		return nvml.SUCCESS
	}
	return gi
}

// computeProfiles are the compute instance profiles (COMPUTE_INSTANCE_PROFILE_*) of a whole GPU
// instance, by its compute slices.
var computeProfiles = map[int]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
}

func (gi *gpuInstance) createComputeInstance(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	d := gi.dev
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if whole, ok := computeProfiles[gi.g]; !ok || info.Id != uint32(whole) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	switch {
	case gi.destroyed:
		return nil, nvml.ERROR_INVALID_ARGUMENT
	case gi.ci != nil:
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	pl := gi.info.Placement
	profileMiB := int64(pl.Size) * d.card.MemoryMiB / MemorySlices
	in := Instance{UUID: createdMIGUUID(d.card.UUID, d.created), Profile: gi.profile, GI: int(gi.info.Id), CI: 0,
		Start: int(pl.Start), Size: int(pl.Size), MemoryMiB: profileMiB, SMs: SMsPerSlice * gi.g, Healthy: true,
		G: gi.g, C: gi.g, ProfileMiB: profileMiB}
	d.created++
	m := &migDevice{in: in, parent: d}
	m.setFuncs()
	k := 0
	for k < len(d.migs) && d.migs[k] != nil {
		k++
	}
	if k == len(d.migs) {
		d.migs = append(d.migs, m)
	} else {
		d.migs[k] = m
	}
	gi.ci = m
	return gi.computeInstance(m), nvml.SUCCESS
}

// computeInstance is the NVML handle of gi's compute instance m (s.mu held).
func (gi *gpuInstance) computeInstance(m *migDevice) nvml.ComputeInstance {
	d := gi.dev
	ci := &mock.ComputeInstance{}
	info := nvml.ComputeInstanceInfo{Device: d, GpuInstance: gi, Id: uint32(m.in.CI), ProfileId: uint32(computeProfiles[gi.g]),
		Placement: nvml.ComputeInstancePlacement{Start: 0, Size: uint32(gi.g)}}
	ci.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
		if d.faultIs(FaultLost) {
			return nvml.ComputeInstanceInfo{}, nvml.ERROR_GPU_IS_LOST
		}
		return info, nvml.SUCCESS
	}
	ci.DestroyFunc = func() nvml.Return {
		if d.faultIs(FaultLost) {
			return nvml.ERROR_GPU_IS_LOST
		}
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		if gi.ci != m {
			return nvml.ERROR_INVALID_ARGUMENT // destroyed already
		}
		gi.ci = nil
		for k := range d.migs {
			if d.migs[k] == m {
				d.migs[k] = nil
			}
		}
		return nvml.SUCCESS
	}
	return ci
}

// createdMIGUUID is the UUID of the n-th MIG device created on the card with UUID parent: a
// name-based UUID, so that a run is reproducible, and never one a file's instance has.
func createdMIGUUID(parent string, n int) string {
	return "MIG-" + uuid.NewSHA1(uuidSpace, []byte(parent+"/created/"+strconv.Itoa(n))).String()
}

// modelProfileIndex is the NVML GPU instance profile index (GPU_INSTANCE_PROFILE_*) of a profile
// of a migplace model, as layInstances finds it for a file's profile.
func modelProfileIndex(p *migplace.Profile) (int, bool) {
	name, err := migplace.ParseProfile(p.Name)
	if err != nil {
		return 0, false
	}
	switch {
	case name.Attr != "":
		index, ok := attributeProfiles[name.Attr][name.G]
		return index, ok
	case name.G == 1 && p.Size == 2:
		return nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, true
	}
	index, ok := baseProfiles[name.G]
	return index, ok
}

// addModelProfiles adds to profiles (by NVML profile index) every profile of the card's model the
// file's instances do not already give.
func (d *device) addModelProfiles(profiles map[int]nvml.GpuInstanceProfileInfo) {
	if d.model == nil {
		return
	}
	for i := range d.model.Profiles {
		p := &d.model.Profiles[i]
		index, ok := modelProfileIndex(p)
		if _, have := profiles[index]; !ok || have {
			continue
		}
		profiles[index] = nvml.GpuInstanceProfileInfo{Id: uint32(p.ID), SliceCount: uint32(p.Compute), InstanceCount: uint32(p.MaxCount),
			MultiprocessorCount: uint32(SMsPerSlice * p.Compute), MemorySizeMB: uint64(int64(p.Size) * d.card.MemoryMiB / MemorySlices)}
	}
}

// modelProfile returns the index in d.model of the profile with NVML profile ID id.
func (d *device) modelProfile(id uint32) (int, bool) {
	if d.model == nil {
		return 0, false
	}
	for i := range d.model.Profiles {
		if uint32(d.model.Profiles[i].ID) == id {
			return i, true
		}
	}
	return 0, false
}

// migCardLocked is the card's MIG state in migplace's terms: the slices of its GPU instances
// (s.mu held).
func (d *device) migCardLocked() (migplace.Card, error) {
	held := make([]migplace.Held, 0, len(d.gis))
	for _, gi := range d.gis {
		held = append(held, migplace.Held{Profile: gi.profile,
			Placement: migplace.Placement{Start: int(gi.info.Placement.Start), Size: int(gi.info.Placement.Size)}})
	}
	return migplace.CardWith(d.model, held)
}

// setDynamicFuncs answers GetGpuInstancePossiblePlacements and CreateGpuInstanceWithPlacement.
func (d *device) setDynamicFuncs() {
	gone := func() bool { return d.faultIs(FaultLost) }
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		switch {
		case gone():
			return nil, nvml.ERROR_GPU_IS_LOST
		case info == nil:
			return nil, nvml.ERROR_INVALID_ARGUMENT
		case d.migMode() == nil:
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		i, ok := d.modelProfile(info.Id)
		if !ok {
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		pls := d.model.Profiles[i].Placements()
		out := make([]nvml.GpuInstancePlacement, len(pls))
		for k, pl := range pls {
			out[k] = nvml.GpuInstancePlacement{Start: uint32(pl.Start), Size: uint32(pl.Size)}
		}
		return out, nvml.SUCCESS
	}
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, placement *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		switch {
		case gone():
			return nil, nvml.ERROR_GPU_IS_LOST
		case info == nil || placement == nil:
			return nil, nvml.ERROR_INVALID_ARGUMENT
		case !d.migCurrent():
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		i, ok := d.modelProfile(info.Id)
		if !ok {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return d.createGPUInstance(i, migplace.Placement{Start: int(placement.Start), Size: int(placement.Size)})
	}
}

// createGPUInstance creates a GPU instance of model profile i at pl, as migplace's rules allow.
func (d *device) createGPUInstance(i int, pl migplace.Placement) (nvml.GpuInstance, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	c, err := d.migCardLocked()
	if err != nil {
		return nil, nvml.ERROR_UNKNOWN // the file's instances overlap: Load refuses such a file
	}
	switch err := c.Check(i, pl); {
	case errors.Is(err, migplace.ErrNotLegal), errors.Is(err, migplace.ErrUnknown):
		return nil, nvml.ERROR_INVALID_ARGUMENT
	case err != nil:
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	id := 1
	for d.gis[id] != nil {
		id++
	}
	p := &d.model.Profiles[i]
	gi := d.newGPUInstance(id, uint32(p.ID), p.Name, p.Compute, pl)
	d.gis[id] = gi
	return gi, nvml.SUCCESS
}

// maxMIGDevicesLocking is maxMIGDevices, taking s.mu.
func (d *device) maxMIGDevicesLocking() int {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	return d.maxMIGDevices()
}
