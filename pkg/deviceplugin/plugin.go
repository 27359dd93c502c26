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
	// deviceList is how Allocate names the cards to the container runtime.
	deviceList DeviceListConfig
	// sharing is how shared containers' limits are enforced on this node (sharing.go).
	sharing SharingConfig
	log     logr.Logger
	metrics *metrics
	// record is called (outside the lock) with pods whose allocation record must be written.
	record func(types.UID)
	// devicesChanged is called (outside the lock) after a health change.
	devicesChanged func()
	// healthChanged is called (outside the lock) with every health change that took effect.
	healthChanged func(nvidia.HealthEvent)
	// failed is called (outside the lock) when Allocate refuses a request.
	failed func(*AllocateError)

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
	// local holds what this process learned (its Allocate answers, PodResources) and has not yet
	// seen come back on the pod, by pod and container.
	local map[types.UID]map[string]annotations.ContainerAllocation
	// changed is closed and replaced on every health change, waking ListAndWatch streams.
	changed chan struct{}
	// podsChanged is closed and replaced on every pod update, waking calls that wait for the cache.
	podsChanged chan struct{}
	// cacheWait bounds how long a call waits for the informer to show the pod the kubelet is
	// admitting: the kubelet's own watch may deliver the binding before the plugin's does.
	cacheWait time.Duration
}

var _ pluginapi.DevicePluginServer = (*Plugin)(nil)

type pluginOptions struct {
	Node     string
	Names    annotations.ResourceNames
	Cards    []nvidia.Card
	Shares   int
	Topology bool
	// DeviceList: see Plugin.deviceList; empty fields take DefaultDeviceListConfig's.
	DeviceList DeviceListConfig
	// Sharing: see Plugin.sharing; the zero value is mode none. An enforced mode starts not ready
	// until SetSharingHealth says otherwise.
	Sharing SharingConfig
	Log     logr.Logger
	Metrics *metrics
	// CacheWait: see Plugin.cacheWait; zero means DefaultCacheWait.
	CacheWait time.Duration
}

// DefaultCacheWait is how long GetPreferredAllocation and Allocate wait, at most, for the pod cache
// to show a container in flight that could be the one the kubelet is admitting.
const DefaultCacheWait = 5 * time.Second

func newPlugin(o pluginOptions) *Plugin {
	p := &Plugin{
		node: o.Node, names: o.Names, topology: o.Topology, deviceList: o.DeviceList.withDefaults(), sharing: o.Sharing.withDefaults(),
		log: o.Log, metrics: o.Metrics,
		record: func(types.UID) {}, devicesChanged: func() {}, failed: func(*AllocateError) {}, healthChanged: func(nvidia.HealthEvent) {},
		table: newDeviceTable(o.Cards, o.Shares),
		pods:  map[types.UID]*podEntry{}, byKey: map[string]types.UID{},
		local:   map[types.UID]map[string]annotations.ContainerAllocation{},
		changed: make(chan struct{}), podsChanged: make(chan struct{}),
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
	p.metrics.setDevices(p.table)
	return p
}

// UpsertPod records a pod from the informer. Pods not bound to this node are dropped.
func (p *Plugin) UpsertPod(pod *corev1.Pod) {
	if pod.Spec.NodeName != p.node {
		p.DeletePod(pod)
		return
	}
	e := newPodEntry(pod, p.node, p.names)
	p.mu.Lock()
	if old, ok := p.pods[pod.UID]; ok {
		e.seq, e.listed = old.seq, old.listed
	} else {
		p.seq++
		e.seq, e.listed = p.seq, !p.synced
	}
	p.pods[pod.UID] = e
	p.byKey[e.key()] = pod.UID
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
	p.refreshHeldLocked()
	p.mu.Unlock()
}

// refreshHeldLocked adapts the advertised IDs to the IDs pods hold (deviceTable.setHeld) and wakes
// ListAndWatch when that changes what the kubelet sees.
func (p *Plugin) refreshHeldLocked() {
	held := map[string]bool{}
	for _, h := range p.holdersLocked() {
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
func (p *Plugin) SetHealth(ev nvidia.HealthEvent) bool {
	p.mu.Lock()
	i, ok := p.table.byUUID[ev.UUID]
	if !ok || p.table.cards[i].Healthy == ev.Healthy {
		p.mu.Unlock()
		if ok && !ev.Healthy && ev.ResetRequired {
			p.healthChanged(ev)
		}
		return false
	}
	p.table.cards[i].Healthy = ev.Healthy
	close(p.changed)
	p.changed = make(chan struct{})
	p.metrics.setDevices(p.table)
	p.mu.Unlock()
	p.log.Info("card health changed", logging.KeyGPU, ev.UUID, "healthy", ev.Healthy, logging.KeyReason, ev.Reason)
	p.devicesChanged()
	p.healthChanged(ev)
	return true
}

// errSharingUnchecked is the sharing state before the first check.
var errSharingUnchecked = errors.New("not checked yet")

// SetSharingHealth records the latest check of the sharing mode's enforcement (nil: it works); it
// reports whether readiness changed, and then has the inventory rewritten.
func (p *Plugin) SetSharingHealth(err error) bool {
	p.mu.Lock()
	changed := (err == nil) != (p.sharingErr == nil)
	p.sharingErr = err
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
	if p.sharing.enforced() {
		inv.Sharing = &annotations.Sharing{Mode: p.sharing.Mode, Ready: p.sharingErr == nil}
	}
	return inv
}

// holdersLocked lists every GPU container of the pods on this node, in the order the kubelet admits
// them (see admittedBefore), containers in the order the kubelet allocates them.
func (p *Plugin) holdersLocked() []holder {
	pods := make([]*podEntry, 0, len(p.pods))
	for _, e := range p.pods {
		if len(e.Order) > 0 && !e.Gone {
			pods = append(pods, e)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return admittedBefore(pods[i], pods[j]) })
	var hs []holder
	for _, e := range pods {
		for _, c := range e.Order {
			h := holder{Pod: e, Name: c.Name, Count: c.Count}
			if e.Assignment != nil {
				h.Assigned = e.Assignment.Container(c.Name)
			}
			if r, rec := e.Recorded[c.Name]; rec {
				h.Allocated, h.Held = true, r.IDs
			}
			if l, ok := p.local[e.UID][c.Name]; ok {
				h.Allocated, h.Held = true, l.IDs
			}
			hs = append(hs, h)
		}
	}
	return hs
}

// admittedBefore orders pods as the kubelet admits them. The kubelet admits one pod at a time, in the
// order its watch delivers the pods bound to its node; the plugin's informer reads the same stream
// from the same API server, so the order the plugin first saw pods (seq) is that order. Pods the
// plugin first saw together in its initial list (after a restart) arrive in name order instead, so
// the bind time (PodScheduled, to the second) comes first and seq breaks ties.
func admittedBefore(a, b *podEntry) bool {
	if a.listed && b.listed && !a.bound.Equal(b.bound) {
		return a.bound.Before(b.bound)
	}
	return a.seq < b.seq
}

// certainlyBefore reports whether the kubelet certainly admits a before b: both came through the
// watch in that order, or a was listed at start and b came later, or both were listed and a was bound
// in an earlier second. Pods listed together and bound in the same second are not ordered.
func certainlyBefore(a, b *podEntry) bool {
	if a.listed && b.listed {
		return a.bound.Before(b.bound)
	}
	return admittedBefore(a, b)
}

// MarkSynced tells the plugin that its pod informer has synced: pods it sees from now on arrive in
// bind order.
func (p *Plugin) MarkSynced() {
	p.mu.Lock()
	p.synced = true
	p.mu.Unlock()
}

// GetDevicePluginOptions implements the device plugin API.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the device list, then again after every health change, until the stream ends.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		p.mu.Lock()
		devs := p.table.pluginDevices(p.topology)
		changed := p.changed
		p.mu.Unlock()
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

// GetPreferredAllocation steers the kubelet to the assigned IDs (see preferred).
func (p *Plugin) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	holders := p.lockWhenVisible(ctx, func(hs []holder) bool {
		for _, c := range req.ContainerRequests {
			if !visible(hs, int(c.AllocationSize), nil) {
				return false
			}
		}
		return true
	})
	for _, c := range req.ContainerRequests {
		ids, fromAssignment := preferred(p.table, holders, c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
		p.metrics.preferred(fromAssignment)
		p.log.V(1).Info("preferred allocation", logging.KeyDevices, ids, "fromAssignment", fromAssignment, "size", c.AllocationSize)
	}
	p.mu.Unlock()
	return resp, nil
}

// Allocate finds the container the IDs belong to and returns its environment; the allocation record
// is written on the pod afterwards, asynchronously.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	start := time.Now()
	resp := &pluginapi.AllocateResponse{}
	var served []outcome
	holders := p.lockWhenVisible(ctx, func(hs []holder) bool {
		for _, c := range req.ContainerRequests {
			if !visible(hs, len(c.DevicesIds), c.DevicesIds) || unresolved(p.table, hs, c.DevicesIds) {
				return false
			}
		}
		return true
	})
	for _, c := range req.ContainerRequests {
		o, aerr := resolve(p.table, holders, c.DevicesIds)
		if aerr == nil && p.sharingErr != nil && shared(o) {
			aerr = refuse(ReasonSharingNotReady, []*podEntry{o.Owner.Pod}, "container %s of pod %s shares its cards, but this node's %s sharing cannot enforce its limits now: %v",
				o.Owner.Name, o.Owner.Pod.key(), p.sharing.Mode, p.sharingErr)
		}
		if aerr != nil {
			p.mu.Unlock()
			p.metrics.allocated(string(aerr.Reason), time.Since(start))
			p.log.Error(aerr, "allocate refused", logging.KeyDevices, c.DevicesIds, logging.KeyReason, string(aerr.Reason))
			p.failed(aerr)
			return nil, status.Error(codeOf(aerr.Reason), aerr.Error())
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
		if !slices.Contains(toRecord, uid) {
			toRecord = append(toRecord, uid)
		}
	}
	p.mu.Unlock()
	result := "exact"
	for _, o := range served {
		switch {
		case !o.Owner.Pod.HasAssignment:
			result = "unmanaged"
			p.log.Info("allocated to a pod Cardinal did not schedule", logging.KeyPod, o.Owner.Pod.key(), logging.KeyContainer, o.Owner.Name, logging.KeyDevices, o.IDs)
		case !o.Exact:
			result = "corrected"
			p.log.Info("allocated other devices than assigned; record corrected", logging.KeyPod, o.Owner.Pod.key(),
				logging.KeyContainer, o.Owner.Name, logging.KeyDevices, o.IDs, "assigned", o.Owner.ids())
		default:
			p.log.Info("allocated", logging.KeyPod, o.Owner.Pod.key(), logging.KeyContainer, o.Owner.Name, logging.KeyDevices, o.IDs)
		}
	}
	p.metrics.allocated(result, time.Since(start))
	for _, uid := range toRecord {
		p.record(uid)
	}
	return resp, nil
}

// PreStartContainer is not used (the plugin does not ask for it at registration).
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// lockWhenVisible takes p.mu and returns the holders once ready accepts them, or once cacheWait has
// passed (or ctx ended) without that. It returns with p.mu held.
func (p *Plugin) lockWhenVisible(ctx context.Context, ready func([]holder) bool) []holder {
	var deadline <-chan time.Time
	for {
		p.mu.Lock()
		hs := p.holdersLocked()
		if ready(hs) {
			return hs
		}
		if deadline == nil {
			t := time.NewTimer(p.cacheWait)
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
		return p.holdersLocked()
	}
}

// unresolved reports whether ids match no assignment and no single owner while the cache may lag:
// in a burst the kubelet can admit a pod whose binding the plugin's informer has not shown yet, and
// other in-flight containers of the same size are then visible; Allocate waits (up to cacheWait)
// for the informer rather than refuse the pod as ambiguous or unowned.
func unresolved(t *deviceTable, hs []holder, ids []string) bool {
	_, err := resolve(t, hs, ids)
	return err != nil && (err.Reason == ReasonAmbiguous || err.Reason == ReasonNoOwner)
}

// visible reports whether the cache shows a container in flight that asks for size devices, or one
// (in flight or not) assigned exactly ids: without one the kubelet is admitting a pod the plugin has
// not seen yet.
func visible(hs []holder, size int, ids []string) bool {
	for i := range hs {
		h := &hs[i]
		if inFlight(h) && h.Count == size {
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
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == string(p.names.GPU) {
					ids = append(ids, d.GetDeviceIds()...)
				}
			}
			if len(ids) == 0 {
				continue
			}
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
			sort.Strings(ids)
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
