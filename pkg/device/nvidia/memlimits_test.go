package nvidia_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
)

// symbols answers LookupSymbol from a set of present functions.
type symbols map[string]bool

func (s symbols) LookupSymbol(name string) error {
	if s[name] {
		return nil
	}
	return errors.New("symbol not found")
}

// limitLib is an NVML with two cards whose per-cgroup limits answer getRet, recording every
// SetMemoryLimits_v1 call as "<card index> <cgroup> <soft> <hard>".
func limitLib(getRet nvml.Return, calls *[]string) *mock.Interface {
	dev := func(i int) *mock.Device {
		return &mock.Device{
			GetMemoryLimits_v1Func: func(string) (nvml.MemoryLimits_v1, nvml.Return) { return nvml.MemoryLimits_v1{}, getRet },
			SetMemoryLimits_v1Func: func(cg string, soft, hard uint64) nvml.Return {
				*calls = append(*calls, strings.Join([]string{strconv.Itoa(i), cg, strconv.FormatUint(soft, 10), strconv.FormatUint(hard, 10)}, " "))
				return nvml.SUCCESS
			},
		}
	}
	devs := []nvml.Device{dev(0), dev(1)}
	return &mock.Interface{
		InitFunc:     func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc: func() nvml.Return { return nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		}}
}

func cgroupRoot(t *testing.T, v2 bool, capacity string) string {
	root := t.TempDir()
	if v2 {
		if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory dmem\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if capacity != "" {
		if err := os.WriteFile(filepath.Join(root, "dmem.capacity"), []byte(capacity), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestDetectMemoryLimits(t *testing.T) {
	cards := []nvidia.Card{
		{UUID: "GPU-a", Index: 0, PCIBusID: "0000:3b:00.0", MemoryMiB: 46068},
		{UUID: "GPU-b", Index: 1, PCIBusID: "0000:86:00.0", MemoryMiB: 46068},
	}
	both := "nvidia/0000:3b:00.0/vidmem 48305799168\nnvidia/0000:86:00.0/vidmem 48305799168\n"
	has := symbols{"nvmlDeviceSetMemoryLimits_v1": true}
	for _, c := range []struct {
		name     string
		symbols  nvidia.SymbolLookup
		v2       bool
		capacity string
		getRet   nvml.Return
		cards    []nvidia.Card
		want     string
		why      string
	}{
		{name: "dmem lists every card: the kernel enforces", symbols: has, v2: true, capacity: both, getRet: nvml.ERROR_NOT_FOUND, want: nvidia.MemoryLimitsDmem},
		{name: "dmem lists one card of two: the driver's backend", symbols: has, v2: true, capacity: "nvidia/0000:3b:00.0/vidmem 1\n", getRet: nvml.SUCCESS, want: nvidia.MemoryLimitsDriver},
		{name: "no dmem controller (kernel before 6.14): the driver's backend", symbols: has, v2: true, getRet: nvml.ERROR_NOT_FOUND, want: nvidia.MemoryLimitsDriver},
		{name: "a driver before r615 has no such function", symbols: symbols{}, v2: true, capacity: both, why: "driver r615"},
		{name: "a simulated NVML cannot be asked", v2: true, capacity: both, why: "simulated"},
		{name: "cgroup v1", symbols: has, v2: false, capacity: both, why: "no cgroup v2"},
		{name: "the card says not supported", symbols: has, v2: true, capacity: both, getRet: nvml.ERROR_NOT_SUPPORTED, why: "does not support"},
		{name: "cards in MIG mode are not limited (no whole card)", symbols: has, v2: true, capacity: both, getRet: nvml.SUCCESS,
			cards: []nvidia.Card{{UUID: "GPU-a", MIG: nvidia.MIGMode{Current: true}}}, why: "no whole card"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls []string
			cs := cards
			if c.cards != nil {
				cs = c.cards
			}
			got, why := nvidia.DetectMemoryLimits(limitLib(c.getRet, &calls), c.symbols, cs, cgroupRoot(t, c.v2, c.capacity))
			if got != c.want || (c.why != "" && !strings.Contains(why, c.why)) || (c.why == "" && why != "") {
				t.Errorf("DetectMemoryLimits = %q, %q; want %q, a reason with %q", got, why, c.want, c.why)
			}
			if len(calls) > 0 {
				t.Errorf("detection set limits: %v", calls)
			}
		})
	}
}

func TestMemoryLimitsSetsSoftAndHardOnTheCard(t *testing.T) {
	var calls []string
	m := nvidia.NewMemoryLimits(limitLib(nvml.SUCCESS, &calls), []nvidia.Card{{UUID: "GPU-a", Index: 0}, {UUID: "GPU-b", Index: 1}})
	// 20000 MiB = 20000 × 1048576 = 20971520000 bytes, on card index 1.
	if err := m.Set("/sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice", "GPU-b", 20971520000); err != nil {
		t.Fatal(err)
	}
	want := "1 /sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice 20971520000 20971520000"
	if len(calls) != 1 || calls[0] != want {
		t.Errorf("calls %v, want [%s]", calls, want)
	}
	if err := m.Set("/x", "GPU-zz", 1); !errors.Is(err, nvidia.ErrUnknownCard) {
		t.Errorf("unknown card: %v, want ErrUnknownCard", err)
	}
}
