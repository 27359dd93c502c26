package deviceplugin

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/deviceplugin/kubeletrecord"
)

// kubeletSim drives the plugin as the kubelet does, knowing which pod it admits (the plugin does
// not): per GPU container in order, the devices an earlier init container of the pod left for reuse,
// else GetPreferredAllocation among the free IDs; then Allocate; then its record (the device
// checkpoint) shows the container holding the IDs with the response. start calls PreStartContainer
// for each container of a pod, as the kubelet does before it starts them.
type kubeletSim struct {
	p     *Plugin
	all   []string
	taken map[string]bool
	rec   kubeletrecord.Record
	// active are the pods admitted, and the one being admitted: what PodResources List shows when
	// listing is on (withPodResources).
	active []*corev1.Pod
}

// withPodResources has the plugin ask the simulated kubelet's PodResources List.
func (k *kubeletSim) withPodResources() *kubeletSim {
	k.p.podResources = k
	return k
}

// List answers as the kubelet's PodResources does: the active pods, their app containers and
// sidecars, each with the devices the record gives it.
func (k *kubeletSim) List(context.Context, *podresourcesapi.ListPodResourcesRequest, ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error) {
	resp := &podresourcesapi.ListPodResourcesResponse{}
	for _, pod := range k.active {
		pr := &podresourcesapi.PodResources{Name: pod.Name, Namespace: pod.Namespace}
		var cs []corev1.Container
		for _, c := range pod.Spec.InitContainers {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				cs = append(cs, c)
			}
		}
		for _, c := range append(cs, pod.Spec.Containers...) {
			cr := &podresourcesapi.ContainerResources{Name: c.Name}
			for _, e := range k.rec.Entries {
				if e.PodUID == pod.UID && e.Container == c.Name {
					cr.Devices = append(cr.Devices, &podresourcesapi.ContainerDevices{ResourceName: e.Resource, DeviceIds: e.IDs})
				}
			}
			pr.Containers = append(pr.Containers, cr)
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	return resp, nil
}

// reject is the kubelet rejecting pod at admission before any device call: it never lists it.
func (k *kubeletSim) reject(*corev1.Pod) {}

func newKubeletSim(p *Plugin) *kubeletSim {
	k := &kubeletSim{p: p, all: slices.Clone(p.table.order), taken: map[string]bool{}}
	p.kubeletRecord = func() (kubeletrecord.Record, error) { return k.rec, nil }
	return k
}

func (k *kubeletSim) admit(pod *corev1.Pod) error {
	k.active = append(k.active, pod)
	var reuse []string
	for i, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		q, ok := c.Resources.Limits[annotations.ResourceGPU]
		if !ok {
			continue
		}
		n := int(q.Value())
		init := i < len(pod.Spec.InitContainers)
		var ids []string
		if len(reuse) >= n {
			ids = slices.Clone(reuse[:n])
		} else {
			var free []string
			for _, id := range k.all {
				if !k.taken[id] {
					free = append(free, id)
				}
			}
			pref, err := k.p.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
				{AvailableDeviceIDs: free, AllocationSize: int32(n)}}})
			if err != nil {
				return err
			}
			ids = pref.ContainerResponses[0].DeviceIDs
		}
		resp, err := k.p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
		if err != nil {
			return err
		}
		for _, id := range ids {
			k.taken[id] = true
		}
		k.rec.Entries = append(k.rec.Entries, kubeletrecord.Entry{PodUID: pod.UID, Container: c.Name, Resource: string(annotations.ResourceGPU),
			IDs: slices.Sorted(slices.Values(ids)), Response: resp.ContainerResponses[0]})
		switch {
		case init && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways):
			reuse = ids
		default:
			reuse = slices.DeleteFunc(reuse, func(id string) bool { return slices.Contains(ids, id) })
		}
	}
	return nil
}

// start verifies every container of pod the record names, in order.
func (k *kubeletSim) start(pod *corev1.Pod) error {
	for _, e := range k.rec.Entries {
		if e.PodUID != pod.UID {
			continue
		}
		if _, err := k.p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: e.IDs}); err != nil {
			return err
		}
	}
	return nil
}

// envOf is the environment the kubelet's record gives container name of pod.
func (k *kubeletSim) envOf(pod *corev1.Pod, name string) map[string]string {
	for _, e := range k.rec.Entries {
		if e.PodUID == pod.UID && e.Container == name {
			return e.Response.Envs
		}
	}
	return nil
}

func TestRejectedPodsAssignmentNeverStartsInTheNextPod(t *testing.T) {
	// Issue 32, item 1. "a" (10000 MiB, 20 %) is certainly admitted before "b" (60000 MiB, 80 %):
	// created and bound first. The kubelet rejects "a" at admission before any device call (a
	// TopologyAffinityError, OutOfcpu), then admits "b": the plugin, guessing "a", steers and serves
	// a's slot with a's limits. The kubelet's record shows "b" holding them: b never starts with a's
	// limits, both pods are named, b (a ReplicaSet's) is evicted to be placed again, and the plugin's
	// view follows the record (b holds the slot, a holds nothing).
	p := testPlugin(t, testCards(4, nil), 4)
	a := newPod("a", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(0), 0)}, memMiB: 10000, cores: 20})
	b := newPod("b", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 60000, cores: 80}).controlled()
	p.UpsertPod(a.obj(t))
	p.UpsertPod(b.obj(t))
	var events []*AllocateError
	var evicted []string
	p.failed = func(e *AllocateError) { events = append(events, e) }
	p.evict = func(pod *podEntry, _ string) { evicted = append(evicted, pod.key()) }
	k := newKubeletSim(p)
	if err := k.admit(b.pod); err != nil {
		t.Fatal(err)
	}
	if got := k.envOf(b.pod, "main")[EnvMemoryLimitPrefix+"0"]; got != "10000m" {
		t.Fatalf("setup: b was served %q, want a's 10000m (the guess this test is about)", got)
	}
	err := k.start(b.pod)
	wantRefusal(t, err, ReasonWrongResponse, `pod default/b container "main"`, `pod default/a container "main"`,
		`CUDA_DEVICE_MEMORY_LIMIT_0="10000m" where its own is "60000m"`)
	if len(events) != 1 || len(events[0].Pods) != 2 {
		t.Errorf("events %v, want one naming both pods", events)
	}
	if diff := cmp.Diff([]string{"default/b"}, evicted); diff != "" {
		t.Errorf("evicted (-want +got):\n%s", diff)
	}
	p.mu.Lock()
	_, aHolds := p.seen[a.pod.UID]["main"]
	bHolds := p.seen[b.pod.UID]["main"]
	p.mu.Unlock()
	if aHolds || !slices.Equal(bHolds, []string{annotations.SlotID(uuidOf(0), 0)}) {
		t.Errorf("after the refusal: a holds %v, b holds %v; want a nothing, b a's slot (the kubelet's record)", aHolds, bHolds)
	}
	if _, rec, _, _ := p.pendingRecord(a.pod.UID); len(rec.Containers) != 0 {
		t.Errorf("a's record %+v, want none: the kubelet gave its slot to b", rec)
	}
}

func TestThePodTheKubeletIsAdmittingIsReadFromPodResources(t *testing.T) {
	// Issue 32, item 1, with the kubelet's PodResources asked at GetPreferredAllocation and Allocate:
	// "a" is certainly first by the order rules, but the kubelet rejected it before any device call and
	// lists only "b" (and "c", admitted earlier, holding its card) — so b is steered to and served its
	// own assignment, with its own limits, and starts.
	p := testPlugin(t, testCards(4, nil), 4)
	c := newPod("c", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(2), 0)}, memMiB: 5000})
	a := newPod("a", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(0), 0)}, memMiB: 10000, cores: 20})
	b := newPod("b", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 60000, cores: 80})
	for _, x := range []*podBuilder{c, a, b} {
		p.UpsertPod(x.obj(t))
	}
	k := newKubeletSim(p).withPodResources()
	if err := k.admit(c.pod); err != nil {
		t.Fatal(err)
	}
	k.reject(a.pod)
	if err := k.admit(b.pod); err != nil {
		t.Fatal(err)
	}
	if err := k.start(b.pod); err != nil {
		t.Fatalf("b refused at start: %v", err)
	}
	if got := k.rec.Entries[1].IDs; !slices.Equal(got, []string{annotations.SlotID(uuidOf(1), 0)}) {
		t.Errorf("b got %v, want its own assignment", got)
	}
	if env := k.envOf(b.pod, "main"); env[EnvMemoryLimitPrefix+"0"] != "60000m" || env[EnvSMLimit] != "80" {
		t.Errorf("b's limits %v, want its own 60000m and 80", env)
	}
	// Without PodResources (the kubelet's socket unreachable) the order rules guess a, and the start
	// catches it: TestRejectedPodsAssignmentNeverStartsInTheNextPod.
}

func TestReplicasWithInitContainersAdmittedInTheOtherOrderStartWithTheirOwnLimits(t *testing.T) {
	// Issue 32, item 2. Two replicas created in the same second, each an init container (10000 MiB,
	// 20 %) and an app container (30000 MiB, 50 %) on one slot (the app container reuses the init
	// container's). The plugin saw p1 bound first; the kubelet, after a restart, admits p2 first. p2's
	// init container is served as p1's (the same answer), and p2's app container used to be refused
	// as ambiguous (p1's app container or p2's init container?), failing both pods. Now the likeliest
	// guess is served, and every container starts with exactly its own limits, as the record shows.
	p := testPlugin(t, testCards(4, nil), 4)
	replica := func(name string, card int) *podBuilder {
		slot := []string{annotations.SlotID(uuidOf(card), 0)}
		return newPod(name, ctr{name: "warm", init: true, ids: slot, memMiB: 10000, cores: 20}, ctr{name: "main", ids: slot, memMiB: 30000, cores: 50})
	}
	p1 := replica("p1", 0)
	p2 := replica("p2", 1).createdWith(p1)
	p.UpsertPod(p1.obj(t))
	p.UpsertPod(p2.obj(t))
	k := newKubeletSim(p)
	for _, pod := range []*podBuilder{p2, p1} {
		if err := k.admit(pod.pod); err != nil {
			t.Fatalf("admit %s: %v", pod.pod.Name, err)
		}
	}
	for _, pod := range []*podBuilder{p2, p1} {
		if err := k.start(pod.pod); err != nil {
			t.Fatalf("start %s: %v", pod.pod.Name, err)
		}
		for name, want := range map[string][2]string{"warm": {"10000m", "20"}, "main": {"30000m", "50"}} {
			env := k.envOf(pod.pod, name)
			if got := [2]string{env[EnvMemoryLimitPrefix+"0"], env[EnvSMLimit]}; got != want {
				t.Errorf("%s container %s started with %v, want its own %v", pod.pod.Name, name, got, want)
			}
		}
	}
}

func TestKernelCapGoesToThePodTheKubeletsRecordNames(t *testing.T) {
	// Issue 32, item 3. Two single-container replicas (10000 and 20000 MiB; the same second, so
	// the order is not certain); the kubelet admits p2 first and the plugin serves p1's slot as p1's.
	// The kernel cap used to land on p1's cgroup (found by the IDs the plugin served), leaving p2,
	// which runs on the card, uncapped. p2's limits differ, so it is refused; with equal requests
	// (p3, p4) the swap is harmless and the cap is set on p4, the pod the kubelet's record names.
	root := t.TempDir()
	mkdirs(t, root, "kubepods/burstable/poduid-p3", "kubepods/burstable/poduid-p4")
	lim := &fakeLimiter{}
	p := limitsPlugin(t, hamiConfig(), lim, nvidia.MemoryLimitsDmem, root)
	p3 := newPod("p3", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(0), 0)}, memMiB: 10000})
	p4 := newPod("p4", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 10000}).createdWith(p3)
	p.UpsertPod(p3.obj(t))
	p.UpsertPod(p4.obj(t))
	k := newKubeletSim(p)
	if err := k.admit(p4.pod); err != nil {
		t.Fatal(err)
	}
	if got := k.rec.Entries[0].IDs; !slices.Equal(got, []string{annotations.SlotID(uuidOf(0), 0)}) {
		t.Fatalf("setup: p4 got %v, want p3's slot", got)
	}
	if err := k.start(p4.pod); err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(root, "kubepods/burstable/poduid-p4") + " " + uuidOf(0) + " 10000"}
	if diff := cmp.Diff(want, lim.set); diff != "" {
		t.Errorf("kernel caps (-want +got):\n%s", diff)
	}
}

func TestPreStartFailsClosedWithoutTheKubeletsRecord(t *testing.T) {
	// Issue 32, item 4. A shared container whose holder is unknown used to start with no limit at
	// all (PreStartContainer succeeded having set nothing). Now it does not start.
	slot := []string{annotations.SlotID(uuidOf(0), 0)}
	for _, c := range []struct {
		name string
		rec  kubeletrecord.Record
		err  error
		want string
	}{
		{"no holder", kubeletrecord.Record{}, nil, "the kubelet's record shows no container holding exactly devices " + slot[0]},
		{"unreadable", kubeletrecord.Record{}, errors.New("kubelet device checkpoint: unexpected end of JSON input"), "cannot be read: kubelet device checkpoint: unexpected end"},
		{"unknown pod", kubeletrecord.Record{Entries: []kubeletrecord.Entry{{PodUID: "uid-ghost", Container: "main", Resource: string(annotations.ResourceGPU), IDs: slot}}},
			nil, "pod uid-ghost container \"main\", which this plugin does not know"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lim := &fakeLimiter{}
			root := t.TempDir()
			mkdirs(t, root, "kubepods/burstable/poduid-p")
			p := limitsPlugin(t, hamiConfig(), lim, nvidia.MemoryLimitsDmem, root)
			p.UpsertPod(newPod("p", ctr{name: "main", ids: slot, memMiB: 20000}).obj(t))
			if _, err := allocateOne(p, slot); err != nil {
				t.Fatal(err)
			}
			p.kubeletRecord = func() (kubeletrecord.Record, error) { return c.rec, c.err }
			_, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: slot})
			wantRefusal(t, err, ReasonUnverified, c.want)
		})
	}
}

func TestKernelCapCountsSidecars(t *testing.T) {
	// Issue 32, item 5. A sidecar (restartable init container, 10000 MiB) runs beside the app
	// container (20000 MiB) on card 0: the pod's cap there is 30000, not 20000.
	root := t.TempDir()
	mkdirs(t, root, "kubepods/burstable/poduid-p")
	lim := &fakeLimiter{}
	p := limitsPlugin(t, hamiConfig(), lim, nvidia.MemoryLimitsDmem, root)
	pod := newPod("p", ctr{name: "proxy", init: true, sidecar: true, ids: []string{annotations.SlotID(uuidOf(0), 1)}, memMiB: 10000},
		ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(0), 0)}, memMiB: 20000})
	p.UpsertPod(pod.obj(t))
	k := newKubeletSim(p)
	if err := k.admit(pod.pod); err != nil {
		t.Fatal(err)
	}
	lim.set = nil
	if err := k.start(pod.pod); err != nil {
		t.Fatal(err)
	}
	cg := filepath.Join(root, "kubepods/burstable/poduid-p")
	if want := cg + " " + uuidOf(0) + " 30000"; !slices.Contains(lim.set, want) || slices.ContainsFunc(lim.set, func(s string) bool { return strings.HasSuffix(s, " 20000") }) {
		t.Errorf("kernel caps %v, want %q (sidecar + app)", lim.set, want)
	}
}

func TestTerminatingPodHoldsItsCardsUntilItEnds(t *testing.T) {
	// Issue 32, item 6. In mps mode one namespace shares a node's cards at a time. Tenant A's pod is
	// being deleted (a 3600 s grace period) but still runs: tenant B's shared pod used to be served
	// beside it. A pod being deleted holds its cards until the kubelet frees them (it ends).
	p := sharingPlugin(t, mpsConfig(), 4)
	p.SetSharingHealth(nil)
	p.kubeletRecord = agreeing(p)
	slotA := []string{annotations.SlotID(uuidOf(0), 0)}
	a := newPod("a", ctr{name: "main", ids: slotA, memMiB: 10000}).obj(t)
	a.Namespace = "tenant-a"
	p.UpsertPod(a)
	if _, err := allocateOne(p, slotA); err != nil {
		t.Fatal(err)
	}
	a.Status.Phase = corev1.PodRunning
	now := metav1.NewTime(time.Now())
	a.DeletionTimestamp = &now
	p.UpsertPod(a)
	b := newPod("b", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 10000}).obj(t)
	b.Namespace = "tenant-b"
	p.UpsertPod(b)
	_, err := allocateOne(p, []string{annotations.SlotID(uuidOf(1), 0)})
	wantRefusal(t, err, ReasonOtherTenant, "tenant-a/a")

	// Whole cards: an exclusive pod being deleted still holds its card; a substitute onto it is refused.
	q := testPlugin(t, testCards(2, nil), 1)
	x := newPod("x", ctr{name: "main", ids: []string{uuidOf(0)}}).obj(t)
	q.UpsertPod(x)
	if _, err := allocateIDs(q, uuidOf(0)); err != nil {
		t.Fatal(err)
	}
	x.Status.Phase = corev1.PodRunning
	x.DeletionTimestamp = &now
	q.UpsertPod(x)
	q.UpsertPod(newPod("y", ctr{name: "main", ids: []string{uuidOf(1)}}).obj(t))
	_, err = allocateIDs(q, uuidOf(0))
	wantRefusal(t, err, ReasonCapacity, "card GPU-00 is held whole by pod default/x")
	// Once it ends, the card is free again (y was rejected for good: the next pod, z, gets it).
	x.Status.Phase = corev1.PodSucceeded
	q.UpsertPod(x)
	q.UpsertPod(newPod("z", ctr{name: "main", ids: []string{uuidOf(1)}}).obj(t))
	if _, err := allocateIDs(q, uuidOf(0)); err != nil {
		t.Errorf("after x ended: %v", err)
	}
}

func TestRecordsOfDeletedPodsAreForgotten(t *testing.T) {
	// Issue 32, item 7. The record writer kept the last value it wrote for every pod, forever.
	p := testPlugin(t, testCards(2, nil), 1)
	pod := newPod("p", ctr{name: "main", ids: []string{uuidOf(0)}}).obj(t)
	client := fake.NewSimpleClientset(pod)
	w := newRecordWriter(p, client, logrDiscard())
	p.deleted = w.enqueue
	p.UpsertPod(pod)
	if _, err := allocateIDs(p, uuidOf(0)); err != nil {
		t.Fatal(err)
	}
	if err := w.sync(context.Background(), pod.UID); err != nil {
		t.Fatal(err)
	}
	if len(w.written) != 1 {
		t.Fatalf("setup: %d records remembered, want 1", len(w.written))
	}
	p.DeletePod(pod)
	if n := w.queue.Len(); n != 1 {
		t.Fatalf("after the pod was deleted the writer has %d pods queued, want 1 (it must forget the pod)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	uid, _ := w.queue.Get()
	if err := w.sync(ctx, uid); err != nil {
		t.Fatal(err)
	}
	w.queue.Done(uid)
	if uid != pod.UID || len(w.written) != 0 {
		t.Errorf("after the pod was deleted: queue gave %q, %d records remembered; want %q and 0", uid, len(w.written), pod.UID)
	}
}

func TestAllocateNamesTheContainerServed(t *testing.T) {
	p := testPlugin(t, testCards(2, nil), 1)
	p.UpsertPod(newPod("p", ctr{name: "main", ids: []string{uuidOf(1)}}).obj(t))
	resp, err := allocateIDs(p, uuidOf(1))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].Annotations[AllocatedForAnnotation]; got != "uid-p/main" {
		t.Errorf("%s = %q, want uid-p/main", AllocatedForAnnotation, got)
	}
}

func TestAPodTheCacheNeverShowsIsWaitedForOnce(t *testing.T) {
	// PodResources lists "static-x", which the cache does not know (a static pod without a mirror
	// pod): the first Allocate waits for the cache to show it (it could be the pod being admitted,
	// bound a moment ago), then remembers it; later calls do not wait for it again.
	p := testPlugin(t, testCards(2, nil), 1)
	a := newPod("a", ctr{name: "main", ids: []string{uuidOf(0)}})
	p.UpsertPod(a.obj(t))
	k := newKubeletSim(p).withPodResources()
	k.active = append(k.active, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "static-x", Namespace: "kube-system", UID: "hash"}})
	if err := k.admit(a.pod); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	remembered := p.strangers["kube-system/static-x"]
	p.mu.Unlock()
	if !remembered {
		t.Errorf("static-x not remembered as a pod the cache does not show")
	}
	if got := k.rec.Entries[0].IDs; !slices.Equal(got, []string{uuidOf(0)}) {
		t.Errorf("a got %v, want its assignment", got)
	}
	p.UpsertPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "static-x", Namespace: "kube-system", UID: "mirror"}, Spec: corev1.PodSpec{NodeName: testNode}})
	p.mu.Lock()
	remembered = p.strangers["kube-system/static-x"]
	p.mu.Unlock()
	if remembered {
		t.Errorf("static-x still a stranger once its mirror pod shows")
	}
}
