package annotations

// The kubelet's TopologyManager and CPU manager settings as the device plugin reports them in the
// inventory (Inventory.Kubelet). The extender's model of the kubelet (pkg/scheduler/core/topology)
// needs them to predict the NUMA node the kubelet picks and whether it admits the pod.

// TopologyManager policies (the kubelet's --topology-manager-policy).
const (
	TopologyPolicyNone           = "none"
	TopologyPolicyBestEffort     = "best-effort"
	TopologyPolicyRestricted     = "restricted"
	TopologyPolicySingleNUMANode = "single-numa-node"
)

// TopologyManager scopes (the kubelet's --topology-manager-scope).
const (
	TopologyScopeContainer = "container"
	TopologyScopePod       = "pod"
)

// CPU manager policies (the kubelet's --cpu-manager-policy).
const (
	CPUManagerPolicyNone   = "none"
	CPUManagerPolicyStatic = "static"
)

// MinMaxAllowableNUMANodes is the smallest value the kubelet accepts for the policy option
// max-allowable-numa-nodes (and its default).
const MinMaxAllowableNUMANodes = 8

// KubeletTopology is the optional "kubelet" field of the inventory: the node's kubelet settings and
// NUMA nodes with their CPUs. The CPU counts change as Guaranteed pods come and go; the plugin
// rewrites the inventory when they do (from the kubelet's PodResources API).
type KubeletTopology struct {
	TopologyManagerPolicy string `json:"topologyManagerPolicy"`
	TopologyManagerScope  string `json:"topologyManagerScope"`
	// PreferClosestNUMANodes and MaxAllowableNUMANodes are the policy options of those names;
	// 0 means the default (MinMaxAllowableNUMANodes).
	PreferClosestNUMANodes bool   `json:"preferClosestNUMANodes,omitempty"`
	MaxAllowableNUMANodes  int    `json:"maxAllowableNUMANodes,omitempty"`
	CPUManagerPolicy       string `json:"cpuManagerPolicy"`
	// DeviceTopology says whether the plugin gives the kubelet each device's NUMA node
	// (TopologyInfo); without it the kubelet does not align devices.
	DeviceTopology bool       `json:"deviceTopology"`
	NUMA           []NUMACPUs `json:"numa"`
	// PodsV is the version of Pods (PodCPUsVersion) when the plugin reports it; 0 (absent) when it
	// does not (a plugin older than the field): the extender then takes ExclusiveCPUs as they are.
	// Added in v1 without a version change of the inventory: older readers ignore both fields.
	PodsV int `json:"podsV,omitempty"`
	// Pods are the pods whose containers hold exclusive CPUs now, as the kubelet's CPU manager
	// checkpoint and PodResources say (an init container's CPUs the app containers did not reuse
	// included: the static policy keeps them for the pod's life). The extender charges a pod bound
	// to the node that is not listed here with the CPUs its model predicted, and counts a listed
	// pod until the kubelet frees its CPUs, whether or not the pod still exists.
	Pods []PodCPUs `json:"pods,omitempty"`
}

// PodCPUsVersion is the version of KubeletTopology.Pods this code writes and reads.
const PodCPUsVersion = 1

// PodCPUs is one pod's exclusive CPUs on each NUMA node.
type PodCPUs struct {
	UID string `json:"uid"`
	// CPUs[i] is how many of the pod's exclusive CPUs are on NUMA node NUMA[i] of the kubelet field.
	CPUs []int `json:"cpus"`
}

// maxPodUIDLen bounds a pod UID in the inventory (the API server's UIDs are 36 characters).
const maxPodUIDLen = 128

// NUMACPUs is one NUMA node and its CPUs as the kubelet's CPU manager counts them.
type NUMACPUs struct {
	ID int `json:"id"`
	// CPUs is every logical CPU of the NUMA node, reserved ones included.
	CPUs int `json:"cpus"`
	// ReservedCPUs are those in the kubelet's reserved set (never exclusive).
	ReservedCPUs int `json:"reservedCPUs"`
	// ExclusiveCPUs are those containers hold exclusively now (static policy).
	ExclusiveCPUs int `json:"exclusiveCPUs"`
	// Distances[j] is the distance to NUMA node j (sysfs); optional, read with
	// PreferClosestNUMANodes.
	Distances []int `json:"distances,omitempty"`
}

// maxNUMANodeID is the highest NUMA node ID the kubelet's bitmask holds.
const maxNUMANodeID = 63

// MaxTopologyNUMANodes is the most NUMA nodes an inventory may list when its kubelet runs a
// TopologyManager policy other than none. It follows the kubelet: its TopologyManager refuses to
// start on machines with more than 8 NUMA nodes (defaultMaxAllowableNUMANodes in k8s.io/kubernetes
// pkg/kubelet/cm/topologymanager/topology_manager.go, "a state explosion when trying to enumerate
// possible NUMAAffinity masks") unless the policy option max-allowable-numa-nodes raises it. The
// extender's model of the kubelet enumerates the same 2^N masks for each provider and merges them
// pairwise: about 2.6 ms per admission check at 8 NUMA nodes, 45 ms at 10 and 0.6 s at 12, and it
// cannot allocate them at 48 or more. So an inventory with more is refused (the node gets a
// bad-inventory reason) even where the kubelet's option allows it. EncodeInventory accepts it (the
// plugin reports what it sees); DecodeInventory refuses it.
const MaxTopologyNUMANodes = MinMaxAllowableNUMANodes

func (k *KubeletTopology) validate() error {
	const key = GPUInventory
	switch k.TopologyManagerPolicy {
	case TopologyPolicyNone, TopologyPolicyBestEffort, TopologyPolicyRestricted, TopologyPolicySingleNUMANode:
	default:
		return errorf(key, "kubelet.topologyManagerPolicy: %q is not one of none, best-effort, restricted, single-numa-node", k.TopologyManagerPolicy)
	}
	switch k.TopologyManagerScope {
	case TopologyScopeContainer, TopologyScopePod:
	default:
		return errorf(key, "kubelet.topologyManagerScope: %q is not one of container, pod", k.TopologyManagerScope)
	}
	switch k.CPUManagerPolicy {
	case CPUManagerPolicyNone, CPUManagerPolicyStatic:
	default:
		return errorf(key, "kubelet.cpuManagerPolicy: %q is not one of none, static", k.CPUManagerPolicy)
	}
	if k.MaxAllowableNUMANodes != 0 && (k.MaxAllowableNUMANodes < MinMaxAllowableNUMANodes || k.MaxAllowableNUMANodes > maxNUMANodeID+1) {
		return errorf(key, "kubelet.maxAllowableNUMANodes: %d is not in %d..%d", k.MaxAllowableNUMANodes, MinMaxAllowableNUMANodes, maxNUMANodeID+1)
	}
	var seen uint64
	for i := range k.NUMA {
		n := &k.NUMA[i]
		switch {
		case n.ID < 0 || n.ID > maxNUMANodeID:
			return errorf(key, "kubelet.numa[%d].id: %d is not in 0..%d", i, n.ID, maxNUMANodeID)
		case seen&(1<<uint(n.ID)) != 0:
			return errorf(key, "kubelet.numa[%d].id: %d appears twice", i, n.ID)
		case n.CPUs < 0 || n.ReservedCPUs < 0 || n.ExclusiveCPUs < 0:
			return errorf(key, "kubelet.numa[%d]: a CPU count is negative", i)
		case n.ReservedCPUs+n.ExclusiveCPUs > n.CPUs:
			return errorf(key, "kubelet.numa[%d]: %d reserved and %d exclusive CPUs are more than its %d", i, n.ReservedCPUs, n.ExclusiveCPUs, n.CPUs)
		case len(n.Distances) > maxNUMANodeID+1:
			return errorf(key, "kubelet.numa[%d].distances: %d entries, more than %d", i, len(n.Distances), maxNUMANodeID+1)
		}
		for j, d := range n.Distances {
			if d < 0 {
				return errorf(key, "kubelet.numa[%d].distances[%d]: %d is negative", i, j, d)
			}
		}
		seen |= 1 << uint(n.ID)
	}
	return k.validatePods()
}

// validatePods checks Pods against PodsV and the NUMA nodes' CPUs.
func (k *KubeletTopology) validatePods() error {
	const key = GPUInventory
	switch {
	case k.PodsV == 0 && len(k.Pods) > 0:
		return errorf(key, "kubelet.pods: %d entries without kubelet.podsV", len(k.Pods))
	case k.PodsV != 0 && k.PodsV != PodCPUsVersion:
		return errorf(key, "kubelet.podsV: %d is not a known version (%d)", k.PodsV, PodCPUsVersion)
	}
	held := make([]int, len(k.NUMA))
	uids := make(map[string]bool, len(k.Pods))
	for i := range k.Pods {
		p := &k.Pods[i]
		switch {
		case p.UID == "" || len(p.UID) > maxPodUIDLen:
			return errorf(key, "kubelet.pods[%d].uid: %q is empty or longer than %d characters", i, p.UID, maxPodUIDLen)
		case uids[p.UID]:
			return errorf(key, "kubelet.pods[%d].uid: %q appears twice", i, p.UID)
		case len(p.CPUs) != len(k.NUMA):
			return errorf(key, "kubelet.pods[%d].cpus: %d counts for %d NUMA nodes", i, len(p.CPUs), len(k.NUMA))
		}
		uids[p.UID] = true
		for j, c := range p.CPUs {
			if c < 0 {
				return errorf(key, "kubelet.pods[%d].cpus[%d]: %d is negative", i, j, c)
			}
			if held[j] += c; held[j] > k.NUMA[j].CPUs-k.NUMA[j].ReservedCPUs {
				return errorf(key, "kubelet.pods: the pods hold more exclusive CPUs on NUMA node %d than its %d unreserved ones", k.NUMA[j].ID, k.NUMA[j].CPUs-k.NUMA[j].ReservedCPUs)
			}
		}
	}
	return nil
}

// modelled refuses what the scheduler's model of the kubelet cannot enumerate cheaply: more than
// MaxTopologyNUMANodes NUMA nodes under a policy other than none. It is a decode-time check only,
// so a plugin on such a node still publishes its facts and the node gets a reason naming them.
func (k *KubeletTopology) modelled() error {
	if k.TopologyManagerPolicy != TopologyPolicyNone && len(k.NUMA) > MaxTopologyNUMANodes {
		return errorf(GPUInventory, "kubelet.numa: %d NUMA nodes under the %s policy, more than the %d the GPU scheduler models (the kubelet's own default limit)",
			len(k.NUMA), k.TopologyManagerPolicy, MaxTopologyNUMANodes)
	}
	return nil
}

// maxAssignedCPUs bounds one NUMA node's CPUs in an assignment's prediction (Linux allows 8192 CPUs
// on x86, fewer elsewhere).
const maxAssignedCPUs = 1 << 16
