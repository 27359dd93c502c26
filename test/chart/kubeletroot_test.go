package chart

import (
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// holdsToken tells whether container c of a pod with spec gets a ServiceAccount token: every
// container does unless the pod turns automounting off (the chart's ServiceAccount is not read: a
// pod that leaves it unset is taken to mount one); then the containers that mount a projected
// token or any Secret.
func holdsToken(spec corev1.PodSpec, c corev1.Container) bool {
	if ptr.Deref(spec.AutomountServiceAccountToken, true) {
		return true
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v := volumes[m.Name]
		if v.Secret != nil {
			return true
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ServiceAccountToken != nil || s.Secret != nil {
					return true
				}
			}
		}
	}
	return false
}

// kubeletRootMounts are the mounts of c whose host path is the kubelet's root or a folder above
// it: those through which its client key (pki/) and every pod's volumes can be read.
func kubeletRootMounts(spec corev1.PodSpec, c corev1.Container, root string) []corev1.VolumeMount {
	root = path.Clean(root)
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = path.Clean(v.HostPath.Path)
		}
	}
	var out []corev1.VolumeMount
	for _, m := range c.VolumeMounts {
		p, ok := hostPaths[m.Name]
		if ok && (p == root || p == "/" || strings.HasPrefix(root, p+"/")) {
			out = append(out, m)
		}
	}
	return out
}

// TestDevicePluginTokenNeverBesideKubeletRoot: no container of the device plugin's pod that holds
// its ServiceAccount token mounts the kubelet's root (its client key, every pod's Secrets and
// tokens), whatever the values. The CPU manager checkpoint is read through the cpu-state-copier
// container, which alone mounts that root: read-only, no token, no capabilities, no port, and its
// copy reaches the plugin through an emptyDir the plugin mounts read-only (issue 34 item 4).
func TestDevicePluginTokenNeverBesideKubeletRoot(t *testing.T) {
	topology := map[string]any{"path": "/var/lib/kubelet/config.yaml"}
	cases := map[string]struct {
		values map[string]any
		root   string
		copier bool
	}{
		"defaults":                     {values: nil, root: "/var/lib/kubelet"},
		"kubelet config":               {values: map[string]any{"kubeletConfig": topology}, root: "/var/lib/kubelet", copier: true},
		"another kubelet root":         {values: map[string]any{"kubeletConfig": topology, "kubeletRootDir": "/data/kubelet/"}, root: "/data/kubelet", copier: true},
		"no CPU checkpoint":            {values: map[string]any{"kubeletConfig": map[string]any{"path": "/var/lib/kubelet/config.yaml", "cpuManagerState": false}}, root: "/var/lib/kubelet"},
		"mps":                          {values: map[string]any{"kubeletConfig": topology, "sharing": map[string]any{"mode": "mps"}, "shares": 2}, root: "/var/lib/kubelet", copier: true},
		"hami-core and MIG":            {values: map[string]any{"kubeletConfig": topology, "sharing": map[string]any{"mode": "hami-core"}, "mig": map[string]any{"monitor": true}}, root: "/var/lib/kubelet", copier: true},
		"simulated with volume-mounts": {values: map[string]any{"kubeletConfig": topology, "simulate": simulated["simulate"], "deviceListStrategy": []any{"volume-mounts", "cdi-cri"}}, root: "/var/lib/kubelet", copier: true},
	}
	var build sync.Once
	bin, binDir := "", t.TempDir()
	buildPlugin := func(t *testing.T) string {
		build.Do(func() {
			if out, err := exec.Command("go", "build", "-o", binDir+"/", "../../cmd/device-plugin").CombinedOutput(); err != nil {
				t.Fatalf("build the device plugin: %v\n%s", err, out)
			}
			bin = filepath.Join(binDir, "device-plugin")
		})
		if bin == "" {
			t.Fatal("the device plugin did not build")
		}
		return bin
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var values map[string]any
			if tc.values != nil {
				values = map[string]any{"devicePlugin": tc.values}
			}
			spec := get[*appsv1.DaemonSet](t, render(t, values), devicePluginName).Spec.Template.Spec
			var copiers []corev1.Container
			for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
				mounts := kubeletRootMounts(spec, c, tc.root)
				token := holdsToken(spec, c)
				if token && len(mounts) > 0 {
					t.Errorf("container %s holds the ServiceAccount token and mounts the kubelet's root: %+v", c.Name, mounts)
				}
				if c.Name == "device-plugin" && !token {
					t.Errorf("the plugin's container holds no token: it cannot write its Node")
				}
				if len(mounts) > 0 {
					copiers = append(copiers, c)
				}
			}
			if !tc.copier {
				if len(copiers) > 0 {
					t.Errorf("the kubelet's root is mounted without the CPU checkpoint asked for, by %s", copiers[0].Name)
				}
				if hasContainer(spec, "cpu-state-copier") {
					t.Error("cpu-state-copier rendered without the CPU checkpoint asked for")
				}
				return
			}
			if len(copiers) != 1 || copiers[0].Name != "cpu-state-copier" {
				t.Fatalf("containers mounting the kubelet's root: %v, want cpu-state-copier alone", names(copiers))
			}
			checkCopier(t, spec, copiers[0], tc.root, buildPlugin(t))
		})
	}
}

func hasContainer(spec corev1.PodSpec, name string) bool {
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		if c.Name == name {
			return true
		}
	}
	return false
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// checkCopier checks the copier container: it mounts the kubelet's root read-only and nothing else
// of the host, runs only the copier, with no capabilities and no port, and writes the copy where
// the plugin's --cpu-manager-state reads it, through an emptyDir.
func checkCopier(t *testing.T, spec corev1.PodSpec, copier corev1.Container, root, bin string) {
	t.Helper()
	for _, m := range kubeletRootMounts(spec, copier, root) {
		if !m.ReadOnly || m.SubPath != "" {
			t.Errorf("copier mounts the kubelet's root %+v, want read-only", m)
		}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	var hostMounts, emptyDirs []corev1.VolumeMount
	for _, m := range copier.VolumeMounts {
		switch v := volumes[m.Name]; {
		case v.HostPath != nil:
			hostMounts = append(hostMounts, m)
		case v.EmptyDir != nil:
			emptyDirs = append(emptyDirs, m)
		default:
			t.Errorf("copier mounts %s, neither the kubelet's root nor an emptyDir", m.Name)
		}
	}
	if len(hostMounts) != 1 {
		t.Errorf("copier's host mounts: %+v, want the kubelet's root alone", hostMounts)
	}
	sc := copier.SecurityContext
	if sc == nil || ptr.Deref(sc.Privileged, true) || ptr.Deref(sc.AllowPrivilegeEscalation, true) || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) ||
		sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("copier securityContext %+v, want not privileged, no escalation, read-only root, drop ALL and add none", sc)
	}
	if len(copier.Ports) > 0 || copier.Command != nil || len(copier.EnvFrom) > 0 || len(copier.Env) > 0 {
		t.Errorf("copier has ports %v, command %v, env %v %v: want none", copier.Ports, copier.Command, copier.Env, copier.EnvFrom)
	}
	flags := flagsOf(t, copier.Args)
	src, dst, ok := strings.Cut(flags["copy-cpu-manager-state"], ":")
	if !ok || len(flags) != 3 || flags["v"] == "" || flags["log-format"] == "" {
		t.Fatalf("copier args %v, want --copy-cpu-manager-state=SRC:DST and the log flags", copier.Args)
	}
	if m := hostMounts[0]; len(hostMounts) == 1 && path.Join(m.MountPath, "cpu_manager_state") != src {
		t.Errorf("copier source %s, want cpu_manager_state in the kubelet's root at %s", src, m.MountPath)
	}
	plugin := container(t, spec, "device-plugin")
	read := flagsOf(t, plugin.Args)["cpu-manager-state"]
	var shared string
	for _, m := range emptyDirs {
		if path.Dir(dst) == m.MountPath {
			shared = m.Name
		}
	}
	if shared == "" {
		t.Fatalf("copier destination %s is not in one of its emptyDirs %+v", dst, emptyDirs)
	}
	found := false
	for _, m := range plugin.VolumeMounts {
		if m.Name == shared {
			found = true
			if want := path.Join(m.MountPath, path.Base(dst)); read != want || !m.ReadOnly {
				t.Errorf("the plugin reads --cpu-manager-state=%s, mounts the copy's folder %+v; want %s, read-only", read, m, want)
			}
		}
	}
	if !found {
		t.Errorf("the plugin does not mount the copier's folder %s", shared)
	}

	args := append(append([]string(nil), copier.Args...), "--help")
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Errorf("device-plugin %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestREADMEListsThePluginsHostPaths compares docs/device-plugin.md's table of the device plugin's host paths
// (between plugin-host-paths markers) with the host paths the chart's
// DaemonSet mounts, each container and its access, over renders that turn every option on: a host
// path added to the chart fails here until the page lists it, and a row the chart no longer
// mounts fails too (issue 34 item 4: "what the plugin can read is listed in the README").
func TestREADMEListsThePluginsHostPaths(t *testing.T) {
	raw, err := os.ReadFile("../../docs/device-plugin.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- plugin-host-paths:begin -->", "<!-- plugin-host-paths:end -->"
	s := string(raw)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("docs/device-plugin.md: no %s ... %s table", begin, end)
	}
	// The values of the renders below, as the page's <...> names them.
	values := map[string]string{
		"<root>": "/data/kubelet", "<sharing.kernelMemoryLimits.cgroupHostPath>": "/host/cgroup2", "<kubeletConfig.path>": "/etc/kubelet/config.yaml",
		"<sysfsHostPath>": "/data/sys", "<sharing.mps.root>": "/data/mps", "<dirname(sharing.hamiCore.libraryPath)>": "/data/vgpu",
		"<sharing.hamiCore.preloadDir>": "/data/preload", "<sharing.hamiCore.lockDir>": "/data/lock", "<driverLibHostPath>": "/data/nvidia",
	}
	var listed []string
	for _, line := range strings.Split(s[i:j], "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 5 {
			t.Errorf("docs/device-plugin.md: host-path row with %d cells, want 5: %s", len(cells), line)
			continue
		}
		for k := range cells {
			cells[k] = strings.TrimSpace(strings.ReplaceAll(cells[k], "`", ""))
		}
		path := cells[0]
		for name, v := range values {
			path = strings.ReplaceAll(path, name, v)
		}
		listed = append(listed, path+" | "+cells[1]+" | "+cells[2])
	}
	common := map[string]any{
		"kubeletRootDir": "/data/kubelet", "kubeletConfig": map[string]any{"path": "/etc/kubelet/config.yaml"}, "sysfsHostPath": "/data/sys",
		"driverLibHostPath": "/data/nvidia", "deviceListStrategy": []any{"volume-mounts"},
	}
	withSharing := func(sharing map[string]any) map[string]any {
		v := maps.Clone(common)
		sharing["kernelMemoryLimits"] = map[string]any{"cgroupHostPath": "/host/cgroup2"}
		v["sharing"] = sharing
		return map[string]any{"devicePlugin": v}
	}
	var mounted []string
	for _, vals := range []map[string]any{
		withSharing(map[string]any{"mode": "mps", "mps": map[string]any{"root": "/data/mps"}}),
		withSharing(map[string]any{"mode": "hami-core", "hamiCore": map[string]any{"libraryPath": "/data/vgpu/libvgpu.so", "preloadDir": "/data/preload", "lockDir": "/data/lock"}}),
		nil,
	} {
		spec := get[*appsv1.DaemonSet](t, render(t, vals), devicePluginName).Spec.Template.Spec
		hostPaths := map[string]string{}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				hostPaths[v.Name] = path.Clean(v.HostPath.Path)
			}
		}
		for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
			for _, m := range c.VolumeMounts {
				p, ok := hostPaths[m.Name]
				if !ok {
					continue
				}
				if vals == nil && p != "/var/lib/kubelet/device-plugins" && p != "/var/lib/kubelet/pod-resources" && p != "/sys/fs/cgroup" {
					t.Errorf("the default render mounts %s in %s", p, c.Name)
				}
				if vals == nil {
					continue // the defaults: checked above, the table is in terms of the values
				}
				access := "read-write"
				if m.ReadOnly {
					access = "read-only"
				}
				if row := p + " | " + c.Name + " | " + access; !slices.Contains(mounted, row) {
					mounted = append(mounted, row)
				}
			}
		}
	}
	if len(mounted) < 13 {
		t.Errorf("the renders mount %d host paths: %v; the walk over them is broken", len(mounted), mounted)
	}
	for _, m := range mounted {
		if !slices.Contains(listed, m) {
			t.Errorf("the chart mounts, docs/device-plugin.md's host-path table does not list: %s", m)
		}
	}
	for _, l := range listed {
		if !slices.Contains(mounted, l) {
			t.Errorf("docs/device-plugin.md's host-path table lists what the chart does not mount: %s", l)
		}
	}
}
