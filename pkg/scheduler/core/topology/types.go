package topology

// Policy is the kubelet's --topology-manager-policy.
type Policy string

// The kubelet's TopologyManager policies (topologymanager/policy_*.go).
const (
	PolicyNone           Policy = "none"
	PolicyBestEffort     Policy = "best-effort"
	PolicyRestricted     Policy = "restricted"
	PolicySingleNUMANode Policy = "single-numa-node"
)

// Scope is the kubelet's --topology-manager-scope.
type Scope string

// The kubelet's TopologyManager scopes (topologymanager/scope_container.go, scope_pod.go).
const (
	ScopeContainer Scope = "container"
	ScopePod       Scope = "pod"
)

// CPUPolicy is the kubelet's --cpu-manager-policy.
type CPUPolicy string

// The kubelet's CPU manager policies.
const (
	CPUPolicyNone   CPUPolicy = "none"
	CPUPolicyStatic CPUPolicy = "static"
)

// DefaultMaxAllowableNUMANodes is the kubelet's limit on NUMA nodes when a policy other than none
// is set (topology_manager.go, defaultMaxAllowableNUMANodes); beyond it the kubelet does not start.
const DefaultMaxAllowableNUMANodes = 8

// MaxNUMANodes is the most NUMA nodes Admit models under a policy other than none: it enumerates
// every subset of them for each hint provider, as the kubelet does, and merges the two lists
// pairwise, which the kubelet's default limit keeps cheap (about 2.6 ms per admission at 8 NUMA
// nodes, 45 ms at 10, 0.6 s at 12). A node with more, which the kubelet runs only with
// max-allowable-numa-nodes raised, is refused with ReasonInvalidNode (the inventory decoder refuses
// it first: annotations.MaxTopologyNUMANodes).
const MaxNUMANodes = DefaultMaxAllowableNUMANodes

// Node is what the model knows of one node's kubelet and NUMA layout.
type Node struct {
	Policy Policy
	// Scope is container when empty (the kubelet's default).
	Scope     Scope
	CPUPolicy CPUPolicy
	// PreferClosestNUMA is the policy option prefer-closest-numa-nodes: among equally wide
	// preferred hints, the one whose NUMA nodes are closest (NUMANode.Distances) wins.
	PreferClosestNUMA bool
	// MaxAllowableNUMANodes is the policy option max-allowable-numa-nodes; 0 means
	// DefaultMaxAllowableNUMANodes.
	MaxAllowableNUMANodes int
	// NUMA lists the node's NUMA nodes, each ID once (0-63), in any order.
	NUMA []NUMANode
}

// NUMANode is one NUMA node and its CPUs as the static CPU manager counts them.
type NUMANode struct {
	ID int
	// CPUs is every logical CPU of the NUMA node, reserved ones included (the CPU manager's
	// CPUDetails; the narrowest CPU hint is computed from these).
	CPUs int
	// ReservedCPUs are the CPUs of this NUMA node in the kubelet's reserved set: never exclusive.
	ReservedCPUs int
	// ExclusiveCPUs are the CPUs of this NUMA node that containers hold exclusively now.
	ExclusiveCPUs int
	// Distances[j] is the distance to NUMA node j (sysfs node distance); only read with
	// PreferClosestNUMA.
	Distances []int
}

// FreeCPUs is what the static CPU manager can still give exclusively on this NUMA node.
func (n *NUMANode) FreeCPUs() int {
	if f := n.CPUs - n.ReservedCPUs - n.ExclusiveCPUs; f > 0 {
		return f
	}
	return 0
}

// Device is one device the device plugin advertises: a card's UUID, or a share slot `<UUID>::<k>`,
// of Cardinal's GPU resource; or a MIG instance's UUID, of the MIG resource of its profile.
type Device struct {
	ID string
	// Resource is "" for Cardinal's GPU resource, else the MIG profile key of the instance's
	// resource (annotations.MIGProfileKey): the kubelet gives hints and allocates per resource.
	Resource string
	// NUMA is the NUMA node the plugin reports in the device's TopologyInfo; negative when it
	// reports none (the plugin's TopologyInfo switch off, or NUMA unknown).
	NUMA    int
	Healthy bool
	// Held is true while a container holds the device (the kubelet's allocatedDevices).
	Held bool
}

// Container is one container of the pod as the kubelet admits it.
type Container struct {
	Name string
	// Init marks an init container; Restartable an init container with restartPolicy Always (a
	// sidecar), which keeps its devices and CPUs instead of handing them on.
	Init, Restartable bool
	// Devices is the container's limit of its device resource, Resource ("" for Cardinal's GPU
	// resource, else a MIG profile key; a container takes devices of one resource).
	Devices  int
	Resource string
	// ListsDevices is true when the container's limits name Cardinal's resource, with any
	// quantity: the device manager gives hints for a limit of 0 too (GetTopologyHints keeps every
	// resource of the limits), and those hints must hold the devices init containers hand on. A
	// container with Devices > 0 lists them whatever this says.
	ListsDevices bool
	// CPUs is the container's CPU request when it is a whole number (0 otherwise); it counts only
	// when the pod is Guaranteed and the CPU manager policy is static.
	CPUs int
}

// Request is a pod as the kubelet admits it.
type Request struct {
	// Containers are the init containers in order, then the app containers in order: the kubelet's
	// admission order.
	Containers []Container
	// Guaranteed is the pod's QoS class being Guaranteed.
	Guaranteed bool
	// Pick, when set, says which n device IDs of pool the device plugin (or, with no plugin call,
	// the kubelet) takes for container c, beside fixed, the IDs the kubelet takes anyway (the
	// plugin's mustInclude); it must return n distinct IDs of pool, otherwise the model takes the
	// first n. Nil takes the first n (pool keeps the order of the devices given to Admit). It is
	// called for every container that gets devices, in admission order, also with n == 0 (all
	// fixed), so that a caller sees every container's devices as they are taken. Later
	// containers' hints depend on what earlier ones took.
	Pick func(c int, fixed, pool []string, n int) []string
}

// Hint is a TopologyHint: a NUMA affinity (zero: none) and whether it is preferred.
type Hint struct {
	Affinity  Mask
	Preferred bool
}

// Result is the kubelet's admission of a pod.
type Result struct {
	// Unconstrained: the policy is none; the kubelet aligns nothing, every free device may be
	// assigned (Containers is empty).
	Unconstrained bool
	// Pod is the pod's hint at pod scope (zero at container scope).
	Pod Hint
	// Containers follow Request.Containers.
	Containers []ContainerResult
	// HeldCPUs counts the exclusive CPUs the pod holds on each NUMA node once admitted, indexed
	// like Node.NUMA (init containers' unreused CPUs included); nil when it holds none.
	HeldCPUs []int
}

// ContainerResult is what the kubelet does for one container.
type ContainerResult struct {
	Name string
	// Hint is the affinity the TopologyManager stores for the container (the pod's, at pod scope).
	Hint    Hint
	Devices Allocation
	// CPUs counts the exclusive CPUs the container gets on each NUMA node, indexed like Node.NUMA;
	// nil when it gets none.
	CPUs []int
}

// Allocation is how the device manager picks a container's devices (devicesToAllocate). The
// kubelet takes every ID of Fixed, then FromPool IDs of Pool: the device plugin chooses them when
// AskPlugin (GetPreferredAllocation with available = Fixed+Pool, mustInclude = Fixed), otherwise
// the kubelet takes any FromPool of them itself (an init container's devices handed on: the
// kubelet picks at random, nothing can steer it).
type Allocation struct {
	Fixed     []string
	Pool      []string
	FromPool  int
	AskPlugin bool
	// Taken is what the model assumed was taken: Fixed, then the picks from Pool.
	Taken []string
}

// Accepts reports whether the kubelet can end up giving exactly ids: all of Fixed and FromPool
// distinct IDs of Pool. With FromPool > 0 and !AskPlugin it can, but only by chance.
func (a *Allocation) Accepts(ids []string) bool {
	if len(ids) != len(a.Fixed)+a.FromPool {
		return false
	}
	fixed, pooled := 0, 0
	for i, id := range ids {
		for _, prev := range ids[:i] {
			if prev == id {
				return false
			}
		}
		switch {
		case contains(a.Fixed, id):
			fixed++
		case contains(a.Pool, id):
			pooled++
		default:
			return false
		}
	}
	return fixed == len(a.Fixed) && pooled == a.FromPool
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// podResource is the device resource of the pod's containers that name one: at pod scope the model
// considers one resource (see OneResource), that of the first such container ("" when none does).
func (r *Request) podResource() string {
	for i := range r.Containers {
		if c := &r.Containers[i]; c.Devices > 0 || c.ListsDevices {
			return c.Resource
		}
	}
	return ""
}

// OneResource reports whether every container that names a device resource names the same one.
// At pod scope the kubelet merges the hints of every resource of the pod, which Admit does not
// model for more than one: a caller refuses such pods on nodes with the pod scope.
func (r *Request) OneResource() bool {
	res := r.podResource()
	for i := range r.Containers {
		if c := &r.Containers[i]; (c.Devices > 0 || c.ListsDevices) && c.Resource != res {
			return false
		}
	}
	return true
}
