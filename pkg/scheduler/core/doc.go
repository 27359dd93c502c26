// Package core is Cardinal's pure placement core: given a node's cards and what is held on them,
// and a pod's GPU request and selector, it decides whether the pod fits and on which cards, or says
// why not; and it scores nodes. It does no I/O and keeps no global state, so the extender, a trace
// replay and benchmarks all run the same code.
//
// # State
//
//   - NewNodeState(name, annotations.Inventory) *NodeState builds a node with nothing held.
//   - NodeState.Hold / Unhold(Holding) add and remove what records say is held (HoldingFromID
//     parses a device ID); Apply / Release(*Plan) do the same for a plan decided on that node;
//     Holdings(*Plan) converts a plan to holdings; Clone copies; Utilization is the mean card use.
//   - NodeState.Host (HostState: allocatable and used CPU in millicores, memory in MiB) is optional:
//     SetHost(cpu, mem) makes a resource known (0 leaves it unknown, and an unknown resource is
//     ignored exactly as before the core knew any); HoldHost / UnholdHost(HostRequest) add and remove
//     what pods hold; Apply / Release account Plan.Host.
//   - Card embeds annotations.GPU and Usage (MemMiB, Cores, Held device IDs, Whole holders) with
//     FreeMemMiB, FreeCores, FreeSlots, Slots, Utilization(Usage) and DeviceID(slot).
//
// # Deciding
//
//   - New(Options{NodePolicy, GPUPolicy}) (*Decider, error): default policies; an unknown policy
//     wraps ErrUnknownPolicy, a known one without a strategy wraps ErrPolicyNotImplemented.
//     binpack, spread and frag-aware (fragaware.go) are implemented.
//   - Decider.Prepare(annotations.PodRequest, annotations.Selector) (*Pod, error) resolves the
//     pod's policies (its annotations override the defaults) once per pod. PrepareHost does the same
//     for a pod with a CPU and memory request (Pod.Host, a HostRequest; zero asks nothing).
//   - Pod.Fit(*NodeState, *TaskMix) (*Plan, *Reason): the cards of every GPU container, or a typed
//     Reason (Reason.String for people, Reason.Unresolvable when only other cards could help).
//     ReasonHost: the node's known CPU or memory cannot hold Pod.Host (checked before the cards).
//     A CPU-only pod (a request without containers, Host set: one routed to Cardinal) fits on
//     CPU and memory alone and its plan takes no card; Score ranks it by the node policy: binpack
//     and spread by the cards' use as it stands (binpack the fullest, a node without cards first;
//     spread the emptiest), frag-aware by what its CPU and memory strand of the cards the mix
//     could use plus half a card per node it leaves free (fragaware.go: fragAwareNode,
//     shortfall, fragHostPack, hostOnlyTie). A shared GPU pod's frag-aware score also counts the
//     CPU and memory the rest of the card it splits will need (shortfall).
//   - Pod.FitWith / Pod.ScoreWith take a *Scratch (zero value ready, one per goroutine) whose
//     buffers they reuse: no allocation per node; the plan is valid until the scratch's next use.
//   - Pod.Score(*NodeState, *Plan, *TaskMix) float64: 0..MaxScore by the node policy.
//     ExtenderScore rounds it for the extender API; Candidate.Better breaks ties by node name.
//   - Plan.Assignment(*NodeState) annotations.Assignment renders the record the extender writes:
//     the UUID for cards that are not shared, `<UUID>::<k>` (lowest free k) for shared ones, the
//     MIG UUID with Parent and Profile for a MIG instance.
//
// # Rules
//
// A card qualifies when it is healthy and passes every selector rule. A whole-card request (no
// memory or cores asked, or gpucores 100) needs cards with nothing held; a shared request needs a
// free device ID and the memory and cores it asks for, on a card nobody holds whole. Each container
// gets distinct cards; all GPU containers of a pod are placed or none. App containers reuse the
// devices of earlier non-sidecar init containers first, as the kubelet's device manager does. A
// container of several cards goes on one NUMA node when one has enough (hard with numa-bind). Cards
// are ranked by the card policy, ties to the lower index; NUMA nodes by the sum of their best cards'
// scores, then by size (binpack: the tighter), then index.
//
// Init containers: when an init container hands on more cards than a later container needs, the
// kubelet takes any of them (its set order is random), so every one must hold that container and
// each reserves the larger of both requests; the plan names the strategy's pick. A numa-bind pod
// whose init containers hand cards on is tried again with every container preferring one NUMA node
// (ascending) when placing them one after the other fails on NUMA.
//
// # MIG instances
//
// NewNodeState lists each MIG instance of a card in MIG mode (annotations.GPU.MIG, mode enabled)
// as a Card of its own after the inventory's cards: UUID its MIG UUID, Model, Index and NUMA its
// parent's, MemoryMiB and Healthy its own, Shares 1; Card.Parent, Profile and ProfileKey say where
// it is and what it is. The parent stays in Cards (unhealthy, Card.InMIGMode) and serves nothing. A
// container that asks for MIG instances (annotations.ContainerRequest.MIG) gets only instances whose
// ProfileKey is its MIGProfile, each held whole; any other container only cards not in MIG mode
// (Card.Serves). Selectors read an instance through its parent (the parent's model; its own UUID or
// the parent's, annotations.Selector.CheckDevice); numa-bind through the parent's NUMA node; a
// holding on the parent itself (a pod that had the card whole before MIG mode) keeps its instances
// out. Reasons of a MIG container name the profile and the node's free instances (Reason.Profile,
// Reason.Free, e.g. "no free 3g.40gb instance (node has 2x 1g.10gb free on GPU-…)"); whole-card
// reasons count cards in MIG mode apart (Reason.InMIG). Binpack ranks an instance on a parent with
// instances held first, then by how full the parent is after it (CardInput.ParentBefore and
// ParentAfter, by instance memory); spread the opposite; frag-aware leaves instances out of its
// measure and ranks them as binpack does. Node utilization counts a parent as one card, each
// instance its share of it. On a node whose kubelet runs a TopologyManager policy other than none,
// the kubelet model sees each profile as a resource of its own (topology.Device.Resource), so a MIG
// container's NUMA node follows its profile's free instances; at pod scope a pod taking devices of
// more than one resource is refused (ReasonKubeletMIG), the kubelet's merge across resources not
// being modelled.
//
// # Kubelet topology
//
// When the node's inventory reports a kubelet TopologyManager policy other than none
// (NodeState.Kubelet, annotations.KubeletTopology), Fit runs the kubelet model (package topology)
// on the pod (PodRequest.Guaranteed and CPUs, set by annotations.PodRequest.ReadCPUs, add the
// exclusive CPUs) and places each container only on the devices the kubelet will hand it, by the
// card strategy and with the selector and numa-bind applied (kubelet.go). A pod the kubelet would
// refuse gets ReasonKubeletRefuses (Reason.Kubelet, the model's numbers); a container the kubelet's
// choice cannot serve gets ReasonKubeletChoice. Nodes with policy none, or no Kubelet, are decided
// as before and never run the model. NodeState.SameKubelet and AppendKubeletKey let a cache tell
// nodes of different kubelet topologies apart. The model reads the inventory's exclusive CPUs per
// NUMA node unless the cache set the kubelet's current ones (NodeState.SetExclusiveCPUs); a plan
// carries the CPUs the model predicts the pod takes (Plan.CPUs, the assignment's cpus).
//
// # Links
//
// When the inventory publishes links between cards (annotations.Inventory.Links: NVLink, NVSwitch,
// PCIe common ancestor), they choose among the cards every other rule allows (links.go): a
// container of two cards or more gets the best-linked set (ties by the card strategy), a
// single-card or shared container the card whose use breaks the fewest NVLink pairs, and Score
// blends in how well a plan's multi-card containers are linked. Selector.Link (cardinal.io/gpu-link:
// nvlink) makes all-NVLink sets a hard rule (ReasonNVLink). NodeState.HasLinks and AppendLinksKey
// let a cache tell nodes of different links apart.
//
// # Strategies
//
// Node strategies are NodeScoreFunc(*NodeInput) (node before, plan, node after card by card via
// NodeInput.After, TaskMix); card strategies are CardStrategy{Score(*CardInput), Tight} (card
// usage before and after one device, the request, TaskMix). Both are registered by policy name in
// strategy.go. TaskMix (TaskClass: cards, whole, memory, cores, models, host CPU and memory, weight)
// is the distribution of requests seen, for a fragmentation-aware policy; TaskMix.AddPodHost adds a
// pod with its CPU and memory, rounded to HostCPUBucket / HostMemBucket. NodeInput sees the node's
// Host and Plan.Host; CardInput.Host is the pod's request.
package core
