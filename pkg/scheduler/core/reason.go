package core

import (
	"fmt"
	"strings"
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
	// UUID names a card (the unhealthy one).
	UUID string
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
}

// Unresolvable reports whether the node cannot host the pod whatever happens to other pods
// (kube-scheduler's FailedAndUnresolvableNodes): the node's cards, not their usage, are the cause.
func (r *Reason) Unresolvable() bool {
	switch r.Kind {
	case ReasonUnknownNode, ReasonNoInventory, ReasonBadInventory, ReasonNoMatch, ReasonTooFewCards:
		return true
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
	switch r.Kind {
	case ReasonUnknownNode:
		b.WriteString("node is not known to the GPU scheduler")
	case ReasonNoInventory:
		b.WriteString("node has no GPU inventory (cardinal.io/gpu-inventory is missing)")
	case ReasonBadInventory:
		fmt.Fprintf(&b, "node's GPU inventory is unreadable: %s", r.Detail)
	case ReasonNoMatch:
		if r.Selector == "" {
			b.WriteString("node has no GPUs")
		} else {
			fmt.Fprintf(&b, "no card matches %s (node has %s)", r.Selector, r.Models)
		}
	case ReasonUnhealthy:
		if r.UUID != "" {
			fmt.Fprintf(&b, "GPU %s is unhealthy", r.UUID)
		} else {
			fmt.Fprintf(&b, "needs %s%s, %d healthy (%d unhealthy)", cards(r.Need), matching, r.Have, r.Of-r.Have)
		}
	case ReasonTooFewCards:
		fmt.Fprintf(&b, "needs %s%s, node has %d (%s)", cards(r.Need), matching, r.Have, r.Models)
	case ReasonNoCapacity:
		if !r.Shared {
			fmt.Fprintf(&b, "needs %d free %s, %d of %d %s free", r.Need, plural(r.Need, "card", "cards"), r.Have, r.Of, plural(r.Have, "is", "are"))
		} else {
			fmt.Fprintf(&b, "needs %s with %s; %d of %d %s", cards(r.Need), r.shareNeed(), r.Have, r.Of, plural(r.Have, "has", "have"))
		}
	case ReasonNUMA:
		fmt.Fprintf(&b, "needs %s on one NUMA node, best has %d", cards(r.Need), r.Have)
	case ReasonReuse:
		b.WriteString("the init containers' cards, which the kubelet hands on, cannot hold it")
	case ReasonInFlight:
		fmt.Fprintf(&b, "waits until %s is allocated (in flight with %s, not interchangeable)", r.Detail, cards(r.Need))
	case ReasonHost:
		b.WriteString(r.hostText())
	case ReasonBindPending:
		fmt.Fprintf(&b, "an earlier binding to node %s may still commit; waiting for it to settle", r.Detail)
	default:
		fmt.Fprintf(&b, "reason %d", int(r.Kind))
	}
	return b.String()
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
