package chart

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestDevicePluginKubeletTopology: devicePlugin.kubeletConfig.path mounts the kubelet's
// configuration file read-only and passes it as --kubelet-config, and the CPU manager checkpoint's
// copy as --cpu-manager-state (TestDevicePluginTokenNeverBesideKubeletRoot checks the copier);
// sysfsHostPath mounts a sysfs tree as --sysfs-root; the binary takes them; none is rendered by
// default.
func TestDevicePluginKubeletTopology(t *testing.T) {
	r := render(t, map[string]any{"devicePlugin": map[string]any{
		"kubeletConfig": map[string]any{"path": "/etc/kubernetes/kubelet/kubelet-config.json", "pollInterval": "3s"},
		"sysfsHostPath": "/var/lib/testbed/node-a/sys",
	}})
	spec := get[*appsv1.DaemonSet](t, r, devicePluginName).Spec.Template.Spec
	c := container(t, spec, "device-plugin")
	flags := flagsOf(t, c.Args)
	want := map[string]string{"kubelet-config": "/etc/cardinal/kubelet/kubelet-config.json", "kubelet-poll-interval": "3s", "sysfs-root": "/host/sys",
		"cpu-manager-state": "/var/lib/cardinal/cpu-state/cpu_manager_state"}
	for name, v := range want {
		if flags[name] != v {
			t.Errorf("--%s = %q, want %q", name, flags[name], v)
		}
	}
	type mount struct {
		HostPath, MountPath string
		Type                corev1.HostPathType
		ReadOnly            bool
	}
	got := map[string]mount{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && (v.Name == "kubelet-config" || v.Name == "sysfs") {
			got[v.Name] = mount{HostPath: v.HostPath.Path, Type: *v.HostPath.Type}
		}
	}
	for _, m := range c.VolumeMounts {
		if g, ok := got[m.Name]; ok {
			g.MountPath, g.ReadOnly = m.MountPath, m.ReadOnly
			got[m.Name] = g
		}
	}
	wantMounts := map[string]mount{
		"kubelet-config": {HostPath: "/etc/kubernetes/kubelet/kubelet-config.json", MountPath: "/etc/cardinal/kubelet/kubelet-config.json", Type: corev1.HostPathFile, ReadOnly: true},
		"sysfs":          {HostPath: "/var/lib/testbed/node-a/sys", MountPath: "/host/sys", Type: corev1.HostPathDirectory, ReadOnly: true},
	}
	if diff := cmp.Diff(wantMounts, got); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}

	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../../cmd/device-plugin").CombinedOutput(); err != nil {
		t.Fatalf("build the device plugin: %v\n%s", err, out)
	}
	args := append(append([]string(nil), c.Args...), "--help")
	if out, err := exec.Command(filepath.Join(bin, "device-plugin"), args...).CombinedOutput(); err != nil {
		t.Errorf("device-plugin %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	def := container(t, get[*appsv1.DaemonSet](t, render(t, nil), devicePluginName).Spec.Template.Spec, "device-plugin")
	for _, name := range []string{"kubelet-config", "kubelet-poll-interval", "sysfs-root", "cpu-manager-state"} {
		if v, ok := flagsOf(t, def.Args)[name]; ok {
			t.Errorf("rendered by default: --%s=%s", name, v)
		}
	}

	for value, path := range map[string]string{"kubeletConfig": "config.yaml", "sysfsHostPath": "sys"} {
		v := map[string]any{value: path}
		if value == "kubeletConfig" {
			v = map[string]any{value: map[string]any{"path": path}}
		}
		if msg := renderErr(t, map[string]any{"devicePlugin": v}); !strings.Contains(msg, "is not an absolute path") {
			t.Errorf("relative %s: %s, want a refusal naming it", value, msg)
		}
	}
}
