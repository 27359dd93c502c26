package deviceplugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/deviceplugin/kubeletrecord"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// Verify before start (DESIGN.md, "Guess fast, verify before start").
//
// Allocate names no pod, so the plugin guesses which container it serves (owner.go), and a guess can
// be wrong: a pod the kubelet rejects before any device call, a batch admitted in another order after
// a restart or relist. The kubelet, though, records which container it gave the devices to, and the
// very response it will start that container with (its device checkpoint, written after every
// Allocate), and asks the plugin's PreStartContainer before each container of a resource that wants
// it starts. So PreStartContainer reads that record, at the last moment, and lets a container start
// only when the response the kubelet holds for it is the one that container should get: its own cards
// (its assignment, or cards its selectors accept where the kubelet chose others, with room beside the
// pods already there) and its own limits. A container given another's response is refused, naming
// both, with an Event; a pod whose controller re-creates it is evicted, so that a new one is placed;
// a bare pod keeps the Event and its container's waiting reason (the kubelet shows the refusal as
// CreateContainerConfigError). Kernel memory caps are set on the pod the kubelet's record names.
//
// A harmless swap (two containers whose responses are the same, as between replicas) starts: the
// records then follow the kubelet's.

// AllocatedForAnnotation is the container annotation every Allocate response carries: the pod UID and
// container the plugin served the response for ("<uid>/<container>"). PreStartContainer reads it back
// from the kubelet's record to name who the response was made for, and to compare responses whose
// per-container parts (the CDI annotation key, the HAMi-core cache file) differ only by that name.
const AllocatedForAnnotation = "cardinal.io/allocated-for"

// Reasons of a refused PreStartContainer.
const (
	// ReasonUnverified: the kubelet's record could not be read, or shows no container holding the
	// devices, or names a pod the plugin does not know: the container does not start (fail closed;
	// the kubelet retries the start with back-off).
	ReasonUnverified Reason = "unverified"
	// ReasonWrongResponse: the kubelet holds, for the container it starts, a response made for
	// another container (other cards, limits or files).
	ReasonWrongResponse Reason = "wrong-container"
)

// EventWrongContainer is the Event reason on a pod whose container was refused at start because the
// kubelet gave it another container's devices or limits.
const EventWrongContainer = "CardinalWrongContainer"

// recordReader reads the kubelet's record (kubeletrecord.Read of the checkpoint in the device-plugin
// folder).
type recordReader func() (kubeletrecord.Record, error)

// verdict is the outcome of verifying one container the kubelet's record names.
type verdict struct {
	Entry kubeletrecord.Entry
	// Holder is the container the record names (nil when its pod is unknown).
	Holder *holder
	// ServedFor is "<uid>/<container>" of the container the held response was made for ("" when the
	// response carries no name: an older plugin's).
	ServedFor string
	Err       *AllocateError
}

// PreStartContainer verifies the GPU resource's container against the kubelet's record.
func (p *Plugin) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return p.preStart(ctx, p.names.GPU, req)
}

// preStart is PreStartContainer for resource res.
func (p *Plugin) preStart(ctx context.Context, res corev1.ResourceName, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	start := time.Now()
	fail := func(aerr *AllocateError, vs []verdict) (*pluginapi.PreStartContainerResponse, error) {
		p.metrics.verified(res, string(aerr.Reason), time.Since(start))
		p.log.Error(aerr, "container refused at start", keyResource, res, logging.KeyDevices, req.DevicesIds, logging.KeyReason, string(aerr.Reason))
		p.wrongStart(aerr, vs)
		return nil, status.Error(codes.FailedPrecondition, aerr.Error())
	}
	if p.kubeletRecord == nil {
		return fail(refuse(ReasonUnverified, nil, "devices %s: the plugin has no way to read the kubelet's record", strings.Join(req.DevicesIds, ",")), nil)
	}
	rec, err := p.kubeletRecord()
	if err != nil {
		return fail(refuse(ReasonUnverified, nil, "devices %s: the kubelet's record of who holds them cannot be read: %v", strings.Join(req.DevicesIds, ","), err), nil)
	}
	entries := rec.Holding(string(res), req.DevicesIds)
	if len(entries) == 0 {
		return fail(refuse(ReasonUnverified, nil, "the kubelet's record shows no container holding exactly devices %s of %s", strings.Join(req.DevicesIds, ","), res), nil)
	}
	// The informer may show the pod after the kubelet starts it (its binding reached the kubelet first).
	p.lockWhenKnown(ctx, entries)
	entries = p.liveLocked(entries)
	vs := make([]verdict, len(entries))
	for i, e := range entries {
		vs[i] = p.verifyLocked(res, e)
	}
	for _, v := range vs {
		if v.Err != nil {
			p.mu.Unlock()
			return fail(v.Err, vs)
		}
	}
	// The kubelet's record decides: the records follow it, whoever the plugin served.
	var toRecord []types.UID
	for _, v := range vs {
		toRecord = append(toRecord, p.followRecordLocked(v)...)
	}
	uid := vs[0].Holder.Pod.UID
	pod, limits := p.podMemoryLimitsLocked(uid)
	p.mu.Unlock()
	for _, u := range toRecord {
		p.record(u)
	}
	if err := p.setMemoryLimits(pod, limits, req.DevicesIds); err != nil {
		p.metrics.verified(res, string(ReasonMemoryLimit), time.Since(start))
		return nil, err
	}
	p.metrics.verified(res, "started", time.Since(start))
	p.log.V(1).Info("container verified against the kubelet's record", keyResource, res, logging.KeyPod, pod.key(), logging.KeyDevices, req.DevicesIds)
	return &pluginapi.PreStartContainerResponse{}, nil
}

// lockWhenKnown takes p.mu once every entry's pod is in the cache, or after cacheWait; it returns
// with p.mu held.
func (p *Plugin) lockWhenKnown(ctx context.Context, entries []kubeletrecord.Entry) {
	p.lockWhen(ctx, p.cacheWait, func() bool {
		for _, e := range entries {
			if _, ok := p.pods[e.PodUID]; !ok {
				return false
			}
		}
		return true
	})
}

// liveLocked leaves out entries of pods that ended, while another entry holds the same IDs: the
// kubelet frees an ended pod's devices before it gives them again, and a checkpoint read between the
// two may show both. p.mu held.
func (p *Plugin) liveLocked(entries []kubeletrecord.Entry) []kubeletrecord.Entry {
	live := slices.DeleteFunc(slices.Clone(entries), func(e kubeletrecord.Entry) bool {
		pod := p.pods[e.PodUID]
		return pod != nil && pod.Gone
	})
	if len(live) == 0 {
		return entries
	}
	return live
}

// verifyLocked checks one container of the kubelet's record: may it have these devices, and is the
// response the kubelet holds for it the one it should get? p.mu held.
func (p *Plugin) verifyLocked(res corev1.ResourceName, e kubeletrecord.Entry) verdict {
	v := verdict{Entry: e}
	if e.Response != nil {
		v.ServedFor = e.Response.Annotations[AllocatedForAnnotation]
	}
	pod := p.pods[e.PodUID]
	if pod == nil {
		v.Err = refuse(ReasonUnverified, nil, "the kubelet gave devices %s to pod %s container %q, which this plugin does not know (not bound to node %s in its cache)",
			strings.Join(e.IDs, ","), e.PodUID, e.Container, p.node)
		return v
	}
	h := holderOf(pod, e.Container, res)
	if h == nil {
		v.Err = refuse(ReasonUnverified, []*podEntry{pod}, "the kubelet gave devices %s of %s to pod %s container %q, which asks for none",
			strings.Join(e.IDs, ","), res, pod.key(), e.Container)
		return v
	}
	v.Holder = h
	if err := p.entitledLocked(h, e.IDs); err != nil {
		v.Err = err
		return v
	}
	want := containerResponse(p.table, outcome{Owner: h, IDs: e.IDs}, p.deviceList, p.sharing)
	if e.Response == nil {
		v.Err = refuse(ReasonWrongResponse, []*podEntry{pod}, "the kubelet holds no Allocate response for %s (devices %s)", h, strings.Join(e.IDs, ","))
		return v
	}
	heldKey := cdiAnnotationKey(string(pod.UID), h.Name)
	if uid, name, ok := strings.Cut(v.ServedFor, "/"); ok {
		heldKey = cdiAnnotationKey(uid, name)
	}
	if diff := effectDiff(e.Response, heldKey, want, cdiAnnotationKey(string(pod.UID), h.Name)); diff != "" {
		v.Err = refuse(ReasonWrongResponse, p.podsNamed(pod, v.ServedFor),
			"the kubelet gave devices %s to %s, but the Allocate response it holds for them was made for %s: the container would start with another's cards or limits (%s)",
			strings.Join(e.IDs, ","), h, p.describeServed(v.ServedFor), diff)
	}
	return v
}

// holderOf is container name of pod as a holder of resource res (nil when it takes none).
func holderOf(pod *podEntry, name string, res corev1.ResourceName) *holder {
	for _, c := range pod.Order {
		if c.Name != name || c.Resource != res {
			continue
		}
		h := &holder{Pod: pod, Name: c.Name, Resource: c.Resource, Count: c.Count, Mixed: c.Mixed}
		if pod.Assignment != nil {
			h.Assigned = pod.Assignment.Container(c.Name)
		}
		return h
	}
	return nil
}

// entitledLocked says whether h may hold ids, as the kubelet gave them: never with an unusable
// assignment; its assignment as reserved; other IDs when its selectors accept them and every card
// has room for it beside the other pods there. The other holders' loads leave out any claim on
// exactly these IDs: the kubelet's record says h holds them, so such a claim is a guess that lost.
func (p *Plugin) entitledLocked(h *holder, ids []string) *AllocateError {
	if h.Mixed != "" {
		return refuse(ReasonUnusable, []*podEntry{h.Pod}, "%s cannot be served: %s", h, h.Mixed)
	}
	if why := unusable(h); why != "" {
		return refuse(ReasonUnusable, []*podEntry{h.Pod}, "the kubelet gave devices %s to %s, but its assignment cannot be used: %s", strings.Join(ids, ","), h, why)
	}
	if h.Assigned != nil {
		if err := checkReservation(p.table, h); err != nil {
			return err
		}
		if !sameSet(h.ids(), ids) {
			if err := checkSelector(p.table, h, ids); err != nil {
				return err
			}
		}
	}
	var others []holder
	for _, o := range p.holdersLocked("") {
		if o.Pod == h.Pod || (o.Held != nil && sameSet(o.Held, ids)) {
			continue
		}
		if o.Held == nil {
			continue // not allocated yet: its assignment is a plan, and the kubelet allocates around h
		}
		others = append(others, o)
	}
	return checkCapacity(p.table, loadsOn(p.table, others, ids), h, ids)
}

// effectDiff compares what two responses give a container, with each one's per-container key (the
// CDI annotation key, the HAMi-core cache file) taken out and the allocated-for name ignored; it
// says what differs ("" when nothing does).
func effectDiff(held *pluginapi.ContainerAllocateResponse, heldKey string, want *pluginapi.ContainerAllocateResponse, wantKey string) string {
	a, b := normalized(held, heldKey), normalized(want, wantKey)
	if proto.Equal(a, b) {
		return ""
	}
	for _, k := range slices.Sorted(maps.Keys(b.Envs)) {
		if got, ok := a.Envs[k]; !ok || got != b.Envs[k] {
			return fmt.Sprintf("it holds %s=%q where its own is %q", k, got, b.Envs[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a.Envs)) {
		if _, ok := b.Envs[k]; !ok {
			return fmt.Sprintf("it holds %s=%q, which it should not have", k, a.Envs[k])
		}
	}
	return "its mounts, device nodes or CDI devices differ"
}

func normalized(r *pluginapi.ContainerAllocateResponse, key string) *pluginapi.ContainerAllocateResponse {
	out := proto.Clone(r).(*pluginapi.ContainerAllocateResponse)
	rk := func(s string) string {
		if key == "" {
			return s
		}
		return strings.ReplaceAll(s, key, "<container>")
	}
	for k, v := range out.Envs {
		out.Envs[k] = rk(v)
	}
	ann := map[string]string{}
	for k, v := range out.Annotations {
		if k != AllocatedForAnnotation {
			ann[rk(k)] = rk(v)
		}
	}
	out.Annotations = ann
	for _, m := range out.Mounts {
		m.ContainerPath, m.HostPath = rk(m.ContainerPath), rk(m.HostPath)
	}
	for _, d := range out.CdiDevices {
		d.Name = rk(d.Name)
	}
	return out
}

// podsNamed are the pods an Event about a wrong start goes to: the holder's, and the one the response
// was made for when it is known and another.
func (p *Plugin) podsNamed(holder *podEntry, servedFor string) []*podEntry {
	out := []*podEntry{holder}
	if uid, _, ok := strings.Cut(servedFor, "/"); ok && types.UID(uid) != holder.UID {
		if o := p.pods[types.UID(uid)]; o != nil {
			out = append(out, o)
		}
	}
	return out
}

// describeServed names the container a response was made for.
func (p *Plugin) describeServed(servedFor string) string {
	uid, name, ok := strings.Cut(servedFor, "/")
	if !ok {
		return "another container (the response names none: an older plugin's)"
	}
	if o := p.pods[types.UID(uid)]; o != nil {
		return fmt.Sprintf("pod %s container %q", o.key(), name)
	}
	return fmt.Sprintf("pod UID %s container %q (no longer on this node)", uid, name)
}

// followRecordLocked makes the plugin's view follow the kubelet's record for a verified container:
// the holder holds the IDs, and a container the response was made for (a harmless swap) no longer
// does. It returns the pods whose record must be written. p.mu held.
func (p *Plugin) followRecordLocked(v verdict) []types.UID {
	h, ids := v.Holder, v.Entry.IDs
	var out []types.UID
	if uid, name, ok := strings.Cut(v.ServedFor, "/"); ok && (types.UID(uid) != h.Pod.UID || name != h.Name) {
		out = append(out, p.forgetClaimLocked(types.UID(uid), name, ids)...)
	}
	if held, ok := p.seen[h.Pod.UID][h.Name]; !ok || !sameSet(held, ids) {
		p.saw(h.Pod.UID, h.Name, ids)
		if p.local[h.Pod.UID] == nil {
			p.local[h.Pod.UID] = map[string]annotations.ContainerAllocation{}
		}
		p.local[h.Pod.UID][h.Name] = allocationRecord(h.Name, ids, annotations.SourcePodResources)
		out = append(out, h.Pod.UID)
		p.refreshHeldLocked()
	}
	return out
}

// forgetClaimLocked drops the plugin's belief that container name of pod uid holds ids (a guess the
// kubelet's record contradicts): the container is in flight again, and its record loses the entry.
// p.mu held.
func (p *Plugin) forgetClaimLocked(uid types.UID, name string, ids []string) []types.UID {
	held, ok := p.seen[uid][name]
	if !ok || !sameSet(held, ids) {
		return nil
	}
	delete(p.seen[uid], name)
	if loc := p.local[uid]; loc != nil {
		delete(loc, name)
	}
	if pod := p.pods[uid]; pod != nil {
		if r, ok := pod.Recorded[name]; ok && sameSet(r.IDs, ids) {
			// The record on the pod says so too: overwrite it without that container.
			if p.dropped[uid] == nil {
				p.dropped[uid] = map[string]bool{}
			}
			p.dropped[uid][name] = true
		}
	}
	p.refreshHeldLocked()
	return []types.UID{uid}
}

// wrongStart reports a refused start: an Event on each pod it names, and the eviction of the holder's
// pod when a controller re-creates it (a bare pod keeps the Event and its container's waiting reason).
func (p *Plugin) wrongStart(aerr *AllocateError, vs []verdict) {
	p.failed(aerr)
	if aerr.Reason != ReasonWrongResponse {
		return
	}
	for _, v := range vs {
		if v.Err == nil || v.Holder == nil {
			continue
		}
		p.mu.Lock()
		// The plugin's guess lost: the holder holds these IDs in the kubelet (until it is gone), the
		// container it was served for does not.
		if uid, name, ok := strings.Cut(v.ServedFor, "/"); ok {
			p.forgetClaimLocked(types.UID(uid), name, v.Entry.IDs)
		}
		p.saw(v.Holder.Pod.UID, v.Holder.Name, v.Entry.IDs)
		p.refreshHeldLocked()
		pod := v.Holder.Pod
		p.mu.Unlock()
		if pod.Controlled {
			p.evict(pod, aerr.Error())
		}
	}
}
