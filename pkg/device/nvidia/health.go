package nvidia

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-logr/logr"
)

// DefaultIgnoredXids are the XIDs that say an application failed, not the card: NVIDIA's own device
// plugin ignores the same ones (k8s-device-plugin internal/rm/health.go; meanings from NVIDIA's XID
// catalogue): 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing,
// 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout.
func DefaultIgnoredXids() map[uint64]bool {
	return map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}
}

// HealthEvent says a card turned unhealthy or recovered.
type HealthEvent struct {
	UUID    string
	Healthy bool
	// Xid is the XID that made the card unhealthy, 0 otherwise.
	Xid uint64
	// Reason is a short text for logs and events.
	Reason string
}

// HealthConfig configures WatchHealth.
type HealthConfig struct {
	// Lib is NVML (real or mock).
	Lib Library
	// Cards are the cards to watch, as Discover returned them.
	Cards []Card
	// RecoveryInterval is how long an unhealthy card must go without a critical XID before it is
	// probed again; a card whose probe passes is healthy again. Zero means 30s.
	RecoveryInterval time.Duration
	// IgnoredXids are application XIDs that never mark a card unhealthy; nil means DefaultIgnoredXids.
	IgnoredXids map[uint64]bool
	// WaitTimeout bounds one NVML event wait, and so how quickly cancellation is noticed. Zero means 1s.
	WaitTimeout time.Duration
	// Started, if set, is called once every card is registered and probed (and any unhealthy ones
	// reported), before the first wait.
	Started func()
	Log     logr.Logger
}

type watched struct {
	card      Card
	dev       nvml.Device
	healthy   bool
	lastFault time.Time
}

// WatchHealth watches NVML critical XID events until ctx ends, calling report (from one goroutine)
// whenever a card turns unhealthy or recovers. Every card starts healthy; a card whose events cannot
// be registered, or that fails the probe at start, is reported unhealthy at once (a card that does not
// support events at all is only probed).
func WatchHealth(ctx context.Context, cfg HealthConfig, report func(HealthEvent)) error {
	if cfg.RecoveryInterval <= 0 {
		cfg.RecoveryInterval = 30 * time.Second
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = time.Second
	}
	if cfg.IgnoredXids == nil {
		cfg.IgnoredXids = DefaultIgnoredXids()
	}
	lib := cfg.Lib
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("initialise NVML for health: %w", ret)
	}
	defer func() { _ = lib.Shutdown() }()
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("create NVML event set: %w", ret)
	}
	defer func() { _ = set.Free() }()

	cards := make(map[string]*watched, len(cfg.Cards))
	order := make([]*watched, 0, len(cfg.Cards))
	for _, c := range cfg.Cards {
		w := &watched{card: c, healthy: true}
		cards[c.UUID] = w
		order = append(order, w)
		err := register(lib, set, w)
		if err == nil {
			err = probe(lib, w)
		}
		if err != nil {
			w.healthy, w.lastFault = false, time.Now()
			report(HealthEvent{UUID: c.UUID, Reason: err.Error()})
		}
	}

	if cfg.Started != nil {
		cfg.Started()
	}
	lastProbe := time.Now()
	for ctx.Err() == nil {
		ev, ret := set.Wait(uint32(cfg.WaitTimeout / time.Millisecond))
		now := time.Now()
		switch ret {
		case nvml.SUCCESS:
			handleEvent(cfg, cards, ev, now, report)
		case nvml.ERROR_TIMEOUT:
		default:
			// The event set itself failed: no card can be trusted until a probe passes.
			cfg.Log.Error(ret, "NVML event wait failed; marking every card unhealthy")
			for _, w := range order {
				w.lastFault = now
				if w.healthy {
					w.healthy = false
					report(HealthEvent{UUID: w.card.UUID, Reason: "NVML event wait failed: " + ret.Error()})
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(cfg.WaitTimeout):
			}
		}
		if now.Sub(lastProbe) >= cfg.RecoveryInterval/4 {
			lastProbe = now
			for _, w := range order {
				if w.healthy || now.Sub(w.lastFault) < cfg.RecoveryInterval {
					continue
				}
				if err := probe(lib, w); err != nil {
					w.lastFault = now
					cfg.Log.V(1).Info("card still unhealthy", "gpu", w.card.UUID, "reason", err.Error())
					continue
				}
				w.healthy = true
				report(HealthEvent{UUID: w.card.UUID, Healthy: true, Reason: "no critical XID and NVML probe passed"})
			}
		}
	}
	return nil
}

func register(lib Library, set nvml.EventSet, w *watched) error {
	d, ret := lib.DeviceGetHandleByIndex(w.card.Index)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("get handle of card %d: %w", w.card.Index, ret)
	}
	if u, ret := d.GetUUID(); ret != nvml.SUCCESS || u != w.card.UUID {
		return fmt.Errorf("card %d is no longer %s", w.card.Index, w.card.UUID)
	}
	w.dev = d
	supported, ret := d.GetSupportedEventTypes()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return nil
	}
	if ret != nvml.SUCCESS {
		return fmt.Errorf("supported events of %s: %w", w.card.UUID, ret)
	}
	mask := uint64(nvml.EventTypeXidCriticalError) & supported
	if mask == 0 {
		return nil
	}
	if ret := d.RegisterEvents(mask, set); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
		return fmt.Errorf("register XID events of %s: %w", w.card.UUID, ret)
	}
	return nil
}

func handleEvent(cfg HealthConfig, cards map[string]*watched, ev nvml.EventData, now time.Time, report func(HealthEvent)) {
	if ev.EventType != nvml.EventTypeXidCriticalError {
		return
	}
	if cfg.IgnoredXids[ev.EventData] {
		cfg.Log.V(1).Info("ignoring application XID", "xid", ev.EventData)
		return
	}
	if ev.Device == nil {
		return
	}
	u, ret := ev.Device.GetUUID()
	if ret != nvml.SUCCESS {
		cfg.Log.Error(ret, "critical XID on a card whose UUID NVML cannot tell", "xid", ev.EventData)
		return
	}
	w, ok := cards[u]
	if !ok {
		return
	}
	w.lastFault = now
	if w.healthy {
		w.healthy = false
		report(HealthEvent{UUID: u, Xid: ev.EventData, Reason: fmt.Sprintf("critical XID %d", ev.EventData)})
	}
}

// probe asks NVML for the card's UUID and a live reading (temperature); a card that fell off the bus
// fails it. A card that does not report temperature passes on the UUID alone.
func probe(lib Library, w *watched) error {
	d := w.dev
	if d == nil {
		var ret nvml.Return
		if d, ret = lib.DeviceGetHandleByIndex(w.card.Index); ret != nvml.SUCCESS {
			return fmt.Errorf("get handle: %w", ret)
		}
	}
	u, ret := d.GetUUID()
	switch {
	case ret != nvml.SUCCESS:
		return fmt.Errorf("UUID check failed: %w", ret)
	case u != w.card.UUID:
		return fmt.Errorf("UUID check failed: the card now reports %s", u)
	}
	if _, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
		return fmt.Errorf("temperature query failed: %w", ret)
	}
	w.dev = d
	return nil
}
