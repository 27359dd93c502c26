package core

import (
	"fmt"
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core/topology"
)

// ReasonKind classifies why a pod does not fit a node.
type ReasonKind int

const (
	// ReasonUnknownNode: the scheduler asked about a node the cache does not know.
	ReasonUnknownNode ReasonKind = iota + 1
	// ReasonNoInventory: the node has no cardinal.io/gpu-inventory annotation.
	ReasonNoInventory
	// ReasonBadInventory: the node's inventory cannot be read (Detail says why).
	ReasonBadInventory
	// ReasonNoMatch: no card of the node passes the pod's selectors.
	ReasonNoMatch
	// ReasonUnhealthy: enough cards match, but some are unhealthy and too few healthy ones remain.
	ReasonUnhealthy
	// ReasonTooFewCards: the node has fewer matching cards than one container asks for.
	ReasonTooFewCards
	// ReasonNoCapacity: enough cards match, but too few have room now (free card, memory, cores, slot).
	ReasonNoCapacity
	// ReasonNUMA: numa-bind asks for all cards of a container on one NUMA node and no NUMA node has enough.
	ReasonNUMA
	// ReasonReuse: a container would get the init containers' cards (the kubelet reuses them) and they
	// cannot hold it.
	ReasonReuse
	// ReasonInFlight: another container of the same device count that is not interchangeable with
	// this one is in flight on the node; this one waits until it is allocated (see DESIGN.md).
	ReasonInFlight
	// ReasonHost: the node's known CPU or memory (NodeState.Host) cannot hold the pod's request
	// (Pod.Host): HostNeed, HostFree and HostAlloc say how much.
	ReasonHost
	// ReasonBindPending: an earlier bind of the pod to another node (Detail) had an unknown outcome
	// and may still commit; the pod may go only there until that settles.
	ReasonBindPending
	// ReasonKubeletRefuses: the node's kubelet runs a TopologyManager policy under which it would
	// fail the pod at admission (TopologyAffinityError, or too few free devices or exclusive CPUs);
	// Kubelet carries the model's refusal with its numbers.
	ReasonKubeletRefuses
	// ReasonKubeletChoice: the node's kubelet would admit the pod, but the devices its
	// TopologyManager policy (Policy) lets a container have cannot serve it: a device it takes
	// outright (UUID, on NUMA node NUMA) fails Problem, or among those it offers the device plugin
	// (on NUMA nodes NUMAs) only Have of Of cards match the selector and have room, Need needed.
	ReasonKubeletChoice
	// ReasonSharingNotEnforced: a container shares cards, the node's sharing mode (Detail: none, or
	// one this version does not know) enforces no limits, and the extender requires enforced sharing.
	ReasonSharingNotEnforced
	// ReasonSharingNotReady: a container shares cards and the node's sharing mode (Detail: mps,
	// hami-core) cannot enforce limits now (its MPS daemon does not answer, its library is missing).
	ReasonSharingNotReady
	// ReasonOtherTenant: a container shares cards, the node's sharing mode is mps, and shared pods of
	// another namespace (Detail) use the node's one MPS daemon: one namespace at a time.
	ReasonOtherTenant
	// ReasonInternal: deciding the pod on this node panicked (Detail: the panic's value); the
	// extender logged it with its stack and failed this node only.
	ReasonInternal
	// ReasonKubeletCPUs: the pod takes exclusive CPUs and the node's kubelet counts them per NUMA
	// node, but the extender cannot know its counts now (Detail: the pod whose CPUs the kubelet has
	// not reported yet, or may be freeing); the pod waits, like ReasonInFlight, rather than guess
	// the NUMA node the kubelet picks.
	ReasonKubeletCPUs
	// ReasonKubeletMIG: a container takes MIG instances, the pod asks for devices of more than one
	// resource (cards, or instances of several profiles), and the node's kubelet runs a
	// TopologyManager policy (Policy) at pod scope. The kubelet then merges the hints of every
	// resource of the pod, which the kubelet model does not compute for more than one, so it
	// cannot predict which devices the kubelet hands over: such nodes are refused for the pod
	// rather than placed on devices the kubelet may not give.
	ReasonKubeletMIG
	// ReasonNVLink: the pod requires NVLink (cardinal.io/gpu-link: nvlink) and no set of the
	// container's Need cards the node can give it now is pairwise NVLink-connected. Detail says what
	// the node has (no published links, no NVLink, or its free cards' NVLink groups); Have is the
	// largest NVLink group of free cards, Of the largest of all the cards its selector accepts
	// (unresolvable when smaller than Need).
	ReasonNVLink
	// ReasonMPSSlot: a container shares cards on a node in sharing mode mps and reserves more
	// memory than one share slot holds (card memory ÷ shares) on every card of the node: the
	// node's MPS daemon gives each client one slot, so its device plugin refuses such a container
	// at Allocate (deviceplugin ReasonMPSSlot). Need is the MiB asked on the largest card, Have
	// the largest slot (MiB).
	ReasonMPSSlot
	// ReasonExclusiveCards: a container takes cards whole on a node whose MPS daemon runs the cards
	// in EXCLUSIVE_PROCESS (inventory sharing.exclusiveCards): only the MPS server may use them, and
	// the device plugin refuses whole-card containers there (deviceplugin ReasonExclusiveCards).
	ReasonExclusiveCards
	// ReasonCordoned: enough cards match the selector, but too few that are not cordoned (an
	// operator took them out of service: annotations.Cordon); UUID and Index name one, Detail its
	// reason, Have and Of count the cards left and those cordoned.
	ReasonCordoned
	// ReasonGroup: the pod belongs to a pod group (Kueue's pod-group keys) that cannot be placed
	// whole now, or whose plan holds another node for the pod; Detail says which and why. It is
	// made by the extender's cache, never by Fit.
	ReasonGroup
	// ReasonMIGPlacement: the dynamic MIG placements chosen for the pod's containers one by one
	// cannot all be created on their card together (Detail says which and why); never made for a
	// pod of one MIG container, whose placements are checked together.
	ReasonMIGPlacement
)

// CardProblem says why a card the kubelet hands a container outright cannot serve it.
type CardProblem int

const (
	// CardNoMatch: the card does not pass the pod's selector.
	CardNoMatch CardProblem = iota + 1
	// CardNoRoom: the card lacks the memory, compute or free slot the container asks for.
	CardNoRoom
	// CardTwice: the container already has a device of the card (a second share slot).
	CardTwice
)

// Reason says why a pod does not fit a node. String renders it for people (FailedNodes, events).
type Reason struct {
	Kind ReasonKind
	// Container names the container when the pod has several GPU containers.
	Container string
	// Need is the number of cards the container asks for; Have how many qualify.
	Need, Have int
	// Of is how many cards were considered for Have (healthy matching cards).
	Of int
	// Selector is the pod's card rules as a person writes them, e.g. "use-gputype=a100".
	Selector string
	// Models summarises the node's cards, e.g. "2x NVIDIA A40".
	Models string
	// UUID names a card (the unhealthy one, or a cordoned one); Index is its index (ReasonCordoned).
	UUID  string
	Index int
	// MemMiB, MemPercent and Cores are what a shared request needs on each card; Shared tells
	// whether the request is shared at all.
	Shared     bool
	MemMiB     int64
	MemPercent int
	Cores      int
	// Detail is free text for reasons that carry an underlying error or a pod name.
	Detail string
	// HostNeed is the pod's CPU and memory request, HostFree what the node has free and HostAlloc
	// its allocatable amounts (0: unknown) — ReasonHost only.
	HostNeed, HostFree, HostAlloc HostRequest
	// Reused is how many of the container's cards it reuses from init containers (ReasonNUMA):
	// they fix its NUMA node, NUMA, or lie on several (NUMA < 0).
	Reused int
	// NUMA is a NUMA node (ReasonNUMA with Reused, ReasonKubeletChoice with UUID).
	NUMA int
	// Policy is the kubelet's TopologyManager policy (ReasonKubeletChoice; ReasonNUMA on a node
	// whose kubelet chose the NUMA nodes).
	Policy string
	// NUMAs are the NUMA nodes the kubelet offers the device plugin cards on (ReasonKubeletChoice).
	NUMAs topology.Mask
	// Problem says what is wrong with the card UUID (ReasonKubeletChoice).
	Problem CardProblem
	// Kubelet is the kubelet model's refusal (ReasonKubeletRefuses).
	Kubelet *topology.Refusal
	// Profile is the MIG profile key a container asks instances of: the reason's text then counts
	// instances of it, not cards (with ReasonNoMatch, Of is the node's instances of the profile
	// whatever the selector, and Models the models of their parents). Free summarises the node's
	// free instances for ReasonNoMatch, ReasonTooFewCards, ReasonUnhealthy and ReasonNoCapacity,
	// e.g. "2x 1g.10gb free on GPU-…". Such reasons name the node's devices (NodeSpecific).
	Profile string
	Free    string
	// InMIG is how many of the cards the selector accepts are in MIG mode (whole-card requests:
	// ReasonNoMatch, ReasonTooFewCards): they serve only MIG instances.
	InMIG int
}

// NodeSpecific reports whether the reason names devices of its node (UUIDs), so that it cannot
// stand for another node in the same state.
func (r *Reason) NodeSpecific() bool { return r.UUID != "" || r.Profile != "" }

// Unresolvable reports whether the node cannot host the pod whatever happens to other pods
// (kube-scheduler's FailedAndUnresolvableNodes): the node's cards, not their usage, are the cause.
func (r *Reason) Unresolvable() bool {
	switch r.Kind {
	case ReasonUnknownNode, ReasonNoInventory, ReasonBadInventory, ReasonNoMatch, ReasonTooFewCards, ReasonSharingNotEnforced,
		ReasonKubeletMIG, ReasonMPSSlot, ReasonExclusiveCards:
		return true
	case ReasonKubeletRefuses:
		return r.Kubelet != nil && r.Kubelet.Reason == topology.ReasonInvalidNode
	case ReasonNVLink:
		return r.Of < r.Need
	case ReasonHost:
		// Only when the pod asks more than the node has at all.
		return (r.HostAlloc.CPUMilli > 0 && r.HostNeed.CPUMilli > r.HostAlloc.CPUMilli) ||
			(r.HostAlloc.MemMiB > 0 && r.HostNeed.MemMiB > r.HostAlloc.MemMiB)
	}
	return false
}

func (r *Reason) String() string {
	var b strings.Builder
	if r.Container != "" {
		fmt.Fprintf(&b, "container %q: ", r.Container)
	}
	matching := ""
	if r.Selector != "" {
		matching = " matching " + r.Selector
	}
	if r.Profile != "" {
		if text := r.migText(matching); text != "" {
			b.WriteString(text)
			return b.String()
		}
	}
	switch r.Kind {
	case ReasonUnknownNode:
		b.WriteString("node is not known to the GPU scheduler")
	case ReasonNoInventory:
		b.WriteString("node has no GPU inventory (cardinal.io/gpu-inventory is missing)")
	case ReasonBadInventory:
		fmt.Fprintf(&b, "node's GPU inventory is unreadable: %s", r.Detail)
	case ReasonNoMatch:
		switch {
		case r.InMIG > 0 && r.Selector == "":
			fmt.Fprintf(&b, "node has no GPU to use whole: its %s in MIG mode %s only MIG instances", cards(r.InMIG), plural(r.InMIG, "serves", "serve"))
		case r.InMIG > 0:
			fmt.Fprintf(&b, "no card matching %s can be used whole: %d in MIG mode %s only MIG instances (node has %s)",
				r.Selector, r.InMIG, plural(r.InMIG, "serves", "serve"), r.Models)
		case r.Selector == "":
			b.WriteString("node has no GPUs")
		default:
			fmt.Fprintf(&b, "no card matches %s (node has %s)", r.Selector, r.Models)
		}
	case ReasonCordoned:
		if r.Of == 1 && r.Have == 0 {
			fmt.Fprintf(&b, "card %s (index %d) is cordoned: %s", r.UUID, r.Index, r.Detail)
		} else {
			fmt.Fprintf(&b, "needs %s%s, %d not cordoned (%d cordoned; card %s (index %d): %s)", cards(r.Need), matching, r.Have, r.Of, r.UUID, r.Index, r.Detail)
		}
	case ReasonUnhealthy:
		if r.UUID != "" {
			fmt.Fprintf(&b, "GPU %s is unhealthy", r.UUID)
		} else {
			fmt.Fprintf(&b, "needs %s%s, %d healthy (%d unhealthy)", cards(r.Need), matching, r.Have, r.Of-r.Have)
		}
	case ReasonTooFewCards:
		fmt.Fprintf(&b, "needs %s%s, node has %d (%s)", cards(r.Need), matching, r.Have, r.Models)
		if r.InMIG > 0 {
			fmt.Fprintf(&b, "; %d more in MIG mode %s only MIG instances", r.InMIG, plural(r.InMIG, "serves", "serve"))
		}
	case ReasonNoCapacity:
		if !r.Shared {
			fmt.Fprintf(&b, "needs %d free %s, %d of %d %s free", r.Need, plural(r.Need, "card", "cards"), r.Have, r.Of, plural(r.Have, "is", "are"))
		} else {
			fmt.Fprintf(&b, "needs %s with %s; %d of %d %s", cards(r.Need), r.shareNeed(), r.Have, r.Of, plural(r.Have, "has", "have"))
		}
	case ReasonNUMA:
		b.WriteString(r.numaText())
	case ReasonReuse:
		b.WriteString("the init containers' cards, which the kubelet hands on, cannot hold it")
	case ReasonInFlight:
		fmt.Fprintf(&b, "waits until %s is allocated (in flight with %s, not interchangeable)", r.Detail, cards(r.Need))
	case ReasonKubeletCPUs:
		fmt.Fprintf(&b, "waits until the kubelet's exclusive CPUs per NUMA node are known: %s", r.Detail)
	case ReasonHost:
		b.WriteString(r.hostText())
	case ReasonBindPending:
		fmt.Fprintf(&b, "an earlier binding to node %s may still commit; waiting for it to settle", r.Detail)
	case ReasonGroup:
		b.WriteString(r.Detail)
	case ReasonMIGPlacement:
		b.WriteString("dynamic MIG: " + r.Detail)
	case ReasonKubeletRefuses:
		if r.Kubelet == nil {
			b.WriteString("the node's kubelet would refuse the pod")
		} else {
			b.WriteString(r.Kubelet.Error())
		}
	case ReasonKubeletChoice:
		b.WriteString(r.kubeletText())
	case ReasonKubeletMIG:
		fmt.Fprintf(&b, "takes MIG instances beside other devices in one pod, which the GPU scheduler does not place on nodes whose kubelet runs the TopologyManager policy %s at pod scope (its hints across resources are not modelled yet)", r.Policy)
	case ReasonNVLink:
		fmt.Fprintf(&b, "needs %d NVLink-connected %s; %s", r.Need, plural(r.Need, "card", "cards"), r.Detail)
	case ReasonSharingNotEnforced:
		fmt.Fprintf(&b, "shares a card, but the node's sharing mode is %s (limits not enforced) and enforced sharing is required", r.Detail)
	case ReasonSharingNotReady:
		fmt.Fprintf(&b, "shares a card, but the node's %s sharing cannot enforce limits now (not ready)", r.Detail)
	case ReasonExclusiveCards:
		b.WriteString("takes cards whole, but the node's MPS daemon runs its cards in EXCLUSIVE_PROCESS: only shared containers (MPS clients) can use them")
	case ReasonMPSSlot:
		fmt.Fprintf(&b, "shares a card and reserves %d MiB of it, more than one MPS slot of this mps node (at most %d MiB: card memory ÷ shares, "+
			"what its MPS daemon gives each client); reserve at most one slot per card, or whole cards", r.Need, r.Have)
	case ReasonOtherTenant:
		fmt.Fprintf(&b, "shares a card, but the node's MPS daemon serves shared pods of namespace %s (mps: one namespace at a time)", r.Detail)
	case ReasonInternal:
		fmt.Fprintf(&b, "the GPU scheduler failed deciding this node (internal error, logged): %s", r.Detail)
	default:
		fmt.Fprintf(&b, "reason %d", int(r.Kind))
	}
	return b.String()
}

// migText explains the reasons of a MIG container (Profile set), e.g. "no free 3g.40gb instance
// (node has 2x 1g.10gb free on GPU-…)"; "" for kinds that read the same as for cards.
func (r *Reason) migText(matching string) string {
	free := r.Free
	if free == "" {
		free = "no free MIG instance"
	}
	switch r.Kind {
	case ReasonNoMatch:
		if r.Of == 0 {
			return fmt.Sprintf("no %s instance (node has %s)", r.Profile, free)
		}
		return fmt.Sprintf("the node's %s on %s %s excluded by %s", r.instances(r.Of), r.Models, plural(r.Of, "is", "are"), r.Selector)
	case ReasonUnhealthy:
		if r.UUID != "" {
			return fmt.Sprintf("MIG instance %s (%s) is unhealthy", r.UUID, r.Profile)
		}
		return fmt.Sprintf("needs %s%s, %d healthy (%d unhealthy)", r.instances(r.Need), matching, r.Have, r.Of-r.Have)
	case ReasonTooFewCards:
		return fmt.Sprintf("needs %s%s, node has %d (%s)", r.instances(r.Need), matching, r.Have, free)
	case ReasonNoCapacity:
		if r.Need == 1 && r.Have == 0 {
			return fmt.Sprintf("no free %s instance (node has %s)", r.Profile, free)
		}
		return fmt.Sprintf("needs %d free %s, %d of %d %s free (node has %s)", r.Need, plural(r.Need, r.Profile+" instance", r.Profile+" instances"),
			r.Have, r.Of, plural(r.Have, "is", "are"), free)
	}
	return ""
}

// devices is "n card(s)", or for a MIG container (Profile set) "n <profile> instance(s)".
func (r *Reason) devices(n int) string {
	if r.Profile != "" {
		return r.instances(n)
	}
	return cards(n)
}

// instances is "n <profile> instance(s)".
func (r *Reason) instances(n int) string {
	return fmt.Sprintf("%d %s %s", n, r.Profile, plural(n, "instance", "instances"))
}

// numaText explains ReasonNUMA, e.g. "needs 3 cards on one NUMA node; the 1 card it reuses from
// its init containers is on NUMA 0, which has 2".
func (r *Reason) numaText() string {
	s := fmt.Sprintf("needs %s on one NUMA node", r.devices(r.Need))
	switch {
	case r.Policy != "":
		return s + fmt.Sprintf("; the kubelet's %s policy puts at most %d on one", r.Policy, r.Have)
	case r.Reused > 0 && r.NUMA < 0:
		return s + fmt.Sprintf("; the %s it reuses from its init containers are on different NUMA nodes", r.devices(r.Reused))
	case r.Reused > 0:
		return s + fmt.Sprintf("; the %s it reuses from its init containers %s on NUMA %d, which has %d",
			r.devices(r.Reused), plural(r.Reused, "is", "are"), r.NUMA, r.Have)
	}
	return s + fmt.Sprintf(", best has %d", r.Have)
}

// kubeletText explains ReasonKubeletChoice, e.g. "the kubelet's single-numa-node policy takes its 1
// card from NUMA 0, where 0 of 1 free cards match use-gpuuuid=GPU-1".
func (r *Reason) kubeletText() string {
	if r.UUID != "" {
		what := "card"
		if r.Profile != "" {
			what = "MIG instance"
		}
		s := fmt.Sprintf("the kubelet's %s policy hands it %s %s on NUMA %d outright", r.Policy, what, r.UUID, r.NUMA)
		switch r.Problem {
		case CardNoMatch:
			return s + ", which does not match " + r.Selector
		case CardTwice:
			return s + ", a second slot of a card it already has"
		}
		if r.Shared {
			return s + ", which has no room for " + r.shareNeed()
		}
		return s + ", which is not free"
	}
	if r.Detail != "" {
		return fmt.Sprintf("the kubelet's %s policy: %s", r.Policy, r.Detail)
	}
	var numa strings.Builder
	for i, id := range r.NUMAs.IDs() {
		if i > 0 {
			numa.WriteString(", ")
		}
		fmt.Fprintf(&numa, "%d", id)
	}
	where := "NUMA " + numa.String()
	if r.NUMAs.Count() == 0 {
		where = "cards without a NUMA node"
	}
	s := fmt.Sprintf("the kubelet's %s policy takes its %s from %s, where %d of %d free %s", r.Policy,
		r.devices(r.Need), where, r.Have, r.Of, plural(r.Of, "card", "cards"))
	if r.Profile != "" {
		s = fmt.Sprintf("the kubelet's %s policy takes its %s from %s, where %d of %d free ones", r.Policy,
			r.devices(r.Need), where, r.Have, r.Of)
	}
	switch {
	case r.Shared && r.Selector != "":
		return s + " match " + r.Selector + " and have " + r.shareNeed()
	case r.Shared:
		return s + " have " + r.shareNeed()
	case r.Selector != "":
		return s + " match " + r.Selector
	}
	return s + " can take it"
}

// hostText names the host resources that do not fit, e.g. "needs 14000m CPU, node has 8000m free".
func (r *Reason) hostText() string {
	var parts []string
	if r.HostAlloc.CPUMilli > 0 && r.HostNeed.CPUMilli > r.HostFree.CPUMilli {
		parts = append(parts, fmt.Sprintf("needs %dm CPU, node has %dm free", r.HostNeed.CPUMilli, max(r.HostFree.CPUMilli, 0)))
	}
	if r.HostAlloc.MemMiB > 0 && r.HostNeed.MemMiB > r.HostFree.MemMiB {
		parts = append(parts, fmt.Sprintf("needs %d MiB memory, node has %d MiB free", r.HostNeed.MemMiB, max(r.HostFree.MemMiB, 0)))
	}
	if len(parts) == 0 {
		return "node lacks CPU or memory"
	}
	return strings.Join(parts, "; ")
}

func (r *Reason) shareNeed() string {
	var parts []string
	// No '%' here: kube-scheduler passes extender reasons through a format string.
	switch {
	case r.MemMiB > 0:
		parts = append(parts, fmt.Sprintf("%d MiB", r.MemMiB))
	case r.MemPercent > 0:
		parts = append(parts, fmt.Sprintf("gpumem-percentage %d", r.MemPercent))
	}
	if r.Cores > 0 {
		parts = append(parts, fmt.Sprintf("gpucores %d", r.Cores))
	}
	parts = append(parts, "a free slot")
	if len(parts) == 1 {
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

func cards(n int) string { return fmt.Sprintf("%d %s", n, plural(n, "card", "cards")) }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
