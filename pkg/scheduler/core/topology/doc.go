// Package topology predicts what a node's kubelet does with a pod when its TopologyManager runs a
// policy other than none: which NUMA node it picks for each container (or for the pod), whether it
// admits the pod at all, and which device IDs of Cardinal's resource it then hands out. The extender
// uses it to refuse nodes whose kubelet would fail the pod (TopologyAffinityError) and to assign
// cards the kubelet will accept (see DESIGN.md, "How Allocate knows the pod").
//
// It is a model of kubelet v1.34, written from these files of k8s.io/kubernetes (not copied):
//
//   - pkg/kubelet/cm/topologymanager: policy.go (mergePermutation, HintMerger.compare,
//     maxOfMinAffinityCounts), policy_best_effort.go, policy_restricted.go,
//     policy_single_numa_node.go, policy_options.go, numa_info.go (Narrowest, Closest),
//     scope_container.go, scope_pod.go, topology_manager.go, bitmask/bitmask.go
//     (IterateBitMasks, IsNarrowerThan).
//   - pkg/kubelet/cm/devicemanager: topology_hints.go (GetTopologyHints, GetPodTopologyHints,
//     generateDeviceTopologyHints), manager.go (Allocate, devicesToAllocate, filterByAffinity).
//   - pkg/kubelet/cm/cpumanager/policy_static.go (GetTopologyHints, GetPodTopologyHints,
//     generateCPUTopologyHints, guaranteedCPUs, podGuaranteedCPUs, allocateCPUs,
//     updateCPUsToReuse).
//   - pkg/kubelet/cm/container_manager_linux.go: the hint providers' order (devices, CPUs, memory).
//   - k8s.io/component-helpers/resource/helpers.go: AggregateContainerLimits (pod-scope requests).
//
// Inputs are plain structs (Node, []Device, Request), the output a Result or a typed *Refusal; no
// I/O, no Kubernetes types. Admit with PolicyNone returns at once without allocating.
//
// Modelled: the four policies, both scopes, the options prefer-closest-numa-nodes and
// max-allowable-numa-nodes, the device manager's hints and allocation per device-plugin resource
// (Cardinal's GPU resource, and one MIG resource per profile: Device.Resource, Container.Resource;
// a container whose limits name the GPU resource with 0 gets hints too, Container.ListsDevices),
// the static CPU manager's hints and NUMA placement of exclusive CPUs, and the hand-on of init
// containers' devices and CPUs to later containers (sidecars keep theirs).
//
// Not modelled (documented limits): at pod scope, a pod whose containers take devices of more than
// one resource (Request.OneResource: the kubelet merges one hint list per resource); other
// device-plugin resources and DRA claims of the same pod (they add hint providers), the Static memory manager (assumed None: it then gives no hints), CPU
// manager options (full-pcpus-only, align-by-socket, distribute-cpus-across-numa), pod-level
// resources, and the exact CPUs takeByTopology picks inside a multi-NUMA affinity (the model
// takes them from the affinity's NUMA nodes with the fewest CPUs left first; only the per-NUMA counts
// matter here).
package topology
