package chart

import (
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// deviceListFlags are the device plugin's flags for naming cards to the runtime.
var deviceListFlags = []string{"device-list-strategy", "cdi-kind", "cdi-device-id-strategy", "cdi-annotation-prefix"}

// TestDevicePluginDeviceListStrategy renders each strategy: the flags the plugin gets (the CDI ones
// only with a CDI strategy), whether its own container gets the /dev/null mount that gives it every
// card through a toolkit reading volume mounts, and that the binary accepts those flags.
func TestDevicePluginDeviceListStrategy(t *testing.T) {
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../../cmd/device-plugin").CombinedOutput(); err != nil {
		t.Fatalf("build the device plugin: %v\n%s", err, out)
	}
	cdiDefaults := map[string]string{"cdi-kind": "nvidia.com/gpu", "cdi-device-id-strategy": "uuid", "cdi-annotation-prefix": "cdi.k8s.io/"}
	with := func(strategy string, m map[string]string) map[string]string {
		out := map[string]string{"device-list-strategy": strategy}
		maps.Copy(out, m)
		return out
	}
	sim := func(v map[string]any) map[string]any {
		out := maps.Clone(simulated)
		maps.Copy(out, v)
		return out
	}
	tests := []struct {
		name      string
		plugin    map[string]any
		wantFlags map[string]string
		wantMount bool
	}{
		{name: "default: envvar", wantFlags: with("envvar", nil)},
		{name: "volume-mounts", plugin: map[string]any{"deviceListStrategy": []string{"volume-mounts"}},
			wantFlags: with("volume-mounts", nil), wantMount: true},
		{name: "cdi-annotations", plugin: map[string]any{"deviceListStrategy": []string{"cdi-annotations"}},
			wantFlags: with("cdi-annotations", cdiDefaults)},
		{name: "cdi-cri", plugin: map[string]any{"deviceListStrategy": []string{"cdi-cri"}},
			wantFlags: with("cdi-cri", cdiDefaults)},
		{name: "cdi-cri by index with another kind and prefix",
			plugin: map[string]any{"deviceListStrategy": []string{"cdi-cri"},
				"cdi": map[string]any{"kind": "example.com/accel", "deviceIdStrategy": "index", "annotationPrefix": "nvidia.cdi.k8s.io/"}},
			wantFlags: with("cdi-cri", map[string]string{"cdi-kind": "example.com/accel", "cdi-device-id-strategy": "index", "cdi-annotation-prefix": "nvidia.cdi.k8s.io/"})},
		{name: "a list of all four", plugin: map[string]any{"deviceListStrategy": []string{"envvar", "volume-mounts", "cdi-annotations", "cdi-cri"}},
			wantFlags: with("envvar,volume-mounts,cdi-annotations,cdi-cri", cdiDefaults), wantMount: true},
		{name: "a comma-separated string", plugin: map[string]any{"deviceListStrategy": "volume-mounts,cdi-cri"},
			wantFlags: with("volume-mounts,cdi-cri", cdiDefaults), wantMount: true},
		{name: "the plugin's mount asked for with cdi-cri", plugin: map[string]any{"deviceListStrategy": []string{"cdi-cri"}, "allDevicesVolumeMount": true},
			wantFlags: with("cdi-cri", cdiDefaults), wantMount: true},
		// helm upgrade --reuse-values from a release made before these values existed: they are absent
		// (null removes them here); the plugin gets envvar, no CDI flags, no mount.
		{name: "values of an older release", plugin: map[string]any{"deviceListStrategy": nil, "cdi": nil, "allDevicesVolumeMount": nil},
			wantFlags: with("envvar", nil)},
		{name: "older release values with a CDI strategy set", plugin: map[string]any{"deviceListStrategy": []string{"cdi-cri"}, "cdi": nil},
			wantFlags: with("cdi-cri", cdiDefaults)},
		{name: "simulated cards: no mount", plugin: sim(map[string]any{"deviceListStrategy": []string{"volume-mounts"}}),
			wantFlags: with("volume-mounts", nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var values map[string]any
			if tt.plugin != nil {
				values = map[string]any{"devicePlugin": tt.plugin}
			}
			spec := get[*appsv1.DaemonSet](t, render(t, values), devicePluginName).Spec.Template.Spec
			c := container(t, spec, "device-plugin")
			flags := flagsOf(t, c.Args)
			got := map[string]string{}
			for _, f := range deviceListFlags {
				if v, ok := flags[f]; ok {
					got[f] = v
				}
			}
			if diff := cmp.Diff(tt.wantFlags, got); diff != "" {
				t.Errorf("device-list flags (-want +got):\n%s", diff)
			}
			var mounted, volume bool
			for _, m := range c.VolumeMounts {
				if m.Name == "nvidia-all-devices" {
					mounted = m.MountPath == "/var/run/nvidia-container-devices/all" && m.ReadOnly
				}
			}
			for _, v := range spec.Volumes {
				if v.Name == "nvidia-all-devices" {
					volume = v.HostPath != nil && v.HostPath.Path == "/dev/null" && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathCharDev
				}
			}
			if mounted != tt.wantMount || volume != tt.wantMount {
				t.Errorf("/dev/null at /var/run/nvidia-container-devices/all: mount %v, hostPath volume %v; want %v", mounted, volume, tt.wantMount)
			}
			// pflag parses every argument before --help: a flag the binary refuses fails the run.
			if out, err := exec.Command(filepath.Join(bin, "device-plugin"), append(append([]string(nil), c.Args...), "--help")...).CombinedOutput(); err != nil {
				t.Errorf("device-plugin %s --help: %v\n%s", strings.Join(c.Args, " "), err, out)
			}
		})
	}
}

func TestDevicePluginDeviceListValuesRefused(t *testing.T) {
	tests := []struct {
		name   string
		plugin map[string]any
		want   string
	}{
		// values.schema.json refuses these.
		{name: "unknown strategy", plugin: map[string]any{"deviceListStrategy": []string{"envvar", "cdi"}},
			want: "/devicePlugin/deviceListStrategy/1"},
		{name: "unknown strategy in a string", plugin: map[string]any{"deviceListStrategy": "envvar,volume-mount"},
			want: "/devicePlugin/deviceListStrategy"},
		{name: "no strategy", plugin: map[string]any{"deviceListStrategy": []string{}},
			want: "/devicePlugin/deviceListStrategy"},
		{name: "unknown id strategy", plugin: map[string]any{"cdi": map[string]any{"deviceIdStrategy": "name"}},
			want: "/devicePlugin/cdi/deviceIdStrategy"},
		{name: "prefix without a slash", plugin: map[string]any{"cdi": map[string]any{"annotationPrefix": "cdi.k8s.io"}},
			want: "/devicePlugin/cdi/annotationPrefix"},
		// validate.yaml refuses these.
		{name: "kind without a class", plugin: map[string]any{"cdi": map[string]any{"kind": "nvidia.com"}},
			want: `devicePlugin.cdi.kind: "nvidia.com" is not a CDI kind vendor/class`},
		{name: "kind with a device name", plugin: map[string]any{"cdi": map[string]any{"kind": "nvidia.com/gpu=0"}},
			want: `devicePlugin.cdi.kind: "nvidia.com/gpu=0" is not a CDI kind vendor/class`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := renderErr(t, map[string]any{"devicePlugin": tt.plugin}); !strings.Contains(got, tt.want) {
				t.Errorf("error %q, want it to contain %q", got, tt.want)
			}
		})
	}
}
