package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// Kernel-enforced memory limits (docs/sharing-and-isolation.md, "Sharing that is enforced"). Where the node's driver and
// kernel offer per-cgroup GPU memory limits (nvidia.DetectMemoryLimits) and --kernel-memory-limits is
// on, the plugin asks the kubelet to call PreStartContainer before each container of its resources
// starts. For a container of a pod with shared containers it then caps, on each card those shared
// containers hold, what the pod's cgroup may allocate: the pod's shared reservation on that card.
// The pod's cgroup exists by then (the kubelet creates it with the pod's sandbox), the limit is held
// by the kernel (or the driver) outside the container, and every process of the pod counts against
// it, whatever its environment says.

// ReasonMemoryLimit: the kernel memory limit of a shared container's pod could not be set; the
// kubelet fails the container's start and retries it.
const ReasonMemoryLimit Reason = "memory-limit"

// memoryLimiter sets per-cgroup memory limits on cards (nvidia.MemoryLimits).
type memoryLimiter interface {
	Set(cgroup, uuid string, bytes uint64) error
}

var _ memoryLimiter = (*nvidia.MemoryLimits)(nil)

// memoryEnforcement is what the inventory says holds shared containers' memory and compute on this
// node: the sharing mode, and the kernel's limits where the plugin sets them (backend).
func memoryEnforcement(mode, backend string) (memory, compute string) {
	switch mode {
	case annotations.SharingMPS:
		memory, compute = annotations.EnforcementMPSDaemon, annotations.EnforcementMPSDaemon
	case annotations.SharingHAMiCore:
		memory, compute = annotations.EnforcementClientEnv, annotations.EnforcementClientEnv
	default:
		memory, compute = annotations.EnforcementNone, annotations.EnforcementNone
	}
	switch backend {
	case nvidia.MemoryLimitsDmem:
		memory = annotations.EnforcementKernel
	case nvidia.MemoryLimitsDriver:
		memory = annotations.EnforcementDriver
	}
	return memory, compute
}

// GetDevicePluginOptions implements the device plugin API: PreStartContainer is asked for on every
// resource, so that every container is verified against the kubelet's record before it starts
// (verify.go), and its pod's kernel memory limits set where the plugin sets them.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

func (p *Plugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true, PreStartRequired: true}
}

// setMemoryLimits sets the kernel memory limits of pod (see above) before a container starts;
// without kernel limits, or with none to set, it does nothing.
func (p *Plugin) setMemoryLimits(pod *podEntry, limits map[string]int64, ids []string) error {
	if p.limiter == nil || len(limits) == 0 {
		return nil
	}
	fail := func(err error) error {
		aerr := refuse(ReasonMemoryLimit, nil, "pod %s shares cards, but its kernel memory limits could not be set: %v", pod.key(), err)
		p.log.Error(aerr, "kernel memory limit not set; the container does not start", logging.KeyPod, pod.key(), logging.KeyDevices, ids)
		return status.Error(codes.FailedPrecondition, aerr.Error())
	}
	cgroup, err := findPodCgroup(p.cgroupRoot, pod.UID)
	if err != nil {
		return fail(err)
	}
	uuids := make([]string, 0, len(limits))
	for u := range limits {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	for _, u := range uuids {
		if err := p.limiter.Set(cgroup, u, uint64(limits[u])<<20); err != nil {
			return fail(err)
		}
		p.log.Info("kernel memory limit set", logging.KeyPod, pod.key(), logging.KeyGPU, u, "memoryMiB", limits[u], "cgroup", cgroup)
	}
	return nil
}

// podMemoryLimitsLocked returns pod uid (the pod the kubelet's record names) and, by card UUID, the
// MiB the pod's shared containers reserve on each card they hold at the same time: app containers
// and sidecars together, or a plain init container with the sidecars (init containers run one at a
// time, before the app containers). Cards reserved whole (the reservation is the card's memory) get
// no limit. No limits when the pod is not Cardinal's or shares nothing. p.mu held.
func (p *Plugin) podMemoryLimitsLocked(uid types.UID) (*podEntry, map[string]int64) {
	pod := p.pods[uid]
	if pod == nil || !pod.HasAssignment {
		return pod, nil
	}
	running, sidecars, initMax := map[string]int64{}, map[string]int64{}, map[string]int64{}
	for name, held := range p.seen[uid] {
		req, ok := pod.Requests[name]
		if !ok || !req.Shared {
			continue
		}
		for _, card := range p.table.cardsOf(held) {
			mem := req.MemoryOn(card.MemoryMiB)
			switch {
			case req.Sidecar:
				sidecars[card.UUID] += mem
			case req.Init:
				initMax[card.UUID] = max(initMax[card.UUID], mem)
			default:
				running[card.UUID] += mem
			}
		}
	}
	limits := map[string]int64{}
	for _, c := range p.table.cards {
		u := c.UUID
		mem := max(running[u], initMax[u]) + sidecars[u]
		if mem > 0 && mem < c.MemoryMiB {
			limits[u] = mem
		}
	}
	return pod, limits
}

// cardsOf are the whole cards ids name (share slots or whole cards), each once; MIG instances are
// left out (per-cgroup limits do not apply to them).
func (t *deviceTable) cardsOf(ids []string) []annotations.GPU {
	var out []annotations.GPU
	seen := map[int]bool{}
	for _, id := range ids {
		d, ok := t.devices[id]
		if !ok || d.MIG != nil || seen[d.Card] {
			continue
		}
		seen[d.Card] = true
		out = append(out, t.cards[d.Card])
	}
	return out
}

// errNoPodCgroup: no cgroup of the pod under the cgroup root.
var errNoPodCgroup = errors.New("no cgroup of the pod")

// podCgroupDepth bounds the search for a pod's cgroup below the root: the kubelet puts pods at most
// three levels down (kubepods / QoS class / pod), under at most a couple of levels of its own
// --cgroup-root.
const podCgroupDepth = 6

// findPodCgroup finds the cgroup v2 folder of the pod with UID uid under root, as the kubelet names
// it with either cgroup driver: "pod<uid>" (cgroupfs: kubepods/burstable/pod<uid>) or
// "…-pod<uid with _ for ->.slice" (systemd: kubepods.slice/kubepods-burstable.slice/
// kubepods-burstable-pod<uid>.slice).
func findPodCgroup(root string, uid types.UID) (string, error) {
	cgroupfs := "pod" + string(uid)
	systemd := "-pod" + strings.ReplaceAll(string(uid), "-", "_") + ".slice"
	var found string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return nil // a cgroup removed while walking
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if name == cgroupfs || strings.HasSuffix(name, systemd) {
			found = path
			return filepath.SkipAll
		}
		rel, _ := filepath.Rel(root, path)
		if rel != "." && (strings.Count(rel, string(filepath.Separator))+1 >= podCgroupDepth || isPodCgroup(name)) {
			return filepath.SkipDir // another pod's cgroup (its containers), or too deep
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("cgroup root %s: %w", root, err)
	}
	if found == "" {
		return "", fmt.Errorf("%w %s under %s (looked for %s and *%s)", errNoPodCgroup, uid, root, cgroupfs, systemd)
	}
	return found, nil
}

// isPodCgroup reports whether a cgroup folder's name is a pod's, under either driver.
func isPodCgroup(name string) bool {
	return strings.HasPrefix(name, "pod") || (strings.Contains(name, "-pod") && strings.HasSuffix(name, ".slice"))
}

// detectMemoryLimits returns the limiter and backend the plugin uses: nil and "" when
// --kernel-memory-limits is off or the node cannot (why says so).
func (c SharingConfig) detectMemoryLimits(lib nvidia.Library, symbols nvidia.SymbolLookup, cards []nvidia.Card) (memoryLimiter, string, string) {
	if !c.KernelMemoryLimits {
		return nil, "", "--kernel-memory-limits=false"
	}
	backend, why := nvidia.DetectMemoryLimits(lib, symbols, cards, c.CgroupRoot)
	if backend == "" {
		return nil, "", why
	}
	return nvidia.NewMemoryLimits(lib, cards), backend, ""
}

// checkCgroupRoot is for Validate: an absolute path.
func checkCgroupRoot(root string) error {
	if !filepath.IsAbs(root) {
		return fmt.Errorf("--cgroup-root: %q is not an absolute path", root)
	}
	if st, err := os.Stat(root); err == nil && !st.IsDir() {
		return fmt.Errorf("--cgroup-root: %s is not a folder", root)
	}
	return nil
}
