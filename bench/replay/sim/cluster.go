package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// CardMemoryMiB is the memory the replay gives one card of each trace model. The node list has none;
// the values are what NVML reports for the public cards (NVIDIA data sheets: P100 16 GB, T4 16 GB,
// V100 16 GB and 32 GB, A10 24 GB). G1, G2 and G3 are undisclosed: they get UndisclosedCardMemoryMiB.
// Every fractional request is a percentage of its card, so these numbers never change a decision;
// they only make the inventory look like one a device plugin publishes.
var CardMemoryMiB = map[string]int64{
	"P100":    16280,
	"T4":      15360,
	"V100M16": 16160,
	"V100M32": 32510,
	"A10":     23028,
}

// UndisclosedCardMemoryMiB is the memory of a card whose model the trace does not disclose.
const UndisclosedCardMemoryMiB = 32768

// Synthesis says how the replay fills in what the node list lacks.
type Synthesis struct {
	// NUMASplit puts the first half of the cards of a node with an even number of cards (4 or more) on
	// NUMA node 0 and the second half on NUMA node 1, as on a dual-socket server; other nodes have one
	// NUMA node. Without it every card is on NUMA node 0.
	NUMASplit bool
	// Shares is the number of device IDs each card offers (annotations.GPU.Shares).
	Shares int
}

// SharesFor returns the share count that never limits a trace before memory and compute do:
// ⌊1000 / smallest fractional gpu_milli⌋, at least 1 (20 for the shared traces, whose smallest share
// is 50 milli).
func SharesFor(pods []trace.Pod) int {
	smallest := int64(trace.MilliPerGPU)
	for i := range pods {
		if pods[i].Fractional() {
			smallest = min(smallest, pods[i].GPUMilli)
		}
	}
	return max(int(trace.MilliPerGPU/smallest), 1)
}

// Inventory builds the cardinal.io/gpu-inventory a device plugin would publish for a trace node:
// UUIDs `GPU-<node>-<index>`, the model's memory, NUMA as Synthesis says, all healthy. It round-trips
// through annotations.EncodeInventory / DecodeInventory, as the annotation does on its way from the
// device plugin to the extender.
func Inventory(n *trace.Node, s Synthesis) (annotations.Inventory, error) {
	mem, ok := CardMemoryMiB[n.Model]
	if !ok {
		mem = UndisclosedCardMemoryMiB
	}
	inv := annotations.Inventory{V: annotations.Version, GPUs: make([]annotations.GPU, n.GPUs)}
	for i := range inv.GPUs {
		numa := 0
		if s.NUMASplit && n.GPUs >= 4 && n.GPUs%2 == 0 && i >= n.GPUs/2 {
			numa = 1
		}
		inv.GPUs[i] = annotations.GPU{UUID: fmt.Sprintf("GPU-%s-%d", n.Name, i), Index: i, Model: n.Model,
			MemoryMiB: mem, NUMA: numa, Healthy: true, Shares: s.Shares}
	}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		return annotations.Inventory{}, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return annotations.DecodeInventory(enc)
}

// SortedNodes returns the nodes of a node list sorted by name: the replay's node order, which is also
// its tie-break order.
func SortedNodes(nodes []trace.Node) []trace.Node {
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(a, b trace.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}
