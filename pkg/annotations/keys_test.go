package annotations

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
)

func TestIsInternal(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{GPUInventory, true},
		{GPUAssignment, true},
		{GPUAllocated, true},
		{"cardinal.io/gpu-allocated ", false},
		{"Cardinal.io/gpu-assignment", false},
		{NodePolicy, false}, // cardinal.io/ but written by users
		{GPUPolicy, false},
		{UseGPUType, false},
		{"cardinal.io/other", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsInternal(tt.key); got != tt.want {
			t.Errorf("IsInternal(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
	for _, k := range UserKeys {
		if IsInternal(k) {
			t.Errorf("user key %s is also internal", k)
		}
	}
}

func TestResourceNamesValidate(t *testing.T) {
	def := DefaultResourceNames()
	with := func(edit func(*ResourceNames)) ResourceNames {
		n := def
		edit(&n)
		return n
	}
	tests := []struct {
		name    string
		names   ResourceNames
		wantErr string
	}{
		{name: "defaults", names: def},
		{name: "custom names", names: ResourceNames{GPU: "example.com/vgpu", Mem: "example.com/vmem", MemPercentage: "example.com/vmem-pct", Cores: "example.com/vcores"}},
		{name: "zero value", names: ResourceNames{}, wantErr: "resource name for gpu is empty"},
		{name: "empty gpumem-percentage", names: with(func(n *ResourceNames) { n.MemPercentage = "" }), wantErr: "resource name for gpumem-percentage is empty"},
		{name: "unqualified", names: with(func(n *ResourceNames) { n.GPU = "gpu" }), wantErr: `resource name for gpu: "gpu" is not a qualified name (domain/name)`},
		{name: "no name after the domain", names: with(func(n *ResourceNames) { n.Mem = "nvidia.com/" }), wantErr: `resource name for gpumem: "nvidia.com/" is not a qualified name (domain/name)`},
		{name: "space in the name", names: with(func(n *ResourceNames) { n.Cores = "nvidia.com/gpu cores" }), wantErr: `resource name for gpucores: "nvidia.com/gpu cores" is not a qualified name (domain/name)`},
		{name: "used twice", names: with(func(n *ResourceNames) { n.Cores = n.Mem }), wantErr: `resource name for gpucores: "nvidia.com/gpumem" is used twice`},
		// MIG resources are <domain of the gpu resource>/mig-<profile>: a managed name there would be
		// read as a MIG profile too.
		{name: "a name among the MIG resources", names: with(func(n *ResourceNames) { n.Mem = "nvidia.com/mig-mem" }),
			wantErr: `resource name for gpumem: "nvidia.com/mig-mem" is among the MIG resources (nvidia.com/mig-<profile>)`},
		{name: "the gpu resource among its own MIG resources", names: ResourceNames{GPU: "example.com/mig-gpu", Mem: "example.com/vmem", MemPercentage: "example.com/vmem-pct", Cores: "example.com/vcores"},
			wantErr: `resource name for gpu: "example.com/mig-gpu" is among the MIG resources (example.com/mig-<profile>)`},
		{name: "mig- under another domain", names: with(func(n *ResourceNames) { n.Cores = "example.com/mig-cores" })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.wantErr, errString(tt.names.Validate())); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestResourceNamesAll(t *testing.T) {
	want := []corev1.ResourceName{"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"}
	if diff := cmp.Diff(want, DefaultResourceNames().All()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestResourceNamesAddFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want ResourceNames
	}{
		{name: "defaults", args: nil, want: DefaultResourceNames()},
		{
			name: "every flag",
			args: []string{"--resource-gpu=example.com/vgpu", "--resource-gpumem", "example.com/vmem",
				"--resource-gpumem-percentage=example.com/vmem-pct", "--resource-gpucores=example.com/vcores"},
			want: ResourceNames{GPU: "example.com/vgpu", Mem: "example.com/vmem", MemPercentage: "example.com/vmem-pct", Cores: "example.com/vcores"},
		},
		{
			name: "one flag keeps the other defaults",
			args: []string{"--resource-gpucores=example.com/cores"},
			want: ResourceNames{GPU: ResourceGPU, Mem: ResourceGPUMem, MemPercentage: ResourceGPUMemPercentage, Cores: "example.com/cores"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := DefaultResourceNames()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			n.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, n); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestResourceNamesAddFlagsHelp(t *testing.T) {
	n := DefaultResourceNames()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	n.AddFlags(fs)
	usage := fs.FlagUsages()
	for _, want := range []string{
		`--resource-gpu name                 resource name for the number of cards a container gets (default nvidia.com/gpu)`,
		`--resource-gpumem name              resource name for MiB of memory per card (default nvidia.com/gpumem)`,
		`--resource-gpumem-percentage name   resource name for percent of each card's memory (default nvidia.com/gpumem-percentage)`,
		`--resource-gpucores name            resource name for percent of each card's compute (default nvidia.com/gpucores)`,
	} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q:\n%s", want, usage)
		}
	}
}

func TestErrorFormatAndUnwrap(t *testing.T) {
	cause := errors.New("cause")
	tests := []struct {
		err  *Error
		want string
	}{
		{&Error{Key: "k/x", Reason: "bad"}, "k/x: bad"},
		{&Error{Container: "main", Key: "k/x", Reason: "bad"}, `container "main": k/x: bad`},
		{&Error{Key: "k/x", Reason: "bad", Err: cause}, "k/x: bad"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	if !errors.Is(&Error{Key: "k", Err: cause}, cause) {
		t.Error("errors.Is does not see the wrapped cause")
	}
}
