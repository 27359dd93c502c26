package core

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core/topology"
)

// Usage is what is held on one card: memory and compute reserved, device IDs taken, and how many
// holders want the card alone.
type Usage struct {
	MemMiB int64
	Cores  int
	// Held is the number of device IDs of the card that are taken.
	Held int
	// Whole is the number of holders that want the card alone (whole-card requests, gpucores 100).
	Whole int
}

// Card is one device of a node with what is held on it: a whole card, or a MIG instance (Parent
// set). NewNodeState lists a MIG instance as a card of its own, whose GPU fields are the
// instance's: UUID its MIG UUID, Model, Index and NUMA its parent's, MemoryMiB and Healthy its
// own, Shares 1 (an instance is held whole). Its parent, a card in MIG mode (GPU.MIG set), stays in
// the list but serves no container. So selection, placement, scores and holdings see instances
// exactly as cards; Card.Serves keeps each container to its kind of device.
type Card struct {
	annotations.GPU
	Usage
	// Parent is the UUID of the card a MIG instance is on, "" for a whole card. Profile is the
	// instance's MIG profile (1g.10gb+me) and ProfileKey its key (annotations.MIGProfileKey), which
	// a MIG container's request names (ContainerRequest.MIGProfile).
	Parent, Profile, ProfileKey string
	// Cordoned is why an operator took the device out of service ("" when it is in service): nothing
	// new is placed on it, holders keep it (NodeState.Cordon). Health is another matter.
	Cordoned string
	// modelLower is the model lower-cased once, for selector checks.
	modelLower string
	// refs counts holders per device ID: index k is slot k, or the UUID (index 0) when Shares <= 1.
	refs []int32
	// parent is the index of Parent in NodeState.Cards (instances only). weight is an instance's
	// share of its parent: its memory (1 when the parent's instances report none); on a parent,
	// migWeight is the sum of its instances' weights and migHeld that of those held.
	parent             int
	weight             int64
	migWeight, migHeld int64
	// place is where a dynamic MIG placement sits (nil on other cards); blocked counts the
	// instances and held placements that overlap it (dynmig.go). On a dynamic parent, dynFirst
	// and dynEnd bound its placement cards in NodeState.Cards (dynEnd 0: not dynamic).
	place            *dynamicPlacement
	blocked          int32
	dynFirst, dynEnd int
}

// Instance reports whether the card is a MIG instance.
func (c *Card) Instance() bool { return c.Parent != "" }

// InMIGMode reports whether the card is a parent in MIG mode: it never serves a container itself.
func (c *Card) InMIGMode() bool { return c.MIG != nil && c.Parent == "" }

// Serves reports whether the card is the kind of device container r asks for: a MIG instance of
// its profile for a MIG container, a whole card (not in MIG mode) for any other.
func (c *Card) Serves(r *annotations.ContainerRequest) bool {
	if c.Instance() {
		return c.ProfileKey == r.MIGProfile
	}
	return c.MIG == nil && r.MIGProfile == ""
}

// SameDevice reports whether c and o describe the same device (what is held aside).
func (c *Card) SameDevice(o *Card) bool {
	a, b := c.GPU, o.GPU
	a.MIG, b.MIG = nil, nil
	return a == b && (c.MIG == nil) == (o.MIG == nil) && (c.MIG == nil || c.MIG.Mode == o.MIG.Mode) &&
		c.Parent == o.Parent && c.Profile == o.Profile
}

// Slots is the number of device IDs the card offers: Shares, at least 1.
func (c *Card) Slots() int { return max(c.Shares, 1) }

// FreeMemMiB is the memory not reserved, never negative.
func (c *Card) FreeMemMiB() int64 { return max(c.MemoryMiB-c.MemMiB, 0) }

// FreeCores is the compute percentage not reserved, never negative.
func (c *Card) FreeCores() int { return max(100-c.Cores, 0) }

// FreeSlots is the number of device IDs not taken.
func (c *Card) FreeSlots() int { return max(c.Slots()-c.Held, 0) }

// Utilization is how full the card would be with usage u, in [0, 1]: the largest of the memory,
// compute and device-ID fractions, and 1 when a holder has the card alone.
func (c *Card) Utilization(u Usage) float64 {
	if u.Whole > 0 {
		return 1
	}
	f := float64(u.Held) / float64(c.Slots())
	if c.MemoryMiB > 0 {
		f = max(f, float64(u.MemMiB)/float64(c.MemoryMiB))
	}
	f = max(f, float64(u.Cores)/100)
	return min(f, 1)
}

// load is how much of the card's memory and compute usage u takes, in [0, 1]; 1 when held whole.
func (c *Card) load(u Usage) float64 {
	if u.Whole > 0 {
		return 1
	}
	f := float64(u.Cores) / 100
	if c.MemoryMiB > 0 {
		f = max(f, float64(u.MemMiB)/float64(c.MemoryMiB))
	}
	return min(f, 1)
}

// stranded is the memory and compute left unusable when usage u takes every device ID of the card
// while load < 1 remains: 1 − load, else 0.
func (c *Card) stranded(u Usage, load float64) float64 {
	if u.Held < c.Slots() {
		return 0
	}
	return 1 - load
}

// DeviceID is the ID the device plugin advertises for slot k of the card (the UUID when the card
// is not shared).
func (c *Card) DeviceID(slot int) string {
	if slot < 0 || c.Shares <= 1 {
		return c.UUID
	}
	return annotations.SlotID(c.UUID, slot)
}

// slotIndex maps a slot (-1 for the UUID) to an index of refs, or -1 when out of range.
func (c *Card) slotIndex(slot int) int {
	if c.Shares <= 1 {
		if slot <= 0 {
			return 0
		}
		return -1
	}
	if slot < 0 || slot >= c.Shares {
		return -1
	}
	return slot
}

// slotFree reports whether slot k is not taken.
func (c *Card) slotFree(k int) bool { return c.refs[k] == 0 }

// NodeState is a node's cards and what is held on them. Build it with NewNodeState; change it with
// Hold/Unhold (records) or Apply/Release (plans). It is not safe for concurrent use.
type NodeState struct {
	Name  string
	Cards []Card
	// Models summarises the cards for people, e.g. "2x NVIDIA A40, 1x Tesla T4"; cards in MIG mode
	// are counted apart ("2x NVIDIA A100-SXM4-80GB in MIG mode") and their instances not at all.
	Models string
	// MIG is the number of MIG instances among Cards (0: the node has none), dynamic placements
	// included.
	MIG int
	// dynamic is set when a card of the node is in a dynamic MIG pool (dynmig.go).
	dynamic bool
	// Host is the node's CPU and memory, when known (zero: unknown, and then ignored).
	Host HostState
	// Kubelet is the node's kubelet topology as its inventory reports it (nil: not reported, the
	// TopologyManager policy none assumed). It is read only; NewNodeState builds the model from it.
	Kubelet *annotations.KubeletTopology
	// Sharing is how the node enforces shared cards' limits (nil: mode none). Read only.
	Sharing *annotations.Sharing
	byUUID  map[string]int
	// kubelet is the model of the node's kubelet when its TopologyManager runs a policy other
	// than none (nil otherwise): Fit then places cards where the kubelet will put them.
	kubelet *kubeletNode
	// cpuNode is the model's node with the exclusive CPUs SetExclusiveCPUs gave (nil: the
	// inventory's, kubelet.node); cpuHeld are those counts. Never written after SetExclusiveCPUs:
	// clones share them.
	cpuNode *topology.Node
	cpuHeld []int
	// links are the links between the cards (links.go), nil when the inventory publishes none.
	// Never written after NewNodeState: clones share them.
	links *linkMatrix
}

// kubeletNode is what the kubelet model needs of a node, built once per inventory and shared by
// clones (never written after NewNodeState).
type kubeletNode struct {
	node *topology.Node
	// devs are the device IDs the plugin advertises, card by card and slot by slot
	// (topology.DevicesOf), with Held false; card and slot say where each one is, index finds it.
	devs       []topology.Device
	card, slot []int
	index      map[string]int
}

// newKubeletNode builds the kubelet model of node n (its cards built) from its inventory.
func newKubeletNode(inv *annotations.Inventory, n *NodeState) *kubeletNode {
	if inv.Kubelet == nil || inv.Kubelet.TopologyManagerPolicy == annotations.TopologyPolicyNone {
		return nil
	}
	k := &kubeletNode{node: topology.NodeOf(inv.Kubelet), devs: topology.DevicesOf(inv, nil)}
	k.card, k.slot = make([]int, 0, len(k.devs)), make([]int, 0, len(k.devs))
	k.index = make(map[string]int, len(k.devs))
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		for slot := range g.DeviceIDs() {
			if g.Shares <= 1 {
				slot = -1
			}
			k.index[k.devs[len(k.card)].ID] = len(k.card)
			k.card, k.slot = append(k.card, i), append(k.slot, slot)
		}
	}
	// Then the MIG instances, in the order DevicesOf lists them.
	for d := len(k.card); d < len(k.devs); d++ {
		i, ok := n.byUUID[k.devs[d].ID]
		if !ok || !n.Cards[i].Instance() {
			return nil // not a node DecodeInventory accepts
		}
		k.index[k.devs[d].ID] = d
		k.card, k.slot = append(k.card, i), append(k.slot, -1)
	}
	return k
}

// SameKubelet reports whether n and o have the same kubelet topology (both none included).
func (n *NodeState) SameKubelet(o *NodeState) bool {
	a, b := n.Kubelet, o.Kubelet
	if a == nil || b == nil {
		return a == b
	}
	if a.TopologyManagerPolicy != b.TopologyManagerPolicy || a.TopologyManagerScope != b.TopologyManagerScope ||
		a.PreferClosestNUMANodes != b.PreferClosestNUMANodes || a.MaxAllowableNUMANodes != b.MaxAllowableNUMANodes ||
		a.CPUManagerPolicy != b.CPUManagerPolicy || a.DeviceTopology != b.DeviceTopology || len(a.NUMA) != len(b.NUMA) {
		return false
	}
	for i := range a.NUMA {
		x, y := &a.NUMA[i], &b.NUMA[i]
		if x.ID != y.ID || x.CPUs != y.CPUs || x.ReservedCPUs != y.ReservedCPUs || x.ExclusiveCPUs != y.ExclusiveCPUs ||
			!slices.Equal(x.Distances, y.Distances) {
			return false
		}
	}
	return true
}

// AppendKubeletKey appends what Fit reads of the node's kubelet topology to a key of the node's
// state (see the extender's cache): nothing when its policy is none, so that two nodes whose keys
// are equal get the same verdict.
func (n *NodeState) AppendKubeletKey(b []byte) []byte {
	if n.kubelet == nil {
		return b
	}
	k := n.Kubelet
	for _, s := range []string{k.TopologyManagerPolicy, k.TopologyManagerScope, k.CPUManagerPolicy} {
		b = append(binary.AppendUvarint(b, uint64(len(s))), s...)
	}
	flags := uint64(0)
	if k.PreferClosestNUMANodes {
		flags |= 1
	}
	if k.DeviceTopology {
		flags |= 2
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendVarint(b, int64(k.MaxAllowableNUMANodes))
	b = n.appendCPUKey(b)
	b = binary.AppendUvarint(b, uint64(len(k.NUMA)))
	for _, u := range k.NUMA {
		b = binary.AppendVarint(b, int64(u.ID))
		b = binary.AppendVarint(b, int64(u.CPUs))
		b = binary.AppendVarint(b, int64(u.ReservedCPUs))
		b = binary.AppendVarint(b, int64(u.ExclusiveCPUs))
		b = binary.AppendUvarint(b, uint64(len(u.Distances)))
		for _, d := range u.Distances {
			b = binary.AppendVarint(b, int64(d))
		}
	}
	return b
}

// HostRequest is the CPU (millicores) and memory (MiB) a pod requests of its node. Zero asks nothing.
type HostRequest struct {
	CPUMilli int64
	MemMiB   int64
}

// HostState is a node's allocatable CPU (millicores) and memory (MiB) and what pods hold of them.
// Each resource is known when its allocatable amount is positive; an unknown resource never limits
// a pod and no policy sees it, exactly as when the core knew no host resources at all.
type HostState struct {
	AllocCPUMilli, UsedCPUMilli int64
	AllocMemMiB, UsedMemMiB     int64
}

// Known reports whether the CPU or the memory of the node is known.
func (h *HostState) Known() bool { return h.AllocCPUMilli > 0 || h.AllocMemMiB > 0 }

// FreeCPUMilli is the CPU not held (may be negative when over-committed); meaningful when
// AllocCPUMilli > 0.
func (h *HostState) FreeCPUMilli() int64 { return h.AllocCPUMilli - h.UsedCPUMilli }

// FreeMemMiB is the memory not held (may be negative); meaningful when AllocMemMiB > 0.
func (h *HostState) FreeMemMiB() int64 { return h.AllocMemMiB - h.UsedMemMiB }

// Fits reports whether a request of cpu millicores and mem MiB fits what is free of the known
// resources, after taking away extra (a placement not yet applied).
func (h *HostState) Fits(cpu, mem int64, extra HostRequest) bool {
	if h.AllocCPUMilli > 0 && cpu > h.AllocCPUMilli-h.UsedCPUMilli-extra.CPUMilli {
		return false
	}
	if h.AllocMemMiB > 0 && mem > h.AllocMemMiB-h.UsedMemMiB-extra.MemMiB {
		return false
	}
	return true
}

// SetHost sets the node's allocatable CPU (millicores) and memory (MiB); zero leaves that resource
// unknown. What is held (Used*) stays as it is.
func (n *NodeState) SetHost(cpuMilli, memMiB int64) {
	n.Host.AllocCPUMilli, n.Host.AllocMemMiB = max(cpuMilli, 0), max(memMiB, 0)
}

// HoldHost adds what a pod holds of the node's CPU and memory (records of pods already bound).
func (n *NodeState) HoldHost(r HostRequest) {
	n.Host.UsedCPUMilli += r.CPUMilli
	n.Host.UsedMemMiB += r.MemMiB
}

// UnholdHost removes what HoldHost added.
func (n *NodeState) UnholdHost(r HostRequest) {
	n.Host.UsedCPUMilli -= r.CPUMilli
	n.Host.UsedMemMiB -= r.MemMiB
}

// NewNodeState builds the state of a node from its inventory, with nothing held.
func NewNodeState(name string, inv annotations.Inventory) *NodeState {
	n := &NodeState{Name: name, Cards: make([]Card, len(inv.GPUs)), byUUID: make(map[string]int, len(inv.GPUs)),
		Kubelet: inv.Kubelet, Sharing: inv.Sharing}
	for i, g := range inv.GPUs {
		lower := strings.ToLower(g.Model)
		// Cards of one model share one string, which compares by pointer (cheaply) in the scorers.
		for j := range i {
			if n.Cards[j].modelLower == lower {
				lower = n.Cards[j].modelLower
				break
			}
		}
		n.Cards[i] = Card{GPU: g, modelLower: lower, refs: make([]int32, max(g.Shares, 1))}
		n.byUUID[g.UUID] = i
	}
	n.Models = modelSummary(n.Cards)
	// MIG instances follow the cards (so a card's index is its index in the inventory, as the
	// kubelet model reads it), parent by parent in the inventory's order.
	for i := range inv.GPUs {
		if m := inv.GPUs[i].MIG; m != nil && m.Mode == annotations.MIGEnabled {
			if dynamicCard(&inv.GPUs[i]) {
				n.addPlacements(i, m)
				n.dynamic = true
				continue
			}
			n.addInstances(i, m.Instances)
		}
	}
	n.kubelet = newKubeletNode(&inv, n)
	n.links = newLinkMatrix(&inv, n)
	return n
}

// Cordon marks the devices an operator cordoned (annotations.CordonsOf the Node): a card by its UUID,
// a MIG instance by its own or its parent's. It reports how many devices it marked.
func (n *NodeState) Cordon(cs annotations.Cordons) int {
	if cs.Empty() {
		return 0
	}
	marked := 0
	for i := range n.Cards {
		c := &n.Cards[i]
		c.Cordoned = c.CordonedBy(cs)
		if c.Cordoned != "" {
			marked++
		}
	}
	return marked
}

// CordonedBy is why the marks cs cordon the device ("" when they do not): its own mark, or for a
// MIG instance its parent card's.
func (c *Card) CordonedBy(cs annotations.Cordons) string {
	why := cs.Why(c.UUID)
	if why == "" && c.Instance() {
		why = cs.Why(c.Parent)
	}
	return why
}

// addInstances appends the MIG instances of card p as cards.
func (n *NodeState) addInstances(p int, ins []annotations.MIGInstance) {
	var mem int64
	for _, in := range ins {
		mem += max(in.MemoryMiB, 0)
	}
	for _, in := range ins {
		if _, dup := n.byUUID[in.UUID]; dup {
			continue // the inventory decoder refuses this; never let one ID name two devices
		}
		parent := &n.Cards[p]
		w := int64(1)
		if mem > 0 {
			w = max(in.MemoryMiB, 0)
		}
		parent.migWeight += w
		g := annotations.GPU{UUID: in.UUID, Index: parent.Index, Model: parent.Model, MemoryMiB: in.MemoryMiB,
			NUMA: parent.NUMA, Healthy: in.Healthy, Shares: 1}
		n.byUUID[in.UUID] = len(n.Cards)
		// A pod given this instance while its card was in a dynamic pool holds it by its placement
		// ID (dynmig.go): that ID names the instance too, so that a pool moved back to static MIG
		// never offers a running pod's instance to another.
		if alias := annotations.MIGPlacementID(parent.UUID, in.Profile, in.Start); in.Size > 0 {
			if _, dup := n.byUUID[alias]; !dup {
				n.byUUID[alias] = len(n.Cards)
			}
		}
		n.Cards = append(n.Cards, Card{GPU: g, Parent: parent.UUID, Profile: in.Profile, ProfileKey: annotations.MIGProfileKey(in.Profile),
			modelLower: parent.modelLower, refs: make([]int32, 1), parent: p, weight: w})
		n.MIG++
	}
}

func modelSummary(cards []Card) string {
	var order []string
	count := map[string]int{}
	for i := range cards {
		m := cards[i].Model
		if cards[i].MIG != nil {
			m += " in MIG mode"
		}
		if count[m] == 0 {
			order = append(order, m)
		}
		count[m]++
	}
	if len(order) == 0 {
		return "no cards"
	}
	parts := make([]string, len(order))
	for i, m := range order {
		parts[i] = fmt.Sprintf("%dx %s", count[m], m)
	}
	return strings.Join(parts, ", ")
}

// Clone returns a deep copy.
func (n *NodeState) Clone() *NodeState {
	c := *n
	c.Cards = make([]Card, len(n.Cards))
	for i := range n.Cards {
		c.Cards[i] = n.Cards[i]
		c.Cards[i].refs = append([]int32(nil), n.Cards[i].refs...)
	}
	return &c
}

// CardIndex returns the index of the card with this UUID.
func (n *NodeState) CardIndex(uuid string) (int, bool) {
	i, ok := n.byUUID[uuid]
	return i, ok
}

// Utilization is the mean utilization of the node's healthy cards, in [0, 1]; 1 when none is healthy.
// A card in MIG mode counts as one card whose utilization is the share of it (by memory) its
// healthy instances held make up: each healthy instance counts as its share of a card (cardWeight).
func (n *NodeState) Utilization() float64 {
	sum, healthy := 0.0, 0.0
	for i := range n.Cards {
		c := &n.Cards[i]
		switch {
		case c.place != nil:
			// Counted on its parent.
		case c.dynEnd > 0:
			sum += n.dynamicUse(i, nil)
			healthy++
		case c.Healthy:
			w := n.cardWeight(c)
			sum += w * c.Utilization(c.Usage)
			healthy += w
		}
	}
	if healthy == 0 {
		return 1
	}
	return sum / healthy
}

// cardWeight is how much of a card c counts for in the node's utilization: 1, or for a MIG
// instance its share of its parent.
func (n *NodeState) cardWeight(c *Card) float64 {
	if !c.Instance() {
		return 1
	}
	return float64(c.weight) / float64(n.Cards[c.parent].migWeight)
}

// freeInstances summarises the node's free healthy MIG instances by profile and parent, e.g.
// "2x 1g.10gb free on GPU-a, 1x 3g.40gb free on GPU-b"; extra is what a plan holds on top (may be
// nil). At most reasonListEntries groups are named, then a count of the rest.
func (n *NodeState) freeInstances(extra []Usage) string {
	type group struct {
		profile, parent string
		n               int
	}
	var groups []group
	for i := range n.Cards {
		c := &n.Cards[i]
		if !c.Instance() || !c.Healthy || c.Held > 0 || c.blocked > 0 || n.Cards[c.parent].Held > 0 || (i < len(extra) && extra[i].Held > 0) {
			continue
		}
		gi := slices.IndexFunc(groups, func(g group) bool { return g.profile == c.Profile && g.parent == c.Parent })
		if gi < 0 {
			gi = len(groups)
			groups = append(groups, group{profile: c.Profile, parent: c.Parent})
		}
		groups[gi].n++
	}
	if len(groups) == 0 {
		return "no free MIG instance"
	}
	var b strings.Builder
	for gi, g := range groups {
		if gi == reasonListEntries {
			fmt.Fprintf(&b, " (+%d more)", len(groups)-gi)
			break
		}
		if gi > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%dx %s free on %s", g.n, g.profile, g.parent)
	}
	return b.String()
}

// parentUsed is the share of MIG instance c's parent held (by weight), extra more held on top.
func (n *NodeState) parentUsed(c *Card, extra int64) float64 {
	p := &n.Cards[c.parent]
	return min(float64(p.migHeld+extra)/float64(p.migWeight), 1)
}

// Holding is one device ID held by a pod container (or several containers of one pod that share
// it), with what it reserves. It is how records (assignments, allocations) enter a NodeState.
type Holding struct {
	UUID string
	// Slot is the share slot, -1 for a card advertised by its UUID alone.
	Slot   int
	MemMiB int64
	Cores  int
}

// Whole reports whether the holder wants the card alone.
func (h Holding) Whole() bool { return h.Cores >= 100 }

// HoldingFromID builds a holding from a device ID as the kubelet knows it.
func HoldingFromID(id string, memMiB int64, cores int) (Holding, error) {
	uuid, slot, err := annotations.ParseDeviceID(id)
	if err != nil {
		return Holding{}, err
	}
	return Holding{UUID: uuid, Slot: slot, MemMiB: memMiB, Cores: cores}, nil
}

// Hold adds a holding. It reports false (and changes nothing) when the node has no such card. A
// device ID the card no longer offers (its shares changed while the pod ran: a whole-card ID on a
// card now shared, or a slot beyond the new share count) still holds its memory, cores and one
// device ID of the card, and a whole-card holder still has the card alone: what runs on a card
// keeps it busy whatever its inventory says now.
func (n *NodeState) Hold(h Holding) bool { return n.change(h, 1) }

// Unhold removes a holding added by Hold.
func (n *NodeState) Unhold(h Holding) bool { return n.change(h, -1) }

func (n *NodeState) change(h Holding, sign int) bool {
	i, ok := n.byUUID[h.UUID]
	if !ok {
		return false
	}
	c := &n.Cards[i]
	if k := c.slotIndex(h.Slot); k >= 0 {
		c.refs[k] += int32(sign)
	}
	if c.Instance() && (c.Held > 0) != (c.Held+sign > 0) {
		n.Cards[c.parent].migHeld += int64(sign) * c.weight
		if c.place != nil {
			n.holdPlacement(i, int32(sign))
		}
	}
	c.Held += sign
	c.MemMiB += int64(sign) * h.MemMiB
	c.Cores += sign * h.Cores
	if h.Whole() {
		c.Whole += sign
	}
	return true
}

// Apply adds what a plan holds to the node (the plan must have been decided on this node): its
// devices and the pod's CPU and memory (Plan.Host).
func (n *NodeState) Apply(p *Plan) {
	for _, d := range p.Devices {
		n.Hold(n.holding(d))
	}
	n.HoldHost(p.Host)
}

// Release removes what Apply added.
func (n *NodeState) Release(p *Plan) {
	for _, d := range p.Devices {
		n.Unhold(n.holding(d))
	}
	n.UnholdHost(p.Host)
}

// Holdings returns what a plan decided on this node holds, as records would say it.
func (n *NodeState) Holdings(p *Plan) []Holding {
	hs := make([]Holding, len(p.Devices))
	for i, d := range p.Devices {
		hs[i] = n.holding(d)
	}
	return hs
}

func (n *NodeState) holding(d Device) Holding {
	return Holding{UUID: n.Cards[d.Card].UUID, Slot: d.Slot, MemMiB: d.MemMiB, Cores: d.Cores}
}
