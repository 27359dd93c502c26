package topology

import (
	"math/bits"
	"slices"
)

// Admit predicts the kubelet's TopologyManager admission of r on node n whose device plugin
// advertises devs. It returns the NUMA affinity and devices of each container, or why the kubelet
// fails the pod. With PolicyNone (or no policy) it returns Result{Unconstrained: true} at once.
// n should pass Validate; devs are all devices of Cardinal's resource, healthy or not.
func Admit(n *Node, devs []Device, r *Request) (Result, *Refusal) {
	if n.Policy == PolicyNone || n.Policy == "" {
		return Result{Unconstrained: true}, nil
	}
	if err := n.Validate(); err != nil {
		return Result{}, &Refusal{Reason: ReasonInvalidNode, Policy: n.Policy, Detail: err.Error()}
	}
	s := newSim(n, devs, r)
	res := Result{Containers: make([]ContainerResult, len(r.Containers))}
	if n.Scope == ScopePod {
		s.use(r.podResource())
		devNeed, cpuNeed := s.podRequests()
		devHints, devMin := s.deviceHints(devNeed, s.podListsDevices(), false)
		cpuHints, cpuMin := s.cpuHints(cpuNeed)
		best, ok := s.merge(devHints, cpuHints)
		if !ok {
			return Result{}, s.refuse(ReasonTopologyAffinity, "", devNeed, cpuNeed, devMin, cpuMin, best)
		}
		res.Pod = best
		for i := range r.Containers {
			if ref := s.allocate(i, best, &res.Containers[i]); ref != nil {
				return Result{}, ref
			}
		}
		res.HeldCPUs = s.heldCPUs()
		return res, nil
	}
	for i := range r.Containers {
		c := &r.Containers[i]
		s.use(c.Resource)
		cpuNeed := s.cpus(c)
		listed := c.Devices > 0 || c.ListsDevices
		devHints, devMin := s.deviceHints(c.Devices, listed, true)
		cpuHints, cpuMin := s.cpuHints(cpuNeed)
		best, ok := s.merge(devHints, cpuHints)
		if !ok {
			ref := s.refuse(ReasonTopologyAffinity, c.Name, c.Devices, cpuNeed, devMin, cpuMin, best)
			if c.Devices == 0 && listed {
				ref.ZeroOn = s.reusedNUMA()
			}
			return Result{}, ref
		}
		if ref := s.allocate(i, best, &res.Containers[i]); ref != nil {
			return Result{}, ref
		}
	}
	res.HeldCPUs = s.heldCPUs()
	return res, nil
}

// heldCPUs is what the admission took of each NUMA node's free exclusive CPUs (indexed like
// Node.NUMA), nil when none: the pod's CPUs once admitted, init containers' CPUs that no later
// container reused included (the static policy keeps them for the pod's life).
func (s *sim) heldCPUs() []int {
	var out []int
	for p := range s.n.NUMA {
		if d := s.n.NUMA[p].FreeCPUs() - s.freeCPUs[p]; d > 0 {
			if out == nil {
				out = make([]int, len(s.n.NUMA))
			}
			out[p] = d
		}
	}
	return out
}

// sim is one admission: the node's state as the kubelet sees it while it admits the pod's
// containers one after the other.
type sim struct {
	n    *Node
	r    *Request
	devs []Device
	// pos maps a NUMA ID to its index in n.NUMA, -1 when absent.
	pos [64]int
	// def is the default affinity (every NUMA node); masks every subset of the NUMA nodes and
	// cpuMasks every subset of those with CPUs, in the order of bitmask.IterateBitMasks.
	def             Mask
	masks, cpuMasks []Mask
	// res is the resource whose devices the device manager considers now (use): the kubelet
	// computes hints and allocates per resource.
	res string
	// devTopology: some device of res reports a NUMA node (deviceHasTopologyAlignment).
	devTopology bool
	// allOn counts every device of res (healthy or not, held or not) per NUMA ID.
	allOn [64]int
	// taken marks devices taken during this admission; reuse those in the pod's reuse set
	// (devicesToReuse: handed on by init containers).
	taken, reuse []bool
	// freeCPUs and reuseCPUs count per NUMA index the CPUs free for exclusive use and those
	// handed on by init containers (cpusToReuse).
	freeCPUs, reuseCPUs []int
}

func newSim(n *Node, devs []Device, r *Request) *sim {
	s := &sim{n: n, r: r, devs: devs, taken: make([]bool, len(devs)), reuse: make([]bool, len(devs)),
		freeCPUs: make([]int, len(n.NUMA)), reuseCPUs: make([]int, len(n.NUMA))}
	for i := range s.pos {
		s.pos[i] = -1
	}
	ids := make([]int, 0, len(n.NUMA))
	var cpuIDs []int
	for p := range n.NUMA {
		id := n.NUMA[p].ID
		s.pos[id] = p
		s.def |= MaskOf(id)
		ids = append(ids, id)
		if n.NUMA[p].CPUs > 0 {
			cpuIDs = append(cpuIDs, id)
		}
		s.freeCPUs[p] = n.NUMA[p].FreeCPUs()
	}
	slices.Sort(ids)
	slices.Sort(cpuIDs)
	s.masks = appendMasks(make([]Mask, 0, 1<<len(ids)-1), ids)
	s.cpuMasks = appendMasks(nil, cpuIDs)
	s.res = "\x00" // no resource yet: use sets it
	return s
}

// use makes the device manager consider the devices of resource res.
func (s *sim) use(res string) {
	if res == s.res {
		return
	}
	s.res, s.devTopology, s.allOn = res, false, [64]int{}
	for i := range s.devs {
		if id := s.devs[i].NUMA; id >= 0 && s.devs[i].Resource == res {
			s.devTopology = true
			if id < 64 {
				s.allOn[id]++
			}
		}
	}
}

// available is the device manager's getAvailableDevices: healthy and not held (of the resource
// considered now).
func (s *sim) available(i int) bool {
	return s.devs[i].Healthy && !s.devs[i].Held && !s.taken[i] && s.devs[i].Resource == s.res
}

// handedOn reports whether device i is of the resource considered now and in the pod's reuse set.
func (s *sim) handedOn(i int) bool { return s.reuse[i] && s.devs[i].Resource == s.res }

// cpus is guaranteedCPUs: the container's exclusive CPUs under the static policy.
func (s *sim) cpus(c *Container) int {
	if s.n.CPUPolicy != CPUPolicyStatic || !s.r.Guaranteed || c.CPUs < 0 {
		return 0
	}
	return c.CPUs
}

// podRequests are the pod's device limit (AggregateContainerLimits) and exclusive CPUs
// (podGuaranteedCPUs): the larger of the long-running containers' sum (app containers and
// sidecars) and the largest init container plus the sidecars started before it.
func (s *sim) podRequests() (devices, cpus int) {
	var appD, appC, sideD, sideC, initD, initC int
	for i := range s.r.Containers {
		c := &s.r.Containers[i]
		switch {
		case !c.Init:
			appD += c.Devices
			appC += s.cpus(c)
		case c.Restartable:
			sideD += c.Devices
			sideC += s.cpus(c)
		default:
			initD = max(initD, sideD+c.Devices)
			initC = max(initC, sideC+s.cpus(c))
		}
	}
	return max(appD+sideD, initD), max(appC+sideC, initC)
}

// podListsDevices reports whether some container's limits name Cardinal's resource: the pod's
// limits (PodLimits in getPodDeviceRequest) then hold it, with 0 where every container asks 0.
func (s *sim) podListsDevices() bool {
	for i := range s.r.Containers {
		if c := &s.r.Containers[i]; c.Devices > 0 || c.ListsDevices {
			return true
		}
	}
	return false
}

// reusedNUMA is the NUMA nodes of the devices init containers hand on now.
func (s *sim) reusedNUMA() Mask {
	var m Mask
	for i := range s.devs {
		if s.handedOn(i) {
			m |= MaskOf(s.devs[i].NUMA)
		}
	}
	return m
}

// deviceHints is GetTopologyHints / GetPodTopologyHints of the device manager with
// generateDeviceTopologyHints, in the form filterProvidersHints gives them, for a container (or
// pod) whose limits name the resource (listed) with need. min is the fewest NUMA nodes whose
// devices (all of them, healthy or not) could hold need (minAffinitySize). A limit of 0 still
// gets hints: every mask that holds the handed-on devices, the single NUMA nodes preferred
// (every mask holds 0 devices, so minAffinitySize is 1).
func (s *sim) deviceHints(need int, listed, withReuse bool) (hints []Hint, min int) {
	if !listed || need < 0 || !s.devTopology {
		// The limits do not name the resource: the provider returns no hints for it; no device
		// reports a NUMA node: nil hints. Both mean no preference.
		return noPreference, 0
	}
	var availOn [64]int
	avail, reused, reusedTopo := 0, 0, 0
	var reuseNUMA Mask
	reuseElsewhere := false
	for i := range s.devs {
		id := s.devs[i].NUMA
		switch {
		case withReuse && s.handedOn(i):
			reused++
			if id >= 0 {
				reusedTopo++
				reuseNUMA |= MaskOf(id)
				reuseElsewhere = reuseElsewhere || !s.def.Has(id)
			}
		case s.available(i):
			avail++
			if id >= 0 && id < 64 {
				availOn[id]++
			}
		}
	}
	min = len(s.n.NUMA)
	if avail+reused < need {
		return impossible, s.minDeviceNUMA(need)
	}
	hints = make([]Hint, 0, len(s.masks))
	for _, m := range s.masks {
		if m.Count() < min && sumOver(m, &s.allOn) >= need {
			min = m.Count()
		}
		if reuseElsewhere || reuseNUMA&^m != 0 {
			continue // every reused device must lie in the mask
		}
		if reusedTopo+sumOver(m, &availOn) >= need {
			hints = append(hints, Hint{Affinity: m})
		}
	}
	return preferMin(hints, min), min
}

func (s *sim) minDeviceNUMA(need int) int {
	for _, m := range s.masks {
		if sumOver(m, &s.allOn) >= need {
			return m.Count()
		}
	}
	return len(s.n.NUMA)
}

// cpuHints is the static CPU manager's hints (generateCPUTopologyHints) for need exclusive CPUs;
// min is the fewest NUMA nodes whose CPUs (all of them, reserved included) could hold need.
func (s *sim) cpuHints(need int) (hints []Hint, min int) {
	if need <= 0 {
		return noPreference, 0
	}
	var freeOn, allOn [64]int
	reused := 0
	var reuseNUMA Mask
	for p := range s.n.NUMA {
		id := s.n.NUMA[p].ID
		freeOn[id] = s.freeCPUs[p]
		allOn[id] = s.n.NUMA[p].CPUs
		if s.reuseCPUs[p] > 0 {
			reused += s.reuseCPUs[p]
			reuseNUMA |= MaskOf(id)
		}
	}
	min = 0 // minAffinitySize starts at the number of NUMA nodes with CPUs
	for p := range s.n.NUMA {
		if s.n.NUMA[p].CPUs > 0 {
			min++
		}
	}
	hints = make([]Hint, 0, len(s.cpuMasks))
	for _, m := range s.cpuMasks {
		if m.Count() < min && sumOver(m, &allOn) >= need {
			min = m.Count()
		}
		if reuseNUMA&^m != 0 {
			continue // every reused CPU must lie in the mask
		}
		if reused+sumOver(m, &freeOn) >= need {
			hints = append(hints, Hint{Affinity: m})
		}
	}
	if len(hints) == 0 {
		return impossible, min
	}
	return preferMin(hints, min), min
}

// preferMin marks the hints as wide as the narrowest possible as preferred; no hint at all is
// the provider's "cannot be satisfied".
func preferMin(hints []Hint, min int) []Hint {
	if len(hints) == 0 {
		return impossible
	}
	for i := range hints {
		hints[i].Preferred = hints[i].Affinity.Count() == min
	}
	return hints
}

func sumOver(m Mask, per *[64]int) int {
	n := 0
	for v := uint64(m); v != 0; v &= v - 1 {
		n += per[trailing(v)]
	}
	return n
}

func trailing(v uint64) int { return bits.TrailingZeros64(v) }

// allocate runs the hint providers' Allocate for container i with the stored hint: the device
// manager, then the CPU manager (their order in container_manager_linux.go).
func (s *sim) allocate(i int, h Hint, out *ContainerResult) *Refusal {
	c := &s.r.Containers[i]
	out.Name, out.Hint = c.Name, h
	if c.Devices > 0 {
		a, ref := s.allocateDevices(i, c, h.Affinity)
		if ref != nil {
			return ref
		}
		out.Devices = a
	}
	if need := s.cpus(c); need > 0 {
		per, ref := s.allocateCPUs(c, need, h.Affinity)
		if ref != nil {
			return ref
		}
		out.CPUs = per
	}
	return nil
}

// allocateDevices is devicesToAllocate with filterByAffinity, then the hand-on bookkeeping of
// ManagerImpl.Allocate (an init container's devices join the reuse set; a sidecar's and an app
// container's leave it).
func (s *sim) allocateDevices(ci int, c *Container, aff Mask) (Allocation, *Refusal) {
	need := c.Devices
	var a Allocation
	var fixed, pool []int
	healthy := 0
	for i := range s.devs {
		if s.devs[i].Healthy && s.devs[i].Resource == s.res {
			healthy++
		}
	}
	if healthy == 0 {
		return a, s.refuse(ReasonDevicesUnavailable, c.Name, need, 0, 0, 0, Hint{})
	}
	for i := range s.devs {
		if s.handedOn(i) {
			pool = append(pool, i)
		}
	}
	switch {
	case len(pool) > need:
		// The kubelet takes need of the handed-on devices itself, any of them.
		a.FromPool = need
	case len(pool) == need:
		fixed, pool = pool, nil
	default:
		fixed, pool = pool, nil
		needed := need - len(fixed)
		var aligned, rest []int
		for i := range s.devs {
			if !s.available(i) {
				continue
			}
			if aff != 0 && s.devTopology && aff.Has(s.devs[i].NUMA) {
				aligned = append(aligned, i)
			} else {
				rest = append(rest, i)
			}
		}
		if len(aligned)+len(rest) < needed {
			return a, s.refuse(ReasonDevicesUnavailable, c.Name, need, 0, 0, 0, Hint{Affinity: aff})
		}
		if needed < len(aligned) {
			// The plugin chooses among the aligned devices.
			pool, a.FromPool, a.AskPlugin = aligned, needed, true
		} else {
			// All aligned devices first, without asking; the plugin chooses the rest among all.
			fixed = append(fixed, aligned...)
			if needed > len(aligned) {
				pool, a.FromPool, a.AskPlugin = rest, needed-len(aligned), true
			}
		}
	}
	a.Fixed, a.Pool = s.ids(fixed), s.ids(pool)
	picked := s.pick(ci, a.Fixed, pool, a.FromPool)
	a.Taken = append(s.ids(fixed), s.ids(picked)...)
	handOn := c.Init && !c.Restartable
	for _, list := range [][]int{fixed, picked} {
		for _, i := range list {
			s.taken[i] = true
			s.reuse[i] = handOn
		}
	}
	return a, nil
}

func (s *sim) ids(idx []int) []string {
	if len(idx) == 0 {
		return nil
	}
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = s.devs[i].ID
	}
	return out
}

// pick applies Request.Pick to the pool, or takes its first n.
func (s *sim) pick(ci int, fixed []string, pool []int, n int) []int {
	if s.r.Pick != nil {
		if got := s.r.Pick(ci, fixed, s.ids(pool), n); len(got) == n && n > 0 {
			out := make([]int, 0, n)
			for _, id := range got {
				k := slices.IndexFunc(pool, func(i int) bool { return s.devs[i].ID == id })
				if k < 0 || slices.Contains(out, pool[k]) {
					break
				}
				out = append(out, pool[k])
			}
			if len(out) == n {
				return out
			}
		}
	}
	if n == 0 {
		return nil
	}
	return pool[:n]
}

// allocateCPUs is the static policy's allocateCPUs: the CPUs of the affinity's NUMA nodes first,
// the rest anywhere; then updateCPUsToReuse. Inside a group, NUMA nodes with fewer CPUs left go
// first (takeByTopologyNUMAPacked packs), and handed-on CPUs before free ones (a repeat of the
// packed take over the same CPUs picks them again).
func (s *sim) allocateCPUs(c *Container, need int, aff Mask) ([]int, *Refusal) {
	total := 0
	for p := range s.n.NUMA {
		total += s.freeCPUs[p] + s.reuseCPUs[p]
	}
	if total < need {
		return nil, s.refuse(ReasonCPUsUnavailable, c.Name, 0, need, 0, 0, Hint{Affinity: aff})
	}
	order := make([]int, len(s.n.NUMA))
	for p := range order {
		order[p] = p
	}
	slices.SortFunc(order, func(a, b int) int {
		if d := (s.freeCPUs[a] + s.reuseCPUs[a]) - (s.freeCPUs[b] + s.reuseCPUs[b]); d != 0 {
			return d
		}
		return s.n.NUMA[a].ID - s.n.NUMA[b].ID
	})
	per := make([]int, len(s.n.NUMA))
	handOn := c.Init && !c.Restartable
	left := need
	for pass := 0; pass < 2 && left > 0; pass++ {
		for _, p := range order {
			if (pass == 0) != (aff != 0 && aff.Has(s.n.NUMA[p].ID)) {
				continue
			}
			fromReuse := min(left, s.reuseCPUs[p])
			fromFree := min(left-fromReuse, s.freeCPUs[p])
			left -= fromReuse + fromFree
			per[p] += fromReuse + fromFree
			s.freeCPUs[p] -= fromFree
			if handOn {
				s.reuseCPUs[p] += fromFree
			} else {
				s.reuseCPUs[p] -= fromReuse
			}
		}
	}
	return per, nil
}
