package deviceplugin

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func allocateIDs(p *Plugin, ids ...string) (*pluginapi.AllocateResponse, error) {
	return p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
}

func preferIDs(t *testing.T, p *Plugin, available []string, size int) []string {
	t.Helper()
	resp, err := p.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: available, AllocationSize: int32(size)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.ContainerResponses[0].DeviceIDs
}

// running marks a pod Running with an allocation record of the given IDs for container "main".
func running(t *testing.T, b *podBuilder, ids ...string) *corev1.Pod {
	t.Helper()
	pod := b.obj(t)
	pod.Status.Phase = corev1.PodRunning
	v, err := annotations.EncodeAllocation(annotations.Allocation{Node: testNode, Containers: []annotations.ContainerAllocation{{Name: "main", IDs: ids, Source: annotations.SourceAllocate}}})
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations[annotations.GPUAllocated] = v
	return pod
}

func TestUnmanagedPodBoundFirstDoesNotTakeCardinalPodsCard(t *testing.T) {
	// "other" (another scheduler's, 1 GPU) was bound first; Cardinal's "a" (1 GPU, 20000 MiB of card
	// 0) after it. The kubelet admits "other" first: it must get a card nobody is assigned, and "a"
	// then its own card with its limits — not any card, served as unmanaged.
	p := testPlugin(t, testCards(4, nil), 4)
	k := newFakeKubelet(p)
	other := newPod("other", ctr{name: "main", count: 1}).unmanaged().obj(t)
	a := newPod("a", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(0), 0)}, memMiB: 20000, cores: 50}).obj(t)
	p.UpsertPod(other)
	p.UpsertPod(a)
	gotOther, _ := k.admit(t, other)
	if slices.ContainsFunc(gotOther["main"], func(id string) bool { return strings.HasPrefix(id, uuidOf(0)) }) {
		t.Errorf("other got %v: a slot of card 0, which a is assigned and whose other pods it would share unlimited", gotOther["main"])
	}
	gotA, envA := k.admit(t, a)
	if diff := cmp.Diff([]string{annotations.SlotID(uuidOf(0), 0)}, gotA["main"]); diff != "" {
		t.Errorf("a (-assigned +got):\n%s", diff)
	}
	if envA["main"][EnvMemoryLimitPrefix+"0"] != "20000m" {
		t.Errorf("a's env %v has no memory limit", envA["main"])
	}
	// Both are recorded at once: the extender counts "other" in flight until it is.
	if rec := recordOf(t, p, "other")["main"]; !slices.Equal(rec.IDs, gotOther["main"]) || rec.Source != annotations.SourceAllocate {
		t.Errorf("other's record %+v, want %v from allocate", rec, gotOther["main"])
	}
}

func TestCardinalPodNeverServedAsUnmanaged(t *testing.T) {
	// Just after a restart the plugin lists "other" (unmanaged) and "a" (Cardinal, shared), bound in
	// the same second: which one the kubelet admits first is not known. It hands out IDs that are
	// nobody's assignment. Serving them as "other" could give "a" a card without its limits: served as
	// the guess, and refused at start if the kubelet's record shows "a" holding them.
	p := testPluginListing(t, testCards(4, nil), 4)
	other := newPod("other", ctr{name: "main", count: 1}).unmanaged()
	p.UpsertPod(other.obj(t))
	a := newPod("a", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(0), 0)}, memMiB: 20000}).createdWith(other)
	p.UpsertPod(a.obj(t))
	ids := []string{annotations.SlotID(uuidOf(2), 0)}
	resp, err := allocateIDs(p, ids...)
	if err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, startAs(p, a, "main", ids, resp), ReasonWrongResponse, "pod default/a", "pod default/other", "CUDA_DEVICE_MEMORY_LIMIT_0")
	// A whole-card Cardinal container gets the same answer as the unmanaged pod: served.
	q := testPluginListing(t, testCards(4, nil), 1)
	other = newPod("other", ctr{name: "main", count: 1}).unmanaged()
	q.UpsertPod(other.obj(t))
	q.UpsertPod(newPod("a", ctr{name: "main", ids: []string{uuidOf(0)}}).createdWith(other).obj(t))
	resp, err = allocateIDs(q, uuidOf(2))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{EnvVisibleDevices: uuidOf(2), EnvCUDADeviceOrder: "PCI_BUS_ID"}, resp.ContainerResponses[0].Envs); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestSubstituteRespectsCardMemory(t *testing.T) {
	// Card 1 (81920 MiB) holds "big" with 70000 MiB. "a" wants 40000 MiB and is assigned card 2; the
	// kubelet hands it a slot of card 1: 70000 + 40000 > 81920, refused.
	p := testPlugin(t, testCards(4, nil), 4)
	p.UpsertPod(running(t, newPod("big", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 70000}), annotations.SlotID(uuidOf(1), 0)))
	p.UpsertPod(newPod("a", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(2), 0)}, memMiB: 40000}).obj(t))
	_, err := allocateIDs(p, annotations.SlotID(uuidOf(1), 1))
	st, _ := status.FromError(err)
	if err == nil || !strings.Contains(st.Message(), "cardinal: insufficient-capacity:") || !strings.Contains(st.Message(), "card GPU-01 has 70000 of 81920 MiB reserved by pods default/big") {
		t.Fatalf("err = %v, want insufficient-capacity naming card GPU-01 and pod big", err)
	}
	// 10000 MiB would fit beside it: served, with its limit.
	q := testPlugin(t, testCards(4, nil), 4)
	q.UpsertPod(running(t, newPod("big", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 70000}), annotations.SlotID(uuidOf(1), 0)))
	q.UpsertPod(newPod("a", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(2), 0)}, memMiB: 10000}).obj(t))
	resp, err := allocateIDs(q, annotations.SlotID(uuidOf(1), 1))
	if err != nil || resp.ContainerResponses[0].Envs[EnvMemoryLimitPrefix+"0"] != "10000m" {
		t.Fatalf("resp %v, err %v; want served with a 10000m limit", resp, err)
	}
}

func TestSubstituteRespectsExclusivity(t *testing.T) {
	p := testPlugin(t, testCards(4, nil), 4)
	// A whole-card container is not served a slot of a card another pod shares.
	p.UpsertPod(running(t, newPod("small", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 1000}), annotations.SlotID(uuidOf(1), 0)))
	p.UpsertPod(newPod("whole", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(2), 0)}}).obj(t))
	_, err := allocateIDs(p, annotations.SlotID(uuidOf(1), 1))
	if st, _ := status.FromError(err); err == nil || !strings.Contains(st.Message(), `wants card GPU-01 to itself, but pods default/small use it`) {
		t.Fatalf("err = %v, want insufficient-capacity (exclusive)", err)
	}
	// A shared container is not served a slot of a card another pod holds whole.
	q := testPlugin(t, testCards(4, nil), 4)
	q.UpsertPod(running(t, newPod("whole", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}}), annotations.SlotID(uuidOf(1), 0)))
	q.UpsertPod(newPod("small", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(2), 0)}, memMiB: 1000}).obj(t))
	_, err = allocateIDs(q, annotations.SlotID(uuidOf(1), 1))
	if st, _ := status.FromError(err); err == nil || !strings.Contains(st.Message(), "card GPU-01 is held whole by pod default/whole") {
		t.Fatalf("err = %v, want insufficient-capacity (held whole)", err)
	}
	// A pod Cardinal did not schedule gets whole cards: not a slot of a shared card.
	r := testPlugin(t, testCards(4, nil), 4)
	r.UpsertPod(running(t, newPod("small", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 1000}), annotations.SlotID(uuidOf(1), 0)))
	r.UpsertPod(newPod("plain", ctr{name: "main", count: 1}).unmanaged().obj(t))
	if _, err := allocateIDs(r, annotations.SlotID(uuidOf(1), 1)); err == nil || !strings.Contains(err.Error(), "insufficient-capacity") {
		t.Fatalf("err = %v, want insufficient-capacity", err)
	}
}

func TestPreferredSteersUnmanagedPodToFreeCards(t *testing.T) {
	// Card 0 is held whole (slot 0) by a running pod; cards 1-3 are free. An unmanaged pod asking for
	// one device must be steered to card 1, not to another slot of card 0.
	p := testPlugin(t, testCards(4, nil), 4)
	p.UpsertPod(running(t, newPod("whole", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(0), 0)}}), annotations.SlotID(uuidOf(0), 0)))
	p.UpsertPod(newPod("plain", ctr{name: "main", count: 1}).unmanaged().obj(t))
	var available []string
	for c := 0; c < 4; c++ {
		for k := 0; k < 4; k++ {
			if c != 0 || k != 0 {
				available = append(available, annotations.SlotID(uuidOf(c), k))
			}
		}
	}
	if diff := cmp.Diff([]string{annotations.SlotID(uuidOf(1), 0)}, preferIDs(t, p, available, 1)); diff != "" {
		t.Errorf("preferred (-want +got):\n%s", diff)
	}
}
