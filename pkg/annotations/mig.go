package annotations

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// MIG (Multi-Instance GPU) in the contract. A card in MIG mode is split by its operator (static
// MIG: nvidia-smi, mig-parted or the GPU operator) into instances, each with its own memory, cache
// and SMs. Cardinal serves instances as devices of their own: one extended resource per profile,
// as NVIDIA's "mixed" strategy names them (nvidia.com/mig-1g.10gb), device IDs the MIG UUIDs. A
// card in MIG mode never serves as a whole card: its inventory entry says healthy false (so that
// readers older than the mig field never place a whole-card container on it) and lists its
// instances under mig.

// MIG modes of the inventory (MIG.Mode), as NVML's GetMigMode reports current and pending.
const (
	// MIGEnabled: MIG mode is in force; the instances listed are served.
	MIGEnabled = "enabled"
	// MIGEnabling: MIG mode takes effect at the card's next reset; no instance exists yet, and the
	// card is not served whole either.
	MIGEnabling = "enabling"
)

// MaxMIGInstances bounds the instances of one card (an A100 or H100 has at most 7 GPU instances;
// compute instances can split one further, up to 7 each).
const MaxMIGInstances = 56

// maxMIGSlices bounds an instance's placement (start + size), in memory slices: an A100 or H100 has
// 8, and the bound leaves room for larger cards.
const maxMIGSlices = 64

// MIG is the optional "mig" field of an inventory card: the card is in MIG mode (now or after its
// next reset). Added in v1 without a version change: older readers ignore it, and see the card
// unhealthy.
type MIG struct {
	// Mode is MIGEnabled or MIGEnabling.
	Mode string `json:"mode"`
	// Instances are the card's MIG devices (one per compute instance), in NVML's order; empty
	// unless Mode is MIGEnabled.
	Instances []MIGInstance `json:"instances,omitempty"`
	// DynamicV is the version of Dynamic (MIGDynamicVersion); 0 when Dynamic is empty. Added in v1
	// without an inventory version change; a reader refuses a DynamicV it does not know.
	DynamicV int `json:"dynamicV,omitempty"`
	// Dynamic is set when the card is in a dynamic MIG pool (issue 40): the profiles the device
	// plugin creates instances of on demand (the pool's allow-list, those the card has), each with
	// every legal placement (NVML's GetGpuInstancePossiblePlacements). The placements occupied are
	// those of Instances (start, size); a placement that overlaps one is not free. Only in mode
	// MIGEnabled.
	Dynamic []MIGDynamicProfile `json:"dynamic,omitempty"`
}

// MIGDynamicVersion is the version of MIG.Dynamic this package writes and reads.
const MIGDynamicVersion = 1

// MaxMIGDynamicProfiles bounds a card's dynamic profiles (an A100 or H100 has 7 GPU instance
// profiles; newer cards a few more).
const MaxMIGDynamicProfiles = 32

// MIGDynamicProfile is a GPU instance profile the plugin may create on a card, and where.
type MIGDynamicProfile struct {
	// Profile is the GPU instance profile as nvidia-smi names it (3g.40gb, 1g.10gb+me); no
	// compute instance prefix: the plugin creates one compute instance of the whole GPU instance.
	Profile string `json:"profile"`
	// Size is the profile's placement size in memory slices (every placement of a profile has it).
	Size int `json:"size"`
	// Starts are the legal start slots, ascending.
	Starts []int `json:"starts"`
}

// MIGInstance is one MIG device: a compute instance inside a GPU instance of its parent card.
type MIGInstance struct {
	// UUID is the MIG device's UUID (MIG-…), its device ID and the name NVIDIA_VISIBLE_DEVICES takes.
	UUID string `json:"uuid"`
	// Profile is the GPU instance profile as nvidia-smi names it: 1g.10gb, 3g.40gb, 1g.10gb+me;
	// with a compute instance smaller than its GPU instance, <c>c.<profile> (1c.3g.40gb).
	Profile string `json:"profile"`
	// GI and CI are the GPU instance and compute instance IDs on the parent.
	GI int `json:"gi"`
	CI int `json:"ci"`
	// Start and Size are the GPU instance's placement on the parent, in memory slices.
	Start int `json:"start"`
	Size  int `json:"size"`
	// MemoryMiB is the instance's memory; SMs its multiprocessor count.
	MemoryMiB int64 `json:"memoryMiB"`
	SMs       int   `json:"sms"`
	// Healthy is false when an XID was reported on the instance, or the parent card is unhealthy.
	Healthy bool `json:"healthy"`
}

// migProfile is what a MIG profile looks like: [<c>c.]<g>g.<mem>gb, then attributes (+me, +gfx,
// -me, +me.all …) as newer drivers add them.
var migProfile = regexp.MustCompile(`^([1-9][0-9]?c\.)?[1-9][0-9]?g\.[1-9][0-9]{0,3}gb([+-][a-z][a-z0-9]{0,7}(\.[a-z][a-z0-9]{0,7})?){0,4}$`)

// migProfileKey is what a profile key looks like: a profile with its '+' written '.'.
var migProfileKey = regexp.MustCompile(`^([1-9][0-9]?c\.)?[1-9][0-9]?g\.[1-9][0-9]{0,3}gb([.-][a-z][a-z0-9]{0,7}){0,4}$`)

// migComputePrefix is a compute instance prefix (<c>c.) at the start of a profile.
var migComputePrefix = regexp.MustCompile(`^[1-9][0-9]?c\.`)

func validMIGProfileKey(k string) bool { return migProfileKey.MatchString(k) }

// ValidMIGProfile reports whether p is a MIG profile name Cardinal can serve.
func ValidMIGProfile(p string) bool { return migProfile.MatchString(p) }

// MIGProfileKey is the profile as it appears in a resource name: a Kubernetes resource name allows
// no '+', so 1g.10gb+me is served as nvidia.com/mig-1g.10gb.me (and 1g.10gb-me, allowed as it is,
// keeps its '-'). The key is what requests and instances are matched by.
func MIGProfileKey(profile string) string { return strings.ReplaceAll(profile, "+", ".") }

// migResourcePrefix is the part of a MIG resource's name after the domain.
const migResourcePrefix = "mig-"

// MIGResource is the extended resource that serves instances of profile: the domain of the GPU
// resource (nvidia.com), then mig-<key>.
func (n ResourceNames) MIGResource(profile string) corev1.ResourceName {
	return corev1.ResourceName(n.migPrefix() + MIGProfileKey(profile))
}

// MIGProfileKeyOf returns the profile key of a MIG resource name, or false when name is not one.
func (n ResourceNames) MIGProfileKeyOf(name corev1.ResourceName) (string, bool) {
	key, ok := strings.CutPrefix(string(name), n.migPrefix())
	if !ok || key == "" {
		return "", false
	}
	return key, true
}

// IsMIGResource reports whether name is a MIG resource (<domain>/mig-…).
func (n ResourceNames) IsMIGResource(name corev1.ResourceName) bool {
	_, ok := n.MIGProfileKeyOf(name)
	return ok
}

// MIGResourcePrefix is what every MIG resource's name starts with: the domain of the GPU resource,
// then "/mig-" (nvidia.com/mig-). Admission's match conditions test names against it.
func (n ResourceNames) MIGResourcePrefix() string { return n.migPrefix() }

func (n ResourceNames) migPrefix() string {
	domain, _, _ := strings.Cut(string(n.GPU), "/")
	return domain + "/" + migResourcePrefix
}

// MIGResources lists the MIG resources a set of cards serves, one per profile key, in the order the
// cards and instances list them.
func (n ResourceNames) MIGResources(gpus []GPU) []corev1.ResourceName {
	var out []corev1.ResourceName
	seen := map[corev1.ResourceName]bool{}
	for i := range gpus {
		if gpus[i].MIG == nil {
			continue
		}
		for _, in := range gpus[i].MIG.Instances {
			r := n.MIGResource(in.Profile)
			if !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	return out
}

// Instance returns the MIG instance of the card with the given UUID, or nil.
func (g *GPU) Instance(uuid string) *MIGInstance {
	if g.MIG == nil {
		return nil
	}
	for i := range g.MIG.Instances {
		if g.MIG.Instances[i].UUID == uuid {
			return &g.MIG.Instances[i]
		}
	}
	return nil
}

// validate checks the mig field of card i; seen holds every UUID met so far (cards and instances:
// a device ID names one device of the node).
func (m *MIG) validate(i int, seen map[string]bool) error {
	switch m.Mode {
	case MIGEnabled:
	case MIGEnabling:
		if len(m.Instances) > 0 {
			return errorf(GPUInventory, "gpus[%d].mig.instances: %d listed while mode is %s (instances exist only in mode %s)", i, len(m.Instances), MIGEnabling, MIGEnabled)
		}
	default:
		return errorf(GPUInventory, "gpus[%d].mig.mode: %q is not %s or %s", i, m.Mode, MIGEnabled, MIGEnabling)
	}
	if err := m.validateDynamic(i); err != nil {
		return err
	}
	if len(m.Instances) > MaxMIGInstances {
		return errorf(GPUInventory, "gpus[%d].mig.instances: %d listed, at most %d", i, len(m.Instances), MaxMIGInstances)
	}
	for j := range m.Instances {
		in := &m.Instances[j]
		at := fmt.Sprintf("gpus[%d].mig.instances[%d]", i, j)
		if err := checkUUID(in.UUID); err != nil {
			return errorf(GPUInventory, "%s.uuid: %v", at, err)
		}
		if seen[in.UUID] {
			return errorf(GPUInventory, "%s.uuid: %s appears twice", at, in.UUID)
		}
		seen[in.UUID] = true
		switch {
		case !ValidMIGProfile(in.Profile):
			return errorf(GPUInventory, "%s.profile: %q is not a MIG profile (like 1g.10gb, 3g.40gb, 1g.10gb+me, 1c.3g.40gb)", at, in.Profile)
		case in.GI < 0 || in.CI < 0:
			return errorf(GPUInventory, "%s: gi %d, ci %d: IDs are not negative", at, in.GI, in.CI)
		// Not start+size > maxMIGSlices: with a start near the end of int's range the sum wraps round.
		case in.Start < 0 || in.Size < 1 || in.Size > maxMIGSlices || in.Start > maxMIGSlices-in.Size:
			return errorf(GPUInventory, "%s: placement start %d size %d is not within 0..%d slices", at, in.Start, in.Size, maxMIGSlices)
		case in.MemoryMiB < 0:
			return errorf(GPUInventory, "%s.memoryMiB: %d is negative", at, in.MemoryMiB)
		case in.SMs < 0:
			return errorf(GPUInventory, "%s.sms: %d is negative", at, in.SMs)
		}
	}
	return nil
}

// normalize makes empty lists nil, as the encoder leaves them out: "instances":[] decodes as no
// instances, the same value an encode and decode gives back.
func (m *MIG) normalize() {
	if len(m.Instances) == 0 {
		m.Instances = nil
	}
	if len(m.Dynamic) == 0 {
		m.Dynamic = nil
	}
}

// validateDynamic checks the dynamicV and dynamic fields of card i.
func (m *MIG) validateDynamic(i int) error {
	switch {
	case len(m.Dynamic) == 0 && m.DynamicV == 0:
		return nil
	case len(m.Dynamic) == 0:
		return errorf(GPUInventory, "gpus[%d].mig.dynamicV: %d with no dynamic profiles", i, m.DynamicV)
	case m.DynamicV != MIGDynamicVersion:
		return errorf(GPUInventory, "gpus[%d].mig.dynamicV: %d is not a version this reader knows (%d)", i, m.DynamicV, MIGDynamicVersion)
	case m.Mode != MIGEnabled:
		return errorf(GPUInventory, "gpus[%d].mig.dynamic: listed while mode is %s (dynamic profiles exist only in mode %s)", i, m.Mode, MIGEnabled)
	case len(m.Dynamic) > MaxMIGDynamicProfiles:
		return errorf(GPUInventory, "gpus[%d].mig.dynamic: %d profiles, at most %d", i, len(m.Dynamic), MaxMIGDynamicProfiles)
	}
	seen := map[string]bool{}
	for j := range m.Dynamic {
		d := &m.Dynamic[j]
		at := fmt.Sprintf("gpus[%d].mig.dynamic[%d]", i, j)
		switch {
		case !ValidMIGProfile(d.Profile) || migComputePrefix.MatchString(d.Profile):
			return errorf(GPUInventory, "%s.profile: %q is not a GPU instance profile (like 1g.10gb, 3g.40gb, 1g.10gb+me; no <c>c. prefix)", at, d.Profile)
		case seen[MIGProfileKey(d.Profile)]:
			return errorf(GPUInventory, "%s.profile: %s appears twice", at, d.Profile)
		case d.Size < 1 || d.Size > maxMIGSlices:
			return errorf(GPUInventory, "%s.size: %d is not within 1..%d slices", at, d.Size, maxMIGSlices)
		case len(d.Starts) == 0 || len(d.Starts) > maxMIGSlices:
			return errorf(GPUInventory, "%s.starts: %d listed, 1..%d", at, len(d.Starts), maxMIGSlices)
		}
		seen[MIGProfileKey(d.Profile)] = true
		for k, s := range d.Starts {
			switch {
			case s < 0 || s > maxMIGSlices-d.Size:
				return errorf(GPUInventory, "%s.starts[%d]: %d with size %d is not within 0..%d slices", at, k, s, d.Size, maxMIGSlices)
			case k > 0 && s <= d.Starts[k-1]:
				return errorf(GPUInventory, "%s.starts[%d]: %d is not above %d (ascending, no repeats)", at, k, s, d.Starts[k-1])
			}
		}
	}
	return nil
}
