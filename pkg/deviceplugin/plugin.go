package deviceplugin

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// Plugin is the kubelet-facing device plugin and the node's view of its pods. Its gRPC methods answer
// from memory under one mutex: no API call and no decoding on the Allocate path.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	node     string
	names    annotations.ResourceNames
	topology bool
	// schedulerNames are Cardinal's scheduler profiles (Config.SchedulerName and
	// ExactSchedulerName; "" entries are none).
	schedulerNames []string
	// deviceList is how Allocate names the cards to the container runtime.
	deviceList DeviceListConfig
	// sharing is how shared containers' limits are enforced on this node (sharing.go).
	sharing SharingConfig
	// limiter sets the kernel memory limits of pods with shared containers (memlimits.go); nil: the
	// plugin sets none. memBackend is its nvidia.MemoryLimits* backend, cgroupRoot where pods'
	// cgroups are found.
	limiter    memoryLimiter
	memBackend string
	cgroupRoot string
	log        logr.Logger
	metrics    *metrics
	// record is called (outside the lock) with pods whose allocation record must be written.
	record func(types.UID)
	// devicesChanged is called (outside the lock) after a health change.
	devicesChanged func()
	// healthChanged is called (outside the lock) with every health change that took effect.
	healthChanged func(nvidia.HealthEvent)
	// failed is called (outside the lock) when Allocate or PreStartContainer refuses a request.
	failed func(*AllocateError)
	// deleted is called (outside the lock) with every pod the plugin forgets.
	deleted func(types.UID)
	// evict is called (outside the lock) with a pod whose container the kubelet's record shows was
	// given another's devices or limits, when a controller re-creates it (verify.go).
	evict func(pod *podEntry, why string)
	// strangers are pods PodResources listed that the cache did not know after a wait (admitting.go).
	strangers map[string]bool
	// podResources is the kubelet's PodResources API, asked which pod is being admitted
	// (admitting.go); nil: never asked.
	podResources podResourcesLister
	// kubeletRecord reads the kubelet's record of who holds which devices (verify.go).
	kubeletRecord recordReader
	// mig creates and destroys the instances of dynamic MIG placements (dynmig.go); nil: none can
	// be created (a placement's Allocate is refused).
	mig nvidia.MIGControl

	mu    sync.Mutex
	table *deviceTable
	pods  map[types.UID]*podEntry
	byKey map[string]types.UID
	seq   uint64
	// synced is set once the pod informer has synced (MarkSynced).
	synced bool
	// sharingErr is why the sharing mode's enforcement does not work now (nil: it works, or the
	// mode is none); set by SetSharingHealth.
	sharingErr error
	// tenants is the node's MPS tenant as asked of the daemon (mode mps with --mps-tenant-dir; nil
	// otherwise): see mpstenant.go.
	tenants *mpsTenants
	// local holds what this process learned (its Allocate answers, PodResources) and has not yet
	// seen come back on the pod, by pod and container.
	local map[types.UID]map[string]annotations.ContainerAllocation
	// seen holds the IDs the kubelet gave each container as this process saw them (its Allocate
	// answers, PodResources), by pod and container: what counts as held (saw).
	seen map[types.UID]map[string][]string
	// rejected are pods whose admission the plugin certainly failed (AllocateError.Admitted).
	rejected map[types.UID]bool
	// dropped are containers whose allocation record on the pod must lose its entry: the kubelet's
	// record showed that another container holds what the plugin had served them (verify.go).
	dropped map[types.UID]map[string]bool
	// changed is closed and replaced on every health change, waking ListAndWatch streams.
	changed chan struct{}
	// inventoryDirty: a dynamic MIG instance was created or destroyed and the inventory must be
	// rewritten (flushInventory).
	inventoryDirty bool
	// podsChanged is closed and replaced on every pod update, waking calls that wait for the cache.
	podsChanged chan struct{}
	// cacheWait bounds how long a call waits for the informer to show the pod the kubelet is
	// admitting: the kubelet's own watch may deliver the binding before the plugin's does.
	cacheWait time.Duration
}

var _ pluginapi.DevicePluginServer = (*Plugin)(nil)

// keyResource is the log key of the resource a call or a device is about.
const keyResource = "resource"

type pluginOptions struct {
	Node  string
	Names annotations.ResourceNames
	// SchedulerNames are Cardinal's scheduler profiles; empty names are ignored.
	SchedulerNames []string
	Cards          []nvidia.Card
	// Links are the links between Cards (nvidia.DiscoverLinks: positions in Cards).
	Links    []annotations.Link
	Shares   int
	Topology bool
	// DeviceList: see Plugin.deviceList; empty fields take DefaultDeviceListConfig's.
	DeviceList DeviceListConfig
	// Sharing: see Plugin.sharing; the zero value is mode none. An enforced mode starts not ready
	// until SetSharingHealth says otherwise.
	Sharing SharingConfig
	// MemoryLimiter and MemoryBackend: see Plugin.limiter (nil: no kernel memory limits); pods'
	// cgroups are looked for under Sharing.CgroupRoot.
	MemoryLimiter memoryLimiter
	MemoryBackend string
	Log           logr.Logger
	Metrics       *metrics
	// CacheWait: see Plugin.cacheWait; zero means DefaultCacheWait.
	CacheWait time.Duration
	// KubeletRecord: see Plugin.kubeletRecord; nil refuses every container start (fail closed).
	KubeletRecord recordReader
	// PodResources: see Plugin.podResources.
	PodResources podResourcesLister
	// MIG: see Plugin.mig.
	MIG nvidia.MIGControl
}

// DefaultCacheWait is how long GetPreferredAllocation and Allocate wait, at most, for the pod cache
// to show a container in flight that could be the one the kubelet is admitting.
const DefaultCacheWait = 5 * time.Second

func newPlugin(o pluginOptions) *Plugin {
	p := &Plugin{
		node: o.Node, names: o.Names, schedulerNames: o.SchedulerNames, topology: o.Topology, deviceList: o.DeviceList.withDefaults(), sharing: o.Sharing.withDefaults(),
		limiter: o.MemoryLimiter, memBackend: o.MemoryBackend, cgroupRoot: o.Sharing.CgroupRoot,
		log: o.Log, metrics: o.Metrics,
		record: func(types.UID) {}, devicesChanged: func() {}, failed: func(*AllocateError) {}, healthChanged: func(nvidia.HealthEvent) {},
		evict: func(*podEntry, string) {}, deleted: func(types.UID) {}, kubeletRecord: o.KubeletRecord, podResources: o.PodResources, strangers: map[string]bool{}, dropped: map[types.UID]map[string]bool{},
		mig:   o.MIG,
		table: newDeviceTable(o.Cards, o.Shares),
		pods:  map[types.UID]*podEntry{}, byKey: map[string]types.UID{},
		local:    map[types.UID]map[string]annotations.ContainerAllocation{},
		seen:     map[types.UID]map[string][]string{},
		rejected: map[types.UID]bool{},
		changed:  make(chan struct{}), podsChanged: make(chan struct{}),
		cacheWait: o.CacheWait,
	}
	if p.cacheWait <= 0 {
		p.cacheWait = DefaultCacheWait
	}
	if p.metrics == nil {
		p.metrics = newMetrics()
	}
	if p.sharing.enforced() {
		p.sharingErr = errSharingUnchecked
	}
	if p.sharing.Mode == annotations.SharingMPS && p.sharing.MPSTenantDir != "" {
		t, err := loadMPSTenants(p.sharing.MPSTenantDir)
		if err != nil {
			// The next tenant switch writes a fresh request.
			p.log.Error(err, "cannot read the last MPS tenant request")
		}
		p.tenants = t
	}
	p.table.addInstances(o.Cards, o.Names)
	p.table.setLinks(o.Cards, o.Links)
	p.metrics.setDevices(p.table)
	p.metrics.registry.MustRegister(holdings{p})
	return p
}

// UpsertPod records a pod from the informer. Pods not bound to this node are dropped.
func (p *Plugin) UpsertPod(pod *corev1.Pod) {
	if pod.Spec.NodeName != p.node {
		p.DeletePod(pod)
		return
	}
	e := newPodEntry(pod, p.node, p.names, p.schedulerNames)
	p.mu.Lock()
	if old, ok := p.pods[pod.UID]; ok {
		e.seq, e.listed = old.seq, old.listed
	} else {
		p.seq++
		e.seq, e.listed = p.seq, !p.synced
	}
	p.pods[pod.UID] = e
	p.byKey[e.key()] = pod.UID
	delete(p.strangers, e.key())
	if p.sharing.Mode == annotations.SharingMPS {
		p.switchTenantLocked(e)
	}
	close(p.podsChanged)
	p.podsChanged = make(chan struct{})
	// Local knowledge the pod now carries is dropped: the record is the truth from here on.
	if loc := p.local[pod.UID]; loc != nil {
		for name, c := range loc {
			if r, ok := e.Recorded[name]; ok && sameSet(r.IDs, c.IDs) && r.Source == c.Source {
				delete(loc, name)
			}
		}
		if len(loc) == 0 {
			delete(p.local, pod.UID)
		}
	}
	for name := range p.dropped[pod.UID] {
		if _, ok := e.Recorded[name]; !ok {
			delete(p.dropped[pod.UID], name)
		}
	}
	if len(p.dropped[pod.UID]) == 0 {
		delete(p.dropped, pod.UID)
	}
	p.refreshHeldLocked()
	p.mu.Unlock()
}

// DeletePod forgets a pod.
func (p *Plugin) DeletePod(pod *corev1.Pod) {
	p.mu.Lock()
	if e, ok := p.pods[pod.UID]; ok {
		if p.byKey[e.key()] == pod.UID {
			delete(p.byKey, e.key())
		}
		delete(p.pods, pod.UID)
	}
	delete(p.local, pod.UID)
	delete(p.seen, pod.UID)
	delete(p.rejected, pod.UID)
	delete(p.dropped, pod.UID)
	p.refreshHeldLocked()
	p.mu.Unlock()
	p.deleted(pod.UID)
}

// refreshHeldLocked adapts the advertised IDs to the IDs pods hold (deviceTable.setHeld) and wakes
// ListAndWatch when that changes what the kubelet sees.
func (p *Plugin) refreshHeldLocked() {
	held := map[string]bool{}
	for _, h := range p.holdersLocked("") {
		for _, id := range h.Held {
			held[id] = true
		}
	}
	if p.table.setHeld(held) {
		close(p.changed)
		p.changed = make(chan struct{})
		p.log.Info("IDs held from another share count", "extra", len(p.table.extra), "withheld", len(p.table.withheld))
	}
}

// SetHealth applies a health change; it reports whether anything changed. A card that is already
// unhealthy and now needs a reset counts as a change (the Node's event says so), though what the
// kubelet sees does not change.
//
// ev.UUID names a card or a MIG instance (whose events say its card's health too). A card in MIG
// mode stays unhealthy as a whole card whatever its events say. A change wakes the ListAndWatch
// stream of every resource.
func (p *Plugin) SetHealth(ev nvidia.HealthEvent) bool {
	p.mu.Lock()
	ok, changed := p.table.setHealth(ev.UUID, ev.Healthy)
	if !changed {
		p.mu.Unlock()
		if ok && !ev.Healthy && ev.ResetRequired {
			p.healthChanged(ev)
		}
		return false
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.metrics.setDevices(p.table)
	p.mu.Unlock()
	p.log.Info("device health changed", logging.KeyGPU, ev.UUID, "healthy", ev.Healthy, logging.KeyReason, ev.Reason)
	p.devicesChanged()
	p.healthChanged(ev)
	return true
}

// errSharingUnchecked is the sharing state before the first check.
var errSharingUnchecked = errors.New("not checked yet")

// sharingReadyLocked is the readiness the inventory publishes: the last check passed, or the MPS
// daemon is starting afresh for a new tenant (for at most tenantSwitchWait): the new tenant's next
// pods may come (Allocate waits for the daemon), and no other namespace's may anyway. p.mu held.
func (p *Plugin) sharingReadyLocked() bool {
	return p.sharingErr == nil || (p.tenants != nil && p.tenants.switching(tenantSwitchWait))
}

// sharingProbe is the probe of the node's sharing mode (nil for mode none).
func (p *Plugin) sharingProbe(shares int) SharingProbe {
	probe := p.sharing.probe(shares)
	if mp, ok := probe.(mpsProbe); ok && p.tenants != nil {
		mp.tenants = p.tenants
		return mp
	}
	return probe
}

// SetSharingHealth records the latest check of the sharing mode's enforcement (nil: it works); it
// reports whether readiness changed, and then has the inventory rewritten.
func (p *Plugin) SetSharingHealth(err error) bool {
	p.mu.Lock()
	was := p.sharingReadyLocked()
	p.sharingErr = err
	changed := p.sharingReadyLocked() != was
	p.mu.Unlock()
	if changed {
		p.devicesChanged()
	}
	return changed
}

// Inventory returns the node's inventory as it should be published.
func (p *Plugin) Inventory() annotations.Inventory {
	p.mu.Lock()
	defer p.mu.Unlock()
	inv := p.table.inventory()
	if p.sharing.enforced() || p.limiter != nil {
		memory, compute := memoryEnforcement(p.sharing.Mode, p.memBackend)
		inv.Sharing = &annotations.Sharing{Mode: p.sharing.Mode, Ready: p.sharingReadyLocked(),
			EnforcementV: annotations.EnforcementVersion, Memory: memory, Compute: compute, ExclusiveCards: p.sharing.exclusiveCards()}
	}
	return inv
}

// holdersLocked lists every GPU container of the pods on this node that takes devices of resource
// res ("": of any managed resource), in the order the kubelet admits them (see admittedBefore),
// containers in the order the kubelet allocates them.
func (p *Plugin) holdersLocked(res corev1.ResourceName) []holder {
	pods := make([]*podEntry, 0, len(p.pods))
	for _, e := range p.pods {
		if len(e.Order) > 0 && !e.Gone && !p.rejected[e.UID] {
			pods = append(pods, e)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return admittedBefore(pods[i], pods[j]) })
	var hs []holder
	for _, e := range pods {
		for _, c := range e.Order {
			if res != "" && c.Resource != res {
				continue
			}
			h := holder{Pod: e, Name: c.Name, Resource: c.Resource, Count: c.Count, Mixed: c.Mixed}
			if e.Assignment != nil {
				h.Assigned = e.Assignment.Container(c.Name)
			}
			// Served, and holding which IDs, only as this process saw it (its Allocate answers,
			// PodResources, read once before the plugin registers): anyone who can annotate a pod can
			// write an allocation record, so a record alone counts for nothing here.
			if ids, ok := p.seen[e.UID][c.Name]; ok {
				h.Allocated, h.Held = true, ids
			}
			hs = append(hs, h)
		}
	}
	return hs
}

// MarkSynced tells the plugin that its pod informer has synced: pods it sees from now on arrive in
// bind order.
func (p *Plugin) MarkSynced() {
	p.mu.Lock()
	p.synced = true
	p.mu.Unlock()
}

// Resources lists the resources the plugin serves, each registered with the kubelet on a socket of
// its own: the GPU resource, then one per MIG profile of the node's instances (mig.go). The set is
// fixed for the plugin's life.
func (p *Plugin) Resources() []corev1.ResourceName {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.table.resources()
}

// Server is the device plugin service of one resource: the Plugin itself for the GPU resource.
// Every resource's service shares the plugin's state (pods, devices, health).
func (p *Plugin) Server(res corev1.ResourceName) pluginapi.DevicePluginServer {
	if res == p.names.GPU {
		return p
	}
	return &resourceServer{p: p, res: res}
}

// resourceServer serves one MIG resource.
type resourceServer struct {
	pluginapi.UnimplementedDevicePluginServer
	p   *Plugin
	res corev1.ResourceName
}

var _ pluginapi.DevicePluginServer = (*resourceServer)(nil)

func (s *resourceServer) GetDevicePluginOptions(ctx context.Context, e *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return s.p.GetDevicePluginOptions(ctx, e)
}

func (s *resourceServer) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	return s.p.listAndWatch(s.res, stream)
}

func (s *resourceServer) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return s.p.getPreferredAllocation(ctx, s.res, req)
}

func (s *resourceServer) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return s.p.allocate(ctx, s.res, req)
}

func (s *resourceServer) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return s.p.preStart(ctx, s.res, req)
}

// ListAndWatch sends the GPU resource's device list, then again after every health change, until
// the stream ends.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	return p.listAndWatch(p.names.GPU, stream)
}

// listAndWatch is ListAndWatch for resource res: every change of any device wakes every stream.
func (p *Plugin) listAndWatch(res corev1.ResourceName, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		devs, changed := p.currentDevices(res)
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

// currentDevices is what ListAndWatch sends now, and the channel closed at the next change.
func (p *Plugin) currentDevices(res corev1.ResourceName) ([]*pluginapi.Device, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock() // also on a panic: the recovery interceptor keeps the plugin serving
	return p.table.devicesOf(res, p.topology), p.changed
}

// GetPreferredAllocation steers the kubelet to the assigned IDs of the GPU resource (see preferred).
func (p *Plugin) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return p.getPreferredAllocation(ctx, p.names.GPU, req)
}

// getPreferredAllocation is GetPreferredAllocation for resource res: only containers that take
// devices of res are candidates.
func (p *Plugin) getPreferredAllocation(ctx context.Context, res corev1.ResourceName, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	list := p.listPodResources(ctx)
	holders, _ := p.lockWhenVisible(ctx, res, list, p.cacheWait, func(hs []holder) bool {
		for _, c := range req.ContainerRequests {
			if !visible(hs, int(c.AllocationSize), nil) {
				return false
			}
		}
		return true
	})
	defer p.mu.Unlock()
	for _, c := range req.ContainerRequests {
		available, mustInclude := p.table.only(res, c.AvailableDeviceIDs), p.table.only(res, c.MustIncludeDeviceIDs)
		ids, fromAssignment := preferred(p.table, holders, available, mustInclude, int(c.AllocationSize))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
		p.metrics.preferred(res, fromAssignment)
		p.log.V(1).Info("preferred allocation", keyResource, res, logging.KeyDevices, ids, "fromAssignment", fromAssignment, "size", c.AllocationSize)
	}
	return resp, nil
}

// Allocate finds the container the GPU resource's IDs belong to and returns its environment; the
// allocation record is written on the pod afterwards, asynchronously.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return p.allocate(ctx, p.names.GPU, req)
}

// allocate is Allocate for resource res: the IDs must be devices of res, and only containers that
// take devices of res are candidates.
func (p *Plugin) allocate(ctx context.Context, res corev1.ResourceName, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	start := time.Now()
	resp := &pluginapi.AllocateResponse{}
	ready := func(hs []holder) bool {
		for _, c := range req.ContainerRequests {
			if !visible(hs, len(c.DevicesIds), c.DevicesIds) || unresolved(p.table, res, hs, c.DevicesIds) {
				return false
			}
		}
		return true
	}
	// IDs that are nobody's assignment are first given a short while to become one: in a burst the
	// kubelet may be admitting a pod whose binding the informer has not delivered yet, and serving
	// a visible pod a substitute would hand that pod's cards (and limits) to the wrong container.
	list := p.listPodResources(ctx)
	holders, exact := p.lockWhenVisible(ctx, res, list, p.cacheWait/substituteWaitDivisor, func(hs []holder) bool {
		if !ready(hs) {
			return false
		}
		for _, c := range req.ContainerRequests {
			if substitutes(p.table, res, hs, c.DevicesIds) {
				return false
			}
		}
		return true
	})
	if !exact && !ready(holders) {
		p.mu.Unlock()
		holders, _ = p.lockWhenVisible(ctx, res, list, p.cacheWait, ready)
	}
	// The pod being admitted may be the node's new MPS tenant: the daemon is starting afresh for
	// it (mpstenant.go), and nothing is served until it has.
	if p.tenants != nil && p.tenants.pending() != nil {
		p.mu.Unlock()
		p.tenants.wait(ctx, tenantSwitchWait)
		// A periodic check that began before the daemon vouched may have reported the switch
		// after it ended: check again before serving.
		p.tenants.recheck(ctx)
		holders, _ = p.lockWhenVisible(ctx, res, list, p.cacheWait, ready)
	}
	served, toRecord, aerr := p.serveLocked(res, holders, req, resp)
	p.flushInventory()
	if aerr != nil {
		p.metrics.allocated(res, string(aerr.Reason), time.Since(start))
		var ids [][]string
		for _, c := range req.ContainerRequests {
			ids = append(ids, c.DevicesIds)
		}
		p.log.Error(aerr, "allocate refused", keyResource, res, logging.KeyDevices, ids, logging.KeyReason, string(aerr.Reason))
		p.failed(aerr)
		return nil, status.Error(codeOf(aerr.Reason), aerr.Error())
	}
	result := "exact"
	for _, o := range served {
		switch {
		case o.Guess:
			result = "guessed"
			p.log.Info("allocated to the likeliest of several containers; the kubelet's record decides at start", keyResource, res, logging.KeyPod, o.Owner.Pod.key(),
				logging.KeyContainer, o.Owner.Name, logging.KeyDevices, o.IDs)
		case !o.Owner.Pod.HasAssignment:
			result = "unmanaged"
			p.log.Info("allocated to a pod Cardinal did not schedule", keyResource, res, logging.KeyPod, o.Owner.Pod.key(), logging.KeyContainer, o.Owner.Name, logging.KeyDevices, o.IDs)
		case !o.Exact:
			result = "corrected"
			p.log.Info("allocated other devices than assigned; record corrected", keyResource, res, logging.KeyPod, o.Owner.Pod.key(),
				logging.KeyContainer, o.Owner.Name, logging.KeyDevices, o.IDs, "assigned", o.Owner.ids())
		default:
			p.log.Info("allocated", keyResource, res, logging.KeyPod, o.Owner.Pod.key(), logging.KeyContainer, o.Owner.Name, logging.KeyDevices, o.IDs)
		}
	}
	p.metrics.allocated(res, result, time.Since(start))
	for _, uid := range toRecord {
		p.record(uid)
	}
	return resp, nil
}

// serveLocked resolves every container request of an Allocate call and fills resp; it unlocks
// p.mu (also when it panics: the gRPC recovery interceptor then fails the call, and the plugin must
// go on serving). On success the served containers are recorded locally.
func (p *Plugin) serveLocked(res corev1.ResourceName, holders []holder, req *pluginapi.AllocateRequest, resp *pluginapi.AllocateResponse) ([]outcome, []types.UID, *AllocateError) {
	defer p.mu.Unlock()
	var served []outcome
	for _, c := range req.ContainerRequests {
		o, aerr := resolve(p.table, res, holders, c.DevicesIds)
		if aerr == nil && p.sharingErr != nil && shared(o) {
			aerr = refuse(ReasonSharingNotReady, []*podEntry{o.Owner.Pod}, "container %s of pod %s shares its cards, but this node's %s sharing cannot enforce its limits now: %v",
				o.Owner.Name, o.Owner.Pod.key(), p.sharing.Mode, p.sharingErr)
			if o.Certain {
				aerr.Admitted = o.Owner.Pod
			}
		}
		if aerr == nil && p.sharing.Mode == annotations.SharingMPS && shared(o) {
			if other := p.otherTenant(o.Owner.Pod); other != nil {
				aerr = refuse(ReasonOtherTenant, []*podEntry{o.Owner.Pod}, "container %s of pod %s shares its cards in mps mode, but pod %s of namespace %s "+
					"shares cards on this node: one MPS daemon (its /dev/shm and control pipe) serves one namespace at a time",
					o.Owner.Name, o.Owner.Pod.key(), other.key(), other.Namespace)
				if o.Certain {
					aerr.Admitted = o.Owner.Pod
				}
			}
		}
		if aerr == nil && p.sharing.Mode == annotations.SharingMPS {
			aerr = overMPSSlot(p.table, o, p.names, p.table.shares)
		}
		if aerr == nil && res == p.names.GPU && p.sharing.exclusiveCards() && o.Owner != nil && !shared(o) {
			aerr = refuse(ReasonExclusiveCards, []*podEntry{o.Owner.Pod}, "container %s of pod %s takes cards whole, but this node's MPS daemon "+
				"runs its cards in EXCLUSIVE_PROCESS (--mps-compute-mode): only the MPS server may use them, so a process outside MPS "+
				"could not; whole cards go to nodes not in mps mode, or set the daemon's computeMode to DEFAULT",
				o.Owner.Name, o.Owner.Pod.key())
			if o.Certain {
				aerr.Admitted = o.Owner.Pod
			}
		}
		if aerr == nil {
			_, aerr = p.createLocked(o)
		}
		if aerr != nil {
			if aerr.Admitted != nil {
				// The kubelet fails the pod's admission (UnexpectedAdmissionError) and never admits
				// it again; until its Failed status arrives it must not be taken for the next pod.
				p.rejected[aerr.Admitted.UID] = true
			}
			return nil, nil, aerr
		}
		// A later request in the same call must not match this container again.
		o.Owner.Allocated = true
		served = append(served, o)
		resp.ContainerResponses = append(resp.ContainerResponses, containerResponse(p.table, o, p.deviceList, p.sharing))
	}
	var toRecord []types.UID
	for _, o := range served {
		// Pods Cardinal did not schedule are recorded too, at once: the extender counts them in flight
		// until their record says which cards they hold (PodResources corrects a swap between two).
		uid := o.Owner.Pod.UID
		if p.local[uid] == nil {
			p.local[uid] = map[string]annotations.ContainerAllocation{}
		}
		p.local[uid][o.Owner.Name] = allocationRecord(o.Owner.Name, o.IDs, annotations.SourceAllocate)
		p.saw(uid, o.Owner.Name, o.IDs)
		if !slices.Contains(toRecord, uid) {
			toRecord = append(toRecord, uid)
		}
	}
	return served, toRecord, nil
}

// saw remembers the IDs the kubelet gave a container, as Allocate served them or PodResources
// reports them: the only IDs the plugin counts as held (a record on the pod counts only where it
// matches them).
func (p *Plugin) saw(uid types.UID, name string, ids []string) {
	if p.seen[uid] == nil {
		p.seen[uid] = map[string][]string{}
	}
	p.seen[uid][name] = slices.Clone(ids)
}

// lockWhenVisible takes p.mu and returns the holders of resource res once ready accepts them
// (true), or once wait has passed (or ctx ended) without that (false). It returns with p.mu held.
// list is the kubelet's PodResources at the call (nil: not known): holders of pods other than the one
// it shows being admitted are marked so, and until the cache shows every pod list names that could
// be the one, the holders are not ready.
func (p *Plugin) lockWhenVisible(ctx context.Context, res corev1.ResourceName, list *podresourcesapi.ListPodResourcesResponse, wait time.Duration, ready func([]holder) bool) ([]holder, bool) {
	var hs []holder
	view := func() bool {
		hs = p.holdersLocked(res)
		uid, settled := p.admittingLocked(list)
		onlyAdmitting(hs, uid)
		return settled && ready(hs)
	}
	if p.lockWhen(ctx, wait, view) {
		return hs, true
	}
	// Given up waiting: pods list shows that the cache still lacks are not waited for again.
	p.strangersLocked(list)
	view()
	return hs, ready(hs)
}

// lockWhen takes p.mu and returns, with p.mu held, once cond (called with p.mu held) is true (true),
// or once wait has passed or ctx ended without that (false). Every pod update wakes it.
func (p *Plugin) lockWhen(ctx context.Context, wait time.Duration, cond func() bool) bool {
	var deadline <-chan time.Time
	for {
		p.mu.Lock()
		if cond() {
			return true
		}
		if deadline == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		wake := p.podsChanged
		p.mu.Unlock()
		select {
		case <-wake:
			continue
		case <-deadline:
		case <-ctx.Done():
		}
		p.mu.Lock()
		return cond()
	}
}

// unresolved reports whether ids match no assignment and no single owner while the cache may lag:
// in a burst the kubelet can admit a pod whose binding the plugin's informer has not shown yet, and
// other in-flight containers of the same size are then visible; Allocate waits (up to cacheWait)
// for the informer rather than refuse the pod as ambiguous or unowned.
func unresolved(t *deviceTable, res corev1.ResourceName, hs []holder, ids []string) bool {
	o, err := resolve(t, res, hs, ids)
	return o.Guess || err != nil && (err.Reason == ReasonAmbiguous || err.Reason == ReasonNoOwner)
}

// substituteWaitDivisor: Allocate waits cacheWait/substituteWaitDivisor (1 s by default) for IDs
// that are nobody's assignment to become one before it serves them as a substitute.
const substituteWaitDivisor = 5

// substitutes reports whether ids resolve to a Cardinal container whose assignment names other IDs
// (a substitute), which may instead be a pod the informer has not shown yet.
func substitutes(t *deviceTable, res corev1.ResourceName, hs []holder, ids []string) bool {
	o, err := resolve(t, res, hs, ids)
	return err == nil && !o.Exact && o.Owner != nil && o.Owner.Assigned != nil
}

// visible reports whether the cache shows a container in flight that asks for size devices, or one
// (in flight or not) assigned exactly ids: without one the kubelet is admitting a pod the plugin has
// not seen yet.
func visible(hs []holder, size int, ids []string) bool {
	for i := range hs {
		h := &hs[i]
		if inFlight(h) && h.Count == size && !h.NotAdmitting {
			return true
		}
		if ids != nil && h.Assigned != nil && sameSet(h.ids(), ids) {
			return true
		}
	}
	return false
}

func codeOf(r Reason) codes.Code {
	switch r {
	case ReasonInvalidID, ReasonUnknownDevice, ReasonDuplicateID:
		return codes.InvalidArgument
	}
	return codes.FailedPrecondition
}

// pendingRecord returns the allocation record pod uid should carry: what it carries, overlaid with
// what this process learned. changed is false when the pod already carries exactly that.
func (p *Plugin) pendingRecord(uid types.UID) (e podEntry, rec annotations.Allocation, changed, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pe, ok := p.pods[uid]
	if !ok {
		return podEntry{}, rec, false, false
	}
	merged := map[string]annotations.ContainerAllocation{}
	for n, c := range pe.Recorded {
		if p.dropped[uid][n] {
			changed = true
			continue
		}
		merged[n] = c
	}
	for n, c := range p.local[uid] {
		if r, has := merged[n]; !has || !sameSet(r.IDs, c.IDs) || r.Source != c.Source {
			merged[n] = c
			changed = true
		}
	}
	if pe.RecordedErr != nil && len(merged) > 0 {
		changed = true // overwrite a malformed record
	}
	rec = annotations.Allocation{V: annotations.Version, Node: p.node}
	// Containers in the pod's order, then any others by name.
	for _, c := range pe.Order {
		if a, has := merged[c.Name]; has {
			rec.Containers = append(rec.Containers, a)
			delete(merged, c.Name)
		}
	}
	rest := make([]string, 0, len(merged))
	for n := range merged {
		rest = append(rest, n)
	}
	sort.Strings(rest)
	for _, n := range rest {
		rec.Containers = append(rec.Containers, merged[n])
	}
	return *pe, rec, changed, true
}

// applyPodResources takes the kubelet's record of who holds which device as the truth: containers
// whose record differs (or is missing) get a corrected one with Source "podresources". It returns
// the pods whose record must be written.
func (p *Plugin) applyPodResources(list *podresourcesapi.ListPodResourcesResponse) []types.UID {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.refreshHeldLocked()
	var out []types.UID
	for _, pr := range list.GetPodResources() {
		uid, ok := p.byKey[pr.GetNamespace()+"/"+pr.GetName()]
		if !ok {
			continue
		}
		e := p.pods[uid]
		if e.Gone {
			continue
		}
		for _, c := range pr.GetContainers() {
			var ids []string
			// Every managed resource: a container's cards or its MIG instances.
			for _, d := range c.GetDevices() {
				if r := corev1.ResourceName(d.GetResourceName()); r == p.names.GPU || p.names.IsMIGResource(r) {
					ids = append(ids, d.GetDeviceIds()...)
				}
			}
			if len(ids) == 0 {
				continue
			}
			sort.Strings(ids)
			p.saw(uid, c.GetName(), ids)
			cur, has := p.local[uid][c.GetName()]
			if !has {
				cur, has = e.Recorded[c.GetName()]
			}
			if has && sameSet(cur.IDs, ids) {
				continue
			}
			if p.local[uid] == nil {
				p.local[uid] = map[string]annotations.ContainerAllocation{}
			}
			p.local[uid][c.GetName()] = allocationRecord(c.GetName(), ids, annotations.SourcePodResources)
			p.log.Info("recording devices from PodResources", logging.KeyPod, e.key(), logging.KeyContainer, c.GetName(),
				logging.KeyDevices, ids, "previous", cur.IDs)
			p.metrics.reconciled()
			if !slices.Contains(out, uid) {
				out = append(out, uid)
			}
		}
	}
	return out
}
