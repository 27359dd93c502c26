package scheduler

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// Exclusive CPUs per NUMA node on nodes whose kubelet runs a TopologyManager policy and the static
// CPU manager (DESIGN.md, "How Allocate knows the pod"). The kubelet picks each pod's NUMA node
// from its own free CPUs at the moment it admits the pod; the inventory is the kubelet's count as
// of the plugin's last write, which a burst of binds (milliseconds apart) or a delete outruns. So
// the counts the model reads (core.NodeState.SetExclusiveCPUs) are, per NUMA node:
//
//   - the CPUs of every pod the node lists (inventory kubelet.pods: the kubelet's CPU manager
//     checkpoint, init containers' retained CPUs included), whether or not the pod still exists:
//     the kubelet holds them until it frees them, and the plugin drops the pod from the list then;
//   - plus, for each pod reserved, in flight or bound to the node that the node does not list yet,
//     the CPUs the model predicted for it at bind (the assignment's cpus), on those NUMA nodes.
//
// Where the cache cannot know the kubelet's count, a pod that takes exclusive CPUs waits
// (core.ReasonKubeletCPUs, handled like a container in flight: filter prefers other nodes, bind
// waits for the node to change and then returns a retriable error) instead of guessing:
//
//   - a pod bound to the node with exclusive CPUs and no prediction (a CPU-only Guaranteed pod, a
//     pod another scheduler placed, an assignment written without cpus) that the node does not
//     list yet: until the node lists it (the kubelet admitted it) or it goes away unlisted;
//   - a pod deleted, finished or terminating that the node still lists: until the kubelet frees
//     its CPUs and the node stops listing it;
//   - a pod that went away before the node ever listed it: the kubelet may have admitted it just
//     before and hold its CPUs unreported; for cpuGoneGrace, or until the node lists it (then as
//     above).
//
// A node whose plugin does not list pods (kubelet.podsV absent: an older plugin) keeps the
// inventory's counts as they are.

// cpuGoneGrace is how long a pod that went away unlisted keeps its node waiting: longer than the
// plugin takes to see the kubelet's checkpoint change and write the inventory (it polls the
// checkpoint every cpuStatePoll, 250 ms), so a pod the kubelet admitted just before it went away
// is listed by then.
const cpuGoneGrace = 5 * time.Second

// cpuHolder is a pod that holds or will hold exclusive CPUs on a node.
type cpuHolder struct {
	key  string // namespace/name
	node string
	// predicted is what the model predicted at bind (the assignment's cpus); nil when unknown.
	predicted []annotations.NUMACPUCount
	// reserved: made by Reserve, not yet shown bound by the informer.
	reserved bool
	// gone is when the pod was seen deleted, finished or terminating (zero while it lives); listed
	// is set once the node listed it after that.
	gone   time.Time
	listed bool
	// listedAs is the UID the node lists the pod's CPUs under when it is not the pod's own: a
	// static pod's, which the informer sees as its mirror pod (see mirrorUID).
	listedAs types.UID
}

// mirrorUID is the UID the kubelet knows a pod by when it is not the pod's API UID, "" otherwise.
// A static pod lives in the kubelet under the hash of its manifest (its config hash), which is what
// the CPU manager checkpoint, and so the node's list of pods with exclusive CPUs, names it by; the
// API server and the informer see its mirror pod, with an API UID of its own and the hash in the
// kubernetes.io/config.mirror annotation (kubelet pkg/kubelet/pod/mirror_client.go).
func mirrorUID(pod *corev1.Pod) types.UID {
	return types.UID(pod.Annotations[corev1.MirrorPodAnnotationKey])
}

// nodeCPUs is what the cache knows of a node's exclusive CPUs.
type nodeCPUs struct {
	// listed are the pods the node's inventory lists with their CPUs per NUMA node (indexed like
	// its kubelet.numa); nil when the inventory lists none because its plugin does not report them.
	listed map[types.UID][]int
	// pods are the node's entries of Cache.cpuPods.
	pods map[types.UID]*cpuHolder
	// wait, when set, is why a pod that takes exclusive CPUs waits on the node; until, when not
	// zero, is when that wait ends by itself (a pod gone unlisted, cpuGoneGrace).
	wait  *core.Reason
	until time.Time
}

// listedCPUsOf reads the pods a node's inventory lists; nil when it does not report them.
func listedCPUsOf(s *core.NodeState) map[types.UID][]int {
	if s == nil || s.Kubelet == nil || s.Kubelet.PodsV == 0 {
		return nil
	}
	out := make(map[types.UID][]int, len(s.Kubelet.Pods))
	for _, p := range s.Kubelet.Pods {
		out[types.UID(p.UID)] = p.CPUs
	}
	return out
}

// holdsExclusiveCPUs reports whether the static CPU manager gives the pod exclusive CPUs: it is
// Guaranteed and a container (init or app) asks a whole number of CPUs.
func holdsExclusiveCPUs(pod *corev1.Pod) bool {
	var r annotations.PodRequest
	if r.Guaranteed = pod.Status.QOSClass == corev1.PodQOSGuaranteed; pod.Status.QOSClass == "" {
		// Not recorded (a pod the API server did not create: tests): the API server's rule.
		r.Containers = []annotations.ContainerRequest{{}}
		r.ReadCPUs(pod)
	}
	if !r.Guaranteed {
		return false
	}
	whole := func(cs []corev1.Container) bool {
		for i := range cs {
			q, ok := cs[i].Resources.Requests[corev1.ResourceCPU]
			if !ok {
				q, ok = cs[i].Resources.Limits[corev1.ResourceCPU]
			}
			if ok && q.MilliValue() > 0 && q.MilliValue()%1000 == 0 {
				return true
			}
		}
		return false
	}
	return whole(pod.Spec.InitContainers) || whole(pod.Spec.Containers)
}

// trackCPUs records a pod from the informer: a bound pod that holds exclusive CPUs, its
// prediction from its assignment, and whether it is going away. Called with c.mu held.
func (c *Cache) trackCPUs(pod *corev1.Pod) {
	node := pod.Spec.NodeName
	old := c.cpuPods[pod.UID]
	if node == "" {
		return // not bound: a reservation (if any) stays
	}
	if !holdsExclusiveCPUs(pod) {
		if old != nil {
			c.dropCPUPod(pod.UID, old)
		}
		return
	}
	cp := &cpuHolder{key: pod.Namespace + "/" + pod.Name, node: node, listedAs: mirrorUID(pod)}
	if old != nil && old.node == node {
		cp.predicted, cp.gone, cp.listed = old.predicted, old.gone, old.listed
	} else if old != nil {
		c.dropCPUPod(pod.UID, old)
	}
	if raw, ok := pod.Annotations[annotations.GPUAssignment]; ok {
		if a, err := annotations.DecodeAssignment(raw); err == nil && a.Node == node && len(a.CPUs) > 0 {
			cp.predicted = a.CPUs
		}
	}
	if cp.gone.IsZero() && (finished(pod) || pod.DeletionTimestamp != nil) {
		cp.gone = c.clock.Now()
	}
	c.putCPUPod(pod.UID, cp)
}

// reserveCPUs records the prediction of a reservation. Called with c.mu held.
func (c *Cache) reserveCPUs(uid types.UID, key, node string, predicted []annotations.NUMACPUCount, exclusive bool) {
	if old := c.cpuPods[uid]; old != nil {
		c.dropCPUPod(uid, old)
	}
	if !exclusive {
		return
	}
	c.putCPUPod(uid, &cpuHolder{key: key, node: node, predicted: predicted, reserved: true})
}

// releaseCPUs forgets a reservation that never bound. Called with c.mu held.
func (c *Cache) releaseCPUs(uid types.UID) {
	if old := c.cpuPods[uid]; old != nil && old.reserved {
		c.dropCPUPod(uid, old)
	}
}

// forgetCPUs is DeletePod's part: a bound pod is kept as gone until its node shows the kubelet
// freed its CPUs (see the top of this file). Called with c.mu held.
func (c *Cache) forgetCPUs(uid types.UID) {
	old := c.cpuPods[uid]
	switch {
	case old == nil:
	case old.reserved:
		c.dropCPUPod(uid, old)
	default:
		if old.gone.IsZero() {
			cp := *old
			cp.gone = c.clock.Now()
			c.putCPUPod(uid, &cp)
		}
	}
}

func (c *Cache) putCPUPod(uid types.UID, cp *cpuHolder) {
	c.cpuPods[uid] = cp
	n := c.node(cp.node)
	if n.cpu.pods == nil {
		n.cpu.pods = map[types.UID]*cpuHolder{}
	}
	n.cpu.pods[uid] = cp
	c.refreshCPUs(n)
}

func (c *Cache) dropCPUPod(uid types.UID, cp *cpuHolder) {
	delete(c.cpuPods, uid)
	if n := c.nodes[cp.node]; n != nil {
		delete(n.cpu.pods, uid)
		c.refreshCPUs(n)
	}
}

// refreshCPUs sets the exclusive CPUs the node's kubelet model reads, and the node's wait, from
// what the node lists and the pods the cache knows there. Called with c.mu held.
func (c *Cache) refreshCPUs(n *nodeEntry) {
	hadWait := n.cpu.wait != nil
	n.cpu.wait, n.cpu.until = nil, time.Time{}
	s := n.state
	if s == nil || !s.CountsCPUs() || n.cpu.listed == nil {
		if s != nil && s.CountsCPUs() {
			s.SetExclusiveCPUs(nil)
			c.bump(n)
		}
		c.cpuWaitEnded(hadWait, n)
		return
	}
	numa := s.Kubelet.NUMA
	held := make([]int, len(numa))
	for _, cpus := range n.cpu.listed {
		for i := range min(len(cpus), len(held)) {
			held[i] += cpus[i]
		}
	}
	now := c.clock.Now()
	// wait keeps the first reason; an open-ended wait wins over one that ends by itself.
	wait := func(r *core.Reason, until time.Time) {
		switch {
		case n.cpu.wait == nil:
			n.cpu.wait, n.cpu.until = r, until
		case until.IsZero() && !n.cpu.until.IsZero():
			n.cpu.wait, n.cpu.until = r, until
		case !until.IsZero() && !n.cpu.until.IsZero() && until.After(n.cpu.until):
			n.cpu.until = until
		}
	}
	for uid, cp := range n.cpu.pods {
		_, listed := n.cpu.listed[listedUID(uid, cp)]
		switch {
		case !cp.gone.IsZero():
			if listed {
				cp.listed = true
				wait(&core.Reason{Kind: core.ReasonKubeletCPUs, Detail: fmt.Sprintf("the kubelet frees the CPUs of pod %s, which is going away", cp.key)}, time.Time{})
				continue
			}
			if end := cp.gone.Add(cpuGoneGrace); cp.listed || !now.Before(end) {
				delete(n.cpu.pods, uid)
				delete(c.cpuPods, uid)
			} else {
				wait(&core.Reason{Kind: core.ReasonKubeletCPUs, Detail: fmt.Sprintf("pod %s went away before the node listed its CPUs", cp.key)}, end)
			}
		case listed:
			// Counted above: the kubelet's own count wins over the prediction.
		case cp.predicted != nil:
			for _, pc := range cp.predicted {
				for i := range numa {
					if numa[i].ID == pc.NUMA {
						held[i] += pc.CPUs
					}
				}
			}
		default:
			wait(&core.Reason{Kind: core.ReasonKubeletCPUs, Detail: fmt.Sprintf("the node has not listed the CPUs of pod %s yet", cp.key)}, time.Time{})
		}
	}
	s.SetExclusiveCPUs(held)
	c.bump(n) // the counts are part of the node's key; the wait is part of its verdicts
	c.cpuWaitEnded(hadWait, n)
}

// cpuWaitEnded wakes binds waiting for the node (InFlightDone) when its wait ended.
func (c *Cache) cpuWaitEnded(hadWait bool, n *nodeEntry) {
	if hadWait && n.cpu.wait == nil {
		close(c.done)
		c.done = make(chan struct{})
	}
}

// cpuWaits is the node's wait for a pod that takes exclusive CPUs, nil when it need not wait.
// Called with c.mu held (for reading at least).
func (c *Cache) cpuWaits(n *nodeEntry, p *core.Pod) *core.Reason {
	if n.cpu.wait == nil || !p.HoldsExclusiveCPUs() {
		return nil
	}
	if !n.cpu.until.IsZero() && !c.clock.Now().Before(n.cpu.until) {
		return nil
	}
	return n.cpu.wait
}

// NodeExclusiveCPUs returns the exclusive CPUs per NUMA node (in the order of the inventory's
// kubelet.numa) the node's kubelet model reads now, nil for a node without a model (tests,
// debugging).
func (c *Cache) NodeExclusiveCPUs(name string) []int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if n, ok := c.nodes[name]; ok && n.state != nil {
		return n.state.ExclusiveCPUs()
	}
	return nil
}

// cpusHeldBy returns the exclusive CPUs pod uid holds on node n per NUMA node (indexed like the
// inventory's kubelet.numa) as the counts the model reads have them: what the node lists for it,
// else what the model predicted for a live pod it does not list yet; nil when none are counted
// (preemption gives them back in its what-ifs). Called with c.mu held (read).
func (c *Cache) cpusHeldBy(n *nodeEntry, uid types.UID) []int {
	s := n.state
	if s == nil || !s.CountsCPUs() {
		return nil
	}
	numa := s.Kubelet.NUMA
	cp := n.cpu.pods[uid]
	if cpus, ok := n.cpu.listed[listedUID(uid, cp)]; ok {
		out := make([]int, len(numa))
		copy(out, cpus)
		return out
	}
	if cp == nil || cp.predicted == nil || !cp.gone.IsZero() {
		return nil
	}
	out := make([]int, len(numa))
	for _, pc := range cp.predicted {
		for i := range numa {
			if numa[i].ID == pc.NUMA {
				out[i] += pc.CPUs
			}
		}
	}
	return out
}

// listedUID is the UID the node lists pod uid (cp, when the cache tracks its CPUs) under: its
// config hash for a static pod, else its own.
func listedUID(uid types.UID, cp *cpuHolder) types.UID {
	if cp != nil && cp.listedAs != "" {
		return cp.listedAs
	}
	return uid
}
