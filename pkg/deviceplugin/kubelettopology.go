package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/cpuset"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// kubeletTopologySource keeps the inventory's kubelet field current: the kubelet's topology and CPU
// manager settings from its configuration file (re-read when the file changes), the NUMA nodes'
// CPUs from sysfs and the CPUs held exclusively from PodResources. It calls changed only when the
// field's content changes, so a node in steady state causes no inventory write.
type kubeletTopologySource struct {
	configPath string
	// cpuStatePath is the kubelet's CPU manager checkpoint (empty: not read, no kubelet.pods).
	cpuStatePath   string
	sysfsRoot      string
	deviceTopology bool
	client         podResourcesCPUs
	// changed is called after current took a new value.
	changed func()
	log     logr.Logger

	current atomic.Pointer[annotations.KubeletTopology]
	kicks   chan struct{}

	// Only the refresh loop touches these.
	stamp    fileStamp
	settings *kubeletSettings
	lastErr  string
	// cpuStamp is the checkpoint's stamp at the last refresh (zero: unreadable then).
	cpuStamp fileStamp
}

func newKubeletTopologySource(configPath, sysfsRoot string, deviceTopology bool, client podResourcesCPUs, changed func(), log logr.Logger) *kubeletTopologySource {
	return &kubeletTopologySource{configPath: configPath, sysfsRoot: sysfsRoot, deviceTopology: deviceTopology, client: client,
		changed: changed, log: log, kicks: make(chan struct{}, 1)}
}

// withCPUState makes the source read the kubelet's CPU manager checkpoint at path (empty: not).
func (s *kubeletTopologySource) withCPUState(path string) *kubeletTopologySource {
	s.cpuStatePath = path
	return s
}

// Current is the kubelet field to publish; nil until the settings and CPUs were read once.
func (s *kubeletTopologySource) Current() *annotations.KubeletTopology { return s.current.Load() }

// Kick asks for a refresh soon (after an Allocate: the container's exclusive CPUs change); it never
// blocks.
func (s *kubeletTopologySource) Kick() {
	select {
	case s.kicks <- struct{}{}:
	default:
	}
}

// kickDelay is how long a kick waits before the refresh, so the kubelet has started the container
// whose devices it just allocated (and PodResources lists its CPUs).
const kickDelay = time.Second

// run refreshes at start, every interval and after kicks until ctx ends.
func (s *kubeletTopologySource) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	// The checkpoint changes when the kubelet admits a pod with exclusive CPUs and when it frees
	// them: a stat every cpuStatePoll catches both at once, and reads nothing when it is unchanged.
	var cpuPoll <-chan time.Time
	if s.cpuStatePath != "" {
		ct := time.NewTicker(cpuStatePoll)
		defer ct.Stop()
		cpuPoll = ct.C
	}
	var kicked <-chan time.Time
	s.refreshAndLog(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kicks:
			if kicked == nil {
				kicked = time.After(kickDelay)
			}
			continue
		case <-cpuPoll:
			if st, _ := stampOf(s.cpuStatePath); st == s.cpuStamp {
				continue
			}
		case <-t.C:
		case <-kicked:
			kicked = nil
		}
		s.refreshAndLog(ctx)
	}
}

// cpuStatePoll is how often the CPU manager checkpoint's stamp is checked.
const cpuStatePoll = 250 * time.Millisecond

// readCPUState reads the checkpoint's pods; nil when it is not configured or cannot be read (the
// inventory then lists no pods: the extender takes the CPU counts as they are, rather than a stale
// list).
func (s *kubeletTopologySource) readCPUState() (map[string]cpuset.CPUSet, error) {
	if s.cpuStatePath == "" {
		return nil, nil
	}
	// The stamp before the read: a change during the read is seen at the next poll.
	s.cpuStamp, _ = stampOf(s.cpuStatePath)
	return readCPUCheckpoint(s.cpuStatePath)
}

// refreshAndLog refreshes and logs a failure once until it changes or goes away.
func (s *kubeletTopologySource) refreshAndLog(ctx context.Context) {
	err := s.refresh(ctx)
	switch {
	case err == nil:
		if s.lastErr != "" {
			s.log.Info("kubelet topology readable again")
		}
		s.lastErr = ""
	case ctx.Err() != nil:
	case err.Error() != s.lastErr:
		s.lastErr = err.Error()
		s.log.Info("cannot read the kubelet's topology settings or CPUs; the inventory keeps the last ones read", "error", s.lastErr)
	}
}

// refresh reads everything once and publishes a changed result. When sysfs or PodResources cannot
// be read the published value stays what it was (an outage says nothing about the CPUs); when the
// configuration file turns unreadable or bad the last good settings stay in use (the kubelet, too,
// runs on the configuration it started with).
func (s *kubeletTopologySource) refresh(ctx context.Context) error {
	configErr := s.readConfig()
	nodes, err := readNUMANodes(s.sysfsRoot)
	if err != nil {
		return errors.Join(configErr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cpus, err := readKubeletCPUs(ctx, s.client)
	if err != nil {
		return errors.Join(configErr, err)
	}
	var stateErr error
	cpus.Pods, stateErr = s.readCPUState()
	configErr = errors.Join(configErr, stateErr)
	if s.settings == nil {
		return configErr
	}
	next := kubeletTopology(*s.settings, nodes, cpus, s.deviceTopology)
	if prev := s.current.Load(); prev == nil || !reflect.DeepEqual(prev, next) {
		s.current.Store(next)
		s.log.V(1).Info("kubelet topology changed", "numa", next.NUMA)
		s.changed()
	}
	return configErr
}

// readConfig reads the kubelet's configuration file when it changed since the last good read.
func (s *kubeletTopologySource) readConfig() error {
	stamp, err := stampOf(s.configPath)
	if err != nil {
		return fmt.Errorf("kubelet configuration: %w", err)
	}
	if s.settings != nil && stamp == s.stamp {
		return nil
	}
	settings, err := readKubeletConfig(s.configPath)
	if err != nil {
		return err
	}
	s.stamp, s.settings = stamp, &settings
	s.log.Info("kubelet configuration read", "path", s.configPath, "topologyManagerPolicy", settings.TopologyManagerPolicy,
		"topologyManagerScope", settings.TopologyManagerScope, "cpuManagerPolicy", settings.CPUManagerPolicy,
		"preferClosestNUMANodes", settings.PreferClosestNUMANodes, "maxAllowableNUMANodes", settings.MaxAllowableNUMANodes,
		"reservedSystemCPUs", settings.ReservedSystemCPUs.String())
	return nil
}

// fileStamp tells whether a file changed since it was last read.
type fileStamp struct {
	id      fileID
	size    int64
	modTime time.Time
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	st := fileStamp{size: fi.Size(), modTime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.id = fileID{dev: uint64(sys.Dev), ino: sys.Ino} //nolint:unconvert // Dev's type differs by platform
	}
	return st, nil
}

// startKubeletTopology starts publishing the kubelet's topology settings in the inventory when
// cfg.KubeletConfig names the kubelet's configuration file; the kick it returns asks for a refresh
// (a no-op when nothing is published).
func startKubeletTopology(ctx context.Context, g interface{ Go(func() error) }, cfg Config, inventory *inventoryWriter, log logr.Logger) (kick func(), err error) {
	if cfg.KubeletConfig == "" {
		return func() {}, nil
	}
	conn, err := grpc.NewClient("unix://"+cfg.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("pod-resources client: %w", err)
	}
	src := newKubeletTopologySource(cfg.KubeletConfig, cfg.SysfsRoot, cfg.Topology, podresourcesapi.NewPodResourcesListerClient(conn),
		inventory.enqueue, log).withCPUState(cfg.CPUManagerState)
	inventory.kubelet = src.Current
	g.Go(func() error {
		defer conn.Close()
		src.run(ctx, cfg.KubeletPollInterval)
		return nil
	})
	return src.Kick, nil
}

// inventory is the inventory to publish: the plugin's cards and, when reported, the kubelet's
// topology settings.
func (w *inventoryWriter) inventory() annotations.Inventory {
	inv := w.plugin.Inventory()
	if w.kubelet != nil {
		inv.Kubelet = w.kubelet()
	}
	return inv
}
