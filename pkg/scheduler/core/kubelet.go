package core

import (
	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core/topology"
)

// Placement on a node whose kubelet runs a TopologyManager policy other than none (see DESIGN.md,
// "How Allocate knows the pod"). The kubelet picks each container's NUMA node before it asks the
// device plugin, and asks only among that NUMA node's free devices, or not at all when it has
// exactly as many as needed. So Fit runs the kubelet model (package topology) over the node and
// the pod, and places each container inside what the model says the kubelet will hand it:
//
//   - devices the kubelet takes anyway (Allocation.Fixed: handed on by init containers, or every
//     free device of the NUMA node when it has no more than needed) must each suit the container
//     (selector, room, a card it does not have yet); otherwise the node is a misfit
//     (ReasonKubeletChoice);
//   - the rest are chosen by the card strategy among the devices the kubelet offers the plugin
//     (Allocation.Pool), with the selector and numa-bind applied; too few that suit: a misfit
//     (ReasonKubeletChoice);
//   - devices handed on by init containers follow reuse's rule (any of them may be taken);
//   - a pod the kubelet would refuse (TopologyAffinityError, too few devices or CPUs) is refused
//     with the model's numbers (ReasonKubeletRefuses).
//
// Every container's devices are then checked with Allocation.Accepts. The model runs once per
// node and pod; nodes whose kubelet runs the policy none never reach this file.

// fitKubelet is FitWith on a node with a kubelet model (f.node.kubelet), after the selector pass.
func (f *fit) fitKubelet() (*Plan, *Reason) {
	p, kn := f.pod, f.node.kubelet
	for ci := range p.Request.Containers {
		c := &p.Request.Containers[ci]
		if match, healthy, unhealthy := f.counts(c); healthy < c.Count {
			return nil, f.reason(c, f.countReason(c, match, healthy, unhealthy))
		}
	}
	f.start(-1)
	f.kreason = nil
	f.kdevs = append(f.kdevs[:0], kn.devs...)
	for d := range f.kdevs {
		card := &f.node.Cards[kn.card[d]]
		k := card.slotIndex(kn.slot[d])
		f.kdevs[d].Held = k >= 0 && card.refs[k] > 0
	}
	req := p.kubelet
	req.Pick = f.kubeletPick
	res, refusal := topology.Admit(f.node.modelNode(), f.kdevs, &req)
	f.allow = nil
	if f.kreason != nil {
		return nil, f.kreason
	}
	if refusal != nil {
		return nil, &Reason{Kind: ReasonKubeletRefuses, Kubelet: refusal}
	}
	if len(f.plan.Containers) != len(p.Request.Containers) {
		return nil, &Reason{Kind: ReasonKubeletChoice, Policy: string(kn.node.Policy), Detail: "the kubelet model placed no cards"}
	}
	for mi, gi := range p.kubeletGPU {
		if gi < 0 {
			continue
		}
		f.kids = f.kids[:0]
		for _, di := range f.plan.Containers[gi].Devices {
			d := &f.plan.Devices[di]
			f.kids = append(f.kids, f.node.Cards[d.Card].DeviceID(d.Slot))
		}
		if !res.Containers[mi].Devices.Accepts(f.kids) {
			c := &p.Request.Containers[gi]
			return nil, f.reason(c, &Reason{Kind: ReasonKubeletChoice, Policy: string(kn.node.Policy), Detail: "the kubelet model took other cards"})
		}
	}
	f.plan.CPUs = res.HeldCPUs
	return f.plan, nil
}

// kubeletPick is the model's Request.Pick: it places GPU container kubeletGPU[mi] on the devices
// the kubelet takes anyway (fixed) and n of pool, which it returns. The first container that
// cannot be placed sets f.kreason; later calls then let the model take its defaults.
func (f *fit) kubeletPick(mi int, fixed, pool []string, n int) []string {
	gi := f.pod.kubeletGPU[mi]
	if f.kreason != nil || gi < 0 {
		return nil
	}
	c := &f.pod.Request.Containers[gi]
	kn := f.node.kubelet
	fail := func(r *Reason) []string {
		f.kreason = f.reason(c, r)
		return nil
	}
	// Devices handed on by init containers first: the kubelet takes them before anything else.
	handed := f.handedOn(c)
	at := len(f.ids)
	mine, r := f.reuse(c, f.ids[at:at:at+c.Count])
	if r != nil {
		return fail(r)
	}
	reused := len(mine)
	diverged := func() []string {
		return fail(&Reason{Kind: ReasonKubeletChoice, Policy: string(kn.node.Policy), Detail: "the kubelet model took other cards"})
	}
	if handed > c.Count && (len(fixed) > 0 || n != c.Count) {
		return diverged()
	}
	// Then the devices it takes outright.
	for _, id := range fixed {
		d, ok := kn.index[id]
		if !ok {
			return diverged()
		}
		i, slot := kn.card[d], kn.slot[d]
		if f.inPlan(i, slot) {
			continue // handed on: placed by reuse
		}
		if len(mine) == c.Count {
			return diverged()
		}
		var problem CardProblem
		switch {
		case !f.ok[i]:
			problem = CardNoMatch
		case f.usedBy(mine, i):
			problem = CardTwice
		case !f.fits(c, i):
			problem = CardNoRoom
		}
		if problem != 0 {
			card := &f.node.Cards[i]
			return fail(&Reason{Kind: ReasonKubeletChoice, Policy: string(kn.node.Policy), UUID: card.UUID, NUMA: card.NUMA,
				Problem: problem, Selector: f.pod.rules, Need: c.Count, Shared: !c.Exclusive(), MemMiB: c.MemoryMiB,
				MemPercent: c.MemoryPercent, Cores: c.Cores})
		}
		mine = append(mine, f.add(c, i, slot))
	}
	if handed <= c.Count && len(mine)+n != c.Count {
		return diverged()
	}
	f.kids = f.kids[:0]
	switch {
	case n == 0:
	case handed > c.Count:
		// The pool is the init containers' devices (reuse chose n of them above).
		for _, di := range mine[:reused] {
			d := &f.plan.Devices[di]
			f.kids = append(f.kids, f.node.Cards[d.Card].DeviceID(d.Slot))
		}
	default:
		f.allow = resize(f.allow, len(f.node.Cards))
		var numa topology.Mask
		offered := 0
		for _, id := range pool {
			if d, ok := kn.index[id]; ok && !f.allow[kn.card[d]] {
				f.allow[kn.card[d]] = true
				numa |= topology.MaskOf(f.node.Cards[kn.card[d]].NUMA)
				offered++
			}
		}
		from := len(mine)
		_, healthy, _ := f.counts(c)
		mine, r = f.pickNew(c, mine, healthy)
		f.allow = nil
		if r != nil {
			if r.Kind == ReasonNoCapacity {
				r = &Reason{Kind: ReasonKubeletChoice, Policy: string(kn.node.Policy), NUMAs: numa, Need: n, Have: r.Have - from, Of: offered,
					Selector: f.pod.rules, Shared: !c.Exclusive(), MemMiB: c.MemoryMiB, MemPercent: c.MemoryPercent, Cores: c.Cores}
			}
			return fail(r)
		}
		for _, di := range mine[from:] {
			d := &f.plan.Devices[di]
			f.kids = append(f.kids, f.node.Cards[d.Card].DeviceID(d.Slot))
		}
	}
	if f.pod.Selector.NUMABind && c.Count > 1 {
		if r := f.oneNUMA(c, mine); r != nil {
			return fail(r)
		}
	}
	if r := f.checkNVLink(c, mine); r != nil {
		return fail(r)
	}
	f.placed(c, mine, reused)
	return f.kids
}

// inPlan reports whether this pod's plan already holds card i's device ID slot.
func (f *fit) inPlan(i, slot int) bool {
	for _, d := range f.plan.Devices {
		if d.Card == i && d.Slot == slot {
			return true
		}
	}
	return false
}

// oneNUMA checks numa-bind on a container's devices: all on one NUMA node.
func (f *fit) oneNUMA(c *annotations.ContainerRequest, mine []int) *Reason {
	counts := map[int]int{}
	most := 0
	for _, di := range mine {
		u := f.node.Cards[f.plan.Devices[di].Card].NUMA
		counts[u]++
		most = max(most, counts[u])
	}
	if len(counts) <= 1 {
		return nil
	}
	return &Reason{Kind: ReasonNUMA, Need: c.Count, Have: most, Policy: string(f.node.kubelet.node.Policy)}
}

// handedOn counts the devices init containers hand on that container c can reuse: those of its
// resource (the kubelet hands devices on per resource).
func (f *fit) handedOn(c *annotations.ContainerRequest) int {
	if f.node.MIG == 0 {
		return len(f.pool)
	}
	n := 0
	for _, di := range f.pool {
		if f.node.Cards[f.plan.Devices[di].Card].Serves(c) {
			n++
		}
	}
	return n
}
