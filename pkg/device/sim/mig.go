package sim

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/migplace"
)

// The simulated MIG geometry, A100-like: a card has 8 memory slices and 7 compute slices; a GPU
// instance of <g>g has g compute slices and SMsPerSlice SMs per compute slice.
const (
	MemorySlices  = 8
	ComputeSlices = 7
	SMsPerSlice   = 14
)

// Instance is one simulated MIG device: a GPU instance with one compute instance.
type Instance struct {
	UUID string
	// Profile is the profile's name as the file gives it, which is what discovery names it back.
	Profile string
	// GI is the GPU instance ID (1, 2, … in file order), CI the compute instance ID (0).
	GI, CI int
	// Start and Size are the GPU instance's placement in memory slices.
	Start, Size int
	MemoryMiB   int64
	SMs         int
	Healthy     bool
	// G and C are the compute slices of the GPU instance and of its compute instance.
	G, C int
	// ProfileIndex is the NVML GPU instance profile (GPU_INSTANCE_PROFILE_*), ProfileMiB its memory.
	ProfileIndex int
	ProfileMiB   int64
}

// profileSyntax is what the file's profile names look like: [<c>c.]<g>g.<mem>gb[attribute].
var profileSyntax = regexp.MustCompile(`^(?:([1-9])c\.)?([1-9])g\.([1-9][0-9]{0,3})gb(\+me|\+me\.all|-me|\+gfx)?$`)

// baseProfiles are the NVML GPU instance profiles without attributes, by compute slices.
var baseProfiles = map[int]int{
	1: nvml.GPU_INSTANCE_PROFILE_1_SLICE,
	2: nvml.GPU_INSTANCE_PROFILE_2_SLICE,
	3: nvml.GPU_INSTANCE_PROFILE_3_SLICE,
	4: nvml.GPU_INSTANCE_PROFILE_4_SLICE,
	7: nvml.GPU_INSTANCE_PROFILE_7_SLICE,
}

// attributeProfiles are the NVML GPU instance profiles with an attribute, by attribute and compute
// slices (NVML has them for these sizes only).
var attributeProfiles = map[string]map[int]int{
	"+me":     {1: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 2: nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1},
	"-me":     {1: nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, 2: nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME},
	"+me.all": {1: nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, 2: nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME},
	"+gfx":    {1: nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, 2: nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, 4: nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX},
}

// profileIDs are the IDs the simulated cards give their GPU instance profiles, by NVML profile
// index: an A100's where it has the profile (nvidia-smi mig -lgip), made up (32 + index) otherwise.
// Discovery must find a GPU instance's profile by this ID, as on a real card.
var profileIDs = map[int]uint32{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:      19,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15,
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:      14,
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      9,
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:      5,
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      0,
}

func profileID(index int) uint32 {
	if id, ok := profileIDs[index]; ok {
		return id
	}
	return uint32(32 + index)
}

// parsedProfile is a profile name taken apart.
type parsedProfile struct {
	c, g, gb int
	attr     string
}

func parseProfile(p string) (parsedProfile, error) {
	m := profileSyntax.FindStringSubmatch(p)
	if m == nil {
		return parsedProfile{}, fmt.Errorf("%q is not a MIG profile (<g>g.<mem>gb, optionally <c>c. before it and +me, -me, +me.all or +gfx after it, as 1g.10gb, 1g.10gb+me, 1c.3g.40gb)", p)
	}
	var out parsedProfile
	out.g, _ = strconv.Atoi(m[2])
	out.gb, _ = strconv.Atoi(m[3])
	out.attr = m[4]
	out.c = out.g
	if m[1] != "" {
		out.c, _ = strconv.Atoi(m[1])
		if out.c >= out.g {
			return parsedProfile{}, fmt.Errorf("%q: a compute instance prefix names fewer slices than the GPU instance (%dc of %dg)", p, out.c, out.g)
		}
	}
	if _, ok := baseProfiles[out.g]; !ok {
		return parsedProfile{}, fmt.Errorf("%q: %dg is not a simulated GPU instance size (1g, 2g, 3g, 4g, 7g)", p, out.g)
	}
	if out.attr != "" {
		if _, ok := attributeProfiles[out.attr][out.g]; !ok {
			return parsedProfile{}, fmt.Errorf("%q: NVML has no %dg profile with %s", p, out.g, out.attr)
		}
	}
	return out, nil
}

// layInstances expands a card's instance entries, places them first-fit in file order on the card's
// memory slices and checks that they fit. seen holds the node's UUIDs so far (cards and instances).
func layInstances(where, node string, c Card, entries []InstanceEntry, seen map[string]int) ([]Instance, error) {
	if c.MIG == nil || !c.MIG.Current {
		return nil, fmt.Errorf("%s.mig.instances: a card has MIG instances only with mig.current %s", where, MIGEnabled)
	}
	var out []Instance
	var used [MemorySlices]bool
	compute := 0
	// profiles: a card has one GPU instance profile per NVML profile index.
	profiles := map[int]string{}
	for j, e := range entries {
		at := fmt.Sprintf("%s.mig.instances[%d]", where, j)
		p, err := parseProfile(e.Profile)
		if err != nil {
			return nil, fmt.Errorf("%s.profile: %w", at, err)
		}
		// The profile takes the fewest eighths of the card's memory that NVML names <mem>gb
		// (nvidia.MIGMemoryGB): its placement size, in memory slices.
		size, profileMiB := 0, int64(0)
		var names []string
		for e := 1; e <= MemorySlices && size == 0; e++ {
			mib := int64(e) * c.MemoryMiB / MemorySlices
			gb := nvidia.MIGMemoryGB(mib, c.MemoryMiB)
			if gb == p.gb {
				size, profileMiB = e, mib
			}
			names = append(names, strconv.Itoa(gb)+"gb")
		}
		if size == 0 {
			return nil, fmt.Errorf("%s.profile: %q: on a card of %d MiB, NVML names profiles by eighths of its memory: %s", at, e.Profile, c.MemoryMiB, strings.Join(names, ", "))
		}
		index := baseProfiles[p.g]
		switch {
		case p.attr != "":
			index = attributeProfiles[p.attr][p.g]
		case p.g == 1 && size == 2:
			index = nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2
		case p.g == 1 && size > 2:
			return nil, fmt.Errorf("%s.profile: %q: a 1g profile takes one or two eighths of the card's memory, not %d", at, e.Profile, size)
		}
		if prev, ok := profiles[index]; ok && prev != fmt.Sprintf("%dg.%dgb", p.g, p.gb) {
			return nil, fmt.Errorf("%s.profile: %q: the card already has %s, and NVML gives a card one profile of each kind", at, e.Profile, prev)
		}
		profiles[index] = fmt.Sprintf("%dg.%dgb", p.g, p.gb)
		count := e.Count
		switch {
		case count == 0:
			count = 1
		case count < 0 || count > ComputeSlices:
			return nil, fmt.Errorf("%s.count: %d is not in 1..%d", at, e.Count, ComputeSlices)
		}
		if e.UUID != "" {
			if count != 1 {
				return nil, fmt.Errorf("%s.uuid: set, so count must be 1 (not %d)", at, count)
			}
			if _, slot, err := annotations.ParseDeviceID(e.UUID); err != nil || slot >= 0 || !strings.HasPrefix(e.UUID, "MIG-") {
				return nil, fmt.Errorf("%s.uuid: %q is not a MIG UUID (MIG-…)", at, e.UUID)
			}
		}
		if e.MemoryMiB < 0 || e.MemoryMiB > c.MemoryMiB {
			return nil, fmt.Errorf("%s.memoryMiB: %d is not in 0..%d (the card's)", at, e.MemoryMiB, c.MemoryMiB)
		}
		if e.SMs < 0 || e.SMs > 1024 {
			return nil, fmt.Errorf("%s.sms: %d is not in 0..1024", at, e.SMs)
		}
		for n := 0; n < count; n++ {
			k := len(out)
			compute += p.g
			if compute > ComputeSlices {
				return nil, fmt.Errorf("%s.profile: instance %d (%s) needs %d compute slices in all, a card has %d", at, k, e.Profile, compute, ComputeSlices)
			}
			start := -1
			for s := 0; s+size <= MemorySlices && start < 0; s += size {
				if !slicesUsed(used[s : s+size]) {
					start = s
				}
			}
			if start < 0 {
				return nil, fmt.Errorf("%s.profile: instance %d (%s, %d memory slices) does not fit in the card's %d slices after the instances before it (placed first-fit in file order)", at, k, e.Profile, size, MemorySlices)
			}
			for s := start; s < start+size; s++ {
				used[s] = true
			}
			in := Instance{UUID: e.UUID, Profile: e.Profile, GI: k + 1, Start: start, Size: size, MemoryMiB: min(int64(p.gb)*1024, c.MemoryMiB),
				SMs: SMsPerSlice * p.c, Healthy: e.Healthy == nil || *e.Healthy, G: p.g, C: p.c, ProfileIndex: index, ProfileMiB: profileMiB}
			if in.UUID == "" {
				in.UUID = DerivedMIGUUID(node, c.Index, k)
			}
			if e.MemoryMiB > 0 {
				in.MemoryMiB = e.MemoryMiB
			}
			if e.SMs > 0 {
				in.SMs = e.SMs
			}
			if prev, dup := seen[in.UUID]; dup {
				return nil, fmt.Errorf("%s.uuid: instance %d of card %d has UUID %s, like a device of card %d", at, k, c.Index, in.UUID, prev)
			}
			seen[in.UUID] = c.Index
			out = append(out, in)
		}
	}
	return out, nil
}

func slicesUsed(s []bool) bool {
	for _, u := range s {
		if u {
			return true
		}
	}
	return false
}

// XidInstanceFault is the XID the simulator raises on a MIG instance that turns unhealthy: 69
// (graphics engine class error), a critical XID in neither the default ignored list nor the
// reset list, so the health checker marks only that instance.
const XidInstanceFault = 69

// migDevice is the NVML handle of one MIG device.
type migDevice struct {
	mock.Device
	in     Instance
	parent *device
	// lost is true while the instance is unhealthy: its memory query fails.
	lost bool
}

// maxMIGDevices is what GetMaxMigDeviceCount answers: an A100's 7, or more if the file has more.
// (s.mu held).
func (d *device) maxMIGDevices() int { return max(ComputeSlices, len(d.migs)) }

// migCurrent reports whether MIG mode is in force on the card now.
func (d *device) migCurrent() bool {
	m := d.migMode()
	return m != nil && m.Current
}

// setMIGFuncs answers the MIG calls of card d and of its MIG devices, as NVML does on a card in MIG
// mode: MIG devices by index, GPU instances by ID, GPU instance profiles by NVML profile index.
func (d *device) setMIGFuncs() {
	gone := func() bool { return d.faultIs(FaultLost) }
	profiles := map[int]nvml.GpuInstanceProfileInfo{}
	d.gis = map[int]*gpuInstance{}
	for _, in := range d.card.Instances {
		profiles[in.ProfileIndex] = nvml.GpuInstanceProfileInfo{Id: profileID(in.ProfileIndex), SliceCount: uint32(in.G),
			InstanceCount: uint32(ComputeSlices / in.G), MultiprocessorCount: uint32(SMsPerSlice * in.G), MemorySizeMB: uint64(in.ProfileMiB)}
		m := &migDevice{in: in, parent: d, lost: !in.Healthy}
		m.setFuncs()
		d.migs = append(d.migs, m)
		gi := d.newGPUInstance(in.GI, profileID(in.ProfileIndex), in.Profile, in.G, migplace.Placement{Start: in.Start, Size: in.Size})
		gi.ci = m
		d.gis[in.GI] = gi
	}
	d.model, _ = migplace.ModelFor(d.card.Model, d.card.MemoryMiB)
	d.addModelProfiles(profiles)
	d.setDynamicFuncs()
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		switch {
		case gone():
			return 0, nvml.ERROR_GPU_IS_LOST
		case d.migMode() == nil:
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return d.maxMIGDevicesLocking(), nvml.SUCCESS
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		switch {
		case gone():
			return nil, nvml.ERROR_GPU_IS_LOST
		case d.migMode() == nil:
			return nil, nvml.ERROR_NOT_SUPPORTED
		case i < 0 || i >= d.maxMIGDevicesLocking():
			return nil, nvml.ERROR_INVALID_ARGUMENT
		case !d.migCurrent():
			return nil, nvml.ERROR_NOT_FOUND
		}
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		if i >= len(d.migs) || d.migs[i] == nil {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return d.migs[i], nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		switch {
		case gone():
			return nil, nvml.ERROR_GPU_IS_LOST
		case d.migMode() == nil:
			return nil, nvml.ERROR_NOT_SUPPORTED
		}
		if !d.migCurrent() {
			return nil, nvml.ERROR_NOT_FOUND
		}
		d.srv.mu.Lock()
		defer d.srv.mu.Unlock()
		gi, ok := d.gis[id]
		if !ok {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return gi, nvml.SUCCESS
	}
	d.GetGpuInstanceProfileInfoFunc = func(p int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		switch {
		case gone():
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_GPU_IS_LOST
		case d.migMode() == nil:
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		case p < 0 || p >= nvml.GPU_INSTANCE_PROFILE_COUNT:
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		info, ok := profiles[p]
		if !ok {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return info, nvml.SUCCESS
	}
}

func (m *migDevice) isLost() bool {
	m.parent.srv.mu.Lock()
	defer m.parent.srv.mu.Unlock()
	return m.lost
}

func (m *migDevice) setFuncs() {
	in := m.in
	gone := func() bool { return m.parent.faultIs(FaultLost) }
	m.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	m.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return m.parent, nvml.SUCCESS }
	m.GetUUIDFunc = func() (string, nvml.Return) {
		if gone() {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return in.UUID, nvml.SUCCESS
	}
	m.GetNameFunc = func() (string, nvml.Return) {
		if gone() {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return m.parent.card.Model + " MIG " + in.Profile, nvml.SUCCESS
	}
	m.GetGpuInstanceIdFunc = func() (int, nvml.Return) {
		if gone() {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return in.GI, nvml.SUCCESS
	}
	m.GetComputeInstanceIdFunc = func() (int, nvml.Return) {
		if gone() {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return in.CI, nvml.SUCCESS
	}
	m.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		if gone() {
			return nvml.DeviceAttributes{}, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.DeviceAttributes{MultiprocessorCount: uint32(in.SMs), GpuInstanceSliceCount: uint32(in.G),
			ComputeInstanceSliceCount: uint32(in.C), MemorySizeMB: uint64(in.MemoryMiB)}, nvml.SUCCESS
	}
	m.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		switch {
		case gone():
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		case m.isLost():
			return nvml.Memory{}, nvml.ERROR_UNKNOWN
		}
		total := uint64(in.MemoryMiB) << 20
		return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
	}
}

// SetInstanceHealth turns a MIG instance unhealthy (it raises critical XID XidInstanceFault, naming
// its GPU and compute instance, on every event set its card is registered with, and its memory query
// fails) or healthy again. It reports whether the instance exists and its health changed.
func (s *Server) SetInstanceHealth(uuid string, healthy bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		for _, m := range d.migs {
			if m == nil || m.in.UUID != uuid {
				continue
			}
			if m.lost == !healthy {
				return false
			}
			m.lost = !healthy
			if !healthy {
				d.raiseOnLocked(XidInstanceFault, uint32(m.in.GI), uint32(m.in.CI))
			}
			return true
		}
	}
	return false
}

// InstanceHealthy reports the simulated health of a MIG instance.
func (s *Server) InstanceHealthy(uuid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		for _, m := range d.migs {
			if m != nil && m.in.UUID == uuid {
				return !m.lost
			}
		}
	}
	return false
}
