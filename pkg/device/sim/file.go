// Package sim is Cardinal's simulated NVML: a YAML file describes the cards of one or more nodes, and
// Server serves them through go-nvml's mock package, so the device plugin runs the same discovery and
// health code with and without a GPU. Demos, end-to-end tests and benchmarks use it.
//
// The file:
//
//	nodes:
//	  node-a:
//	    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, count: 4}
//	    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 1, count: 4}
//	  node-c:
//	    - {model: "Tesla T4", memoryMiB: 15360, numa: 0, count: 3}
//	    - {model: "Tesla T4", memoryMiB: 15360, numa: 0, uuid: "GPU-...", healthy: false}
//	    - {model: "Tesla T4", memoryMiB: 15360, numa: 0, fault: lost}
//
// Each entry describes count cards (default 1) in order; cards are indexed from 0 across the node's
// entries. A card without uuid gets one derived from the node name and its index, so the same file
// gives the same UUIDs everywhere. numa omitted means unknown; healthy omitted means true.
//
// healthy: false raises critical XID 79 on the card and makes its live readings (temperature) fail;
// setting it back to true is a GPU reset: the card answers again. fault simulates a card NVML cannot
// use:
//
//   - fault: lost — the card is off the bus: every NVML call for it (handle, UUID, name, memory, PCI
//     info, temperature, events, row remapping) returns ERROR_GPU_IS_LOST, and turning it on while the
//     plugin runs raises critical XID 79. Removing it (or fault: none) brings the card back, as a reset.
//   - fault: memory-not-supported — GetMemoryInfo returns ERROR_NOT_SUPPORTED (seen at discovery, so
//     at the plugin's next start).
//   - fault: row-remap-pending — GetRemappedRows reports a pending row remap (the card needs a reset).
//
// mig simulates a card that supports MIG (Multi-Instance GPU) and says its mode, as nvidia-smi's
// "MIG Mode: Current / Pending" does:
//
//   - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, mig: {current: enabled}}
//   - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, mig: {current: disabled, pending: enabled}}
//
// current and pending are enabled or disabled; pending omitted means no change is pending (the same
// as current). A card without mig does not support MIG: GetMigMode answers ERROR_NOT_SUPPORTED, as
// on a T4.
//
// A card whose MIG mode is in force lists its MIG instances, served as NVML serves them (MIG device
// handles by index, GPU instances with their placement and profile, profiles by NVML's profile
// index and the card's profile ID, XID events naming the instance):
//
//   - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled, instances: [{profile: 1g.10gb, count: 7}]}}
//   - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 1, mig: {current: enabled, instances: [{profile: 3g.40gb}, {profile: 2g.20gb}, {profile: 1g.10gb, uuid: "MIG-...", healthy: false}]}}
//
// Each instance entry describes count instances (default 1) of profile, the name nvidia-smi gives
// it: <g>g.<mem>gb with g one of 1, 2, 3, 4, 7; optionally +me, -me or +me.all (1g, 2g) or +gfx (1g,
// 2g, 4g) after it, and <c>c. before it for a compute instance of c slices (c < g; the simulator
// gives each GPU instance one compute instance). The card is A100-like: 8 memory slices, 7 compute
// slices. From the profile: memory <mem> GiB (<mem>×1024 MiB, at most the card's; memoryMiB
// overrides it), 14 SMs per compute slice (sms overrides), a placement of as many memory slices as
// the fewest eighths of the card's memory that NVML names <mem>gb (1g.10gb 1, 2g.20gb and 1g.20gb 2,
// 3g.40gb and 4g.40gb 4, 7g.80gb 8 on an 80 GB card; 1g.12gb 1 on a 94 GB one). Instances are
// placed first-fit in file order, each at a multiple of its size; GPU instance IDs count from 1 in
// file order, compute instance IDs are 0. An instance without uuid gets a MIG UUID derived from the
// node name, the card's index and its own (counted from 0 on the card). healthy omitted means true; healthy: false raises critical XID 69 naming the instance (and
// fails its memory query), true again lets it recover. A file is refused when instances do not fit
// (memory slices, or more than 7 compute slices), when mig.current is not enabled, when a profile
// is malformed or NVML names no profile so on that card (1g.12gb on an 80 GB card, whose eighths
// are 10gb, 20gb, …).
//
// topology, beside nodes, lays out the links between a node's cards, as NVML reports them
// (GetNvLinkState, GetNvLinkRemoteDeviceType and GetNvLinkRemotePciInfo per link,
// GetTopologyCommonAncestor per pair):
//
//	topology:
//	  node-b: nvswitch
//
// The topologies:
//
//   - nvswitch — every card has 12 NVLink links to 6 NVSwitches: all pairs alike (an HGX baseboard).
//   - nvlink-pairs — NVLink bridges of 4 links between cards 0-1, 2-3, …; a last odd card has its
//     links inactive.
//   - pcie-switches — no NVLink: NVML answers NOT_SUPPORTED for it.
//
// In each, the PCIe tree has two cards per PCIe switch and two switches per socket: cards 0-1 and
// 2-3 on socket 0, 4-5 and 6-7 on socket 1, and so on. The common ancestor of two cards is
// TOPOLOGY_SINGLE (switch) below one switch, TOPOLOGY_NODE (numa) on one socket, TOPOLOGY_SYSTEM
// across sockets. A card's numa omitted is its socket's; a numa that disagrees with the socket is
// refused. A node without topology answers NOT_SUPPORTED for NVLink (as cards without it, a T4, do)
// and for the common ancestor, so its inventory carries no links. Changing the topology needs a
// restart.
//
// The plugin re-reads the file while it runs (Server.Watch): health, fault and MIG mode changes, and
// the health of MIG instances, apply at once; adding, removing or changing instances needs a
// restart.
package sim

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"sigs.k8s.io/yaml"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
)

// Limits on a file, so a typo cannot ask the simulator for a million cards.
const (
	MaxCardsPerNode = 1024
	MaxNodes        = 100000
	MaxMemoryMiB    = 16 << 20 // 16 TiB
	MaxNUMA         = 1023
)

// File is a parsed simulation file.
type File struct {
	Nodes map[string][]Entry `json:"nodes"`
	// Topology names the links between a node's cards, by node (topology.go); a node not listed
	// has none (NVML answers NOT_SUPPORTED for NVLink and the PCIe common ancestor).
	Topology map[string]Topology `json:"topology,omitempty"`
}

// Entry is one line of a node's list: one or more identical cards.
type Entry struct {
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	// NUMA is the cards' NUMA node; nil means unknown.
	NUMA *int `json:"numa,omitempty"`
	// Count is how many cards this entry describes; 0 means 1.
	Count int `json:"count,omitempty"`
	// UUID fixes the card's UUID; only with count 1.
	UUID string `json:"uuid,omitempty"`
	// Healthy nil means true.
	Healthy *bool `json:"healthy,omitempty"`
	// Fault is one of Faults; empty means none.
	Fault Fault `json:"fault,omitempty"`
	// MIG says the cards support MIG and their mode; nil means they do not support MIG.
	MIG *MIGEntry `json:"mig,omitempty"`
}

// MIGEntry is the simulated MIG mode of a card, and its MIG instances.
type MIGEntry struct {
	// Current is the mode in force: enabled or disabled.
	Current MIGState `json:"current"`
	// Pending is the mode after the card's next reset; empty means the same as Current.
	Pending MIGState `json:"pending,omitempty"`
	// Instances are the card's MIG instances, only with Current enabled.
	Instances []InstanceEntry `json:"instances,omitempty"`
}

// InstanceEntry is one line of a card's MIG instances: one or more instances of one profile.
type InstanceEntry struct {
	// Profile is the profile as nvidia-smi names it: 1g.10gb, 3g.40gb, 1g.10gb+me, 1c.3g.40gb.
	Profile string `json:"profile"`
	// Count is how many instances this entry describes; 0 means 1.
	Count int `json:"count,omitempty"`
	// UUID fixes the instance's MIG UUID; only with count 1.
	UUID string `json:"uuid,omitempty"`
	// Healthy nil means true.
	Healthy *bool `json:"healthy,omitempty"`
	// MemoryMiB and SMs override what the profile gives (0: the profile's).
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	SMs       int   `json:"sms,omitempty"`
}

// MIGState is a simulated MIG mode.
type MIGState string

// MIG modes of the simulation file.
const (
	MIGEnabled  MIGState = "enabled"
	MIGDisabled MIGState = "disabled"
)

// mode validates e and returns the MIG mode it stands for.
func (e *MIGEntry) mode(where string) (*nvidia.MIGMode, error) {
	on := func(field string, v MIGState) (bool, error) {
		switch v {
		case MIGEnabled:
			return true, nil
		case MIGDisabled:
			return false, nil
		}
		return false, fmt.Errorf("%s: mig.%s %q is not %s or %s", where, field, v, MIGEnabled, MIGDisabled)
	}
	cur, err := on("current", e.Current)
	if err != nil {
		return nil, err
	}
	pending := cur
	if e.Pending != "" {
		if pending, err = on("pending", e.Pending); err != nil {
			return nil, err
		}
	}
	return &nvidia.MIGMode{Current: cur, Pending: pending}, nil
}

// Fault is a simulated NVML fault of a card (see the package documentation).
type Fault string

// Simulated faults.
const (
	FaultNone               Fault = "none"
	FaultLost               Fault = "lost"
	FaultMemoryNotSupported Fault = "memory-not-supported"
	FaultRowRemapPending    Fault = "row-remap-pending"
)

// Faults lists the values of the fault field.
var Faults = []Fault{FaultNone, FaultLost, FaultMemoryNotSupported, FaultRowRemapPending}

// Card is one simulated card.
type Card struct {
	UUID      string
	Index     int
	Model     string
	MemoryMiB int64
	// NUMA is negative when unknown.
	NUMA    int
	Healthy bool
	// Fault is "" (or FaultNone) for a sound card.
	Fault Fault
	// MIG is the card's MIG mode; nil for a card without MIG support.
	MIG *nvidia.MIGMode
	// Instances are the card's MIG instances (MIG mode in force), in NVML's index order.
	Instances []Instance
	// NVLink are the card's NVLink links in NVML's link order; nil when the card has no NVLink
	// (NVML answers NOT_SUPPORTED). Set by the node's topology.
	NVLink []NVLinkPort
	// PCIe places the card in the PCIe tree; nil when the simulator does not know it
	// (GetTopologyCommonAncestor answers NOT_SUPPORTED). Set by the node's topology.
	PCIe *PCIePlace
}

// Parse decodes and validates a simulation file. Unknown fields are errors (a misspelt key would
// otherwise be silently ignored). Every card of every node is expanded once, so UUID clashes are
// found here.
func Parse(data []byte) (*File, error) {
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("simulation file: %w", err)
	}
	if len(f.Nodes) == 0 {
		return nil, fmt.Errorf("simulation file: no nodes")
	}
	if len(f.Nodes) > MaxNodes {
		return nil, fmt.Errorf("simulation file: %d nodes (at most %d)", len(f.Nodes), MaxNodes)
	}
	for _, name := range sortedKeys(f.Topology) {
		if _, ok := f.Nodes[name]; !ok {
			return nil, fmt.Errorf("simulation file: topology.%s: no such node (nodes: %s)", name, strings.Join(f.NodeNames(), ", "))
		}
	}
	for _, name := range f.NodeNames() {
		if _, err := f.Cards(name); err != nil {
			return nil, err
		}
	}
	return &f, nil
}

// NodeNames returns the node names in order.
func (f *File) NodeNames() []string {
	names := make([]string, 0, len(f.Nodes))
	for n := range f.Nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Cards expands the entries of one node into cards, in index order.
func (f *File) Cards(node string) ([]Card, error) {
	entries, ok := f.Nodes[node]
	if !ok {
		return nil, fmt.Errorf("simulation file: no node %q (nodes: %s)", node, strings.Join(f.NodeNames(), ", "))
	}
	if node == "" {
		return nil, fmt.Errorf("simulation file: empty node name")
	}
	var cards []Card
	seen := map[string]int{}
	for i, e := range entries {
		where := fmt.Sprintf("simulation file: nodes.%s[%d]", node, i)
		count := e.Count
		switch {
		case count == 0:
			count = 1
		case count < 0:
			return nil, fmt.Errorf("%s: count %d is negative", where, e.Count)
		case len(cards)+count > MaxCardsPerNode:
			return nil, fmt.Errorf("%s: more than %d cards on the node", where, MaxCardsPerNode)
		}
		if strings.TrimSpace(e.Model) == "" {
			return nil, fmt.Errorf("%s: model is empty", where)
		}
		if e.MemoryMiB <= 0 || e.MemoryMiB > MaxMemoryMiB {
			return nil, fmt.Errorf("%s: memoryMiB %d is not in 1..%d", where, e.MemoryMiB, MaxMemoryMiB)
		}
		numa := -1
		if e.NUMA != nil {
			if *e.NUMA < -1 || *e.NUMA > MaxNUMA {
				return nil, fmt.Errorf("%s: numa %d is not in -1..%d", where, *e.NUMA, MaxNUMA)
			}
			numa = *e.NUMA
		}
		if e.UUID != "" {
			if count != 1 {
				return nil, fmt.Errorf("%s: uuid is set, so count must be 1 (not %d)", where, count)
			}
			if _, slot, err := annotations.ParseDeviceID(e.UUID); err != nil || slot >= 0 {
				return nil, fmt.Errorf("%s: uuid %q is not a card UUID", where, e.UUID)
			}
		}
		healthy := e.Healthy == nil || *e.Healthy
		fault := e.Fault
		if fault == FaultNone {
			fault = ""
		}
		if fault != "" && !slices.Contains(Faults, fault) {
			return nil, fmt.Errorf("%s: fault %q is not one of %s", where, e.Fault, faultList())
		}
		var mig *nvidia.MIGMode
		if e.MIG != nil {
			m, err := e.MIG.mode(where)
			if err != nil {
				return nil, err
			}
			mig = m
		}
		for k := 0; k < count; k++ {
			idx := len(cards)
			u := e.UUID
			if u == "" {
				u = DerivedUUID(node, idx)
			}
			if prev, dup := seen[u]; dup {
				return nil, fmt.Errorf("%s: card %d has UUID %s, like card %d", where, idx, u, prev)
			}
			seen[u] = idx
			c := Card{UUID: u, Index: idx, Model: strings.TrimSpace(e.Model), MemoryMiB: e.MemoryMiB, NUMA: numa, Healthy: healthy, Fault: fault, MIG: cloneMIG(mig)}
			if e.MIG != nil && len(e.MIG.Instances) > 0 {
				ins, err := layInstances(where, node, c, e.MIG.Instances, seen)
				if err != nil {
					return nil, err
				}
				c.Instances = ins
			}
			cards = append(cards, c)
		}
	}
	if len(cards) == 0 {
		return nil, fmt.Errorf("simulation file: node %q has no cards", node)
	}
	if t, ok := f.Topology[node]; ok {
		if err := t.lay(node, entries, cards); err != nil {
			return nil, err
		}
	}
	return cards, nil
}

func cloneMIG(m *nvidia.MIGMode) *nvidia.MIGMode {
	if m == nil {
		return nil
	}
	c := *m
	return &c
}

func faultList() string {
	parts := make([]string, len(Faults))
	for i, f := range Faults {
		parts[i] = string(f)
	}
	return strings.Join(parts, ", ")
}

// uuidSpace is the name space of derived UUIDs (a fixed random UUID: changing it changes every
// derived UUID).
var uuidSpace = uuid.MustParse("5a0f8f4e-3c1d-4b7e-9a52-6f1c2d9e8b10")

// DerivedMIGUUID is the MIG UUID of instance k (counted from 0 in file order) of card index on node
// when the file gives none: a name-based UUID of "<node>/<index>/mig/<k>", with NVML's "MIG-" prefix.
func DerivedMIGUUID(node string, index, k int) string {
	return "MIG-" + uuid.NewSHA1(uuidSpace, []byte(node+"/"+strconv.Itoa(index)+"/mig/"+strconv.Itoa(k))).String()
}

// DerivedUUID is the UUID of card index on node when the file gives none: a name-based (SHA-1) UUID
// of "<node>/<index>", with NVML's "GPU-" prefix.
func DerivedUUID(node string, index int) string {
	return "GPU-" + uuid.NewSHA1(uuidSpace, []byte(node+"/"+strconv.Itoa(index))).String()
}
