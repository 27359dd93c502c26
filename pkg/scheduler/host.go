package scheduler

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

const mib = 1 << 20

// hostRecord is the CPU and memory a pod holds on a node: what kube-scheduler counts for a bound,
// unfinished pod, or what Reserve set aside until the informer shows the pod bound.
type hostRecord struct {
	node     string
	req      core.HostRequest
	reserved bool
}

// podHost is a pod's effective CPU (millicores) and memory (MiB, rounded up) request, as
// kube-scheduler's NodeResourcesFit counts the pod it places: the larger of the app containers
// plus the sidecars (restartable init containers) and the peak of the init phase, or the pod-level
// requests where the pod sets them (PodLevelResources, on by default since 1.34), plus the pod's
// overhead. It is component-helpers' PodRequests, the function kube-scheduler calls. It allocates
// nothing.
func podHost(pod *corev1.Pod) core.HostRequest {
	return hostRequest(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
}

// heldHost is what a bound pod holds, as kube-scheduler's NodeInfo counts it: with in-place resize
// (GA since 1.35) the spec is what the pod asks for and its status what the kubelet allocated and
// the runtime applied, so a resize in progress holds the larger, and one the kubelet found
// infeasible (a Guaranteed pod under the static CPU manager, for one) holds what it had.
func heldHost(pod *corev1.Pod) core.HostRequest {
	return hostRequest(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		UseStatusResources: true,
		// Pod-level resize (beta, on by default, in 1.36): a kubelet without it reports no pod-level
		// status resources, and the spec is used.
		InPlacePodLevelResourcesVerticalScalingEnabled: true,
	}))
}

// hostRequest reads CPU and memory from a request list: millicores, and MiB rounded up.
func hostRequest(l corev1.ResourceList) core.HostRequest {
	cpu, mem := requestOf(l)
	return core.HostRequest{CPUMilli: max(cpu, 0), MemMiB: max((mem+mib-1)/mib, 0)}
}

// requestOf reads CPU (millicores) and memory (bytes) from a resource list.
func requestOf(l corev1.ResourceList) (cpuMilli, memBytes int64) {
	if q, ok := l[corev1.ResourceCPU]; ok {
		cpuMilli = q.MilliValue()
	}
	if q, ok := l[corev1.ResourceMemory]; ok {
		memBytes = q.Value()
	}
	return cpuMilli, memBytes
}

// nodeHost is a node's allocatable CPU (millicores) and memory (MiB, rounded down); 0 where the
// node does not say.
func nodeHost(node *corev1.Node) (cpuMilli, memMiB int64) {
	cpu, mem := requestOf(node.Status.Allocatable)
	return max(cpu, 0), max(mem/mib, 0)
}

// hostOf is what a pod holds of its node's CPU and memory; false when it holds nothing (not bound,
// finished, or no request).
func hostOf(pod *corev1.Pod) (hostRecord, bool) {
	if pod.Spec.NodeName == "" || finished(pod) {
		return hostRecord{}, false
	}
	r := heldHost(pod)
	if r == (core.HostRequest{}) {
		return hostRecord{}, false
	}
	return hostRecord{node: pod.Spec.NodeName, req: r}, true
}

// setHost replaces what pod uid holds of its node's CPU and memory (ok false: nothing) and keeps
// the node's sum and state in step. A node's state changes (and its generation with it) only when
// the sum does. Called with c.mu held.
func (c *Cache) setHost(uid types.UID, rec hostRecord, ok bool) {
	old, had := c.hosts[uid]
	if had == ok && (!ok || (old.node == rec.node && old.req == rec.req)) {
		if ok {
			c.hosts[uid] = rec // the reserved flag may change
		}
		return
	}
	if had {
		delete(c.hosts, uid)
		if n := c.nodes[old.node]; n != nil {
			n.host.CPUMilli -= old.req.CPUMilli
			n.host.MemMiB -= old.req.MemMiB
			n.hostPods--
			if n.state != nil {
				n.state.UnholdHost(old.req)
				c.bump(n)
			}
			if n.plain != nil {
				n.plain.UnholdHost(old.req)
				c.bump(n)
			}
		}
	}
	if ok {
		c.hosts[uid] = rec
		n := c.node(rec.node)
		n.host.CPUMilli += rec.req.CPUMilli
		n.host.MemMiB += rec.req.MemMiB
		n.hostPods++
		if n.state != nil {
			n.state.HoldHost(rec.req)
			c.bump(n)
		}
		if n.plain != nil {
			n.plain.HoldHost(rec.req)
			c.bump(n)
		}
	}
}

// readsHost reports whether the pod's policies may score a node by its CPU and memory: any policy
// but binpack and spread (which score cards only) does, so nodes are shared in Evaluate only when
// their CPU and memory are equal too.
func readsHost(p *core.Pod) bool {
	cardsOnly := func(pol annotations.Policy) bool {
		return pol == annotations.PolicyBinpack || pol == annotations.PolicySpread
	}
	return !cardsOnly(p.NodePolicy) || !cardsOnly(p.GPUPolicy)
}
