package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Environment variables and paths of the enforced sharing modes (docs/sharing-and-isolation.md, "Sharing that is enforced").
const (
	// EnvMPSPipeDirectory tells a CUDA client where the MPS control daemon's pipes and sockets are.
	EnvMPSPipeDirectory = "CUDA_MPS_PIPE_DIRECTORY"
	// EnvHAMiCoreSharedCache is the file HAMi-core keeps the container's usage in, shared by the
	// container's processes.
	EnvHAMiCoreSharedCache = "CUDA_DEVICE_MEMORY_SHARED_CACHE"

	// MPSContainerPipeDir is where a shared container sees the node's MPS pipe directory.
	MPSContainerPipeDir = "/run/cardinal/mps/pipe"
	// MPSContainerShm is where a shared container sees the node's MPS shared memory (the tmpfs the
	// daemon also has at /dev/shm).
	MPSContainerShm = "/dev/shm"
	// MPSControl is the control daemon's socket in the pipe directory.
	MPSControl = "control"
	// MPSReady is the file the chart's MPS daemon script (charts/cardinal/files/mps-daemon.sh) writes
	// in the pipe directory once the cards' compute mode and the daemon's default limits are set and
	// a server has started; its first line is "shares=<N> computeMode=<mode> activeThreadPercentage=<P>".
	MPSReady = "cardinal-ready"
	// HAMiCoreContainerLibrary is where a shared container sees HAMi-core's library.
	HAMiCoreContainerLibrary = "/usr/local/vgpu/libvgpu.so"
	// ContainerPreload is the dynamic loader's preload list; mounted over it, it loads HAMi-core
	// into every dynamically linked process of the container whatever its environment says.
	ContainerPreload = "/etc/ld.so.preload"
	// PreloadFile is the file the plugin writes in --hami-core-preload-dir: one line, the
	// library's container path.
	PreloadFile = "ld.so.preload"
	// HAMiCoreCacheDir is the container folder of HAMi-core's shared usage file (the container's
	// own /tmp: every process of the container sees it, no other container does).
	HAMiCoreCacheDir = "/tmp"
	// HAMiCoreContainerLockDir is where HAMi-core takes its node-wide lock files (a fixed path in
	// HAMi-core; HAMi's own plugin mounts the host's /tmp/vgpulock there). It serialises the step in
	// which HAMi-core maps the container's processes to the host PIDs NVML reports, across every
	// container of the node: a container-private folder would let two containers starting at once on
	// one card mis-account each other's memory.
	HAMiCoreContainerLockDir = "/tmp/vgpulock"
)

// ReasonOtherTenant: the container shares its cards in mode mps, and a shared container of another
// namespace holds (or is about to hold) slots on this node. One MPS control daemon serves the node:
// its clients share the daemon's /dev/shm tmpfs and its control pipe, so two namespaces' clients could
// read each other's shared memory, fill the tmpfs, or command the daemon. An mps node therefore serves
// shared containers of one namespace at a time.
const ReasonOtherTenant Reason = "other-tenant"

// otherTenant returns a pod of another namespace than pod's that shares cards on this node (bound
// here, not ended, Cardinal-scheduled with a shared container); nil when there is none. p.mu held.
func (p *Plugin) otherTenant(pod *podEntry) *podEntry {
	var found *podEntry
	for _, e := range p.pods {
		if e.Gone || e.Namespace == pod.Namespace || !e.HasAssignment {
			continue
		}
		for _, r := range e.Requests {
			if r.Shared && (found == nil || e.key() < found.key()) {
				found = e
			}
		}
	}
	return found
}

// ReasonMPSSlot: the container shares its cards in mode mps and reserves more memory on a card than
// one share slot's (the card's memory ÷ shares). The node's MPS daemon gives every client one slot
// by default (charts/cardinal/files/mps-daemon.sh); that a client's own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
// can raise it is stated nowhere in NVIDIA's documentation, and if it could, any client could, and
// the default would hold nobody. So an mps node serves reservations of at most one slot per card:
// a larger one is refused rather than started with less memory than it reserved.
const ReasonMPSSlot Reason = "mps-slot"

// overMPSSlot returns a refusal when a shared container in mode mps reserves more than one slot's
// memory on one of its cards (nil otherwise). shares is the node's slot count (1: no daemon limit).
func overMPSSlot(t *deviceTable, o outcome, names annotations.ResourceNames, shares int) *AllocateError {
	if shares <= 1 || !shared(o) {
		return nil
	}
	req := o.Owner.Pod.Requests[o.Owner.Name]
	for _, c := range t.cardsOf(o.IDs) {
		mem, slot := req.MemoryOn(c.MemoryMiB), c.MemoryMiB/int64(shares)
		if mem <= slot {
			continue
		}
		field := fmt.Sprintf("%s=%d", names.Mem, req.MemoryMiB)
		if req.MemoryMiB == 0 {
			field = fmt.Sprintf("%s=%d", names.MemPercentage, req.MemoryPercent)
		}
		aerr := refuse(ReasonMPSSlot, []*podEntry{o.Owner.Pod}, "container %s of pod %s reserves %d MiB of card %s (%s), more than one MPS slot: "+
			"this node's MPS daemon gives each client at most %d MiB of the card (%d MiB ÷ %d shares), and a client cannot be trusted "+
			"to raise that itself; on mps nodes reserve at most one slot per card (or whole cards)",
			o.Owner.Name, o.Owner.Pod.key(), mem, c.UUID, field, slot, c.MemoryMiB, shares)
		if o.Certain {
			aerr.Admitted = o.Owner.Pod
		}
		return aerr
	}
	return nil
}

// ReasonExclusiveCards: the container takes cards whole on a node whose MPS daemon runs the cards
// in EXCLUSIVE_PROCESS (--mps-compute-mode): only the MPS server may hold a context there, so a
// process that is no MPS client could not use its cards. The extender keeps the same rule.
const ReasonExclusiveCards Reason = "exclusive-cards"

// The compute modes of --mps-compute-mode, as nvidia-smi names them.
const (
	MPSComputeExclusive = "EXCLUSIVE_PROCESS"
	MPSComputeDefault   = "DEFAULT"
)

// exclusiveCards reports whether the node's cards run in EXCLUSIVE_PROCESS for its MPS daemon.
func (c SharingConfig) exclusiveCards() bool {
	return c.Mode == annotations.SharingMPS && c.MPSComputeMode == MPSComputeExclusive
}

// SharingConfig is how the node enforces the limits of containers that share a card.
type SharingConfig struct {
	// Mode is annotations.SharingNone, SharingMPS or SharingHAMiCore.
	Mode string
	// MPSPipeDir is the host folder the MPS control daemon keeps its pipes in (its
	// CUDA_MPS_PIPE_DIRECTORY); the plugin reads it at the same path.
	MPSPipeDir string
	// MPSShmDir is the host tmpfs the daemon has at /dev/shm; shared containers get it there too.
	// Empty: no /dev/shm mount.
	MPSShmDir string
	// MPSTenantDir is a host folder the plugin writes MPSTenantRequest into whenever the node's MPS
	// tenant changes, which the daemon reads (mpstenant.go); empty: the daemon is never asked to
	// start afresh (one tenant's files in the shm tmpfs reach the next).
	MPSTenantDir string
	// HAMiCoreLibrary is HAMi-core's libvgpu.so on the host; the plugin reads it at the same path.
	HAMiCoreLibrary string
	// HAMiCorePreloadDir is a host folder the plugin writes PreloadFile into at start.
	HAMiCorePreloadDir string
	// HAMiCoreLockDir is the host folder shared containers get at HAMiCoreContainerLockDir; the
	// plugin creates it (mode 1777) at start.
	HAMiCoreLockDir string
	// MPSComputeMode is the compute mode the node's MPS daemon sets on the cards (the chart's
	// devicePlugin.sharing.mps.computeMode): MPSComputeExclusive or MPSComputeDefault; "": not said.
	MPSComputeMode string
	// CheckInterval is how often the mode's enforcement is checked (mps, hami-core).
	CheckInterval time.Duration
	// KernelMemoryLimits: where the node's driver and kernel offer per-cgroup GPU memory limits, set
	// the pod's limit on each card before a shared container starts (memlimits.go), in every mode.
	KernelMemoryLimits bool
	// CgroupRoot is the host's cgroup v2 hierarchy as the plugin sees it (pods' cgroups are found
	// there, and their paths handed to NVML).
	CgroupRoot string
}

// DefaultSharingConfig is mode none with the chart's host paths.
func DefaultSharingConfig() SharingConfig {
	return SharingConfig{
		Mode:               annotations.SharingNone,
		MPSPipeDir:         "/run/cardinal/mps/pipe",
		MPSShmDir:          "/run/cardinal/mps/shm",
		HAMiCoreLibrary:    "/usr/local/vgpu/libvgpu.so",
		HAMiCorePreloadDir: "/var/lib/cardinal/hami-core",
		HAMiCoreLockDir:    "/tmp/vgpulock",
		CheckInterval:      5 * time.Second,
		KernelMemoryLimits: true,
		CgroupRoot:         "/sys/fs/cgroup",
	}
}

// AddFlags registers --sharing-mode and the modes' settings.
func (c *SharingConfig) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Mode, "sharing-mode", c.Mode, "how the limits of containers sharing a card are enforced: none (scheduling only; the limit "+
		"variables are set but nothing acts on them), mps (an NVIDIA MPS control daemon runs on the node; shared containers get its pipe "+
		"directory and MPS limits), hami-core (HAMi-core's library, installed on the node, is preloaded into shared containers)")
	fs.StringVar(&c.MPSPipeDir, "mps-pipe-dir", c.MPSPipeDir, "mps: the MPS control daemon's pipe directory on the host (read by the plugin at this path; mounted at "+MPSContainerPipeDir+" in shared containers)")
	fs.StringVar(&c.MPSShmDir, "mps-shm-dir", c.MPSShmDir, "mps: the tmpfs the daemon has at /dev/shm, on the host; mounted at /dev/shm in shared containers (empty: not mounted)")
	fs.StringVar(&c.MPSTenantDir, "mps-tenant-dir", c.MPSTenantDir, "mps: host folder the plugin writes "+MPSTenantRequest+" into whenever the node's tenant (the namespace whose containers share cards) changes; "+
		"the chart's daemon script then quits, empties the shm tmpfs and pipe folder and starts again, and shared containers are served once its ready file names the new epoch (empty: never; one tenant's files reach the next)")
	fs.StringVar(&c.HAMiCoreLibrary, "hami-core-library", c.HAMiCoreLibrary, "hami-core: HAMi-core's libvgpu.so on the host (read by the plugin at this path; mounted at "+HAMiCoreContainerLibrary+" in shared containers)")
	fs.StringVar(&c.HAMiCorePreloadDir, "hami-core-preload-dir", c.HAMiCorePreloadDir, "hami-core: host folder the plugin writes "+PreloadFile+" into (mounted at "+ContainerPreload+" in shared containers)")
	fs.StringVar(&c.HAMiCoreLockDir, "hami-core-lock-dir", c.HAMiCoreLockDir, "hami-core: host folder of HAMi-core's node-wide lock files, mounted at "+HAMiCoreContainerLockDir+" in shared containers (created mode 1777 at start)")
	fs.BoolVar(&c.KernelMemoryLimits, "kernel-memory-limits", c.KernelMemoryLimits, "where the NVIDIA driver (r615+) and the kernel offer per-cgroup GPU memory limits (cgroup v2; the dmem controller "+
		"from Linux 6.14, else the driver's own backend), cap each pod's memory on the cards its shared containers hold at their reservation, before they start (any --sharing-mode); detected at start, published in the inventory")
	fs.StringVar(&c.CgroupRoot, "cgroup-root", c.CgroupRoot, "the host's cgroup v2 hierarchy as the plugin sees it, where pods' cgroups are found for --kernel-memory-limits")
	fs.StringVar(&c.MPSComputeMode, "mps-compute-mode", c.MPSComputeMode, "mps: the compute mode the node's MPS daemon sets on the cards, "+
		MPSComputeExclusive+" (whole-card containers are then refused: only the MPS server may use a card; the inventory says exclusiveCards) or "+
		MPSComputeDefault+" (empty: not said, whole cards served)")
	fs.DurationVar(&c.CheckInterval, "sharing-check-interval", c.CheckInterval, "mps, hami-core: how often the MPS daemon (its socket, and its ready file naming --shares) or the library is checked; while the check fails the inventory says ready=false and shared containers are refused")
}

// Validate reports the settings the plugin cannot use, naming their flags.
func (c SharingConfig) Validate() error {
	var errs []error
	if c.KernelMemoryLimits {
		if err := checkCgroupRoot(c.CgroupRoot); err != nil {
			errs = append(errs, err)
		}
	}
	switch c.Mode {
	case annotations.SharingNone:
		return errors.Join(errs...)
	case annotations.SharingMPS:
		if !filepath.IsAbs(c.MPSPipeDir) {
			errs = append(errs, fmt.Errorf("--mps-pipe-dir: %q is not an absolute path", c.MPSPipeDir))
		}
		if c.MPSShmDir != "" && !filepath.IsAbs(c.MPSShmDir) {
			errs = append(errs, fmt.Errorf("--mps-shm-dir: %q is not an absolute path", c.MPSShmDir))
		}
		if c.MPSTenantDir != "" && !filepath.IsAbs(c.MPSTenantDir) {
			errs = append(errs, fmt.Errorf("--mps-tenant-dir: %q is not an absolute path", c.MPSTenantDir))
		}
		switch c.MPSComputeMode {
		case "", MPSComputeExclusive, MPSComputeDefault:
		default:
			errs = append(errs, fmt.Errorf("--mps-compute-mode: unknown mode %q (known: %s, %s)", c.MPSComputeMode, MPSComputeExclusive, MPSComputeDefault))
		}
	case annotations.SharingHAMiCore:
		if !filepath.IsAbs(c.HAMiCoreLibrary) {
			errs = append(errs, fmt.Errorf("--hami-core-library: %q is not an absolute path", c.HAMiCoreLibrary))
		}
		if !filepath.IsAbs(c.HAMiCorePreloadDir) {
			errs = append(errs, fmt.Errorf("--hami-core-preload-dir: %q is not an absolute path", c.HAMiCorePreloadDir))
		}
		if !filepath.IsAbs(c.HAMiCoreLockDir) {
			errs = append(errs, fmt.Errorf("--hami-core-lock-dir: %q is not an absolute path", c.HAMiCoreLockDir))
		}
	default:
		return fmt.Errorf("--sharing-mode: unknown mode %q (known: %s)", c.Mode, strings.Join(annotations.SharingModes, ", "))
	}
	if c.CheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("--sharing-check-interval: %s is not positive", c.CheckInterval))
	}
	return errors.Join(errs...)
}

// withDefaults fills what a caller left empty (tests, callers that predate the modes).
func (c SharingConfig) withDefaults() SharingConfig {
	if c.Mode == "" {
		c.Mode = annotations.SharingNone
	}
	return c
}

// enforced reports whether the mode has something on the node that enforces it.
func (c SharingConfig) enforced() bool { return c.Mode != annotations.SharingNone }

// SharingProbe checks that what enforces the node's sharing mode works now.
type SharingProbe interface {
	Check(ctx context.Context) error
}

// mpsProbe accepts the MPS pipe directory when its control socket takes a connection and the
// daemon's script vouches, in a ready file (MPSReady) written after the socket appeared, that it set
// the limits of the node's share count, that a server starts, and — refreshed every few seconds
// after get_server_list answered — that the control daemon answers now. A socket alone says nothing
// of the cards (a daemon given none answers too, and every server start then fails), and a named
// pipe takes no test connection: the refreshed file is what proves the daemon answers. With tenants
// set the file must also name the tenant epoch the plugin asked for (mpstenant.go).
type mpsProbe struct {
	pipeDir string
	// shares is the plugin's share count; the daemon's default limits must be set for it.
	shares int
	// tenants: nil, no epoch is asked for.
	tenants *mpsTenants
}

var _ SharingProbe = mpsProbe{}

// MPSReadyMaxAge is how old the daemon's ready file may be: the chart's script rewrites it every
// 5 s (CARDINAL_MPS_HEARTBEAT) after the control daemon answered get_server_list.
const MPSReadyMaxAge = 30 * time.Second

func (p mpsProbe) Check(ctx context.Context) error {
	control := filepath.Join(p.pipeDir, MPSControl)
	st, err := os.Stat(control)
	if err != nil {
		return fmt.Errorf("MPS control daemon: %w", err)
	}
	switch {
	case st.Mode()&fs.ModeNamedPipe != 0:
		// No test connection: the ready file's refresh below is the proof.
	case st.Mode()&fs.ModeSocket == 0:
		return fmt.Errorf("MPS control daemon: %s is neither a socket nor a named pipe", control)
	default:
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var d net.Dialer
		conn, err := d.DialContext(dctx, "unix", control)
		if err != nil {
			return fmt.Errorf("MPS control daemon does not answer: %w", err)
		}
		_ = conn.Close()
	}
	return p.checkReady(st.ModTime())
}

// checkReady reads MPSReady: present, not older than the control socket (made at since), refreshed
// within MPSReadyMaxAge, naming the plugin's share count and, with tenants, the epoch asked for.
func (p mpsProbe) checkReady(since time.Time) error {
	file := filepath.Join(p.pipeDir, MPSReady)
	st, err := os.Stat(file)
	if err != nil {
		return fmt.Errorf("MPS control daemon answers, but nothing says a server can start with the node's limits (%w): "+
			"the chart's daemon script writes %s once the compute mode and default limits are set and a server started", err, MPSReady)
	}
	if st.ModTime().Before(since) {
		return fmt.Errorf("MPS daemon: %s is older than the control socket (left by an earlier daemon)", file)
	}
	if age := time.Since(st.ModTime()); age > MPSReadyMaxAge {
		return fmt.Errorf("MPS daemon: %s was last refreshed %s ago (more than %s): its script refreshes it every few seconds "+
			"while the control daemon answers get_server_list, so the daemon does not answer", file, age.Round(time.Second), MPSReadyMaxAge)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("MPS daemon: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	fields := map[string]string{}
	for _, field := range strings.Fields(first) {
		if k, v, ok := strings.Cut(field, "="); ok {
			fields[k] = v
		}
	}
	v, ok := fields["shares"]
	if !ok {
		return fmt.Errorf("MPS daemon: %s names no share count", file)
	}
	if v != strconv.Itoa(p.shares) {
		return fmt.Errorf("MPS daemon: its default limits are for shares=%s, the plugin advertises %d slots per card", v, p.shares)
	}
	if p.tenants == nil {
		return nil
	}
	want := p.tenants.wanted()
	if got := fields["epoch"]; got != strconv.FormatUint(want, 10) {
		return fmt.Errorf("MPS daemon: it serves tenant epoch %q, the plugin asked for %d in %s: a fresh start for the node's new tenant is under way", got, want, p.tenants.file)
	}
	p.tenants.served(want)
	return nil
}

// hamiCoreProbe accepts HAMi-core's library when it is a non-empty regular file.
type hamiCoreProbe struct{ library string }

var _ SharingProbe = hamiCoreProbe{}

func (p hamiCoreProbe) Check(context.Context) error {
	st, err := os.Stat(p.library)
	switch {
	case err != nil:
		return fmt.Errorf("HAMi-core library: %w", err)
	case !st.Mode().IsRegular() || st.Size() == 0:
		return fmt.Errorf("HAMi-core library: %s is not a non-empty regular file", p.library)
	}
	return nil
}

// probe returns the mode's probe for a node advertising shares slots per card; nil for mode none.
func (c SharingConfig) probe(shares int) SharingProbe {
	switch c.Mode {
	case annotations.SharingMPS:
		return mpsProbe{pipeDir: c.MPSPipeDir, shares: shares}
	case annotations.SharingHAMiCore:
		return hamiCoreProbe{library: c.HAMiCoreLibrary}
	}
	return nil
}

// writePreload writes PreloadFile (HAMi-core's container path) into the preload folder, unless it
// already holds exactly that.
func writePreload(dir string) error {
	want := []byte(HAMiCoreContainerLibrary + "\n")
	file := filepath.Join(dir, PreloadFile)
	if got, err := os.ReadFile(file); err == nil && slices.Equal(got, want) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hami-core preload folder: %w", err)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, want, 0o644); err != nil {
		return fmt.Errorf("hami-core preload file: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("hami-core preload file: %w", err)
	}
	return nil
}

// makeLockDir creates HAMi-core's host lock folder, writable by every container's user (HAMi-core
// runs as the container's user) with the sticky bit, so no container removes another's lock file.
func makeLockDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hami-core lock folder: %w", err)
	}
	if err := os.Chmod(dir, 0o777|fs.ModeSticky); err != nil {
		return fmt.Errorf("hami-core lock folder: %w", err)
	}
	return nil
}

// watchSharing checks the probe at once and every interval, and reports each result to set until
// ctx ends.
func watchSharing(ctx context.Context, probe SharingProbe, every time.Duration, set func(error), log logr.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	var last string
	for {
		err := probe.Check(ctx)
		if msg := errText(err); msg != last {
			if err != nil {
				log.Info("sharing enforcement not ready; shared containers are refused", "error", msg)
			} else {
				log.Info("sharing enforcement ready")
			}
			last = msg
		}
		set(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sharedResponse adds to a shared container's response what its node's mode needs: mounts and the
// mode's variables. env holds the limits containerEnv computed for every mode (see limitEnv); the
// variables of the other modes are taken out, so a container sees only what acts on it. key is
// unique to the container. Mode none keeps every limit variable (advisory, as before the modes).
func (c SharingConfig) sharedResponse(r *pluginapi.ContainerAllocateResponse, key string) {
	switch c.Mode {
	case annotations.SharingMPS:
		dropHAMiCoreEnv(r.Envs)
		r.Envs[EnvMPSPipeDirectory] = MPSContainerPipeDir
		// Read-only: a client connects to the daemon's sockets (a socket or FIFO on a read-only mount
		// still takes a connection) but cannot remove, replace or add a file, root or not.
		r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: MPSContainerPipeDir, HostPath: c.MPSPipeDir, ReadOnly: true})
		if c.MPSShmDir != "" {
			r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: MPSContainerShm, HostPath: c.MPSShmDir})
		}
	case annotations.SharingHAMiCore:
		delete(r.Envs, EnvMPSMemoryLimit)
		delete(r.Envs, EnvMPSThreadPercentage)
		r.Envs[EnvHAMiCoreSharedCache] = path.Join(HAMiCoreCacheDir, "cardinal-vgpu-"+key+".cache")
		r.Mounts = append(r.Mounts,
			&pluginapi.Mount{ContainerPath: HAMiCoreContainerLibrary, HostPath: c.HAMiCoreLibrary, ReadOnly: true},
			&pluginapi.Mount{ContainerPath: ContainerPreload, HostPath: filepath.Join(c.HAMiCorePreloadDir, PreloadFile), ReadOnly: true},
			&pluginapi.Mount{ContainerPath: HAMiCoreContainerLockDir, HostPath: c.HAMiCoreLockDir})
	}
}

func dropHAMiCoreEnv(env map[string]string) {
	for k := range env {
		if strings.HasPrefix(k, EnvMemoryLimitPrefix) || k == EnvSMLimit {
			delete(env, k)
		}
	}
}
