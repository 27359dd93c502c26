package nvidia_test

import (
	"context"
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
}

func startHealth(t *testing.T, cards []sim.Card, wrap func(*sim.Server) nvidia.Library) *healthRun {
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
	h := &healthRun{srv: srv, cards: found, events: make(chan nvidia.HealthEvent, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		done <- nvidia.WatchHealth(ctx, nvidia.HealthConfig{Lib: lib, Cards: found, RecoveryInterval: 20 * time.Millisecond,
			WaitTimeout: 5 * time.Millisecond, Log: logr.Discard(), Started: func() { close(started) }},
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
	want := nvidia.HealthEvent{UUID: "GPU-b", Xid: sim.XidFallenOffBus, Reason: "critical XID 79"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("unhealthy event (-want +got):\n%s", diff)
	}
	// While the card stays lost its probe fails and nothing is reported; once it answers again the
	// next probe recovers it.
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
