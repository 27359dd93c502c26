package sim

import (
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/migplace"
)

// XidFallenOffBus is the XID the simulator raises when a card turns unhealthy (79: GPU has fallen off
// the bus), a critical one that no health checker ignores.
const XidFallenOffBus = 79

// Server is a simulated NVML serving a fixed set of cards. It implements nvml.Interface through
// go-nvml's mock; only the calls Cardinal makes are answered, others panic as moq mocks do.
type Server struct {
	mock.Interface

	mu      sync.Mutex
	devices []*device
	sets    []*eventSet
}

type device struct {
	mock.Device
	card Card
	srv  *Server
	// lost is true while the card is unhealthy: live queries fail with ERROR_GPU_IS_LOST.
	lost bool
	// fault is the simulated fault ("" for none).
	fault Fault
	// mig is the MIG mode; nil when the card does not support MIG.
	mig  *nvidia.MIGMode
	sets []*eventSet
	// migs are the card's MIG devices, in index order: the file's at New, then those created
	// (dynamic.go) in the first free index; nil where one was destroyed.
	migs []*migDevice
	// gis are the card's GPU instances by ID; model is the card's MIG geometry (nil when
	// pkg/migplace does not model the card); created counts the MIG devices created (their UUIDs).
	gis     map[int]*gpuInstance
	model   *migplace.Model
	created int
}

type eventSet struct {
	mock.EventSet
	ch chan nvml.EventData
}

var _ nvml.Interface = (*Server)(nil)
var _ nvidia.Library = (*Server)(nil)

// New builds a simulated NVML serving cards (as File.Cards returns them). Cards that are not healthy
// start lost.
func New(cards []Card) *Server {
	s := &Server{}
	for _, c := range cards {
		d := &device{card: c, srv: s, lost: !c.Healthy, fault: c.Fault, mig: cloneMIG(c.MIG)}
		d.setFuncs()
		s.devices = append(s.devices, d)
	}
	s.InitFunc = func() nvml.Return { return nvml.SUCCESS }
	s.ShutdownFunc = func() nvml.Return { return nvml.SUCCESS }
	s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "simulated", nvml.SUCCESS }
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return len(s.devices), nvml.SUCCESS }
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(s.devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if s.devices[i].faultIs(FaultLost) {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return s.devices[i], nvml.SUCCESS
	}
	s.DeviceGetHandleByUUIDFunc = func(u string) (nvml.Device, nvml.Return) {
		for _, d := range s.devices {
			if d.card.UUID == u {
				if d.faultIs(FaultLost) {
					return nil, nvml.ERROR_GPU_IS_LOST
				}
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		es := &eventSet{ch: make(chan nvml.EventData, 256)}
		es.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
		es.WaitFunc = func(ms uint32) (nvml.EventData, nvml.Return) {
			t := time.NewTimer(time.Duration(ms) * time.Millisecond)
			defer t.Stop()
			select {
			case ev := <-es.ch:
				return ev, nvml.SUCCESS
			case <-t.C:
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		}
		s.mu.Lock()
		s.sets = append(s.sets, es)
		s.mu.Unlock()
		return es, nvml.SUCCESS
	}
	return s
}

// BusID is the PCI bus id the simulator gives card index, in NVML's form (8-digit domain, upper case).
func BusID(index int) string {
	return fmt.Sprintf("00000000:%02X:%02X.0", 0x10+index/32, index%32)
}

// NUMA resolves the NUMA node of a simulated card from its bus id (sysfs form), standing in for
// /sys/bus/pci/devices/<busid>/numa_node.
func (s *Server) NUMA(busID string) (int, error) {
	for _, d := range s.devices {
		if nvidia.NormalizeBusID(BusID(d.card.Index)) == busID {
			return d.card.NUMA, nil
		}
	}
	return -1, nil
}

// SetHealth turns a card unhealthy (it raises critical XID 79 on every event set the card is
// registered with, and live queries fail) or healthy again (queries pass, so the health checker's
// probe recovers it). It reports whether the card exists and its health changed.
func (s *Server) SetHealth(uuid string, healthy bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		if d.card.UUID != uuid {
			continue
		}
		if d.lost == !healthy {
			return false
		}
		d.lost = !healthy
		if !healthy {
			d.raiseLocked(XidFallenOffBus)
		}
		return true
	}
	return false
}

// SetFault sets a card's simulated fault ("" or FaultNone for none). A card going FaultLost raises
// critical XID 79, as a card falling off the bus does. It reports whether the card exists and its
// fault changed.
func (s *Server) SetFault(uuid string, f Fault) bool {
	if f == FaultNone {
		f = ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		if d.card.UUID != uuid {
			continue
		}
		if d.fault == f {
			return false
		}
		if f == FaultLost {
			d.raiseLocked(XidFallenOffBus)
		}
		d.fault = f
		return true
	}
	return false
}

// SetMIG sets a card's MIG mode (nil: the card does not support MIG), as nvidia-smi -mig and a reset
// would. It reports whether the card exists and its mode changed.
func (s *Server) SetMIG(uuid string, m *nvidia.MIGMode) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		if d.card.UUID != uuid {
			continue
		}
		if (d.mig == nil) == (m == nil) && (m == nil || *d.mig == *m) {
			return false
		}
		d.mig = cloneMIG(m)
		return true
	}
	return false
}

func (d *device) migMode() *nvidia.MIGMode {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	return cloneMIG(d.mig)
}

// raiseLocked sends a critical XID of the whole card on every event set the card is registered with
// (s.mu held).
func (d *device) raiseLocked(xid uint64) {
	d.raiseOnLocked(xid, nvidia.NoInstance, nvidia.NoInstance)
}

// raiseOnLocked sends a critical XID naming GPU instance gi and compute instance ci (NoInstance: none)
// on every event set the card is registered with (s.mu held), as NVML reports an XID in a MIG device:
// on its card's handle, with the instance IDs.
func (d *device) raiseOnLocked(xid uint64, gi, ci uint32) {
	ev := nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: xid,
		GpuInstanceId: gi, ComputeInstanceId: ci}
	for _, es := range d.sets {
		select {
		case es.ch <- ev:
		default: // a full queue already holds enough bad news
		}
	}
}

func (d *device) faultIs(f Fault) bool {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	return d.fault == f
}

// Fault reports the simulated fault of a card ("" for none).
func (s *Server) Fault(uuid string) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		if d.card.UUID == uuid {
			return d.fault
		}
	}
	return ""
}

// Healthy reports the simulated health of a card.
func (s *Server) Healthy(uuid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		if d.card.UUID == uuid {
			return !d.lost
		}
	}
	return false
}

func (d *device) isLost() bool {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	return d.lost
}

func (d *device) setFuncs() {
	c := d.card
	// gone answers ERROR_GPU_IS_LOST for every call while the card is off the bus.
	gone := func() bool { return d.faultIs(FaultLost) }
	d.GetUUIDFunc = func() (string, nvml.Return) {
		if gone() {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return c.UUID, nvml.SUCCESS
	}
	d.GetIndexFunc = func() (int, nvml.Return) {
		if gone() {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return c.Index, nvml.SUCCESS
	}
	d.GetMinorNumberFunc = func() (int, nvml.Return) {
		if gone() {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return c.Index, nvml.SUCCESS
	}
	d.GetNameFunc = func() (string, nvml.Return) {
		if gone() {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return c.Model, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		switch {
		case gone():
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		case d.faultIs(FaultMemoryNotSupported):
			return nvml.Memory{}, nvml.ERROR_NOT_SUPPORTED
		}
		total := uint64(c.MemoryMiB) << 20
		return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		var p nvml.PciInfo
		if gone() {
			return p, nvml.ERROR_GPU_IS_LOST
		}
		setBusID(&p, BusID(c.Index))
		p.Bus = uint32(0x10 + c.Index/32)
		p.Device = uint32(c.Index % 32)
		return p, nvml.SUCCESS
	}
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
		if gone() || d.isLost() {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return 40, nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		switch {
		case gone():
			return 0, 0, false, false, nvml.ERROR_GPU_IS_LOST
		case d.faultIs(FaultRowRemapPending):
			return 0, 1, true, false, nvml.SUCCESS
		}
		return 0, 0, false, false, nvml.SUCCESS
	}
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		if gone() {
			return 0, 0, nvml.ERROR_GPU_IS_LOST
		}
		m := d.migMode()
		if m == nil {
			return 0, 0, nvml.ERROR_NOT_SUPPORTED
		}
		mode := func(on bool) int {
			if on {
				return nvml.DEVICE_MIG_ENABLE
			}
			return nvml.DEVICE_MIG_DISABLE
		}
		return mode(m.Current), mode(m.Pending), nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		if gone() {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(mask uint64, set nvml.EventSet) nvml.Return {
		if gone() {
			return nvml.ERROR_GPU_IS_LOST
		}
		es, ok := set.(*eventSet)
		if ok && mask&nvml.EventTypeXidCriticalError != 0 {
			d.srv.mu.Lock()
			d.sets = append(d.sets, es)
			d.srv.mu.Unlock()
		}
		return nvml.SUCCESS
	}
	d.setMIGFuncs()
	d.setLinkFuncs()
}

// setBusID writes id into NVML's C-string bus id field (NUL-terminated, at most 31 bytes).
func setBusID(p *nvml.PciInfo, id string) {
	for i := 0; i < len(id) && i < len(p.BusId)-1; i++ {
		p.BusId[i] = int8(id[i])
	}
}
