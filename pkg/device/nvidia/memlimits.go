package nvidia

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Per-cgroup GPU memory limits: from driver r615 NVML can cap what the processes of one cgroup (v2)
// allocate on a card (nvmlDeviceSetMemoryLimits_v1; `nvidia-smi memory-limits` uses it). On a
// kernel with the cgroup v2 dmem controller (6.14 and later) the kernel enforces the limit, and the
// root cgroup's dmem.capacity lists each card as nvidia/<pci bus id>/vidmem; on older kernels the
// driver enforces it with a backend of its own. Either way the limit sits outside the container's
// processes: nothing they do to their environment or libraries raises it. MIG devices are not
// supported (NVIDIA, "MPS v3 Memory Partitioning").
const (
	// MemoryLimitsDmem: the kernel's dmem controller enforces the limits.
	MemoryLimitsDmem = "dmem"
	// MemoryLimitsDriver: the driver's own backend enforces them.
	MemoryLimitsDriver = "driver"
)

// setMemoryLimitsSymbol is the NVML function the limits need; older libraries lack it, and calling a
// missing function through go-nvml is a crash, so its presence is checked first.
const setMemoryLimitsSymbol = "nvmlDeviceSetMemoryLimits_v1"

// SymbolLookup says whether the loaded NVML library has a function (nvml.Interface's Extensions()).
type SymbolLookup interface {
	LookupSymbol(string) error
}

// DetectMemoryLimits finds whether per-cgroup memory limits can hold the node's whole cards (those
// not in MIG mode and sound): it returns MemoryLimitsDmem or MemoryLimitsDriver, or "" and why not.
// symbols is nil where the library cannot be asked (a simulated NVML): no limits then. cgroupRoot is
// the host's cgroup v2 hierarchy as this process sees it.
func DetectMemoryLimits(lib Library, symbols SymbolLookup, cards []Card, cgroupRoot string) (string, string) {
	if symbols == nil {
		return "", "the NVML library cannot say whether it has per-cgroup memory limits (simulated NVML)"
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return "", fmt.Sprintf("init NVML: %v", ret)
	}
	defer func() { _ = lib.Shutdown() }()
	if err := symbols.LookupSymbol(setMemoryLimitsSymbol); err != nil {
		return "", fmt.Sprintf("the NVIDIA driver has no per-cgroup memory limits (%s: %v; driver r615 or later)", setMemoryLimitsSymbol, err)
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err != nil {
		return "", fmt.Sprintf("no cgroup v2 hierarchy at %s (%v)", cgroupRoot, err)
	}
	capacity, _ := os.ReadFile(filepath.Join(cgroupRoot, "dmem.capacity"))
	regions := dmemRegions(capacity)
	backend, whole := MemoryLimitsDmem, 0
	for _, c := range cards {
		if c.Fault != "" || c.MIG.Enabled() {
			continue
		}
		whole++
		d, ret := lib.DeviceGetHandleByIndex(c.Index)
		if ret != nvml.SUCCESS {
			return "", fmt.Sprintf("card %s: get handle: %v", c.UUID, ret)
		}
		// The root cgroup carries no limit: NOT_FOUND (or SUCCESS) says the card has the feature.
		if _, ret := d.GetMemoryLimits_v1(cgroupRoot); ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND {
			return "", fmt.Sprintf("card %s does not support per-cgroup memory limits (%v)", c.UUID, ret)
		}
		if c.PCIBusID == "" || !regions["nvidia/"+c.PCIBusID+"/vidmem"] {
			backend = MemoryLimitsDriver
		}
	}
	if whole == 0 {
		return "", "no whole card to limit"
	}
	return backend, ""
}

// dmemRegions are the region names of a dmem.capacity file ("<region> <bytes>" lines).
func dmemRegions(b []byte) map[string]bool {
	out := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			out[f[0]] = true
		}
	}
	return out
}

// MemoryLimits sets per-cgroup memory limits on cards through NVML.
type MemoryLimits struct {
	lib   Library
	index map[string]int
}

// NewMemoryLimits sets limits on cards (by UUID) through lib.
func NewMemoryLimits(lib Library, cards []Card) *MemoryLimits {
	m := &MemoryLimits{lib: lib, index: map[string]int{}}
	for _, c := range cards {
		m.index[c.UUID] = c.Index
	}
	return m
}

// ErrUnknownCard: a limit was asked for a card NVML did not list.
var ErrUnknownCard = errors.New("unknown card")

// Set caps what the processes of cgroup (a cgroup v2 folder, as this process sees it) allocate on
// card uuid to bytes, as both the soft limit (what they are guaranteed) and the hard one (what an
// allocation may not pass).
func (m *MemoryLimits) Set(cgroup, uuid string, bytes uint64) error {
	i, ok := m.index[uuid]
	if !ok {
		return fmt.Errorf("memory limit on %s: %w", uuid, ErrUnknownCard)
	}
	if ret := m.lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("memory limit on %s: init NVML: %w", uuid, ret)
	}
	defer func() { _ = m.lib.Shutdown() }()
	d, ret := m.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("memory limit on %s: get handle: %w", uuid, ret)
	}
	if ret := d.SetMemoryLimits_v1(cgroup, bytes, bytes); ret != nvml.SUCCESS {
		return fmt.Errorf("memory limit on %s for cgroup %s: %w", uuid, cgroup, ret)
	}
	return nil
}
