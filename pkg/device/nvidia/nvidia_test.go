package nvidia_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
)

// fakeSysfs writes numa_node files under a temporary sysfs root.
func fakeSysfs(t *testing.T, numa map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for bus, v := range numa {
		dir := filepath.Join(root, "bus", "pci", "devices", bus)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestDiscoverDGXA100(t *testing.T) {
	srv := dgxa100.New()
	// The DGX A100 mock keeps each card's bus id in the Device but does not put it in GetPciInfo;
	// hand it over in NVML's own form (8-digit domain, upper case) so discovery must normalise it.
	for _, d := range srv.Devices {
		d := d.(*server.Device)
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for i, c := range []byte(strings.ToUpper("0000" + d.PciBusID)) {
				p.BusId[i] = int8(c)
			}
			return p, nvml.SUCCESS
		}
	}
	// Cards 0-3 on NUMA 0, 4-6 on NUMA 1, card 7's node unknown (-1 in sysfs).
	numa := map[string]string{}
	for i := 0; i < 8; i++ {
		v := "0\n"
		switch {
		case i == 7:
			v = "-1\n"
		case i >= 4:
			v = "1\n"
		}
		numa[srv.Devices[i].(*server.Device).PciBusID] = v
	}
	cards, err := nvidia.Discover(srv, nvidia.SysfsNUMA(fakeSysfs(t, numa)))
	if err != nil {
		t.Fatal(err)
	}
	var want []nvidia.Card
	for i, d := range srv.Devices {
		d := d.(*server.Device)
		n := 0
		switch {
		case i == 7:
			n = -1
		case i >= 4:
			n = 1
		}
		// 42949672960 B / 2^20 = 40960 MiB.
		want = append(want, nvidia.Card{UUID: d.UUID, Index: i, Model: "Mock NVIDIA A100-SXM4-40GB", MemoryMiB: 40960, PCIBusID: d.PciBusID, NUMA: n})
	}
	if diff := cmp.Diff(want, cards); diff != "" {
		t.Errorf("cards (-want +got):\n%s", diff)
	}
}

func TestDiscoverDGXA100WithoutBusIDHasUnknownNUMA(t *testing.T) {
	// As shipped, the mock reports no bus id: NUMA is unknown, not an error.
	cards, err := nvidia.Discover(dgxa100.New(), nvidia.SysfsNUMA(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if len(cards) != 8 {
		t.Fatalf("got %d cards, want 8", len(cards))
	}
	for _, c := range cards {
		if c.NUMA != -1 || c.PCIBusID != "" {
			t.Errorf("card %d: NUMA %d bus %q, want -1 and empty", c.Index, c.NUMA, c.PCIBusID)
		}
	}
}

func TestDiscoverFailsWhenNVMLDoesNotInitialise(t *testing.T) {
	srv := dgxa100.New()
	srv.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	_, err := nvidia.Discover(srv, nil)
	if err == nil || !strings.Contains(err.Error(), "initialise NVML") {
		t.Fatalf("err = %v, want an NVML initialisation error", err)
	}
}

func TestNormalizeBusID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"00000000:3B:00.0", "0000:3b:00.0"},
		{"0000:3b:00.0", "0000:3b:00.0"},
		{"0001:af:00.0\x00\x00", "0001:af:00.0"},
		{"3b:00.0", ""},             // no domain
		{"00010000:3B:00.0", ""},    // domain above 16 bits
		{"0000:3b:00.0/../x:y", ""}, // not hex
		{"", ""},
	} {
		if got := nvidia.NormalizeBusID(tc.in); got != tc.want {
			t.Errorf("NormalizeBusID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestSysfsNUMA(t *testing.T) {
	root := fakeSysfs(t, map[string]string{"0000:01:00.0": "1\n", "0000:02:00.0": "-1", "0000:03:00.0": "x"})
	numa := nvidia.SysfsNUMA(root)
	for _, tc := range []struct {
		bus     string
		want    int
		wantErr bool
	}{
		{"0000:01:00.0", 1, false},
		{"0000:02:00.0", -1, false}, // negative: unknown
		{"0000:04:00.0", -1, false}, // no file: unknown
		{"0000:03:00.0", -1, true},  // garbage
		{"../../etc", -1, true},     // not a device name
	} {
		got, err := numa(tc.bus)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("numa(%q) = %d, %v; want %d, error %v", tc.bus, got, err, tc.want, tc.wantErr)
		}
	}
}

func FuzzParseNUMANode(f *testing.F) {
	for _, s := range []string{"0\n", "-1", "3", " 12 ", "", "x", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := nvidia.ParseNUMANode(s)
		if err != nil && n != -1 {
			t.Fatalf("error with NUMA %d", n)
		}
		if n < -1 {
			t.Fatalf("NUMA %d below -1", n)
		}
	})
}

func FuzzNormalizeBusID(f *testing.F) {
	for _, s := range []string{"00000000:3B:00.0", "0000:3b:00.0", "", ":::", "0000:../..:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := nvidia.NormalizeBusID(s)
		if out == "" {
			return
		}
		if strings.ContainsAny(out, "/\\") || nvidia.NormalizeBusID(out) != out {
			t.Fatalf("NormalizeBusID(%q) = %q is not a stable device name", s, out)
		}
	})
}

func TestDiscoverKeepsGoingPastBadCards(t *testing.T) {
	// DGX A100 mock, 8 cards: card 2 cannot report its memory (NOT_SUPPORTED), card 5 is off the bus
	// (every call GPU_IS_LOST). The six others are described; the two bad ones are listed with Fault.
	srv := dgxa100.New()
	srv.Devices[2].(*server.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_NOT_SUPPORTED }
	srv.Devices[5].(*server.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	cards, err := nvidia.Discover(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cards) != 8 {
		t.Fatalf("got %d cards, want 8", len(cards))
	}
	for i, c := range cards {
		d := srv.Devices[i].(*server.Device)
		switch i {
		case 2:
			if c.UUID != d.UUID || c.MemoryMiB != 0 || !strings.Contains(c.Fault, "get memory of "+d.UUID+": ERROR_NOT_SUPPORTED") {
				t.Errorf("card 2 = %+v, want its UUID, no memory and the memory fault", c)
			}
		case 5:
			if c.UUID != "" || c.Index != 5 || !strings.Contains(c.Fault, "ERROR_GPU_IS_LOST") {
				t.Errorf("card 5 = %+v, want no UUID and the lost fault", c)
			}
		default:
			if c.UUID != d.UUID || c.MemoryMiB != 40960 || c.Fault != "" {
				t.Errorf("card %d = %+v, want a sound card", i, c)
			}
		}
	}
}

// A card in MIG mode, now or after its next reset, must not be served whole: discovery asks NVML's
// GetMigMode. DGX A100 mock, 8 cards: card 1 in MIG mode, card 3 with MIG mode pending (enabled at
// the next reset), card 4 a card without MIG (ERROR_NOT_SUPPORTED: not in MIG mode, and sound), card
// 6 whose mode NVML cannot tell (it could be in MIG mode: a fault).
func TestDiscoverReadsMIGMode(t *testing.T) {
	srv := dgxa100.New()
	srv.Devices[1].(*server.Device).MigMode = nvml.DEVICE_MIG_ENABLE
	// In MIG mode, no instance created yet: NVML finds no MIG device at any index.
	srv.Devices[1].(*server.Device).GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	srv.Devices[1].(*server.Device).GetMigDeviceHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
	srv.Devices[3].(*server.Device).GetMigModeFunc = func() (int, int, nvml.Return) {
		return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
	}
	srv.Devices[4].(*server.Device).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	srv.Devices[6].(*server.Device).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_UNKNOWN }
	cards, err := nvidia.Discover(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		MIG     nvidia.MIGMode
		Enabled bool
		Fault   string
	}
	want := []got{
		{}, {nvidia.MIGMode{Current: true, Pending: true}, true, ""}, {},
		{nvidia.MIGMode{Pending: true}, true, ""}, {}, {},
		{Fault: "get MIG mode of " + srv.Devices[6].(*server.Device).UUID + ": ERROR_UNKNOWN"}, {},
	}
	var have []got
	for _, c := range cards {
		have = append(have, got{c.MIG, c.MIG.Enabled(), c.Fault})
	}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("MIG modes (-want +got):\n%s", diff)
	}
	if r := cards[3].MIG.Reason(); !strings.Contains(r, "MIG mode is enabled (current disabled, pending enabled)") {
		t.Errorf("reason of a pending MIG mode: %q", r)
	}
	if r := cards[0].MIG.Reason(); r != "" {
		t.Errorf("reason of a card not in MIG mode: %q, want none", r)
	}
}
