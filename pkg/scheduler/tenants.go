package scheduler

import (
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// One tenant per mps node. A node whose sharing mode is mps runs one MPS control daemon: its
// clients share the daemon's /dev/shm tmpfs and its control pipe, so two namespaces' shared
// containers there could read each other's shared memory, fill the tmpfs or command the daemon. The
// device plugin refuses a shared container at Allocate while another namespace's shared pod lives on
// the node (deviceplugin, ReasonOtherTenant); the extender keeps the same rule, so such a pod stays
// Pending with a reason (or goes to another node) instead of failing at the kubelet. Whole-card
// containers are not MPS clients and are not restricted, nor are hami-core nodes.
//
// The rule counts every pod the cache holds on the node (reserved, in flight, running, terminating)
// that has a shared container: a terminating pod's processes may still use the daemon, so its
// namespace keeps the node until the pod is gone.

// tenantOf is the namespace a record holds an mps node for: its pod's namespace when one of its
// containers shares cards, "" otherwise.
func tenantOf(key string, req *annotations.PodRequest) string {
	for i := range req.Containers {
		if req.Containers[i].Shared {
			ns, _, _ := strings.Cut(key, "/")
			return ns
		}
	}
	return ""
}

// countTenant adds d (1 or -1) to the node's count of pods of rec's tenant.
func countTenant(n *nodeEntry, rec *podRecord, d int) {
	if rec.tenant == "" {
		return
	}
	if n.tenants == nil {
		n.tenants = map[string]int{}
	}
	if n.tenants[rec.tenant] += d; n.tenants[rec.tenant] <= 0 {
		delete(n.tenants, rec.tenant)
	}
}

// otherTenant returns ReasonOtherTenant when p shares cards, the node's sharing mode is mps and a
// pod of another namespace shares cards there (the first such namespace by name); nil otherwise.
func otherTenant(n *nodeEntry, p *core.Pod) *core.Reason {
	shared := p.SharedContainer()
	if shared == "" || len(n.tenants) == 0 || n.state == nil || n.state.Sharing == nil || n.state.Sharing.Mode != annotations.SharingMPS {
		return nil
	}
	other := ""
	for ns := range n.tenants {
		if ns != p.Tenant && (other == "" || ns < other) {
			other = ns
		}
	}
	if other == "" {
		return nil
	}
	return &core.Reason{Kind: core.ReasonOtherTenant, Container: shared, Detail: other}
}
