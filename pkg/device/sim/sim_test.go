package sim_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

func readExample(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("../../../examples/simulated-gpus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExampleFileDescribesTheDemoNodes(t *testing.T) {
	f, err := sim.Parse(readExample(t))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"node-a", "node-b", "node-c", "node-d"}, f.NodeNames()); diff != "" {
		t.Fatalf("nodes (-want +got):\n%s", diff)
	}
	type summary struct {
		Model              string
		MemoryMiB          int64
		NUMA0, NUMA1       int
		Healthy, Unhealthy int
	}
	want := map[string]summary{
		"node-a": {"NVIDIA A100-SXM4-80GB", 81920, 4, 4, 8, 0}, // cards 0-3 on NUMA 0, 4-7 on NUMA 1
		"node-b": {"NVIDIA H100 80GB HBM3", 81559, 8, 0, 8, 0},
		"node-c": {"Tesla T4", 15360, 4, 0, 3, 1}, // 3 + 1 unhealthy
		"node-d": {"NVIDIA A100-SXM4-80GB", 81920, 1, 0, 1, 0},
	}
	for node, w := range want {
		cards, err := f.Cards(node)
		if err != nil {
			t.Fatal(err)
		}
		var got summary
		for i, c := range cards {
			if c.Index != i {
				t.Errorf("%s: card %d has index %d", node, i, c.Index)
			}
			got.Model, got.MemoryMiB = c.Model, c.MemoryMiB
			switch c.NUMA {
			case 0:
				got.NUMA0++
			case 1:
				got.NUMA1++
			}
			if c.Healthy {
				got.Healthy++
			} else {
				got.Unhealthy++
			}
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", node, diff)
		}
	}
	a, _ := f.Cards("node-a")
	for i := 0; i < 4; i++ {
		if a[i].NUMA != 0 || a[i+4].NUMA != 1 {
			t.Errorf("node-a card %d / %d: NUMA %d / %d, want 0 / 1", i, i+4, a[i].NUMA, a[i+4].NUMA)
		}
	}
}

func TestDerivedUUIDsAreStableAndDistinct(t *testing.T) {
	if first, again := sim.DerivedUUID("node-a", 0), sim.DerivedUUID("node-a", 0); first != again {
		t.Fatal("derived UUID is not deterministic")
	}
	seen := map[string]bool{}
	for _, n := range []string{"node-a", "node-b"} {
		for i := 0; i < 8; i++ {
			u := sim.DerivedUUID(n, i)
			if seen[u] || !strings.HasPrefix(u, "GPU-") || len(u) != len("GPU-")+36 {
				t.Errorf("DerivedUUID(%s, %d) = %q: duplicate or malformed", n, i, u)
			}
			seen[u] = true
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", ``, "no nodes"},
		{"unknown field", `nodes: {node1: [{model: T4, memoryMiB: 1, memory: 3}]}`, "unknown field"},
		{"no model", `nodes: {node1: [{memoryMiB: 1}]}`, "model is empty"},
		{"zero memory", `nodes: {node1: [{model: T4}]}`, "memoryMiB 0"},
		{"negative count", `nodes: {node1: [{model: T4, memoryMiB: 1, count: -2}]}`, "count -2"},
		{"too many", `nodes: {node1: [{model: T4, memoryMiB: 1, count: 1025}]}`, "more than 1024"},
		{"numa range", `nodes: {node1: [{model: T4, memoryMiB: 1, numa: -2}]}`, "numa -2"},
		{"uuid with count", `nodes: {node1: [{model: T4, memoryMiB: 1, count: 2, uuid: GPU-x}]}`, "count must be 1"},
		{"slot uuid", `nodes: {node1: [{model: T4, memoryMiB: 1, uuid: "GPU-x::1"}]}`, "not a card UUID"},
		{"duplicate uuid", `nodes: {node1: [{model: T4, memoryMiB: 1, uuid: GPU-x}, {model: T4, memoryMiB: 1, uuid: GPU-x}]}`, "like card 0"},
		{"no cards", `nodes: {node1: []}`, "has no cards"},
		{"not yaml", `nodes: [`, "simulation file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sim.Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestDiscoveryOnSimulatedFile(t *testing.T) {
	f, err := sim.Parse(readExample(t))
	if err != nil {
		t.Fatal(err)
	}
	cards, _ := f.Cards("node-a")
	srv := sim.New(cards)
	got, err := nvidia.Discover(srv, srv.NUMA)
	if err != nil {
		t.Fatal(err)
	}
	var want []nvidia.Card
	for i, c := range cards {
		// Card i sits at bus 0x10 + i/32, device i%32: 0000:10:0i.0.
		want = append(want, nvidia.Card{UUID: c.UUID, Index: i, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920,
			PCIBusID: nvidia.NormalizeBusID(sim.BusID(i)), NUMA: i / 4})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestWatchAppliesHealthChanges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpus.yaml")
	write := func(healthy string) {
		t.Helper()
		replaceFile(t, path, "nodes:\n  node1:\n    - {model: T4, memoryMiB: 15360, uuid: GPU-x, healthy: "+healthy+"}\n")
	}
	write("true")
	srv := watched(t, path)
	waitHealth := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for srv.Healthy("GPU-x") != want {
			if time.Now().After(deadline) {
				t.Fatalf("card health never became %v", want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	write("false")
	waitHealth(false)
	write("true")
	waitHealth(true)
}

func FuzzParse(f *testing.F) {
	f.Add(readExample(f))
	for _, s := range []string{
		``, `nodes: {}`, `nodes: {node1: [{model: T4, memoryMiB: 1}]}`,
		`nodes: {node1: [{model: T4, memoryMiB: 1, count: 3, numa: 1, healthy: false}]}`,
		`nodes: {node1: [{model: T4, memoryMiB: 1, uuid: "GPU-1"}], node2: [{model: A, memoryMiB: 2, count: 2}]}`,
		`{"nodes": {"n": [{"model": "x", "memoryMiB": 9e99}]}}`,
		`nodes: {node1: [{model: A100, memoryMiB: 1, mig: {current: disabled, pending: enabled}}]}`,
		`nodes: {node1: [{model: A100, memoryMiB: 81920, count: 2, mig: {current: enabled, instances: [{profile: 1g.10gb, count: 7}]}}]}`,
		`nodes: {node1: [{model: A100, memoryMiB: 81920, mig: {current: enabled, instances: [{profile: 3g.40gb}, {profile: 1c.2g.20gb+me}, {profile: 1g.10gb, uuid: MIG-1, healthy: false, sms: 3}]}}]}`,
		`nodes: {node1: [{model: H100, memoryMiB: 95830, mig: {current: enabled, instances: [{profile: 1g.12gb}, {profile: 7g.94gb}]}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := sim.Parse(b)
		if err != nil {
			return
		}
		for _, n := range file.NodeNames() {
			cards, err := file.Cards(n)
			if err != nil || len(cards) == 0 || len(cards) > sim.MaxCardsPerNode {
				t.Fatalf("node %q parsed but expands to %d cards, err %v", n, len(cards), err)
			}
			srv := sim.New(cards)
			got, err := nvidia.Discover(srv, srv.NUMA)
			if err != nil || len(got) != len(cards) {
				t.Fatalf("discovery of node %q: %d cards, err %v", n, len(got), err)
			}
			// Every MIG instance the file accepts comes back from discovery as the file says.
			for i, c := range cards {
				if c.Fault != "" {
					continue
				}
				if len(got[i].Instances) != len(c.Instances) {
					t.Fatalf("node %q card %d: %d instances discovered, %d in the file", n, i, len(got[i].Instances), len(c.Instances))
				}
				for k, in := range c.Instances {
					d := got[i].Instances[k]
					if d.Fault != "" || d.UUID != in.UUID || d.Profile != in.Profile || d.GI != in.GI || d.Start != in.Start || d.Size != in.Size || d.MemoryMiB != in.MemoryMiB || d.SMs != in.SMs {
						t.Fatalf("node %q card %d instance %d: discovered %+v, file %+v", n, i, k, d, in)
					}
				}
			}
		}
	})
}

func TestFaultField(t *testing.T) {
	f, err := sim.Parse([]byte(`nodes: {node1: [{model: T4, memoryMiB: 15360, count: 3}, {model: T4, memoryMiB: 15360, fault: lost}, {model: T4, memoryMiB: 15360, fault: memory-not-supported}, {model: T4, memoryMiB: 15360, fault: none}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cards, _ := f.Cards("node1")
	srv := sim.New(cards)
	got, err := nvidia.Discover(srv, srv.NUMA)
	if err != nil {
		t.Fatal(err)
	}
	var faults []string
	for _, c := range got {
		faults = append(faults, c.Fault)
	}
	want := []string{"", "", "", "get handle of device 3: ERROR_GPU_IS_LOST", "get memory of " + cards[4].UUID + ": ERROR_NOT_SUPPORTED", ""}
	if diff := cmp.Diff(want, faults); diff != "" {
		t.Errorf("faults (-want +got):\n%s", diff)
	}
	if _, err := sim.Parse([]byte(`nodes: {node1: [{model: T4, memoryMiB: 1, fault: melted}]}`)); err == nil || !strings.Contains(err.Error(), `fault "melted" is not one of none, lost, memory-not-supported, row-remap-pending`) {
		t.Errorf("bad fault: err = %v", err)
	}
}

func TestWatchAppliesFaults(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpus.yaml")
	write := func(fault string) {
		t.Helper()
		replaceFile(t, path, "nodes:\n  node1:\n    - {model: T4, memoryMiB: 15360, uuid: GPU-x, fault: "+fault+"}\n")
	}
	write("none")
	srv := watched(t, path)
	waitFault := func(want sim.Fault) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for srv.Fault("GPU-x") != want {
			if time.Now().After(deadline) {
				t.Fatalf("card fault never became %q", want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	write("lost")
	waitFault(sim.FaultLost)
	if _, ret := srv.DeviceGetHandleByIndex(0); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("handle of a lost card: %v, want ERROR_GPU_IS_LOST", ret)
	}
	write("none")
	waitFault("")
	if d, ret := srv.DeviceGetHandleByIndex(0); ret != nvml.SUCCESS {
		t.Errorf("handle after the fault cleared: %v", ret)
	} else if u, ret := d.GetUUID(); u != "GPU-x" || ret != nvml.SUCCESS {
		t.Errorf("UUID after the fault cleared: %q, %v", u, ret)
	}
}

// The plugin's path for a card falling off the bus, from the file to the health watcher: `fault:
// lost` on one of four cards makes that card, and only that one, unhealthy (its XID 79 arrives on a
// handle whose every call fails), and removing the fault brings it back.
func TestFileFaultLostTakesOnlyThatCardOffTheBus(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpus.yaml")
	write := func(fault string) {
		t.Helper()
		replaceFile(t, path, "nodes:\n  node1:\n    - {model: A100, memoryMiB: 81920, count: 3}\n    - {model: A100, memoryMiB: 81920, uuid: GPU-x"+fault+"}\n")
	}
	write("")
	cards, err := sim.Load(path, "node1")
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.New(cards)
	found, err := nvidia.Discover(srv, srv.NUMA)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan nvidia.HealthEvent, 16)
	started := make(chan struct{})
	done := make(chan error, 2)
	go func() { done <- srv.Watch(ctx, path, "node1", logr.Discard()) }()
	go func() {
		done <- nvidia.WatchHealth(ctx, nvidia.HealthConfig{Lib: srv, Cards: found, RecoveryInterval: 20 * time.Millisecond,
			WaitTimeout: 5 * time.Millisecond, Log: logr.Discard(), Started: func() { close(started) }},
			func(e nvidia.HealthEvent) { events <- e })
	}()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}()
	<-started
	next := func() nvidia.HealthEvent {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no health event")
			return nvidia.HealthEvent{}
		}
	}
	write(", fault: lost")
	// XID 79 or the periodic probe (every 5 ms here) may report it first; either way only GPU-x
	// goes unhealthy (checked at the end: an XID taken for an unidentified card would mark all).
	if e := next(); e.UUID != "GPU-x" || e.Healthy || (e.Xid != sim.XidFallenOffBus && e.Xid != 0) {
		t.Fatalf("event %+v, want GPU-x unhealthy (XID 79 or a failed probe)", e)
	}
	time.Sleep(100 * time.Millisecond) // five recovery intervals off the bus
	write(", fault: none")
	e := next()
	for e.UUID == "GPU-x" && !e.Healthy { // the XID's own event may follow the probe's
		e = next()
	}
	if e.UUID != "GPU-x" || !e.Healthy {
		t.Fatalf("event %+v, want GPU-x healthy again", e)
	}
	select {
	case e := <-events:
		t.Fatalf("unexpected event %+v (only GPU-x went off the bus)", e)
	case <-time.After(100 * time.Millisecond):
	}
}

// replaceFile replaces path with content as editors do (write beside it, rename over it).
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// watched serves node1 of the simulation file at path and watches the file until the test ends.
func watched(t *testing.T, path string) *sim.Server {
	t.Helper()
	cards, err := sim.Load(path, "node1")
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.New(cards)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Watch(ctx, path, "node1", logr.Discard()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return srv
}

func TestMIGField(t *testing.T) {
	f, err := sim.Parse([]byte(`nodes: {node1: [
  {model: T4, memoryMiB: 15360},
  {model: A100, memoryMiB: 81920, mig: {current: disabled}},
  {model: A100, memoryMiB: 81920, mig: {current: enabled}},
  {model: A100, memoryMiB: 81920, mig: {current: disabled, pending: enabled}},
  {model: A100, memoryMiB: 81920, mig: {current: enabled, pending: disabled}, count: 2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cards, _ := f.Cards("node1")
	srv := sim.New(cards)
	type mode struct {
		Cur, Pending int
		Ret          nvml.Return
	}
	var got []mode
	for i := range cards {
		d, _ := srv.DeviceGetHandleByIndex(i)
		c, p, ret := d.GetMigMode()
		got = append(got, mode{c, p, ret})
	}
	want := []mode{
		{0, 0, nvml.ERROR_NOT_SUPPORTED}, // no mig: a card without MIG
		{nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS},
		{nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS}, // pending omitted: as current
		{nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS},
		{nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS},
		{nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetMigMode (-want +got):\n%s", diff)
	}
	found, err := nvidia.Discover(srv, srv.NUMA)
	if err != nil {
		t.Fatal(err)
	}
	var enabled []bool
	for _, c := range found {
		enabled = append(enabled, c.MIG.Enabled())
	}
	if diff := cmp.Diff([]bool{false, false, true, true, true, true}, enabled); diff != "" {
		t.Errorf("discovered MIG mode enabled (-want +got):\n%s", diff)
	}
	for _, tc := range []struct{ in, want string }{
		{`{current: active}`, `nodes.node1[0]: mig.current "active" is not enabled or disabled`},
		{`{current: enabled, pending: soon}`, `nodes.node1[0]: mig.pending "soon" is not enabled or disabled`},
		{`{}`, `mig.current "" is not enabled or disabled`},
		{`{current: enabled, pendng: enabled}`, `unknown field`},
	} {
		_, err := sim.Parse([]byte(`nodes: {node1: [{model: A100, memoryMiB: 1, mig: ` + tc.in + `}]}`))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mig %s: err = %v, want one containing %q", tc.in, err, tc.want)
		}
	}
}

func TestWatchAppliesMIGMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpus.yaml")
	write := func(mig string) {
		t.Helper()
		replaceFile(t, path, "nodes:\n  node1:\n    - {model: A100, memoryMiB: 81920, uuid: GPU-x"+mig+"}\n")
	}
	write("")
	srv := watched(t, path)
	waitMode := func(cur, pending int, want nvml.Return) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			d, _ := srv.DeviceGetHandleByIndex(0)
			c, p, ret := d.GetMigMode()
			if c == cur && p == pending && ret == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("MIG mode is %d/%d (%v), want %d/%d (%v)", c, p, ret, cur, pending, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitMode(0, 0, nvml.ERROR_NOT_SUPPORTED)
	write(", mig: {current: disabled, pending: enabled}")
	waitMode(nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS)
	write(", mig: {current: disabled}")
	waitMode(nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS)
}
