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
// then for the MIG instances of cards in MIG mode (enabled), parent by parent, each of the MIG
// resource of its profile and on its parent's NUMA node; with the NUMA node the kubelet sees (none
// when the plugin does not report TopologyInfo) and health; held reports whether a device ID is
// held by a container now.
func DevicesOf(inv *annotations.Inventory, held func(id string) bool) []Device {
	topo := inv.Kubelet != nil && inv.Kubelet.DeviceTopology
	numaOf := func(g *annotations.GPU) int {
		if topo && g.NUMA >= 0 {
			return g.NUMA
		}
		return -1
	}
	var out []Device
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		for _, id := range g.DeviceIDs() {
			out = append(out, Device{ID: id, NUMA: numaOf(g), Healthy: g.Healthy, Held: held != nil && held(id)})
		}
	}
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if g.MIG == nil || g.MIG.Mode != annotations.MIGEnabled {
			continue
		}
		for _, in := range g.MIG.Instances {
			out = append(out, Device{ID: in.UUID, Resource: annotations.MIGProfileKey(in.Profile), NUMA: numaOf(g),
				Healthy: in.Healthy, Held: held != nil && held(in.UUID)})
		}
	}
	return out
}
