package topology

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func TestNodeAndDevicesOfInventory(t *testing.T) {
	inv := &annotations.Inventory{GPUs: []annotations.GPU{
		{UUID: "GPU-a", NUMA: 0, Healthy: true, Shares: 1},
		{UUID: "GPU-b", NUMA: 1, Healthy: false, Shares: 2},
	}}
	if n := NodeOf(inv.Kubelet); n.Policy != PolicyNone {
		t.Errorf("no kubelet topology: policy %q, want none", n.Policy)
	}
	// Without deviceTopology the kubelet sees no NUMA node on any device.
	inv.Kubelet = &annotations.KubeletTopology{TopologyManagerPolicy: "restricted", TopologyManagerScope: "pod",
		CPUManagerPolicy: "static", MaxAllowableNUMANodes: 8, PreferClosestNUMANodes: true,
		NUMA: []annotations.NUMACPUs{{ID: 0, CPUs: 8, ReservedCPUs: 1, ExclusiveCPUs: 2, Distances: []int{10, 20}}, {ID: 1, CPUs: 8}}}
	want := &Node{Policy: PolicyRestricted, Scope: ScopePod, CPUPolicy: CPUPolicyStatic, PreferClosestNUMA: true,
		MaxAllowableNUMANodes: 8, NUMA: []NUMANode{{ID: 0, CPUs: 8, ReservedCPUs: 1, ExclusiveCPUs: 2, Distances: []int{10, 20}}, {ID: 1, CPUs: 8}}}
	if diff := cmp.Diff(want, NodeOf(inv.Kubelet)); diff != "" {
		t.Errorf("NodeOf (-want +got):\n%s", diff)
	}
	held := func(id string) bool { return id == "GPU-b::1" }
	wantDevs := []Device{{ID: "GPU-a", NUMA: -1, Healthy: true}, {ID: "GPU-b::0", NUMA: -1}, {ID: "GPU-b::1", NUMA: -1, Held: true}}
	if diff := cmp.Diff(wantDevs, DevicesOf(inv, held)); diff != "" {
		t.Errorf("DevicesOf without deviceTopology (-want +got):\n%s", diff)
	}
	inv.Kubelet.DeviceTopology = true
	wantDevs = []Device{{ID: "GPU-a", NUMA: 0, Healthy: true}, {ID: "GPU-b::0", NUMA: 1}, {ID: "GPU-b::1", NUMA: 1, Held: true}}
	if diff := cmp.Diff(wantDevs, DevicesOf(inv, held)); diff != "" {
		t.Errorf("DevicesOf (-want +got):\n%s", diff)
	}
}
