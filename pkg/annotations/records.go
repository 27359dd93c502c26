package annotations

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Version is the major version of every record this package writes.
const Version = 1

// SlotSeparator joins a card's UUID and a share slot in a device ID: `<UUID>::<k>`.
const SlotSeparator = "::"

// GPU is one card as the device plugin saw it.
type GPU struct {
	UUID      string `json:"uuid"`
	Index     int    `json:"index"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	// NUMA is the card's NUMA node; negative means unknown.
	NUMA    int  `json:"numa"`
	Healthy bool `json:"healthy"`
	// Shares is how many pods may share the card; 1 means whole-card use only.
	Shares int `json:"shares"`
	// MIG is set when the card is in MIG mode (now or after its next reset): it then serves its MIG
	// instances, never itself whole, and Healthy is false. Added in v1 without a version change.
	MIG *MIG `json:"mig,omitempty"`
}

// DeviceIDs returns the IDs the device plugin advertises for the card: the UUID when it is not
// shared, otherwise one slot ID per share.
func (g *GPU) DeviceIDs() []string {
	if g.Shares <= 1 {
		return []string{g.UUID}
	}
	ids := make([]string, g.Shares)
	for k := range ids {
		ids[k] = SlotID(g.UUID, k)
	}
	return ids
}

// Inventory is the Node annotation GPUInventory: every card on the node.
type Inventory struct {
	V    int   `json:"v"`
	GPUs []GPU `json:"gpus"`
	// Kubelet is the node's kubelet topology settings; nil when the plugin does not report them
	// (then the extender assumes the TopologyManager policy none).
	Kubelet *KubeletTopology `json:"kubelet,omitempty"`
	// Sharing is how the node enforces the limits of shared cards; nil means mode none (added in
	// v1 without a version change: older readers ignore it).
	Sharing *Sharing `json:"sharing,omitempty"`
	// Links says how pairs of cards reach each other (NVLink, NVSwitch, PCIe); a pair not listed is
	// unknown. Nil: the plugin did not report links. Added in v1 without a version change.
	Links []Link `json:"links,omitempty"`
}

// Assignment is the Pod annotation GPUAssignment, written by the extender at bind.
type Assignment struct {
	V    int    `json:"v"`
	Node string `json:"node"`
	// Containers lists every container that requested GPUs, init containers first.
	Containers []ContainerAssignment `json:"containers"`
	// CPUs are the exclusive CPUs the extender's model of the node's kubelet predicts the pod
	// holds on each NUMA node once admitted (static CPU manager, TopologyManager policy other than
	// none), init containers' retained CPUs included; empty when it holds none or the node has no
	// model. The extender charges them to the node until the node's inventory lists the pod
	// (KubeletTopology.Pods). Added in v1 without a version change: older readers ignore it.
	CPUs []NUMACPUCount `json:"cpus,omitempty"`
}

// NUMACPUCount is a number of CPUs on one NUMA node.
type NUMACPUCount struct {
	NUMA int `json:"numa"`
	CPUs int `json:"cpus"`
}

// ContainerAssignment is the cards one container gets.
type ContainerAssignment struct {
	Name    string             `json:"name"`
	Init    bool               `json:"init,omitempty"`
	Devices []DeviceAssignment `json:"devices"`
}

// DeviceAssignment is one card of a container: the device ID the kubelet will hand over, and what
// the container reserves on the card.
type DeviceAssignment struct {
	UUID string `json:"uuid"`
	// ID is the device ID as advertised to the kubelet: the UUID, or `<UUID>::<k>` for a share slot.
	ID        string `json:"id"`
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"`
	// Parent and Profile are set for a MIG instance (UUID and ID are then its MIG UUID): the card it
	// is on and its profile. Added in v1 without a version change.
	Parent  string `json:"parent,omitempty"`
	Profile string `json:"profile,omitempty"`
	// Placement is set for an instance of a dynamic MIG pool (issue 40) that the device plugin
	// creates at Allocate: where on Parent it goes. UUID and ID are then its placement ID
	// (MIGPlacementID of Parent, Profile and Placement.Start). Added in v1 without a version change:
	// only dynamic cards (mig.dynamicV 1) offer placement IDs.
	Placement *MIGPlacement `json:"placement,omitempty"`
}

// IDs returns the container's device IDs in order.
func (c *ContainerAssignment) IDs() []string {
	ids := make([]string, len(c.Devices))
	for i, d := range c.Devices {
		ids[i] = d.ID
	}
	return ids
}

// Container returns the assignment of the named container, or nil.
func (a *Assignment) Container(name string) *ContainerAssignment {
	for i := range a.Containers {
		if a.Containers[i].Name == name {
			return &a.Containers[i]
		}
	}
	return nil
}

// Allocation is the Pod annotation GPUAllocated, written by the device plugin: the device IDs the
// kubelet gave each container. For pods Cardinal did not schedule it is the only record of their cards.
type Allocation struct {
	V    int    `json:"v"`
	Node string `json:"node"`
	// Containers lists every container holding devices of the managed resource.
	Containers []ContainerAllocation `json:"containers"`
}

// ContainerAllocation is what the kubelet gave one container.
type ContainerAllocation struct {
	Name string   `json:"name"`
	IDs  []string `json:"ids"`
	// Source says how the plugin learned it: "allocate" (its own Allocate answer) or
	// "podresources" (the kubelet's record, for pods it did not see through Allocate).
	Source string `json:"source,omitempty"`
}

// Allocation sources.
const (
	SourceAllocate     = "allocate"
	SourcePodResources = "podresources"
)

// SlotID formats the device ID of share slot k of a card.
func SlotID(uuid string, k int) string { return uuid + SlotSeparator + strconv.Itoa(k) }

// ParseDeviceID splits a device ID into the card UUID and the slot; slot is -1 for a whole card.
func ParseDeviceID(id string) (uuid string, slot int, err error) {
	u, s, found := strings.Cut(id, SlotSeparator)
	if !found {
		if err := checkUUID(id); err != nil {
			return "", 0, fmt.Errorf("device ID %q: %w", id, err)
		}
		return id, -1, nil
	}
	if err := checkUUID(u); err != nil {
		return "", 0, fmt.Errorf("device ID %q: %w", id, err)
	}
	k, err := strconv.Atoi(s)
	if err != nil || k < 0 || strconv.Itoa(k) != s {
		return "", 0, fmt.Errorf("device ID %q: slot %q is not a non-negative integer", id, s)
	}
	return u, k, nil
}

func checkUUID(u string) error {
	switch {
	case u == "":
		return errors.New("empty UUID")
	case strings.ContainsAny(u, ", \t\n\"") || strings.Contains(u, SlotSeparator):
		return fmt.Errorf("UUID %q contains a separator or space", u)
	}
	return nil
}

// EncodeInventory validates and encodes an inventory; V is set to Version.
func EncodeInventory(inv Inventory) (string, error) {
	inv.V = Version
	if err := inv.validate(); err != nil {
		return "", err
	}
	return encode(inv)
}

// DecodeInventory decodes and validates the GPUInventory annotation. It also refuses kubelet facts
// the scheduler cannot model (KubeletTopology.modelled): the device plugin still publishes them, so
// the node's reason names the field.
func DecodeInventory(s string) (Inventory, error) {
	var inv Inventory
	if err := decode(GPUInventory, s, &inv); err != nil {
		return Inventory{}, err
	}
	if err := inv.validate(); err != nil {
		return Inventory{}, err
	}
	if inv.Kubelet != nil {
		if err := inv.Kubelet.modelled(); err != nil {
			return Inventory{}, err
		}
	}
	// Empty lists decode as none, as the encoder leaves them out (the fuzz target's round trip).
	if len(inv.Links) == 0 {
		inv.Links = nil
	}
	for i := range inv.GPUs {
		if m := inv.GPUs[i].MIG; m != nil {
			m.normalize()
		}
	}
	return inv, nil
}

func (inv *Inventory) validate() error {
	seen := make(map[string]bool, len(inv.GPUs))
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if err := checkUUID(g.UUID); err != nil {
			return errorf(GPUInventory, "gpus[%d].uuid: %v", i, err)
		}
		if seen[g.UUID] {
			return errorf(GPUInventory, "gpus[%d].uuid: %s appears twice", i, g.UUID)
		}
		seen[g.UUID] = true
		if g.MemoryMiB < 0 {
			return errorf(GPUInventory, "gpus[%d].memoryMiB: %d is negative", i, g.MemoryMiB)
		}
		if g.Shares < 1 || g.Shares > 1024 {
			return errorf(GPUInventory, "gpus[%d].shares: %d is not in 1..1024", i, g.Shares)
		}
	}
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if g.MIG == nil {
			continue
		}
		if g.Healthy {
			return errorf(GPUInventory, "gpus[%d]: healthy while in MIG mode (a card in MIG mode is never served whole)", i)
		}
		if err := g.MIG.validate(i, seen); err != nil {
			return err
		}
	}
	if err := validateLinks(inv.Links, len(inv.GPUs)); err != nil {
		return err
	}
	if inv.Sharing != nil {
		if err := inv.Sharing.validate(); err != nil {
			return err
		}
	}
	if inv.Kubelet != nil {
		return inv.Kubelet.validate()
	}
	return nil
}

// EncodeAssignment validates and encodes an assignment; V is set to Version.
func EncodeAssignment(a Assignment) (string, error) {
	a.V = Version
	if err := a.validate(); err != nil {
		return "", err
	}
	return encode(a)
}

// DecodeAssignment decodes and validates the GPUAssignment annotation.
func DecodeAssignment(s string) (Assignment, error) {
	var a Assignment
	if err := decode(GPUAssignment, s, &a); err != nil {
		return Assignment{}, err
	}
	if err := a.validate(); err != nil {
		return Assignment{}, err
	}
	return a, nil
}

func (a *Assignment) validate() error {
	if a.Node == "" {
		return errorf(GPUAssignment, "node is empty")
	}
	var numas uint64
	for i, c := range a.CPUs {
		switch {
		case c.NUMA < 0 || c.NUMA > maxNUMANodeID:
			return errorf(GPUAssignment, "cpus[%d].numa: %d is not in 0..%d", i, c.NUMA, maxNUMANodeID)
		case numas&(1<<uint(c.NUMA)) != 0:
			return errorf(GPUAssignment, "cpus[%d].numa: %d appears twice", i, c.NUMA)
		case c.CPUs <= 0 || c.CPUs > maxAssignedCPUs:
			return errorf(GPUAssignment, "cpus[%d].cpus: %d is not in 1..%d", i, c.CPUs, maxAssignedCPUs)
		}
		numas |= 1 << uint(c.NUMA)
	}
	ids := map[string]bool{}
	names := map[string]bool{}
	for i := range a.Containers {
		c := &a.Containers[i]
		if c.Name == "" {
			return errorf(GPUAssignment, "containers[%d].name is empty", i)
		}
		if names[c.Name] {
			return errorf(GPUAssignment, "containers[%d].name: %q appears twice", i, c.Name)
		}
		names[c.Name] = true
		if len(c.Devices) == 0 {
			return errorf(GPUAssignment, "containers[%d] (%s): no devices", i, c.Name)
		}
		cards := map[string]bool{}
		for j, d := range c.Devices {
			u, _, err := ParseDeviceID(d.ID)
			if err != nil {
				return errorf(GPUAssignment, "containers[%d].devices[%d].id: %v", i, j, err)
			}
			if u != d.UUID {
				return errorf(GPUAssignment, "containers[%d].devices[%d]: id %q is not on card %q", i, j, d.ID, d.UUID)
			}
			if cards[u] {
				return errorf(GPUAssignment, "containers[%d].devices[%d]: card %s given twice to one container", i, j, u)
			}
			cards[u] = true
			// The kubelet hands an init container's devices on to the containers that start after it
			// (later init containers and the app containers), so init containers may repeat an ID that
			// another container also has. App containers run together: among them an ID appears once.
			if !c.Init {
				if ids[d.ID] {
					return errorf(GPUAssignment, "containers[%d].devices[%d]: id %s assigned twice", i, j, d.ID)
				}
				ids[d.ID] = true
			}
			if d.MemoryMiB < 0 {
				return errorf(GPUAssignment, "containers[%d].devices[%d].memoryMiB: %d is negative", i, j, d.MemoryMiB)
			}
			if d.Cores < 0 || d.Cores > 100 {
				return errorf(GPUAssignment, "containers[%d].devices[%d].cores: %d is not in 0..100", i, j, d.Cores)
			}
			if (d.Parent == "") != (d.Profile == "") {
				return errorf(GPUAssignment, "containers[%d].devices[%d]: parent %q and profile %q come together (a MIG instance names both)", i, j, d.Parent, d.Profile)
			}
			if d.Profile != "" {
				if !ValidMIGProfile(d.Profile) {
					return errorf(GPUAssignment, "containers[%d].devices[%d].profile: %q is not a MIG profile", i, j, d.Profile)
				}
				if err := checkUUID(d.Parent); err != nil || d.Parent == d.UUID {
					return errorf(GPUAssignment, "containers[%d].devices[%d].parent: %q is not the card of instance %s", i, j, d.Parent, d.UUID)
				}
				if d.ID != d.UUID {
					return errorf(GPUAssignment, "containers[%d].devices[%d]: MIG instance %s has device ID %q (a MIG instance is served by its UUID)", i, j, d.UUID, d.ID)
				}
			}
			if err := d.validatePlacement(); err != nil {
				return errorf(GPUAssignment, "containers[%d].devices[%d]: %v", i, j, err)
			}
		}
	}
	return nil
}

// EncodeAllocation validates and encodes an allocation record; V is set to Version.
func EncodeAllocation(a Allocation) (string, error) {
	a.V = Version
	if err := a.validate(); err != nil {
		return "", err
	}
	return encode(a)
}

// DecodeAllocation decodes and validates the GPUAllocated annotation.
func DecodeAllocation(s string) (Allocation, error) {
	var a Allocation
	if err := decode(GPUAllocated, s, &a); err != nil {
		return Allocation{}, err
	}
	if err := a.validate(); err != nil {
		return Allocation{}, err
	}
	return a, nil
}

func (a *Allocation) validate() error {
	names := make(map[string]bool, len(a.Containers))
	for i := range a.Containers {
		c := &a.Containers[i]
		if c.Name == "" {
			return errorf(GPUAllocated, "containers[%d].name is empty", i)
		}
		if names[c.Name] {
			return errorf(GPUAllocated, "containers[%d].name: %q appears twice", i, c.Name)
		}
		names[c.Name] = true
		for j, id := range c.IDs {
			if _, _, err := ParseDeviceID(id); err != nil {
				return errorf(GPUAllocated, "containers[%d].ids[%d]: %v", i, j, err)
			}
		}
	}
	return nil
}

func encode(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// decode checks the version field first, so that a record of another major version is reported as
// such even when its other fields no longer fit this version's types, then unmarshals s into v.
func decode(key, s string, v any) error {
	if strings.TrimSpace(s) == "" {
		return errorf(key, "empty value")
	}
	var head struct {
		V *json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal([]byte(s), &head); err != nil {
		return &Error{Key: key, Reason: fmt.Sprintf("not a JSON object: %v (value %s)", err, clip(s)), Err: err}
	}
	if head.V == nil || string(*head.V) == "null" {
		return errorf(key, `missing version field "v" (value %s)`, clip(s))
	}
	var version int
	if err := json.Unmarshal(*head.V, &version); err != nil || version < 1 {
		return errorf(key, `version field "v": %s is not a positive whole number`, clip(string(*head.V)))
	}
	if version != Version {
		return &Error{Key: key, Reason: fmt.Sprintf("version %d is not supported (this build reads %d)", version, Version), Err: ErrUnsupportedVersion}
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return &Error{Key: key, Reason: fmt.Sprintf("cannot decode: %v (value %s)", err, clip(s)), Err: err}
	}
	return nil
}

// clip quotes a value for an error, shortened so a huge annotation does not flood logs and events.
func clip(s string) string {
	const maxQuoted = 120
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:maxQuoted]) + "…"
}

// validatePlacement checks a dynamic MIG device: with a placement, its ID is the placement ID of
// its parent, profile and start; without one, its ID is no placement ID.
func (d *DeviceAssignment) validatePlacement() error {
	if d.Placement == nil {
		if IsMIGPlacementID(d.ID) {
			if _, err := ParseMIGPlacementID(d.ID); err == nil {
				return fmt.Errorf("id %q is a placement ID, but placement is not set", d.ID)
			}
		}
		return nil
	}
	pl := d.Placement
	switch {
	case d.Profile == "":
		return fmt.Errorf("placement %d:%d without parent and profile (a dynamic MIG instance names both)", pl.Start, pl.Size)
	case pl.Start < 0 || pl.Size < 1 || pl.Size > maxMIGSlices || pl.Start > maxMIGSlices-pl.Size:
		return fmt.Errorf("placement: start %d size %d is not within 0..%d slices", pl.Start, pl.Size, maxMIGSlices)
	}
	if want := MIGPlacementID(d.Parent, d.Profile, pl.Start); d.ID != want {
		return fmt.Errorf("id %q is not the placement ID %q of its parent, profile and start", d.ID, want)
	}
	if _, err := ParseMIGPlacementID(d.ID); err != nil {
		return fmt.Errorf("id: %w", err)
	}
	return nil
}
