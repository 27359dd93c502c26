package annotations

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// res builds a resource list from name/quantity pairs, e.g. res("nvidia.com/gpu", "2").
func res(kv ...string) corev1.ResourceList {
	if len(kv) == 0 {
		return nil
	}
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// ctr builds a container with the given limits and requests.
func ctr(name string, limits, requests corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: limits, Requests: requests}}
}

func TestParseContainerRequest(t *testing.T) {
	const (
		gpu   = "nvidia.com/gpu"
		mem   = "nvidia.com/gpumem"
		pct   = "nvidia.com/gpumem-percentage"
		cores = "nvidia.com/gpucores"
	)
	tests := []struct {
		name     string
		limits   corev1.ResourceList
		requests corev1.ResourceList
		want     ContainerRequest
		wantErr  string
	}{
		{name: "no GPU resources", limits: res("cpu", "2"), want: ContainerRequest{Name: "c"}},
		{name: "whole cards from limits", limits: res(gpu, "2"), want: ContainerRequest{Name: "c", Count: 2}},
		{name: "whole cards from requests when no limit", requests: res(gpu, "3"), want: ContainerRequest{Name: "c", Count: 3}},
		{name: "request equal to limit", limits: res(gpu, "1"), requests: res(gpu, "1"), want: ContainerRequest{Name: "c", Count: 1}},
		{name: "equal in a different spelling (1000m = 1)", limits: res(gpu, "1"), requests: res(gpu, "1000m"), want: ContainerRequest{Name: "c", Count: 1}},
		{name: "2000m is the whole number 2", limits: res(gpu, "2000m"), want: ContainerRequest{Name: "c", Count: 2}},
		{name: "explicit 0 cards", limits: res(gpu, "0"), want: ContainerRequest{Name: "c"}},
		{name: "MaxGPUsPerContainer is allowed", limits: res(gpu, "64"), want: ContainerRequest{Name: "c", Count: 64}},
		{
			name:   "shared by memory",
			limits: res(gpu, "1", mem, "10240"),
			want:   ContainerRequest{Name: "c", Count: 1, Shared: true, MemoryMiB: 10240},
		},
		{
			name:     "memory from requests, count from limits",
			limits:   res(gpu, "2"),
			requests: res(gpu, "2", mem, "3000"),
			want:     ContainerRequest{Name: "c", Count: 2, Shared: true, MemoryMiB: 3000},
		},
		{
			name:   "shared by memory percentage",
			limits: res(gpu, "1", pct, "25"),
			want:   ContainerRequest{Name: "c", Count: 1, Shared: true, MemoryPercent: 25},
		},
		{
			name:   "shared by cores only",
			limits: res(gpu, "1", cores, "30"),
			want:   ContainerRequest{Name: "c", Count: 1, Shared: true, Cores: 30},
		},
		{
			name:   "cores 0 is a share with no compute reserved",
			limits: res(gpu, "1", mem, "1024", cores, "0"),
			want:   ContainerRequest{Name: "c", Count: 1, Shared: true, MemoryMiB: 1024},
		},
		{
			name:   "bounds: percentage 100, cores 100, memory 1 MiB",
			limits: res(gpu, "1", pct, "100", cores, "100"),
			want:   ContainerRequest{Name: "c", Count: 1, Shared: true, MemoryPercent: 100, Cores: 100},
		},
		{
			name:   "memory at MaxMemoryMiB (16777216)",
			limits: res(gpu, "1", mem, "16777216"),
			want:   ContainerRequest{Name: "c", Count: 1, Shared: true, MemoryMiB: MaxMemoryMiB},
		},
		{
			name:     "request differs from limit",
			limits:   res(gpu, "2"),
			requests: res(gpu, "1"),
			wantErr:  `container "c": nvidia.com/gpu: request 1 differs from limit 2`,
		},
		{
			name:     "request far above the limit",
			limits:   res(gpu, "1"),
			requests: res(gpu, "1e999999999"),
			wantErr:  `container "c": nvidia.com/gpu: request 1e999999999 differs from limit 1`,
		},
		{
			name:     "limit far above the request",
			limits:   res(gpu, "1e999999999"),
			requests: res(gpu, "1"),
			wantErr:  `container "c": nvidia.com/gpu: request 1 differs from limit 1e999999999`,
		},
		{
			name:     "both beyond float64: left to the range check",
			limits:   res(gpu, "1e400"),
			requests: res(gpu, "1e999999999"),
			wantErr:  `container "c": nvidia.com/gpu: 10e399 is above 64`,
		},
		{
			name:     "zero with a huge exponent equals zero",
			limits:   res(gpu, "0"),
			requests: res(gpu, "0e999999999"),
			want:     ContainerRequest{Name: "c"},
		},
		{
			name:   "zero with a huge exponent as the limit",
			limits: res(gpu, "0e999999999", cores, "0e999999999"),
			wantErr: `container "c": nvidia.com/gpu: 0 while nvidia.com/gpucores asks for a share of a card; ` +
				`set nvidia.com/gpu: 1 or more`,
		},
		{
			name:     "equal fractions are equal (0.3 = 300m), then refused as fractions",
			limits:   res(gpu, "300m"),
			requests: res(gpu, "0.3"),
			wantErr:  `container "c": nvidia.com/gpu: 300m is not a whole number`,
		},
		{
			name:    "fractional count",
			limits:  res(gpu, "1.5"),
			wantErr: `container "c": nvidia.com/gpu: 1500m is not a whole number`,
		},
		{
			name:    "fractional count below one",
			limits:  res(gpu, "500m"),
			wantErr: `container "c": nvidia.com/gpu: 500m is not a whole number`,
		},
		{
			name:    "negative count",
			limits:  res(gpu, "-1"),
			wantErr: `container "c": nvidia.com/gpu: -1 is below 0`,
		},
		{
			name:    "count above MaxGPUsPerContainer",
			limits:  res(gpu, "65"),
			wantErr: `container "c": nvidia.com/gpu: 65 is above 64`,
		},
		{
			name:    "huge count is above, not fractional",
			limits:  res(gpu, "1e30"),
			wantErr: `container "c": nvidia.com/gpu: 1e30 is above 64`,
		},
		{
			name:    "gpumem-percentage 140",
			limits:  res(gpu, "1", pct, "140"),
			wantErr: `container "c": nvidia.com/gpumem-percentage: 140 is above 100`,
		},
		{
			name:    "gpumem-percentage 0",
			limits:  res(gpu, "1", pct, "0"),
			wantErr: `container "c": nvidia.com/gpumem-percentage: 0 is below 1`,
		},
		{
			name:    "gpumem-percentage fractional",
			limits:  res(gpu, "1", pct, "12.5"),
			wantErr: `container "c": nvidia.com/gpumem-percentage: 12500m is not a whole number`,
		},
		{
			name:    "gpucores 101",
			limits:  res(gpu, "1", cores, "101"),
			wantErr: `container "c": nvidia.com/gpucores: 101 is above 100`,
		},
		{
			name:    "gpucores -5",
			limits:  res(gpu, "1", cores, "-5"),
			wantErr: `container "c": nvidia.com/gpucores: -5 is below 0`,
		},
		{
			name:    "gpumem 0",
			limits:  res(gpu, "1", mem, "0"),
			wantErr: `container "c": nvidia.com/gpumem: 0 is below 1`,
		},
		{
			name:    "gpumem written in bytes by mistake",
			limits:  res(gpu, "1", mem, "24Gi"),
			wantErr: `container "c": nvidia.com/gpumem: 24Gi is above 16777216`,
		},
		{
			name:    "gpumem and gpumem-percentage together",
			limits:  res(gpu, "1", mem, "1000", pct, "50"),
			wantErr: `container "c": nvidia.com/gpumem-percentage: cannot be combined with nvidia.com/gpumem (choose one)`,
		},
		{
			name:    "memory share without nvidia.com/gpu",
			limits:  res(mem, "1000"),
			wantErr: `container "c": nvidia.com/gpu: missing while nvidia.com/gpumem asks for a share of a card; set nvidia.com/gpu: 1 or more`,
		},
		{
			name:    "percentage share without nvidia.com/gpu",
			limits:  res(pct, "50"),
			wantErr: `container "c": nvidia.com/gpu: missing while nvidia.com/gpumem-percentage asks for a share of a card; set nvidia.com/gpu: 1 or more`,
		},
		{
			name:    "cores share with nvidia.com/gpu 0",
			limits:  res(gpu, "0", cores, "50"),
			wantErr: `container "c": nvidia.com/gpu: 0 while nvidia.com/gpucores asks for a share of a card; set nvidia.com/gpu: 1 or more`,
		},
		{
			name:    "an invalid count is reported once, not also as missing",
			limits:  res(gpu, "2.5", mem, "1000"),
			wantErr: `container "c": nvidia.com/gpu: 2500m is not a whole number`,
		},
		{
			name:   "every problem is reported, in resource order",
			limits: res(gpu, "100", mem, "0", pct, "140", cores, "101"),
			wantErr: `container "c": nvidia.com/gpu: 100 is above 64` + "\n" +
				`container "c": nvidia.com/gpumem: 0 is below 1` + "\n" +
				`container "c": nvidia.com/gpumem-percentage: 140 is above 100` + "\n" +
				`container "c": nvidia.com/gpucores: 101 is above 100` + "\n" +
				`container "c": nvidia.com/gpumem-percentage: cannot be combined with nvidia.com/gpumem (choose one)`,
		},
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
		})
	}
}

func TestParseContainerRequestCustomNames(t *testing.T) {
	names := ResourceNames{GPU: "example.com/vgpu", Mem: "example.com/vmem", MemPercentage: "example.com/vmem-pct", Cores: "example.com/vcores"}
	tests := []struct {
		name    string
		limits  corev1.ResourceList
		want    ContainerRequest
		wantErr string
	}{
		{
			name:   "custom names are read",
			limits: res("example.com/vgpu", "2", "example.com/vcores", "40"),
			want:   ContainerRequest{Name: "c", Count: 2, Shared: true, Cores: 40},
		},
		{
			name:   "default names are then ignored",
			limits: res("nvidia.com/gpu", "2", "nvidia.com/gpumem-percentage", "140"),
			want:   ContainerRequest{Name: "c"},
		},
		{
			name:    "errors name the custom resource",
			limits:  res("example.com/vgpu", "1", "example.com/vmem-pct", "140"),
			wantErr: `container "c": example.com/vmem-pct: 140 is above 100`,
		},
		{
			name:    "missing count names the custom resources",
			limits:  res("example.com/vmem", "100"),
			wantErr: `container "c": example.com/vgpu: missing while example.com/vmem asks for a share of a card; set example.com/vgpu: 1 or more`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ctr("c", tt.limits, nil)
			got, err := ParseContainerRequest(&c, names)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if err == nil {
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("request (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestParsePodRequest(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	sidecar := ctr("proxy", res("nvidia.com/gpu", "1", "nvidia.com/gpucores", "10"), nil)
	sidecar.RestartPolicy = &always
	tests := []struct {
		name    string
		spec    corev1.PodSpec
		want    PodRequest
		wantErr string
	}{
		{
			name: "no GPU container: empty request",
			spec: corev1.PodSpec{Containers: []corev1.Container{ctr("app", res("cpu", "1"), nil)}},
			want: PodRequest{},
		},
		{
			name: "containers without GPU are skipped, order kept",
			spec: corev1.PodSpec{Containers: []corev1.Container{
				ctr("a", res("nvidia.com/gpu", "1"), nil),
				ctr("log", res("cpu", "1"), nil),
				ctr("b", res("nvidia.com/gpu", "2"), nil),
			}},
			want: PodRequest{Containers: []ContainerRequest{{Name: "a", Count: 1}, {Name: "b", Count: 2}}},
		},
		{
			// An explicit 0 asks no cards, but the kubelet still gives it device hints (ZeroGPU);
			// a container that names the resource only in its requests is not listed (the
			// kubelet reads limits).
			name: "init containers first, a sidecar marked, explicit 0 kept apart",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{
					ctr("warmup", res("nvidia.com/gpu", "2"), nil),
					ctr("fetch", res("nvidia.com/gpu", "0"), nil),
					sidecar,
				},
				Containers: []corev1.Container{ctr("train", res("nvidia.com/gpu", "2"), nil),
					ctr("eval", res("nvidia.com/gpu", "0"), nil), ctr("log", nil, res("nvidia.com/gpu", "0")), ctr("web", nil, nil)},
			},
			want: PodRequest{Containers: []ContainerRequest{
				{Name: "warmup", Init: true, Count: 2},
				{Name: "proxy", Init: true, Sidecar: true, Count: 1, Shared: true, Cores: 10},
				{Name: "train", Count: 2},
			}, ZeroGPU: []ZeroGPU{{Name: "fetch", Init: true, Before: 1}, {Name: "eval", Before: 3}}},
		},
		{
			name: "restartPolicy on an app container does not make it a sidecar",
			spec: corev1.PodSpec{Containers: []corev1.Container{func() corev1.Container {
				c := ctr("app", res("nvidia.com/gpu", "1"), nil)
				c.RestartPolicy = &always
				return c
			}()}},
			want: PodRequest{Containers: []ContainerRequest{{Name: "app", Count: 1}}},
		},
		{
			name: "errors of every container, init first; good containers still returned",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("init", res("nvidia.com/gpumem", "100"), nil)},
				Containers: []corev1.Container{
					ctr("ok", res("nvidia.com/gpu", "1"), nil),
					ctr("bad", res("nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "140"), nil),
				},
			},
			want: PodRequest{Containers: []ContainerRequest{{Name: "ok", Count: 1}}},
			wantErr: `container "init": nvidia.com/gpu: missing while nvidia.com/gpumem asks for a share of a card; set nvidia.com/gpu: 1 or more` + "\n" +
				`container "bad": nvidia.com/gpumem-percentage: 140 is above 100`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: tt.spec}
			got, err := ParsePodRequest(pod, DefaultResourceNames())
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Fatalf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
			if got.Empty() != (len(tt.want.Containers) == 0) {
				t.Errorf("Empty() = %v with %d containers", got.Empty(), len(got.Containers))
			}
		})
	}
}

func TestHasManagedResource(t *testing.T) {
	custom := ResourceNames{GPU: "example.com/vgpu", Mem: "example.com/vmem", MemPercentage: "example.com/vmem-pct", Cores: "example.com/vcores"}
	tests := []struct {
		name  string
		spec  corev1.PodSpec
		names ResourceNames
		want  bool
	}{
		{name: "no containers", names: DefaultResourceNames(), want: false},
		{name: "cpu only", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", res("cpu", "1"), res("memory", "1Gi"))}}, names: DefaultResourceNames(), want: false},
		{name: "gpu limit", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", res("nvidia.com/gpu", "1"), nil)}}, names: DefaultResourceNames(), want: true},
		{name: "gpu 0 still names the resource", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", res("nvidia.com/gpu", "0"), nil)}}, names: DefaultResourceNames(), want: true},
		{name: "gpucores in requests of an init container", spec: corev1.PodSpec{InitContainers: []corev1.Container{ctr("i", nil, res("nvidia.com/gpucores", "10"))}}, names: DefaultResourceNames(), want: true},
		{name: "gpumem-percentage in a later container", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", nil, nil), ctr("b", res("nvidia.com/gpumem-percentage", "10"), nil)}}, names: DefaultResourceNames(), want: true},
		{name: "gpumem", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", nil, res("nvidia.com/gpumem", "10"))}}, names: DefaultResourceNames(), want: true},
		{name: "custom names: default names are not managed", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", res("nvidia.com/gpu", "1"), nil)}}, names: custom, want: false},
		{name: "custom names: custom name is managed", spec: corev1.PodSpec{Containers: []corev1.Container{ctr("a", res("example.com/vcores", "1"), nil)}}, names: custom, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HasManagedResource(&corev1.Pod{Spec: tt.spec}, tt.names); got != tt.want {
				t.Errorf("HasManagedResource = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestContainerRequestHelpers(t *testing.T) {
	const a100 = 81920 // MiB
	tests := []struct {
		name          string
		req           ContainerRequest
		total         int64
		wantExclusive bool
		wantMemory    int64
		wantCores     int
	}{
		{name: "whole card: all memory, all compute", req: ContainerRequest{Count: 1}, total: a100, wantExclusive: true, wantMemory: a100, wantCores: 100},
		{name: "memory in MiB", req: ContainerRequest{Count: 1, Shared: true, MemoryMiB: 10240, Cores: 30}, total: a100, wantMemory: 10240, wantCores: 30},
		// 81920 * 25 / 100 = 20480
		{name: "memory percentage", req: ContainerRequest{Count: 1, Shared: true, MemoryPercent: 25}, total: a100, wantMemory: 20480, wantCores: 0},
		// 15360 * 33 / 100 = 5068.8, rounded down to 5068
		{name: "memory percentage rounds down", req: ContainerRequest{Count: 1, Shared: true, MemoryPercent: 33}, total: 15360, wantMemory: 5068},
		{name: "cores only: no memory reserved", req: ContainerRequest{Count: 1, Shared: true, Cores: 50}, total: a100, wantMemory: 0, wantCores: 50},
		{name: "cores 100 makes the share exclusive", req: ContainerRequest{Count: 1, Shared: true, MemoryMiB: 1000, Cores: 100}, total: a100, wantExclusive: true, wantMemory: 1000, wantCores: 100},
		{name: "memory larger than the card is returned as asked (the fit check refuses it)", req: ContainerRequest{Count: 1, Shared: true, MemoryMiB: 90000}, total: a100, wantMemory: 90000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.req.Exclusive(); got != tt.wantExclusive {
				t.Errorf("Exclusive() = %v, want %v", got, tt.wantExclusive)
			}
			if got := tt.req.MemoryOn(tt.total); got != tt.wantMemory {
				t.Errorf("MemoryOn(%d) = %d, want %d", tt.total, got, tt.wantMemory)
			}
			if got := tt.req.CoresOn(); got != tt.wantCores {
				t.Errorf("CoresOn() = %d, want %d", got, tt.wantCores)
			}
		})
	}
}

func TestContainerRequestInterchangeable(t *testing.T) {
	base := ContainerRequest{Name: "a", Count: 2, Shared: true, MemoryMiB: 1000, Cores: 20}
	tests := []struct {
		name string
		edit func(r *ContainerRequest)
		want bool
	}{
		{name: "identical", edit: func(*ContainerRequest) {}, want: true},
		{name: "name, init and sidecar do not matter", edit: func(r *ContainerRequest) { r.Name, r.Init, r.Sidecar = "b", true, true }, want: true},
		{name: "count differs", edit: func(r *ContainerRequest) { r.Count = 1 }, want: false},
		{name: "shared differs", edit: func(r *ContainerRequest) { r.Shared = false }, want: false},
		{name: "memory differs", edit: func(r *ContainerRequest) { r.MemoryMiB = 1001 }, want: false},
		{name: "percentage differs", edit: func(r *ContainerRequest) { r.MemoryPercent = 10 }, want: false},
		{name: "cores differ", edit: func(r *ContainerRequest) { r.Cores = 21 }, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			tt.edit(&o)
			if got := base.Interchangeable(&o); got != tt.want {
				t.Errorf("a.Interchangeable(b) = %v, want %v", got, tt.want)
			}
			if got := o.Interchangeable(&base); got != tt.want {
				t.Errorf("b.Interchangeable(a) = %v, want %v (must be symmetric)", got, tt.want)
			}
		})
	}
}

func TestParseQuantity(t *testing.T) {
	tests := []struct {
		q       string
		lo, hi  int64
		want    int64
		wantErr string
	}{
		{q: "5", lo: 0, hi: 10, want: 5},
		{q: "0", lo: 0, hi: 10, want: 0},
		{q: "10", lo: 0, hi: 10, want: 10},
		{q: "1k", lo: 0, hi: 2000, want: 1000},
		{q: "11", lo: 0, hi: 10, wantErr: "k: 11 is above 10"},
		{q: "1k", lo: 0, hi: 10, wantErr: "k: 1k is above 10"},
		{q: "-1", lo: 0, hi: 10, wantErr: "k: -1 is below 0"},
		{q: "100m", lo: 1, hi: 10, wantErr: "k: 100m is below 1"},
		{q: "1100m", lo: 1, hi: 10, wantErr: "k: 1100m is not a whole number"},
		{q: "10.5", lo: 1, hi: 10, wantErr: "k: 10500m is above 10"},
		{q: "2000m", lo: 1, hi: 10, want: 2},
		{q: "1e30", lo: 0, hi: 10, wantErr: "k: 1e30 is above 10"},
		{q: "9223372036854775808", lo: 0, hi: 10, wantErr: "k: 9223372036854775808 is above 10"},
		// Legal quantities whose exact comparison would build a number with a billion digits.
		{q: "1e999999999", lo: 0, hi: 10, wantErr: "k: 1e999999999 is above 10"},
		{q: "-1e999999999", lo: 0, hi: 10, wantErr: "k: -1e999999999 is below 0"},
		{q: "15e999999999", lo: 0, hi: 10, wantErr: "k: 15e999999999 is above 10"},
		{q: "1.5e999999999", lo: 0, hi: 10, wantErr: "k: 1500e999999996 is above 10"},
		// Quantities keep at most 9 decimal places: 1e-9999 is rounded up to 1e-9 when parsed.
		{q: "1e-9999", lo: 0, hi: 10, wantErr: "k: 1e-9 is not a whole number"},
		{q: "1000Ei", lo: 0, hi: 10, wantErr: "k: 9223372036854775807 is above 10"},
	}
	for _, tt := range tests {
		v, present, err := ParseQuantity("k", resource.MustParse(tt.q), tt.lo, tt.hi)
		if !present {
			t.Errorf("ParseQuantity(%s): present = false", tt.q)
		}
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.wantErr || v != tt.want {
			t.Errorf("ParseQuantity(%s, %d, %d) = %d, %q; want %d, %q", tt.q, tt.lo, tt.hi, v, got, tt.want, tt.wantErr)
		}
	}
}

func TestReadCPUs(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	gpu := func(name, cpu string) corev1.Container {
		return ctr(name, res("nvidia.com/gpu", "1", "cpu", cpu, "memory", "1Gi"), nil)
	}
	plain := func(name, cpu string) corev1.Container { return ctr(name, res("cpu", cpu, "memory", "1Gi"), nil) }
	side := plain("proxy", "1")
	side.RestartPolicy = &always
	tests := []struct {
		name     string
		spec     corev1.PodSpec
		qos      corev1.PodQOSClass
		wantG    bool
		wantCPUs []ContainerCPU
	}{
		{
			name: "limits on CPU and memory everywhere: Guaranteed, every container listed in kubelet order",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{plain("fetch", "2"), side},
				Containers:     []corev1.Container{gpu("train", "6"), plain("log", "500m")},
			},
			wantG: true,
			wantCPUs: []ContainerCPU{{Name: "fetch", Init: true, Milli: 2000}, {Name: "proxy", Init: true, Sidecar: true, Milli: 1000},
				{Name: "train", Milli: 6000}, {Name: "log", Milli: 500}},
		},
		{
			name:  "a container without a memory limit: Burstable, no CPUs",
			spec:  corev1.PodSpec{Containers: []corev1.Container{gpu("train", "6"), ctr("log", res("cpu", "1"), nil)}},
			wantG: false,
		},
		{
			name:  "a request below its limit: Burstable",
			spec:  corev1.PodSpec{Containers: []corev1.Container{ctr("train", res("nvidia.com/gpu", "1", "cpu", "4", "memory", "1Gi"), res("cpu", "2"))}},
			wantG: false,
		},
		{
			name:     "the API server's QoS class wins over the spec",
			spec:     corev1.PodSpec{Containers: []corev1.Container{ctr("train", res("nvidia.com/gpu", "1"), res("cpu", "3"))}},
			qos:      corev1.PodQOSGuaranteed,
			wantG:    true,
			wantCPUs: []ContainerCPU{{Name: "train", Milli: 3000}},
		},
		{
			name:  "recorded Burstable stays Burstable",
			spec:  corev1.PodSpec{Containers: []corev1.Container{gpu("train", "6")}},
			qos:   corev1.PodQOSBurstable,
			wantG: false,
		},
		{
			name:  "Guaranteed without GPU containers: nothing to align, no CPUs listed",
			spec:  corev1.PodSpec{Containers: []corev1.Container{plain("web", "2")}},
			wantG: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: tt.spec, Status: corev1.PodStatus{QOSClass: tt.qos}}
			got, err := ParsePodRequest(pod, DefaultResourceNames())
			if err != nil {
				t.Fatal(err)
			}
			if got.Guaranteed || got.CPUs != nil {
				t.Errorf("ParsePodRequest set Guaranteed %v, CPUs %v: only ReadCPUs does", got.Guaranteed, got.CPUs)
			}
			got.ReadCPUs(pod)
			if got.Guaranteed != tt.wantG {
				t.Errorf("Guaranteed = %v, want %v", got.Guaranteed, tt.wantG)
			}
			if diff := cmp.Diff(tt.wantCPUs, got.CPUs); diff != "" {
				t.Errorf("CPUs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWholeCPUs(t *testing.T) {
	// 6000m is 6 CPUs; 2500m is not whole (shared pool); 0 and negatives ask nothing.
	for milli, want := range map[int64]int{6000: 6, 1000: 1, 2500: 0, 500: 0, 0: 0, -1000: 0} {
		c := ContainerCPU{Milli: milli}
		if got := c.WholeCPUs(); got != want {
			t.Errorf("WholeCPUs(%dm) = %d, want %d", milli, got, want)
		}
	}
}
