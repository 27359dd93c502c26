package annotations

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	uuid0 = "GPU-03f69c50-207a-2038-9b45-23cac89cb67d"
	uuid1 = "GPU-5e1b9a1c-8f0e-4a4c-9d55-0b0c0ffee001"
)

func TestParseDeviceID(t *testing.T) {
	tests := []struct {
		id       string
		wantUUID string
		wantSlot int
		wantErr  string
	}{
		{id: uuid0, wantUUID: uuid0, wantSlot: -1},
		{id: uuid0 + "::0", wantUUID: uuid0, wantSlot: 0},
		{id: uuid0 + "::15", wantUUID: uuid0, wantSlot: 15},
		{id: "MIG-4a7c", wantUUID: "MIG-4a7c", wantSlot: -1},
		{id: "", wantErr: `device ID "": empty UUID`},
		{id: "::1", wantErr: `device ID "::1": empty UUID`},
		{id: "GPU-a::", wantErr: `device ID "GPU-a::": slot "" is not a non-negative integer`},
		{id: "GPU-a::-1", wantErr: `device ID "GPU-a::-1": slot "-1" is not a non-negative integer`},
		{id: "GPU-a::+1", wantErr: `device ID "GPU-a::+1": slot "+1" is not a non-negative integer`},
		{id: "GPU-a::01", wantErr: `device ID "GPU-a::01": slot "01" is not a non-negative integer`},
		{id: "GPU-a::x", wantErr: `device ID "GPU-a::x": slot "x" is not a non-negative integer`},
		{id: "GPU-a::1::2", wantErr: `device ID "GPU-a::1::2": slot "1::2" is not a non-negative integer`},
		{id: "GPU-a::99999999999999999999", wantErr: `device ID "GPU-a::99999999999999999999": slot "99999999999999999999" is not a non-negative integer`},
		{id: "GPU a", wantErr: `device ID "GPU a": UUID "GPU a" contains a separator or space`},
		{id: "GPU-a,GPU-b", wantErr: `device ID "GPU-a,GPU-b": UUID "GPU-a,GPU-b" contains a separator or space`},
		{id: "GPU-a\t::1", wantErr: `device ID "GPU-a\t::1": UUID "GPU-a\t" contains a separator or space`},
		{id: `GPU-"a"`, wantErr: `device ID "GPU-\"a\"": UUID "GPU-\"a\"" contains a separator or space`},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			u, slot, err := ParseDeviceID(tt.id)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if err != nil {
				return
			}
			if u != tt.wantUUID || slot != tt.wantSlot {
				t.Errorf("ParseDeviceID(%q) = %q, %d; want %q, %d", tt.id, u, slot, tt.wantUUID, tt.wantSlot)
			}
		})
	}
}

func TestSlotIDRoundTrip(t *testing.T) {
	for _, k := range []int{0, 1, 7, 1023} {
		id := SlotID(uuid0, k)
		if want := fmt.Sprintf("%s::%d", uuid0, k); id != want {
			t.Errorf("SlotID(%d) = %q, want %q", k, id, want)
		}
		u, slot, err := ParseDeviceID(id)
		if err != nil || u != uuid0 || slot != k {
			t.Errorf("ParseDeviceID(SlotID(%d)) = %q, %d, %v", k, u, slot, err)
		}
	}
}

func TestGPUDeviceIDs(t *testing.T) {
	tests := []struct {
		shares int
		want   []string
	}{
		{shares: 0, want: []string{"GPU-x"}}, // not valid in an inventory; treated as whole card
		{shares: 1, want: []string{"GPU-x"}},
		{shares: 2, want: []string{"GPU-x::0", "GPU-x::1"}},
		{shares: 4, want: []string{"GPU-x::0", "GPU-x::1", "GPU-x::2", "GPU-x::3"}},
	}
	for _, tt := range tests {
		g := &GPU{UUID: "GPU-x", Shares: tt.shares}
		if diff := cmp.Diff(tt.want, g.DeviceIDs()); diff != "" {
			t.Errorf("shares %d (-want +got):\n%s", tt.shares, diff)
		}
	}
}

func TestAssignmentAccessors(t *testing.T) {
	a := Assignment{Node: "n", Containers: []ContainerAssignment{
		{Name: "init", Init: true, Devices: []DeviceAssignment{{UUID: uuid0, ID: uuid0}}},
		{Name: "main", Devices: []DeviceAssignment{{UUID: uuid0, ID: uuid0 + "::1"}, {UUID: uuid1, ID: uuid1 + "::0"}}},
	}}
	if diff := cmp.Diff([]string{uuid0 + "::1", uuid1 + "::0"}, a.Container("main").IDs()); diff != "" {
		t.Errorf("IDs (-want +got):\n%s", diff)
	}
	if c := a.Container("init"); c == nil || !c.Init {
		t.Errorf("Container(init) = %+v", c)
	}
	if c := a.Container("nope"); c != nil {
		t.Errorf("Container(nope) = %+v, want nil", c)
	}
	// The returned pointer refers into the assignment, so callers can edit in place.
	a.Container("main").Devices[0].Cores = 7
	if a.Containers[1].Devices[0].Cores != 7 {
		t.Error("Container does not return a pointer into the assignment")
	}
}

func sampleInventory() Inventory {
	return Inventory{GPUs: []GPU{
		{UUID: uuid0, Index: 0, Model: "NVIDIA A40", MemoryMiB: 46068, NUMA: 0, Healthy: true, Shares: 1},
		{UUID: uuid1, Index: 1, Model: "NVIDIA A40", MemoryMiB: 46068, NUMA: -1, Healthy: false, Shares: 4},
	}}
}

func sampleAssignment() Assignment {
	return Assignment{Node: "node-a", Containers: []ContainerAssignment{
		{Name: "warmup", Init: true, Devices: []DeviceAssignment{{UUID: uuid1, ID: uuid1 + "::0", MemoryMiB: 46068, Cores: 100}}},
		{Name: "train", Devices: []DeviceAssignment{
			{UUID: uuid0, ID: uuid0, MemoryMiB: 46068, Cores: 100},
			{UUID: uuid1, ID: uuid1 + "::0", MemoryMiB: 10240, Cores: 25},
		}},
	}}
}

func sampleAllocation() Allocation {
	return Allocation{Node: "node-a", Containers: []ContainerAllocation{
		{Name: "train", IDs: []string{uuid0, uuid1 + "::0"}, Source: SourceAllocate},
		{Name: "other", IDs: []string{uuid1 + "::3"}, Source: SourcePodResources},
	}}
}

// The encoded forms are part of the contract (docs/contract.md shows them); a change here is a format change.
func TestEncodeGolden(t *testing.T) {
	inv, err := EncodeInventory(sampleInventory())
	if err != nil {
		t.Fatal(err)
	}
	wantInv := `{"v":1,"gpus":[` +
		`{"uuid":"` + uuid0 + `","index":0,"model":"NVIDIA A40","memoryMiB":46068,"numa":0,"healthy":true,"shares":1},` +
		`{"uuid":"` + uuid1 + `","index":1,"model":"NVIDIA A40","memoryMiB":46068,"numa":-1,"healthy":false,"shares":4}]}`
	if diff := cmp.Diff(wantInv, inv); diff != "" {
		t.Errorf("inventory (-want +got):\n%s", diff)
	}
	as, err := EncodeAssignment(sampleAssignment())
	if err != nil {
		t.Fatal(err)
	}
	wantAs := `{"v":1,"node":"node-a","containers":[` +
		`{"name":"warmup","init":true,"devices":[{"uuid":"` + uuid1 + `","id":"` + uuid1 + `::0","memoryMiB":46068,"cores":100}]},` +
		`{"name":"train","devices":[{"uuid":"` + uuid0 + `","id":"` + uuid0 + `","memoryMiB":46068,"cores":100},` +
		`{"uuid":"` + uuid1 + `","id":"` + uuid1 + `::0","memoryMiB":10240,"cores":25}]}]}`
	if diff := cmp.Diff(wantAs, as); diff != "" {
		t.Errorf("assignment (-want +got):\n%s", diff)
	}
	al, err := EncodeAllocation(sampleAllocation())
	if err != nil {
		t.Fatal(err)
	}
	wantAl := `{"v":1,"node":"node-a","containers":[` +
		`{"name":"train","ids":["` + uuid0 + `","` + uuid1 + `::0"],"source":"allocate"},` +
		`{"name":"other","ids":["` + uuid1 + `::3"],"source":"podresources"}]}`
	if diff := cmp.Diff(wantAl, al); diff != "" {
		t.Errorf("allocation (-want +got):\n%s", diff)
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	t.Run("inventory", func(t *testing.T) {
		for _, in := range []Inventory{sampleInventory(), {GPUs: []GPU{}}, {V: 7, GPUs: sampleInventory().GPUs[:1]}} {
			s, err := EncodeInventory(in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeInventory(s)
			if err != nil {
				t.Fatal(err)
			}
			in.V = Version // Encode sets the version, whatever the caller left there.
			if diff := cmp.Diff(in, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		}
	})
	t.Run("assignment", func(t *testing.T) {
		in := sampleAssignment()
		s, err := EncodeAssignment(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeAssignment(s)
		if err != nil {
			t.Fatal(err)
		}
		in.V = Version
		if diff := cmp.Diff(in, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("allocation", func(t *testing.T) {
		in := sampleAllocation()
		s, err := EncodeAllocation(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeAllocation(s)
		if err != nil {
			t.Fatal(err)
		}
		in.V = Version
		if diff := cmp.Diff(in, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

func TestDecodeIgnoresUnknownFields(t *testing.T) {
	inv, err := DecodeInventory(`{"v":1,"topology":{"nvlink":[[0,1]]},"gpus":[{"uuid":"GPU-a","index":3,"model":"T4",` +
		`"memoryMiB":15360,"numa":1,"healthy":true,"shares":2,"nvlinkPeers":["GPU-b"],"pcie":{"gen":4}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	wantInv := Inventory{V: 1, GPUs: []GPU{{UUID: "GPU-a", Index: 3, Model: "T4", MemoryMiB: 15360, NUMA: 1, Healthy: true, Shares: 2}}}
	if diff := cmp.Diff(wantInv, inv); diff != "" {
		t.Errorf("inventory (-want +got):\n%s", diff)
	}
	as, err := DecodeAssignment(`{"v":1,"node":"n","policy":"spread","containers":[{"name":"c","devices":[{"uuid":"GPU-a","id":"GPU-a","memoryMiB":1,"cores":2,"link":"x"}],"extra":1}]}`)
	if err != nil {
		t.Fatal(err)
	}
	wantAs := Assignment{V: 1, Node: "n", Containers: []ContainerAssignment{{Name: "c", Devices: []DeviceAssignment{{UUID: "GPU-a", ID: "GPU-a", MemoryMiB: 1, Cores: 2}}}}}
	if diff := cmp.Diff(wantAs, as); diff != "" {
		t.Errorf("assignment (-want +got):\n%s", diff)
	}
	al, err := DecodeAllocation(`{"v":1,"node":"n","at":"2025-01-01T00:00:00Z","containers":[{"name":"c","ids":["GPU-a::1"],"source":"allocate","kubelet":"x"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	wantAl := Allocation{V: 1, Node: "n", Containers: []ContainerAllocation{{Name: "c", IDs: []string{"GPU-a::1"}, Source: SourceAllocate}}}
	if diff := cmp.Diff(wantAl, al); diff != "" {
		t.Errorf("allocation (-want +got):\n%s", diff)
	}
}

// decoders lets one table run the same input through the three record decoders.
var decoders = []struct {
	key    string
	decode func(string) error
}{
	{GPUInventory, func(s string) error { _, err := DecodeInventory(s); return err }},
	{GPUAssignment, func(s string) error { _, err := DecodeAssignment(s); return err }},
	{GPUAllocated, func(s string) error { _, err := DecodeAllocation(s); return err }},
}

func TestDecodeEnvelopeErrors(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		wantReason  string // after "<key>: "
		unsupported bool
	}{
		{name: "empty", in: "", wantReason: "empty value"},
		{name: "blank", in: " \n", wantReason: "empty value"},
		{name: "not JSON", in: "nope", wantReason: `not a JSON object: invalid character 'o' in literal null (expecting 'u') (value "nope")`},
		{name: "truncated", in: `{"v":1,`, wantReason: `not a JSON object: unexpected end of JSON input (value "{\"v\":1,")`},
		{name: "array", in: `[1]`, wantReason: `not a JSON object: json: cannot unmarshal array into Go value of type struct { V *json.RawMessage "json:\"v\"" } (value "[1]")`},
		{name: "null", in: `null`, wantReason: `missing version field "v" (value "null")`},
		{name: "missing version", in: `{"gpus":[],"node":"n","containers":[]}`, wantReason: `missing version field "v" (value "{\"gpus\":[],\"node\":\"n\",\"containers\":[]}")`},
		{name: "null version", in: `{"v":null}`, wantReason: `missing version field "v" (value "{\"v\":null}")`},
		{name: "version 0", in: `{"v":0}`, wantReason: `version field "v": "0" is not a positive whole number`},
		{name: "version -1", in: `{"v":-1}`, wantReason: `version field "v": "-1" is not a positive whole number`},
		{name: "version as string", in: `{"v":"1"}`, wantReason: `version field "v": "\"1\"" is not a positive whole number`},
		{name: "version 1.5", in: `{"v":1.5}`, wantReason: `version field "v": "1.5" is not a positive whole number`},
		{name: "version 2", in: `{"v":2}`, wantReason: "version 2 is not supported (this build reads 1)", unsupported: true},
		{
			name:        "version 2 whose fields changed type is still reported as version 2",
			in:          `{"v":2,"gpus":{"GPU-a":{}},"node":7,"containers":"x"}`,
			wantReason:  "version 2 is not supported (this build reads 1)",
			unsupported: true,
		},
		{name: "long values are clipped in messages", in: `{"x":"` + strings.Repeat("a", 200) + `"}`,
			wantReason: `missing version field "v" (value "{\"x\":\"` + strings.Repeat("a", 114) + `"…)`},
	}
	for _, d := range decoders {
		for _, tt := range tests {
			t.Run(d.key+"/"+tt.name, func(t *testing.T) {
				err := d.decode(tt.in)
				if diff := cmp.Diff(d.key+": "+tt.wantReason, errString(err)); diff != "" {
					t.Errorf("error (-want +got):\n%s", diff)
				}
				if got := errors.Is(err, ErrUnsupportedVersion); got != tt.unsupported {
					t.Errorf("errors.Is(err, ErrUnsupportedVersion) = %v, want %v", got, tt.unsupported)
				}
				var e *Error
				if !errors.As(err, &e) || e.Key != d.key {
					t.Errorf("error %v is not an *Error with key %s", err, d.key)
				}
			})
		}
	}
}

func TestDecodeFieldTypeErrors(t *testing.T) {
	tests := []struct {
		name string
		got  func() error
		want string
	}{
		{
			name: "inventory memory as string",
			got: func() error {
				_, err := DecodeInventory(`{"v":1,"gpus":[{"uuid":"GPU-a","memoryMiB":"lots","shares":1}]}`)
				return err
			},
			want: `cardinal.io/gpu-inventory: cannot decode: json: cannot unmarshal string into Go struct field GPU.gpus.memoryMiB of type int64 (value "{\"v\":1,\"gpus\":[{\"uuid\":\"GPU-a\",\"memoryMiB\":\"lots\",\"shares\":1}]}")`,
		},
		{
			name: "assignment node as number",
			got:  func() error { _, err := DecodeAssignment(`{"v":1,"node":7}`); return err },
			want: `cardinal.io/gpu-assignment: cannot decode: json: cannot unmarshal number into Go struct field Assignment.node of type string (value "{\"v\":1,\"node\":7}")`,
		},
		{
			name: "allocation ids as string",
			got: func() error {
				_, err := DecodeAllocation(`{"v":1,"containers":[{"name":"c","ids":"GPU-a"}]}`)
				return err
			},
			want: `cardinal.io/gpu-allocated: cannot decode: json: cannot unmarshal string into Go struct field ContainerAllocation.containers.ids of type []string (value "{\"v\":1,\"containers\":[{\"name\":\"c\",\"ids\":\"GPU-a\"}]}")`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, errString(tt.got())); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestInventoryValidation(t *testing.T) {
	gpu := func(uuid string, edit func(*GPU)) GPU {
		g := GPU{UUID: uuid, Model: "Tesla T4", MemoryMiB: 15360, Healthy: true, Shares: 1}
		if edit != nil {
			edit(&g)
		}
		return g
	}
	tests := []struct {
		name    string
		gpus    []GPU
		wantErr string
	}{
		{name: "no cards is valid", gpus: nil},
		{name: "unknown NUMA and zero memory are valid", gpus: []GPU{gpu("GPU-a", func(g *GPU) { g.NUMA, g.MemoryMiB = -1, 0 })}},
		{name: "1024 shares is valid", gpus: []GPU{gpu("GPU-a", func(g *GPU) { g.Shares = 1024 })}},
		{name: "empty UUID", gpus: []GPU{gpu("GPU-a", nil), gpu("", nil)}, wantErr: `cardinal.io/gpu-inventory: gpus[1].uuid: empty UUID`},
		{name: "UUID with slot separator", gpus: []GPU{gpu("GPU-a::1", nil)}, wantErr: `cardinal.io/gpu-inventory: gpus[0].uuid: UUID "GPU-a::1" contains a separator or space`},
		{name: "UUID with comma", gpus: []GPU{gpu("GPU-a,b", nil)}, wantErr: `cardinal.io/gpu-inventory: gpus[0].uuid: UUID "GPU-a,b" contains a separator or space`},
		{name: "duplicate UUID", gpus: []GPU{gpu("GPU-a", nil), gpu("GPU-b", nil), gpu("GPU-a", nil)}, wantErr: `cardinal.io/gpu-inventory: gpus[2].uuid: GPU-a appears twice`},
		{name: "negative memory", gpus: []GPU{gpu("GPU-a", func(g *GPU) { g.MemoryMiB = -1 })}, wantErr: `cardinal.io/gpu-inventory: gpus[0].memoryMiB: -1 is negative`},
		{name: "zero shares", gpus: []GPU{gpu("GPU-a", func(g *GPU) { g.Shares = 0 })}, wantErr: `cardinal.io/gpu-inventory: gpus[0].shares: 0 is not in 1..1024`},
		{name: "too many shares", gpus: []GPU{gpu("GPU-a", func(g *GPU) { g.Shares = 1025 })}, wantErr: `cardinal.io/gpu-inventory: gpus[0].shares: 1025 is not in 1..1024`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := EncodeInventory(Inventory{GPUs: tt.gpus})
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("encode error (-want +got):\n%s", diff)
			}
			if err != nil {
				// The decoder applies the same rules to what others wrote.
				s = mustJSON(t, Inventory{V: Version, GPUs: tt.gpus})
			}
			_, err = DecodeInventory(s)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("decode error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAssignmentValidation(t *testing.T) {
	dev := func(uuid, id string) DeviceAssignment {
		return DeviceAssignment{UUID: uuid, ID: id, MemoryMiB: 100, Cores: 10}
	}
	app := func(name string, devs ...DeviceAssignment) ContainerAssignment {
		return ContainerAssignment{Name: name, Devices: devs}
	}
	initc := func(name string, devs ...DeviceAssignment) ContainerAssignment {
		return ContainerAssignment{Name: name, Init: true, Devices: devs}
	}
	tests := []struct {
		name       string
		node       string
		containers []ContainerAssignment
		wantErr    string
	}{
		{name: "no containers is valid", node: "n"},
		{name: "one card per slot of a shared card", node: "n", containers: []ContainerAssignment{
			app("a", dev("GPU-a", "GPU-a::0")), app("b", dev("GPU-a", "GPU-a::1")),
		}},
		{name: "an app container reuses an init container's device", node: "n", containers: []ContainerAssignment{
			initc("i", dev("GPU-a", "GPU-a")), app("a", dev("GPU-a", "GPU-a")),
		}},
		{name: "init containers reuse each other's devices (the kubelet hands them on)", node: "n", containers: []ContainerAssignment{
			initc("i1", dev("GPU-a", "GPU-a")), initc("i2", dev("GPU-a", "GPU-a")), app("a", dev("GPU-a", "GPU-a")),
		}},
		{name: "empty node", node: "", wantErr: `cardinal.io/gpu-assignment: node is empty`},
		{name: "empty container name", node: "n", containers: []ContainerAssignment{app("", dev("GPU-a", "GPU-a"))},
			wantErr: `cardinal.io/gpu-assignment: containers[0].name is empty`},
		{name: "container twice", node: "n", containers: []ContainerAssignment{app("a", dev("GPU-a", "GPU-a")), app("a", dev("GPU-b", "GPU-b"))},
			wantErr: `cardinal.io/gpu-assignment: containers[1].name: "a" appears twice`},
		{name: "init and app container with one name", node: "n", containers: []ContainerAssignment{initc("a", dev("GPU-a", "GPU-a")), app("a", dev("GPU-b", "GPU-b"))},
			wantErr: `cardinal.io/gpu-assignment: containers[1].name: "a" appears twice`},
		{name: "no devices", node: "n", containers: []ContainerAssignment{app("a")},
			wantErr: `cardinal.io/gpu-assignment: containers[0] (a): no devices`},
		{name: "bad device ID", node: "n", containers: []ContainerAssignment{app("a", dev("GPU-a", "GPU-a::x"))},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[0].id: device ID "GPU-a::x": slot "x" is not a non-negative integer`},
		{name: "ID of another card", node: "n", containers: []ContainerAssignment{app("a", dev("GPU-a", "GPU-b::0"))},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[0]: id "GPU-b::0" is not on card "GPU-a"`},
		{name: "one card twice in a container", node: "n", containers: []ContainerAssignment{app("a", dev("GPU-a", "GPU-a::0"), dev("GPU-a", "GPU-a::1"))},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[1]: card GPU-a given twice to one container`},
		{name: "one ID in two app containers", node: "n", containers: []ContainerAssignment{app("a", dev("GPU-a", "GPU-a::0")), app("b", dev("GPU-b", "GPU-b"), dev("GPU-a", "GPU-a::0"))},
			wantErr: `cardinal.io/gpu-assignment: containers[1].devices[1]: id GPU-a::0 assigned twice`},
		{name: "negative memory", node: "n", containers: []ContainerAssignment{app("a", DeviceAssignment{UUID: "GPU-a", ID: "GPU-a", MemoryMiB: -1})},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[0].memoryMiB: -1 is negative`},
		{name: "cores above 100", node: "n", containers: []ContainerAssignment{app("a", DeviceAssignment{UUID: "GPU-a", ID: "GPU-a", Cores: 101})},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[0].cores: 101 is not in 0..100`},
		{name: "negative cores", node: "n", containers: []ContainerAssignment{app("a", DeviceAssignment{UUID: "GPU-a", ID: "GPU-a", Cores: -1})},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[0].cores: -1 is not in 0..100`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Assignment{Node: tt.node, Containers: tt.containers}
			s, err := EncodeAssignment(a)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("encode error (-want +got):\n%s", diff)
			}
			if err != nil {
				a.V = Version
				s = mustJSON(t, a)
			}
			_, err = DecodeAssignment(s)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("decode error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllocationValidation(t *testing.T) {
	tests := []struct {
		name       string
		containers []ContainerAllocation
		wantErr    string
	}{
		{name: "no containers is valid"},
		{name: "no IDs is valid (a container the kubelet gave nothing)", containers: []ContainerAllocation{{Name: "a"}}},
		{name: "unknown source is kept (newer writers may add sources)", containers: []ContainerAllocation{{Name: "a", IDs: []string{"GPU-a"}, Source: "future"}}},
		{name: "empty name", containers: []ContainerAllocation{{Name: "a", IDs: []string{"GPU-a"}}, {IDs: []string{"GPU-b"}}},
			wantErr: `cardinal.io/gpu-allocated: containers[1].name is empty`},
		{name: "container twice", containers: []ContainerAllocation{{Name: "a", IDs: []string{"GPU-a"}}, {Name: "a", IDs: []string{"GPU-b"}}},
			wantErr: `cardinal.io/gpu-allocated: containers[1].name: "a" appears twice`},
		{name: "bad ID", containers: []ContainerAllocation{{Name: "a", IDs: []string{"GPU-a", "GPU b"}}},
			wantErr: `cardinal.io/gpu-allocated: containers[0].ids[1]: device ID "GPU b": UUID "GPU b" contains a separator or space`},
		{name: "empty ID", containers: []ContainerAllocation{{Name: "a", IDs: []string{""}}},
			wantErr: `cardinal.io/gpu-allocated: containers[0].ids[0]: device ID "": empty UUID`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Allocation{Node: "n", Containers: tt.containers}
			s, err := EncodeAllocation(a)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("encode error (-want +got):\n%s", diff)
			}
			if err != nil {
				a.V = Version
				s = mustJSON(t, a)
			}
			_, err = DecodeAllocation(s)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("decode error (-want +got):\n%s", diff)
			}
		})
	}
}

// A node with 16 cards, each shared 8 ways, is about the largest inventory Cardinal writes; it must
// stay far below the API server's 256 KiB annotation limit and small enough to watch cheaply.
func TestInventoryOf16GPUNodeIsUnder4KiB(t *testing.T) {
	inv := inventory16()
	s, err := EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("16-card inventory: %d bytes", len(s))
	if len(s) >= 4096 {
		t.Errorf("16-card inventory is %d bytes, want under 4096:\n%s", len(s), s)
	}
}

// inventory16 is a realistic 16-card node: H100 SXM cards with real-looking UUIDs, 8 per NUMA node.
func inventory16() Inventory {
	inv := Inventory{}
	for i := range 16 {
		inv.GPUs = append(inv.GPUs, GPU{
			UUID:      fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", 0x9a3c47e1+i*7919, 0x1f2e+i, 0x4b5c+i*3, 0x8d9e+i*5, 0x5e6f7a8b9c0d+i*104729),
			Index:     i,
			Model:     "NVIDIA H100 80GB HBM3",
			MemoryMiB: 81559,
			NUMA:      i / 8,
			Healthy:   true,
			Shares:    8,
		})
	}
	return inv
}

func BenchmarkDecodeInventory16(b *testing.B) {
	s, err := EncodeInventory(inventory16())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeInventory(s); err != nil {
			b.Fatal(err)
		}
	}
}

// mustJSON encodes v without validation, to feed decoders records that Encode refuses.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
