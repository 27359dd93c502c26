package scheduler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/utils/clock"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// ErrInFlight is wrapped by Reserve when the pod must wait for a container in flight on the node
// (DESIGN.md, "How Allocate knows the pod"); kube-scheduler retries the pod.
var ErrInFlight = errors.New("waiting for a container in flight on the node")

// ErrNoFit is wrapped by Reserve when the pod no longer fits the node.
var ErrNoFit = errors.New("pod does not fit the node")

// ErrAlreadyBound is wrapped by Reserve when the informer has shown the pod bound: a second bind
// must never touch what the pod holds.
var ErrAlreadyBound = errors.New("pod is already bound")

// ErrBindPending is wrapped by Reserve when an earlier bind of the pod to another node may still
// commit (its outcome was unknown): the pod may be bound only there until the reservation settles.
var ErrBindPending = errors.New("an earlier binding of the pod may still commit")

// use is one device ID a pod holds, as its records say, before it is resolved against a card.
type use struct {
	id         string
	memMiB     int64
	memPercent int // used when memMiB is 0: a percentage of the card's memory (100 for whole cards)
	cores      int
}

// inFlight is a GPU container assigned to a node and not yet allocated by the device plugin.
type inFlight struct {
	pod   string // namespace/name
	req   annotations.ContainerRequest
	sel   annotations.Selector
	cards []string // UUIDs
	// created is the pod's creation time in whole seconds (the API's precision): the kubelet admits
	// pods that reach it together in creation order, and pods created in the same second in any order.
	created int64
	// unmanaged is a container of a pod Cardinal did not bind (another scheduler's, or one created
	// with spec.nodeName): its cards are unknown and the device plugin cannot tell it from a
	// Cardinal container of the same count, so it is interchangeable with none.
	unmanaged bool
	// shape is the pod's replicaShape: on a TopologyManager node, pods of one shape whose cards
	// are all on one NUMA node go in flight together, in any order (waits).
	shape string
}

// replicaShape is what the kubelet's TopologyManager sees of a pod when it admits it: every GPU
// container's request, its QoS class, and (Guaranteed) every container's CPUs, in order. Two pods
// of one shape get the same hints from the same free cards and CPUs.
func replicaShape(req *annotations.PodRequest) string {
	return fmt.Sprintf("%v|%t|%v|%v", req.Containers, req.Guaranteed, req.CPUs, req.ZeroGPU)
}

// podRecord is what the cache keeps of a pod that holds or reserves devices on a node.
type podRecord struct {
	uid      types.UID
	key      string
	node     string
	uses     []use
	inFlight []inFlight
	// reserved is true for a record made by Reserve that the informer has not yet shown bound.
	reserved bool
	// asg is the assignment a reservation was made for (reserved records only): a retried bind of
	// the pod to the same node writes it again, so a Binding that committed unseen and its retry
	// agree on the cards.
	asg *annotations.Assignment
	// since is when the reservation was made or last confirmed by a bind (reserved records only).
	since time.Time
	// tenant is the pod's namespace when it shares cards (tenants.go), else "".
	tenant string
	// unsettled is true once a Binding of this reservation had an unknown outcome: it may still
	// commit, so only proof that no earlier write can land frees the reservation
	// (reservations_freed_by_proof.go), never a later attempt's refusal.
	unsettled bool
	// posting counts the Bindings of this reservation that may have been sent and whose outcome
	// bind has not settled yet (StartBinding): each may still commit, so a concurrent attempt's
	// refusal must not free the reservation either.
	posting int
	// applied are the holdings added to the node's state, kept to remove exactly those.
	applied []core.Holding
	// group is the pod group whose plan made this reservation ("" for none; groups.go), and
	// memberReq the member's request it was made for (a re-created member of the same request
	// takes it over when the member is gone).
	group     string
	memberReq *core.Pod
}

// nodeEntry is one node of the cache.
type nodeEntry struct {
	// The fields Evaluate reads for every named node come first, together, so that deciding a node
	// in a state already decided touches one or two cache lines of the entry and not the state.

	// state is nil when the node has no usable inventory; reason then says why.
	state *core.NodeState
	// gen changes whenever state changes, so memoised scores can be checked.
	gen uint64
	// hostState is state.Host as of the last bump, and hostHash its hostHash: Evaluate's share
	// check and key for policies that read CPU and memory, without a read of the state.
	hostState core.HostState
	hostHash  uint64
	// inFlight counts the in-flight containers of pods on the node.
	inFlight int
	// tenants counts the node's pods that share cards, by namespace (tenants.go).
	tenants map[string]int

	name string
	// labels are the Node's labels, for a pod's preferred node affinity (PreferredAffinity).
	labels map[string]string
	// hard are the node's NoSchedule and NoExecute taints, spec.unschedulable as its taint
	// (hardTaintsOf): what kube-scheduler's own filters refuse a pod for, read when a sample misses.
	hard []corev1.Taint
	// reason says why state is nil.
	reason *core.Reason
	pods   map[types.UID]*podRecord
	// flightSame is true when every in-flight container on the node is managed, has a selector
	// without card rules and asks what flightReq asks (summariseFlight): waits then answers a pod
	// without card rules from these two fields, without walking the node's pods.
	flightSame bool
	flightReq  annotations.ContainerRequest
	// key is appendKey of the cards (empty without state) and hash its hash: nodes with equal keys
	// (and, for policies that read them, equal CPU and memory) are decided once per Evaluate.
	key  string
	hash uint64
	// host is the sum of the CPU and memory held by the hostPods pods of c.hosts on the node; the
	// state holds it too (it survives a new inventory).
	host     core.HostRequest
	hostPods int
	// soft is what kube-scheduler's own score plugins read of the node (softNodeOf); nil for most.
	soft *softNode
	// cpu is what the cache knows of the exclusive CPUs on the node (numacpus.go).
	cpu nodeCPUs
	// plain is, for a node without an inventory (no GPUs) or with one Cardinal cannot read, a
	// state without cards that holds its CPU and memory, so that a routed CPU-only pod can be
	// decided there (cpupods.go); nil otherwise. state stays nil: every GPU pod is refused there
	// with reason.
	plain *core.NodeState
}

// Cache is the extender's view of the cluster: every GPU node's cards and what pods hold on them,
// fed by informers (or directly in tests). All methods are safe for concurrent use.
type Cache struct {
	names annotations.ResourceNames
	// schedulerNames are Cardinal's kube-scheduler profiles: the first samples nodes when
	// exactProfile is set, exactProfile scores them all (see sampling.go).
	schedulerNames []string
	exactProfile   string

	mu    sync.RWMutex
	nodes map[string]*nodeEntry
	pods  map[types.UID]*podRecord
	mix   core.TaskMix
	mixed map[types.UID]struct{}
	// hosts are the pods, GPU or not, that hold CPU or memory on a node (hostRecord).
	hosts map[types.UID]hostRecord
	gen   uint64
	// seed and keyBuf serve node keys (bump); written under mu. models and links intern the cards'
	// models and the nodes' links (core.NodeState.AppendLinksKey, linkBuf) in keys.
	seed   maphash.Seed
	keyBuf []byte
	// keys holds one copy of each node key in use (internKey), with its hash.
	keys    map[string]internedKey
	models  map[string]uint64
	links   map[string]uint64
	linkBuf []byte
	clock   clock.PassiveClock
	// done is closed (and replaced) whenever a container stops being in flight; see InFlightDone.
	done chan struct{}
	// affinity holds the pod affinity terms of pods that kube-scheduler's InterPodAffinity scores
	// other pods against, and softNodes counts nodes with a soft entry (the filter shortlist).
	affinity  map[types.UID][]affinityTerm
	softNodes int
	// onPanic is told of a panic while deciding a node (panics.go); nil: nobody.
	onPanic PanicHandler
	// cpuPods are the pods that hold or will hold exclusive CPUs on a node (numacpus.go).
	cpuPods map[types.UID]*cpuHolder
	// preempt is what preemption reads: pods' priorities, nominated pods (preempt.go).
	preempt preemption
	// pending are the GPU pods no node passed at their last filter (fleet_metrics.go).
	pending pendingPods
	// unbound is the resourceVersion of each pod not yet bound, as the pod informer last delivered
	// it (Caught, catchup.go); written under mu.
	unbound map[types.UID]string
	// settled and settledOld are the pods most recently seen bound, finished or deleted after
	// being seen unbound, in two generations (catchup.go); written under mu.
	settled, settledOld map[types.UID]struct{}
	// groups are the pod groups by namespace/name, and memberOf each member's group (groups.go).
	groups   map[string]*podGroup
	memberOf map[types.UID]string
}

// NewCache returns an empty cache for the pods of kube-scheduler profile schedulerName and, when
// exact names one (at most one is read), of Cardinal's profile that scores every node; schedulerName
// then samples nodes (sampling.go).
func NewCache(names annotations.ResourceNames, schedulerName string, exact ...string) *Cache {
	profiles := []string{schedulerName}
	var exactProfile string
	if len(exact) > 0 && exact[0] != "" && exact[0] != schedulerName {
		exactProfile = exact[0]
		profiles = append(profiles, exactProfile)
	}
	return &Cache{names: names, schedulerNames: profiles, exactProfile: exactProfile, nodes: map[string]*nodeEntry{},
		pods: map[types.UID]*podRecord{}, mixed: map[types.UID]struct{}{}, hosts: map[types.UID]hostRecord{}, seed: maphash.MakeSeed(), models: map[string]uint64{},
		links: map[string]uint64{},
		clock: clock.RealClock{}, done: make(chan struct{}), mix: core.TaskMix{HalfLife: MixHalfLife},
		affinity: map[types.UID][]affinityTerm{}, cpuPods: map[types.UID]*cpuHolder{}}
}

// MixHalfLife is the task mix's half-life in GPU containers: requests the cluster stopped making
// fade from what frag-aware weighs (core.TaskMix.HalfLife). Longer than any shared trace (≤ 9061
// pods), so a replay of one sees nearly the whole history.
const MixHalfLife = 20000

// InFlightDone returns a channel that is closed the next time a container in flight on any node
// is allocated (or its pod goes away), so a bind waiting for one can try again at once.
func (c *Cache) InFlightDone() <-chan struct{} {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.done
}

// WithClock makes the cache date reservations by clk (tests); it returns c.
func (c *Cache) WithClock(clk clock.PassiveClock) *Cache {
	c.clock = clk
	return c
}

// UpsertNode records a node, its inventory and its allocatable CPU and memory; its pods' holdings
// are re-applied on the new cards.
func (c *Cache) UpsertNode(node *corev1.Node) {
	cpu, mem := nodeHost(node)
	var state *core.NodeState
	var reason *core.Reason
	raw, ok := node.Annotations[annotations.GPUInventory]
	if !ok {
		reason = &core.Reason{Kind: core.ReasonNoInventory}
	} else if inv, err := annotations.DecodeInventory(raw); err != nil {
		reason = &core.Reason{Kind: core.ReasonBadInventory, Detail: err.Error()}
	} else {
		state = core.NewNodeState(node.Name, inv)
		state.Cordon(annotations.CordonsOf(node.Annotations))
	}
	soft := softNodeOf(node)
	listed := listedCPUsOf(state)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.node(node.Name)
	n.labels = node.Labels
	n.hard = hardTaintsOf(node)
	c.setSoft(n, soft)
	n.cpu.listed = listed
	defer c.refreshCPUs(n)
	n.plain = nil
	if reason != nil && (reason.Kind == core.ReasonNoInventory || reason.Kind == core.ReasonBadInventory) {
		// A pod that asks for no card needs none of the node's cards: it is decided on the
		// node's CPU and memory, whether the node has no inventory or one Cardinal cannot read.
		n.plain = core.NewNodeState(node.Name, annotations.Inventory{})
		n.plain.SetHost(cpu, mem)
		n.plain.HoldHost(n.host)
	}
	if state != nil && n.state != nil && sameCards(n.state, state) {
		if h := &n.state.Host; h.AllocCPUMilli != cpu || h.AllocMemMiB != mem {
			n.state.SetHost(cpu, mem)
			c.bump(n)
		}
		return
	}
	if state != nil {
		state.SetHost(cpu, mem)
		state.HoldHost(n.host)
	}
	n.state, n.reason = state, reason
	for _, p := range n.pods {
		p.applied = nil
		c.apply(n, p)
	}
	c.bump(n)
}

// CordonsDiffer reports whether node's cordon marks put a card of the node in or out of service
// differently from what the cache holds (false for a node the cache has no cards of).
func (c *Cache) CordonsDiffer(node *corev1.Node) bool {
	cs := annotations.CordonsOf(node.Annotations)
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.nodes[node.Name]
	if !ok || n.state == nil {
		return false
	}
	for i := range n.state.Cards {
		if card := &n.state.Cards[i]; card.Cordoned != card.CordonedBy(cs) {
			return true
		}
	}
	return false
}

// sameCards reports whether two states describe the same inventory.
func sameCards(a, b *core.NodeState) bool {
	if len(a.Cards) != len(b.Cards) {
		return false
	}
	for i := range a.Cards {
		if !a.Cards[i].SameDevice(&b.Cards[i]) || a.Cards[i].Cordoned != b.Cards[i].Cordoned {
			return false
		}
	}
	return a.SameKubelet(b) && sameSharing(a.Sharing, b.Sharing) && a.SameLinks(b)
}

func sameSharing(a, b *annotations.Sharing) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// DeleteNode forgets a node (its pods' records stay, in case it comes back).
func (c *Cache) DeleteNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.nodes[name]; ok {
		n.state, n.reason, n.plain = nil, &core.Reason{Kind: core.ReasonUnknownNode}, nil
		c.setSoft(n, nil)
		if len(n.pods) == 0 && n.hostPods == 0 {
			delete(c.nodes, name)
		}
		c.bump(n)
	}
}

// node returns the entry of a node, creating an unknown one (a pod may arrive before its node).
func (c *Cache) node(name string) *nodeEntry {
	n, ok := c.nodes[name]
	if !ok {
		n = &nodeEntry{name: name, reason: &core.Reason{Kind: core.ReasonUnknownNode}, pods: map[types.UID]*podRecord{}}
		c.nodes[name] = n
	}
	return n
}

func (c *Cache) bump(n *nodeEntry) {
	c.gen++
	n.gen = c.gen
	n.key, n.hash, n.hostState, n.hostHash = "", 0, core.HostState{}, 0
	if n.state != nil {
		c.keyBuf = c.appendKey(c.keyBuf[:0], n.state)
		n.key, n.hash = c.internKey(c.keyBuf)
		n.hostState = n.state.Host
		n.hostHash = hostHash(&n.hostState)
	}
}

// internedKey is the cache's copy of a node key and the key's hash.
type internedKey struct {
	key  string
	hash uint64
}

// internKey returns the cache's one copy of the key in b and its hash. Nodes in the same state then
// hold the same string, and Evaluate's check that two nodes' keys are equal (hundreds of bytes for
// eight cards) stops at their pointers instead of reading both: in S2 at 5000 nodes that compare
// was a tenth of the extender's CPU. Keys no node holds any more are dropped when the table grows
// to twice the nodes. Interning only saves work: equal keys compare equal either way.
func (c *Cache) internKey(b []byte) (string, uint64) {
	if k, ok := c.keys[string(b)]; ok {
		return k.key, k.hash
	}
	if len(c.keys) >= 2*len(c.nodes)+1024 {
		live := make(map[string]internedKey, len(c.nodes))
		for _, n := range c.nodes {
			if n.key != "" {
				live[n.key] = internedKey{n.key, n.hash}
			}
		}
		c.keys = live
	}
	if c.keys == nil {
		c.keys = map[string]internedKey{}
	}
	k := internedKey{key: string(b)}
	k.hash = maphash.String(c.seed, k.key)
	c.keys[k.key] = k
	return k.key, k.hash
}

// appendKey appends a key of a node's state that leaves out card identities (UUIDs, indexes; a MIG
// instance's parent appears by its position): two nodes with equal keys get the same verdict and
// score from Fit and Score for any pod whose selector has no UUID rule (their plans differ only in
// the UUIDs they name), unless the reason names devices of its node (Reason.NodeSpecific: an
// unhealthy or cordoned card, MIG instances). Whether each card is healthy and whether it is
// cordoned are part of the key: a node whose card fits must not lend its verdict to a node whose
// same card is cordoned. Links between cards are by position, so they are part of the key.
// Models and links are interned so keys stay short.
func (c *Cache) appendKey(b []byte, s *core.NodeState) []byte {
	b = binary.AppendUvarint(b, uint64(len(s.Cards)))
	for i := range s.Cards {
		card := &s.Cards[i]
		id, ok := c.models[card.Model]
		if !ok {
			id = uint64(len(c.models))
			c.models[card.Model] = id
		}
		b = binary.AppendUvarint(b, id)
		b = binary.AppendVarint(b, card.MemoryMiB)
		b = binary.AppendVarint(b, int64(card.NUMA))
		b = binary.AppendVarint(b, int64(card.Shares))
		b = binary.AppendVarint(b, card.MemMiB)
		b = binary.AppendVarint(b, int64(card.Cores))
		b = binary.AppendVarint(b, int64(card.Held))
		b = binary.AppendVarint(b, int64(card.Whole))
		b = append(b, boolByte(card.Healthy), boolByte(card.Cordoned != ""))
		// MIG: a card in MIG mode, or an instance's profile and its parent's position.
		b = append(b, boolByte(card.InMIGMode()))
		b = append(binary.AppendUvarint(b, uint64(len(card.ProfileKey))), card.ProfileKey...)
		if card.Instance() {
			parent, _ := s.CardIndex(card.Parent)
			b = binary.AppendUvarint(b, uint64(parent))
		}
	}
	mode, ready := s.Sharing.ModeOrNone(), s.Sharing != nil && s.Sharing.Ready
	b = append(append(binary.AppendUvarint(b, uint64(len(mode))), mode...), boolByte(ready))
	c.linkBuf = s.AppendLinksKey(c.linkBuf[:0])
	id, ok := c.links[string(c.linkBuf)]
	if !ok {
		id = uint64(len(c.links))
		c.links[string(c.linkBuf)] = id
	}
	b = binary.AppendUvarint(b, id)
	return s.AppendKubeletKey(b)
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// UpsertPod records what a pod holds from its assignment and allocation records, and the CPU and
// memory it requests of its node (any bound pod, with GPUs or without). A pod that is not bound,
// finished, or holds nothing is forgotten; a reservation made by Reserve stays until the informer
// shows the pod bound.
func (c *Cache) UpsertPod(pod *corev1.Pod) {
	rec := c.recordOf(pod)
	host, holds := hostOf(pod)
	terms := affinityTermsOf(pod)
	group := c.groupKeyOf(pod)
	if pod.Spec.NodeName != "" || finished(pod) {
		c.pending.forget(pod.UID)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trackCPUs(pod)
	c.countMix(pod)
	c.setAffinityTerms(pod.UID, terms)
	c.trackPreemption(pod)
	if group != "" || c.memberOf[pod.UID] != "" {
		c.trackGroup(pod, group)
	}
	c.noteUnbound(pod)
	old := c.pods[pod.UID]
	if old != nil && old.reserved && pod.Spec.NodeName == "" && !finished(pod) {
		return // bind is under way: keep the reservation
	}
	if old != nil && rec == nil && pod.Spec.NodeName == "" && c.vacate(pod.UID) {
		old = nil // a group member that ended unbound: its cards stay its group's
	}
	c.replace(pod.UID, old, rec)
	c.setHost(pod.UID, host, holds)
}

// DeletePod forgets a pod and frees what it held.
func (c *Cache) DeletePod(uid types.UID) {
	c.pending.forget(uid)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetCPUs(uid)
	c.vacate(uid)
	c.untrackGroup(uid)
	c.replace(uid, c.pods[uid], nil)
	c.setHost(uid, hostRecord{}, false)
	delete(c.mixed, uid)
	delete(c.affinity, uid)
	c.settle(uid)
	c.forgetPreemption(uid)
}

func (c *Cache) replace(uid types.UID, old, rec *podRecord) {
	if (old != nil && old.group != "") || (rec != nil && rec.group != "") {
		defer c.slotChanged(uid, old, rec)
	}
	if old != nil {
		if n := c.nodes[old.node]; n != nil {
			c.unapply(n, old)
			countTenant(n, old, -1)
			n.inFlight -= len(old.inFlight)
			delete(n.pods, uid)
			if len(old.inFlight) > 0 {
				summariseFlight(n)
			}
			c.bump(n)
		}
		delete(c.pods, uid)
		if len(old.inFlight) > 0 && (rec == nil || len(rec.inFlight) < len(old.inFlight)) {
			close(c.done)
			c.done = make(chan struct{})
		}
	}
	if rec != nil {
		n := c.node(rec.node)
		n.pods[uid] = rec
		n.inFlight += len(rec.inFlight)
		if len(rec.inFlight) > 0 {
			summariseFlight(n)
		}
		c.pods[uid] = rec
		c.apply(n, rec)
		countTenant(n, rec, 1)
		c.bump(n)
	}
}

func (c *Cache) apply(n *nodeEntry, p *podRecord) {
	if n.state == nil {
		return
	}
	p.applied = p.applied[:0]
	for _, u := range p.uses {
		h, err := core.HoldingFromID(u.id, u.memMiB, u.cores)
		if err != nil {
			continue
		}
		if h.MemMiB == 0 && u.memPercent > 0 {
			if i, ok := n.state.CardIndex(h.UUID); ok {
				h.MemMiB = n.state.Cards[i].MemoryMiB * int64(u.memPercent) / 100
			}
		}
		if n.state.Hold(h) {
			p.applied = append(p.applied, h)
		}
	}
}

func (c *Cache) unapply(n *nodeEntry, p *podRecord) {
	if n.state != nil {
		for _, h := range p.applied {
			n.state.Unhold(h)
		}
	}
	p.applied = nil
}

// countMix adds a GPU pod of this scheduler to the task mix, with its CPU and memory, once per pod.
func (c *Cache) countMix(pod *corev1.Pod) {
	if !c.ours(pod.Spec.SchedulerName) {
		return
	}
	if _, seen := c.mixed[pod.UID]; seen {
		return
	}
	req, err := annotations.ParsePodRequest(pod, c.names)
	if err != nil || req.Empty() {
		return
	}
	sel, _ := annotations.ParseSelector(pod.Annotations)
	c.mixed[pod.UID] = struct{}{}
	c.mix.AddPodHost(&req, &sel, podHost(pod))
}

func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// recordOf reads a pod's records; nil when the pod holds nothing on a node.
func (c *Cache) recordOf(pod *corev1.Pod) *podRecord {
	if pod.Spec.NodeName == "" || finished(pod) {
		return nil
	}
	node := pod.Spec.NodeName
	var asg *annotations.Assignment
	if raw, ok := pod.Annotations[annotations.GPUAssignment]; ok {
		if a, err := annotations.DecodeAssignment(raw); err == nil && a.Node == node {
			asg = &a
		}
	}
	var alloc *annotations.Allocation
	if raw, ok := pod.Annotations[annotations.GPUAllocated]; ok {
		if a, err := annotations.DecodeAllocation(raw); err == nil && (a.Node == "" || a.Node == node) {
			alloc = &a
		}
	}
	if asg == nil && alloc == nil {
		return c.unmanagedOf(pod, node)
	}
	rec := &podRecord{uid: pod.UID, key: pod.Namespace + "/" + pod.Name, node: node}
	req, _ := annotations.ParsePodRequest(pod, c.names)
	req.ReadCPUs(pod)
	sel, _ := annotations.ParseSelector(pod.Annotations)
	rec.tenant = tenantOf(rec.key, &req)
	allocated := map[string][]string{}
	if alloc != nil {
		for _, ca := range alloc.Containers {
			allocated[ca.Name] = ca.IDs
		}
	}
	seen := map[string]int{}
	add := func(u use) {
		if i, ok := seen[u.id]; ok {
			p := &rec.uses[i]
			p.memMiB, p.memPercent, p.cores = max(p.memMiB, u.memMiB), max(p.memPercent, u.memPercent), max(p.cores, u.cores)
			return
		}
		seen[u.id] = len(rec.uses)
		rec.uses = append(rec.uses, u)
	}
	pending := pod.Status.Phase == corev1.PodPending || pod.Status.Phase == ""
	done := map[string]bool{}
	if asg != nil {
		for _, ca := range asg.Containers {
			done[ca.Name] = true
			ids, wasAllocated := allocated[ca.Name]
			if !wasAllocated {
				for _, d := range ca.Devices {
					add(use{id: d.ID, memMiB: d.MemoryMiB, cores: d.Cores})
				}
				if pending {
					rec.inFlight = append(rec.inFlight, inFlightOf(rec.key, pod.CreationTimestamp.Unix(), &ca, req, sel))
				}
				continue
			}
			// The kubelet's record wins; reservations come from the assignment of the same card.
			for _, id := range ids {
				u := reservationOf(id, req, ca.Name)
				uuid, _, _ := annotations.ParseDeviceID(id)
				for _, d := range ca.Devices {
					if d.UUID == uuid {
						u.memMiB, u.memPercent, u.cores = d.MemoryMiB, 0, d.Cores
					}
				}
				add(u)
			}
		}
	}
	if alloc != nil {
		for _, ca := range alloc.Containers {
			if done[ca.Name] {
				continue
			}
			for _, id := range ca.IDs {
				add(reservationOf(id, req, ca.Name))
			}
		}
	}
	if len(rec.uses) == 0 {
		return nil
	}
	return rec
}

// unmanagedOf is the record of a bound GPU pod without Cardinal's records: while it is Pending the
// kubelet may be admitting it, so each of its GPU containers is in flight (and blocks Cardinal
// containers of the same device count on the node, see waits) until the device plugin records
// what it got. nil for any other pod.
func (c *Cache) unmanagedOf(pod *corev1.Pod, node string) *podRecord {
	if pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		return nil
	}
	req, err := annotations.ParsePodRequest(pod, c.names)
	if err != nil || req.Empty() {
		return nil
	}
	rec := &podRecord{uid: pod.UID, key: pod.Namespace + "/" + pod.Name, node: node}
	for _, r := range req.Containers {
		rec.inFlight = append(rec.inFlight, inFlight{pod: rec.key, created: pod.CreationTimestamp.Unix(), req: r, unmanaged: true})
	}
	return rec
}

// reservationOf is what device id reserves for a container known only from the allocation record:
// its request, or the whole card when the request is unknown.
func reservationOf(id string, req annotations.PodRequest, container string) use {
	for _, r := range req.Containers {
		if r.Name == container && r.Shared {
			return use{id: id, memMiB: r.MemoryMiB, memPercent: r.MemoryPercent, cores: r.CoresOn()}
		}
	}
	return use{id: id, memPercent: 100, cores: 100}
}

func inFlightOf(key string, created int64, ca *annotations.ContainerAssignment, req annotations.PodRequest, sel annotations.Selector) inFlight {
	f := inFlight{pod: key, created: created, sel: sel, req: annotations.ContainerRequest{Name: ca.Name, Count: len(ca.Devices)}, shape: replicaShape(&req)}
	for _, r := range req.Containers {
		if r.Name == ca.Name {
			f.req = r
		}
	}
	for _, d := range ca.Devices {
		f.cards = append(f.cards, d.UUID)
	}
	return f
}

// Verdict is the answer for one node: a score when the pod fits, else a reason.
type Verdict struct {
	Score  float64
	Reason *core.Reason
	gen    uint64
}

// Evaluate decides the pod on each named node, in order, appending to out. A node where the pod
// would wait for a container in flight gets ReasonInFlight only when some other node fits without
// waiting. Its cost grows with the names, not the cluster: each node is one map lookup and one
// FitWith over the node's cards, with buffers reused across nodes.
func (c *Cache) Evaluate(uid types.UID, p *core.Pod, names []string, out []Verdict) []Verdict {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out = out[:0]
	if node, ok := c.reservedNode(uid); ok {
		return c.pinned(node, names, out)
	}
	out = slices.Grow(out, len(names))[:len(names)]
	var free, waiting bool
	if parts := evaluateParts(len(names)); parts > 1 {
		// Long lists are decided in parts at once, each with its own scratch and its own
		// sharing of node states (see evaluateParts): the verdicts do not depend on the split.
		var wg sync.WaitGroup
		flags := make([][2]bool, parts)
		panics := make([]*escaped, parts)
		for i := range parts {
			lo, hi := i*len(names)/parts, (i+1)*len(names)/parts
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Outside the HTTP layer's recovery: a panic here would end the process.
				defer func() {
					if v := recover(); v != nil {
						panics[i] = &escaped{value: v, stack: debug.Stack()}
					}
				}()
				flags[i][0], flags[i][1] = c.evaluate(uid, p, names[lo:hi], out[lo:hi])
			}()
		}
		wg.Wait()
		for _, e := range panics {
			if e != nil {
				panic(e)
			}
		}
		for _, f := range flags {
			free, waiting = free || f[0], waiting || f[1]
		}
	} else {
		free, waiting = c.evaluate(uid, p, names, out)
	}
	if waiting && !free {
		for i := range out {
			if out[i].Reason != nil && (out[i].Reason.Kind == core.ReasonInFlight || out[i].Reason.Kind == core.ReasonKubeletCPUs) {
				out[i].Reason = nil
			}
		}
	}
	return out
}

// evaluateMinPart is the fewest names one part of a parallel Evaluate decides: about a
// millisecond of work at the few microseconds a node costs, well above a goroutine's start.
const evaluateMinPart = 256

// evaluateParts is how many parts Evaluate splits n names into: one per CPU the process may use,
// each of at least evaluateMinPart names. kube-scheduler calls the extender for one pod at a
// time, so a long filter call is the latency of its scheduling cycle and the other cores idle.
func evaluateParts(n int) int {
	return max(min(runtime.GOMAXPROCS(0), n/evaluateMinPart), 1)
}

// evaluate decides names into out (of the same length) under c.mu held for reading, and
// reports whether some node is free for the pod and whether some must wait for a container in
// flight.
func (c *Cache) evaluate(uid types.UID, p *core.Pod, names []string, out []Verdict) (free, waiting bool) {
	s := scratchPool.Get().(*core.Scratch)
	defer scratchPool.Put(s)
	// Nodes in the same state get the same verdict when the pod names no UUID (see appendKey). A
	// policy that reads CPU and memory shares only between nodes with the same host state; the
	// others share the cards' verdict between nodes whose CPU and memory hold the pod (a node that
	// lacks them is refused by Fit before it looks at the cards, cheaply, and is never shared).
	// Containers in flight do not change Fit's verdict, only whether the pod must wait (waits):
	// that is checked on each node, with the cards of the shared plan (planCards), which name the
	// same positions on every node of one key.
	byKey := p.Selector.UseUUIDs == nil && p.Selector.NoUseUUIDs == nil
	withHost := readsHost(p)
	// seen holds, by node key, the first node decided in each state: its verdict and plan's cards.
	seen := seenPool.Get().(map[uint64]decided)
	defer func() { clear(seen); seenPool.Put(seen) }()
	var flat, tmp []int
	for i, name := range names {
		v := Verdict{}
		n, ok := c.nodes[name]
		switch {
		case !ok:
			v.Reason = unknownNode
		case n.state == nil && n.plain != nil && p.Request.Empty():
			v.gen = n.gen
			if v.Score, v.Reason = c.decidePlain(n, p, s); v.Reason == nil {
				free = true
			}
		case n.state == nil:
			v.Reason, v.gen = n.reason, n.gen
		default:
			v.gen = n.gen
			if st := c.nominatedState(n, p, uid); st != nil {
				var f, w bool
				v, f, w = c.decideNominated(n, st, p, uid, s)
				free, waiting = free || f, waiting || w
				break
			}
			k := n.hash
			if withHost {
				k ^= n.hostHash
			}
			share := byKey && n.hostState.Fits(p.Host.CPUMilli, p.Host.MemMiB, core.HostRequest{})
			var cards []int
			hit := false
			if share {
				if d, found := seen[k]; found && d.rep.key == n.key && (!withHost || d.rep.hostState == n.hostState) {
					v.Score, v.Reason, cards, hit = d.v.Score, d.v.Reason, d.cards, true
				}
			}
			if !hit {
				var plan *core.Plan
				plan, v.Score, v.Reason = c.decideNode(n, p, s)
				store := share && (v.Reason == nil || !v.Reason.NodeSpecific())
				if store {
					if _, taken := seen[k]; taken {
						store = false
					}
				}
				switch {
				case plan != nil && store:
					start := len(flat)
					flat = planCards(flat, plan)
					cards = flat[start:len(flat):len(flat)]
				case plan != nil && n.inFlight > 0:
					tmp = planCards(tmp[:0], plan)
					cards = tmp
				}
				if store {
					seen[k] = decided{rep: n, v: v, cards: cards}
				}
			}
			if v.Reason == nil {
				v.Reason = otherTenant(n, p)
			}
			if v.Reason == nil {
				if r := c.waits(n, p, cards, uid); r != nil {
					v.Reason, waiting = r, true // dropped below when no node is free
				} else {
					free = true
				}
			}
		}
		out[i] = v
	}
	return free, waiting
}

// decided is the first node Evaluate decided in a state: its verdict and its plan's cards.
type decided struct {
	rep   *nodeEntry
	v     Verdict
	cards []int
}

// seenPool keeps Evaluate's maps of decided states between calls: a map sized for a sample of
// nodes is tens of kilobytes, which one call per pod would otherwise allocate and leave to the
// collector (cleared before it goes back, so it holds no node).
var seenPool = sync.Pool{New: func() any { return make(map[uint64]decided, 64) }}

// scratchPool keeps Evaluate's decision buffers (core.Scratch, the frag-aware policy's state among
// them) between calls, instead of one set per filter call for the collector. A Scratch is made to be
// reused across nodes and pods: it checks what it kept against the node and the task mix it is given.
var scratchPool = sync.Pool{New: func() any { return new(core.Scratch) }}

// planCards appends the cards of a plan's containers to b, for waits: for each container in
// order, its number of devices and then the index of each device's card.
func planCards(b []int, plan *core.Plan) []int {
	for ci := range plan.Containers {
		devs := plan.Containers[ci].Devices
		b = append(b, len(devs))
		for _, di := range devs {
			b = append(b, plan.Devices[di].Card)
		}
	}
	return b
}

// pinned is Evaluate for a pod with a live reservation on node: only that node fits (a retried bind
// there writes the reserved assignment again); every other node waits for the reservation to
// settle, since the earlier Binding may still commit.
func (c *Cache) pinned(node string, names []string, out []Verdict) []Verdict {
	for _, name := range names {
		v := Verdict{Score: core.MaxScore}
		if n, ok := c.nodes[name]; ok {
			v.gen = n.gen
		}
		if name != node {
			v.Reason = &core.Reason{Kind: core.ReasonBindPending, Detail: node}
		}
		out = append(out, v)
	}
	return out
}

// hostHash mixes a node's CPU and memory into its key's hash in Evaluate, for policies that read
// them (equal hashes are then checked field by field).
func hostHash(h *core.HostState) uint64 {
	x := uint64(h.AllocCPUMilli)
	for _, v := range [...]int64{h.UsedCPUMilli, h.AllocMemMiB, h.UsedMemMiB} {
		x = (x ^ uint64(v)) * 0x9e3779b97f4a7c15
		x ^= x >> 29
	}
	return x
}

// unknownNode is the reason for a node the cache has never seen; it is never modified.
var unknownNode = &core.Reason{Kind: core.ReasonUnknownNode}

// Fresh clears ok[i] where verdicts[i] no longer describes node names[i] (its state changed).
func (c *Cache) Fresh(names []string, verdicts []Verdict, ok []bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for i, name := range names {
		if !ok[i] {
			continue
		}
		n, found := c.nodes[name]
		ok[i] = found && n.gen == verdicts[i].gen
	}
}

// Stale reports whether some verdict no longer describes its node (the node's state changed since
// it was decided).
func (c *Cache) Stale(names []string, verdicts []Verdict) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for i, name := range names {
		n, found := c.nodes[name]
		if (found && n.gen != verdicts[i].gen) || (!found && verdicts[i].gen != 0) {
			return true
		}
	}
	return false
}

// Reserve decides the pod on the node with the cache's current state and, when it fits and need
// not wait, holds its devices until the informer shows it bound, Release is called, or the
// reservation expires (ExpireReservation). It returns the assignment to write. A pod the informer
// has shown bound is refused (ErrAlreadyBound) and its holdings stay untouched. A pod that still
// has a reservation (an earlier bind whose outcome was unknown) gets the same assignment again on
// the same node, and ErrBindPending on any other. Other errors wrap ErrNoFit or ErrInFlight.
func (c *Cache) Reserve(uid types.UID, key string, p *core.Pod, node string) (annotations.Assignment, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.pods[uid]; old != nil {
		switch {
		case !old.reserved:
			return annotations.Assignment{}, fmt.Errorf("pod %s holds devices on node %s: %w", key, old.node, ErrAlreadyBound)
		case old.node != node:
			return annotations.Assignment{}, fmt.Errorf("pod %s: a binding to node %s may still commit; it settles within the reservation timeout: %w", key, old.node, ErrBindPending)
		case old.asg != nil:
			old.since = c.clock.Now()
			if g := c.groups[old.group]; old.group != "" && g != nil {
				g.since = old.since // a member of the plan is being bound: the plan makes progress
			}
			return *old.asg, nil
		}
	}
	a, r, inFlight := c.reserveOn(uid, key, p, node, "")
	switch {
	case r != nil && inFlight:
		return annotations.Assignment{}, fmt.Errorf("node %s: %s: %w", node, r, ErrInFlight)
	case r != nil:
		return annotations.Assignment{}, fmt.Errorf("node %s: %s: %w", node, r, ErrNoFit)
	}
	return a, nil
}

// reserveOn is Reserve's decision and hold for a pod without a live record: it decides the pod on
// the node with the cache's current state and, when it fits and need not wait, reserves its
// devices, CPUs and memory. r says why not; inFlight is true when the pod must wait for a
// container in flight. group is the pod group the reservation belongs to ("" for none). Callers
// hold c.mu for writing.
func (c *Cache) reserveOn(uid types.UID, key string, p *core.Pod, node, group string) (a annotations.Assignment, r *core.Reason, inFlight bool) {
	n, ok := c.nodes[node]
	if !ok || n.state == nil {
		r := &core.Reason{Kind: core.ReasonUnknownNode}
		if ok {
			r = n.reason
		}
		return a, r, false
	}
	plan, r := c.fitReserve(n, p, uid)
	if r != nil {
		return a, r, false
	}
	if r := otherTenant(n, p); r != nil {
		return a, r, false
	}
	if r := c.waits(n, p, planCards(nil, plan), uid); r != nil {
		return a, r, true
	}
	a = plan.Assignment(n.state)
	rec := &podRecord{uid: uid, key: key, node: node, reserved: true, asg: &a, since: c.clock.Now(), tenant: tenantOf(key, &p.Request), group: group}
	for _, ca := range a.Containers {
		for _, d := range ca.Devices {
			rec.uses = append(rec.uses, use{id: d.ID, memMiB: d.MemoryMiB, cores: d.Cores})
		}
		rec.inFlight = append(rec.inFlight, inFlightOf(key, p.Created, &ca, p.Request, p.Selector))
	}
	// App containers reusing init devices repeat IDs: count each once.
	rec.uses = dedupUses(rec.uses)
	c.replace(uid, c.pods[uid], rec)
	c.reserveCPUs(uid, key, node, a.CPUs, p.HoldsExclusiveCPUs())
	if old, had := c.hosts[uid]; !had || old.reserved {
		c.setHost(uid, hostRecord{node: node, req: p.Host, reserved: true}, p.Host != core.HostRequest{})
	}
	return a, nil, false
}

func dedupUses(us []use) []use {
	out := us[:0]
	seen := map[string]bool{}
	for _, u := range us {
		if !seen[u.id] {
			seen[u.id] = true
			out = append(out, u)
		}
	}
	return out
}

// waits returns ReasonInFlight when a GPU container of the pod would be in flight on the node beside
// a container of another pod with the same device count that is not interchangeable with it.
// self is the pod's own UID (its earlier reservation is not a conflict).
func (c *Cache) waits(n *nodeEntry, p *core.Pod, cards []int, self types.UID) *core.Reason {
	if r := c.cpuWaits(n, p); r != nil {
		return r
	}
	if n.inFlight == 0 {
		return nil
	}
	ordered := admitsInCreationOrder(n)
	shape, numa := "", -1
	if ordered && !p.Selector.HasCardConstraint() {
		shape, numa = replicaShape(&p.Request), oneNUMA(n.state, planned(cards))
	}
	if n.flightSame && !p.Selector.HasCardConstraint() && !ordered {
		same := true
		for ci := range p.Request.Containers {
			r := &p.Request.Containers[ci]
			if r.Count == n.flightReq.Count && !r.Interchangeable(&n.flightReq) {
				same = false // some container may wait: the walk below says for which
				break
			}
		}
		if same {
			return nil
		}
	}
	for _, other := range n.pods {
		for fi := range other.inFlight {
			f := &other.inFlight[fi]
			off := 0
			for ci := range p.Request.Containers {
				r := &p.Request.Containers[ci]
				devs := cards[off+1 : off+1+cards[off]]
				off += 1 + cards[off]
				if r.Count != f.req.Count || r.MIGProfile != f.req.MIGProfile || other.uid == self {
					// Another count, or another resource (cards, or MIG instances of another
					// profile: the device plugin serves each resource apart): never confused.
					continue
				}
				// Members of one group get no exception here: on a TopologyManager node the
				// kubelet could swap two of them across NUMA nodes as it could any two pods.
				if ordered && f.created >= p.Created {
					if numa >= 0 && f.shape == shape && !f.unmanaged && !f.sel.HasCardConstraint() && oneNUMA(n.state, cardIndexes(n.state, f.cards)) == numa {
						// Replicas on one NUMA node: whichever the kubelet admits first gets
						// that node's hints and takes its own cards (Allocate asks the kubelet
						// which pod it admits); the CPUs the two take are counted alike.
						continue
					}
					return &core.Reason{Kind: core.ReasonInFlight, Need: r.Count,
						Detail: fmt.Sprintf("pod %s container %q (created in the same second or later: the kubelet's order between them is not known)", f.pod, f.req.Name)}
				}
				if interchangeable(n.state, p, r, devs, f) {
					continue
				}
				return &core.Reason{Kind: core.ReasonInFlight, Need: r.Count, Detail: fmt.Sprintf("pod %s container %q", f.pod, f.req.Name)}
			}
		}
	}
	return nil
}

// planned lists the card indexes of a pod's plan (planCards' layout: per container a count,
// then that many indexes).
func planned(cards []int) []int {
	var out []int
	for off := 0; off < len(cards); off += 1 + cards[off] {
		out = append(out, cards[off+1:off+1+cards[off]]...)
	}
	return out
}

// cardIndexes are the indexes in s of the cards with uuids (nil when one is unknown).
func cardIndexes(s *core.NodeState, uuids []string) []int {
	out := make([]int, 0, len(uuids))
	for _, u := range uuids {
		i, ok := s.CardIndex(u)
		if !ok {
			return nil
		}
		out = append(out, i)
	}
	return out
}

// oneNUMA is the NUMA node all the cards are on, -1 when they are on several, on none known, or
// there are none.
func oneNUMA(s *core.NodeState, cards []int) int {
	numa := -1
	for k, i := range cards {
		c := &s.Cards[i]
		if c.NUMA < 0 || (k > 0 && c.NUMA != numa) {
			return -1
		}
		numa = c.NUMA
	}
	return numa
}

// admitsInCreationOrder reports whether the node's kubelet runs a TopologyManager policy: it then
// picks each pod's NUMA node and cards from its own hints, in its own admission order, and only
// the order makes the device plugin's answer and the extender's CPU counts the kubelet's. The
// kubelet admits pods that reach it together in creation order (whole seconds; pods created in the
// same second in any order), so on such a node a container joins another in flight with the same
// device count only when its pod was created in a later second (that order is certain), or when
// the two pods are replicas (one replicaShape, no card rules) whose cards are all on one NUMA node:
// swapping them changes nothing the kubelet decides (issue 33 item 5). Other pods created together
// go one at a time (each waits for the one before it to be allocated) instead of swapping cards
// and NUMA nodes.
func admitsInCreationOrder(n *nodeEntry) bool {
	k := n.state.Kubelet
	return k != nil && k.TopologyManagerPolicy != "" && k.TopologyManagerPolicy != annotations.TopologyPolicyNone
}

// summariseFlight sets the node's flightSame and flightReq from its pods' in-flight containers.
func summariseFlight(n *nodeEntry) {
	n.flightSame = false
	first := true
	for _, p := range n.pods {
		for i := range p.inFlight {
			f := &p.inFlight[i]
			if f.unmanaged || f.sel.HasCardConstraint() || (!first && !f.req.Interchangeable(&n.flightReq)) {
				return
			}
			n.flightReq, first = f.req, false
		}
	}
	n.flightSame = true
}

// interchangeable reports whether container r (placed on the cards devs) and the in-flight
// container f ask for the same thing and each one's selector accepts the other's cards (a
// selector without card rules accepts any).
func interchangeable(s *core.NodeState, p *core.Pod, r *annotations.ContainerRequest, devs []int, f *inFlight) bool {
	if f.unmanaged || !r.Interchangeable(&f.req) {
		return false
	}
	if p.Selector.HasCardConstraint() {
		for _, uuid := range f.cards {
			i, ok := s.CardIndex(uuid)
			if !ok || !p.Accepts(&s.Cards[i]) {
				return false
			}
		}
	}
	if f.sel.HasCardConstraint() {
		for _, i := range devs {
			// A MIG instance by its parent's model and its own or its parent's UUID.
			c := &s.Cards[i]
			if f.sel.CheckDevice(c.Model, c.UUID, c.Parent) != annotations.MatchOK {
				return false
			}
		}
	}
	return true
}

// PreferredAffinity sets out[i] to what a pod's preferred node affinity terms give node names[i]
// (the sum of the weights of the terms its labels match; 0 for a node the cache does not know).
func (c *Cache) PreferredAffinity(terms *nodeaffinity.PreferredSchedulingTerms, names []string, out []int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var node corev1.Node
	for i, name := range names {
		out[i] = 0
		if n, ok := c.nodes[name]; ok {
			node.Name, node.Labels = name, n.labels
			out[i] = terms.Score(&node)
		}
	}
}

// Mix returns a copy of the task mix.
func (c *Cache) Mix() *core.TaskMix {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.mix.Clone()
}

// NodeUsage returns a copy of a node's state, or nil (for tests and debugging).
func (c *Cache) NodeUsage(name string) *core.NodeState {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if n, ok := c.nodes[name]; ok && n.state != nil {
		return n.state.Clone()
	}
	return nil
}
