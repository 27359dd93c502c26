// Package scheduler is Cardinal's kube-scheduler HTTP extender: an informer-fed Cache of every GPU
// node's cards and what pods hold on them, the HTTP layer (gin) that answers kube-scheduler's
// filter, prioritize, bind and preempt calls (extender API v1, nodeCacheCapable), and Run, which wires them
// to a cluster. The placement decisions themselves are the pure functions of package core.
//
// # Cache
//
// NewCache(names, schedulerName) is fed UpsertNode/DeleteNode (Nodes with cardinal.io/gpu-inventory)
// and UpsertPod/DeletePod (pods with cardinal.io/gpu-assignment or cardinal.io/gpu-allocated). A
// pod holds its devices while it is bound and not Succeeded/Failed (terminating pods keep them);
// the allocation record wins over the assignment where they differ, and pods known only from
// the device plugin's PodResources records count with their request (or the whole card). Evaluate
// decides a pod on named nodes (cost grows with the names: one map lookup and one core.FitWith
// per node, nodes in the same state decided once); Reserve re-decides on one node under the write
// lock and holds the devices until the informer shows the pod bound or Release is called.
//
// The cache also gives the core each node's allocatable CPU and memory (Node.Status.Allocatable)
// less the effective requests (podHost: as kube-scheduler counts them, overhead included) of every
// bound, unfinished pod on it, GPU or not: a per-node sum kept on pod events. Filter then refuses
// nodes that cannot hold the pod's CPU or memory (core.ReasonHost), the task mix carries the pods'
// CPU and memory, and frag-aware weighs them; nodes are shared in Evaluate by their cards and, for
// policies other than binpack and spread, their CPU and memory too.
//
// A GPU container is in flight from Reserve until its allocation record appears (and while its pod
// is Pending). Reserve refuses (ErrInFlight) to put a container beside an in-flight container of
// the same device count that is not interchangeable with it (same request, each selector accepting
// the other's cards); Evaluate reports such nodes with core.ReasonInFlight when another node fits.
// The device plugin serves each MIG profile as a resource of its own, so containers of different
// resources (cards, instances of another profile) never wait for one another. MIG instances are
// held and freed by their MIG UUIDs exactly as cards by theirs.
//
// On nodes whose kubelet places exclusive CPUs per NUMA node (TopologyManager and the static CPU
// manager), the counts the kubelet model reads are the node's listed pods plus the predicted CPUs of
// pods bound or reserved there and not listed yet; where they cannot be known the node gets
// core.ReasonKubeletCPUs, a wait handled like ReasonInFlight (numacpus.go).
//
// # HTTP
//
// NewServer(cache, ServerOptions) and Server.Handler serve POST /filter, /prioritize, /bind,
// /preempt and GET /healthz, /readyz, /metrics. Bodies are read through one size-limited decoder; pods without
// GPU requests pass through untouched. Bind writes the assignment, then posts the Binding; on a
// failure it records a GPUBindFailed event on the pod and frees the reservation only by proof that
// no Binding of it can still land (reservations_freed_by_proof.go).
//
// With ServerOptions.FilterShortlist > 0 filter answers only the best-ranked fitting nodes for pods
// whose in-tree kube-scheduler scores cannot differ between nodes (shortlist.go), so kube-scheduler
// skips its scoring and prioritize when one node is left.
//
// Preempt chooses, for each candidate node of kube-scheduler's preemption, the fewest lower-priority
// pods whose cards make the pod fit, and the cache keeps a nominated pod's cards from pods of lower
// priority (preempt.go).
//
// Run(ctx, Config) starts the informers, the event broadcaster and the server until ctx is done.
package scheduler
