package annotations

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

const (
	uuid2 = "GPU-9a7d3b21-4c5e-4f60-8e1a-2b3c4d5e6f70"
	migA  = "MIG-1b8f2c3a-5d6e-5f70-8a9b-0c1d2e3f4a50"
	migB  = "MIG-1b8f2c3a-5d6e-5f70-8a9b-0c1d2e3f4a51"
	migC  = "MIG-1b8f2c3a-5d6e-5f70-8a9b-0c1d2e3f4a52"
)

// sampleMIGInventory is a node with one whole card, one A100 split into 3g.40gb + 1g.10gb+me (two
// compute instances would be 1c.3g.40gb…), and one A100 whose MIG mode takes effect at its next reset.
func sampleMIGInventory() Inventory {
	return Inventory{GPUs: []GPU{
		{UUID: uuid0, Index: 0, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: 0, Healthy: true, Shares: 1},
		{UUID: uuid1, Index: 1, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: 1, Healthy: false, Shares: 1,
			MIG: &MIG{Mode: MIGEnabled, Instances: []MIGInstance{
				// An A100-80GB has 8 memory slices: 3g.40gb takes 4 of them, 1g.10gb+me one.
				{UUID: migA, Profile: "3g.40gb", GI: 2, CI: 0, Start: 0, Size: 4, MemoryMiB: 40192, SMs: 42, Healthy: true},
				{UUID: migB, Profile: "1g.10gb+me", GI: 9, CI: 0, Start: 6, Size: 1, MemoryMiB: 9728, SMs: 14, Healthy: false},
			}}},
		{UUID: uuid2, Index: 2, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, NUMA: 1, Healthy: false, Shares: 1,
			MIG: &MIG{Mode: MIGEnabling}},
	}}
}

func TestMIGInventoryRoundTrip(t *testing.T) {
	in := sampleMIGInventory()
	s, err := EncodeInventory(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeInventory(s)
	if err != nil {
		t.Fatal(err)
	}
	in.V = Version
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// A card outside MIG mode writes no mig field, so inventories of whole cards keep their form;
	// an enabling card writes no instances.
	want := `{"uuid":"` + uuid2 + `","index":2,"model":"NVIDIA A100-SXM4-80GB","memoryMiB":81920,"numa":1,"healthy":false,"shares":1,"mig":{"mode":"enabling"}}`
	whole := `{"uuid":"` + uuid0 + `","index":0,"model":"NVIDIA A100-SXM4-80GB","memoryMiB":81920,"numa":0,"healthy":true,"shares":1}`
	for _, part := range []string{want, whole} {
		if !strings.Contains(s, part) {
			t.Errorf("encoding %s\ndoes not hold %s", s, part)
		}
	}
	if g := got.GPUs[1].Instance(migB); g == nil || g.Profile != "1g.10gb+me" {
		t.Errorf("Instance(%s) = %+v", migB, g)
	}
	if g := got.GPUs[1].Instance(uuid1); g != nil {
		t.Errorf("Instance(parent UUID) = %+v, want nil", g)
	}
	if g := got.GPUs[0].Instance(migA); g != nil {
		t.Errorf("Instance on a whole card = %+v, want nil", g)
	}
}

func TestMIGResources(t *testing.T) {
	names := DefaultResourceNames()
	got := names.MIGResources(sampleMIGInventory().GPUs)
	want := []corev1.ResourceName{"nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.10gb.me"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MIGResources (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		name corev1.ResourceName
		key  string
		ok   bool
	}{
		{"nvidia.com/mig-1g.10gb", "1g.10gb", true},
		{"nvidia.com/mig-1g.10gb.me", "1g.10gb.me", true},
		{"nvidia.com/mig-", "", false},
		{"nvidia.com/gpu", "", false},
		{"example.com/mig-1g.10gb", "", false},
		{"mig-1g.10gb", "", false},
	} {
		key, ok := names.MIGProfileKeyOf(tt.name)
		if key != tt.key || ok != tt.ok || names.IsMIGResource(tt.name) != tt.ok {
			t.Errorf("MIGProfileKeyOf(%s) = %q, %v; want %q, %v", tt.name, key, ok, tt.key, tt.ok)
		}
	}
	if got := names.MIGResourcePrefix(); got != "nvidia.com/mig-" {
		t.Errorf("MIGResourcePrefix = %q", got)
	}
	if got := (ResourceNames{GPU: "example.com/vgpu"}).MIGResourcePrefix(); got != "example.com/mig-" {
		t.Errorf("MIGResourcePrefix of example.com/vgpu = %q", got)
	}
	if got := MIGProfileKey("1g.10gb+me"); got != "1g.10gb.me" {
		t.Errorf("MIGProfileKey(1g.10gb+me) = %q", got)
	}
	if got := MIGProfileKey("1g.10gb-me"); got != "1g.10gb-me" {
		t.Errorf("MIGProfileKey(1g.10gb-me) = %q", got)
	}
}

func TestValidMIGProfile(t *testing.T) {
	for p, want := range map[string]bool{
		"1g.10gb": true, "3g.40gb": true, "7g.80gb": true, "1g.10gb+me": true, "1g.12gb-me": true,
		"1c.3g.40gb": true, "4g.94gb+gfx": true, "1g.5gb+me+gfx": true,
		"": false, "1g": false, "1g.10": false, "0g.10gb": false, "1g.10GB": false, "1g.10gb.me": false,
		"1g.10gb+": false, "1g.10gb me": false, "MIG 1g.10gb": false, "1g.10gb+me+a+b+c+d": false,
	} {
		if got := ValidMIGProfile(p); got != want {
			t.Errorf("ValidMIGProfile(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestMIGInventoryValidation(t *testing.T) {
	inst := func(uuid string, edit func(*MIGInstance)) MIGInstance {
		in := MIGInstance{UUID: uuid, Profile: "1g.10gb", GI: 7, CI: 0, Start: 0, Size: 1, MemoryMiB: 9728, SMs: 14, Healthy: true}
		if edit != nil {
			edit(&in)
		}
		return in
	}
	parent := func(uuid string, mode string, ins ...MIGInstance) GPU {
		return GPU{UUID: uuid, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Shares: 1, MIG: &MIG{Mode: mode, Instances: ins}}
	}
	many := make([]MIGInstance, MaxMIGInstances+1)
	for i := range many {
		many[i] = inst(fmt.Sprintf("MIG-n-%02d", i), nil)
	}
	tests := []struct {
		name    string
		gpus    []GPU
		wantErr string
	}{
		{name: "enabled with no instance yet is valid", gpus: []GPU{parent("GPU-a", MIGEnabled)}},
		{name: "MaxMIGInstances instances are valid", gpus: []GPU{parent("GPU-a", MIGEnabled, many[:MaxMIGInstances]...)}},
		{name: "a healthy parent", gpus: []GPU{func() GPU { g := parent("GPU-a", MIGEnabled); g.Healthy = true; return g }()},
			wantErr: `cardinal.io/gpu-inventory: gpus[0]: healthy while in MIG mode (a card in MIG mode is never served whole)`},
		{name: "instances while the mode is enabling", gpus: []GPU{parent("GPU-a", MIGEnabling, inst(migA, nil))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances: 1 listed while mode is enabling (instances exist only in mode enabled)`},
		{name: "an unknown mode", gpus: []GPU{parent("GPU-a", "disabled")},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.mode: "disabled" is not enabled or enabling`},
		{name: "an empty mode", gpus: []GPU{parent("GPU-a", "")},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.mode: "" is not enabled or enabling`},
		{name: "an instance with a card's UUID", gpus: []GPU{{UUID: "GPU-b", Shares: 1, Healthy: true}, parent("GPU-a", MIGEnabled, inst("GPU-b", nil))},
			wantErr: `cardinal.io/gpu-inventory: gpus[1].mig.instances[0].uuid: GPU-b appears twice`},
		{name: "an instance with a later card's UUID", gpus: []GPU{parent("GPU-a", MIGEnabled, inst("GPU-b", nil)), {UUID: "GPU-b", Shares: 1}},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0].uuid: GPU-b appears twice`},
		{name: "one instance on two parents", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA, nil)), parent("GPU-b", MIGEnabled, inst(migB, nil), inst(migA, nil))},
			wantErr: `cardinal.io/gpu-inventory: gpus[1].mig.instances[1].uuid: ` + migA + ` appears twice`},
		{name: "an instance's empty UUID", gpus: []GPU{parent("GPU-a", MIGEnabled, inst("", nil))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0].uuid: empty UUID`},
		{name: "an instance's UUID with a slot separator", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA+"::0", nil))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0].uuid: UUID "` + migA + `::0" contains a separator or space`},
		{name: "a bad profile", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA, nil), inst(migB, func(in *MIGInstance) { in.Profile = "1g.10gb.me" }))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[1].profile: "1g.10gb.me" is not a MIG profile (like 1g.10gb, 3g.40gb, 1g.10gb+me, 1c.3g.40gb)`},
		{name: "an empty profile", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA, func(in *MIGInstance) { in.Profile = "" }))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0].profile: "" is not a MIG profile (like 1g.10gb, 3g.40gb, 1g.10gb+me, 1c.3g.40gb)`},
		{name: "a negative GI", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA, func(in *MIGInstance) { in.GI = -1 }))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0]: gi -1, ci 0: IDs are not negative`},
		{name: "a placement of size 0", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA, func(in *MIGInstance) { in.Size = 0 }))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0]: placement start 0 size 0 is not within 0..64 slices`},
		{name: "a negative start", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA, func(in *MIGInstance) { in.Start = -1 }))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0]: placement start -1 size 1 is not within 0..64 slices`},
		{name: "a placement past the last slice", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA, func(in *MIGInstance) { in.Start, in.Size = 60, 8 }))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0]: placement start 60 size 8 is not within 0..64 slices`},
		// start+size would overflow to a negative number, which is not above 64.
		{name: "a start at the end of int's range", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA, func(in *MIGInstance) { in.Start = math.MaxInt }))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0]: placement start 9223372036854775807 size 1 is not within 0..64 slices`},
		{name: "a size at the end of int's range", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA, func(in *MIGInstance) { in.Start, in.Size = 1, math.MaxInt }))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0]: placement start 1 size 9223372036854775807 is not within 0..64 slices`},
		{name: "negative memory", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA, func(in *MIGInstance) { in.MemoryMiB = -1 }))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0].memoryMiB: -1 is negative`},
		{name: "negative SMs", gpus: []GPU{parent("GPU-a", MIGEnabled, inst(migA, func(in *MIGInstance) { in.SMs = -14 }))},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances[0].sms: -14 is negative`},
		{name: "too many instances", gpus: []GPU{parent("GPU-a", MIGEnabled, many...)},
			wantErr: `cardinal.io/gpu-inventory: gpus[0].mig.instances: 57 listed, at most 56`},
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

func TestMIGAssignmentValidation(t *testing.T) {
	mig := func(uuid, parent, profile string) DeviceAssignment {
		return DeviceAssignment{UUID: uuid, ID: uuid, MemoryMiB: 9728, Cores: 100, Parent: parent, Profile: profile}
	}
	app := func(name string, devs ...DeviceAssignment) ContainerAssignment {
		return ContainerAssignment{Name: name, Devices: devs}
	}
	tests := []struct {
		name       string
		containers []ContainerAssignment
		wantErr    string
	}{
		{name: "two instances of one parent in one container", containers: []ContainerAssignment{
			app("a", mig(migA, uuid1, "1g.10gb"), mig(migB, uuid1, "1g.10gb")),
		}},
		{name: "instances and a whole card in two containers", containers: []ContainerAssignment{
			app("a", mig(migA, uuid1, "1g.10gb+me")), app("b", DeviceAssignment{UUID: uuid0, ID: uuid0, Cores: 100}),
		}},
		{name: "a parent without a profile", containers: []ContainerAssignment{app("a", mig(migA, uuid1, ""))},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[0]: parent "` + uuid1 + `" and profile "" come together (a MIG instance names both)`},
		{name: "a profile without a parent", containers: []ContainerAssignment{app("a", mig(migA, "", "1g.10gb"))},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[0]: parent "" and profile "1g.10gb" come together (a MIG instance names both)`},
		{name: "a bad profile", containers: []ContainerAssignment{app("a", mig(migA, uuid1, "1g.10gb"), mig(migB, uuid1, "mig-1g.10gb"))},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[1].profile: "mig-1g.10gb" is not a MIG profile`},
		{name: "a parent that is the instance", containers: []ContainerAssignment{app("a", mig(migA, migA, "1g.10gb"))},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[0].parent: "` + migA + `" is not the card of instance ` + migA},
		{name: "a parent with a space", containers: []ContainerAssignment{app("a", mig(migA, "GPU a", "1g.10gb"))},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[0].parent: "GPU a" is not the card of instance ` + migA},
		{name: "an instance served by a slot ID", containers: []ContainerAssignment{app("a", func() DeviceAssignment {
			d := mig(migA, uuid1, "1g.10gb")
			d.ID = migA + "::0"
			return d
		}())},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[0]: MIG instance ` + migA + ` has device ID "` + migA + `::0" (a MIG instance is served by its UUID)`},
		{name: "an instance under another ID", containers: []ContainerAssignment{app("a", func() DeviceAssignment {
			d := mig(migA, uuid1, "1g.10gb")
			d.ID = migC
			return d
		}())},
			wantErr: `cardinal.io/gpu-assignment: containers[0].devices[0]: id "` + migC + `" is not on card "` + migA + `"`},
		{name: "one instance in two app containers", containers: []ContainerAssignment{app("a", mig(migA, uuid1, "1g.10gb")), app("b", mig(migA, uuid1, "1g.10gb"))},
			wantErr: `cardinal.io/gpu-assignment: containers[1].devices[0]: id ` + migA + ` assigned twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Assignment{Node: "n", Containers: tt.containers}
			s, err := EncodeAssignment(a)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("encode error (-want +got):\n%s", diff)
			}
			if err != nil {
				a.V = Version
				s = mustJSON(t, a)
			}
			got, err := DecodeAssignment(s)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("decode error (-want +got):\n%s", diff)
			}
			if err == nil {
				a.V = Version
				if diff := cmp.Diff(a, got); diff != "" {
					t.Errorf("round trip (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestParseMIGRequest(t *testing.T) {
	const (
		gpu   = "nvidia.com/gpu"
		mem   = "nvidia.com/gpumem"
		cores = "nvidia.com/gpucores"
		mig1  = "nvidia.com/mig-1g.10gb"
		mig3  = "nvidia.com/mig-3g.40gb"
	)
	combined := `cannot be combined with nvidia.com/gpu, nvidia.com/gpumem, nvidia.com/gpumem-percentage or nvidia.com/gpucores in one container (a container takes whole cards, shares of cards, or MIG instances)`
	tests := []struct {
		name     string
		limits   corev1.ResourceList
		requests corev1.ResourceList
		want     ContainerRequest
		wantErr  string
	}{
		{name: "instances of one profile", limits: res(mig1, "2"), want: ContainerRequest{Name: "c", Count: 2, MIGProfile: "1g.10gb"}},
		{name: "from requests when no limit", requests: res(mig3, "1"), want: ContainerRequest{Name: "c", Count: 1, MIGProfile: "3g.40gb"}},
		{name: "request equal to limit", limits: res(mig3, "1"), requests: res(mig3, "1000m"), want: ContainerRequest{Name: "c", Count: 1, MIGProfile: "3g.40gb"}},
		{name: "a profile with +me, its '+' written '.'", limits: res("nvidia.com/mig-1g.10gb.me", "1"), want: ContainerRequest{Name: "c", Count: 1, MIGProfile: "1g.10gb.me"}},
		{name: "a compute instance profile", limits: res("nvidia.com/mig-1c.3g.40gb", "3"), want: ContainerRequest{Name: "c", Count: 3, MIGProfile: "1c.3g.40gb"}},
		{name: "0 instances asks for nothing", limits: res(mig1, "0"), want: ContainerRequest{Name: "c"}},
		{name: "nvidia.com/gpu: 0 beside instances", limits: res(gpu, "0", mig1, "1"), want: ContainerRequest{Name: "c", Count: 1, MIGProfile: "1g.10gb"}},
		{name: "MaxGPUsPerContainer instances", limits: res(mig1, "64"), want: ContainerRequest{Name: "c", Count: 64, MIGProfile: "1g.10gb"}},
		{name: "other resources beside instances", limits: res("cpu", "2", "memory", "1Gi", mig1, "1"), want: ContainerRequest{Name: "c", Count: 1, MIGProfile: "1g.10gb"}},
		{name: "two profiles, both named", limits: res(mig3, "1", mig1, "1"),
			wantErr: `container "c": nvidia.com/mig-3g.40gb: asks for a second MIG profile beside nvidia.com/mig-1g.10gb; a container takes instances of one profile (split it into containers)`},
		{name: "two profiles, one in requests only", limits: res(mig1, "1"), requests: res(mig1, "1", "nvidia.com/mig-2g.20gb", "1"),
			wantErr: `container "c": nvidia.com/mig-2g.20gb: asks for a second MIG profile beside nvidia.com/mig-1g.10gb; a container takes instances of one profile (split it into containers)`},
		{name: "with cards", limits: res(gpu, "1", mig1, "1"), wantErr: `container "c": nvidia.com/mig-1g.10gb: ` + combined},
		{name: "with memory and a card", limits: res(gpu, "1", mem, "1000", mig1, "1"), wantErr: `container "c": nvidia.com/mig-1g.10gb: ` + combined},
		{name: "with cores and a card", limits: res(gpu, "1", cores, "30", mig1, "1"), wantErr: `container "c": nvidia.com/mig-1g.10gb: ` + combined},
		// Not also "nvidia.com/gpu: missing … set nvidia.com/gpu: 1 or more": that advice would be
		// refused in turn.
		{name: "with memory alone", limits: res(mem, "1000", mig1, "1"), wantErr: `container "c": nvidia.com/mig-1g.10gb: ` + combined},
		{name: "with cores and nvidia.com/gpu: 0", limits: res(gpu, "0", cores, "30", mig1, "1"), wantErr: `container "c": nvidia.com/mig-1g.10gb: ` + combined},
		{name: "not a profile", limits: res("nvidia.com/mig-1g", "1"),
			wantErr: `container "c": nvidia.com/mig-1g: "1g" is not a MIG profile (resources are named like nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb.me)`},
		{name: "a profile in capitals", limits: res("nvidia.com/mig-1G.10GB", "1"),
			wantErr: `container "c": nvidia.com/mig-1G.10GB: "1G.10GB" is not a MIG profile (resources are named like nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb.me)`},
		{name: "request differs from limit", limits: res(mig1, "2"), requests: res(mig1, "1"),
			wantErr: `container "c": nvidia.com/mig-1g.10gb: request 1 differs from limit 2`},
		{name: "not a whole number", limits: res(mig1, "1.5"), wantErr: `container "c": nvidia.com/mig-1g.10gb: 1500m is not a whole number`},
		{name: "above MaxGPUsPerContainer", limits: res(mig1, "65"), wantErr: `container "c": nvidia.com/mig-1g.10gb: 65 is above 64`},
		{name: "negative", limits: res(mig1, "-1"), wantErr: `container "c": nvidia.com/mig-1g.10gb: -1 is below 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ctr("c", tt.limits, tt.requests)
			got, err := ParseContainerRequest(&c, DefaultResourceNames())
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if err != nil {
				tt.want = ContainerRequest{Name: "c"}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if got.MIG() != (tt.want.MIGProfile != "") {
				t.Errorf("MIG() = %v for %+v", got.MIG(), got)
			}
			if got.MIG() && (got.Shared || !got.Exclusive()) {
				t.Errorf("a MIG request must hold its instances whole: %+v", got)
			}
		})
	}
}

func TestParseMIGRequestCustomNames(t *testing.T) {
	names := ResourceNames{GPU: "example.com/vgpu", Mem: "example.com/vmem", MemPercentage: "example.com/vmem-pct", Cores: "example.com/vcores"}
	if got := names.MIGResource("1g.10gb+me"); got != "example.com/mig-1g.10gb.me" {
		t.Errorf("MIGResource = %s", got)
	}
	c := ctr("c", res("example.com/mig-2g.20gb", "2"), nil)
	got, err := ParseContainerRequest(&c, names)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ContainerRequest{Name: "c", Count: 2, MIGProfile: "2g.20gb"}, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	// The default domain's MIG resources are then not Cardinal's.
	c = ctr("c", res("nvidia.com/mig-2g.20gb", "2"), nil)
	if got, err := ParseContainerRequest(&c, names); err != nil || got.MIG() || got.Count != 0 {
		t.Errorf("nvidia.com/mig-2g.20gb under custom names = %+v, %v; want nothing asked", got, err)
	}
	c = ctr("c", res("example.com/vgpu", "1", "example.com/mig-2g.20gb", "1"), nil)
	_, err = ParseContainerRequest(&c, names)
	want := `container "c": example.com/mig-2g.20gb: cannot be combined with example.com/vgpu, example.com/vmem, example.com/vmem-pct or example.com/vcores in one container (a container takes whole cards, shares of cards, or MIG instances)`
	if diff := cmp.Diff(want, errString(err)); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{ctr("c", res("example.com/mig-2g.20gb", "1"), nil)}}}
	if !HasManagedResource(pod, names) || HasManagedResource(pod, DefaultResourceNames()) {
		t.Errorf("HasManagedResource of an example.com/mig-2g.20gb pod: custom %v, default %v; want true, false",
			HasManagedResource(pod, names), HasManagedResource(pod, DefaultResourceNames()))
	}
}

func TestParseMIGPodRequest(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{ctr("prep", res("nvidia.com/mig-1g.10gb", "1"), nil)},
		Containers: []corev1.Container{
			ctr("train", res("nvidia.com/mig-3g.40gb", "2"), nil),
			ctr("serve", res("nvidia.com/gpu", "1"), nil),
			ctr("idle", res("nvidia.com/mig-3g.40gb", "0"), nil),
		},
	}}
	got, err := ParsePodRequest(pod, DefaultResourceNames())
	if err != nil {
		t.Fatal(err)
	}
	// A MIG container of 0 instances asks nothing and is not a ZeroGPU container (it names no
	// nvidia.com/gpu, so the kubelet's hints for cards do not concern it).
	want := PodRequest{Containers: []ContainerRequest{
		{Name: "prep", Init: true, Count: 1, MIGProfile: "1g.10gb"},
		{Name: "train", Count: 2, MIGProfile: "3g.40gb"},
		{Name: "serve", Count: 1},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	a, b := got.Containers[1], got.Containers[1]
	b.MIGProfile = "1g.10gb"
	if a.Interchangeable(&b) {
		t.Errorf("containers asking for different profiles are interchangeable: %+v, %+v", a, b)
	}
}

func TestHasManagedResourceMIG(t *testing.T) {
	names := DefaultResourceNames()
	for _, tt := range []struct {
		name string
		spec corev1.PodSpec
		want bool
	}{
		{name: "MIG limit only", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", res("nvidia.com/mig-1g.10gb", "1"), nil)}}, want: true},
		{name: "MIG 0 still names the resource", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", res("nvidia.com/mig-1g.10gb", "0"), nil)}}, want: true},
		{name: "MIG in an init container's requests", spec: corev1.PodSpec{InitContainers: []corev1.Container{ctr("i", nil, res("nvidia.com/mig-3g.40gb", "1"))}}, want: true},
		{name: "a malformed MIG name is still Cardinal's to refuse", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", res("nvidia.com/mig-x", "1"), nil)}}, want: true},
		{name: "another domain's mig- resource", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", res("amd.com/mig-1g.10gb", "1"), nil)}}, want: false},
		{name: "nvidia.com/mig- alone is no MIG resource", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", res("nvidia.com/mig-", "1"), nil)}}, want: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := HasManagedResource(&corev1.Pod{Spec: tt.spec}, names); got != tt.want {
				t.Errorf("HasManagedResource = %v, want %v", got, tt.want)
			}
		})
	}
}

// sampleDynamicMIG is an A100-80GB in a dynamic pool allowing 1g.10gb, 3g.40gb and 7g.80gb, with one
// 3g.40gb created at 4:4 (placements after NVIDIA's MIG user guide; pkg/migplace has them).
func sampleDynamicMIG() *MIG {
	return &MIG{Mode: MIGEnabled, DynamicV: MIGDynamicVersion,
		Instances: []MIGInstance{{UUID: migA, Profile: "3g.40gb", GI: 1, CI: 0, Start: 4, Size: 4, MemoryMiB: 40192, SMs: 42, Healthy: true}},
		Dynamic: []MIGDynamicProfile{
			{Profile: "1g.10gb", Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
			{Profile: "3g.40gb", Size: 4, Starts: []int{0, 4}},
			{Profile: "7g.80gb", Size: 8, Starts: []int{0}},
		}}
}

func TestDynamicMIGRoundTrip(t *testing.T) {
	in := Inventory{GPUs: []GPU{{UUID: uuid1, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Shares: 1, MIG: sampleDynamicMIG()}}}
	s, err := EncodeInventory(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"dynamicV":1,"dynamic":[{"profile":"1g.10gb","size":1,"starts":[0,1,2,3,4,5,6]},{"profile":"3g.40gb","size":4,"starts":[0,4]},{"profile":"7g.80gb","size":8,"starts":[0]}]`; !strings.Contains(s, want) {
		t.Errorf("encoded %s\nwant it to contain %s", s, want)
	}
	got, err := DecodeInventory(s)
	if err != nil {
		t.Fatal(err)
	}
	in.V = Version
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestDynamicMIGRefused(t *testing.T) {
	tests := []struct {
		name   string
		change func(m *MIG)
		want   string
	}{
		{"a version this reader does not know", func(m *MIG) { m.DynamicV = 2 }, "dynamicV: 2 is not a version"},
		{"profiles without a version", func(m *MIG) { m.DynamicV = 0 }, "dynamicV: 0 is not a version"},
		{"a version without profiles", func(m *MIG) { m.Dynamic = nil }, "dynamicV: 1 with no dynamic profiles"},
		{"mode enabling", func(m *MIG) { m.Mode, m.Instances = MIGEnabling, nil }, "dynamic: listed while mode is enabling"},
		{"a compute instance profile", func(m *MIG) { m.Dynamic[1].Profile = "1c.3g.40gb" }, `"1c.3g.40gb" is not a GPU instance profile`},
		{"a malformed profile", func(m *MIG) { m.Dynamic[1].Profile = "3g" }, `"3g" is not a GPU instance profile`},
		{"a profile twice", func(m *MIG) { m.Dynamic[2].Profile = "3g.40gb" }, "3g.40gb appears twice"},
		{"size 0", func(m *MIG) { m.Dynamic[0].Size = 0 }, "size: 0 is not within 1..64"},
		{"no starts", func(m *MIG) { m.Dynamic[0].Starts = nil }, "starts: 0 listed"},
		{"starts not ascending", func(m *MIG) { m.Dynamic[1].Starts = []int{4, 0} }, "starts[1]: 0 is not above 4"},
		{"a start repeated", func(m *MIG) { m.Dynamic[1].Starts = []int{4, 4} }, "starts[1]: 4 is not above 4"},
		{"a start past the slices", func(m *MIG) { m.Dynamic[2].Starts = []int{57} }, "starts[0]: 57 with size 8 is not within 0..64"},
		{"a negative start", func(m *MIG) { m.Dynamic[0].Starts = []int{-1} }, "starts[0]: -1 with size 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := sampleDynamicMIG()
			tt.change(m)
			_, err := EncodeInventory(Inventory{GPUs: []GPU{{UUID: uuid1, Shares: 1, MIG: m}}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
