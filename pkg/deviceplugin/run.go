// Package deviceplugin is Cardinal's node half: it discovers the node's cards through NVML (or the
// simulated NVML), publishes them on the Node (cardinal.io/gpu-inventory), registers them with the
// kubelet (whole cards as the GPU resource, MIG instances as one resource per profile: mig.go), and
// answers the kubelet's GetPreferredAllocation and Allocate with the cards or instances the
// scheduler extender assigned (cardinal.io/gpu-assignment), finding the pod by its device IDs. It
// records what each container got (cardinal.io/gpu-allocated) and reconciles that record with the
// kubelet's PodResources API.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
	"github.com/cardinal-gpu/cardinal/pkg/deviceplugin/kubeletrecord"
	"github.com/cardinal-gpu/cardinal/pkg/kubeconfig"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// Config configures Run.
type Config struct {
	// NodeName is the node this plugin runs on.
	NodeName string
	// Kubeconfig is a kubeconfig path; empty means in-cluster. Ignored when Client is set.
	Kubeconfig string
	// Client, when set, is used instead of one built from Kubeconfig (tests).
	Client kubernetes.Interface
	// DevicePluginDir is the kubelet's device-plugin folder (kubelet.sock lives there).
	DevicePluginDir string
	// PodResourcesSocket is the kubelet's PodResources API socket.
	PodResourcesSocket string
	// Simulate is the path of a simulated-NVML file; empty means the real NVML.
	Simulate string
	// Shares is how many pods may share a card: 1 advertises one device per card (its UUID), N > 1
	// advertises N slot devices <UUID>::<k>.
	Shares int
	// Topology reports each device's NUMA node to the kubelet (TopologyInfo).
	Topology bool
	// Listen is the address of /healthz, /readyz and /metrics; empty disables them.
	Listen string
	// Names are the managed resource names; the plugin registers Names.GPU, and
	// Names.MIGResource(profile) for every MIG profile the node's instances have.
	Names annotations.ResourceNames
	// SchedulerName is the kube-scheduler profile that runs Cardinal's extender: a pod naming it
	// that carries no assignment was bound by someone else and is never served.
	SchedulerName string
	// ExactSchedulerName is Cardinal's second profile, which scores every node (the same rule
	// holds for its pods); empty: none.
	ExactSchedulerName string
	// DeviceList is how Allocate names a container's cards to the container runtime (devicelist.go).
	DeviceList DeviceListConfig
	// Sharing is how shared containers' limits are enforced on the node (sharing.go).
	Sharing SharingConfig
	// SharingProbe, when set, replaces the mode's own check of its enforcement (tests).
	SharingProbe SharingProbe
	// SysfsRoot is where NUMA nodes are read from (<root>/bus/pci/devices/<busid>/numa_node, and
	// <root>/devices/system/node/node<N>/cpulist with KubeletConfig).
	SysfsRoot string
	// KubeletConfig is the kubelet's configuration file; when set, the inventory carries the
	// kubelet's topology settings and per-NUMA CPUs (kubelettopology.go). Empty publishes none.
	KubeletConfig string
	// CPUManagerState is the kubelet's CPU manager checkpoint (<root-dir>/cpu_manager_state), read
	// with KubeletConfig: the inventory then lists each pod's exclusive CPUs per NUMA node
	// (cpucheckpoint.go). Empty, or a file that cannot be read: no such list.
	CPUManagerState string
	// KubeletPollInterval is how often KubeletConfig, sysfs and PodResources' CPUs are read.
	KubeletPollInterval time.Duration
	// ReconcileInterval is how often PodResources is compared with the allocation records.
	ReconcileInterval time.Duration
	// HealthRecoveryInterval is how long an unhealthy card must stay free of critical XIDs before a
	// passing probe makes it healthy again (XIDs in ResetXids excepted).
	HealthRecoveryInterval time.Duration
	// IgnoredXids are application XIDs that never mark a card unhealthy.
	IgnoredXids XidList
	// ResetXids are critical XIDs after which a card stays unhealthy until it is reset (observed as
	// the card falling off the bus and answering again) or the plugin restarts.
	ResetXids XidList
	// MIGDynamicProfiles is the dynamic MIG allow-list (issue 40): when set, the inventory of each
	// card in MIG mode lists those of these GPU instance profiles the card has, with their legal
	// placements (mig.dynamic). Empty: no card is dynamic.
	MIGDynamicProfiles []string
	// NVML, when set, is used instead of the real library or the simulation (tests).
	NVML nvidia.Library
	// MemorySymbols, when set, says which functions NVML has (tests with a mock NVML); the real
	// library answers itself.
	MemorySymbols nvidia.SymbolLookup
	// Log is the logger.
	Log logr.Logger
}

// DefaultConfig returns the defaults the binary's flags start from.
func DefaultConfig() Config {
	return Config{
		NodeName:               os.Getenv("NODE_NAME"),
		DevicePluginDir:        "/var/lib/kubelet/device-plugins",
		PodResourcesSocket:     "/var/lib/kubelet/pod-resources/kubelet.sock",
		CPUManagerState:        "/var/lib/kubelet/cpu_manager_state",
		Shares:                 1,
		Topology:               true,
		Listen:                 ":9400",
		Names:                  annotations.DefaultResourceNames(),
		SchedulerName:          "cardinal-scheduler",
		DeviceList:             DefaultDeviceListConfig(),
		Sharing:                DefaultSharingConfig(),
		SysfsRoot:              "/sys",
		ReconcileInterval:      30 * time.Second,
		HealthRecoveryInterval: 30 * time.Second,
		KubeletPollInterval:    5 * time.Second,
		IgnoredXids:            xidListOf(nvidia.DefaultIgnoredXids()),
		ResetXids:              xidListOf(nvidia.DefaultResetXids()),
		Log:                    logr.Discard(),
	}
}

// MaxShares bounds --shares (the inventory contract allows 1..1024).
const MaxShares = 1024

func (c *Config) validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is empty (set --node-name or $NODE_NAME)"))
	}
	if c.DevicePluginDir == "" {
		errs = append(errs, errors.New("device-plugin dir is empty"))
	}
	if c.PodResourcesSocket == "" {
		errs = append(errs, errors.New("pod-resources socket is empty"))
	}
	if c.Shares < 1 || c.Shares > MaxShares {
		errs = append(errs, fmt.Errorf("shares %d is not in 1..%d", c.Shares, MaxShares))
	}
	if c.ReconcileInterval <= 0 {
		errs = append(errs, fmt.Errorf("reconcile interval %s is not positive", c.ReconcileInterval))
	}
	if c.HealthRecoveryInterval <= 0 {
		errs = append(errs, fmt.Errorf("health recovery interval %s is not positive", c.HealthRecoveryInterval))
	}
	if c.KubeletConfig != "" && c.KubeletPollInterval <= 0 {
		errs = append(errs, fmt.Errorf("kubelet poll interval %s is not positive", c.KubeletPollInterval))
	}
	for _, x := range c.ResetXids {
		if slices.Contains(c.IgnoredXids, x) {
			errs = append(errs, fmt.Errorf("XID %d is both ignored (--health-ignored-xids) and reset-class (--health-reset-xids)", x))
		}
	}
	if err := validDynamicProfiles(c.MIGDynamicProfiles); err != nil {
		errs = append(errs, err)
	}
	if err := c.Names.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.DeviceList.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Sharing.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run runs the device plugin until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("device plugin config: %w", err)
	}
	log := cfg.Log.WithValues(logging.KeyNode, cfg.NodeName)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)

	lib, numa := cfg.NVML, nvidia.SysfsNUMA(cfg.SysfsRoot)
	// symbols can say which functions the loaded NVML has (per-cgroup memory limits need r615+);
	// the simulated NVML and mocks cannot, and get no kernel memory limits unless MemorySymbols says.
	symbols := cfg.MemorySymbols
	switch {
	case lib != nil:
	case cfg.Simulate != "":
		cards, err := sim.Load(cfg.Simulate, cfg.NodeName)
		if err != nil {
			return err
		}
		srv := sim.New(cards)
		lib, numa = srv, srv.NUMA
		g.Go(func() error { return srv.Watch(ctx, cfg.Simulate, cfg.NodeName, log.WithName("simulation")) })
	default:
		real := nvml.New()
		lib, symbols = real, real.Extensions()
	}
	client := cfg.Client
	if client == nil {
		rc, err := kubeconfig.Load(cfg.Kubeconfig)
		if err != nil {
			return err
		}
		if client, err = kubernetes.NewForConfig(rc); err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
	}

	cards, err := nvidia.Discover(lib, numa)
	if err != nil {
		return fmt.Errorf("discover cards: %w", err)
	}
	if slices.ContainsFunc(cards, func(c nvidia.Card) bool { return c.UUID == "" }) {
		cards = namedCards(cards, publishedInventory(ctx, client, cfg.NodeName, log))
	}
	for _, c := range cards {
		if c.Fault != "" {
			log.Info("card found but NVML cannot describe it; advertised unhealthy", logging.KeyGPU, c.UUID, "index", c.Index, logging.KeyReason, c.Fault)
			continue
		}
		if r := c.MIG.Reason(); r != "" {
			log.Info("card found in MIG mode; advertised unhealthy", logging.KeyGPU, c.UUID, "index", c.Index, "model", c.Model, logging.KeyReason, r)
			for _, in := range c.Instances {
				log.Info("MIG instance found", keyResource, cfg.Names.MIGResource(in.Profile), "mig", in.UUID, "profile", in.Profile,
					logging.KeyGPU, c.UUID, "gi", in.GI, "ci", in.CI, "fault", in.Fault)
			}
			continue
		}
		log.Info("card found", logging.KeyGPU, c.UUID, "index", c.Index, "model", c.Model, "memoryMiB", c.MemoryMiB, "numa", c.NUMA, "pciBusID", c.PCIBusID)
	}

	if len(cfg.MIGDynamicProfiles) > 0 {
		if cards, err = withDynamicMIG(lib, cards, cfg.MIGDynamicProfiles, log); err != nil {
			return err
		}
	}

	cardLinks, err := nvidia.DiscoverLinks(lib, cards)
	if err != nil {
		log.Error(err, "links between cards not discovered; the inventory carries none")
	}
	logLinks(log, cards, cardLinks)

	limiter, backend, why := cfg.Sharing.detectMemoryLimits(lib, symbols, cards)
	if limiter != nil {
		log.Info("kernel memory limits: shared containers' pods are capped at their reservation on each card", "backend", backend, "cgroupRoot", cfg.Sharing.CgroupRoot)
	} else {
		log.Info("no kernel memory limits", logging.KeyReason, why)
	}

	// Dynamic MIG: the plugin creates and destroys instances at the placements the extender chose.
	var migControl nvidia.MIGControl
	if ul, ok := lib.(nvidia.UUIDLibrary); ok && len(cfg.MIGDynamicProfiles) > 0 {
		migControl = nvidia.Initialised{Lib: lib, Control: nvidia.MIG{Lib: ul}}
	}

	m := newMetrics()
	// PodResources, asked at GetPreferredAllocation and Allocate which pod is being admitted
	// (admitting.go); the connection is made on first use, and again after a kubelet restart.
	prConn, err := grpc.NewClient("unix://"+cfg.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("pod-resources client: %w", err)
	}
	defer prConn.Close()
	p := newPlugin(pluginOptions{PodResources: podresourcesapi.NewPodResourcesListerClient(prConn), Node: cfg.NodeName, Names: cfg.Names, SchedulerNames: []string{cfg.SchedulerName, cfg.ExactSchedulerName}, Cards: cards, Links: cardLinks, Shares: cfg.Shares, Topology: cfg.Topology,
		DeviceList: cfg.DeviceList, Sharing: cfg.Sharing, MemoryLimiter: limiter, MemoryBackend: backend, Log: log.WithName("plugin"), Metrics: m, MIG: migControl,
		KubeletRecord: func() (kubeletrecord.Record, error) {
			return kubeletrecord.Read(filepath.Join(cfg.DevicePluginDir, kubeletrecord.CheckpointFile))
		}})
	if cfg.Sharing.Mode == annotations.SharingHAMiCore {
		if err := writePreload(cfg.Sharing.HAMiCorePreloadDir); err != nil {
			return err
		}
		if err := makeLockDir(cfg.Sharing.HAMiCoreLockDir); err != nil {
			return err
		}
	}

	podInformers := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
	}))
	nodeInformers := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.NodeName).String()
	}))
	podInformer := podInformers.Core().V1().Pods().Informer()
	nodeInformer := nodeInformers.Core().V1().Nodes()

	records := newRecordWriter(p, client, log.WithName("records"))
	inventory := newInventoryWriter(p, client, cfg.NodeName, func() (string, bool) {
		n, err := nodeInformer.Lister().Get(cfg.NodeName)
		if err != nil {
			return "", false
		}
		return n.Annotations[annotations.GPUInventory], true
	}, log.WithName("inventory"))
	p.record = records.enqueue
	p.deleted = records.enqueue // its sync forgets what it wrote on the pod
	p.devicesChanged = inventory.enqueue

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	events := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "cardinal-device-plugin", Host: cfg.NodeName})
	nodeRef := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: cfg.NodeName, UID: types.UID(cfg.NodeName)}
	p.healthChanged = func(ev nvidia.HealthEvent) { recordHealthEvent(events, nodeRef, ev) }
	for _, ev := range discoveryHealth(cards) {
		recordHealthEvent(events, nodeRef, ev)
	}
	p.failed = func(e *AllocateError) {
		reason := "CardinalAllocateFailed"
		if e.Reason == ReasonWrongResponse || e.Reason == ReasonUnverified {
			reason = EventWrongContainer
		}
		for _, pod := range e.Pods {
			ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
			events.Event(ref, corev1.EventTypeWarning, reason, e.Error())
		}
	}
	evictions := newEvictor(client, log.WithName("evict"))
	p.evict = evictions.enqueue

	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { upsert(p, o) },
		UpdateFunc: func(_, o any) { upsert(p, o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if pod, ok := o.(*corev1.Pod); ok {
				p.DeletePod(pod)
			}
		},
	}); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { inventory.enqueue() },
		UpdateFunc: func(_, _ any) { inventory.enqueue() },
	}); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	podInformers.Start(ctx.Done())
	nodeInformers.Start(ctx.Done())
	defer podInformers.Shutdown()
	defer nodeInformers.Shutdown()

	links := kubeletLinks(p, cfg.DevicePluginDir, cfg.Names, log.WithName("kubelet"))
	var synced atomic.Bool
	ready := func() bool {
		for _, l := range links {
			if !l.registered.Load() {
				return false
			}
		}
		return synced.Load()
	}

	if cfg.Listen != "" {
		l, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
		}
		srv := &http.Server{Handler: httpHandler(m, ready), ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http: %w", err)
			}
			return nil
		})
		g.Go(func() error {
			<-ctx.Done()
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			return srv.Shutdown(sctx)
		})
	}

	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced, nodeInformer.Informer().HasSynced) {
		return errors.Join(ctx.Err(), g.Wait())
	}
	synced.Store(true)
	p.MarkSynced()
	log.Info("pod and node caches synced")

	g.Go(func() error { records.run(ctx); return nil })
	g.Go(func() error { evictions.run(ctx); return nil })
	g.Go(func() error { inventory.run(ctx); return nil })
	kick, err := startKubeletTopology(ctx, g, cfg, inventory, log.WithName("kubelet-topology"))
	if err != nil {
		return errors.Join(err, g.Wait())
	}
	p.record = func(uid types.UID) { records.enqueue(uid); kick() }
	inventory.enqueue()
	g.Go(func() error {
		return nvidia.WatchHealth(ctx, nvidia.HealthConfig{Lib: lib, Cards: cards, RecoveryInterval: cfg.HealthRecoveryInterval,
			IgnoredXids: cfg.IgnoredXids.set(), ResetXids: cfg.ResetXids.set(), Log: log.WithName("health")},
			func(ev nvidia.HealthEvent) { p.SetHealth(ev) })
	})
	if probe := cfg.SharingProbe; probe != nil || p.sharingProbe(cfg.Shares) != nil {
		if probe == nil {
			probe = p.sharingProbe(cfg.Shares)
		}
		g.Go(func() error {
			watchSharing(ctx, probe, cfg.Sharing.CheckInterval, func(err error) { p.SetSharingHealth(err) }, log.WithName("sharing"))
			return nil
		})
		if p.tenants != nil {
			g.Go(func() error {
				p.tenants.watch(ctx, probe, func(err error) { p.SetSharingHealth(err) }, log.WithName("mps-tenants"))
				return nil
			})
		}
	}
	// The first PodResources pass comes before the plugin registers: the IDs pods hold are those
	// PodResources reports (a record alone does not count), and the first device list must already
	// withhold what they hold under another share count.
	firstPass := make(chan struct{})
	g.Go(func() error {
		return reconcileLoop(ctx, p, cfg.PodResourcesSocket, cfg.ReconcileInterval, records.enqueue, firstPass, log.WithName("podresources"))
	})
	for _, link := range links {
		g.Go(func() error {
			select {
			case <-firstPass:
			case <-ctx.Done():
				return nil
			}
			return link.run(ctx)
		})
	}
	return g.Wait()
}

// Reasons of the Events recorded on the Node when a card changes health.
const (
	EventGPUUnhealthy = "CardinalGPUUnhealthy"
	EventGPUHealthy   = "CardinalGPUHealthy"
)

// discoveryHealth is the health events of the cards advertised unhealthy from the start for a reason
// the health watcher does not report as a change: a card in MIG mode (its Node Event says why it is
// not served). Cards not described at discovery are reported by the watcher.
func discoveryHealth(cards []nvidia.Card) []nvidia.HealthEvent {
	var out []nvidia.HealthEvent
	for _, c := range cards {
		if r := c.MIG.Reason(); r != "" && c.UUID != "" && c.Fault == "" {
			out = append(out, nvidia.HealthEvent{UUID: c.UUID, Reason: r})
		}
	}
	return out
}

// recordHealthEvent records a card's health change on its Node.
func recordHealthEvent(rec record.EventRecorder, node *corev1.ObjectReference, ev nvidia.HealthEvent) {
	if ev.Healthy {
		rec.Eventf(node, corev1.EventTypeNormal, EventGPUHealthy, "GPU %s is healthy again: %s", ev.UUID, ev.Reason)
		return
	}
	msg := "GPU %s is unhealthy: %s"
	if ev.ResetRequired {
		msg += "; it stays unhealthy until the card is reset or the device plugin restarts"
	}
	rec.Eventf(node, corev1.EventTypeWarning, EventGPUUnhealthy, msg, ev.UUID, ev.Reason)
}

// publishedInventory returns the inventory the Node carries, or nil when there is none (or it cannot
// be read): used only to name cards NVML cannot name.
func publishedInventory(ctx context.Context, client kubernetes.Interface, node string, log logr.Logger) *annotations.Inventory {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		log.Info("cannot read the Node to name cards NVML cannot name", "error", err.Error())
		return nil
	}
	v, ok := n.Annotations[annotations.GPUInventory]
	if !ok {
		return nil
	}
	inv, err := annotations.DecodeInventory(v)
	if err != nil {
		log.Info("the Node's inventory does not decode; cards NVML cannot name are left out", "error", err.Error())
		return nil
	}
	return &inv
}

func upsert(p *Plugin, o any) {
	if pod, ok := o.(*corev1.Pod); ok {
		p.UpsertPod(pod)
	}
}

func httpHandler(m *metrics, ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not registered with the kubelet or caches not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	return mux
}

// reconcileLoop compares PodResources with the records at start and every interval; it closes
// firstPass once the first comparison was tried (whether or not PodResources answered).
func reconcileLoop(ctx context.Context, p *Plugin, socket string, every time.Duration, enqueue func(types.UID), firstPass chan<- struct{}, log logr.Logger) error {
	var once sync.Once
	done := func() { once.Do(func() { close(firstPass) }) }
	defer done()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("pod-resources client: %w", err)
	}
	defer conn.Close()
	lister := podresourcesapi.NewPodResourcesListerClient(conn)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := reconcileOnce(ctx, p, lister, enqueue); err != nil && ctx.Err() == nil {
			log.Info("PodResources reconciliation failed; will retry", "error", err.Error())
		}
		done()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func reconcileOnce(ctx context.Context, p *Plugin, lister podResourcesLister, enqueue func(types.UID)) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := lister.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return fmt.Errorf("list pod resources: %w", err)
	}
	for _, uid := range p.applyPodResources(resp) {
		enqueue(uid)
	}
	p.reclaim(resp)
	return nil
}
