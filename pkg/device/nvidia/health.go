package nvidia

import (
	"context"
	"errors"
	"fmt"
	"reflect"
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

// DefaultResetXids are the critical XIDs after which NVIDIA's XID catalogue says the card needs a
// GPU reset (or a node reboot): 48 double-bit ECC error, 63 ECC page retirement / row remapping
// pending, 64 row remapping failure, 74 NVLink error, 79 GPU has fallen off the bus, 94 contained ECC
// error, 95 uncontained ECC error, 119 GSP RPC timeout, 120 GSP error. A card that reports one stays
// unhealthy until a reset is observed or the plugin restarts; a passing probe is not enough.
func DefaultResetXids() map[uint64]bool {
	return map[uint64]bool{48: true, 63: true, 64: true, 74: true, 79: true, 94: true, 95: true, 119: true, 120: true}
}

// HealthEvent says a card or a MIG instance turned unhealthy or recovered.
type HealthEvent struct {
	// UUID is the card's, or the MIG instance's (MIG-…) when Parent is set.
	UUID string
	// Parent is set for a MIG instance: the UUID of its card. An instance is healthy when neither it
	// nor its card has a fault (its card in MIG mode is never served whole, so the card's own events
	// say unhealthy throughout); its events say both.
	Parent  string
	Healthy bool
	// Xid is the XID that made the card unhealthy, 0 otherwise.
	Xid uint64
	// ResetRequired is true when the card stays unhealthy until it is reset (a reset-class XID, or a
	// fault found at discovery).
	ResetRequired bool
	// Reason is a short text for logs and events.
	Reason string
}

// HealthConfig configures WatchHealth.
type HealthConfig struct {
	// Lib is NVML (real or mock).
	Lib Library
	// Cards are the cards to watch, as Discover returned them. Cards with a Fault (not described at
	// discovery) are reported unhealthy at start and stay so until the plugin restarts; cards without
	// a UUID are not watched.
	Cards []Card
	// RecoveryInterval is how long an unhealthy card must go without a critical XID before a passing
	// probe makes it healthy again (XIDs in ResetXids excepted). Zero means 30s.
	RecoveryInterval time.Duration
	// ProbeInterval is how often every card is probed (UUID, temperature, pending row remaps), healthy
	// or not; it is what finds faults on cards that deliver no XID events. Zero means a quarter of
	// RecoveryInterval.
	ProbeInterval time.Duration
	// IgnoredXids are application XIDs that never mark a card unhealthy; nil means DefaultIgnoredXids.
	IgnoredXids map[uint64]bool
	// ResetXids are the critical XIDs after which only an observed reset (the card fell off the bus
	// and answers again) or a plugin restart makes the card healthy; nil means DefaultResetXids.
	ResetXids map[uint64]bool
	// WaitTimeout bounds one NVML event wait, and so how quickly cancellation is noticed. Zero means 1s.
	WaitTimeout time.Duration
	// Started, if set, is called once every card is registered and probed (and any unhealthy ones
	// reported), before the first wait.
	Started func()
	// Probed, if set, is called after every round of probes (tests count rounds with it).
	Probed func()
	Log    logr.Logger
}

type watched struct {
	card Card
	dev  nvml.Device
	// events is true once critical-XID events are registered for the card.
	events    bool
	healthy   bool
	lastFault time.Time
	// needsReset: a reset-class XID holds the card unhealthy until a reset is observed.
	needsReset bool
	// wentLost: since turning unhealthy, a probe found the card off the bus (ERROR_GPU_IS_LOST or no
	// handle). A card that answers again after that has been reset (or re-attached).
	wentLost bool
	// permanent: the card was not described at discovery; only a restart can describe it.
	permanent bool
	// inMIG: the card was in MIG mode at discovery, so it is never served whole until the plugin
	// restarts (its inventory entry says so). It is reported unhealthy once, for its MIG mode; from
	// then on healthy, lastFault and the rest describe the card itself, as the parent of its
	// instances, and a recovery is told through its instances only.
	inMIG bool
	// instances are the card's MIG instances that have a UUID.
	instances []*watchedInstance
}

// watchedInstance is one MIG instance of a watched card.
type watchedInstance struct {
	in MIGInstance
	// sound: no fault of the instance itself (an XID naming it, a failed probe) within
	// RecoveryInterval.
	sound     bool
	lastFault time.Time
	// reason is why the instance itself is not sound.
	reason string
	// healthy is what was last reported: sound and the card too.
	healthy bool
	// permanent: the instance was not described at discovery; only a restart can describe it.
	permanent bool
	// index is where NVML listed the instance last (a hint for probes).
	index int
}

// WatchHealth watches NVML critical XID events and probes every card until ctx ends, calling report
// (from one goroutine) whenever a card turns unhealthy or recovers.
//
// A card turns unhealthy on a critical XID (not in IgnoredXids), on a failed probe (a card that
// turns to MIG mode, current or pending, fails it: it must not be served whole), when its events
// cannot be registered, or when it had a Fault at discovery. An XID's card is found by the device
// handle its events were registered with (a card off the bus cannot tell its UUID any more), else by
// the UUID; only a critical XID whose handle is unknown and whose card NVML cannot name marks every
// card unhealthy. Recovery: after a critical XID outside ResetXids, or a failed
// probe, the card is healthy again once RecoveryInterval has passed without one and a probe passes.
// After an XID in ResetXids the card must be reset: it recovers only when a probe passes after one
// found it off the bus (what a reset looks like from NVML), or when the plugin restarts (the node
// operator's action after resetting the card). A card with a discovery Fault recovers only by restart.
//
// A card in MIG mode at discovery is reported unhealthy once, for its MIG mode (it is never served
// whole before the plugin restarts), and its MIG instances are watched: an instance turns unhealthy
// on a critical XID that names its GPU instance (and compute instance, unless the event names none),
// on a failed probe (it is gone, or its memory query fails) or when its card turns unhealthy; it
// recovers once it and its card are sound again (its own fault RecoveryInterval old and its probe
// passing). An XID naming no instance (NoInstance), or one in ResetXids, is the card's, as above.
// Instances not described at discovery stay unhealthy until a restart. Instance events carry Parent.
func WatchHealth(ctx context.Context, cfg HealthConfig, report func(HealthEvent)) error {
	if cfg.RecoveryInterval <= 0 {
		cfg.RecoveryInterval = 30 * time.Second
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = cfg.RecoveryInterval / 4
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = time.Second
	}
	if cfg.IgnoredXids == nil {
		cfg.IgnoredXids = DefaultIgnoredXids()
	}
	if cfg.ResetXids == nil {
		cfg.ResetXids = DefaultResetXids()
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

	h := &healthState{cfg: cfg, lib: lib, set: set, report: report, cards: map[string]*watched{}}
	now := time.Now()
	for _, c := range cfg.Cards {
		if c.UUID == "" {
			continue
		}
		w := &watched{card: c, healthy: true, inMIG: c.MIG.Enabled()}
		for _, in := range c.Instances {
			if in.UUID == "" {
				continue
			}
			wi := &watchedInstance{in: in, sound: in.Fault == "", healthy: true, permanent: in.Fault != ""}
			if wi.permanent {
				wi.reason = "not described at discovery (" + in.Fault + "); restart the plugin once it is fixed"
			}
			w.instances = append(w.instances, wi)
		}
		h.cards[c.UUID] = w
		h.order = append(h.order, w)
		if c.Fault != "" {
			w.permanent = true
			h.unhealthy(w, now, HealthEvent{UUID: c.UUID, ResetRequired: true, Reason: "not described at discovery (" + c.Fault + "); restart the plugin once the card is fixed"})
			continue
		}
		err := h.register(w)
		if err == nil {
			_, err = probe(lib, w)
		}
		switch {
		case err != nil:
			h.unhealthy(w, now, HealthEvent{UUID: c.UUID, Reason: err.Error()})
		case w.inMIG:
			// The card is sound, but never served whole.
			h.report(HealthEvent{UUID: c.UUID, Reason: c.MIG.Reason()})
		}
		h.probeInstances(w, now)
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
			h.handleEvent(ev, now)
		case nvml.ERROR_TIMEOUT:
		default:
			// The event set itself failed: no card can be trusted until a probe passes.
			cfg.Log.Error(ret, "NVML event wait failed; marking every card unhealthy")
			for _, w := range h.order {
				h.unhealthy(w, now, HealthEvent{UUID: w.card.UUID, Reason: "NVML event wait failed: " + ret.Error()})
			}
			select {
			case <-ctx.Done():
			case <-time.After(cfg.WaitTimeout):
			}
		}
		if now.Sub(lastProbe) >= cfg.ProbeInterval {
			lastProbe = now
			h.probeAll(now)
			if cfg.Probed != nil {
				cfg.Probed()
			}
		}
	}
	return nil
}

type healthState struct {
	cfg    HealthConfig
	lib    Library
	set    nvml.EventSet
	report func(HealthEvent)
	cards  map[string]*watched
	order  []*watched
}

// unhealthy records a fault on w and reports it if the card was healthy. A reset requirement sticks
// until the card recovers. The card's instances turn unhealthy with it.
func (h *healthState) unhealthy(w *watched, now time.Time, ev HealthEvent) {
	w.lastFault = now
	newReset := ev.ResetRequired && !w.needsReset
	if newReset {
		w.needsReset = true
		w.wentLost = false
		if !w.healthy {
			// Already unhealthy for a lesser reason: say that it now needs a reset.
			h.report(ev)
		}
	}
	if w.healthy {
		w.healthy = false
		h.report(ev)
	}
	h.syncInstances(w, ev, newReset)
}

// instanceUnhealthy records a fault of instance wi of card w, and reports the instance unhealthy if
// it was healthy.
func (h *healthState) instanceUnhealthy(w *watched, wi *watchedInstance, now time.Time, ev HealthEvent) {
	wi.lastFault, wi.sound, wi.reason = now, false, ev.Reason
	if wi.healthy {
		wi.healthy = false
		ev.UUID, ev.Parent = wi.in.UUID, w.card.UUID
		h.report(ev)
	}
}

// syncInstances reports every instance of w whose health (its own and its card's) differs from what
// was last reported. cause is the card's event that changed it (its zero value otherwise); newReset
// says the card has just come to need a reset, which instances down for their card are told again.
func (h *healthState) syncInstances(w *watched, cause HealthEvent, newReset bool) {
	for _, wi := range w.instances {
		healthy := wi.sound && w.healthy && !w.permanent
		if healthy == wi.healthy && (healthy || !wi.sound || !newReset) {
			continue
		}
		wi.healthy = healthy
		ev := HealthEvent{UUID: wi.in.UUID, Parent: w.card.UUID, Healthy: healthy}
		switch {
		case healthy:
			ev.Reason = "the instance and its card are sound again"
		case !wi.sound:
			ev.ResetRequired, ev.Reason = wi.permanent, wi.reason
		default:
			ev.Xid, ev.ResetRequired = cause.Xid, w.needsReset || w.permanent
			ev.Reason = "its card " + w.card.UUID + " is unhealthy"
			if cause.Reason != "" {
				ev.Reason += ": " + cause.Reason
			}
		}
		h.report(ev)
	}
}

// probeInstances probes every instance of a sound card: an instance that fails turns unhealthy, and
// one whose fault is older than RecoveryInterval and that passes recovers.
func (h *healthState) probeInstances(w *watched, now time.Time) {
	if !w.healthy || w.permanent {
		return
	}
	for _, wi := range w.instances {
		if wi.permanent {
			continue
		}
		err := probeInstance(w.dev, wi)
		switch {
		case err != nil && wi.sound:
			h.instanceUnhealthy(w, wi, now, HealthEvent{Reason: err.Error()})
		case err != nil:
			h.cfg.Log.V(1).Info("MIG instance still unhealthy", "gpu", wi.in.UUID, "reason", err.Error())
		case !wi.sound && now.Sub(wi.lastFault) >= h.cfg.RecoveryInterval:
			wi.sound = true
		}
	}
	h.syncInstances(w, HealthEvent{}, false)
}

// probeAll probes every card: a healthy card that fails turns unhealthy; an unhealthy one recovers
// when its rule (see WatchHealth) allows.
func (h *healthState) probeAll(now time.Time) {
	for _, w := range h.order {
		if w.permanent {
			continue
		}
		lost, err := probe(h.lib, w)
		if w.healthy {
			if err != nil {
				h.unhealthy(w, now, HealthEvent{UUID: w.card.UUID, Reason: err.Error()})
			}
			continue
		}
		if err != nil {
			w.wentLost = w.wentLost || lost
			if !w.needsReset {
				w.lastFault = now
			}
			h.cfg.Log.V(1).Info("card still unhealthy", "gpu", w.card.UUID, "reason", err.Error())
			continue
		}
		reason := "no critical XID and NVML probe passed"
		switch {
		case w.needsReset && !w.wentLost:
			continue // a reset-class fault and no reset seen: only the operator can clear it
		case w.needsReset:
			reason = "the card answers again after falling off the bus: reset observed"
		case now.Sub(w.lastFault) < h.cfg.RecoveryInterval:
			continue
		}
		if !w.events {
			if err := h.register(w); err != nil {
				w.lastFault = now
				continue
			}
		}
		w.healthy, w.needsReset, w.wentLost = true, false, false
		if w.inMIG {
			// Never served whole before a restart: its instances recover instead.
			h.cfg.Log.Info("card in MIG mode is sound again; its instances recover", "gpu", w.card.UUID, "reason", reason)
		} else {
			h.report(HealthEvent{UUID: w.card.UUID, Healthy: true, Reason: reason})
		}
	}
	for _, w := range h.order {
		h.probeInstances(w, now)
	}
}

func (h *healthState) register(w *watched) error {
	d, ret := h.lib.DeviceGetHandleByIndex(w.card.Index)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("get handle of card %d: %w", w.card.Index, ret)
	}
	if u, ret := d.GetUUID(); ret != nvml.SUCCESS || u != w.card.UUID {
		return fmt.Errorf("card %d is no longer %s", w.card.Index, w.card.UUID)
	}
	w.dev = d
	supported, ret := d.GetSupportedEventTypes()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		w.events = true // nothing to register; probes watch it
		return nil
	}
	if ret != nvml.SUCCESS {
		return fmt.Errorf("supported events of %s: %w", w.card.UUID, ret)
	}
	mask := uint64(nvml.EventTypeXidCriticalError) & supported
	if mask != 0 {
		if ret := d.RegisterEvents(mask, h.set); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
			return fmt.Errorf("register XID events of %s: %w", w.card.UUID, ret)
		}
	}
	w.events = true
	return nil
}

func (h *healthState) handleEvent(ev nvml.EventData, now time.Time) {
	if ev.EventType != nvml.EventTypeXidCriticalError {
		return
	}
	xid := ev.EventData
	if h.cfg.IgnoredXids[xid] {
		h.cfg.Log.V(1).Info("ignoring application XID", "xid", xid)
		return
	}
	reset := h.cfg.ResetXids[xid]
	reason := fmt.Sprintf("critical XID %d", xid)
	if reset {
		reason += " (needs a GPU reset)"
	}
	w, err := h.eventCard(ev.Device)
	if err != nil {
		// The event names no card this watcher knows: any of them may be the broken one.
		h.cfg.Log.Error(fmt.Errorf("critical XID %d on an unidentified card: %w", xid, err), "marking every card unhealthy")
		for _, w := range h.order {
			if w.permanent {
				continue
			}
			// Look at every card at once, as for a named one: the card that is off the bus now and
			// answers later has been reset.
			lost := false
			if reset {
				lost, _ = probe(h.lib, w)
			}
			h.unhealthy(w, now, HealthEvent{UUID: w.card.UUID, Xid: xid, ResetRequired: reset, Reason: reason + " on a card NVML cannot name"})
			w.wentLost = w.wentLost || lost
		}
		return
	}
	if w.permanent {
		return
	}
	if !reset && ev.GpuInstanceId != NoInstance {
		if ins := w.instancesAt(ev.GpuInstanceId, ev.ComputeInstanceId); len(ins) > 0 {
			reason := fmt.Sprintf("critical XID %d on GPU instance %d", xid, ev.GpuInstanceId)
			if ev.ComputeInstanceId != NoInstance {
				reason += fmt.Sprintf(", compute instance %d", ev.ComputeInstanceId)
			}
			for _, wi := range ins {
				h.instanceUnhealthy(w, wi, now, HealthEvent{Xid: xid, Reason: reason})
			}
			return
		}
		// An instance this watcher does not know: the card answers for it.
	}
	// Look at once, before anyone hears of the fault: a card that is off the bus now and answers
	// later has been reset.
	lost := false
	if reset {
		lost, _ = probe(h.lib, w)
	}
	h.unhealthy(w, now, HealthEvent{UUID: w.card.UUID, Xid: xid, ResetRequired: reset, Reason: reason})
	w.wentLost = w.wentLost || lost
}

// instancesAt returns the instances of w an event names: those of GPU instance gi, and of compute
// instance ci unless ci is NoInstance. Instances not described at discovery are left out.
func (w *watched) instancesAt(gi, ci uint32) []*watchedInstance {
	var out []*watchedInstance
	for _, wi := range w.instances {
		if !wi.permanent && uint32(wi.in.GI) == gi && (ci == NoInstance || uint32(wi.in.CI) == ci) {
			out = append(out, wi)
		}
	}
	return out
}

// eventCard finds the card an event's device handle belongs to. The handle comes first: a card that
// fell off the bus (XID 79) fails every NVML call, GetUUID included, but its event still carries the
// handle this watcher registered for it. The UUID is asked only for a handle no card was seen with.
func (h *healthState) eventCard(d nvml.Device) (*watched, error) {
	if d == nil {
		return nil, errors.New("the event has no device")
	}
	for _, w := range h.order {
		if sameHandle(w.dev, d) {
			return w, nil
		}
	}
	u, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("unknown device handle, UUID: %w", ret)
	}
	w, ok := h.cards[u]
	if !ok {
		return nil, fmt.Errorf("unknown card %s", u)
	}
	return w, nil
}

// sameHandle reports whether a and b are the same NVML device handle. NVML's handles are comparable
// values (a pointer in a struct); a handle type that cannot be compared never matches.
func sameHandle(a, b nvml.Device) bool {
	if a == nil || b == nil || reflect.TypeOf(a) != reflect.TypeOf(b) {
		return false
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Comparable() && vb.Comparable() && va.Equal(vb)
}

// probe asks NVML for the card's UUID, a live reading (temperature), pending row remaps and the MIG
// mode; a card that fell off the bus fails it, and so does one with a row remap pending (it needs a
// reset; the remap is done then) and one whose MIG mode is enabled or pending (it must not be served
// whole; it recovers once the mode is disabled and the card reset). Queries a card does not support pass. lost reports that NVML says the card is
// gone (ERROR_GPU_IS_LOST, or no handle).
func probe(lib Library, w *watched) (lost bool, err error) {
	d := w.dev
	if d == nil {
		var ret nvml.Return
		if d, ret = lib.DeviceGetHandleByIndex(w.card.Index); ret != nvml.SUCCESS {
			return true, fmt.Errorf("get handle: %w", ret)
		}
	}
	u, ret := d.GetUUID()
	switch {
	case ret == nvml.ERROR_GPU_IS_LOST:
		return true, fmt.Errorf("UUID check failed: %w", ret)
	case ret != nvml.SUCCESS:
		return false, fmt.Errorf("UUID check failed: %w", ret)
	case u != w.card.UUID:
		return false, fmt.Errorf("UUID check failed: the card now reports %s", u)
	}
	if _, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
		return ret == nvml.ERROR_GPU_IS_LOST, fmt.Errorf("temperature query failed: %w", ret)
	}
	_, _, pending, failed, ret := d.GetRemappedRows()
	switch {
	case ret == nvml.ERROR_GPU_IS_LOST:
		return true, fmt.Errorf("row remapping query failed: %w", ret)
	case ret == nvml.SUCCESS && failed:
		return false, errors.New("row remapping failed (the card needs a reset or replacement)")
	case ret == nvml.SUCCESS && pending:
		return false, errors.New("row remapping pending (the card needs a reset)")
	}
	if w.inMIG {
		// Known to be in MIG mode, and never served whole before a restart: what matters is the card
		// itself, the parent of its instances.
		w.dev = d
		return false, nil
	}
	mig, err := ReadMIGMode(d)
	switch {
	case err != nil:
		return errors.Is(err, nvml.ERROR_GPU_IS_LOST), fmt.Errorf("MIG mode query failed: %w", err)
	case mig.Enabled():
		return false, errors.New(mig.Reason())
	}
	w.dev = d
	return false, nil
}

// probeInstance finds the instance among its card's MIG devices (d is the card's handle) and asks
// for a live reading (its memory use): an instance that is gone, renamed or does not answer fails
// (a driver that cannot tell a MIG device's memory use passes).
func probeInstance(d nvml.Device, wi *watchedInstance) error {
	if d == nil {
		return errors.New("its card has no handle")
	}
	find := func(i int) nvml.Device {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil
		}
		if u, ret := m.GetUUID(); ret != nvml.SUCCESS || u != wi.in.UUID {
			return nil
		}
		return m
	}
	m := find(wi.index)
	if m == nil {
		n, ret := d.GetMaxMigDeviceCount()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("count MIG devices: %w", ret)
		}
		for i := 0; i < n && i < maxMIGDevices && m == nil; i++ {
			if m = find(i); m != nil {
				wi.index = i
			}
		}
	}
	if m == nil {
		return fmt.Errorf("MIG device %s is gone", wi.in.UUID)
	}
	if _, ret := m.GetMemoryInfo(); ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
		return fmt.Errorf("memory query of MIG device %s failed: %w", wi.in.UUID, ret)
	}
	return nil
}
