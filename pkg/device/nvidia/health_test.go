package nvidia_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

// healthRun runs WatchHealth on a simulated NVML and hands its events to the test.
type healthRun struct {
	srv    *sim.Server
	cards  []nvidia.Card
	events chan nvidia.HealthEvent
	// rounds receives one value per round of probes.
	rounds chan struct{}
}

func startHealth(t *testing.T, cards []sim.Card, wrap func(*sim.Server) nvidia.Library) *healthRun {
	return startHealthWith(t, cards, wrap, nil)
}

// startHealthWith is startHealth with the discovered cards edited by edit (nil: none).
func startHealthWith(t *testing.T, cards []sim.Card, wrap func(*sim.Server) nvidia.Library, edit func([]nvidia.Card)) *healthRun {
	t.Helper()
	srv := sim.New(cards)
	found, err := nvidia.Discover(srv, srv.NUMA)
	if err != nil {
		t.Fatal(err)
	}
	lib := nvidia.Library(srv)
	if wrap != nil {
		lib = wrap(srv)
	}
	if edit != nil {
		edit(found)
	}
	h := &healthRun{srv: srv, cards: found, events: make(chan nvidia.HealthEvent, 16), rounds: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		done <- nvidia.WatchHealth(ctx, nvidia.HealthConfig{Lib: lib, Cards: found, RecoveryInterval: 20 * time.Millisecond,
			WaitTimeout: 5 * time.Millisecond, Log: logr.Discard(), Started: func() { close(started) },
			Probed: func() {
				select {
				case h.rounds <- struct{}{}:
				default:
				}
			}},
			func(e nvidia.HealthEvent) { h.events <- e })
	}()
	select {
	case <-started:
	case err := <-done:
		done <- err
		t.Fatalf("WatchHealth ended before it started: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return h
}

func (h *healthRun) next(t *testing.T) nvidia.HealthEvent {
	t.Helper()
	select {
	case e := <-h.events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no health event")
		return nvidia.HealthEvent{}
	}
}

func twoCards() []sim.Card {
	return []sim.Card{
		{UUID: "GPU-a", Index: 0, Model: "Tesla T4", MemoryMiB: 15360, Healthy: true},
		{UUID: "GPU-b", Index: 1, Model: "Tesla T4", MemoryMiB: 15360, Healthy: true},
	}
}

func TestHealthCriticalXidThenRecovery(t *testing.T) {
	h := startHealth(t, twoCards(), nil)
	h.srv.SetHealth("GPU-b", false)
	got := h.next(t)
	want := nvidia.HealthEvent{UUID: "GPU-b", Xid: sim.XidFallenOffBus, ResetRequired: true, Reason: "critical XID 79 (needs a GPU reset)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("unhealthy event (-want +got):\n%s", diff)
	}
	// While the card stays lost its probe fails and nothing is reported; once it answers again (the
	// simulator's reset) the next probe recovers it.
	h.srv.SetHealth("GPU-b", true)
	got = h.next(t)
	if got.UUID != "GPU-b" || !got.Healthy {
		t.Fatalf("recovery event = %+v, want GPU-b healthy", got)
	}
}

func TestHealthCardUnhealthyAtStart(t *testing.T) {
	cards := twoCards()
	cards[0].Healthy = false
	h := startHealth(t, cards, nil)
	got := h.next(t)
	if got.UUID != "GPU-a" || got.Healthy {
		t.Fatalf("event = %+v, want GPU-a unhealthy", got)
	}
}

// xidLib sends one XID through an event set it controls, then reports the test's marker XID, so the
// test can tell that the first one was skipped without waiting for a timeout.
type xidLib struct {
	*sim.Server
	xids []uint64
}

func (l *xidLib) EventSetCreate() (nvml.EventSet, nvml.Return) {
	xids := l.xids
	dev, _ := l.DeviceGetHandleByIndex(0)
	return &mock.EventSet{
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			if len(xids) == 0 {
				time.Sleep(time.Millisecond)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			x := xids[0]
			xids = xids[1:]
			return nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: x}, nvml.SUCCESS
		},
	}, nvml.SUCCESS
}

func TestHealthIgnoresApplicationXids(t *testing.T) {
	for xid := range nvidia.DefaultIgnoredXids() {
		// The ignored XID comes first; the only event must be the critical XID 48 after it.
		h := startHealth(t, twoCards(), func(s *sim.Server) nvidia.Library { return &xidLib{Server: s, xids: []uint64{xid, 48}} })
		got := h.next(t)
		if got.Xid != 48 || got.UUID != "GPU-a" {
			t.Errorf("after XID %d: event %+v, want XID 48 on GPU-a", xid, got)
		}
	}
}

func TestDefaultIgnoredXids(t *testing.T) {
	want := map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}
	if diff := cmp.Diff(want, nvidia.DefaultIgnoredXids()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// noRecovery waits for several rounds of probes and fails if any health event arrives meanwhile.
func (h *healthRun) noEventFor(t *testing.T, rounds int) {
	t.Helper()
	for i := 0; i < rounds; i++ {
		select {
		case e := <-h.events:
			t.Fatalf("unexpected health event %+v", e)
		case <-h.rounds:
		case <-time.After(10 * time.Second):
			t.Fatal("no probe round")
		}
	}
	select {
	case e := <-h.events:
		t.Fatalf("unexpected health event %+v", e)
	default:
	}
}

// eventLib delivers the given events, one per wait, through an event set it controls.
type eventLib struct {
	*sim.Server
	events []nvml.EventData
}

func (l *eventLib) EventSetCreate() (nvml.EventSet, nvml.Return) {
	evs := l.events
	return &mock.EventSet{
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			if len(evs) == 0 {
				time.Sleep(time.Millisecond)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			e := evs[0]
			evs = evs[1:]
			return e, nvml.SUCCESS
		},
	}, nvml.SUCCESS
}

func TestHealthResetXidKeepsCardUnhealthyWhileProbesPass(t *testing.T) {
	for xid := range nvidia.DefaultResetXids() {
		t.Run(fmt.Sprint(xid), func(t *testing.T) {
			h := startHealth(t, twoCards(), func(s *sim.Server) nvidia.Library { return &xidLib{Server: s, xids: []uint64{xid}} })
			got := h.next(t)
			if got.UUID != "GPU-a" || got.Healthy || !got.ResetRequired {
				t.Fatalf("event %+v, want GPU-a unhealthy needing a reset", got)
			}
			// The card still answers UUID and temperature; without a reset it must stay unhealthy
			// (RecoveryInterval is 20ms, a probe round 5ms: 10 rounds are twice the interval).
			h.noEventFor(t, 10)
		})
	}
}

func TestHealthOtherCriticalXidRecoversAfterInterval(t *testing.T) {
	// XID 61 (internal micro-controller breakpoint) is critical but not in the reset list.
	h := startHealth(t, twoCards(), func(s *sim.Server) nvidia.Library { return &xidLib{Server: s, xids: []uint64{61}} })
	if got := h.next(t); got.Healthy || got.ResetRequired || got.Xid != 61 {
		t.Fatalf("event %+v, want GPU-a unhealthy by XID 61", got)
	}
	if got := h.next(t); !got.Healthy || got.UUID != "GPU-a" {
		t.Fatalf("event %+v, want GPU-a healthy again", got)
	}
}

func TestHealthConfigurableResetXids(t *testing.T) {
	srv := sim.New(twoCards())
	found, err := nvidia.Discover(srv, srv.NUMA)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan nvidia.HealthEvent, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- nvidia.WatchHealth(ctx, nvidia.HealthConfig{Lib: &xidLib{Server: srv, xids: []uint64{61}}, Cards: found,
			RecoveryInterval: 20 * time.Millisecond, WaitTimeout: 5 * time.Millisecond, Log: logr.Discard(),
			ResetXids: map[uint64]bool{61: true}}, func(e nvidia.HealthEvent) { events <- e })
	}()
	got := <-events
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !got.ResetRequired || got.Xid != 61 {
		t.Fatalf("event %+v, want XID 61 needing a reset", got)
	}
}

func TestHealthXidOnUnnamedCardMarksEveryCard(t *testing.T) {
	h := startHealth(t, twoCards(), func(s *sim.Server) nvidia.Library {
		return &eventLib{Server: s, events: []nvml.EventData{{EventType: nvml.EventTypeXidCriticalError, EventData: 79}}}
	})
	got := map[string]bool{}
	for i := 0; i < 2; i++ {
		e := h.next(t)
		if e.Healthy || !e.ResetRequired {
			t.Fatalf("event %+v, want unhealthy needing a reset", e)
		}
		got[e.UUID] = true
	}
	if diff := cmp.Diff(map[string]bool{"GPU-a": true, "GPU-b": true}, got); diff != "" {
		t.Errorf("cards marked (-want +got):\n%s", diff)
	}
}

// noEventsLib serves cards that do not support events.
type noEventsLib struct{ *sim.Server }

type noEventsDevice struct{ nvml.Device }

func (noEventsDevice) GetSupportedEventTypes() (uint64, nvml.Return) {
	return 0, nvml.ERROR_NOT_SUPPORTED
}

func (l noEventsLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := l.Server.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return noEventsDevice{d}, ret
}

func TestHealthCardWithoutEventsIsProbed(t *testing.T) {
	h := startHealth(t, twoCards(), func(s *sim.Server) nvidia.Library { return noEventsLib{s} })
	h.srv.SetFault("GPU-b", sim.FaultLost)
	got := h.next(t)
	if got.UUID != "GPU-b" || got.Healthy || !strings.Contains(got.Reason, "ERROR_GPU_IS_LOST") {
		t.Fatalf("event %+v, want GPU-b unhealthy (lost)", got)
	}
	h.srv.SetFault("GPU-b", "")
	if got := h.next(t); got.UUID != "GPU-b" || !got.Healthy {
		t.Fatalf("event %+v, want GPU-b healthy again", got)
	}
}

func TestHealthPendingRowRemapMarksUnhealthyUntilReset(t *testing.T) {
	h := startHealth(t, twoCards(), nil)
	h.srv.SetFault("GPU-a", sim.FaultRowRemapPending)
	got := h.next(t)
	if got.UUID != "GPU-a" || got.Healthy || !strings.Contains(got.Reason, "row remapping pending") {
		t.Fatalf("event %+v, want GPU-a unhealthy by a pending row remap", got)
	}
	h.noEventFor(t, 10)
	h.srv.SetFault("GPU-a", "") // the reset performs the remap
	if got := h.next(t); got.UUID != "GPU-a" || !got.Healthy {
		t.Fatalf("event %+v, want GPU-a healthy after the reset", got)
	}
}

func TestHealthCardFaultyAtDiscoveryStaysUnhealthy(t *testing.T) {
	cards := twoCards()
	cards[1].Fault = sim.FaultMemoryNotSupported
	h := startHealth(t, cards, nil)
	got := h.next(t)
	if got.UUID != "GPU-b" || got.Healthy || !got.ResetRequired || !strings.Contains(got.Reason, "ERROR_NOT_SUPPORTED") {
		t.Fatalf("event %+v, want GPU-b unhealthy (memory not supported at discovery)", got)
	}
	h.noEventFor(t, 10)
}

// A card that falls off the bus fails every NVML call, GetUUID included, so its XID 79 names it only
// by the device handle the watcher registered: that card, and only that one, turns unhealthy, and it
// recovers once it answers again (the reset the simulator performs when the fault is cleared).
func TestHealthCardOffTheBusIsIdentifiedByItsHandle(t *testing.T) {
	h := startHealth(t, twoCards(), nil)
	h.srv.SetFault("GPU-b", sim.FaultLost)
	got := h.next(t)
	want := nvidia.HealthEvent{UUID: "GPU-b", Xid: sim.XidFallenOffBus, ResetRequired: true, Reason: "critical XID 79 (needs a GPU reset)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("unhealthy event (-want +got):\n%s", diff)
	}
	// Off the bus for a while: probes fail, nothing more is reported (GPU-a above all).
	h.noEventFor(t, 10)
	h.srv.SetFault("GPU-b", sim.FaultNone)
	got = h.next(t)
	want = nvidia.HealthEvent{UUID: "GPU-b", Healthy: true, Reason: "the card answers again after falling off the bus: reset observed"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("recovery event (-want +got):\n%s", diff)
	}
	h.noEventFor(t, 5)
}

// chanLib delivers the events a test sends, through an event set it controls.
type chanLib struct {
	*sim.Server
	events chan nvml.EventData
}

func (l *chanLib) EventSetCreate() (nvml.EventSet, nvml.Return) {
	return &mock.EventSet{
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			select {
			case e := <-l.events:
				return e, nvml.SUCCESS
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
	}, nvml.SUCCESS
}

// A critical XID on a handle the watcher never registered, whose UUID NVML cannot tell, still marks
// every card unhealthy. The card found off the bus then recovers once it answers again; the others
// need a reset (or a plugin restart).
func TestHealthXidOnUnknownHandleMarksEveryCard(t *testing.T) {
	lib := &chanLib{events: make(chan nvml.EventData, 1)}
	h := startHealth(t, twoCards(), func(s *sim.Server) nvidia.Library { lib.Server = s; return lib })
	unknown := &mock.Device{GetUUIDFunc: func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }}
	h.srv.SetFault("GPU-b", sim.FaultLost)
	lib.events <- nvml.EventData{Device: unknown, EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	got := map[string]bool{}
	for i := 0; i < 2; i++ {
		e := h.next(t)
		if e.Healthy || !e.ResetRequired || e.Reason != "critical XID 79 (needs a GPU reset) on a card NVML cannot name" {
			t.Fatalf("event %+v, want unhealthy needing a reset, on a card NVML cannot name", e)
		}
		got[e.UUID] = true
	}
	if diff := cmp.Diff(map[string]bool{"GPU-a": true, "GPU-b": true}, got); diff != "" {
		t.Errorf("cards marked (-want +got):\n%s", diff)
	}
	h.srv.SetFault("GPU-b", sim.FaultNone)
	if e := h.next(t); e.UUID != "GPU-b" || !e.Healthy {
		t.Fatalf("event %+v, want GPU-b healthy after its reset", e)
	}
	h.noEventFor(t, 10)
}

// A card whose MIG mode is turned on while the plugin runs (pending: it takes effect at the next
// reset) turns unhealthy at the next probe, with the reason; once the mode is disabled again it
// recovers. A card without MIG support (ERROR_NOT_SUPPORTED) stays healthy throughout.
func TestHealthCardInMIGModeIsUnhealthyUntilDisabled(t *testing.T) {
	cards := twoCards()
	cards[0].MIG = &nvidia.MIGMode{} // supports MIG, disabled; GPU-b does not support MIG
	h := startHealth(t, cards, nil)
	h.noEventFor(t, 3)
	h.srv.SetMIG("GPU-a", &nvidia.MIGMode{Pending: true})
	got := h.next(t)
	if got.UUID != "GPU-a" || got.Healthy || !strings.Contains(got.Reason, "MIG mode is enabled (current disabled, pending enabled)") {
		t.Fatalf("event %+v, want GPU-a unhealthy for its pending MIG mode", got)
	}
	h.srv.SetMIG("GPU-a", &nvidia.MIGMode{})
	if got := h.next(t); got.UUID != "GPU-a" || !got.Healthy {
		t.Fatalf("event %+v, want GPU-a healthy once MIG mode is disabled", got)
	}
}

// A card in MIG mode at start is reported unhealthy at once.
func TestHealthCardInMIGModeAtStart(t *testing.T) {
	cards := twoCards()
	cards[1].MIG = &nvidia.MIGMode{Current: true, Pending: true}
	h := startHealth(t, cards, nil)
	got := h.next(t)
	if got.UUID != "GPU-b" || got.Healthy || !strings.Contains(got.Reason, "MIG mode is enabled (current enabled, pending enabled)") {
		t.Fatalf("event %+v, want GPU-b unhealthy for its MIG mode", got)
	}
	h.noEventFor(t, 5)
}
