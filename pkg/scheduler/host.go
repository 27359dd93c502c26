package scheduler

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

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
// kube-scheduler's NodeResourcesFit counts it: the larger of the app containers plus the sidecars
// (restartable init containers) and the peak of the init phase (each init container beside the
// sidecars started before it), plus the pod's overhead. It allocates nothing.
func podHost(pod *corev1.Pod) core.HostRequest {
	var sideCPU, sideMem, initCPU, initMem int64
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cpu, mem := requestOf(c.Resources.Requests)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sideCPU, sideMem = sideCPU+cpu, sideMem+mem
			initCPU, initMem = max(initCPU, sideCPU), max(initMem, sideMem)
			continue
		}
		initCPU, initMem = max(initCPU, sideCPU+cpu), max(initMem, sideMem+mem)
	}
	appCPU, appMem := sideCPU, sideMem
	for i := range pod.Spec.Containers {
		cpu, mem := requestOf(pod.Spec.Containers[i].Resources.Requests)
		appCPU, appMem = appCPU+cpu, appMem+mem
	}
	cpu, mem := requestOf(pod.Spec.Overhead)
	cpu += max(appCPU, initCPU)
	mem += max(appMem, initMem)
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
	r := podHost(pod)
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
