package deviceplugin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// strategies builds a DeviceListConfig with the default CDI settings.
func strategies(s ...DeviceListStrategy) DeviceListConfig {
	c := DefaultDeviceListConfig()
	c.Strategies = s
	return c
}

func TestDeviceListStrategiesListDevices(t *testing.T) {
	// Two cards in CUDA's order: GPU-03 (NVML index 3) before GPU-01 (index 1), as when card 3 sits on
	// the lower PCI bus. Every list keeps that order.
	cards := []listedCard{{UUID: "GPU-03", Index: 3}, {UUID: "GPU-01", Index: 1}}
	const key = "k"
	mounts := []mount{
		{ContainerPath: "/var/run/nvidia-container-devices/GPU-03", HostPath: "/dev/null", ReadOnly: true},
		{ContainerPath: "/var/run/nvidia-container-devices/GPU-01", HostPath: "/dev/null", ReadOnly: true},
	}
	annotation := map[string]string{"cdi.k8s.io/cardinal-device-plugin_k": "nvidia.com/gpu=GPU-03,nvidia.com/gpu=GPU-01"}
	byUUID := []string{"nvidia.com/gpu=GPU-03", "nvidia.com/gpu=GPU-01"}
	byIndex := func() DeviceListConfig {
		c := strategies(DeviceListCDIAnnotations, DeviceListCDICRI)
		c.CDIDeviceIDStrategy = CDIDeviceIDIndex
		return c
	}
	custom := func() DeviceListConfig {
		c := strategies(DeviceListCDIAnnotations, DeviceListCDICRI)
		c.CDIKind, c.CDIAnnotationPrefix = "example.com/accel", "nvidia.cdi.k8s.io/"
		return c
	}
	tests := []struct {
		name string
		cfg  DeviceListConfig
		want deviceListing
	}{
		{name: "envvar: the UUIDs", cfg: strategies(DeviceListEnvvar),
			want: deviceListing{VisibleDevices: "GPU-03,GPU-01"}},
		{name: "no strategy given means envvar", cfg: DeviceListConfig{}.withDefaults(),
			want: deviceListing{VisibleDevices: "GPU-03,GPU-01"}},
		{name: "volume-mounts: the folder, one /dev/null mount per card", cfg: strategies(DeviceListVolumeMounts),
			want: deviceListing{VisibleDevices: "/var/run/nvidia-container-devices", Mounts: mounts}},
		{name: "cdi-annotations: void, one annotation listing the devices", cfg: strategies(DeviceListCDIAnnotations),
			want: deviceListing{VisibleDevices: "void", Annotations: annotation}},
		{name: "cdi-cri: void, the CDI devices", cfg: strategies(DeviceListCDICRI),
			want: deviceListing{VisibleDevices: "void", CDIDevices: byUUID}},
		{name: "CDI names by NVML index, in CUDA's order", cfg: byIndex(),
			want: deviceListing{VisibleDevices: "void",
				Annotations: map[string]string{"cdi.k8s.io/cardinal-device-plugin_k": "nvidia.com/gpu=3,nvidia.com/gpu=1"},
				CDIDevices:  []string{"nvidia.com/gpu=3", "nvidia.com/gpu=1"}}},
		{name: "custom kind and annotation prefix", cfg: custom(),
			want: deviceListing{VisibleDevices: "void",
				Annotations: map[string]string{"nvidia.cdi.k8s.io/cardinal-device-plugin_k": "example.com/accel=GPU-03,example.com/accel=GPU-01"},
				CDIDevices:  []string{"example.com/accel=GPU-03", "example.com/accel=GPU-01"}}},
		{name: "envvar with cdi-cri: the UUIDs stay in the variable", cfg: strategies(DeviceListEnvvar, DeviceListCDICRI),
			want: deviceListing{VisibleDevices: "GPU-03,GPU-01", CDIDevices: byUUID}},
		{name: "envvar with volume-mounts: the UUIDs win the variable, the mounts are there too", cfg: strategies(DeviceListVolumeMounts, DeviceListEnvvar),
			want: deviceListing{VisibleDevices: "GPU-03,GPU-01", Mounts: mounts}},
		{name: "volume-mounts with cdi-annotations: the folder, not void", cfg: strategies(DeviceListCDIAnnotations, DeviceListVolumeMounts),
			want: deviceListing{VisibleDevices: "/var/run/nvidia-container-devices", Mounts: mounts, Annotations: annotation}},
		{name: "all four", cfg: strategies(DeviceListEnvvar, DeviceListVolumeMounts, DeviceListCDIAnnotations, DeviceListCDICRI),
			want: deviceListing{VisibleDevices: "GPU-03,GPU-01", Mounts: mounts, Annotations: annotation, CDIDevices: byUUID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); err != nil {
				t.Fatalf("config: %v", err)
			}
			if diff := cmp.Diff(tt.want, listDevices(tt.cfg, cards, key)); diff != "" {
				t.Errorf("listing (-want +got):\n%s", diff)
			}
		})
	}
}

// responseView is the part of a container's Allocate response a runtime acts on, in plain types.
type responseView struct {
	Envs        map[string]string
	Mounts      []mount
	Annotations map[string]string
	CDIDevices  []string
}

func viewOf(r *pluginapi.ContainerAllocateResponse) responseView {
	v := responseView{Envs: r.Envs}
	for k, a := range r.Annotations {
		if k == AllocatedForAnnotation {
			continue // TestAllocateNamesTheContainerServed
		}
		if v.Annotations == nil {
			v.Annotations = map[string]string{}
		}
		v.Annotations[k] = a
	}
	for _, m := range r.Mounts {
		v.Mounts = append(v.Mounts, mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range r.CdiDevices {
		v.CDIDevices = append(v.CDIDevices, d.Name)
	}
	return v
}

func TestAllocateDeviceListStrategies(t *testing.T) {
	// Four cards whose PCI bus order is the reverse of their NVML index order (card i on bus 0x20-i),
	// so CUDA numbers card 3 before card 1. The kubelet hands over card 1's ID, then card 3's.
	whole := []string{uuidOf(1), uuidOf(3)}
	slots := []string{annotations.SlotID(uuidOf(1), 2), annotations.SlotID(uuidOf(3), 0)}
	key := cdiAnnotationKey("uid-a", "main")
	order := map[string]string{EnvCUDADeviceOrder: "PCI_BUS_ID"}
	// 4096 MiB and 30 % of each card: limit i is the i-th card in CUDA's order (both the same here).
	limits := map[string]string{EnvCUDADeviceOrder: "PCI_BUS_ID", EnvMemoryLimitPrefix + "0": "4096m", EnvMemoryLimitPrefix + "1": "4096m",
		EnvSMLimit: "30", EnvMPSMemoryLimit: "0=4096M,1=4096M", EnvMPSThreadPercentage: "30"}
	with := func(env map[string]string, visible string) map[string]string {
		out := map[string]string{EnvVisibleDevices: visible}
		for k, v := range env {
			out[k] = v
		}
		return out
	}
	mounts := []mount{
		{ContainerPath: "/var/run/nvidia-container-devices/GPU-03", HostPath: "/dev/null", ReadOnly: true},
		{ContainerPath: "/var/run/nvidia-container-devices/GPU-01", HostPath: "/dev/null", ReadOnly: true},
	}
	indexCfg := strategies(DeviceListCDICRI)
	indexCfg.CDIDeviceIDStrategy = CDIDeviceIDIndex
	tests := []struct {
		name   string
		cfg    DeviceListConfig
		shares int
		c      ctr
		want   responseView
	}{
		{name: "envvar, whole cards", cfg: strategies(DeviceListEnvvar), shares: 1, c: ctr{name: "main", ids: whole},
			want: responseView{Envs: with(order, "GPU-03,GPU-01")}},
		{name: "envvar, shared slots", cfg: strategies(DeviceListEnvvar), shares: 4, c: ctr{name: "main", ids: slots, memMiB: 4096, cores: 30},
			want: responseView{Envs: with(limits, "GPU-03,GPU-01")}},
		{name: "volume-mounts, whole cards", cfg: strategies(DeviceListVolumeMounts), shares: 1, c: ctr{name: "main", ids: whole},
			want: responseView{Envs: with(order, VolumeMountsRoot), Mounts: mounts}},
		{name: "volume-mounts, shared slots", cfg: strategies(DeviceListVolumeMounts), shares: 4, c: ctr{name: "main", ids: slots, memMiB: 4096, cores: 30},
			want: responseView{Envs: with(limits, VolumeMountsRoot), Mounts: mounts}},
		{name: "cdi-annotations, whole cards", cfg: strategies(DeviceListCDIAnnotations), shares: 1, c: ctr{name: "main", ids: whole},
			want: responseView{Envs: with(order, "void"),
				Annotations: map[string]string{"cdi.k8s.io/cardinal-device-plugin_" + key: "nvidia.com/gpu=GPU-03,nvidia.com/gpu=GPU-01"}}},
		{name: "cdi-annotations, shared slots", cfg: strategies(DeviceListCDIAnnotations), shares: 4, c: ctr{name: "main", ids: slots, memMiB: 4096, cores: 30},
			want: responseView{Envs: with(limits, "void"),
				Annotations: map[string]string{"cdi.k8s.io/cardinal-device-plugin_" + key: "nvidia.com/gpu=GPU-03,nvidia.com/gpu=GPU-01"}}},
		{name: "cdi-cri, whole cards", cfg: strategies(DeviceListCDICRI), shares: 1, c: ctr{name: "main", ids: whole},
			want: responseView{Envs: with(order, "void"), CDIDevices: []string{"nvidia.com/gpu=GPU-03", "nvidia.com/gpu=GPU-01"}}},
		{name: "cdi-cri, shared slots", cfg: strategies(DeviceListCDICRI), shares: 4, c: ctr{name: "main", ids: slots, memMiB: 4096, cores: 30},
			want: responseView{Envs: with(limits, "void"), CDIDevices: []string{"nvidia.com/gpu=GPU-03", "nvidia.com/gpu=GPU-01"}}},
		{name: "cdi-cri by index, shared slots", cfg: indexCfg, shares: 4, c: ctr{name: "main", ids: slots, memMiB: 4096, cores: 30},
			want: responseView{Envs: with(limits, "void"), CDIDevices: []string{"nvidia.com/gpu=3", "nvidia.com/gpu=1"}}},
		{name: "envvar and cdi-cri, whole cards", cfg: strategies(DeviceListEnvvar, DeviceListCDICRI), shares: 1, c: ctr{name: "main", ids: whole},
			want: responseView{Envs: with(order, "GPU-03,GPU-01"), CDIDevices: []string{"nvidia.com/gpu=GPU-03", "nvidia.com/gpu=GPU-01"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cards := testCards(4, nil)
			for i := range cards {
				cards[i].PCIBusID = fmt.Sprintf("0000:%02x:00.0", 0x20-i)
			}
			p := newPlugin(pluginOptions{Node: testNode, Names: annotations.DefaultResourceNames(), Cards: cards, Shares: tt.shares,
				DeviceList: tt.cfg, Log: logr.Discard(), CacheWait: 20 * time.Millisecond})
			p.MarkSynced()
			p.UpsertPod(newPod("a", tt.c).obj(t))
			resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: tt.c.ids}}})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, viewOf(resp.ContainerResponses[0])); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDeviceListCDIAnnotationKey(t *testing.T) {
	a, b := cdiAnnotationKey("uid-a", "main"), cdiAnnotationKey("uid-a", "sidecar")
	if a == b || a != cdiAnnotationKey("uid-a", "main") {
		t.Errorf("keys %q and %q: want one stable key per container", a, b)
	}
	// The longest default key must still be a valid annotation key (a name has at most 63 characters).
	full := DefaultDeviceListConfig().CDIAnnotationPrefix + CDIAnnotationName + a
	if errs := validation.IsQualifiedName(full); len(errs) > 0 {
		t.Errorf("annotation key %q: %v", full, errs)
	}
}

func TestDeviceListFlags(t *testing.T) {
	tests := []struct {
		args    []string
		want    DeviceListStrategies
		wantErr string
	}{
		{args: nil, want: DeviceListStrategies{DeviceListEnvvar}},
		{args: []string{"--device-list-strategy=envvar,cdi-cri"}, want: DeviceListStrategies{DeviceListEnvvar, DeviceListCDICRI}},
		{args: []string{"--device-list-strategy= volume-mounts , volume-mounts,"}, want: DeviceListStrategies{DeviceListVolumeMounts}},
		{args: []string{"--device-list-strategy=envvar,cdi"}, wantErr: `invalid argument "envvar,cdi" for "--device-list-strategy" flag: unknown strategy "cdi"`},
		{args: []string{"--device-list-strategy="}, wantErr: `"--device-list-strategy" flag: no strategy in ""`},
		{args: []string{"--cdi-device-id-strategy=name"}, wantErr: `invalid argument "name" for "--cdi-device-id-strategy" flag: unknown strategy "name"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			c := DefaultDeviceListConfig()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			c.AddFlags(fs)
			err := fs.Parse(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, c.Strategies); diff != "" {
				t.Errorf("strategies (-want +got):\n%s", diff)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestDeviceListConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*DeviceListConfig)
		wantErr string
	}{
		{name: "unknown strategy", edit: func(c *DeviceListConfig) { c.Strategies = DeviceListStrategies{"cdi"} },
			wantErr: `--device-list-strategy: unknown strategy "cdi"`},
		{name: "kind without class", edit: func(c *DeviceListConfig) { c.CDIKind = "nvidia.com" },
			wantErr: `--cdi-kind: "nvidia.com" is not a CDI kind`},
		{name: "kind with a bad class", edit: func(c *DeviceListConfig) { c.CDIKind = "nvidia.com/gpu=0" },
			wantErr: `--cdi-kind: "nvidia.com/gpu=0"`},
		{name: "unknown id strategy", edit: func(c *DeviceListConfig) { c.CDIDeviceIDStrategy = "name" },
			wantErr: `--cdi-device-id-strategy: unknown strategy "name"`},
		{name: "prefix without slash", edit: func(c *DeviceListConfig) { c.CDIAnnotationPrefix = "cdi.k8s.io" },
			wantErr: `--cdi-annotation-prefix: "cdi.k8s.io"`},
		{name: "prefix not a domain", edit: func(c *DeviceListConfig) { c.CDIAnnotationPrefix = "cdi k8s/" },
			wantErr: `--cdi-annotation-prefix: "cdi k8s/"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultDeviceListConfig()
			tt.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
	if err := DefaultDeviceListConfig().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
