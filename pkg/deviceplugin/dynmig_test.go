package deviceplugin

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

// dynPlugin is a plugin on a simulated node of two A100-80GB cards in MIG mode (GPU-d0 holding the
// instances of the file, GPU-d1 empty), in a dynamic pool allowing 1g.10gb, 3g.40gb, 4g.40gb and
// 7g.80gb; it returns the simulated NVML too.
func dynPlugin(t *testing.T, d0 string) (*Plugin, *sim.Server) {
	t.Helper()
	srv, found := discoverSim(t, `nodes:
  node1:
    - {uuid: GPU-d0, model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled`+d0+`}}
    - {uuid: GPU-d1, model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled}}
`)
	found, err := withDynamicMIG(srv, found, []string{"1g.10gb", "3g.40gb", "4g.40gb", "7g.80gb"}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	p := newPlugin(pluginOptions{Node: testNode, Names: annotations.DefaultResourceNames(), SchedulerNames: []string{testScheduler, testExactScheduler}, Cards: found, Shares: 1, Topology: true,
		Log: logr.Discard(), CacheWait: 20 * time.Millisecond, MIG: nvidia.Initialised{Lib: srv, Control: nvidia.MIG{Lib: srv}}})
	p.kubeletRecord = agreeing(p)
	p.MarkSynced()
	return p, srv
}

var (
	dyn1g = annotations.DefaultResourceNames().MIGResource("1g.10gb")
	dyn3g = annotations.DefaultResourceNames().MIGResource("3g.40gb")
	dyn4g = annotations.DefaultResourceNames().MIGResource("4g.40gb")
)

func placement(parent, profile string, start int) string {
	return annotations.MIGPlacementID(parent, profile, start)
}

// instancesOn is what the simulated NVML holds on a card: profile@start, in start order.
func instancesOn(t *testing.T, srv *sim.Server, parent string) []string {
	t.Helper()
	ins, err := nvidia.MIG{Lib: srv}.Instances(parent)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, in := range ins {
		out = append(out, in.Profile+"@"+strconv.Itoa(in.Start))
	}
	return out
}

// The kubelet sees one device per legal placement of each allowed profile, its ID the placement
// ID; placements an instance overlaps are Unhealthy; the registered resources are the profiles'.
func TestDynamicMIGAdvertisesPlacements(t *testing.T) {
	p, _ := dynPlugin(t, `, instances: [{profile: 3g.40gb, uuid: MIG-held}]`)
	if diff := cmp.Diff([]string{"nvidia.com/gpu", string(dyn1g), string(dyn3g), string(dyn4g), "nvidia.com/mig-7g.80gb"}, resourceStrings(p.Resources())); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	devs, _ := p.currentDevices(dyn3g)
	// MIG-held is a 3g.40gb at 0–3 (the simulation places it first-fit) on GPU-d0, adopted.
	want := []listed{
		{placement("GPU-d0", "3g.40gb", 0), pluginapi.Healthy, 0}, {placement("GPU-d0", "3g.40gb", 4), pluginapi.Healthy, 0},
		{placement("GPU-d1", "3g.40gb", 0), pluginapi.Healthy, 0}, {placement("GPU-d1", "3g.40gb", 4), pluginapi.Healthy, 0},
	}
	if diff := cmp.Diff(want, listedOf(devs)); diff != "" {
		t.Errorf("3g.40gb devices (-want +got):\n%s", diff)
	}
	devs, _ = p.currentDevices(dyn4g)
	want = []listed{{placement("GPU-d0", "4g.40gb", 0), pluginapi.Unhealthy, 0}, {placement("GPU-d1", "4g.40gb", 0), pluginapi.Healthy, 0}}
	if diff := cmp.Diff(want, listedOf(devs)); diff != "" {
		t.Errorf("4g.40gb devices (-want +got):\n%s", diff)
	}
}

func resourceStrings[T ~string](rs []T) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r)
	}
	return out
}

// Allocate of an assigned placement creates that GPU instance (and its compute instance) on the
// card and serves its MIG UUID; the inventory lists it, and the placements it overlaps turn
// Unhealthy. When the pod is gone (PodResources and the cache no longer show it), reclaim destroys
// it; an instance still listed by PodResources is never destroyed.
func TestDynamicMIGCreateServeReclaim(t *testing.T) {
	p, srv := dynPlugin(t, "")
	rewrites := 0
	p.devicesChanged = func() { rewrites++ }
	id := placement("GPU-d1", "4g.40gb", 0)
	pod := newPod("big", ctr{name: "main", ids: []string{id}, mig: "4g.40gb"})
	obj := pod.obj(t)
	p.UpsertPod(obj)
	k := newMIGKubelet(p, dyn4g)
	ids, resp, err := k.allocate(1)
	if err != nil {
		t.Fatal(err)
	}
	if !sameSet(ids, []string{id}) {
		t.Fatalf("preferred %v, want the assigned %s", ids, id)
	}
	if diff := cmp.Diff([]string{"4g.40gb@0"}, instancesOn(t, srv, "GPU-d1")); diff != "" {
		t.Fatalf("NVML holds (-want +got):\n%s", diff)
	}
	inv := p.Inventory()
	ins := inv.GPUs[1].MIG.Instances
	if len(ins) != 1 || ins[0].Start != 0 || ins[0].Size != 4 || ins[0].Profile != "4g.40gb" {
		t.Fatalf("inventory instances %+v, want the 4g.40gb at 0:4", ins)
	}
	if got := resp.Envs[EnvVisibleDevices]; got != ins[0].UUID || !strings.HasPrefix(got, "MIG-") {
		t.Errorf("%s=%q, want the new instance's MIG UUID %s", EnvVisibleDevices, got, ins[0].UUID)
	}
	if rewrites == 0 {
		t.Error("the inventory was not rewritten after the creation")
	}
	if _, err := annotations.EncodeInventory(inv); err != nil {
		t.Fatalf("inventory does not encode: %v", err)
	}
	// The placements the instance overlaps on GPU-d1: 3g at 0, 1g at 0..3, 7g; not 3g at 4.
	devs, _ := p.currentDevices(dyn3g)
	health := map[string]string{}
	for _, d := range devs {
		health[d.ID] = d.Health
	}
	if health[placement("GPU-d1", "3g.40gb", 0)] != pluginapi.Unhealthy || health[placement("GPU-d1", "3g.40gb", 4)] != pluginapi.Healthy {
		t.Errorf("3g.40gb health beside a 4g.40gb at 0: %v", health)
	}
	devs, _ = p.currentDevices(dyn4g)
	if devs[1].ID != id || devs[1].Health != pluginapi.Healthy {
		t.Errorf("the pod's own placement %v, want healthy", devs[1])
	}
	// PodResources still lists the pod: nothing is destroyed, even with the pod gone from the cache.
	list := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Name: "big", Namespace: "default",
		Containers: []*podresourcesapi.ContainerResources{{Name: "main", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: string(dyn4g), DeviceIds: []string{id}}}}}}}}
	p.DeletePod(obj)
	if n := p.reclaim(list); n != 0 {
		t.Fatalf("reclaim destroyed %d instances PodResources lists", n)
	}
	if n := p.reclaim(&podresourcesapi.ListPodResourcesResponse{}); n != 1 {
		t.Fatalf("reclaim destroyed %d instances, want the gone pod's 1", n)
	}
	if got := instancesOn(t, srv, "GPU-d1"); len(got) != 0 {
		t.Errorf("NVML still holds %v", got)
	}
	if ins := p.Inventory().GPUs[1].MIG.Instances; len(ins) != 0 {
		t.Errorf("inventory still lists %+v", ins)
	}
	devs, _ = p.currentDevices(dyn3g)
	for _, d := range devs {
		if d.Health != pluginapi.Healthy {
			t.Errorf("%s %s after the instance went", d.ID, d.Health)
		}
	}
}

// A creation NVML refuses is a clear refusal naming the placement and NVML's answer; an instance
// the plugin did not know (made behind its back) is read into the inventory, so the extender
// stops offering the placement.
func TestDynamicMIGCreationFailureRefuses(t *testing.T) {
	p, srv := dynPlugin(t, "")
	// Behind the plugin's back: a 1g.10gb at 0 on GPU-d1.
	if _, err := (nvidia.MIG{Lib: srv}).Create("GPU-d1", "1g.10gb", 0); err != nil {
		t.Fatal(err)
	}
	id := placement("GPU-d1", "3g.40gb", 0)
	p.UpsertPod(newPod("mid", ctr{name: "main", ids: []string{id}, mig: "3g.40gb"}).obj(t))
	_, err := allocateOn(p, dyn3g, id)
	if err == nil {
		t.Fatal("Allocate served a placement NVML cannot create")
	}
	for _, want := range []string{"cannot create the MIG instance", id, "ERROR_INSUFFICIENT_RESOURCES"} {
		if !strings.Contains(err.Error(), want) && !strings.Contains(err.Error(), strings.ToLower(want)) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	if ins := p.Inventory().GPUs[1].MIG.Instances; len(ins) != 1 || ins[0].Start != 0 || ins[0].Profile != "1g.10gb" {
		t.Errorf("inventory instances %+v, want the 1g.10gb found at 0", ins)
	}
	devs, _ := p.currentDevices(dyn3g)
	for _, d := range devs {
		if d.ID == id && d.Health != pluginapi.Unhealthy {
			t.Errorf("%s is %s; an instance overlaps it", id, d.Health)
		}
	}
}

// After a restart the plugin adopts the instances at allowed placements: a pod's instance is served
// again (not created twice), and is destroyed only once its pod is gone; an instance of a profile
// not allowed stays.
func TestDynamicMIGRestartAdopts(t *testing.T) {
	p, srv := dynPlugin(t, `, instances: [{profile: 4g.40gb, uuid: MIG-run}, {profile: 2g.20gb, uuid: MIG-other}]`)
	id := placement("GPU-d0", "4g.40gb", 0)
	obj := newPod("big", ctr{name: "main", ids: []string{id}, mig: "4g.40gb"}).obj(t)
	p.UpsertPod(obj)
	// The kubelet's record shows the running pod holding the placement.
	list := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Name: "big", Namespace: "default",
		Containers: []*podresourcesapi.ContainerResources{{Name: "main", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: string(dyn4g), DeviceIds: []string{id}}}}}}}}
	p.applyPodResources(list)
	if n := p.reclaim(list); n != 0 {
		t.Fatalf("reclaim destroyed %d instances in use", n)
	}
	if diff := cmp.Diff([]string{"4g.40gb@0", "2g.20gb@4"}, instancesOn(t, srv, "GPU-d0")); diff != "" {
		t.Fatalf("NVML holds (-want +got):\n%s", diff)
	}
	p.DeletePod(obj)
	if n := p.reclaim(&podresourcesapi.ListPodResourcesResponse{}); n != 1 {
		t.Fatalf("reclaim destroyed %d, want the adopted 4g.40gb", n)
	}
	if diff := cmp.Diff([]string{"2g.20gb@4"}, instancesOn(t, srv, "GPU-d0")); diff != "" {
		t.Errorf("NVML holds (-want +got):\n%s", diff)
	}
}

// Without NVML control a placement's Allocate is refused, not served without an instance.
func TestDynamicMIGWithoutControlRefuses(t *testing.T) {
	p, _ := dynPlugin(t, "")
	p.mig = nil
	id := placement("GPU-d1", "1g.10gb", 6)
	p.UpsertPod(newPod("small", ctr{name: "main", ids: []string{id}, mig: "1g.10gb"}).obj(t))
	if _, err := allocateOn(p, dyn1g, id); err == nil || !strings.Contains(err.Error(), "cannot create MIG instances") {
		t.Fatalf("Allocate = %v, want a refusal", err)
	}
}

// The kubelet choosing another placement than the assigned one (a substitute) that overlaps a
// placement assigned to another pod still in flight is refused: the extender reserved those slices.
func TestDynamicMIGSubstituteOverlappingInFlightRefused(t *testing.T) {
	p, srv := dynPlugin(t, "")
	p.UpsertPod(newPod("big", ctr{name: "main", ids: []string{placement("GPU-d1", "4g.40gb", 0)}, mig: "4g.40gb"}).obj(t))
	p.UpsertPod(newPod("mid", ctr{name: "main", ids: []string{placement("GPU-d1", "3g.40gb", 4)}, mig: "3g.40gb"}).obj(t))
	sub := placement("GPU-d1", "3g.40gb", 0)
	_, err := allocateOn(p, dyn3g, sub)
	if err == nil || !strings.Contains(err.Error(), "overlaps the one assigned to container main of pod default/big") {
		t.Fatalf("Allocate of %s = %v, want a refusal naming pod big", sub, err)
	}
	if got := instancesOn(t, srv, "GPU-d1"); len(got) != 0 {
		t.Errorf("NVML holds %v after the refusal", got)
	}
	// The assigned placement is served.
	if _, err := allocateOn(p, dyn3g, placement("GPU-d1", "3g.40gb", 4)); err != nil {
		t.Fatalf("the assigned placement: %v", err)
	}
	if diff := cmp.Diff([]string{"3g.40gb@4"}, instancesOn(t, srv, "GPU-d1")); diff != "" {
		t.Errorf("NVML holds (-want +got):\n%s", diff)
	}
}

// A pool moved from static to dynamic MIG without a drain: the operator's instance no pod holds
// is destroyed at the first reconciliation, one a running pod holds by its MIG UUID (given while
// the pool was static) is kept until that pod is gone.
func TestDynamicMIGStaticToDynamic(t *testing.T) {
	p, srv := dynPlugin(t, `, instances: [{profile: 3g.40gb, uuid: MIG-busy}, {profile: 3g.40gb, uuid: MIG-idle}]`)
	list := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{Name: "old", Namespace: "default",
		Containers: []*podresourcesapi.ContainerResources{{Name: "main", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: string(dyn3g), DeviceIds: []string{"MIG-busy"}}}}}}}}
	if n := p.reclaim(list); n != 1 {
		t.Fatalf("reclaim destroyed %d, want the idle instance", n)
	}
	if diff := cmp.Diff([]string{"3g.40gb@0"}, instancesOn(t, srv, "GPU-d0")); diff != "" {
		t.Fatalf("NVML holds (-want +got):\n%s", diff)
	}
	if n := p.reclaim(&podresourcesapi.ListPodResourcesResponse{}); n != 1 {
		t.Fatalf("after the old pod: reclaim destroyed %d, want 1", n)
	}
	if got := instancesOn(t, srv, "GPU-d0"); len(got) != 0 {
		t.Errorf("NVML holds %v", got)
	}
}
