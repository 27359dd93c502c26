package annotations

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Every decoder of outside input has a fuzz target. Their seeds (below and in testdata/fuzz) run
// in plain `go test`; `make fuzz` runs them for real. Each checks properties, not examples:
// no panic, a decoded value survives encode+decode unchanged, and an error names its key.

// checkKey fails unless every line of err starts with one of prefixes.
func checkKey(t *testing.T, err error, prefixes ...string) {
	t.Helper()
	for _, line := range strings.Split(err.Error(), "\n") {
		ok := false
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				ok = true
				break
			}
		}
		if !ok {
			t.Fatalf("error line %q starts with none of %q", line, prefixes)
		}
	}
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, IsControl)
}

func seedRecords(f *testing.F, samples ...string) {
	for _, s := range samples {
		f.Add(s)
	}
	for _, s := range []string{"", "null", "{}", `{"v":1}`, `{"v":2}`, `{"v":0}`, `{"v":"1"}`, `[]`, `{"v":1,"x":{"y":[1,2]}}`} {
		f.Add(s)
	}
}

func FuzzDecodeInventory(f *testing.F) {
	s, _ := EncodeInventory(sampleInventory())
	s16, _ := EncodeInventory(inventory16())
	seedRecords(f, s, s16,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1},{"uuid":"GPU-a","shares":1}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a::1","shares":2}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","memoryMiB":-1,"shares":1}]}`,
		`{"v":1,"gpus":[{"UUID":"GPU-a","Shares":3,"numa":-1}]}`,
		`{"v":1,"gpus":[]}`, `{"v":1,"gpus":null}`,
		`{"v":1,"gpus":[],"kubelet":{"topologyManagerPolicy":"restricted","topologyManagerScope":"pod","cpuManagerPolicy":"none","numa":[{"id":0,"cpus":4,"distances":[10]}]}}`,
		`{"v":1,"gpus":[],"kubelet":{"topologyManagerPolicy":"none","topologyManagerScope":"container","cpuManagerPolicy":"static","numa":[{"id":0},{"id":0}]}}`,
		`{"v":1,"gpus":[],"kubelet":{"topologyManagerPolicy":"best-effort","topologyManagerScope":"container","cpuManagerPolicy":"static","maxAllowableNUMANodes":7,"numa":null}}`,
		`{"v":1,"gpus":[],"kubelet":{"topologyManagerPolicy":"restricted","topologyManagerScope":"pod","cpuManagerPolicy":"none","maxAllowableNUMANodes":9,"numa":[{"id":0},{"id":1},{"id":2},{"id":3},{"id":4},{"id":5},{"id":6},{"id":7},{"id":8}]}}`,
		`{"v":1,"gpus":[],"kubelet":null}`, `{"v":1,"gpus":[],"kubelet":[]}`)
	if s, err := EncodeInventory(sampleKubeletInventory()); err == nil {
		f.Add(s)
	}
	if s, err := EncodeInventory(sampleMIGInventory()); err == nil {
		f.Add(s)
	}
	if s, err := EncodeInventory(sampleLinksInventory()); err == nil {
		f.Add(s)
	}
	if s, err := EncodeInventory(Inventory{GPUs: []GPU{{UUID: uuid1, Shares: 1, MIG: sampleDynamicMIG()}}}); err == nil {
		f.Add(s)
	}
	f.Add(`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1,"mig":{"mode":"enabled","dynamicV":1,"dynamic":[{"profile":"3g.40gb","size":4,"starts":[0,4]}]}}]}`)
	f.Add(`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1,"mig":{"mode":"enabled","dynamicV":2,"dynamic":[{"profile":"3g.40gb","size":4,"starts":[4,0]}]}}]}`)
	for _, s := range []string{
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1},{"uuid":"GPU-b","shares":1}],"links":[{"a":0,"b":1,"nvlinks":18,"nvswitch":true,"pcie":"system"}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1},{"uuid":"GPU-b","shares":1}],"links":[{"a":1,"b":0}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1},{"uuid":"GPU-b","shares":1}],"links":[{"a":0,"b":1},{"a":0,"b":1}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1},{"uuid":"GPU-b","shares":1}],"links":[{"a":0,"b":1,"nvswitch":true}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1},{"uuid":"GPU-b","shares":1}],"links":[{"a":0,"b":1,"nvlinks":65,"pcie":"PCIe"}]}`,
		`{"v":1,"gpus":[],"links":[{"a":0,"b":1}]}`, `{"v":1,"gpus":[],"links":null}`, `{"v":1,"gpus":[],"links":{}}`,
	} {
		f.Add(s)
	}
	for _, s := range []string{
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1,"mig":{"mode":"enabled","instances":[{"uuid":"MIG-a","profile":"1g.10gb","gi":7,"ci":0,"start":0,"size":1,"memoryMiB":9728,"sms":14,"healthy":true}]}}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1,"healthy":true,"mig":{"mode":"enabled"}}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1,"mig":{"mode":"enabling","instances":[{"uuid":"MIG-a","profile":"1g.10gb","size":1}]}}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1,"mig":{"mode":"disabled"}}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1,"mig":{}}]}`, `{"v":1,"gpus":[{"uuid":"GPU-a","shares":1,"mig":null}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1,"mig":{"mode":"enabled","instances":[{"uuid":"GPU-a","profile":"1g.10gb","size":1}]}}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1,"mig":{"mode":"enabled","instances":[{"uuid":"MIG-a","profile":"1g.10gb+me","start":9223372036854775807,"size":1}]}}]}`,
		`{"v":1,"gpus":[{"uuid":"GPU-a","shares":1,"mig":{"mode":"enabled","instances":[{"uuid":"MIG-a","profile":"1c.3g.40gb","start":0,"size":4,"gi":-1}]}}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := DecodeInventory(in)
		if err != nil {
			checkKey(t, err, GPUInventory+": ")
			return
		}
		if got.V != Version {
			t.Fatalf("decoded version %d", got.V)
		}
		enc, err := EncodeInventory(got)
		if err != nil {
			t.Fatalf("decoded %+v but cannot encode it: %v", got, err)
		}
		again, err := DecodeInventory(enc)
		if err != nil {
			t.Fatalf("cannot decode own encoding %s: %v", enc, err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("round trip changed the value (-first +second):\n%s", diff)
		}
		devices := map[string]bool{}
		for i := range got.GPUs {
			g := &got.GPUs[i]
			for _, id := range g.DeviceIDs() {
				if u, _, err := ParseDeviceID(id); err != nil || u != g.UUID {
					t.Fatalf("device ID %q of card %q: %q, %v", id, g.UUID, u, err)
				}
			}
			devices[g.UUID] = true
		}
		// A MIG instance is a device of its own: its UUID is a device ID, distinct from every other,
		// and it is served only from a card that is not served whole.
		for i := range got.GPUs {
			g := &got.GPUs[i]
			if g.MIG == nil {
				continue
			}
			if g.Healthy || (g.MIG.Mode != MIGEnabled && len(g.MIG.Instances) > 0) {
				t.Fatalf("card %q: healthy %v, mig mode %q with %d instances", g.UUID, g.Healthy, g.MIG.Mode, len(g.MIG.Instances))
			}
			for j := range g.MIG.Instances {
				in := &g.MIG.Instances[j]
				if u, slot, err := ParseDeviceID(in.UUID); err != nil || u != in.UUID || slot != -1 {
					t.Fatalf("instance UUID %q is no device ID: %q, %d, %v", in.UUID, u, slot, err)
				}
				if devices[in.UUID] || g.Instance(in.UUID) != in || !ValidMIGProfile(in.Profile) {
					t.Fatalf("instance %+v of card %q: listed twice, not found, or a bad profile", in, g.UUID)
				}
				if in.Start < 0 || in.Size < 1 || in.Start+in.Size > maxMIGSlices {
					t.Fatalf("instance %+v: placement outside 0..%d", in, maxMIGSlices)
				}
				devices[in.UUID] = true
			}
		}
	})
}

func FuzzDecodeAssignment(f *testing.F) {
	s, _ := EncodeAssignment(sampleAssignment())
	seedRecords(f, s,
		`{"v":1,"node":"n","containers":[{"name":"a","devices":[{"uuid":"GPU-a","id":"GPU-a"}]},{"name":"b","devices":[{"uuid":"GPU-a","id":"GPU-a"}]}]}`,
		`{"v":1,"node":"n","containers":[{"name":"a","init":true,"devices":[{"uuid":"GPU-a","id":"GPU-a::0","cores":100}]}]}`,
		`{"v":1,"node":"n","containers":[{"name":"a","devices":[{"uuid":"GPU-a","id":"GPU-b::0"}]}]}`,
		`{"v":1,"node":"","containers":[]}`,
		`{"v":1,"node":"n","containers":[{"name":"a","devices":[{"uuid":"MIG-a","id":"MIG-a","memoryMiB":9728,"cores":100,"parent":"GPU-a","profile":"1g.10gb"},{"uuid":"MIG-b","id":"MIG-b","cores":100,"parent":"GPU-a","profile":"1g.10gb"}]}]}`,
		`{"v":1,"node":"n","containers":[{"name":"a","devices":[{"uuid":"MIG-a","id":"MIG-a::0","parent":"GPU-a","profile":"1g.10gb+me"}]}]}`,
		`{"v":1,"node":"n","containers":[{"name":"a","devices":[{"uuid":"MIG-a","id":"MIG-a","parent":"MIG-a","profile":"3g.40gb"}]}]}`,
		`{"v":1,"node":"n","containers":[{"name":"a","devices":[{"uuid":"MIG-a","id":"MIG-a","parent":"GPU-a"}]}]}`,
		`{"v":1,"node":"n","containers":[{"name":"a","devices":[{"uuid":"MIG-a","id":"MIG-a","parent":"GPU-a","profile":"1g.10gb.me"}]}]}`,
		`{"v":1,"node":"n","containers":[{"name":"a","devices":[{"uuid":"GPU-a/3g.40gb@4","id":"GPU-a/3g.40gb@4","cores":100,"parent":"GPU-a","profile":"3g.40gb","placement":{"start":4,"size":4}}]}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		got, err := DecodeAssignment(in)
		if err != nil {
			checkKey(t, err, GPUAssignment+": ")
			return
		}
		enc, err := EncodeAssignment(got)
		if err != nil {
			t.Fatalf("decoded %+v but cannot encode it: %v", got, err)
		}
		again, err := DecodeAssignment(enc)
		if err != nil {
			t.Fatalf("cannot decode own encoding %s: %v", enc, err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("round trip changed the value (-first +second):\n%s", diff)
		}
		for i := range got.Containers {
			c := &got.Containers[i]
			if got.Container(c.Name) != c {
				t.Fatalf("Container(%q) does not find containers[%d]", c.Name, i)
			}
			if len(c.IDs()) != len(c.Devices) || len(c.Devices) == 0 {
				t.Fatalf("container %q: %d IDs for %d devices", c.Name, len(c.IDs()), len(c.Devices))
			}
			for _, d := range c.Devices {
				if d.Profile != "" && (d.ID != d.UUID || d.Parent == "" || d.Parent == d.UUID || !ValidMIGProfile(d.Profile)) {
					t.Fatalf("container %q: MIG device %+v", c.Name, d)
				}
			}
		}
	})
}

func FuzzDecodeAllocation(f *testing.F) {
	s, _ := EncodeAllocation(sampleAllocation())
	seedRecords(f, s,
		`{"v":1,"node":"n","containers":[{"name":"a","ids":["GPU-a","GPU-a::1"],"source":"podresources"}]}`,
		`{"v":1,"containers":[{"name":"a","ids":["GPU-a"]},{"name":"a","ids":[]}]}`,
		`{"v":1,"containers":[{"name":"","ids":null}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		got, err := DecodeAllocation(in)
		if err != nil {
			checkKey(t, err, GPUAllocated+": ")
			return
		}
		enc, err := EncodeAllocation(got)
		if err != nil {
			t.Fatalf("decoded %+v but cannot encode it: %v", got, err)
		}
		again, err := DecodeAllocation(enc)
		if err != nil {
			t.Fatalf("cannot decode own encoding %s: %v", enc, err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("round trip changed the value (-first +second):\n%s", diff)
		}
	})
}

func FuzzParseSelector(f *testing.F) {
	// present is a bit mask of which of the seven annotations are set (bit 0: use-gputype, ...).
	f.Add(uint8(0x7f), "A100,H100", "40GB", "GPU-1,GPU-2", "GPU-3", "true", "spread", "binpack")
	f.Add(uint8(0x7f), "a,,b", ",", " ", "x,", "yes", "Best", "")
	f.Add(uint8(0x0c), "", "", "GPU-1", "GPU-1", "", "", "")
	f.Add(uint8(0x03), "T4", "t4", "", "", "", "", "")
	f.Add(uint8(0x70), "", "", "", "", " TRUE ", "FRAG-AWARE", "Spread")
	f.Add(uint8(0x01), "İ,i̇", "", "", "", "", "", "")
	f.Add(uint8(0x7f), "A100\x1b]8;;https://x\x07H100", "T4\r", "GPU-1\u009b", "\x7f", "true\x00", "spread\n", "\tbinpack")
	f.Add(uint8(0x0f), "\xff", "a\x9bb", "GPU-\xc3", "GPU-1,\x1b[2K", "", "", "")
	f.Fuzz(func(t *testing.T, present uint8, useT, nouseT, useU, nouseU, numa, nodeP, gpuP string) {
		keys := []string{UseGPUType, NoUseGPUType, UseGPUUUID, NoUseGPUUUID, NUMABind, NodePolicy, GPUPolicy}
		values := []string{useT, nouseT, useU, nouseU, numa, nodeP, gpuP}
		ann := map[string]string{}
		for i, k := range keys {
			if present&(1<<i) != 0 {
				ann[k] = values[i]
			}
		}
		s, err := ParseSelector(ann)
		if err != nil {
			prefixes := make([]string, len(keys))
			for i, k := range keys {
				prefixes[i] = k + ": "
			}
			checkKey(t, err, prefixes...)
			// Messages reach terminals (kubectl, logs): every line is printable text.
			for _, line := range strings.Split(err.Error(), "\n") {
				if !printable(line) {
					t.Fatalf("error line %q holds a control character or invalid UTF-8", line)
				}
			}
			return
		}
		// What parses is printable: nothing a terminal would act on reaches a table or a log.
		for _, v := range slices.Concat(s.UseTypes, s.NoUseTypes, s.UseUUIDs, s.NoUseUUIDs, []string{string(s.NodePolicy), string(s.GPUPolicy)}) {
			if !printable(v) {
				t.Fatalf("parsed entry %q holds a control character or invalid UTF-8", v)
			}
		}
		// CheckLower agrees with Check on any card (here: the raw values as model and UUID).
		for _, card := range [][2]string{{useT, useU}, {nouseT, nouseU}, {strings.ToUpper(useT), useU}} {
			if a, b := s.Check(card[0], card[1]), s.CheckLower(strings.ToLower(card[0]), card[1]); a != b {
				t.Fatalf("Check(%q, %q) = %v but CheckLower = %v", card[0], card[1], a, b)
			}
		}
		// Written back as annotations, the parsed selector parses to itself.
		back := map[string]string{}
		put := func(k string, v []string) {
			if len(v) > 0 {
				back[k] = strings.Join(v, ",")
			}
		}
		put(UseGPUType, s.UseTypes)
		put(NoUseGPUType, s.NoUseTypes)
		put(UseGPUUUID, s.UseUUIDs)
		put(NoUseGPUUUID, s.NoUseUUIDs)
		if s.NUMABind {
			back[NUMABind] = "true"
		}
		if s.NodePolicy != "" {
			back[NodePolicy] = string(s.NodePolicy)
		}
		if s.GPUPolicy != "" {
			back[GPUPolicy] = string(s.GPUPolicy)
		}
		again, err := ParseSelector(back)
		if err != nil {
			t.Fatalf("selector %+v written back as %v does not parse: %v", s, back, err)
		}
		if diff := cmp.Diff(s, again); diff != "" {
			t.Fatalf("round trip changed the selector (-first +second):\n%s", diff)
		}
		// A card named exactly like an allowed entry passes the "use" rules it was named for.
		if len(s.UseUUIDs) > 0 && len(s.UseTypes) == 0 && len(s.NoUseTypes) == 0 && len(s.NoUseUUIDs) == 0 {
			if m := s.Check("any model", s.UseUUIDs[0]); m != MatchOK {
				t.Fatalf("card %q refused by %v", s.UseUUIDs[0], m.Key())
			}
		}
		// A card whose model is an allowed type passes: matching is a case-insensitive substring.
		if len(s.UseTypes) > 0 && len(s.NoUseTypes) == 0 && len(s.UseUUIDs) == 0 && len(s.NoUseUUIDs) == 0 {
			if m := s.Check("NVIDIA "+s.UseTypes[0]+" card", "GPU-x"); m != MatchOK {
				t.Fatalf("model containing %q refused by %v", s.UseTypes[0], m.Key())
			}
		}
	})
}

func FuzzParseDeviceID(f *testing.F) {
	for _, s := range []string{uuid0, uuid0 + "::0", uuid0 + "::1023", "", "::", "a::b::c", "GPU-a::01", "GPU-a::-0", "GPU a", "x::9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		u, slot, err := ParseDeviceID(id)
		if err != nil {
			checkKey(t, err, "device ID ")
			return
		}
		if u == "" || slot < -1 {
			t.Fatalf("ParseDeviceID(%q) = %q, %d", id, u, slot)
		}
		// The parts format back to the same ID.
		back := u
		if slot >= 0 {
			back = SlotID(u, slot)
		}
		if back != id {
			t.Fatalf("ParseDeviceID(%q) = %q, %d, which formats as %q", id, u, slot, back)
		}
	})
}

func FuzzParseContainerRequest(f *testing.F) {
	// Each resource is a quantity string; "" leaves it out. inRequests puts it in requests, not limits.
	// gpuRequest, when set, is also put in requests for nvidia.com/gpu (request against limit).
	// migKeys names MIG resources (nvidia.com/mig-<key>), several split by '|', each put in limits
	// with the quantity mig.
	f.Add("1", "", "", "", uint8(0), "", "", "")
	f.Add("2", "10240", "", "30", uint8(0), "", "", "")
	f.Add("1", "", "140", "", uint8(0), "", "", "")
	f.Add("", "1000", "", "", uint8(0), "", "", "")
	f.Add("0", "", "", "50", uint8(0), "", "", "")
	f.Add("1.5", "1Gi", "50", "101", uint8(0x0f), "", "", "")
	f.Add("2000m", "24Gi", "0.5", "-1", uint8(0x05), "", "", "")
	f.Add("1e30", "1e-3", "100", "100", uint8(0), "", "", "")
	f.Add("1e999999999", "-1e999999999", "1.5e999999999", "1000Ei", uint8(0x02), "", "", "")
	f.Add("0e999999999", "0.0e999999999", "1e400", "0", uint8(0x0c), "", "", "")
	f.Add("1e999999999", "", "", "", uint8(0), "1", "", "")
	f.Add("1", "", "", "", uint8(0), "1e999999999", "", "")
	f.Add("0", "", "", "", uint8(0), "0e999999999", "", "")
	f.Add("2", "", "", "", uint8(0), "2000m", "", "")
	f.Add("300m", "", "", "", uint8(0), "0.3", "", "")
	f.Add("", "", "", "", uint8(0), "", "1g.10gb", "2")
	f.Add("", "", "", "", uint8(0), "", "1g.10gb.me", "1")
	f.Add("", "", "", "", uint8(0), "", "1c.3g.40gb", "7")
	f.Add("0", "", "", "", uint8(0), "", "3g.40gb", "1")
	f.Add("1", "", "", "", uint8(0), "", "1g.10gb", "1")
	f.Add("", "1000", "", "", uint8(0), "", "1g.10gb", "1")
	f.Add("", "", "", "30", uint8(0), "0", "2g.20gb", "1")
	f.Add("", "", "", "", uint8(0), "", "1g.10gb|3g.40gb", "1")
	f.Add("", "", "", "", uint8(0), "", "1g.10gb+me", "1")
	f.Add("", "", "", "", uint8(0), "", "1G.10GB", "1")
	f.Add("", "", "", "", uint8(0), "", "", "1")
	f.Add("", "", "", "", uint8(0), "", "1g.10gb", "0")
	f.Add("", "", "", "", uint8(0), "", "1g.10gb", "1.5")
	f.Add("", "", "", "", uint8(0), "", "1g.10gb", "65")
	f.Fuzz(func(t *testing.T, gpu, mem, pct, cores string, inRequests uint8, gpuRequest, migKeys, mig string) {
		names := DefaultResourceNames()
		c := corev1.Container{Name: "c"}
		for i, kv := range []struct {
			name corev1.ResourceName
			v    string
		}{{names.GPU, gpu}, {names.Mem, mem}, {names.MemPercentage, pct}, {names.Cores, cores}} {
			if kv.v == "" {
				continue
			}
			if slowToParse.MatchString(kv.v) {
				// resource.ParseQuantity itself takes minutes on 1e-999999999 or 2e6024865272343
				// (it builds a number with that many digits); that is upstream, not this parser.
				continue
			}
			q, err := resource.ParseQuantity(kv.v)
			if err != nil {
				continue
			}
			if inRequests&(1<<i) != 0 {
				if c.Resources.Requests == nil {
					c.Resources.Requests = corev1.ResourceList{}
				}
				c.Resources.Requests[kv.name] = q
			} else {
				if c.Resources.Limits == nil {
					c.Resources.Limits = corev1.ResourceList{}
				}
				c.Resources.Limits[kv.name] = q
			}
		}
		if gpuRequest != "" && !slowToParse.MatchString(gpuRequest) {
			if q, err := resource.ParseQuantity(gpuRequest); err == nil {
				if c.Resources.Requests == nil {
					c.Resources.Requests = corev1.ResourceList{}
				}
				c.Resources.Requests[names.GPU] = q
			}
		}
		var migNames []corev1.ResourceName
		if migKeys != "" && !slowToParse.MatchString(mig) {
			if q, err := resource.ParseQuantity(mig); err == nil {
				for _, k := range strings.Split(migKeys, "|") {
					if c.Resources.Limits == nil {
						c.Resources.Limits = corev1.ResourceList{}
					}
					name := corev1.ResourceName("nvidia.com/mig-" + k)
					c.Resources.Limits[name] = q
					migNames = append(migNames, name)
				}
			}
		}
		r, err := ParseContainerRequest(&c, names)
		if err != nil {
			prefixes := []string{}
			for _, n := range append(names.All(), migNames...) {
				prefixes = append(prefixes, `container "c": `+string(n)+": ")
			}
			checkKey(t, err, prefixes...)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v holds no *Error", err)
			}
			if diff := cmp.Diff(ContainerRequest{Name: "c"}, r); diff != "" {
				t.Fatalf("request returned with an error (-want +got):\n%s", diff)
			}
			return
		}
		// Every rule holds on what was accepted.
		switch {
		case r.Count < 0 || r.Count > MaxGPUsPerContainer:
			t.Fatalf("count %d", r.Count)
		case r.Shared && r.Count == 0:
			t.Fatalf("shared request with no card: %+v", r)
		case r.MemoryMiB < 0 || r.MemoryMiB > MaxMemoryMiB:
			t.Fatalf("memory %d", r.MemoryMiB)
		case r.MemoryPercent < 0 || r.MemoryPercent > 100:
			t.Fatalf("percentage %d", r.MemoryPercent)
		case r.Cores < 0 || r.Cores > 100:
			t.Fatalf("cores %d", r.Cores)
		case r.MemoryMiB > 0 && r.MemoryPercent > 0:
			t.Fatalf("memory and percentage together: %+v", r)
		case r.MemoryOn(1000) < 0 || r.MemoryOn(1000) > max(1000, r.MemoryMiB):
			t.Fatalf("MemoryOn(1000) = %d for %+v", r.MemoryOn(1000), r)
		case r.MIG() && (r.Count == 0 || r.Shared || !validMIGProfileKey(r.MIGProfile)):
			t.Fatalf("MIG request %+v", r)
		}
		if r.MIG() {
			// One profile, named by the container, and no card beside it.
			if q, ok := quantityOf(&c, names.GPU); ok && !q.IsZero() {
				t.Fatalf("MIG request %+v accepted beside %s: %s", r, names.GPU, q.String())
			}
			if _, ok := quantityOf(&c, names.MIGResource(r.MIGProfile)); !ok || len(migNames) != 1 {
				t.Fatalf("MIG request %+v from %v", r, migNames)
			}
		}
		// The accepted request, written as plain limits, parses to itself.
		again := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
		switch {
		case r.MIG():
			again.Resources.Limits[names.MIGResource(r.MIGProfile)] = *resource.NewQuantity(int64(r.Count), resource.DecimalSI)
		case r.Count > 0:
			again.Resources.Limits[names.GPU] = *resource.NewQuantity(int64(r.Count), resource.DecimalSI)
		}
		if _, ok := quantityOf(&c, names.Mem); ok {
			again.Resources.Limits[names.Mem] = *resource.NewQuantity(r.MemoryMiB, resource.DecimalSI)
		}
		if _, ok := quantityOf(&c, names.MemPercentage); ok {
			again.Resources.Limits[names.MemPercentage] = *resource.NewQuantity(int64(r.MemoryPercent), resource.DecimalSI)
		}
		if _, ok := quantityOf(&c, names.Cores); ok {
			again.Resources.Limits[names.Cores] = *resource.NewQuantity(int64(r.Cores), resource.DecimalSI)
		}
		r2, err := ParseContainerRequest(&again, names)
		if err != nil {
			t.Fatalf("accepted %+v, but its plain form does not parse: %v", r, err)
		}
		if diff := cmp.Diff(r, r2); diff != "" {
			t.Fatalf("round trip changed the request (-first +second):\n%s", diff)
		}
	})
}

// slowToParse matches quantity strings with an exponent below -9999 or of ten digits or more.
var slowToParse = regexp.MustCompile(`[eE](-[0-9]{5,}|\+?[0-9]{10,})`)

// quantityOf reports whether the container names the resource in limits or requests.
func quantityOf(c *corev1.Container, name corev1.ResourceName) (resource.Quantity, bool) {
	if q, ok := c.Resources.Limits[name]; ok {
		return q, true
	}
	q, ok := c.Resources.Requests[name]
	return q, ok
}
