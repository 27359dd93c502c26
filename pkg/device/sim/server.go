package sim

import (
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
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
	sets []*eventSet
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
		d := &device{card: c, srv: s, lost: !c.Healthy}
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
		return s.devices[i], nvml.SUCCESS
	}
	s.DeviceGetHandleByUUIDFunc = func(u string) (nvml.Device, nvml.Return) {
		for _, d := range s.devices {
			if d.card.UUID == u {
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
			ev := nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: XidFallenOffBus,
				GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
			for _, es := range d.sets {
				select {
				case es.ch <- ev:
				default: // a full queue already holds enough bad news
				}
			}
		}
		return true
	}
	return false
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
	d.GetUUIDFunc = func() (string, nvml.Return) { return c.UUID, nvml.SUCCESS }
	d.GetIndexFunc = func() (int, nvml.Return) { return c.Index, nvml.SUCCESS }
	d.GetMinorNumberFunc = func() (int, nvml.Return) { return c.Index, nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return c.Model, nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		total := uint64(c.MemoryMiB) << 20
		return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		var p nvml.PciInfo
		copy(p.BusId[:], BusID(c.Index))
		p.Bus = uint32(0x10 + c.Index/32)
		p.Device = uint32(c.Index % 32)
		return p, nvml.SUCCESS
	}
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
		if d.isLost() {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return 40, nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(mask uint64, set nvml.EventSet) nvml.Return {
		es, ok := set.(*eventSet)
		if ok && mask&nvml.EventTypeXidCriticalError != 0 {
			d.srv.mu.Lock()
			d.sets = append(d.sets, es)
			d.srv.mu.Unlock()
		}
		return nvml.SUCCESS
	}
}
