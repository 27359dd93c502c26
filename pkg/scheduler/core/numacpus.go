package core

import (
	"encoding/binary"
	"slices"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core/topology"
)

// Exclusive CPUs per NUMA node on nodes with a kubelet model. The inventory's counts
// (NUMACPUs.ExclusiveCPUs) are the kubelet's as of the plugin's last write; the extender's cache
// knows better between writes (pods reserved or bound since, pods the kubelet freed) and sets the
// counts the model reads with SetExclusiveCPUs. Fit then predicts on those counts, and the plan
// carries what the model says the pod takes (Plan.CPUs), so the cache can charge it.

// SetExclusiveCPUs makes the kubelet model count held[i] exclusive CPUs on NUMA node
// Kubelet.NUMA[i] (clamped to its unreserved CPUs) instead of the inventory's ExclusiveCPUs; nil
// goes back to the inventory's. It does nothing on a node without a model, or when held has
// another length than Kubelet.NUMA.
func (n *NodeState) SetExclusiveCPUs(held []int) {
	if n.kubelet == nil {
		return
	}
	if held == nil || len(held) != len(n.kubelet.node.NUMA) {
		n.cpuNode, n.cpuHeld = nil, nil
		return
	}
	node := *n.kubelet.node
	node.NUMA = slices.Clone(node.NUMA)
	for i := range node.NUMA {
		u := &node.NUMA[i]
		u.ExclusiveCPUs = min(max(held[i], 0), max(u.CPUs-u.ReservedCPUs, 0))
	}
	n.cpuNode, n.cpuHeld = &node, slices.Clone(held)
}

// HoldCPUs adds cpus[i] exclusive CPUs on NUMA node i (indexed like Kubelet.NUMA) to the counts
// the kubelet model reads, and UnholdCPUs takes them away: what-ifs on a copy of the state (a
// nominee's predicted CPUs, a victim's CPUs given back). Counts stay exact through a round trip
// (the clamp to the NUMA node's CPUs is applied where the model reads them). A node without a
// model, or cpus of another length, is left as it is.
func (n *NodeState) HoldCPUs(cpus []int) { n.addCPUs(cpus, 1) }

// UnholdCPUs removes what HoldCPUs added.
func (n *NodeState) UnholdCPUs(cpus []int) { n.addCPUs(cpus, -1) }

func (n *NodeState) addCPUs(cpus []int, sign int) {
	if n.kubelet == nil || len(cpus) == 0 || len(cpus) != len(n.kubelet.node.NUMA) {
		return
	}
	held := slices.Clone(n.cpuHeld)
	if held == nil {
		held = n.ExclusiveCPUs()
	}
	for i := range held {
		held[i] += sign * cpus[i]
	}
	n.SetExclusiveCPUs(held)
}

// ExclusiveCPUs returns the exclusive CPUs per NUMA node (indexed like Kubelet.NUMA) the kubelet
// model reads, nil on a node without a model.
func (n *NodeState) ExclusiveCPUs() []int {
	node := n.modelNode()
	if node == nil {
		return nil
	}
	out := make([]int, len(node.NUMA))
	for i := range node.NUMA {
		out[i] = node.NUMA[i].ExclusiveCPUs
	}
	return out
}

// CountsCPUs reports whether the node's kubelet model places exclusive CPUs: a TopologyManager
// policy other than none and the static CPU manager.
func (n *NodeState) CountsCPUs() bool {
	return n.kubelet != nil && n.kubelet.node.CPUPolicy == topology.CPUPolicyStatic
}

// modelNode is the node the kubelet model reads; nil without a model.
func (n *NodeState) modelNode() *topology.Node {
	if n.cpuNode != nil {
		return n.cpuNode
	}
	if n.kubelet == nil {
		return nil
	}
	return n.kubelet.node
}

// appendCPUKey appends the counts SetExclusiveCPUs gave to a key (AppendKubeletKey).
func (n *NodeState) appendCPUKey(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(n.cpuHeld)))
	for _, c := range n.cpuHeld {
		b = binary.AppendVarint(b, int64(c))
	}
	return b
}

// HoldsExclusiveCPUs reports whether the static CPU manager gives the pod exclusive CPUs: it is
// Guaranteed and a container asks a whole number of CPUs.
func (p *Pod) HoldsExclusiveCPUs() bool {
	if !p.kubelet.Guaranteed {
		return false
	}
	for _, c := range p.kubelet.Containers {
		if c.CPUs > 0 {
			return true
		}
	}
	return false
}

// assignedCPUs is Plan.CPUs by NUMA node ID, for the assignment.
func (p *Plan) assignedCPUs(n *NodeState) []annotations.NUMACPUCount {
	node := n.modelNode()
	if node == nil {
		return nil
	}
	var out []annotations.NUMACPUCount
	for i, c := range p.CPUs {
		if c > 0 && i < len(node.NUMA) {
			out = append(out, annotations.NUMACPUCount{NUMA: node.NUMA[i].ID, CPUs: c})
		}
	}
	return out
}
