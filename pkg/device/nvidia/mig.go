package nvidia

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NoInstance is the GPU or compute instance ID of an NVML event that names no MIG instance.
const NoInstance = 0xFFFFFFFF

// maxMIGDevices bounds the MIG devices discovery asks a card for: an A100 or H100 has at most 7 GPU
// instances, each split into at most 7 compute instances; a larger count is NVML's mistake.
const maxMIGDevices = 64

// MIG profile attributes as nvidia-smi appends them to a profile's name, by the GPU instance profile
// (NVML's GPU_INSTANCE_PROFILE_* index) that carries them: +me is the variant of a small profile with
// the card's media extensions (decoders, JPEG, OFA), -me one without any, +me.all one with all of
// them, +gfx one with graphics. Profiles not listed (the base ones, and REV2: 1g with twice the
// memory, 1g.20gb on an 80 GB card) have no attribute.
var migProfileAttributes = map[int]string{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1:   "+me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:   "+me",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME:  "-me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:  "-me",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: "+me.all",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: "+me.all",
}

// MIGProfileAttribute returns the attribute suffix nvidia-smi gives the GPU instance profile at an
// NVML profile index (GPU_INSTANCE_PROFILE_*): "+me", "-me", "+me.all", "+gfx", or "".
func MIGProfileAttribute(profile int) string { return migProfileAttributes[profile] }

// MIGMemoryGB is the <mem>gb of a profile's name as nvidia-smi prints it: the profile's share of the
// card's memory rounded up to eighths (a card has 8 memory slices), times the card's memory in GB
// rounded up, rounded to the nearest GB. 9856 MiB on an 81920 MiB card: 1/8 of 80 GB, "10gb";
// 40192 MiB: 4/8, "40gb". 0 when the card's memory is unknown.
func MIGMemoryGB(profileMiB, cardMiB int64) int {
	if profileMiB <= 0 || cardMiB <= 0 {
		return 0
	}
	eighths := (profileMiB*8 + cardMiB - 1) / cardMiB
	cardGB := (cardMiB + 1023) / 1024
	return int((eighths*cardGB + 4) / 8)
}

// MIGProfileName names a MIG device's profile as nvidia-smi does: <g>g.<mem>gb and the GPU instance
// profile's attribute (1g.10gb+me), with <c>c. before it when the compute instance has fewer slices
// than its GPU instance (1c.3g.40gb). profile is the NVML profile index, g its compute slices, c the
// compute instance's slices (0: as many as g), profileMiB its memory and cardMiB the card's.
func MIGProfileName(profile, g, c int, profileMiB, cardMiB int64) string {
	name := fmt.Sprintf("%dg.%dgb%s", g, MIGMemoryGB(profileMiB, cardMiB), MIGProfileAttribute(profile))
	if c > 0 && c < g {
		name = fmt.Sprintf("%dc.%s", c, name)
	}
	return name
}

// instances describes the MIG devices of card c (handle d), whose MIG mode is in force, in NVML's
// index order. Only a failure to count them is an error (the card's); an instance NVML cannot
// describe is listed with Fault set and what NVML did report, so one bad instance never hides the
// others.
func instances(d nvml.Device, c Card) ([]MIGInstance, error) {
	n, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("count MIG devices of %s: %w", c.UUID, ret)
	}
	if n < 0 || n > maxMIGDevices {
		return nil, fmt.Errorf("%s reports %d MIG devices (at most %d)", c.UUID, n, maxMIGDevices)
	}
	profiles := &giProfiles{dev: d}
	var out []MIGInstance
	for i := 0; i < n; i++ {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_FOUND:
			continue // no MIG device at this index
		default:
			out = append(out, MIGInstance{Fault: fmt.Sprintf("get handle of MIG device %d of %s: %v", i, c.UUID, ret)})
			continue
		}
		in, err := describeInstance(m, d, c, i, profiles)
		if err != nil {
			in.Fault = err.Error()
		}
		out = append(out, in)
	}
	return out, nil
}

// describeInstance describes MIG device m (index i) of card c: its own facts from the MIG handle,
// its placement and profile from its GPU instance on the parent d.
func describeInstance(m, d nvml.Device, c Card, i int, profiles *giProfiles) (MIGInstance, error) {
	var in MIGInstance
	u, ret := m.GetUUID()
	if ret != nvml.SUCCESS {
		return in, fmt.Errorf("get UUID of MIG device %d of %s: %w", i, c.UUID, ret)
	}
	if u == "" {
		return in, fmt.Errorf("MIG device %d of %s reports an empty UUID", i, c.UUID)
	}
	in.UUID = u
	if in.GI, ret = m.GetGpuInstanceId(); ret != nvml.SUCCESS {
		return in, fmt.Errorf("get GPU instance ID of %s: %w", u, ret)
	}
	if in.CI, ret = m.GetComputeInstanceId(); ret != nvml.SUCCESS {
		return in, fmt.Errorf("get compute instance ID of %s: %w", u, ret)
	}
	attrs, ret := m.GetAttributes()
	if ret != nvml.SUCCESS {
		return in, fmt.Errorf("get attributes of %s: %w", u, ret)
	}
	in.MemoryMiB = int64(attrs.MemorySizeMB)
	in.SMs = int(attrs.MultiprocessorCount)
	gi, ret := d.GetGpuInstanceById(in.GI)
	if ret == nvml.ERROR_NO_PERMISSION {
		return in, fmt.Errorf("get GPU instance %d of %s (for %s): %w (NVML lets a process see GPU instances with the MIG monitor capability: "+
			"give the device plugin NVIDIA_MIG_MONITOR_DEVICES=all and the SYS_ADMIN capability, as NVIDIA's device plugin has)", in.GI, c.UUID, u, ret)
	}
	if ret != nvml.SUCCESS {
		return in, fmt.Errorf("get GPU instance %d of %s (for %s): %w", in.GI, c.UUID, u, ret)
	}
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return in, fmt.Errorf("get GPU instance %d of %s (for %s): %w", in.GI, c.UUID, u, ret)
	}
	in.Start, in.Size = int(info.Placement.Start), int(info.Placement.Size)
	index, prof, ok := profiles.byID(info.ProfileId)
	if !ok {
		return in, fmt.Errorf("GPU instance %d of %s (for %s) has profile ID %d, which the card does not list", in.GI, c.UUID, u, info.ProfileId)
	}
	if prof.SliceCount == 0 || MIGMemoryGB(int64(prof.MemorySizeMB), c.MemoryMiB) == 0 {
		return in, fmt.Errorf("profile ID %d of %s (for %s) has %d slices and %d MiB: no MIG profile", info.ProfileId, c.UUID, u, prof.SliceCount, prof.MemorySizeMB)
	}
	in.Profile = MIGProfileName(index, int(prof.SliceCount), int(attrs.ComputeInstanceSliceCount), int64(prof.MemorySizeMB), c.MemoryMiB)
	return in, nil
}

// giProfiles finds a card's GPU instance profiles by their ID (what a GPU instance reports) once, on
// first use: NVML numbers profiles two ways, an index (GPU_INSTANCE_PROFILE_*, which says the
// variant: +me, +gfx…) and an ID of the card (19 for 1g.10gb on an A100), and only the index tells
// the name.
type giProfiles struct {
	dev   nvml.Device
	ids   map[uint32]int
	infos map[int]nvml.GpuInstanceProfileInfo
}

func (p *giProfiles) byID(id uint32) (int, nvml.GpuInstanceProfileInfo, bool) {
	if p.ids == nil {
		p.ids, p.infos = map[uint32]int{}, map[int]nvml.GpuInstanceProfileInfo{}
		for k := 0; k < nvml.GPU_INSTANCE_PROFILE_COUNT; k++ {
			info, ret := p.dev.GetGpuInstanceProfileInfo(k)
			if ret != nvml.SUCCESS {
				continue // a profile the card does not have
			}
			if _, dup := p.ids[info.Id]; !dup {
				p.ids[info.Id], p.infos[k] = k, info
			}
		}
	}
	k, ok := p.ids[id]
	return k, p.infos[k], ok
}
