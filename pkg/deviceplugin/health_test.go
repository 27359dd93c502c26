package deviceplugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

func TestFaultyCardIsAdvertisedUnhealthyAndTheOthersServed(t *testing.T) {
	// 8 cards: card 2's memory query is not supported, card 5 is lost and the Node's inventory still
	// names it. Every card is advertised; 2 and 5 unhealthy.
	cards := testCards(8, nil)
	cards[2].Fault, cards[2].MemoryMiB = "get memory of GPU-02: ERROR_NOT_SUPPORTED", 0
	cards[5] = nvidia.Card{Index: 5, NUMA: -1, Fault: "get handle of device 5: ERROR_GPU_IS_LOST"}
	prev := &annotations.Inventory{V: 1, GPUs: []annotations.GPU{{UUID: uuidOf(5), Index: 5, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: 1, Healthy: true, Shares: 1}}}
	p := testPlugin(t, namedCards(cards, prev), 1)
	got := map[string]string{}
	for _, d := range p.table.pluginDevices(false) {
		got[d.ID] = d.Health
	}
	want := map[string]string{}
	for i := 0; i < 8; i++ {
		want[uuidOf(i)] = pluginapi.Healthy
	}
	want[uuidOf(2)], want[uuidOf(5)] = pluginapi.Unhealthy, pluginapi.Unhealthy
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("advertised (-want +got):\n%s", diff)
	}
	inv := p.Inventory()
	if g := inv.GPUs[5]; g.UUID != uuidOf(5) || g.Healthy || g.MemoryMiB != 81920 || g.NUMA != 1 {
		t.Errorf("card 5 in the inventory: %+v", g)
	}
	if _, err := annotations.EncodeInventory(inv); err != nil {
		t.Errorf("inventory does not encode: %v", err)
	}
}

func TestCardNobodyCanNameIsLeftOut(t *testing.T) {
	cards := testCards(3, nil)
	cards[1] = nvidia.Card{Index: 1, NUMA: -1, Fault: "get UUID of device 1: ERROR_GPU_IS_LOST"}
	p := testPlugin(t, namedCards(cards, nil), 1)
	var ids []string
	for _, d := range p.table.pluginDevices(false) {
		ids = append(ids, d.ID)
	}
	if diff := cmp.Diff([]string{uuidOf(0), uuidOf(2)}, ids); diff != "" {
		t.Errorf("advertised (-want +got):\n%s", diff)
	}
}

func TestHealthChangeRecordsNodeEvent(t *testing.T) {
	p := testPlugin(t, testCards(2, nil), 1)
	rec := record.NewFakeRecorder(8)
	node := &corev1.ObjectReference{Kind: "Node", Name: testNode}
	p.healthChanged = func(ev nvidia.HealthEvent) { recordHealthEvent(rec, node, ev) }
	p.SetHealth(nvidia.HealthEvent{UUID: uuidOf(1), Xid: 79, ResetRequired: true, Reason: "critical XID 79 (needs a GPU reset)"})
	p.SetHealth(nvidia.HealthEvent{UUID: uuidOf(1), Xid: 79, ResetRequired: true, Reason: "again"}) // no change, but says reset
	p.SetHealth(nvidia.HealthEvent{UUID: uuidOf(1), Healthy: true, Reason: "reset observed"})
	p.SetHealth(nvidia.HealthEvent{UUID: uuidOf(1), Healthy: true, Reason: "no change"})
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	want := []string{
		"Warning CardinalGPUUnhealthy GPU GPU-01 is unhealthy: critical XID 79 (needs a GPU reset); it stays unhealthy until the card is reset or the device plugin restarts",
		"Warning CardinalGPUUnhealthy GPU GPU-01 is unhealthy: again; it stays unhealthy until the card is reset or the device plugin restarts",
		"Normal CardinalGPUHealthy GPU GPU-01 is healthy again: reset observed",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestXidLists(t *testing.T) {
	got, err := ParseXidList(" 79, 48,,48 ")
	if err != nil || !cmp.Equal(XidList{48, 79}, got) {
		t.Errorf("ParseXidList = %v, %v", got, err)
	}
	if got, err := ParseXidList(""); err != nil || len(got) != 0 {
		t.Errorf("empty list = %v, %v", got, err)
	}
	for _, bad := range []string{"x", "0", "-3", "70000"} {
		if _, err := ParseXidList(bad); err == nil || !strings.Contains(err.Error(), "XID") {
			t.Errorf("ParseXidList(%q): err = %v", bad, err)
		}
	}
	cfg := DefaultConfig()
	cfg.NodeName = testNode
	cfg.IgnoredXids = append(cfg.IgnoredXids, 79)
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "XID 79 is both ignored") {
		t.Errorf("validate: %v", err)
	}
	if d := DefaultConfig(); d.ResetXids.String() != "48,63,64,74,79,94,95,119,120" || d.IgnoredXids.String() != "13,31,43,45,68,109" {
		t.Errorf("defaults %s / %s", d.ResetXids.String(), d.IgnoredXids.String())
	}
}

// A card in MIG mode (current or pending) is never served whole: from the simulated NVML through
// discovery to what the kubelet and the Node's inventory see, under whole-card and shared use, and
// the Node Event says why. Cards without MIG support and with MIG disabled are served.
func TestCardInMIGModeIsAdvertisedUnhealthy(t *testing.T) {
	on, pending := &nvidia.MIGMode{Current: true, Pending: true}, &nvidia.MIGMode{Pending: true}
	simCards := []sim.Card{
		{UUID: uuidOf(0), Index: 0, Model: "Tesla T4", MemoryMiB: 15360, Healthy: true}, // no MIG support
		{UUID: uuidOf(1), Index: 1, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true, MIG: &nvidia.MIGMode{}},
		{UUID: uuidOf(2), Index: 2, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true, MIG: on},
		{UUID: uuidOf(3), Index: 3, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true, MIG: pending},
	}
	srv := sim.New(simCards)
	cards, err := nvidia.Discover(srv, srv.NUMA)
	if err != nil {
		t.Fatal(err)
	}
	for _, shares := range []int{1, 2} {
		p := testPlugin(t, cards, shares)
		got := map[string]string{}
		for _, d := range p.table.pluginDevices(false) {
			got[d.ID] = d.Health
		}
		want := map[string]string{}
		for i := 0; i < 4; i++ {
			health := pluginapi.Healthy
			if i >= 2 {
				health = pluginapi.Unhealthy
			}
			g := annotations.GPU{UUID: uuidOf(i), Shares: shares}
			for _, id := range g.DeviceIDs() {
				want[id] = health
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("shares %d: advertised (-want +got):\n%s", shares, diff)
		}
		var healthy []bool
		for _, g := range p.Inventory().GPUs {
			healthy = append(healthy, g.Healthy)
		}
		if diff := cmp.Diff([]bool{true, true, false, false}, healthy); diff != "" {
			t.Errorf("shares %d: inventory health (-want +got):\n%s", shares, diff)
		}
	}
	rec := record.NewFakeRecorder(8)
	node := &corev1.ObjectReference{Kind: "Node", Name: testNode}
	for _, ev := range discoveryHealth(cards) {
		recordHealthEvent(rec, node, ev)
	}
	close(rec.Events)
	var events []string
	for e := range rec.Events {
		events = append(events, e)
	}
	want := []string{
		"Warning CardinalGPUUnhealthy GPU GPU-02 is unhealthy: " + on.Reason(),
		"Warning CardinalGPUUnhealthy GPU GPU-03 is unhealthy: " + pending.Reason(),
	}
	if diff := cmp.Diff(want, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if !strings.Contains(want[1], "MIG mode is enabled (current disabled, pending enabled)") {
		t.Errorf("event %q does not say the MIG mode", want[1])
	}
}
