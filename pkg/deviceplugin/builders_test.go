package deviceplugin

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
	"github.com/cardinal-gpu/cardinal/pkg/deviceplugin/kubeletrecord"
)

const testNode = "node-a"

// testScheduler is the scheduler profile the test plugins know as Cardinal's; pods the builders
// give an assignment name it, as pods Cardinal binds do.
const (
	testScheduler      = "cardinal-scheduler"
	testExactScheduler = "cardinal-scheduler-exact"
)

// uuidOf is the UUID of test card i.
func uuidOf(i int) string { return fmt.Sprintf("GPU-%02d", i) }

// testCards builds n cards; cards below half are on NUMA 0, the rest on NUMA 1. model(i) names them.
func testCards(n int, model func(int) string) []nvidia.Card {
	var cards []nvidia.Card
	for i := 0; i < n; i++ {
		m := "NVIDIA A100-SXM4-80GB"
		if model != nil {
			m = model(i)
		}
		cards = append(cards, nvidia.Card{UUID: uuidOf(i), Index: i, Model: m, MemoryMiB: 81920, NUMA: i * 2 / n})
	}
	return cards
}

// testPlugin builds a plugin whose pod cache has synced: pods upserted afterwards arrive as through
// the watch, in bind order.
func testPlugin(t testing.TB, cards []nvidia.Card, shares int) *Plugin {
	t.Helper()
	p := testPluginListing(t, cards, shares)
	p.MarkSynced()
	return p
}

// testPluginListing builds a plugin still in its initial listing: pods upserted are ordered by bind
// time only (the builders' pods all have none, so their order is not certain).
func testPluginListing(t testing.TB, cards []nvidia.Card, shares int) *Plugin {
	t.Helper()
	p := newPlugin(pluginOptions{Node: testNode, Names: annotations.DefaultResourceNames(), SchedulerNames: []string{testScheduler, testExactScheduler}, Cards: cards, Shares: shares, Topology: true,
		Log: logr.Discard(), CacheWait: 20 * time.Millisecond})
	p.kubeletRecord = agreeing(p)
	return p
}

// agreeing is a kubelet record that agrees with the plugin: every container the plugin saw holding
// IDs holds them, with the response Allocate gives it.
func agreeing(p *Plugin) recordReader {
	return func() (kubeletrecord.Record, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		var r kubeletrecord.Record
		for uid, cs := range p.seen {
			pod := p.pods[uid]
			if pod == nil || pod.Gone {
				continue // the kubelet frees an ended pod's devices
			}
			for name, ids := range cs {
				for _, c := range pod.Order {
					if c.Name != name {
						continue
					}
					h := holderOf(pod, name, c.Resource)
					sorted := slices.Sorted(slices.Values(ids))
					r.Entries = append(r.Entries, kubeletrecord.Entry{PodUID: uid, Container: name, Resource: string(c.Resource), IDs: sorted,
						Response: containerResponse(p.table, outcome{Owner: h, IDs: ids}, p.deviceList, p.sharing)})
				}
			}
		}
		return r, nil
	}
}

// ctr is a GPU container of a test pod: its name, its assigned IDs (nil: no assignment entry) and,
// for shared containers, memory and cores.
type ctr struct {
	name  string
	ids   []string
	count int // defaults to len(ids)
	init  bool
	// sidecar makes an init container restartable (restartPolicy Always).
	sidecar bool
	memMiB  int64
	memPct  int // nvidia.com/gpumem-percentage
	cores   int
	// mig is the MIG profile the container asks instances of ("": cards); its ids are then MIG
	// UUIDs of migCards' instances.
	mig string
}

// podBuilder builds a pod bound to testNode.
type podBuilder struct {
	pod *corev1.Pod
	cs  []ctr
	// assign is false for pods Cardinal did not schedule.
	assign bool
	raw    *string
}

// podClock gives the pods newPod builds creation times one second apart, in the order they are
// built, as pods created by hand are: the kubelet admits pods of one batch in that order (order.go).
var podClock atomic.Int64

var podEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newPod(name string, cs ...ctr) *podBuilder {
	created := metav1.NewTime(podEpoch.Add(time.Duration(podClock.Add(1)) * time.Second))
	return &podBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Annotations: map[string]string{},
			CreationTimestamp: created},
		Spec:   corev1.PodSpec{NodeName: testNode},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}, cs: cs, assign: true}
}

func (b *podBuilder) unmanaged() *podBuilder { b.assign = false; return b }

// boundByOther makes a pod that names Cardinal's scheduler but was bound without an assignment (a
// Binding someone else posted).
func (b *podBuilder) boundByOther() *podBuilder {
	b.assign = false
	b.pod.Spec.SchedulerName = testScheduler
	return b
}

// createdWith gives b the creation time of o (to the second, as the API server stamps it).
func (b *podBuilder) createdWith(o *podBuilder) *podBuilder {
	b.pod.CreationTimestamp = o.pod.CreationTimestamp
	return b
}

// boundAt gives b a PodScheduled condition at second s (the API server stamps it at binding, to the
// second); without one the plugin takes the creation time for the bind time.
func (b *podBuilder) boundAt(s int) *podBuilder {
	b.pod.Status.Conditions = append(b.pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(podEpoch.Add(time.Duration(s) * time.Second))})
	return b
}

func (b *podBuilder) annotate(k, v string) *podBuilder { b.pod.Annotations[k] = v; return b }

// controlled gives b a controller (a ReplicaSet) that re-creates it when it is evicted.
func (b *podBuilder) controlled() *podBuilder {
	yes := true
	b.pod.OwnerReferences = append(b.pod.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "uid-rs", Controller: &yes})
	return b
}

// rawAssignment sets the assignment annotation to a literal value.
func (b *podBuilder) rawAssignment(v string) *podBuilder { b.raw = &v; return b }

func (b *podBuilder) obj(t testing.TB) *corev1.Pod {
	t.Helper()
	a := annotations.Assignment{Node: testNode}
	for _, c := range b.cs {
		n := c.count
		if n == 0 {
			n = len(c.ids)
		}
		limits := corev1.ResourceList{annotations.ResourceGPU: *resource.NewQuantity(int64(n), resource.DecimalSI)}
		if c.mig != "" {
			limits = corev1.ResourceList{annotations.DefaultResourceNames().MIGResource(c.mig): *resource.NewQuantity(int64(n), resource.DecimalSI)}
		}
		if c.memMiB > 0 {
			limits[annotations.ResourceGPUMem] = *resource.NewQuantity(c.memMiB, resource.DecimalSI)
		}
		if c.memPct > 0 {
			limits[annotations.ResourceGPUMemPercentage] = *resource.NewQuantity(int64(c.memPct), resource.DecimalSI)
		}
		if c.cores > 0 {
			limits[annotations.ResourceGPUCores] = *resource.NewQuantity(int64(c.cores), resource.DecimalSI)
		}
		k := corev1.Container{Name: c.name, Resources: corev1.ResourceRequirements{Limits: limits}}
		if c.sidecar {
			always := corev1.ContainerRestartPolicyAlways
			k.RestartPolicy = &always
		}
		if c.init {
			b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, k)
		} else {
			b.pod.Spec.Containers = append(b.pod.Spec.Containers, k)
		}
		if c.ids == nil {
			continue
		}
		ca := annotations.ContainerAssignment{Name: c.name, Init: c.init}
		for _, id := range c.ids {
			if ref, err := annotations.ParseMIGPlacementID(id); err == nil && c.mig != "" {
				// A dynamic MIG placement (sizes of an A100/H100's profiles).
				size := map[string]int{"1g.10gb": 1, "1g.10gb+me": 1, "1g.20gb": 2, "2g.20gb": 2, "3g.40gb": 4, "4g.40gb": 4, "7g.80gb": 8}[ref.Profile]
				ca.Devices = append(ca.Devices, annotations.DeviceAssignment{UUID: id, ID: id, Cores: 100, Parent: ref.Parent, Profile: c.mig,
					Placement: &annotations.MIGPlacement{Start: ref.Start, Size: size}})
				continue
			}
			if c.mig != "" {
				ca.Devices = append(ca.Devices, annotations.DeviceAssignment{UUID: id, ID: id, Parent: migParentOf(id), Profile: c.mig})
				continue
			}
			u, _, err := annotations.ParseDeviceID(id)
			if err != nil {
				t.Fatal(err)
			}
			mem, cores := int64(81920), 100
			if c.memMiB > 0 || c.memPct > 0 || c.cores > 0 {
				mem, cores = c.memMiB, c.cores
				if c.memPct > 0 {
					mem = 81920 * int64(c.memPct) / 100
				}
			}
			ca.Devices = append(ca.Devices, annotations.DeviceAssignment{UUID: u, ID: id, MemoryMiB: mem, Cores: cores})
		}
		a.Containers = append(a.Containers, ca)
	}
	switch {
	case b.raw != nil:
		b.pod.Annotations[annotations.GPUAssignment] = *b.raw
	case b.assign:
		b.pod.Spec.SchedulerName = testScheduler
		v, err := annotations.EncodeAssignment(a)
		if err != nil {
			t.Fatal(err)
		}
		b.pod.Annotations[annotations.GPUAssignment] = v
	}
	return b.pod
}

// fakeKubelet drives the plugin as the kubelet's device manager does: per container,
// GetPreferredAllocation among the free IDs, then Allocate with what it chose.
type fakeKubelet struct {
	p     *Plugin
	all   []string
	taken map[string]bool
}

func newFakeKubelet(p *Plugin) *fakeKubelet {
	p.mu.Lock()
	all := append([]string(nil), p.table.order...)
	p.mu.Unlock()
	return &fakeKubelet{p: p, all: all, taken: map[string]bool{}}
}

func (k *fakeKubelet) free() []string {
	var out []string
	for _, id := range k.all {
		if !k.taken[id] {
			out = append(out, id)
		}
	}
	return out
}

// admit allocates every GPU container of pod in order and returns, per container, the IDs and the
// environment the plugin gave.
func (k *fakeKubelet) admit(t testing.TB, pod *corev1.Pod) (map[string][]string, map[string]map[string]string) {
	t.Helper()
	ids := map[string][]string{}
	envs := map[string]map[string]string{}
	for _, c := range append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		q, ok := c.Resources.Limits[annotations.ResourceGPU]
		if !ok {
			continue
		}
		got, env, err := k.allocate(int(q.Value()))
		if err != nil {
			t.Fatalf("pod %s container %s: %v", pod.Name, c.Name, err)
		}
		ids[c.Name], envs[c.Name] = got, env
	}
	return ids, envs
}

func (k *fakeKubelet) allocate(size int) ([]string, map[string]string, error) {
	pref, err := k.p.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: k.free(), AllocationSize: int32(size)},
	}})
	if err != nil {
		return nil, nil, err
	}
	ids := pref.ContainerResponses[0].DeviceIDs
	resp, err := k.p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, nil, err
	}
	for _, id := range ids {
		k.taken[id] = true
	}
	return ids, resp.ContainerResponses[0].Envs, nil
}

type (
	uidT           = types.UID
	grpcCallOption = grpc.CallOption
)

func logrDiscard() logr.Logger { return logr.Discard() }

// kubeletSays feeds the plugin a PodResources listing: container "main" of each named pod holds the
// given IDs.
func kubeletSays(t testing.TB, p *Plugin, held map[string][]string) {
	t.Helper()
	list := &podresourcesapi.ListPodResourcesResponse{}
	for name, ids := range held {
		list.PodResources = append(list.PodResources, &podresourcesapi.PodResources{Name: name, Namespace: "default",
			Containers: []*podresourcesapi.ContainerResources{{Name: "main", Devices: []*podresourcesapi.ContainerDevices{
				{ResourceName: string(annotations.ResourceGPU), DeviceIds: ids}}}}})
	}
	p.applyPodResources(list)
}

// twoCreatedTogether gives b a's creation time: the kubelet's order between them is not certain.
func twoCreatedTogether(a, b *podBuilder) []*podBuilder { return []*podBuilder{a, b.createdWith(a)} }

// startAs has the kubelet's record show container name of pod holding ids with resp (the response
// Allocate returned for them), and calls PreStartContainer for ids.
func startAs(p *Plugin, pod *podBuilder, name string, ids []string, resp *pluginapi.AllocateResponse) error {
	rec := kubeletrecord.Record{Entries: []kubeletrecord.Entry{{PodUID: pod.pod.UID, Container: name, Resource: string(annotations.ResourceGPU),
		IDs: slices.Sorted(slices.Values(ids)), Response: resp.ContainerResponses[0]}}}
	p.kubeletRecord = func() (kubeletrecord.Record, error) { return rec, nil }
	_, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: ids})
	return err
}

// discoverSim parses a simulated NVML file, takes its node1 and discovers its cards as the plugin
// does at start-up.
func discoverSim(t *testing.T, file string) (*sim.Server, []nvidia.Card) {
	t.Helper()
	f, err := sim.Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	cards, err := f.Cards("node1")
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.New(cards)
	found, err := nvidia.Discover(srv, srv.NUMA)
	if err != nil {
		t.Fatal(err)
	}
	return srv, found
}
