package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
)

var migNames = annotations.DefaultResourceNames()

// The MIG resources of migCards.
var (
	mig1g  = migNames.MIGResource("1g.10gb")
	mig2g  = migNames.MIGResource("2g.20gb")
	mig3g  = migNames.MIGResource("3g.40gb")
	gpuRes = migNames.GPU
)

// migUUID is the MIG UUID of instance k of test card c.
func migUUID(c, k int) string { return fmt.Sprintf("MIG-%02d-%d", c, k) }

// migParentOf is the parent card of a migUUID.
func migParentOf(id string) string { return "GPU-" + id[len("MIG-"):len("MIG-")+2] }

// migCards is the node of issue #23: GPU-00 (NUMA 0) split into 7× 1g.10gb (MIG-00-0 … MIG-00-6);
// GPU-01 (NUMA 1) into 3g.40gb (MIG-01-0), 2g.20gb (MIG-01-1) and 1g.10gb (MIG-01-2); GPU-02 (NUMA
// 1) served whole.
func migCards() []nvidia.Card {
	on := nvidia.MIGMode{Current: true, Pending: true}
	card := func(i, numa int) nvidia.Card {
		return nvidia.Card{UUID: uuidOf(i), Index: i, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: numa, PCIBusID: fmt.Sprintf("0000:%02x:00.0", 0x10+i)}
	}
	c0, c1, c2 := card(0, 0), card(1, 1), card(2, 1)
	c0.MIG, c1.MIG = on, on
	for k := range 7 {
		c0.Instances = append(c0.Instances, nvidia.MIGInstance{UUID: migUUID(0, k), Profile: "1g.10gb", GI: 7 + k, Start: k, Size: 1, MemoryMiB: 9728, SMs: 14})
	}
	c1.Instances = []nvidia.MIGInstance{
		{UUID: migUUID(1, 0), Profile: "3g.40gb", GI: 2, Start: 0, Size: 4, MemoryMiB: 40192, SMs: 42},
		{UUID: migUUID(1, 1), Profile: "2g.20gb", GI: 3, Start: 4, Size: 2, MemoryMiB: 19968, SMs: 28},
		{UUID: migUUID(1, 2), Profile: "1g.10gb", GI: 9, Start: 6, Size: 1, MemoryMiB: 9728, SMs: 14},
	}
	return []nvidia.Card{c0, c1, c2}
}

// migKubelet drives one resource of the plugin as the kubelet's device manager does.
type migKubelet struct {
	p     *Plugin
	res   corev1.ResourceName
	taken map[string]bool
}

func newMIGKubelet(p *Plugin, res corev1.ResourceName) *migKubelet {
	return &migKubelet{p: p, res: res, taken: map[string]bool{}}
}

// free are the healthy devices of the resource not handed out yet, in advertised order.
func (k *migKubelet) free() []string {
	devs, _ := k.p.currentDevices(k.res)
	var out []string
	for _, d := range devs {
		if d.Health == pluginapi.Healthy && !k.taken[d.ID] {
			out = append(out, d.ID)
		}
	}
	return out
}

func (k *migKubelet) allocate(size int) ([]string, *pluginapi.ContainerAllocateResponse, error) {
	srv := k.p.Server(k.res)
	pref, err := srv.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: k.free(), AllocationSize: int32(size)},
	}})
	if err != nil {
		return nil, nil, err
	}
	ids := pref.ContainerResponses[0].DeviceIDs
	resp, err := srv.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return ids, nil, err
	}
	for _, id := range ids {
		k.taken[id] = true
	}
	return ids, resp.ContainerResponses[0], nil
}

func allocateOn(p *Plugin, res corev1.ResourceName, ids ...string) (*pluginapi.AllocateResponse, error) {
	return p.Server(res).Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
}

// listed is a device as ListAndWatch sends it: ID, health and NUMA node (-1: no TopologyInfo).
type listed struct {
	ID     string
	Health string
	NUMA   int64
}

func listedOf(devs []*pluginapi.Device) []listed {
	out := make([]listed, len(devs))
	for i, d := range devs {
		out[i] = listed{ID: d.ID, Health: d.Health, NUMA: -1}
		if d.Topology != nil && len(d.Topology.Nodes) == 1 {
			out[i].NUMA = d.Topology.Nodes[0].ID
		}
	}
	return out
}

// recRegistrar is a kubelet's registration service that records every registration.
type recRegistrar struct {
	pluginapi.UnimplementedRegistrationServer
	mu   sync.Mutex
	reqs []*pluginapi.RegisterRequest
	srv  *grpc.Server
}

func (r *recRegistrar) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	return &pluginapi.Empty{}, nil
}

// byResource is the endpoints registered per resource.
func (r *recRegistrar) byResource() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]string{}
	for _, q := range r.reqs {
		out[q.ResourceName] = append(out[q.ResourceName], q.Endpoint)
	}
	return out
}

func startRecKubelet(t *testing.T, dir string) *recRegistrar {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	r := &recRegistrar{srv: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(r.srv, r)
	go func() { _ = r.srv.Serve(l) }()
	t.Cleanup(r.srv.Stop)
	return r
}

// firstList connects to a plugin socket as the kubelet does and returns ListAndWatch's first answer.
func firstList(t *testing.T, socket string) []listed {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("ListAndWatch on %s: %v", socket, err)
	}
	return listedOf(resp.Devices)
}

// A node with MIG parents registers one resource per profile beside the GPU resource, each on its
// own socket, each listing its own instances with the parent's NUMA node; a kubelet restart makes
// every resource register again, once.
func TestMIGResourcesRegisterAndList(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	first := startRecKubelet(t, dir)
	p := testPlugin(t, migCards(), 1)
	links := kubeletLinks(p, dir, migNames, logrDiscard())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, l := range links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.run(ctx); err != nil {
				t.Errorf("run %s: %v", l.resource, err)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	// Profiles in the order the cards list them: GPU-00's 1g.10gb, then GPU-01's 3g.40gb, 2g.20gb.
	want := map[string][]string{
		"nvidia.com/gpu":         {"cardinal-nvidia-com-gpu.sock"},
		"nvidia.com/mig-1g.10gb": {"cardinal-mig-1g.10gb.sock"},
		"nvidia.com/mig-3g.40gb": {"cardinal-mig-3g.40gb.sock"},
		"nvidia.com/mig-2g.20gb": {"cardinal-mig-2g.20gb.sock"},
	}
	waitFor(t, "every resource registered", func() bool { return len(first.byResource()) == len(want) })
	if diff := cmp.Diff(want, first.byResource()); diff != "" {
		t.Errorf("registrations (-want +got):\n%s", diff)
	}

	lists := map[corev1.ResourceName][]listed{
		// The parents in MIG mode are never served whole: Unhealthy under nvidia.com/gpu.
		gpuRes: {{"GPU-00", pluginapi.Unhealthy, 0}, {"GPU-01", pluginapi.Unhealthy, 1}, {"GPU-02", pluginapi.Healthy, 1}},
		mig1g: {
			{"MIG-00-0", pluginapi.Healthy, 0}, {"MIG-00-1", pluginapi.Healthy, 0}, {"MIG-00-2", pluginapi.Healthy, 0}, {"MIG-00-3", pluginapi.Healthy, 0},
			{"MIG-00-4", pluginapi.Healthy, 0}, {"MIG-00-5", pluginapi.Healthy, 0}, {"MIG-00-6", pluginapi.Healthy, 0}, {"MIG-01-2", pluginapi.Healthy, 1},
		},
		mig3g: {{"MIG-01-0", pluginapi.Healthy, 1}},
		mig2g: {{"MIG-01-1", pluginapi.Healthy, 1}},
	}
	for res, w := range lists {
		got := firstList(t, filepath.Join(dir, socketFor(migNames, res)))
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("ListAndWatch of %s (-want +got):\n%s", res, diff)
		}
	}

	// The kubelet restarts: it stops, wipes the folder, and serves a new kubelet.sock.
	first.srv.Stop()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	second := startRecKubelet(t, dir)
	waitFor(t, "every resource registered with the new kubelet", func() bool { return len(second.byResource()) == len(want) })
	time.Sleep(500 * time.Millisecond) // both events of the restart have been seen well within this time
	if diff := cmp.Diff(want, second.byResource()); diff != "" {
		t.Errorf("registrations with the restarted kubelet (-want +got):\n%s", diff)
	}
}

// Each container gets exactly the instances assigned to it, named MIG-<uuid> in
// NVIDIA_VISIBLE_DEVICES; the kubelet's preferred allocation is the assignment; records name them.
func TestMIGAllocateExactInstances(t *testing.T) {
	p := testPlugin(t, migCards(), 1)
	one := newPod("one", ctr{name: "main", ids: []string{migUUID(0, 3)}, mig: "1g.10gb"})
	// Two instances of one parent are two devices.
	two := newPod("two", ctr{name: "main", ids: []string{migUUID(0, 5), migUUID(0, 1)}, mig: "1g.10gb"})
	// Instances of two parents, on two NUMA nodes.
	across := newPod("across", ctr{name: "main", ids: []string{migUUID(1, 2), migUUID(0, 0)}, mig: "1g.10gb"})
	big := newPod("big", ctr{name: "main", ids: []string{migUUID(1, 0)}, mig: "3g.40gb"})
	whole := newPod("whole", ctr{name: "main", ids: []string{uuidOf(2)}})
	for _, b := range []*podBuilder{one, two, across, big, whole} {
		p.UpsertPod(b.obj(t))
	}
	k1g, k3g, kgpu := newMIGKubelet(p, mig1g), newMIGKubelet(p, mig3g), newMIGKubelet(p, gpuRes)
	cases := []struct {
		pod     string
		k       *migKubelet
		size    int
		ids     []string
		visible string
	}{
		{"one", k1g, 1, []string{"MIG-00-3"}, "MIG-00-3"},
		// Visible in CUDA's order: by parent's bus, then the parent's instance order.
		{"two", k1g, 2, []string{"MIG-00-5", "MIG-00-1"}, "MIG-00-1,MIG-00-5"},
		{"across", k1g, 2, []string{"MIG-01-2", "MIG-00-0"}, "MIG-00-0,MIG-01-2"},
		{"big", k3g, 1, []string{"MIG-01-0"}, "MIG-01-0"},
		{"whole", kgpu, 1, []string{"GPU-02"}, "GPU-02"},
	}
	for _, c := range cases {
		ids, resp, err := c.k.allocate(c.size)
		if err != nil {
			t.Fatalf("%s: %v", c.pod, err)
		}
		if !sameSet(ids, c.ids) {
			t.Errorf("%s: allocated %v, want %v", c.pod, ids, c.ids)
		}
		if got := resp.Envs[EnvVisibleDevices]; got != c.visible {
			t.Errorf("%s: %s=%q, want %q", c.pod, EnvVisibleDevices, got, c.visible)
		}
		if _, ok := resp.Envs[EnvSMLimit]; ok {
			t.Errorf("%s: MIG or whole-card container got a compute limit: %v", c.pod, resp.Envs)
		}
		rec := recordOf(t, p, c.pod)["main"]
		if !sameSet(rec.IDs, c.ids) || rec.Source != annotations.SourceAllocate {
			t.Errorf("%s: record %+v, want IDs %v from allocate", c.pod, rec, c.ids)
		}
	}
}

// Every device-list strategy names the instances by MIG UUID (CDI too, under either CDI name
// strategy: the index name of a MIG device is not known to the plugin).
func TestMIGDeviceListStrategies(t *testing.T) {
	cases := []struct {
		name string
		dl   DeviceListConfig
		want func(t *testing.T, r *pluginapi.ContainerAllocateResponse)
	}{
		{"envvar", DeviceListConfig{Strategies: DeviceListStrategies{DeviceListEnvvar}}, func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
			if got := r.Envs[EnvVisibleDevices]; got != "MIG-00-2,MIG-01-2" {
				t.Errorf("%s=%q", EnvVisibleDevices, got)
			}
		}},
		{"volume-mounts", DeviceListConfig{Strategies: DeviceListStrategies{DeviceListVolumeMounts}}, func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
			var got []string
			for _, m := range r.Mounts {
				got = append(got, m.ContainerPath+"<-"+m.HostPath)
			}
			want := []string{VolumeMountsRoot + "/MIG-00-2<-/dev/null", VolumeMountsRoot + "/MIG-01-2<-/dev/null"}
			if diff := cmp.Diff(want, got); diff != "" || r.Envs[EnvVisibleDevices] != VolumeMountsRoot {
				t.Errorf("mounts (-want +got):\n%s; %s=%q", diff, EnvVisibleDevices, r.Envs[EnvVisibleDevices])
			}
		}},
		{"cdi-annotations by index", DeviceListConfig{Strategies: DeviceListStrategies{DeviceListCDIAnnotations}, CDIDeviceIDStrategy: CDIDeviceIDIndex},
			func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
				var got []string
				for k, v := range r.Annotations {
					if k != AllocatedForAnnotation {
						got = append(got, v)
					}
				}
				if diff := cmp.Diff([]string{"nvidia.com/gpu=MIG-00-2,nvidia.com/gpu=MIG-01-2"}, got); diff != "" || r.Envs[EnvVisibleDevices] != VisibleDevicesVoid {
					t.Errorf("CDI annotations (-want +got):\n%s; %s=%q", diff, EnvVisibleDevices, r.Envs[EnvVisibleDevices])
				}
			}},
		{"cdi-cri", DeviceListConfig{Strategies: DeviceListStrategies{DeviceListCDICRI}}, func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
			var got []string
			for _, d := range r.CdiDevices {
				got = append(got, d.Name)
			}
			if diff := cmp.Diff([]string{"nvidia.com/gpu=MIG-00-2", "nvidia.com/gpu=MIG-01-2"}, got); diff != "" {
				t.Errorf("CDI devices (-want +got):\n%s", diff)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPlugin(pluginOptions{Node: testNode, Names: migNames, SchedulerNames: []string{testScheduler, testExactScheduler}, Cards: migCards(), Shares: 1, Topology: true,
				DeviceList: c.dl, Log: logrDiscard(), CacheWait: 20 * time.Millisecond})
			p.MarkSynced()
			p.UpsertPod(newPod("pod", ctr{name: "main", ids: []string{migUUID(1, 2), migUUID(0, 2)}, mig: "1g.10gb"}).obj(t))
			resp, err := allocateOn(p, mig1g, migUUID(1, 2), migUUID(0, 2))
			if err != nil {
				t.Fatal(err)
			}
			c.want(t, resp.ContainerResponses[0])
		})
	}
}

// Sets of instances that name no container are refused with a message that says why, as sets of
// cards are.
func TestMIGAllocateRefusals(t *testing.T) {
	p := testPlugin(t, migCards(), 1)
	p.UpsertPod(newPod("first", ctr{name: "main", ids: []string{migUUID(0, 0)}, mig: "1g.10gb"}).obj(t))
	p.UpsertPod(newPod("second", ctr{name: "main", ids: []string{migUUID(0, 1)}, mig: "1g.10gb"}).obj(t))
	cases := []struct {
		name     string
		res      corev1.ResourceName
		ids      []string
		contains string
	}{
		{"no container asks for two", mig1g, []string{migUUID(0, 0), migUUID(0, 1)},
			"cardinal: no-owner: devices MIG-00-0,MIG-00-1 match no assignment, and no container in flight on this node asks for 2 device(s) of nvidia.com/mig-1g.10gb next"},
		// "first" is certainly admitted first, and MIG-00-1 is "second"'s.
		{"another pod's instance", mig1g, []string{migUUID(0, 1)},
			"cardinal: conflict: devices MIG-00-1 differ from the assignment of pod default/first container \"main\" (MIG-00-0) and include cards assigned to pod default/second"},
		{"an instance of another resource", mig1g, []string{migUUID(1, 0)},
			"cardinal: unknown-device: device MIG-01-0 is advertised as nvidia.com/mig-3g.40gb, not nvidia.com/mig-1g.10gb"},
		{"a card under a MIG resource", mig1g, []string{uuidOf(2)},
			"cardinal: unknown-device: device GPU-02 is advertised as nvidia.com/gpu, not nvidia.com/mig-1g.10gb"},
		{"an instance under the GPU resource", gpuRes, []string{migUUID(0, 0)},
			"cardinal: unknown-device: device MIG-00-0 is advertised as nvidia.com/mig-1g.10gb, not nvidia.com/gpu"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := allocateOn(p, c.res, c.ids...)
			if err == nil || !strings.Contains(err.Error(), c.contains) {
				t.Fatalf("got %v, want an error containing %q", err, c.contains)
			}
		})
	}
}

// An assignment that names instances of another profile, or cards, for a MIG container (and
// instances for a card container) cannot be used.
func TestMIGAssignmentOfAnotherKindRefused(t *testing.T) {
	cases := []struct {
		name     string
		c        ctr
		devices  []annotations.DeviceAssignment
		res      corev1.ResourceName
		id       string
		contains string
	}{
		{"an instance of another profile", ctr{name: "main", ids: []string{migUUID(0, 3)}, mig: "1g.10gb"},
			[]annotations.DeviceAssignment{{UUID: migUUID(1, 1), ID: migUUID(1, 1), Parent: uuidOf(1), Profile: "2g.20gb"}}, mig1g, migUUID(0, 4),
			`cardinal: unusable-assignment: the assignment of pod default/pod container "main" names MIG instance MIG-01-1, which is served as nvidia.com/mig-2g.20gb, but the container asks for nvidia.com/mig-1g.10gb`},
		{"a card for a MIG container", ctr{name: "main", ids: []string{migUUID(0, 3)}, mig: "1g.10gb"},
			[]annotations.DeviceAssignment{{UUID: uuidOf(2), ID: uuidOf(2), MemoryMiB: 81920, Cores: 100}}, mig1g, migUUID(0, 4),
			`names card GPU-02, but the container asks for nvidia.com/mig-1g.10gb`},
		{"an instance for a card container", ctr{name: "main", ids: []string{uuidOf(2)}},
			[]annotations.DeviceAssignment{{UUID: migUUID(0, 0), ID: migUUID(0, 0), Parent: uuidOf(0), Profile: "1g.10gb"}}, gpuRes, uuidOf(2),
			`names MIG instance MIG-00-0, but the container asks for nvidia.com/gpu`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := testPlugin(t, migCards(), 1)
			obj := newPod("pod", c.c).obj(t)
			a, err := annotations.DecodeAssignment(obj.Annotations[annotations.GPUAssignment])
			if err != nil {
				t.Fatal(err)
			}
			a.Containers[0].Devices = c.devices
			v, err := annotations.EncodeAssignment(a)
			if err != nil {
				t.Fatal(err)
			}
			obj.Annotations[annotations.GPUAssignment] = v
			p.UpsertPod(obj)
			_, err = allocateOn(p, c.res, c.id)
			if err == nil || !strings.Contains(err.Error(), c.contains) {
				t.Fatalf("got %v, want an error containing %q", err, c.contains)
			}
		})
	}
}

// A container naming cards and MIG instances (admission refuses it; a pod bound past admission may
// still carry one) is refused with a message, never served.
func TestMIGMixedContainerRefused(t *testing.T) {
	for _, c := range []struct {
		res corev1.ResourceName
		id  string
	}{{gpuRes, uuidOf(2)}, {mig1g, migUUID(0, 0)}} {
		// A plugin each: the kubelet fails the pod's admission at the first refusal.
		p := testPlugin(t, migCards(), 1)
		obj := newPod("mixed", ctr{name: "main", count: 1}).unmanaged().obj(t)
		obj.Spec.Containers[0].Resources.Limits[mig1g] = *resource.NewQuantity(1, resource.DecimalSI)
		p.UpsertPod(obj)
		_, err := allocateOn(p, c.res, c.id)
		want := `cardinal: unusable-assignment: the kubelet is admitting pod default/mixed container "main" (devices ` + c.id +
			`), but it cannot be served: container "main" asks for nvidia.com/gpu and nvidia.com/mig-1g.10gb`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", c.res, err, want)
		}
	}
}

// An unhealthy instance is advertised Unhealthy on its own resource only, and every change wakes
// every resource's stream. A parent in MIG mode stays Unhealthy under the GPU resource whatever
// its own events say (its faults reach its instances through their events); a parent NVML could
// not describe at discovery starts with its instances Unhealthy.
func TestMIGHealth(t *testing.T) {
	cards := migCards()
	cards[0].Fault = "get memory of GPU-00: ERROR_UNKNOWN"
	p := testPlugin(t, cards, 1)
	health := func() map[corev1.ResourceName]map[string]string {
		out := map[corev1.ResourceName]map[string]string{}
		for _, res := range p.Resources() {
			devs, _ := p.currentDevices(res)
			out[res] = map[string]string{}
			for _, d := range devs {
				if d.Health != pluginapi.Healthy {
					out[res][d.ID] = d.Health
				}
			}
		}
		return out
	}
	down := map[string]string{}
	for k := range 7 {
		down[migUUID(0, k)] = pluginapi.Unhealthy
	}
	want := map[corev1.ResourceName]map[string]string{
		gpuRes: {"GPU-00": pluginapi.Unhealthy, "GPU-01": pluginapi.Unhealthy},
		mig1g:  down, mig2g: {}, mig3g: {},
	}
	if diff := cmp.Diff(want, health()); diff != "" {
		t.Errorf("at start (-want +got):\n%s", diff)
	}

	// The inventory lists GPU-01's instances (as discovery's conversion writes them).
	p.mu.Lock()
	p.table.cards[1].MIG = &annotations.MIG{Mode: annotations.MIGEnabled}
	for _, in := range cards[1].Instances {
		p.table.cards[1].MIG.Instances = append(p.table.cards[1].MIG.Instances, annotations.MIGInstance{UUID: in.UUID, Profile: in.Profile, Healthy: true})
	}
	p.mu.Unlock()
	instanceHealthy := func(uuid string) bool {
		inv := p.Inventory()
		return inv.GPUs[1].Instance(uuid).Healthy
	}

	_, waker := p.currentDevices(mig3g)
	if !p.SetHealth(nvidia.HealthEvent{UUID: migUUID(1, 1), Healthy: false, Reason: "XID 94"}) {
		t.Fatal("an instance turning unhealthy is not a change")
	}
	select {
	case <-waker:
	default:
		t.Error("the 3g.40gb stream was not woken by a 2g.20gb health change")
	}
	want[mig2g] = map[string]string{"MIG-01-1": pluginapi.Unhealthy}
	if diff := cmp.Diff(want, health()); diff != "" {
		t.Errorf("after MIG-01-1 turned unhealthy (-want +got):\n%s", diff)
	}
	if instanceHealthy(migUUID(1, 1)) || !instanceHealthy(migUUID(1, 0)) {
		t.Error("the inventory does not say MIG-01-1 alone is unhealthy")
	}

	if p.SetHealth(nvidia.HealthEvent{UUID: uuidOf(1), Healthy: true, Reason: "probe passed"}) {
		t.Error("a parent in MIG mode turning healthy is a change")
	}
	p.SetHealth(nvidia.HealthEvent{UUID: migUUID(1, 1), Healthy: true, Reason: "recovered"})
	want[mig2g] = map[string]string{}
	if diff := cmp.Diff(want, health()); diff != "" {
		t.Errorf("after recovery (-want +got):\n%s", diff)
	}
	if !instanceHealthy(migUUID(1, 1)) {
		t.Error("the inventory does not say MIG-01-1 recovered")
	}
	if inv := p.Inventory(); inv.GPUs[1].Healthy {
		t.Error("a parent in MIG mode is healthy in the inventory")
	}
}

// Records and the PodResources reconciliation count MIG resources: a pod Cardinal did not schedule
// that holds instances is recorded, and the instances it holds are never handed to another pod.
func TestMIGRecordsAndPodResources(t *testing.T) {
	p := testPlugin(t, migCards(), 1)
	other := newPod("other", ctr{name: "main", count: 2, mig: "1g.10gb"}).unmanaged()
	p.UpsertPod(other.obj(t))
	later := newPod("later", ctr{name: "main", ids: []string{migUUID(0, 6)}, mig: "1g.10gb"})
	p.UpsertPod(later.obj(t))

	// The kubelet lists the instances "other" holds (it was admitted before this plugin started).
	p.applyPodResources(&podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{{
		Name: "other", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{Name: "main", Devices: []*podresourcesapi.ContainerDevices{
			{ResourceName: string(mig1g), DeviceIds: []string{migUUID(0, 2), migUUID(0, 0)}},
			{ResourceName: "example.com/other", DeviceIds: []string{"x"}},
		}}},
	}}})
	want := annotations.ContainerAllocation{Name: "main", IDs: []string{"MIG-00-0", "MIG-00-2"}, Source: annotations.SourcePodResources}
	if diff := cmp.Diff(want, recordOf(t, p, "other")["main"]); diff != "" {
		t.Errorf("record of other (-want +got):\n%s", diff)
	}
	ids, _, err := newMIGKubelet(p, mig1g).allocate(1)
	if err != nil || !slices.Equal(ids, []string{"MIG-00-6"}) {
		t.Fatalf("later got %v, %v; want [MIG-00-6]", ids, err)
	}
	if got := recordOf(t, p, "later")["main"].IDs; !slices.Equal(got, []string{"MIG-00-6"}) {
		t.Errorf("record of later: %v", got)
	}
	// A substitute may not take an instance "other" holds.
	p.UpsertPod(newPod("third", ctr{name: "main", ids: []string{migUUID(0, 5)}, mig: "1g.10gb"}).obj(t))
	_, err = allocateOn(p, mig1g, migUUID(0, 0))
	if err == nil || !strings.Contains(err.Error(), "MIG instance MIG-00-0 (1g.10gb on card GPU-00) is held by pod default/other") {
		t.Fatalf("got %v, want a refusal naming the holder", err)
	}
}

// A pod Cardinal did not schedule is served free instances, and recorded.
func TestMIGUnmanagedPodServed(t *testing.T) {
	p := testPlugin(t, migCards(), 1)
	p.UpsertPod(newPod("planned", ctr{name: "main", ids: []string{migUUID(0, 0)}, mig: "1g.10gb"}).obj(t))
	// Bound later: "planned" is admitted first.
	ids, _, err := newMIGKubelet(p, mig1g).allocate(1)
	if err != nil || !slices.Equal(ids, []string{"MIG-00-0"}) {
		t.Fatalf("planned got %v, %v", ids, err)
	}
	p.UpsertPod(newPod("other", ctr{name: "main", count: 1, mig: "2g.20gb"}).unmanaged().obj(t))
	resp2, err := allocateOn(p, mig2g, migUUID(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp2.ContainerResponses[0].Envs[EnvVisibleDevices]; got != "MIG-01-1" {
		t.Errorf("%s=%q", EnvVisibleDevices, got)
	}
	want := annotations.ContainerAllocation{Name: "main", IDs: []string{"MIG-01-1"}, Source: annotations.SourceAllocate}
	if diff := cmp.Diff(want, recordOf(t, p, "other")["main"]); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}

// When the kubelet chooses other instances than assigned, the owner's selectors judge them through
// the parent (model, UUID) and the instance's own MIG UUID.
func TestMIGSubstituteSelectors(t *testing.T) {
	cases := []struct {
		name     string
		key, val string
		id       string
		contains string // "" = served
	}{
		{"nouse names the MIG UUID", annotations.NoUseGPUUUID, migUUID(0, 4), migUUID(0, 4), "nouse-gpuuuid refuses MIG instance MIG-00-4 (1g.10gb on GPU-00"},
		{"nouse names the parent", annotations.NoUseGPUUUID, uuidOf(1), migUUID(1, 2), "nouse-gpuuuid refuses MIG instance MIG-01-2"},
		{"use names the parent", annotations.UseGPUUUID, uuidOf(0), migUUID(0, 4), ""},
		{"use names another instance", annotations.UseGPUUUID, migUUID(0, 3) + "," + migUUID(0, 4), migUUID(0, 5), "use-gpuuuid refuses MIG instance MIG-00-5"},
		{"type matches the parent", annotations.UseGPUType, "A100", migUUID(0, 4), ""},
		{"type refuses the parent", annotations.NoUseGPUType, "A100", migUUID(0, 4), "nouse-gputype refuses MIG instance MIG-00-4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := testPlugin(t, migCards(), 1)
			p.UpsertPod(newPod("pod", ctr{name: "main", ids: []string{migUUID(0, 3)}, mig: "1g.10gb"}).annotate(c.key, c.val).obj(t))
			_, err := allocateOn(p, mig1g, c.id)
			switch {
			case c.contains == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.contains != "" && (err == nil || !strings.Contains(err.Error(), c.contains)):
				t.Fatalf("got %v, want an error containing %q", err, c.contains)
			}
		})
	}
}

// Only containers that take devices of the call's resource are candidates: a card container and a
// MIG container in flight together, in no certain order, are each served their own devices.
func TestMIGCandidatesByResource(t *testing.T) {
	p := testPlugin(t, migCards(), 1)
	for _, b := range twoCreatedTogether(
		newPod("cards", ctr{name: "main", ids: []string{uuidOf(2)}}),
		newPod("instances", ctr{name: "main", ids: []string{migUUID(0, 0)}, mig: "1g.10gb"})) {
		p.UpsertPod(b.obj(t))
	}
	for _, c := range []struct {
		res     corev1.ResourceName
		id, pod string
	}{{mig1g, migUUID(0, 0), "instances"}, {gpuRes, uuidOf(2), "cards"}} {
		if _, err := allocateOn(p, c.res, c.id); err != nil {
			t.Fatalf("%s: %v", c.res, err)
		}
		if got := recordOf(t, p, c.pod)["main"].IDs; !slices.Equal(got, []string{c.id}) {
			t.Errorf("record of %s: %v, want [%s]", c.pod, got, c.id)
		}
	}
}

// Without an assignment to steer to, the preferred allocation takes distinct instances, several
// of one parent if need be, on one NUMA node: the parent's.
func TestMIGPreferredWithoutAssignment(t *testing.T) {
	p := testPlugin(t, migCards(), 1)
	p.UpsertPod(newPod("other", ctr{name: "main", count: 3, mig: "1g.10gb"}).unmanaged().obj(t))
	resp, err := p.Server(mig1g).GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: []string{migUUID(1, 2), migUUID(0, 4), migUUID(0, 1), migUUID(0, 6)}, AllocationSize: 3},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// NUMA 0 (GPU-00) has three of them, NUMA 1 (GPU-01) one.
	if got, want := resp.ContainerResponses[0].DeviceIDs, []string{"MIG-00-1", "MIG-00-4", "MIG-00-6"}; !slices.Equal(got, want) {
		t.Errorf("preferred %v, want %v", got, want)
	}
}

// Metrics name the resource: Allocate results, and devices by health.
func TestMIGMetricsNameTheResource(t *testing.T) {
	p := testPlugin(t, migCards(), 1)
	p.UpsertPod(newPod("pod", ctr{name: "main", ids: []string{migUUID(1, 1)}, mig: "2g.20gb"}).obj(t))
	if _, err := allocateOn(p, mig2g, migUUID(1, 1)); err != nil {
		t.Fatal(err)
	}
	p.SetHealth(nvidia.HealthEvent{UUID: migUUID(0, 3), Reason: "XID 94"})
	families, err := p.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	for k, v := range map[string]float64{
		"cardinal_device_plugin_allocate_total{resource=nvidia.com/mig-2g.20gb,result=exact}": 1,
		"cardinal_device_plugin_devices{health=healthy,resource=nvidia.com/mig-1g.10gb}":      7,
		"cardinal_device_plugin_devices{health=unhealthy,resource=nvidia.com/mig-1g.10gb}":    1,
		"cardinal_device_plugin_devices{health=unhealthy,resource=nvidia.com/gpu}":            2,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// A preference names only devices of the call's resource, whatever the request lists.
func TestMIGPreferredOnlyOwnResource(t *testing.T) {
	p := testPlugin(t, migCards(), 1)
	p.UpsertPod(newPod("other", ctr{name: "main", count: 2, mig: "2g.20gb"}).unmanaged().obj(t))
	resp, err := p.Server(mig2g).GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: []string{uuidOf(2), migUUID(0, 0), migUUID(1, 1)}, MustIncludeDeviceIDs: []string{migUUID(1, 0)}, AllocationSize: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, []string{"MIG-01-1"}) {
		t.Errorf("preferred %v, want [MIG-01-1]", got)
	}
}

// Admission gives a MIG container nvidia.com/gpu: 0 (so that kube-scheduler calls the extender for
// it): that container takes instances only, and is served them.
func TestMIGContainerWithZeroCards(t *testing.T) {
	p := testPlugin(t, migCards(), 1)
	obj := newPod("pod", ctr{name: "main", ids: []string{migUUID(0, 2)}, mig: "1g.10gb"}).obj(t)
	obj.Spec.Containers[0].Resources.Limits[gpuRes] = *resource.NewQuantity(0, resource.DecimalSI)
	p.UpsertPod(obj)
	ids, resp, err := newMIGKubelet(p, mig1g).allocate(1)
	if err != nil || !slices.Equal(ids, []string{"MIG-00-2"}) {
		t.Fatalf("got %v, %v; want [MIG-00-2]", ids, err)
	}
	if got := resp.Envs[EnvVisibleDevices]; got != "MIG-00-2" {
		t.Errorf("%s=%q", EnvVisibleDevices, got)
	}
}
