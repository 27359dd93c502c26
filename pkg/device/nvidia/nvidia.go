// Package nvidia discovers NVIDIA cards through NVML (github.com/NVIDIA/go-nvml) and watches their
// health. It works the same on a real libnvidia-ml (loaded with dlopen at run time, so the binary needs
// no NVIDIA library at build time) and on a mock (go-nvml's pkg/nvml/mock, or the simulated NVML in
// pkg/device/sim).
package nvidia

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Card is one GPU as NVML reports it.
type Card struct {
	// UUID is NVML's UUID, e.g. GPU-03f69c50-207a-2038-9b45-23cac89cb67d.
	UUID string
	// Index is NVML's index (the order nvidia-smi prints).
	Index int
	// Model is the product name, e.g. "NVIDIA A100-SXM4-80GB".
	Model string
	// MemoryMiB is the card's total memory in MiB.
	MemoryMiB int64
	// PCIBusID is the bus id in sysfs form (lower case, 4-digit domain), e.g. 0000:3b:00.0; empty when
	// NVML did not report one.
	PCIBusID string
	// NUMA is the card's NUMA node; negative means unknown.
	NUMA int
	// Fault says why NVML could not describe the card fully (e.g. "get memory of GPU-…: Not Supported",
	// "get UUID: GPU is lost"); empty for a sound card. A faulty card is still listed, with what NVML
	// did report, so that the plugin can advertise it unhealthy and serve the other cards: one lost
	// card must not take the whole node offline. A card whose UUID NVML cannot tell has UUID "".
	Fault string
	// MIG is the card's MIG mode; the zero value (disabled) for cards without MIG.
	MIG MIGMode
	// Instances are the card's MIG devices when MIG mode is in force (MIG.Current), in NVML's
	// order; empty otherwise. An instance NVML cannot describe fully has its Fault set; one whose
	// UUID NVML cannot tell is listed with UUID "" (it cannot be served, as a nameless card).
	Instances []MIGInstance
	// Profiles are the card's GPU instance profiles with their legal placements (dynamic MIG);
	// set by DiscoverMIGProfiles only, for a card whose MIG mode is in force.
	Profiles []MIGProfile
}

// MIGInstance is one MIG device (a compute instance inside a GPU instance) of a card in MIG mode.
type MIGInstance struct {
	// UUID is the MIG device's UUID, MIG-….
	UUID string
	// Profile is the profile as nvidia-smi names it: 1g.10gb, 3g.40gb, 1g.10gb+me, and
	// <c>c.<profile> for a compute instance smaller than its GPU instance.
	Profile string
	// GI and CI are the GPU instance and compute instance IDs; Start and Size the GPU instance's
	// placement in memory slices.
	GI, CI, Start, Size int
	// MemoryMiB is the instance's memory; SMs its multiprocessor count.
	MemoryMiB int64
	SMs       int
	// Fault says why the instance is not usable (an XID on it, NVML errors describing it); empty
	// for a sound instance.
	Fault string
}

// MIGMode is a card's MIG (Multi-Instance GPU) mode as NVML's GetMigMode reports it. A card whose
// mode is enabled, now or after its next reset, is never served whole: CUDA sees no device on a
// MIG-enabled card handed over whole. Its MIG instances are served instead while the mode is in
// force.
type MIGMode struct {
	// Current is true when MIG mode is in force.
	Current bool
	// Pending is the mode the card takes at its next reset (NVML reports it equal to Current when
	// no change is pending).
	Pending bool
}

// Enabled reports whether MIG mode is enabled now or pending.
func (m MIGMode) Enabled() bool { return m.Current || m.Pending }

// Reason says why a card in MIG mode is not served whole, for logs, Events and the README; "" when
// MIG mode is neither in force nor pending.
func (m MIGMode) Reason() string {
	if !m.Enabled() {
		return ""
	}
	state := func(on bool) string {
		if on {
			return "enabled"
		}
		return "disabled"
	}
	return fmt.Sprintf("MIG mode is enabled (current %s, pending %s): a card in MIG mode is not served whole "+
		"(CUDA sees no device on it), only its MIG instances while the mode is in force; disable MIG mode "+
		"(nvidia-smi -i <index> -mig 0) and reset the card to serve it whole", state(m.Current), state(m.Pending))
}

// ReadMIGMode asks NVML for the card's MIG mode. A card or driver without MIG (ERROR_NOT_SUPPORTED,
// or a library without the call: ERROR_FUNCTION_NOT_FOUND) is not in MIG mode; any other failure is
// an error (NVML's Return), since the card could then be in MIG mode.
func ReadMIGMode(d nvml.Device) (MIGMode, error) {
	cur, pending, ret := d.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		return MIGMode{Current: cur == nvml.DEVICE_MIG_ENABLE, Pending: pending == nvml.DEVICE_MIG_ENABLE}, nil
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		return MIGMode{}, nil
	}
	return MIGMode{}, ret
}

// Library is the part of NVML discovery and health watching use. nvml.Interface (the real library
// and every mock) satisfies it.
type Library interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
	EventSetCreate() (nvml.EventSet, nvml.Return)
}

var _ Library = nvml.Interface(nil)

// NUMAFunc returns the NUMA node of the card at a PCI bus id (sysfs form); negative means unknown.
type NUMAFunc func(busID string) (int, error)

// SysfsNUMA reads /sys/bus/pci/devices/<busid>/numa_node under root (normally "/sys"), as the kubelet
// and NVIDIA's device plugin do. A missing file means unknown (-1), as does a negative value.
func SysfsNUMA(root string) NUMAFunc {
	return func(busID string) (int, error) {
		if busID == "" {
			return -1, nil
		}
		if strings.ContainsAny(busID, `/\`) || busID == ".." {
			return -1, fmt.Errorf("PCI bus id %q is not a device name", busID)
		}
		b, err := os.ReadFile(filepath.Join(root, "bus", "pci", "devices", busID, "numa_node"))
		if errors.Is(err, os.ErrNotExist) {
			return -1, nil
		}
		if err != nil {
			return -1, fmt.Errorf("read NUMA node of %s: %w", busID, err)
		}
		return ParseNUMANode(string(b))
	}
}

// ParseNUMANode parses the content of a sysfs numa_node file. Negative values mean unknown and are
// returned as -1.
func ParseNUMANode(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return -1, fmt.Errorf("numa_node %q is not an integer", strings.TrimSpace(s))
	}
	if n < 0 {
		return -1, nil
	}
	if n > 1<<16 {
		return -1, fmt.Errorf("numa_node %d is out of range", n)
	}
	return n, nil
}

// NormalizeBusID turns NVML's bus id (e.g. "00000000:3B:00.0", 8-digit domain, upper case) into the
// sysfs device name ("0000:3b:00.0"). It returns "" for an empty or malformed id.
func NormalizeBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(strings.TrimRight(id, "\x00")))
	parts := strings.Split(id, ":")
	if len(parts) != 3 || parts[0] == "" {
		return ""
	}
	dom := parts[0]
	if len(dom) > 4 {
		if strings.Trim(dom[:len(dom)-4], "0") != "" {
			return ""
		}
		dom = dom[len(dom)-4:]
	}
	for len(dom) < 4 {
		dom = "0" + dom
	}
	out := dom + ":" + parts[1] + ":" + parts[2]
	for _, r := range out {
		if !strings.ContainsRune("0123456789abcdef:.", r) {
			return ""
		}
	}
	return out
}

// Discover initialises NVML, lists every card and shuts NVML down again. numa resolves NUMA nodes
// (SysfsNUMA("/sys") on a real host); nil means every card's NUMA node is unknown. Cards NVML cannot
// describe come back with Fault set; only NVML itself failing (init, count) is an error.
func Discover(lib Library, numa NUMAFunc) ([]Card, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initialise NVML: %w", ret)
	}
	defer func() { _ = lib.Shutdown() }()
	return list(lib, numa)
}

// list describes every card NVML counts. Only a failure to count is an error: a card NVML cannot
// describe is listed with Fault set (and what it did report), so one bad card never hides the others.
func list(lib Library, numa NUMAFunc) ([]Card, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("count devices: %w", ret)
	}
	cards := make([]Card, 0, n)
	seen := map[string]int{}
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			cards = append(cards, Card{Index: i, NUMA: -1, Fault: fmt.Sprintf("get handle of device %d: %v", i, ret)})
			continue
		}
		c, err := describe(d, i, numa)
		if err != nil {
			c.Fault = err.Error()
		}
		if prev, dup := seen[c.UUID]; dup && c.UUID != "" {
			// Two cards cannot stand for one device ID: the second is kept, nameless and faulty.
			c.Fault = fmt.Sprintf("UUID %s reported again (first by device %d)", c.UUID, prev)
			c.UUID = ""
		} else if c.UUID != "" {
			seen[c.UUID] = c.Index
		}
		for k := range c.Instances {
			in := &c.Instances[k]
			if prev, dup := seen[in.UUID]; dup && in.UUID != "" {
				// A device ID names one device of the node, card or instance.
				in.Fault = fmt.Sprintf("UUID %s reported again (first by device %d)", in.UUID, prev)
				in.UUID = ""
			} else if in.UUID != "" {
				seen[in.UUID] = c.Index
			}
		}
		cards = append(cards, c)
	}
	return cards, nil
}

func describe(d nvml.Device, i int, numa NUMAFunc) (Card, error) {
	c := Card{Index: i, NUMA: -1}
	u, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return c, fmt.Errorf("get UUID of device %d: %w", i, ret)
	}
	if u == "" {
		return c, fmt.Errorf("device %d reports an empty UUID", i)
	}
	c.UUID = u
	if idx, ret := d.GetIndex(); ret == nvml.SUCCESS {
		c.Index = idx
	}
	if c.Model, ret = d.GetName(); ret != nvml.SUCCESS {
		return c, fmt.Errorf("get name of %s: %w", c.UUID, ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return c, fmt.Errorf("get memory of %s: %w", c.UUID, ret)
	}
	c.MemoryMiB = int64(mem.Total >> 20)
	pci, ret := d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return c, fmt.Errorf("get PCI info of %s: %w", c.UUID, ret)
	}
	c.PCIBusID = NormalizeBusID(busID(pci))
	if numa != nil && c.PCIBusID != "" {
		n, err := numa(c.PCIBusID)
		if err != nil {
			return c, fmt.Errorf("NUMA node of %s: %w", c.UUID, err)
		}
		c.NUMA = n
	}
	mig, err := ReadMIGMode(d)
	if err != nil {
		return c, fmt.Errorf("get MIG mode of %s: %w", c.UUID, err)
	}
	c.MIG = mig
	if mig.Current {
		inst, err := instances(d, c)
		c.Instances = inst
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

func busID(p nvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
