package deviceplugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// advertisedHealth is what ListAndWatch tells the kubelet, for the IDs of the given cards.
func advertisedHealth(p *Plugin, cards ...int) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]string{}
	for _, d := range p.table.pluginDevices(false) {
		for _, c := range cards {
			if u, _, _ := annotations.ParseDeviceID(d.ID); u == uuidOf(c) {
				out[d.ID] = d.Health
			}
		}
	}
	return out
}

func TestSharesRaisedWhileACardIsHeldWhole(t *testing.T) {
	// The plugin ran with --shares=1; a running pod holds GPU-01 whole. Restarted with --shares=4 it
	// must not offer GPU-01's four slots: GPU-01 stays advertised (the kubelet keeps counting it as
	// allocated) and its slots are Unhealthy until the pod ends. Card 2 is untouched.
	p := testPlugin(t, testCards(4, nil), 4)
	woken := p.changed
	whole := running(t, newPod("whole", ctr{name: "main", ids: []string{uuidOf(1)}}), uuidOf(1))
	p.UpsertPod(whole)
	kubeletSays(t, p, map[string][]string{"whole": {uuidOf(1)}})
	want := map[string]string{uuidOf(1): pluginapi.Healthy}
	for k := 0; k < 4; k++ {
		want[annotations.SlotID(uuidOf(1), k)] = pluginapi.Unhealthy
		want[annotations.SlotID(uuidOf(2), k)] = pluginapi.Healthy
	}
	if diff := cmp.Diff(want, advertisedHealth(p, 1, 2)); diff != "" {
		t.Errorf("advertised (-want +got):\n%s", diff)
	}
	select {
	case <-woken:
	default:
		t.Error("ListAndWatch was not woken")
	}
	p.DeletePod(whole)
	for k := 0; k < 4; k++ {
		want[annotations.SlotID(uuidOf(1), k)] = pluginapi.Healthy
	}
	delete(want, uuidOf(1))
	if diff := cmp.Diff(want, advertisedHealth(p, 1, 2)); diff != "" {
		t.Errorf("after the pod ended (-want +got):\n%s", diff)
	}
}

func TestSharesLoweredWhileHighSlotsAreHeld(t *testing.T) {
	// --shares went from 4 to 2; pods hold GPU-01::3 and GPU-01::0. ::3 stays advertised; one free
	// slot (::1, the highest free) is withheld so that at most 2 pods share the card.
	p := testPlugin(t, testCards(2, nil), 2)
	p.UpsertPod(running(t, newPod("hi", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 3)}, memMiB: 1000}), annotations.SlotID(uuidOf(1), 3)))
	p.UpsertPod(running(t, newPod("lo", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 1000}), annotations.SlotID(uuidOf(1), 0)))
	kubeletSays(t, p, map[string][]string{"hi": {annotations.SlotID(uuidOf(1), 3)}, "lo": {annotations.SlotID(uuidOf(1), 0)}})
	want := map[string]string{
		annotations.SlotID(uuidOf(1), 0): pluginapi.Healthy,
		annotations.SlotID(uuidOf(1), 1): pluginapi.Unhealthy,
		annotations.SlotID(uuidOf(1), 3): pluginapi.Healthy,
	}
	if diff := cmp.Diff(want, advertisedHealth(p, 1)); diff != "" {
		t.Errorf("advertised (-want +got):\n%s", diff)
	}
}

func TestSharesLoweredToOneWhileSlotsAreHeld(t *testing.T) {
	// --shares went from 4 to 1; a pod holds GPU-01::2 (sharing GPU-01): GPU-01 cannot be handed out
	// whole until it ends.
	p := testPlugin(t, testCards(2, nil), 1)
	p.UpsertPod(running(t, newPod("s", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 2)}, memMiB: 1000}), annotations.SlotID(uuidOf(1), 2)))
	kubeletSays(t, p, map[string][]string{"s": {annotations.SlotID(uuidOf(1), 2)}})
	want := map[string]string{uuidOf(1): pluginapi.Unhealthy, annotations.SlotID(uuidOf(1), 2): pluginapi.Healthy}
	if diff := cmp.Diff(want, advertisedHealth(p, 1)); diff != "" {
		t.Errorf("advertised (-want +got):\n%s", diff)
	}
}

func TestForgedRecordWithholdsNothing(t *testing.T) {
	// A running pod carries a forged record claiming card 1 whole under --shares=4. The kubelet never
	// gave it that card: its four slots stay Healthy. Once PodResources says the pod holds it, they
	// are withheld.
	p := testPlugin(t, testCards(4, nil), 4)
	p.UpsertPod(running(t, newPod("liar", ctr{name: "main", count: 1}).unmanaged(), uuidOf(1)))
	want := map[string]string{}
	for k := 0; k < 4; k++ {
		want[annotations.SlotID(uuidOf(1), k)] = pluginapi.Healthy
	}
	if diff := cmp.Diff(want, advertisedHealth(p, 1)); diff != "" {
		t.Errorf("advertised with a forged record (-want +got):\n%s", diff)
	}
	kubeletSays(t, p, map[string][]string{"liar": {uuidOf(1)}})
	want[uuidOf(1)] = pluginapi.Healthy
	for k := 0; k < 4; k++ {
		want[annotations.SlotID(uuidOf(1), k)] = pluginapi.Unhealthy
	}
	if diff := cmp.Diff(want, advertisedHealth(p, 1)); diff != "" {
		t.Errorf("advertised once PodResources agrees (-want +got):\n%s", diff)
	}
}

func TestForgedRecordDoesNotMarkAContainerServed(t *testing.T) {
	// A pending pod carries a record claiming its container was served: the kubelet has not admitted
	// it yet, and its Allocate is still its own.
	p := testPlugin(t, testCards(4, nil), 1)
	b := newPod("a", ctr{name: "main", ids: []string{uuidOf(2)}})
	pod := running(t, b, uuidOf(3))
	pod.Status.Phase = corev1.PodPending
	p.UpsertPod(pod)
	if _, err := allocateIDs(p, uuidOf(2)); err != nil {
		t.Fatalf("Allocate of a's assignment: %v", err)
	}
}
