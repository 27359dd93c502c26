package topology

import "github.com/cardinal-gpu/cardinal/pkg/annotations"

// NodeOf builds the model's Node from the inventory's kubelet topology; nil (a plugin that does
// not report it) gives PolicyNone.
func NodeOf(k *annotations.KubeletTopology) *Node {
	if k == nil {
		return &Node{Policy: PolicyNone}
	}
	n := &Node{
		Policy:                Policy(k.TopologyManagerPolicy),
		Scope:                 Scope(k.TopologyManagerScope),
		CPUPolicy:             CPUPolicy(k.CPUManagerPolicy),
		PreferClosestNUMA:     k.PreferClosestNUMANodes,
		MaxAllowableNUMANodes: k.MaxAllowableNUMANodes,
		NUMA:                  make([]NUMANode, len(k.NUMA)),
	}
	for i, u := range k.NUMA {
		n.NUMA[i] = NUMANode{ID: u.ID, CPUs: u.CPUs, ReservedCPUs: u.ReservedCPUs, ExclusiveCPUs: u.ExclusiveCPUs, Distances: u.Distances}
	}
	return n
}

// DevicesOf lists the device IDs the plugin advertises for the inventory's cards (GPU.DeviceIDs),
// with the NUMA node the kubelet sees (none when the plugin does not report TopologyInfo) and
// health; held reports whether a device ID is held by a container now.
func DevicesOf(inv *annotations.Inventory, held func(id string) bool) []Device {
	topo := inv.Kubelet != nil && inv.Kubelet.DeviceTopology
	var out []Device
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		numa := -1
		if topo && g.NUMA >= 0 {
			numa = g.NUMA
		}
		for _, id := range g.DeviceIDs() {
			out = append(out, Device{ID: id, NUMA: numa, Healthy: g.Healthy, Held: held != nil && held(id)})
		}
	}
	return out
}
