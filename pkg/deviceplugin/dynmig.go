package deviceplugin

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// Dynamic MIG on the node (issue 40, docs/mig.md "Dynamic MIG"). A card whose inventory carries
// dynamic profiles (--mig-dynamic-profiles) serves, under each allowed profile's resource, one
// device per legal placement, its ID the placement ID (annotations.MIGPlacementID): the kubelet is
// offered IDs before any instance exists, and the extender assigns them as it assigns cards, so
// identity is the whole-card path's (no node lock). The card's instances are not served as devices
// of their own: they are what is occupied.
//
//   - ListAndWatch: a placement is Healthy while no instance on its card overlaps it, or while the
//     instance there is its own (created for it, or adopted); otherwise Unhealthy, so the kubelet
//     neither counts nor hands it out.
//   - Allocate: once the owner is resolved (the same rules as for cards), each placement without
//     its instance gets one (MIGControl.Create: the GPU instance at that placement, one compute
//     instance of the whole of it), and the container is served the new MIG UUID. A creation NVML
//     refuses is a refusal (ReasonMIGCreate) naming the placement and NVML's answer; the card's
//     instances are read again, so the inventory shows what occupies the placement and the
//     extender stops offering it until it is free.
//   - Reclaim (every PodResources reconciliation): an instance at a placement is destroyed once
//     neither the kubelet (PodResources) nor a pod this plugin knows holds its placement ID or its
//     MIG UUID; an instance in use (NVML's ERROR_IN_USE) is left for the next pass.
//   - Restart: at start the card's instances that sit exactly at an allowed profile's placement are
//     adopted (served and reclaimed as if created here); others (another profile, a compute
//     instance smaller than its GPU instance) stay occupied and untouched.

// ReasonMIGCreate: the GPU instance (or its compute instance) of a dynamic MIG placement could
// not be created.
const ReasonMIGCreate Reason = "mig-create"

// dynamicPlacement is what a dynamic placement device knows of itself; migDevice.Instance is the
// instance there (UUID "" while none exists).
type dynamicPlacement struct {
	Ref  annotations.PlacementRef
	Size int
	// Pod is the pod the instance was created for ("" once adopted at start, until served).
	Pod types.UID
}

// overlaps reports whether placements (start, size) a and b share a memory slice.
func overlaps(as, asz, bs, bsz int) bool { return as < bs+bsz && bs < as+asz }

// addPlacements adds the placement devices of dynamic card c (index parent), adopting the
// instances that sit exactly at a placement of their profile.
func (t *deviceTable) addPlacements(c nvidia.Card, parent int, names annotations.ResourceNames) {
	m := t.cards[parent].MIG
	for _, d := range m.Dynamic {
		res := names.MIGResource(d.Profile)
		for _, s := range d.Starts {
			ref := annotations.PlacementRef{Parent: c.UUID, Profile: d.Profile, Start: s}
			id := ref.String()
			if _, dup := t.devices[id]; dup {
				continue
			}
			md := &migDevice{Resource: res, Parent: parent, index: len(t.instances), Dynamic: &dynamicPlacement{Ref: ref, Size: d.Size},
				Instance: annotations.MIGInstance{Profile: d.Profile, Start: s, Size: d.Size, Healthy: true}}
			for _, in := range m.Instances {
				if in.Profile == d.Profile && in.Start == s && in.Size == d.Size {
					md.Instance = in
				}
			}
			t.instances = append(t.instances, md)
			t.devices[id] = advertised{ID: id, Card: parent, Slot: -1, MIG: md}
			if _, seen := t.migOrder[res]; !seen {
				t.migResources = append(t.migResources, res)
			}
			t.migOrder[res] = append(t.migOrder[res], id)
		}
	}
}

// placementHealthy is a dynamic placement's health for the kubelet: its own instance's, or, while
// it has none, whether no instance of its card overlaps it.
func (t *deviceTable) placementHealthy(m *migDevice) bool {
	if m.Instance.UUID != "" {
		return m.Instance.Healthy
	}
	for _, in := range t.cards[m.Parent].MIG.Instances {
		if overlaps(in.Start, in.Size, m.Dynamic.Ref.Start, m.Dynamic.Size) {
			return false
		}
	}
	return true
}

// setInstances replaces the inventory's instances of card i, keeping their order by GPU instance.
func (t *deviceTable) setInstances(i int, ins []annotations.MIGInstance) {
	slices.SortFunc(ins, func(a, b annotations.MIGInstance) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		return a.CI - b.CI
	})
	t.cards[i].MIG.Instances = ins
}

// createLocked creates the instances of the dynamic placements among o's IDs that have none, and
// reports whether it created any. On a failure it destroys what it created in this call and
// refuses. p.mu held.
func (p *Plugin) createLocked(o outcome) (bool, *AllocateError) {
	var made []*migDevice
	var holders []holder // of every resource: a placement of another profile may overlap
	for _, id := range o.IDs {
		d, ok := p.table.devices[id]
		if !ok || d.MIG == nil || d.MIG.Dynamic == nil {
			continue
		}
		m := d.MIG
		if m.Instance.UUID != "" {
			continue // adopted, or created for this pod's init container
		}
		if holders == nil {
			holders = p.holdersLocked("")
		}
		if other := overlappingInFlight(p.table, m, o, holders); other != nil {
			p.undoLocked(made)
			return len(made) > 0, refuse(ReasonConflict, []*podEntry{o.Owner.Pod, other.Pod},
				"placement %s of container %s of pod %s overlaps the one assigned to container %s of pod %s, not yet created: "+
					"one of them would be refused by NVML", id, o.Owner.Name, o.Owner.Pod.key(), other.Name, other.Pod.key())
		}
		if err := p.createOneLocked(m, o.Owner.Pod.UID); err != nil {
			p.undoLocked(made)
			p.rescanLocked(m.Parent)
			aerr := refuse(ReasonMIGCreate, []*podEntry{o.Owner.Pod}, "cannot create the MIG instance of container %s of pod %s at placement %s (%s at %d:%d on %s): %v",
				o.Owner.Name, o.Owner.Pod.key(), id, m.Dynamic.Ref.Profile, m.Dynamic.Ref.Start, m.Dynamic.Size, m.Dynamic.Ref.Parent, err)
			if o.Certain {
				aerr.Admitted = o.Owner.Pod
			}
			return true, aerr
		}
		made = append(made, m)
	}
	return len(made) > 0, nil
}

// overlappingInFlight returns a container in flight, other than o's owner, whose assignment names a
// placement that overlaps m on its card and has no instance yet (nil when none): a substitute the
// kubelet chose must not take what the extender reserved for another pod.
func overlappingInFlight(t *deviceTable, m *migDevice, o outcome, holders []holder) *holder {
	for i := range holders {
		h := &holders[i]
		if h.Pod == o.Owner.Pod || h.Assigned == nil || !inFlight(h) {
			continue
		}
		for _, id := range h.Assigned.IDs() {
			d, ok := t.devices[id]
			if !ok || d.MIG == nil || d.MIG.Dynamic == nil || d.MIG == m || d.MIG.Parent != m.Parent || d.MIG.Instance.UUID != "" {
				continue
			}
			if slices.Contains(o.IDs, id) {
				continue
			}
			if overlaps(d.MIG.Dynamic.Ref.Start, d.MIG.Dynamic.Size, m.Dynamic.Ref.Start, m.Dynamic.Size) {
				return h
			}
		}
	}
	return nil
}

// createOneLocked creates placement m's instance for pod uid and records it. p.mu held.
func (p *Plugin) createOneLocked(m *migDevice, uid types.UID) error {
	if p.mig == nil {
		return errors.New("this device plugin cannot create MIG instances (no NVML control)")
	}
	ref := m.Dynamic.Ref
	in, err := p.mig.Create(ref.Parent, ref.Profile, ref.Start)
	if err != nil {
		return err
	}
	m.Instance = annotations.MIGInstance{UUID: in.UUID, Profile: in.Profile, GI: in.GI, CI: in.CI, Start: in.Start, Size: in.Size,
		MemoryMiB: in.MemoryMiB, SMs: in.SMs, Healthy: in.Fault == ""}
	m.Dynamic.Pod = uid
	p.table.setInstances(m.Parent, append(slices.Clone(p.table.cards[m.Parent].MIG.Instances), m.Instance))
	p.devicesChangedLocked()
	p.log.Info("MIG instance created", keyResource, m.Resource, "placement", ref.String(), "mig", in.UUID, "gi", in.GI, "ci", in.CI, logging.KeyGPU, ref.Parent)
	return nil
}

// undoLocked destroys instances created by a call that is then refused.
func (p *Plugin) undoLocked(made []*migDevice) {
	for _, m := range made {
		if err := p.destroyLocked(m); err != nil {
			p.log.Error(err, "MIG instance of a refused allocation not destroyed; the next reclaim retries", "placement", m.Dynamic.Ref.String())
		}
	}
}

// destroyLocked destroys placement m's instance and forgets it. p.mu held.
func (p *Plugin) destroyLocked(m *migDevice) error {
	if p.mig == nil {
		return errors.New("this device plugin cannot destroy MIG instances (no NVML control)")
	}
	in := m.Instance
	if err := p.mig.Destroy(m.Dynamic.Ref.Parent, in.GI, in.CI); err != nil {
		return err
	}
	p.table.setInstances(m.Parent, slices.DeleteFunc(slices.Clone(p.table.cards[m.Parent].MIG.Instances), func(x annotations.MIGInstance) bool {
		return x.UUID == in.UUID
	}))
	m.Instance = annotations.MIGInstance{Profile: m.Dynamic.Ref.Profile, Start: m.Dynamic.Ref.Start, Size: m.Dynamic.Size, Healthy: true}
	m.Dynamic.Pod = ""
	p.devicesChangedLocked()
	p.log.Info("MIG instance destroyed", keyResource, m.Resource, "placement", m.Dynamic.Ref.String(), "mig", in.UUID, logging.KeyGPU, m.Dynamic.Ref.Parent)
	return nil
}

// rescanLocked reads card i's instances from NVML again after a failed creation (something the
// plugin did not make may occupy the placement), so the inventory shows it. p.mu held.
func (p *Plugin) rescanLocked(i int) {
	if p.mig == nil {
		return
	}
	uuid := p.table.cards[i].UUID
	found, err := p.mig.Instances(uuid)
	if err != nil {
		p.log.Error(err, "MIG instances not read again after a failed creation", logging.KeyGPU, uuid)
		return
	}
	var ins []annotations.MIGInstance
	for _, in := range found {
		if in.UUID == "" || !annotations.ValidMIGProfile(in.Profile) || in.Start < 0 || in.Size < 1 || in.Start+in.Size > 64 {
			continue
		}
		ins = append(ins, annotations.MIGInstance{UUID: in.UUID, Profile: in.Profile, GI: in.GI, CI: in.CI, Start: in.Start, Size: in.Size,
			MemoryMiB: in.MemoryMiB, SMs: in.SMs, Healthy: in.Fault == ""})
	}
	p.table.setInstances(i, ins)
	p.devicesChangedLocked()
}

// devicesChangedLocked wakes ListAndWatch (placements' health follows the instances) and marks
// the inventory for rewriting (the caller calls devicesChanged after unlocking). p.mu held.
func (p *Plugin) devicesChangedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
	p.inventoryDirty = true
}

// flushInventory has the inventory rewritten when a dynamic MIG change marked it. p.mu not held.
func (p *Plugin) flushInventory() {
	p.mu.Lock()
	dirty := p.inventoryDirty
	p.inventoryDirty = false
	p.mu.Unlock()
	if dirty {
		p.devicesChanged()
	}
}

// reclaim destroys the instances of dynamic placements nobody holds: neither the kubelet's
// PodResources (list) nor a pod this plugin knows names the placement ID or the instance's MIG
// UUID, and no pod in flight is assigned the placement. It does nothing before the pod cache has
// synced. It returns how many it destroyed.
func (p *Plugin) reclaim(list *podresourcesapi.ListPodResourcesResponse) int {
	p.mu.Lock()
	if !p.synced || list == nil {
		p.mu.Unlock()
		return 0
	}
	held := map[string]bool{}
	for _, pr := range list.GetPodResources() {
		for _, c := range pr.GetContainers() {
			for _, d := range c.GetDevices() {
				if r := corev1.ResourceName(d.GetResourceName()); p.names.IsMIGResource(r) {
					for _, id := range d.GetDeviceIds() {
						held[id] = true
					}
				}
			}
		}
	}
	for _, h := range p.holdersLocked("") {
		for _, id := range h.Held {
			held[id] = true
		}
		if h.Assigned != nil && inFlight(&h) {
			for _, id := range h.Assigned.IDs() {
				held[id] = true
			}
		}
	}
	n := 0
	for _, m := range p.table.instances {
		if m.Dynamic == nil || m.Instance.UUID == "" || held[m.Dynamic.Ref.String()] || held[m.Instance.UUID] {
			continue
		}
		if err := p.destroyLocked(m); err != nil {
			p.log.Error(err, "MIG instance whose pod is gone not destroyed; the next reconciliation retries", "placement", m.Dynamic.Ref.String(), "mig", m.Instance.UUID)
			continue
		}
		n++
	}
	p.mu.Unlock()
	p.flushInventory()
	return n
}

// describePlacement names a placement for messages.
func describePlacement(m *migDevice, c *annotations.GPU) string {
	if m.Instance.UUID != "" {
		return fmt.Sprintf("MIG instance %s (%s at %d:%d on %s, %s)", m.Instance.UUID, m.Dynamic.Ref.Profile, m.Dynamic.Ref.Start, m.Dynamic.Size, c.UUID, c.Model)
	}
	return fmt.Sprintf("MIG placement %s (%s at %d:%d on %s, %s; no instance yet)", m.Dynamic.Ref.String(), m.Dynamic.Ref.Profile, m.Dynamic.Ref.Start, m.Dynamic.Size, c.UUID, c.Model)
}
