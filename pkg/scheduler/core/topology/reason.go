package topology

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Reason classifies why the kubelet would fail the pod at admission.
type Reason string

const (
	// ReasonTopologyAffinity: the policy (restricted or single-numa-node) finds no preferred
	// hint; the kubelet fails the pod with TopologyAffinityError.
	ReasonTopologyAffinity Reason = "TopologyAffinityError"
	// ReasonDevicesUnavailable: too few free healthy devices for a container
	// (devicesToAllocate: "requested number of devices unavailable").
	ReasonDevicesUnavailable Reason = "DevicesUnavailable"
	// ReasonCPUsUnavailable: too few CPUs left for a container's exclusive CPUs (static policy).
	ReasonCPUsUnavailable Reason = "CPUsUnavailable"
	// ReasonInvalidNode: the node's facts are inconsistent (Detail); its kubelet would not run a
	// topology policy on them (e.g. more NUMA nodes than max-allowable-numa-nodes).
	ReasonInvalidNode Reason = "InvalidNode"
)

// Refusal says why the kubelet would refuse the pod, with the numbers behind it.
type Refusal struct {
	Reason Reason
	Policy Policy
	Scope  Scope
	// Container is the container being admitted; empty at pod scope's affinity step.
	Container string
	// Devices and CPUs are what the container (or, at pod scope, the pod) needs: cards (device
	// IDs) and exclusive CPUs.
	Devices, CPUs int
	// DeviceNUMANodes and CPUNUMANodes are the fewest NUMA nodes whose devices (CPUs) could hold
	// that many: a hint of that width is preferred. 0 when not asked for.
	DeviceNUMANodes, CPUNUMANodes int
	// Best is the merged hint the policy rejected (ReasonTopologyAffinity).
	Best Hint
	// NUMA is what each NUMA node had free when the kubelet decided, in ascending ID order.
	NUMA []NUMAFree
	// NoNUMADevices counts free devices without a NUMA node.
	NoNUMADevices int
	// Detail explains ReasonInvalidNode.
	Detail string
	// ZeroOn, for a container whose limits name the card resource with 0, is the NUMA nodes of the
	// cards init containers hand on: the kubelet's device hints for it must hold them.
	ZeroOn Mask
}

// NUMAFree is what one NUMA node has free for the container being admitted: devices (free or
// handed on by init containers) and CPUs for exclusive use.
type NUMAFree struct {
	ID, Devices, CPUs int
}

func (s *sim) refuse(reason Reason, container string, devices, cpus, devMin, cpuMin int, best Hint) *Refusal {
	r := &Refusal{Reason: reason, Policy: s.n.Policy, Scope: s.n.Scope, Container: container,
		Devices: devices, CPUs: cpus, DeviceNUMANodes: devMin, CPUNUMANodes: cpuMin, Best: best}
	if r.Scope == "" {
		r.Scope = ScopeContainer
	}
	for _, id := range s.def.IDs() {
		p := s.pos[id]
		f := NUMAFree{ID: id, CPUs: s.freeCPUs[p] + s.reuseCPUs[p]}
		for i := range s.devs {
			if s.devs[i].NUMA == id && (s.handedOn(i) || s.available(i)) {
				f.Devices++
			}
		}
		r.NUMA = append(r.NUMA, f)
	}
	for i := range s.devs {
		if !s.def.Has(s.devs[i].NUMA) && (s.handedOn(i) || s.available(i)) {
			r.NoNUMADevices++
		}
	}
	return r
}

// Error renders the refusal for people, e.g. `the kubelet's single-numa-node policy needs 2 cards
// and 6 CPUs on one NUMA node; NUMA 0 has 2 free cards and 2 free CPUs, NUMA 1 has 1 free card and
// 10 free CPUs`.
func (r *Refusal) Error() string {
	var b strings.Builder
	if r.Container != "" {
		fmt.Fprintf(&b, "container %q: ", r.Container)
	}
	switch r.Reason {
	case ReasonTopologyAffinity:
		who := "needs"
		if r.Scope == ScopePod {
			who = "needs the pod's"
		}
		fmt.Fprintf(&b, "the kubelet's %s policy %s %s", r.Policy, who, r.what())
		if r.Policy == PolicySingleNUMANode {
			b.WriteString(" on one NUMA node")
		} else {
			b.WriteString(" on " + r.fewest())
		}
		r.writeNUMA(&b)
		if r.ZeroOn != 0 {
			fmt.Fprintf(&b, "; it lists the card resource with 0, so the kubelet also holds it to NUMA %s, where init containers' cards are handed on", r.ZeroOn)
		}
	case ReasonDevicesUnavailable:
		free := r.NoNUMADevices
		for _, f := range r.NUMA {
			free += f.Devices
		}
		fmt.Fprintf(&b, "the kubelet has %s, %d needed", plural(free, "free card"), r.Devices)
	case ReasonCPUsUnavailable:
		free := 0
		for _, f := range r.NUMA {
			free += f.CPUs
		}
		fmt.Fprintf(&b, "the kubelet's static CPU manager has %s for exclusive use, %d needed", plural(free, "free CPU"), r.CPUs)
	default:
		fmt.Fprintf(&b, "the kubelet's %s policy cannot run on this node: %s", r.Policy, r.Detail)
	}
	return b.String()
}

func (r *Refusal) what() string {
	switch {
	case r.Devices > 0 && r.CPUs > 0:
		return plural(r.Devices, "card") + " and " + plural(r.CPUs, "CPU")
	case r.CPUs > 0:
		return plural(r.CPUs, "CPU")
	}
	return plural(r.Devices, "card")
}

// fewest says on how many NUMA nodes restricted wants them: each provider's narrowest width, and
// the same NUMA nodes for both.
func (r *Refusal) fewest() string {
	switch {
	case r.Devices > 0 && r.CPUs > 0 && r.DeviceNUMANodes == r.CPUNUMANodes:
		return fmt.Sprintf("the same %s (the fewest that can hold each)", plural(r.DeviceNUMANodes, "NUMA node"))
	case r.Devices > 0 && r.CPUs > 0:
		return fmt.Sprintf("the same NUMA nodes, %d for the cards and %d for the CPUs (the fewest that can hold each)",
			r.DeviceNUMANodes, r.CPUNUMANodes)
	case r.CPUs > 0:
		return plural(r.CPUNUMANodes, "NUMA node") + " (the fewest that can hold them)"
	}
	return plural(r.DeviceNUMANodes, "NUMA node") + " (the fewest that can hold them)"
}

func (r *Refusal) writeNUMA(b *strings.Builder) {
	for i, f := range r.NUMA {
		if i == 0 {
			b.WriteString("; ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(b, "NUMA %d has ", f.ID)
		switch {
		case r.Devices > 0 && r.CPUs > 0:
			b.WriteString(plural(f.Devices, "free card") + " and " + plural(f.CPUs, "free CPU"))
		case r.CPUs > 0:
			b.WriteString(plural(f.CPUs, "free CPU"))
		default:
			b.WriteString(plural(f.Devices, "free card"))
		}
	}
	if r.Devices > 0 && r.NoNUMADevices > 0 {
		fmt.Fprintf(b, ", %s without a NUMA node", plural(r.NoNUMADevices, "free card"))
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// Validate checks the node's facts: a known policy, scope and CPU policy, NUMA IDs in 0-63 and
// distinct, CPU counts that add up, and no more NUMA nodes than max-allowable-numa-nodes.
func (n *Node) Validate() error {
	switch n.Policy {
	case "", PolicyNone, PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode:
	default:
		return fmt.Errorf("unknown topology manager policy %q", n.Policy)
	}
	switch n.Scope {
	case "", ScopeContainer, ScopePod:
	default:
		return fmt.Errorf("unknown topology manager scope %q", n.Scope)
	}
	switch n.CPUPolicy {
	case "", CPUPolicyNone, CPUPolicyStatic:
	default:
		return fmt.Errorf("unknown CPU manager policy %q", n.CPUPolicy)
	}
	limit := n.MaxAllowableNUMANodes
	if limit == 0 {
		limit = DefaultMaxAllowableNUMANodes
	}
	if limit < DefaultMaxAllowableNUMANodes {
		return fmt.Errorf("max-allowable-numa-nodes %d is below %d", limit, DefaultMaxAllowableNUMANodes)
	}
	if n.Policy != "" && n.Policy != PolicyNone && len(n.NUMA) > limit {
		return fmt.Errorf("%d NUMA nodes, more than max-allowable-numa-nodes (%d)", len(n.NUMA), limit)
	}
	if n.Policy != "" && n.Policy != PolicyNone && len(n.NUMA) > MaxNUMANodes {
		return fmt.Errorf("%d NUMA nodes, more than the %d this model enumerates", len(n.NUMA), MaxNUMANodes)
	}
	if len(n.NUMA) == 0 && n.Policy != "" && n.Policy != PolicyNone {
		return errors.New("no NUMA nodes")
	}
	var seen Mask
	for i := range n.NUMA {
		u := &n.NUMA[i]
		switch {
		case u.ID < 0 || u.ID > 63:
			return fmt.Errorf("NUMA node ID %d is not in 0-63", u.ID)
		case seen.Has(u.ID):
			return fmt.Errorf("NUMA node %d appears twice", u.ID)
		case u.CPUs < 0 || u.ReservedCPUs < 0 || u.ExclusiveCPUs < 0:
			return fmt.Errorf("NUMA node %d: negative CPU count", u.ID)
		case u.ReservedCPUs+u.ExclusiveCPUs > u.CPUs:
			return fmt.Errorf("NUMA node %d: %d reserved and %d exclusive CPUs, more than its %d", u.ID, u.ReservedCPUs, u.ExclusiveCPUs, u.CPUs)
		}
		seen |= MaskOf(u.ID)
	}
	return nil
}
