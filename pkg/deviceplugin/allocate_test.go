package deviceplugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// recordOf returns the allocation record the plugin would write for a pod, by container.
func recordOf(t *testing.T, p *Plugin, podName string) map[string]annotations.ContainerAllocation {
	t.Helper()
	p.mu.Lock()
	uid := p.byKey["default/"+podName]
	p.mu.Unlock()
	_, rec, _, ok := p.pendingRecord(uid)
	if !ok {
		t.Fatalf("pod %s unknown", podName)
	}
	out := map[string]annotations.ContainerAllocation{}
	for _, c := range rec.Containers {
		out[c.Name] = c
	}
	return out
}

func TestAllocateIdentityTwentyPods(t *testing.T) {
	// 16 cards × 4 shares = 64 slot IDs. 20 pods in flight at once with disjoint assignments of 1-4
	// cards each (sizes cycle 1,2,3,4: 5×(1+2+3+4) = 50 slots), each on distinct cards.
	p := testPlugin(t, testCards(16, nil), 4)
	k := newFakeKubelet(p)
	type want struct {
		ids   []string
		uuids string
	}
	wants := map[string]want{}
	var pods []*podBuilder
	next := 0 // next free slot, walking card by card: slot k of card c is ID number c*4+k
	for i := 0; i < 20; i++ {
		size := i%4 + 1
		var ids, uuids []string
		for j := 0; j < size; j++ {
			card, slot := next%16, next/16
			next++
			ids = append(ids, annotations.SlotID(uuidOf(card), slot))
			uuids = append(uuids, uuidOf(card))
		}
		slices.Sort(uuids) // CUDA's order: PCI bus = NVML index order, not the assignment's
		name := fmt.Sprintf("job-%02d", i)
		b := newPod(name, ctr{name: "main", ids: ids, memMiB: 10000, cores: 20})
		pods = append(pods, b)
		p.UpsertPod(b.obj(t))
		wants[name] = want{ids: ids, uuids: strings.Join(uuids, ",")}
	}
	// The kubelet admits them in the order it saw them bound (the order the plugin saw them).
	for _, b := range pods {
		pod := b.pod
		ids, envs := k.admit(t, pod)
		w := wants[pod.Name]
		if diff := cmp.Diff(w.ids, ids["main"]); diff != "" {
			t.Errorf("%s: IDs (-assigned +allocated):\n%s", pod.Name, diff)
		}
		if got := envs["main"][EnvVisibleDevices]; got != w.uuids {
			t.Errorf("%s: %s=%q, want %q", pod.Name, EnvVisibleDevices, got, w.uuids)
		}
		rec := recordOf(t, p, pod.Name)["main"]
		if diff := cmp.Diff(annotations.ContainerAllocation{Name: "main", IDs: w.ids, Source: annotations.SourceAllocate}, rec); diff != "" {
			t.Errorf("%s: record (-want +got):\n%s", pod.Name, diff)
		}
	}
}

func TestAllocateExclusiveInitAndAppContainers(t *testing.T) {
	// 8 exclusive cards. Pod "train" has an init container on cards 0,1 whose cards the app container
	// reuses, and a second app container on 2; pod "infer" has one container on 4-7.
	p := testPlugin(t, testCards(8, nil), 1)
	k := newFakeKubelet(p)
	train := newPod("train", ctr{name: "setup", ids: []string{uuidOf(0), uuidOf(1)}, init: true},
		ctr{name: "main", ids: []string{uuidOf(0), uuidOf(1)}}, ctr{name: "side", ids: []string{uuidOf(2)}}).obj(t)
	infer := newPod("infer", ctr{name: "main", ids: []string{uuidOf(4), uuidOf(5), uuidOf(6), uuidOf(7)}}).obj(t)
	p.UpsertPod(train)
	p.UpsertPod(infer)

	// The kubelet hands the init container's cards to "main" without asking for a preference, then
	// calls Allocate with them.
	ids, _ := k.admitInit(t, "setup", 2)
	resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatalf("app container reusing init cards: %v", err)
	}
	if got := resp.ContainerResponses[0].Envs[EnvVisibleDevices]; got != "GPU-00,GPU-01" {
		t.Errorf("main: %s=%q", EnvVisibleDevices, got)
	}
	side, _, err := k.allocate(1)
	if err != nil || !slices.Equal(side, []string{uuidOf(2)}) {
		t.Fatalf("side got %v, %v; want [GPU-02]", side, err)
	}
	got, _ := k.admit(t, infer)
	if diff := cmp.Diff([]string{"GPU-04", "GPU-05", "GPU-06", "GPU-07"}, got["main"]); diff != "" {
		t.Errorf("infer (-want +got):\n%s", diff)
	}
	want := map[string]annotations.ContainerAllocation{
		"setup": {Name: "setup", IDs: []string{"GPU-00", "GPU-01"}, Source: annotations.SourceAllocate},
		"main":  {Name: "main", IDs: []string{"GPU-00", "GPU-01"}, Source: annotations.SourceAllocate},
		"side":  {Name: "side", IDs: []string{"GPU-02"}, Source: annotations.SourceAllocate},
	}
	if diff := cmp.Diff(want, recordOf(t, p, "train")); diff != "" {
		t.Errorf("train record (-want +got):\n%s", diff)
	}
}

// admitInit allocates an init container of size n through the preferred allocation.
func (k *fakeKubelet) admitInit(t *testing.T, name string, n int) ([]string, map[string]string) {
	t.Helper()
	ids, env, err := k.allocate(n)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	// Init containers' cards go back to the pool of the same pod only; keep them taken.
	return ids, env
}

func TestAllocateRefusals(t *testing.T) {
	t4 := func(i int) string {
		if i >= 6 {
			return "Tesla T4"
		}
		return "NVIDIA A100-SXM4-80GB"
	}
	// 8 cards: 0-3 on NUMA 0, 4-7 on NUMA 1; 6 and 7 are T4s.
	for _, tc := range []struct {
		name     string
		pods     []*podBuilder
		ids      []string
		code     codes.Code
		reason   Reason
		contains string
	}{
		{name: "malformed ID", ids: []string{"GPU-01::x"}, code: codes.InvalidArgument, reason: ReasonInvalidID, contains: `slot "x"`},
		{name: "ID not on this node", ids: []string{"GPU-99"}, code: codes.InvalidArgument, reason: ReasonUnknownDevice, contains: "GPU-99 is not advertised"},
		{name: "duplicate ID", ids: []string{"GPU-01", "GPU-01"}, code: codes.InvalidArgument, reason: ReasonDuplicateID, contains: "requested twice"},
		{name: "no pod at all", ids: []string{"GPU-01"}, code: codes.FailedPrecondition, reason: ReasonNoOwner,
			contains: "no container in flight on this node asks for 1 device(s)"},
		{name: "malformed assignment is named", pods: []*podBuilder{newPod("bad", ctr{name: "main", count: 1}).rawAssignment(`{"v":1,"node":`)},
			ids: []string{"GPU-01"}, code: codes.FailedPrecondition, reason: ReasonUnusable, contains: `pod default/bad container "main" (devices GPU-01), but its assignment cannot be used: cardinal.io/gpu-assignment:`},
		{name: "assignment for another node", pods: []*podBuilder{newPod("moved", ctr{name: "main", count: 1}).rawAssignment(`{"v":1,"node":"node-b","containers":[{"name":"main","devices":[{"uuid":"GPU-01","id":"GPU-01"}]}]}`)},
			ids: []string{"GPU-01"}, code: codes.FailedPrecondition, reason: ReasonUnusable, contains: `names node "node-b"`},
		{name: "two pods could own the IDs and neither may have them", pods: twoCreatedTogether(
			newPod("a", ctr{name: "main", ids: []string{"GPU-00"}}).annotate(annotations.UseGPUType, "H100"),
			newPod("b", ctr{name: "main", ids: []string{"GPU-01"}, memMiB: 20000}).annotate(annotations.UseGPUType, "H100")),
			ids: []string{"GPU-02"}, code: codes.FailedPrecondition, reason: ReasonAmbiguous,
			contains: `2 containers in flight on this node ask for 1 device(s) next, the kubelet's order among them is not certain`},
		{name: "unmanaged pod bound first would take a Cardinal pod's assignment", pods: []*podBuilder{newPod("other", ctr{name: "main", count: 1}).unmanaged(), newPod("a", ctr{name: "main", ids: []string{"GPU-00"}})},
			ids: []string{"GPU-00"}, code: codes.FailedPrecondition, reason: ReasonConflict, contains: `devices GPU-00 would go to pod default/other container "main", which Cardinal did not schedule, but pod default/a container "main" is assigned GPU-00`},
		{name: "same IDs assigned to two pods", pods: []*podBuilder{newPod("a", ctr{name: "main", ids: []string{"GPU-00"}}), newPod("b", ctr{name: "main", ids: []string{"GPU-00"}})},
			ids: []string{"GPU-00"}, code: codes.FailedPrecondition, reason: ReasonConflict, contains: `are assigned to both pod default/a container "main" and pod default/b`},
		{name: "other IDs break another pod's assignment", pods: []*podBuilder{newPod("a", ctr{name: "main", ids: []string{"GPU-00"}}), newPod("b", ctr{name: "main", ids: []string{"GPU-01", "GPU-02"}})},
			ids: []string{"GPU-01"}, code: codes.FailedPrecondition, reason: ReasonConflict, contains: `include cards assigned to pod default/b container "main"`},
		{name: "unmanaged pod given another pod's cards", pods: []*podBuilder{newPod("other", ctr{name: "main", count: 2}).unmanaged(), newPod("b", ctr{name: "main", ids: []string{"GPU-01"}})},
			ids: []string{"GPU-01", "GPU-02"}, code: codes.FailedPrecondition, reason: ReasonConflict, contains: "did not schedule"},
		{name: "use-gputype refuses the kubelet's card", pods: []*podBuilder{newPod("a", ctr{name: "main", ids: []string{"GPU-00"}}).annotate(annotations.UseGPUType, "A100")},
			ids: []string{"GPU-06"}, code: codes.FailedPrecondition, reason: ReasonSelector, contains: "nvidia.com/use-gputype refuses card GPU-06 (Tesla T4)"},
		{name: "numa-bind refuses cards on two NUMA nodes", pods: []*podBuilder{newPod("a", ctr{name: "main", ids: []string{"GPU-00", "GPU-01"}}).annotate(annotations.NUMABind, "true")},
			ids: []string{"GPU-00", "GPU-04"}, code: codes.FailedPrecondition, reason: ReasonSelector, contains: "span 2 NUMA nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPlugin(t, testCards(8, t4), 1)
			for _, b := range tc.pods {
				p.UpsertPod(b.obj(t))
			}
			var failed []*AllocateError
			p.failed = func(e *AllocateError) { failed = append(failed, e) }
			_, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: tc.ids}}})
			st, _ := status.FromError(err)
			if err == nil || st.Code() != tc.code {
				t.Fatalf("err = %v, want code %s", err, tc.code)
			}
			prefix := "cardinal: " + string(tc.reason) + ": "
			if !strings.HasPrefix(st.Message(), prefix) || !strings.Contains(st.Message(), tc.contains) {
				t.Fatalf("message %q, want prefix %q containing %q", st.Message(), prefix, tc.contains)
			}
			if len(failed) != 1 || failed[0].Reason != tc.reason {
				t.Errorf("failure hook got %v", failed)
			}
		})
	}
}

func TestAllocateServesUnambiguousMismatchAndCorrectsRecord(t *testing.T) {
	// One pod in flight wants 1 card, assigned GPU-00; the kubelet (TopologyManager, say) picks
	// GPU-03. The owner is unambiguous and has no selector: serve and record what it got.
	p := testPlugin(t, testCards(8, nil), 1)
	p.UpsertPod(newPod("a", ctr{name: "main", ids: []string{"GPU-00"}}).obj(t))
	resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-03"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].Envs[EnvVisibleDevices]; got != "GPU-03" {
		t.Errorf("%s = %q", EnvVisibleDevices, got)
	}
	if diff := cmp.Diff(annotations.ContainerAllocation{Name: "main", IDs: []string{"GPU-03"}, Source: annotations.SourceAllocate}, recordOf(t, p, "a")["main"]); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}

func TestAllocateUnmanagedPodGetsDevicesOnly(t *testing.T) {
	p := testPlugin(t, testCards(8, nil), 1)
	p.UpsertPod(newPod("plain", ctr{name: "main", count: 2}).unmanaged().obj(t))
	resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-05", "GPU-04"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{EnvVisibleDevices: "GPU-04,GPU-05", EnvCUDADeviceOrder: "PCI_BUS_ID"}, resp.ContainerResponses[0].Envs); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestAllocateSharedCardsSetsLimits(t *testing.T) {
	// 4 shares per card; the container wants 2 cards with 4096 MiB and 30 % of each.
	p := testPlugin(t, testCards(4, nil), 4)
	ids := []string{annotations.SlotID(uuidOf(1), 2), annotations.SlotID(uuidOf(3), 0)}
	p.UpsertPod(newPod("a", ctr{name: "main", ids: ids, memMiB: 4096, cores: 30}).obj(t))
	resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		EnvVisibleDevices:          "GPU-01,GPU-03",
		EnvCUDADeviceOrder:         "PCI_BUS_ID",
		EnvMemoryLimitPrefix + "0": "4096m",
		EnvMemoryLimitPrefix + "1": "4096m",
		EnvSMLimit:                 "30",
		EnvMPSMemoryLimit:          "0=4096M,1=4096M",
		EnvMPSThreadPercentage:     "30",
	}
	if diff := cmp.Diff(want, resp.ContainerResponses[0].Envs); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestInterchangeableSwapCorrectedByPodResources(t *testing.T) {
	// Pods a and b ask for the same thing (1 whole card) and are interchangeable: a is assigned
	// GPU-00, b GPU-01. The kubelet admits b first; the plugin answers with the oldest in-flight
	// assignment (a's), so b gets GPU-00 and a gets GPU-01 — a harmless swap that the records get
	// wrong until PodResources corrects them.
	p := testPlugin(t, testCards(8, nil), 1)
	k := newFakeKubelet(p)
	a := newPod("a", ctr{name: "main", ids: []string{"GPU-00"}}).obj(t)
	b := newPod("b", ctr{name: "main", ids: []string{"GPU-01"}}).obj(t)
	p.UpsertPod(a)
	p.UpsertPod(b)
	gotB, _ := k.admit(t, b)
	gotA, _ := k.admit(t, a)
	if !slices.Equal(gotB["main"], []string{"GPU-00"}) || !slices.Equal(gotA["main"], []string{"GPU-01"}) {
		t.Fatalf("kubelet gave b %v and a %v; the test expects the swap", gotB["main"], gotA["main"])
	}
	var written []string
	p.record = func(uid uidT) { written = append(written, string(uid)) }
	list := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Name: "a", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{Name: "main", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-01"}}}}}},
		{Name: "b", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{Name: "main", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-00"}}}}}},
	}}
	if err := reconcileOnce(context.Background(), p, staticLister{list}, p.record); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"uid-a", "uid-b"}, written); diff != "" {
		t.Errorf("pods to rewrite (-want +got):\n%s", diff)
	}
	for pod, id := range map[string]string{"a": "GPU-01", "b": "GPU-00"} {
		want := annotations.ContainerAllocation{Name: "main", IDs: []string{id}, Source: annotations.SourcePodResources}
		if diff := cmp.Diff(want, recordOf(t, p, pod)["main"]); diff != "" {
			t.Errorf("pod %s record (-want +got):\n%s", pod, diff)
		}
	}
	// A second pass finds nothing to correct.
	written = nil
	if err := reconcileOnce(context.Background(), p, staticLister{list}, p.record); err != nil || len(written) != 0 {
		t.Errorf("second reconciliation wrote %v, %v", written, err)
	}
}

func TestPodResourcesRecordsPodsCardinalDidNotSchedule(t *testing.T) {
	p := testPlugin(t, testCards(8, nil), 1)
	p.UpsertPod(newPod("plain", ctr{name: "main", count: 2}).unmanaged().obj(t))
	list := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Name: "plain", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{Name: "main", Devices: []*podresourcesapi.ContainerDevices{
			{ResourceName: "example.com/other", DeviceIds: []string{"x"}},
			{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-07", "GPU-03"}}}}}},
		{Name: "unknown", Namespace: "default"},
	}}
	if err := reconcileOnce(context.Background(), p, staticLister{list}, func(uidT) {}); err != nil {
		t.Fatal(err)
	}
	want := annotations.ContainerAllocation{Name: "main", IDs: []string{"GPU-03", "GPU-07"}, Source: annotations.SourcePodResources}
	if diff := cmp.Diff(want, recordOf(t, p, "plain")["main"]); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

type staticLister struct {
	resp *podresourcesapi.ListPodResourcesResponse
}

func (s staticLister) List(context.Context, *podresourcesapi.ListPodResourcesRequest, ...grpcCallOption) (*podresourcesapi.ListPodResourcesResponse, error) {
	return s.resp, nil
}

func TestPreferredAllocationWaitsForTheCache(t *testing.T) {
	// The kubelet's watch can deliver a binding before the plugin's informer does: the plugin must
	// wait for the pod rather than guess.
	p := newPlugin(pluginOptions{Node: testNode, Names: annotations.DefaultResourceNames(), Cards: testCards(4, nil), Shares: 1,
		Log: logrDiscard(), CacheWait: time.Minute})
	k := newFakeKubelet(p)
	pod := newPod("late", ctr{name: "main", ids: []string{"GPU-02"}}).obj(t)
	type result struct {
		ids []string
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, _, err := k.allocate(1)
		done <- result{ids, err}
	}()
	p.UpsertPod(pod)
	r := <-done
	if r.err != nil || !slices.Equal(r.ids, []string{"GPU-02"}) {
		t.Fatalf("got %v, %v; want [GPU-02]", r.ids, r.err)
	}
}

func TestLimitsFollowCUDAOrderNotKubeletOrder(t *testing.T) {
	// The kubelet hands over slot IDs of cards 3 and 1 in that order; the container asks for 25 % of
	// each card's memory, and card 3 has 40960 MiB, card 1 81920 MiB. CUDA numbers the visible cards
	// by PCI bus id (= NVML index here): device 0 is card 1, device 1 is card 3, so limit 0 must be
	// card 1's 20480 MiB.
	cards := testCards(4, nil)
	for i := range cards {
		cards[i].PCIBusID = fmt.Sprintf("0000:%02x:00.0", 0x10+i)
	}
	cards[3].MemoryMiB = 40960
	p := testPlugin(t, cards, 4)
	ids := []string{annotations.SlotID(uuidOf(3), 0), annotations.SlotID(uuidOf(1), 1)}
	pod := newPod("a", ctr{name: "main", ids: ids, memMiB: 1, cores: 20}).obj(t)
	lim := pod.Spec.Containers[0].Resources.Limits
	delete(lim, annotations.ResourceGPUMem)
	lim[annotations.ResourceGPUMemPercentage] = resource.MustParse("25")
	a, err := annotations.DecodeAssignment(pod.Annotations[annotations.GPUAssignment])
	if err != nil {
		t.Fatal(err)
	}
	a.Containers[0].Devices[0].MemoryMiB = 10240 // card 3
	a.Containers[0].Devices[1].MemoryMiB = 20480 // card 1
	v, err := annotations.EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations[annotations.GPUAssignment] = v
	p.UpsertPod(pod)
	resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		EnvVisibleDevices:          "GPU-01,GPU-03",
		EnvCUDADeviceOrder:         "PCI_BUS_ID",
		EnvMemoryLimitPrefix + "0": "20480m",
		EnvMemoryLimitPrefix + "1": "10240m",
		EnvMPSMemoryLimit:          "0=20480M,1=10240M",
		EnvSMLimit:                 "20",
		EnvMPSThreadPercentage:     "20",
	}
	if diff := cmp.Diff(want, resp.ContainerResponses[0].Envs); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestAllocateWaitsForTheCacheInABurst(t *testing.T) {
	// Issue #21 item 3: in a burst the kubelet admits a pod whose binding the plugin's informer has
	// not shown yet while other pods of the same size are in flight. The IDs then match no visible
	// assignment and two candidates: the plugin must wait for the informer, not refuse the pod as
	// ambiguous (the kubelet fails it with UnexpectedAdmissionError).
	p := newPlugin(pluginOptions{Node: testNode, Names: annotations.DefaultResourceNames(), Cards: testCards(4, nil), Shares: 1,
		Log: logrDiscard(), CacheWait: time.Minute})
	// a and late are created in the same second (a burst): the kubelet may admit either first.
	a := newPod("a", ctr{name: "main", ids: []string{uuidOf(0)}})
	p.UpsertPod(a.obj(t))
	p.UpsertPod(newPod("b", ctr{name: "main", ids: []string{uuidOf(1)}}).obj(t))
	late := newPod("late", ctr{name: "main", ids: []string{uuidOf(2)}}).createdWith(a).obj(t)
	done := make(chan error, 1)
	go func() {
		_, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{uuidOf(2)}}}})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Allocate answered before the pod was visible: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	p.UpsertPod(late)
	if err := <-done; err != nil {
		t.Fatalf("Allocate of the late pod's card: %v", err)
	}
	p.mu.Lock()
	uid := p.byKey["default/late"]
	p.mu.Unlock()
	if _, rec, _, ok := p.pendingRecord(uid); !ok || len(rec.Containers) != 1 || !slices.Equal(rec.Containers[0].IDs, []string{uuidOf(2)}) {
		t.Errorf("record of the late pod: %+v (%v), want its card", rec, ok)
	}
}
