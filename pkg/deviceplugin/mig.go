package deviceplugin

import (
	"fmt"
	"slices"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
	"github.com/cardinal-gpu/cardinal/pkg/migplace"
)

// MIG instances as devices. A card in MIG mode (in force) serves its instances, each under the
// extended resource of its profile (annotations.ResourceNames.MIGResource: nvidia.com/mig-1g.10gb),
// with its MIG UUID as device ID and its parent's NUMA node as TopologyInfo; the card itself stays
// advertised Unhealthy under the GPU resource. An instance is one device held whole: it is a unit
// of its own for every rule that speaks of a card (distinct devices, who holds it), and its
// parent's model, UUID and NUMA node are what selectors and topology see.
//
// The set of instances is read once, at start (static MIG): when an operator reconfigures a card
// (mig-parted, nvidia-smi), the plugin serves the new instances after it restarts. NVIDIA's MIG
// manager restarts the device plugins of a node it reconfigures; a reconfiguration done by hand
// must restart the plugin's pod too. Until then the kubelet keeps the old instances (and Allocate
// hands out UUIDs NVML no longer knows, which the container runtime then refuses).

// migDevice is one MIG instance the table advertises.
type migDevice struct {
	// Instance is the instance as discovery described it; Instance.Healthy is its health: neither
	// it nor its parent has a fault (at discovery, then as the health watcher reports it: an
	// instance's events say both).
	Instance annotations.MIGInstance
	// Resource is the extended resource it is advertised under.
	Resource corev1.ResourceName
	// Parent indexes deviceTable.cards; index is the instance's place in deviceTable.instances.
	Parent, index int
	// Dynamic is set for a dynamic MIG placement (dynmig.go): the device ID is its placement ID,
	// and Instance the instance there (UUID "" while none exists).
	Dynamic *dynamicPlacement
}

// addInstances adds the MIG instances of the cards whose MIG mode is in force: one device per
// instance under its profile's resource. An instance the inventory cannot carry (no UUID, a profile
// or placement out of the contract's bounds, a UUID already met) is left out: the scheduler never
// assigns it, so it is not served either (discovery reports it).
func (t *deviceTable) addInstances(cards []nvidia.Card, names annotations.ResourceNames) {
	t.gpu = names.GPU
	t.inMIG = make([]bool, len(t.cards))
	t.migOrder = map[corev1.ResourceName][]string{}
	for _, c := range cards {
		parent, ok := t.byUUID[c.UUID]
		if !ok || c.UUID == "" {
			continue
		}
		t.inMIG[parent] = c.MIG.Enabled()
		if !c.MIG.Current {
			continue
		}
		if m := t.cards[parent].MIG; m != nil && len(m.Dynamic) > 0 {
			t.addPlacements(c, parent, names)
			continue
		}
		n := 0
		for _, in := range c.Instances {
			if in.UUID == "" || !annotations.ValidMIGProfile(in.Profile) || in.GI < 0 || in.CI < 0 || in.Start < 0 || in.Size < 1 ||
				in.Start+in.Size > 64 || in.MemoryMiB < 0 || in.SMs < 0 || n == annotations.MaxMIGInstances {
				continue
			}
			if _, dup := t.devices[in.UUID]; dup {
				continue
			}
			n++
			m := &migDevice{
				Instance: annotations.MIGInstance{UUID: in.UUID, Profile: in.Profile, GI: in.GI, CI: in.CI, Start: in.Start, Size: in.Size,
					MemoryMiB: in.MemoryMiB, SMs: in.SMs, Healthy: in.Fault == "" && c.Fault == ""},
				Resource: names.MIGResource(in.Profile), Parent: parent, index: len(t.instances),
			}
			t.instances = append(t.instances, m)
			t.devices[in.UUID] = advertised{ID: in.UUID, Card: parent, Slot: -1, MIG: m}
			if _, seen := t.migOrder[m.Resource]; !seen {
				t.migResources = append(t.migResources, m.Resource)
			}
			t.migOrder[m.Resource] = append(t.migOrder[m.Resource], in.UUID)
		}
	}
}

// resources lists every resource the table serves: the GPU resource, then one per MIG profile in
// the order the cards and their instances list them.
func (t *deviceTable) resources() []corev1.ResourceName {
	return append([]corev1.ResourceName{t.gpu}, t.migResources...)
}

// resourceOf is the resource device d is advertised under.
func (t *deviceTable) resourceOf(d advertised) corev1.ResourceName {
	if d.MIG != nil {
		return d.MIG.Resource
	}
	return t.gpu
}

// only keeps the IDs advertised under resource res: the kubelet names no others in a call for
// res, and a preference must never name another resource's device.
func (t *deviceTable) only(res corev1.ResourceName, ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if d, ok := t.devices[id]; ok && t.resourceOf(d) == res {
			out = append(out, id)
		}
	}
	return out
}

// unit is what a device stands for, for the rules that count holders and distinct devices: its card
// (a whole card, or one share slot of it), or, for a MIG instance, the instance itself.
func (t *deviceTable) unit(d advertised) int {
	if d.MIG != nil {
		return len(t.cards) + d.MIG.index
	}
	return d.Card
}

// instanceOf returns the MIG instance a unit stands for, or nil for a card.
func (t *deviceTable) instanceOf(u int) *migDevice {
	if u < len(t.cards) {
		return nil
	}
	return t.instances[u-len(t.cards)]
}

// migPluginDevices is the ListAndWatch answer of a MIG resource: its instances, each Unhealthy when
// it or its parent is, with the parent's NUMA node when topology is on and the node is known.
func (t *deviceTable) migPluginDevices(resource corev1.ResourceName, topology bool) []*pluginapi.Device {
	ids := t.migOrder[resource]
	out := make([]*pluginapi.Device, 0, len(ids))
	for _, id := range ids {
		m := t.devices[id].MIG
		d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
		if (m.Dynamic == nil && !m.Instance.Healthy) || (m.Dynamic != nil && !t.placementHealthy(m)) {
			d.Health = pluginapi.Unhealthy
		}
		if n := t.cards[m.Parent].NUMA; topology && n >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(n)}}}
		}
		out = append(out, d)
	}
	return out
}

// devicesOf is the ListAndWatch answer of a resource.
func (t *deviceTable) devicesOf(resource corev1.ResourceName, topology bool) []*pluginapi.Device {
	if resource == t.gpu {
		return t.pluginDevices(topology)
	}
	return t.migPluginDevices(resource, topology)
}

// setHealth applies a health change of a card or of a MIG instance (uuid is then its MIG UUID) and
// reports whether the device it names was found and whether what is advertised changed. A card in
// MIG mode (now or pending) stays unhealthy as a whole card whatever its events say: its faults
// reach its instances through their own events, which say their card's health too.
func (t *deviceTable) setHealth(uuid string, healthy bool) (known, changed bool) {
	if i, ok := t.byUUID[uuid]; ok {
		if t.inMIG[i] || t.cards[i].Healthy == healthy {
			return true, false
		}
		t.cards[i].Healthy = healthy
		return true, true
	}
	d, ok := t.devices[uuid]
	if !ok {
		// A dynamic placement's instance is named by its MIG UUID, its device by the placement.
		for _, m := range t.instances {
			if m.Dynamic != nil && m.Instance.UUID == uuid {
				d, ok = advertised{ID: m.Dynamic.Ref.String(), Card: m.Parent, Slot: -1, MIG: m}, true
			}
		}
	}
	if !ok || d.MIG == nil {
		return false, false
	}
	if d.MIG.Instance.Healthy == healthy {
		return true, false
	}
	d.MIG.Instance.Healthy = healthy
	t.syncInventoryHealth(d.MIG.Parent)
	return true, true
}

// syncInventoryHealth copies the health of card i's instances into its inventory entry, where the
// entry lists them.
func (t *deviceTable) syncInventoryHealth(i int) {
	g := &t.cards[i]
	if g.MIG == nil {
		return
	}
	for _, m := range t.instances {
		if m.Parent != i {
			continue
		}
		if in := g.Instance(m.Instance.UUID); in != nil {
			in.Healthy = m.Instance.Healthy
		}
	}
}

// describe names a device for messages: a card's UUID and model, or an instance's MIG UUID,
// profile and parent.
func (t *deviceTable) describe(d advertised) string {
	c := &t.cards[d.Card]
	if d.MIG != nil && d.MIG.Dynamic != nil {
		return describePlacement(d.MIG, c)
	}
	if d.MIG != nil {
		return fmt.Sprintf("MIG instance %s (%s on %s, %s)", d.MIG.Instance.UUID, d.MIG.Instance.Profile, c.UUID, c.Model)
	}
	return fmt.Sprintf("card %s (%s)", c.UUID, c.Model)
}

// Dynamic MIG (issue 40, docs/mig.md "Dynamic MIG"): with --mig-dynamic-profiles the inventory of
// each card in MIG mode also lists the allow-listed profiles the card has, each with every legal
// placement (NVML's GetGpuInstancePossiblePlacements), as mig.dynamicV and mig.dynamic. The
// placements occupied are the instances' own. Nothing is created or destroyed yet.

// validDynamicProfiles checks the allow-list: GPU instance profiles as nvidia-smi names them (no
// <c>c. prefix), each once, at most annotations.MaxMIGDynamicProfiles.
func validDynamicProfiles(allow []string) error {
	if len(allow) > annotations.MaxMIGDynamicProfiles {
		return fmt.Errorf("mig dynamic profiles: %d listed, at most %d", len(allow), annotations.MaxMIGDynamicProfiles)
	}
	seen := map[string]bool{}
	for _, p := range allow {
		if name, err := migplace.ParseProfile(p); err != nil || name.C != name.G || !annotations.ValidMIGProfile(p) {
			return fmt.Errorf("mig dynamic profiles: %q is not a GPU instance profile (like 1g.10gb, 3g.40gb, 1g.10gb+me; no <c>c. prefix)", p)
		}
		if seen[annotations.MIGProfileKey(p)] {
			return fmt.Errorf("mig dynamic profiles: %s listed twice", p)
		}
		seen[annotations.MIGProfileKey(p)] = true
	}
	return nil
}

// allowedProfiles keeps of a card's profiles those allow names, in allow's order; missing lists the
// names the card does not have.
func allowedProfiles(profiles []nvidia.MIGProfile, allow []string) (kept []nvidia.MIGProfile, missing []string) {
	for _, name := range allow {
		i := slices.IndexFunc(profiles, func(p nvidia.MIGProfile) bool {
			return annotations.MIGProfileKey(p.Name) == annotations.MIGProfileKey(name)
		})
		if i < 0 {
			missing = append(missing, name)
			continue
		}
		kept = append(kept, profiles[i])
	}
	return kept, missing
}

// withDynamicMIG asks NVML for the profiles and legal placements of every card in MIG mode and
// keeps the allow-listed ones (Card.Profiles), which the inventory then publishes. A card NVML
// cannot answer for is published without them (static MIG), and logged.
func withDynamicMIG(lib nvidia.Library, cards []nvidia.Card, allow []string, log logr.Logger) ([]nvidia.Card, error) {
	out := slices.Clone(cards)
	failed, err := nvidia.DiscoverMIGProfiles(lib, out)
	if err != nil {
		return nil, fmt.Errorf("discover MIG profiles: %w", err)
	}
	for i := range out {
		c := &out[i]
		if err := failed[c.UUID]; err != nil {
			log.Error(err, "MIG profiles and placements not discovered; the card is published without dynamic profiles", logging.KeyGPU, c.UUID)
			continue
		}
		if !c.MIG.Current || c.UUID == "" || c.Fault != "" {
			continue
		}
		var missing []string
		c.Profiles, missing = allowedProfiles(c.Profiles, allow)
		log.Info("dynamic MIG profiles published", logging.KeyGPU, c.UUID, "model", c.Model, "profiles", profileNames(c.Profiles), "notOnCard", missing)
	}
	return out, nil
}

func profileNames(ps []nvidia.MIGProfile) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// migDynamic is the inventory's mig.dynamic of a card: its Profiles, less any the contract cannot
// carry (a name that is not a GPU instance profile, a repeat, a placement out of bounds), so that
// one odd answer of NVML never makes the node's inventory invalid.
func migDynamic(c nvidia.Card) []annotations.MIGDynamicProfile {
	var out []annotations.MIGDynamicProfile
	seen := map[string]bool{}
	for _, p := range c.Profiles {
		key := annotations.MIGProfileKey(p.Name)
		if len(out) == annotations.MaxMIGDynamicProfiles || validDynamicProfiles([]string{p.Name}) != nil || seen[key] ||
			p.Size < 1 || len(p.Starts) == 0 || p.Starts[0] < 0 || p.Starts[len(p.Starts)-1]+p.Size > 64 || !slices.IsSorted(p.Starts) {
			continue
		}
		seen[key] = true
		out = append(out, annotations.MIGDynamicProfile{Profile: p.Name, Size: p.Size, Starts: slices.Compact(slices.Clone(p.Starts))})
	}
	return out
}
