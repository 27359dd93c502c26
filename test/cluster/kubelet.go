package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-client/pkg/fake"
	"sigs.k8s.io/yaml"
)

const kubeletReadyTimeout = 90 * time.Second

// fakeImageSize is what the fake CRI reports for every image; the kubelet rejects size 0.
const fakeImageSize = 1 << 20

// kernelTunables are the sysctls the kubelet checks with protectKernelDefaults and the values it
// wants. Inside a kubelet's namespace a file holding the value is bind-mounted over each, so the
// host's settings are neither read nor changed.
var kernelTunables = [...]struct{ path, value string }{
	{"/proc/sys/vm/overcommit_memory", "1"},
	{"/proc/sys/vm/panic_on_oom", "0"},
	{"/proc/sys/kernel/panic", "10"},
	{"/proc/sys/kernel/panic_on_oops", "1"},
	{"/proc/sys/kernel/keys/root_maxkeys", "1000000"},
	{"/proc/sys/kernel/keys/root_maxbytes", "25000000"},
}

// namespaceScript runs as `sh -c` inside a fresh private mount namespace: it bind-mounts the
// kubelet's folders over /var/lib and /var/log, the tunables' files over /proc/sys and the
// synthetic machine (if any) over /sys/devices/system/{cpu,node} and /proc/cpuinfo, then becomes
// the kubelet. Arguments: $1 lib folder, $2 log folder, $3 count of (source, target) pairs, then
// the pairs, then the command.
const namespaceScript = `set -e
mount --bind "$1" /var/lib
mount --bind "$2" /var/log
n=$3
shift 3
while [ "$n" -gt 0 ]; do mount --bind "$1" "$2"; shift 2; n=$((n-1)); done
exec "$@"`

// KubeletSpec describes a real kubelet.
type KubeletSpec struct {
	Name   string
	Labels map[string]string
	// Config is merged over the harness's KubeletConfiguration (top-level keys replace the
	// harness's), e.g. {"maxPods": 20}. The fields below win over it, and the keys the harness
	// needs to isolate the kubelet win over everything.
	Config map[string]any

	// Machine, when set, is the hardware the kubelet sees instead of the host's: a synthetic
	// sysfs/procfs topology mounted in its namespace (see Machine). The kubelet's node then has
	// Machine.NumCPUs() CPUs of capacity.
	Machine *Machine
	// TopologyManagerPolicy is none, best-effort, restricted or single-numa-node; "" keeps the
	// kubelet's default (none).
	TopologyManagerPolicy string
	// TopologyManagerScope is container or pod; "" keeps the kubelet's default (container).
	TopologyManagerScope string
	// CPUManagerPolicy is none or static; "" keeps the kubelet's default (none). The static
	// policy needs ReservedCPUs (or a cpu reservation in Config's systemReserved/kubeReserved).
	CPUManagerPolicy string
	// ReservedCPUs is the kubelet's reservedSystemCPUs, a CPU list such as "0" or "0,8": CPUs
	// the static policy never hands out exclusively.
	ReservedCPUs string
	// MemoryManagerPolicy is None or Static; "" keeps the kubelet's default (None). For Static,
	// unless Config sets systemReserved or reservedMemory, the harness reserves
	// staticMemoryReserve of NUMA node 0 (the kubelet refuses Static without a reservation).
	MemoryManagerPolicy string
	// StaticPods are pod manifests (file name -> YAML) written to the kubelet's staticPodPath
	// before it starts: it runs them as static pods and creates their mirror pods in the API
	// server. None: the kubelet has no staticPodPath.
	StaticPods map[string]string
}

// staticMemoryReserve is the memory the harness reserves on NUMA node 0 for the Static memory
// manager when the spec does not say.
const staticMemoryReserve = "64Mi"

// resourceManagerConfig is the KubeletConfiguration of spec's typed resource-manager fields.
func (spec KubeletSpec) resourceManagerConfig() (map[string]any, error) {
	cfg := map[string]any{}
	for key, v := range map[string]string{
		"topologyManagerPolicy": spec.TopologyManagerPolicy,
		"topologyManagerScope":  spec.TopologyManagerScope,
		"cpuManagerPolicy":      spec.CPUManagerPolicy,
		"reservedSystemCPUs":    spec.ReservedCPUs,
		"memoryManagerPolicy":   spec.MemoryManagerPolicy,
	} {
		if v != "" {
			cfg[key] = v
		}
	}
	_, sysReserved := spec.Config["systemReserved"]
	_, numaReserved := spec.Config["reservedMemory"]
	if spec.MemoryManagerPolicy == "Static" && !sysReserved && !numaReserved {
		// The reservations must add up: systemReserved + kubeReserved + the hard eviction
		// threshold (0 here) = the sum of reservedMemory.
		cfg["systemReserved"] = map[string]any{"memory": staticMemoryReserve}
		cfg["reservedMemory"] = []any{map[string]any{"numaNode": 0, "limits": map[string]any{"memory": staticMemoryReserve}}}
	}
	if spec.CPUManagerPolicy == "static" && spec.ReservedCPUs == "" && !reservesCPU(spec.Config) {
		return nil, errors.New("cpuManagerPolicy static needs ReservedCPUs (or a cpu reservation in systemReserved or kubeReserved): the kubelet refuses to start without")
	}
	return cfg, nil
}

// reservesCPU reports whether config reserves cpu in systemReserved or kubeReserved.
func reservesCPU(config map[string]any) bool {
	for _, key := range []string{"systemReserved", "kubeReserved"} {
		if m, ok := config[key].(map[string]any); ok && m["cpu"] != nil {
			return true
		}
		if m, ok := config[key].(map[string]string); ok && m["cpu"] != "" {
			return true
		}
	}
	return false
}

// Kubelet is a real kubelet in its own private mount namespace, where a per-kubelet folder is
// mounted over /var/lib and /var/log, talking to an in-process fake CRI: pods reach Running, no
// container runs. The paths are host-visible: a unix socket works through any path to the same
// inode, so a device plugin on the host can serve in DevicePluginDir and register at
// DevicePluginDir/kubelet.sock, and the kubelet finds it in its own /var/lib/kubelet/device-plugins.
type Kubelet struct {
	Name string
	// Root is the host-visible path of the kubelet's /var/lib/kubelet.
	Root string
	// DevicePluginDir is Root/device-plugins: kubelet.sock and the plugins' sockets.
	DevicePluginDir string
	// PodResourcesSocket is the kubelet's pod-resources API socket, Root/pod-resources/kubelet.sock.
	PodResourcesSocket string
	// Dir holds everything of this kubelet: lib (its /var/lib), log (its /var/log), config, fake
	// CRI socket, machine (its synthetic sysfs and /proc/cpuinfo).
	Dir string
	// Machine is the hardware the kubelet sees, defaults filled in; nil when it sees the host's.
	Machine *Machine
	// Runtime is the fake CRI the kubelet talks to; it outlives kubelet restarts.
	Runtime *fake.RemoteRuntime
	// recorder serves Runtime and records each container's configuration (ContainerConfig).
	recorder *recordingRuntime
	// Process is the kubelet (the leader of its namespace).
	Process *Process

	cluster    *Cluster
	healthzURL string
}

// AddKubelet starts a kubelet registering node spec.Name and waits until the node is Ready, the
// not-ready taint is gone and the device-plugin and pod-resources sockets exist. It needs root,
// unshare, nsenter and mount. Everything is stopped at t's cleanup.
func (c *Cluster) AddKubelet(t TB, spec KubeletSpec) *Kubelet {
	t.Helper()
	requireRoot(t, "unshare", "nsenter", "mount")
	if spec.Name == "" {
		t.Fatalf("AddKubelet: empty name")
	}
	c.mu.Lock()
	_, dup := c.kubelets[spec.Name]
	c.mu.Unlock()
	if dup {
		t.Fatalf("AddKubelet: kubelet %s exists", spec.Name)
	}
	started := time.Now()
	dir := c.path("k", spec.Name)
	k := &Kubelet{
		Name:    spec.Name,
		Dir:     dir,
		Root:    filepath.Join(dir, "lib", "kubelet"),
		cluster: c,
	}
	if spec.Machine != nil {
		m := spec.Machine.withDefaults()
		if err := m.validate(); err != nil {
			t.Fatalf("kubelet %s: %v", spec.Name, err)
		}
		k.Machine = &m
	}
	k.DevicePluginDir = filepath.Join(k.Root, "device-plugins")
	k.PodResourcesSocket = filepath.Join(k.Root, "pod-resources", "kubelet.sock")
	for _, d := range []string{k.DevicePluginDir, filepath.Join(dir, "log"), filepath.Join(dir, "sys")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("kubelet %s: %v", spec.Name, err)
		}
	}

	k.recorder = newRecordingRuntime()
	k.Runtime = k.recorder.RemoteRuntime
	k.Runtime.ImageService.SetFakeImageSize(fakeImageSize)
	criSocket := filepath.Join(dir, "cri.sock")
	if err := k.recorder.start("unix://" + criSocket); err != nil {
		t.Fatalf("kubelet %s: fake CRI: %v", spec.Name, err)
	}
	t.Cleanup(k.recorder.stop) // after the kubelet's own cleanup (LIFO)

	ports, err := freePorts(2)
	if err != nil {
		t.Fatalf("kubelet %s: %v", spec.Name, err)
	}
	k.healthzURL = "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/healthz"
	configPath := filepath.Join(dir, "config.yaml")
	managers, err := spec.resourceManagerConfig()
	if err != nil {
		t.Fatalf("kubelet %s: %v", spec.Name, err)
	}
	staticDir := ""
	if len(spec.StaticPods) > 0 {
		staticDir = filepath.Join(dir, "manifests")
		if err := os.MkdirAll(staticDir, 0o755); err != nil {
			t.Fatalf("kubelet %s: %v", spec.Name, err)
		}
		for name, manifest := range spec.StaticPods {
			if err := os.WriteFile(filepath.Join(staticDir, filepath.Base(name)), []byte(manifest), 0o644); err != nil {
				t.Fatalf("kubelet %s: static pod %s: %v", spec.Name, name, err)
			}
		}
	}
	config, err := kubeletConfig(TestBedVersions(t).Minor, ports[0], ports[1], "unix://"+criSocket, staticDir, spec.Config, managers)
	if err != nil {
		t.Fatalf("kubelet %s: %v", spec.Name, err)
	}
	if err := os.WriteFile(configPath, config, 0o644); err != nil {
		t.Fatalf("kubelet %s: %v", spec.Name, err)
	}
	nsArgs, err := k.namespaceArgs()
	if err != nil {
		t.Fatalf("kubelet %s: %v", spec.Name, err)
	}
	args := append(nsArgs, filepath.Join(c.bin, "kubelet"),
		"--config="+configPath,
		"--kubeconfig="+c.Kubeconfig,
		"--hostname-override="+spec.Name,
	)
	if ip := hostIP(); ip != "" {
		// The kubelet refuses a loopback node IP; it serves on 127.0.0.1 all the same (address).
		args = append(args, "--node-ip="+ip)
	}
	if labels := labelFlag(spec.Labels); labels != "" {
		args = append(args, "--node-labels="+labels)
	}
	k.Process = c.startProcess(t, "kubelet-"+spec.Name, func() (*exec.Cmd, error) {
		return exec.Command(args[0], args[1:]...), nil
	})
	c.mu.Lock()
	c.kubelets[spec.Name] = k
	c.mu.Unlock()

	if err := k.waitReady(time.Time{}); err != nil {
		t.Fatalf("kubelet %s: %v", spec.Name, err)
	}
	t.Logf("kubelet %s ready in %s", spec.Name, time.Since(started).Round(time.Millisecond))
	return k
}

// namespaceArgs is the command prefix that makes the kubelet's private mount namespace.
func (k *Kubelet) namespaceArgs() ([]string, error) {
	var pairs []string
	for _, kt := range kernelTunables {
		if _, err := os.Stat(kt.path); err != nil {
			continue // the kubelet cannot check what the kernel lacks; nothing to shadow
		}
		file := filepath.Join(k.Dir, "sys", strings.ReplaceAll(strings.TrimPrefix(kt.path, "/proc/sys/"), "/", "."))
		if err := os.WriteFile(file, []byte(kt.value+"\n"), 0o644); err != nil {
			return nil, err
		}
		pairs = append(pairs, file, kt.path)
	}
	if k.Machine != nil {
		mounts, err := writeMachine(*k.Machine, filepath.Join(k.Dir, "machine"))
		if err != nil {
			return nil, err
		}
		for _, m := range mounts {
			pairs = append(pairs, m.source, m.target)
		}
	}
	args := []string{"unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", namespaceScript, "sh",
		filepath.Join(k.Dir, "lib"), filepath.Join(k.Dir, "log"), strconv.Itoa(len(pairs) / 2)}
	return append(args, pairs...), nil
}

// kubeletConfig is the KubeletConfiguration that runs a kubelet of Kubernetes 1.<minor> without a
// real runtime, cgroup setup or host changes, on the given ports (its static pods in staticPodPath,
// "" for none), with each overrides map merged over it in turn.
func kubeletConfig(minor, port, healthzPort int, criEndpoint, staticPodPath string, overrides ...map[string]any) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"authentication":              map[string]any{"anonymous": map[string]any{"enabled": true}, "webhook": map[string]any{"enabled": false}},
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
		"nodeStatusUpdateFrequency":   "1s",
		"nodeStatusReportFrequency":   "10s",
		"syncFrequency":               "10s",
		"evictionHard":                map[string]any{"memory.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"serializeImagePulls":         false,
		"failSwapOn":                  false,
	}
	if minor < 35 {
		// Kubelet 1.34 with the fake runtime dereferences nil in doPodResizeAction a while into a
		// run (seen crashing two kubelets of the e2e suite). From 1.35 in-place resize is GA and
		// its gate locked on: the kubelet refuses to start with it off.
		cfg["featureGates"] = map[string]any{"InPlacePodVerticalScaling": false}
	}
	for _, o := range overrides {
		maps.Copy(cfg, o)
	}
	// What isolates the kubelet from the host and from other kubelets is not negotiable.
	maps.Copy(cfg, map[string]any{
		"address":                  "127.0.0.1",
		"port":                     port,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              healthzPort,
		"cgroupDriver":             "cgroupfs",
		"cgroupsPerQOS":            false,
		"enforceNodeAllocatable":   []string{},
		"protectKernelDefaults":    true,
		"failCgroupV1":             false,
		"containerRuntimeEndpoint": criEndpoint,
		"staticPodPath":            staticPodPath, // KubeletSpec.StaticPods' folder, or none
		// Kubelet 1.34 writes the ephemeral-storage capacity into the container manager's map when
		// that manager starts, while DRA's startup goroutine may already read the same map for the
		// first node status: "concurrent map iteration and map write" killed a CI kubelet at start
		// (kubernetes/kubernetes PR 119637, never merged). Without local storage isolation the map
		// is never written after construction; nothing here requests ephemeral storage.
		"localStorageCapacityIsolation": false,
	})
	return yaml.Marshal(cfg)
}

// hostIP is the host's first global unicast IPv4 address, or "".
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

func labelFlag(labels map[string]string) string {
	kv := make([]string, 0, len(labels))
	for k, v := range labels {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// waitReady waits until the kubelet answers /healthz, has (re)created its device-plugin socket
// since notBefore, and its node is Ready; then it removes the not-ready taint.
func (k *Kubelet) waitReady(notBefore time.Time) error {
	c := k.cluster
	ctx, cancel := context.WithTimeout(context.Background(), kubeletReadyTimeout)
	defer cancel()
	var state string
	err := poll(kubeletReadyTimeout, func() (bool, error) {
		if err := k.Process.failIfExited(); err != nil {
			return false, err
		}
		if ok, answer := probeHTTP(http.DefaultClient, k.healthzURL, ""); !ok {
			state = "healthz: " + answer
			return false, nil
		}
		for _, sock := range []string{filepath.Join(k.DevicePluginDir, "kubelet.sock"), k.PodResourcesSocket} {
			if !existsSince(sock, notBefore) {
				state = sock + " not (re)created yet"
				return false, nil
			}
		}
		node, err := c.Client.CoreV1().Nodes().Get(ctx, k.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			state = "node not registered"
		case err != nil:
			state = "get node: " + err.Error()
		case !nodeReady(node):
			state = "node not Ready"
		default:
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("not ready (%s): %w", state, err)
	}
	return k.removeNotReadyTaint(ctx)
}

// existsSince reports whether path exists and was modified at or after t.
func existsSince(path string, t time.Time) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.ModTime().Before(t)
}

// removeNotReadyTaint removes the taints the node lifecycle controller would have lifted.
func (k *Kubelet) removeNotReadyTaint(ctx context.Context) error {
	c := k.cluster
	node, err := c.Client.CoreV1().Nodes().Get(ctx, k.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	kept := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool {
		return t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable
	})
	if len(kept) == len(node.Spec.Taints) {
		return nil
	}
	return c.setTaints(ctx, k.Name, kept)
}

// Restart stops the kubelet and starts it again in a fresh namespace over the same folders, with
// the same fake CRI (the pods it ran are still there), and waits until it is ready again. Device
// plugins must register again, as with a real kubelet restart.
func (k *Kubelet) Restart(t TB) {
	t.Helper()
	k.Process.Stop()
	restarted := time.Now().Add(-time.Second) // file times have coarse granularity on some filesystems
	k.Process.Restart(t)
	if err := k.waitReady(restarted); err != nil {
		t.Fatalf("kubelet %s after restart: %v", k.Name, err)
	}
}

// Stop stops the kubelet; its node stays in the API, Ready as last reported.
func (k *Kubelet) Stop(t TB) {
	t.Helper()
	k.Process.Stop()
}

// StartInNamespace runs a command inside the kubelet's mount namespace (where /var/lib/kubelet
// is the kubelet's own), logged to LogDir/<name>.log and stopped at t's cleanup. The namespace is
// looked up at each (re)start, so after Kubelet.Restart, Process.Restart joins the new one.
func (k *Kubelet) StartInNamespace(t TB, name string, args ...string) *Process {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("StartInNamespace %s: no command", name)
	}
	return k.cluster.startProcess(t, name, func() (*exec.Cmd, error) {
		pid := k.Process.Pid()
		if pid == 0 {
			return nil, errors.New("kubelet " + k.Name + " is not running")
		}
		ns := "/proc/" + strconv.Itoa(pid) + "/ns/mnt"
		return exec.Command("nsenter", append([]string{"--mount=" + ns, "--"}, args...)...), nil
	})
}

// MountNamespace is the kubelet's mount namespace as /proc/<pid>/ns/mnt reads (e.g.
// "mnt:[4026532301]"), or "" when it is not running.
func (k *Kubelet) MountNamespace() string {
	pid := k.Process.Pid()
	if pid == 0 {
		return ""
	}
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	if err != nil {
		return ""
	}
	return ns
}
