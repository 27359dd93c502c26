package topology

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// instances makes n devices "m<numa>-<k>" of MIG resource res on one NUMA node, the first held of
// them held.
func instances(res string, numaID, n, held int) []Device {
	out := make([]Device, n)
	for k := range out {
		out[k] = Device{ID: fmt.Sprintf("m%d-%d", numaID, k), Resource: res, NUMA: numaID, Healthy: true, Held: k < held}
	}
	return out
}

// The kubelet gives hints and allocates per resource: a container's hints come from the devices
// of its own resource only, whatever the devices of other resources are.
func TestAdmitPerResource(t *testing.T) {
	// Cards: 2 free on NUMA 1. Instances of 1g.10gb: 2 free on NUMA 0, 1 on NUMA 1.
	devs := join(cards(0, 2, 2), cards(1, 2, 0), instances("1g.10gb", 0, 2, 0), instances("1g.10gb", 1, 1, 0))
	mig := Container{Name: "m", Devices: 2, Resource: "1g.10gb"}
	res, ref := Admit(twoNUMA(PolicySingleNUMANode, ScopeContainer), devs, pod(false, app("w", 2, 0), mig))
	if ref != nil {
		t.Fatal(ref.Error())
	}
	if got := res.Containers[0]; got.Hint != pref(1) || !cmp.Equal(got.Devices.Taken, ids("n1", 0, 1)) {
		t.Errorf("cards: hint %v, taken %v", got.Hint, got.Devices.Taken)
	}
	if got := res.Containers[1]; got.Hint != pref(0) || !cmp.Equal(got.Devices.Taken, ids("m0", 0, 1)) {
		t.Errorf("instances: hint %v, taken %v", got.Hint, got.Devices.Taken)
	}
	// Three instances fit no single NUMA node, though three cards' worth of devices are free there.
	mig.Devices = 3
	if _, ref := Admit(twoNUMA(PolicySingleNUMANode, ScopeContainer), devs, pod(false, mig)); ref == nil || ref.Reason != ReasonTopologyAffinity {
		t.Errorf("3 instances: refusal %v, want TopologyAffinityError", ref)
	}
	// At pod scope, the pod's one resource.
	if !pod(false, mig, Container{Name: "m2", Devices: 1, Resource: "1g.10gb"}).OneResource() || pod(false, app("w", 1, 0), mig).OneResource() {
		t.Error("OneResource")
	}
	mig.Devices = 2
	res, ref = Admit(twoNUMA(PolicySingleNUMANode, ScopePod), devs, pod(false, mig))
	if ref != nil || res.Pod != pref(0) {
		t.Errorf("pod scope: hint %v, refusal %v", res.Pod, ref)
	}
}

// DevicesOf lists MIG instances after the cards, of their profile's resource, on their parent's NUMA
// node; a parent whose MIG mode is pending has none.
func TestDevicesOfMIG(t *testing.T) {
	inv := &annotations.Inventory{Kubelet: &annotations.KubeletTopology{TopologyManagerPolicy: "single-numa-node", DeviceTopology: true},
		GPUs: []annotations.GPU{
			{UUID: "GPU-p", NUMA: 1, Shares: 1, MIG: &annotations.MIG{Mode: annotations.MIGEnabled, Instances: []annotations.MIGInstance{
				{UUID: "MIG-a", Profile: "1g.10gb+me", Healthy: true}, {UUID: "MIG-b", Profile: "3g.40gb"}}}},
			{UUID: "GPU-q", NUMA: 0, Shares: 1, MIG: &annotations.MIG{Mode: annotations.MIGEnabling}},
			{UUID: "GPU-c", NUMA: 0, Healthy: true, Shares: 1},
		}}
	want := []Device{{ID: "GPU-p", NUMA: 1}, {ID: "GPU-q", NUMA: 0}, {ID: "GPU-c", NUMA: 0, Healthy: true},
		{ID: "MIG-a", Resource: "1g.10gb.me", NUMA: 1, Healthy: true, Held: true}, {ID: "MIG-b", Resource: "3g.40gb", NUMA: 1}}
	if diff := cmp.Diff(want, DevicesOf(inv, func(id string) bool { return id == "MIG-a" })); diff != "" {
		t.Errorf("DevicesOf (-want +got):\n%s", diff)
	}
}
