package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const mpsDaemonName = devicePluginName + "-mps"

// hostPaths maps a pod's hostPath volumes to their paths and the container's mounts of them.
func hostPaths(spec corev1.PodSpec, c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				out[m.MountPath] = v.HostPath.Path
			}
		}
	}
	return out
}

func TestSharingModeNoneRendersNoDaemon(t *testing.T) {
	r := render(t, nil)
	if r.has("DaemonSet", mpsDaemonName) {
		t.Errorf("mode none renders the MPS daemon")
	}
	spec := get[*appsv1.DaemonSet](t, r, devicePluginName).Spec.Template.Spec
	flags := flagsOf(t, container(t, spec, "device-plugin").Args)
	if flags["sharing-mode"] != "none" {
		t.Errorf("--sharing-mode=%q, want none", flags["sharing-mode"])
	}
	for _, f := range []string{"mps-pipe-dir", "mps-shm-dir", "mps-compute-mode", "hami-core-library", "hami-core-preload-dir", "hami-core-lock-dir", "sharing-check-interval"} {
		if _, ok := flags[f]; ok {
			t.Errorf("mode none passes --%s", f)
		}
	}
	ext := flagsOf(t, container(t, get[*appsv1.Deployment](t, r, schedulerName).Spec.Template.Spec, "extender").Args)
	if ext["require-enforced-sharing"] != "false" {
		t.Errorf("extender --require-enforced-sharing=%q, want false by default", ext["require-enforced-sharing"])
	}
	ext = flagsOf(t, container(t, get[*appsv1.Deployment](t, render(t, map[string]any{"scheduler": map[string]any{"extender": map[string]any{"requireEnforcedSharing": true}}}),
		schedulerName).Spec.Template.Spec, "extender").Args)
	if ext["require-enforced-sharing"] != "true" {
		t.Errorf("requireEnforcedSharing=true: --require-enforced-sharing=%q", ext["require-enforced-sharing"])
	}
}

func TestSharingModeMPSRendersDaemonAndPluginFlags(t *testing.T) {
	r := render(t, map[string]any{"devicePlugin": map[string]any{"sharing": map[string]any{"mode": "mps", "mps": map[string]any{"root": "/run/x/mps/", "shmSize": "2Gi"}}}})
	plugin := get[*appsv1.DaemonSet](t, r, devicePluginName).Spec.Template.Spec
	pc := container(t, plugin, "device-plugin")
	flags := flagsOf(t, pc.Args)
	want := map[string]string{"sharing-mode": "mps", "mps-pipe-dir": "/run/x/mps/pipe", "mps-shm-dir": "/run/x/mps/shm", "sharing-check-interval": "5s",
		"mps-compute-mode": "EXCLUSIVE_PROCESS", "mps-tenant-dir": "/run/x/mps/tenant"}
	for k, v := range want {
		if flags[k] != v {
			t.Errorf("plugin --%s=%q, want %q", k, flags[k], v)
		}
	}
	// The plugin sees the pipe folder at its host path, read-only, to check the daemon's socket.
	if got := hostPaths(plugin, pc)["/run/x/mps/pipe"]; got != "/run/x/mps/pipe" {
		t.Errorf("plugin mounts %q at /run/x/mps/pipe, want the host's /run/x/mps/pipe", got)
	}
	// The tenant folder: the plugin writes its request there (read-write), the daemon reads it
	// (read-only); no tenant container gets it (Allocate mounts the pipe and shm folders only).
	readOnly := func(c corev1.Container, path string) (mounted, ro bool) {
		for _, m := range c.VolumeMounts {
			if m.MountPath == path {
				return true, m.ReadOnly
			}
		}
		return false, false
	}
	if got := hostPaths(plugin, pc)["/run/x/mps/tenant"]; got != "/run/x/mps/tenant" {
		t.Errorf("plugin mounts %q at /run/x/mps/tenant, want the host's /run/x/mps/tenant", got)
	}
	if m, ro := readOnly(pc, "/run/x/mps/tenant"); !m || ro {
		t.Errorf("plugin's tenant folder mounted %v, read-only %v: want read-write", m, ro)
	}
	if m, ro := readOnly(pc, "/run/x/mps/pipe"); !m || !ro {
		t.Errorf("plugin's pipe folder mounted %v, read-only %v: want read-only", m, ro)
	}
	ds := get[*appsv1.DaemonSet](t, r, mpsDaemonName)
	spec := ds.Spec.Template.Spec
	if spec.HostIPC {
		t.Errorf("the MPS daemon uses hostIPC; clients share its /dev/shm through the tmpfs instead")
	}
	if diff := cmp.Diff(plugin.NodeSelector, spec.NodeSelector); diff != "" {
		t.Errorf("the daemon runs on other nodes than the plugin (-plugin +daemon):\n%s", diff)
	}
	d := container(t, spec, "mps-control-daemon")
	if !slices.Equal(d.Command, []string{"sh", "/opt/cardinal/mps-daemon.sh"}) {
		t.Errorf("daemon command %v, want the chart's script", d.Command)
	}
	env := map[string]string{}
	for _, e := range d.Env {
		env[e.Name] = e.Value
	}
	if env["CUDA_MPS_PIPE_DIRECTORY"] != "/run/cardinal/mps/pipe" || env["NVIDIA_DRIVER_CAPABILITIES"] != "compute,utility" || env["NVIDIA_VISIBLE_DEVICES"] != "all" ||
		env["CARDINAL_MPS_SHARES"] != "1" || env["CARDINAL_MPS_COMPUTE_MODE"] != "EXCLUSIVE_PROCESS" || env["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" ||
		env["CARDINAL_MPS_TENANT_FILE"] != "/run/cardinal/mps/tenant/request" || env["CARDINAL_MPS_SHM_DIR"] != "/dev/shm" {
		t.Errorf("daemon env %v", env)
	}
	if d.SecurityContext == nil || d.SecurityContext.Privileged == nil || !*d.SecurityContext.Privileged {
		t.Errorf("daemon not privileged (it sets the cards' compute mode): %+v", d.SecurityContext)
	}
	if probe := strings.Join(d.ReadinessProbe.Exec.Command, " "); !strings.Contains(probe, "/run/cardinal/mps/pipe/cardinal-ready") {
		t.Errorf("daemon readiness %q does not require the script's ready file", probe)
	}
	script, err := os.ReadFile(mpsScript)
	if err != nil {
		t.Fatal(err)
	}
	if got := get[*corev1.ConfigMap](t, r, mpsDaemonName).Data["mps-daemon.sh"]; got != string(script) {
		t.Errorf("the ConfigMap's script differs from %s", mpsScript)
	}
	wantMounts := map[string]string{"/run/cardinal/mps/pipe": "/run/x/mps/pipe", "/run/cardinal/mps/log": "/run/x/mps/log", "/dev/shm": "/run/x/mps/shm",
		"/run/cardinal/mps/tenant": "/run/x/mps/tenant"}
	if diff := cmp.Diff(wantMounts, hostPaths(spec, d)); diff != "" {
		t.Errorf("daemon host mounts (-want +got):\n%s", diff)
	}
	if m, ro := readOnly(d, "/run/cardinal/mps/tenant"); !m || !ro {
		t.Errorf("daemon's tenant folder mounted %v, read-only %v: want read-only", m, ro)
	}
	if d.ReadinessProbe == nil || d.ReadinessProbe.Exec == nil || !strings.Contains(strings.Join(d.ReadinessProbe.Exec.Command, " "), "nvidia-cuda-mps-control") {
		t.Errorf("daemon readiness probe %+v does not ask the control daemon", d.ReadinessProbe)
	}
	if len(spec.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the shm mounter", len(spec.InitContainers))
	}
	init := spec.InitContainers[0]
	if script := strings.Join(init.Command, " "); !strings.Contains(script, "size=2Gi") || !strings.Contains(script, "mount -t tmpfs") {
		t.Errorf("shm mounter script %q does not mount a 2Gi tmpfs", script)
	}
	if len(init.VolumeMounts) != 1 || init.VolumeMounts[0].MountPropagation == nil || *init.VolumeMounts[0].MountPropagation != corev1.MountPropagationBidirectional {
		t.Errorf("shm mounter mounts %+v, want the root with Bidirectional propagation", init.VolumeMounts)
	}
}

// The daemon gets every card whatever the device-list strategy: NVIDIA_VISIBLE_DEVICES=all in a
// privileged container (honoured even where the toolkit refuses it from unprivileged ones), /dev/null
// at /var/run/nvidia-container-devices/all under volume-mounts, and a CDI annotation for every card
// under the CDI strategies. The shares and the compute mode reach its script.
func TestMPSDaemonGetsItsCardsUnderEveryStrategy(t *testing.T) {
	for _, tc := range []struct {
		strategies []string
		volume     bool
		cdi        string
	}{
		{[]string{"envvar"}, false, ""},
		{[]string{"volume-mounts"}, true, ""},
		{[]string{"cdi-annotations"}, false, "nvidia.com/gpu=all"},
		{[]string{"cdi-cri"}, false, "nvidia.com/gpu=all"},
		{[]string{"volume-mounts", "cdi-cri"}, true, "nvidia.com/gpu=all"},
	} {
		r := render(t, map[string]any{"devicePlugin": map[string]any{"shares": 4, "deviceListStrategy": tc.strategies,
			"sharing": map[string]any{"mode": "mps", "mps": map[string]any{"computeMode": "DEFAULT"}}}})
		ds := get[*appsv1.DaemonSet](t, r, mpsDaemonName)
		spec := ds.Spec.Template.Spec
		d := container(t, spec, "mps-control-daemon")
		env := map[string]string{}
		for _, e := range d.Env {
			env[e.Name] = e.Value
		}
		if env["NVIDIA_VISIBLE_DEVICES"] != "all" || env["CARDINAL_MPS_SHARES"] != "4" || env["CARDINAL_MPS_COMPUTE_MODE"] != "DEFAULT" {
			t.Errorf("%v: daemon env %v", tc.strategies, env)
		}
		if d.SecurityContext == nil || d.SecurityContext.Privileged == nil || !*d.SecurityContext.Privileged {
			t.Errorf("%v: daemon not privileged", tc.strategies)
		}
		if got := hostPaths(spec, d)["/var/run/nvidia-container-devices/all"]; (got == "/dev/null") != tc.volume {
			t.Errorf("%v: /var/run/nvidia-container-devices/all mounts %q, want /dev/null: %v", tc.strategies, got, tc.volume)
		}
		if got := ds.Spec.Template.Annotations["cdi.k8s.io/cardinal-mps-daemon"]; got != tc.cdi {
			t.Errorf("%v: CDI annotation %q, want %q", tc.strategies, got, tc.cdi)
		}
	}
	if msg := renderErr(t, map[string]any{"devicePlugin": map[string]any{"sharing": map[string]any{"mode": "mps", "mps": map[string]any{"computeMode": "PROHIBITED"}}}}); !strings.Contains(msg, "computeMode") {
		t.Errorf("computeMode PROHIBITED: %s, want a schema error naming it", msg)
	}
}

func TestSharingModeHAMiCoreRendersPluginFlags(t *testing.T) {
	r := render(t, map[string]any{"devicePlugin": map[string]any{"sharing": map[string]any{"mode": "hami-core",
		"hamiCore": map[string]any{"libraryPath": "/opt/hami/lib/libvgpu.so", "preloadDir": "/var/lib/x"}}}})
	if r.has("DaemonSet", mpsDaemonName) {
		t.Errorf("mode hami-core renders the MPS daemon")
	}
	plugin := get[*appsv1.DaemonSet](t, r, devicePluginName).Spec.Template.Spec
	pc := container(t, plugin, "device-plugin")
	flags := flagsOf(t, pc.Args)
	for k, v := range map[string]string{"sharing-mode": "hami-core", "hami-core-library": "/opt/hami/lib/libvgpu.so", "hami-core-preload-dir": "/var/lib/x", "hami-core-lock-dir": "/tmp/vgpulock"} {
		if flags[k] != v {
			t.Errorf("plugin --%s=%q, want %q", k, flags[k], v)
		}
	}
	want := map[string]string{"/opt/hami/lib": "/opt/hami/lib", "/var/lib/x": "/var/lib/x", "/tmp/vgpulock": "/tmp/vgpulock"}
	got := hostPaths(plugin, pc)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("plugin mounts %q at %s, want the host's %s", got[k], k, v)
		}
	}
}

func TestSharingValuesRefused(t *testing.T) {
	for _, v := range []map[string]any{
		{"mode": "vgpu"},
		{"mode": "mps", "mps": map[string]any{"root": "run/mps"}},
		{"mode": "hami-core", "hamiCore": map[string]any{"libraryPath": "libvgpu.so"}},
		{"mode": "mps", "mpsRoot": "/x"},
	} {
		if msg := renderErr(t, map[string]any{"devicePlugin": map[string]any{"sharing": v}}); !strings.Contains(msg, "sharing") {
			t.Errorf("%v: %s, want a schema error naming sharing", v, msg)
		}
	}
}

// The device plugin binary accepts what the chart passes in each mode (pflag parses all of it
// before --help).
func TestSharingFlagsAcceptedByThePlugin(t *testing.T) {
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../../cmd/device-plugin").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, mode := range []string{"none", "mps", "hami-core"} {
		r := render(t, map[string]any{"devicePlugin": map[string]any{"sharing": map[string]any{"mode": mode}}})
		args := container(t, get[*appsv1.DaemonSet](t, r, devicePluginName).Spec.Template.Spec, "device-plugin").Args
		if out, err := exec.Command(filepath.Join(bin, "device-plugin"), append(slices.Clone(args), "--help")...).CombinedOutput(); err != nil {
			t.Errorf("mode %s: %v\n%s", mode, err, out)
		}
	}
}

func TestKernelMemoryLimitsMountTheHostCgroups(t *testing.T) {
	for _, c := range []struct {
		name   string
		values map[string]any
		on     bool
		host   string
	}{
		{"on by default", map[string]any{}, true, "/sys/fs/cgroup"},
		{"another cgroup path", map[string]any{"sharing": map[string]any{"kernelMemoryLimits": map[string]any{"cgroupHostPath": "/run/cg"}}}, true, "/run/cg"},
		{"turned off", map[string]any{"sharing": map[string]any{"mode": "mps", "kernelMemoryLimits": map[string]any{"enabled": false}}}, false, ""},
		{"the simulated NVML has none", simulated, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := get[*appsv1.DaemonSet](t, render(t, map[string]any{"devicePlugin": c.values}), devicePluginName).Spec.Template.Spec
			pc := container(t, spec, "device-plugin")
			flags := flagsOf(t, pc.Args)
			mounted := hostPaths(spec, pc)["/host/cgroup"]
			if c.on && (flags["kernel-memory-limits"] != "true" || flags["cgroup-root"] != "/host/cgroup" || mounted != c.host) {
				t.Errorf("--kernel-memory-limits=%q --cgroup-root=%q, /host/cgroup from %q; want true, /host/cgroup, %s", flags["kernel-memory-limits"], flags["cgroup-root"], mounted, c.host)
			}
			if !c.on && (flags["kernel-memory-limits"] != "false" || mounted != "") {
				t.Errorf("--kernel-memory-limits=%q, /host/cgroup from %q; want false and no mount", flags["kernel-memory-limits"], mounted)
			}
		})
	}
	if msg := renderErr(t, map[string]any{"devicePlugin": map[string]any{"sharing": map[string]any{"kernelMemoryLimits": map[string]any{"cgroupHostPath": "sys/fs/cgroup"}}}}); !strings.Contains(msg, "cgroupHostPath") {
		t.Errorf("relative cgroupHostPath: %s, want a schema error naming it", msg)
	}
}
