package annotations

import (
	"errors"
	"fmt"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MaxGPUsPerContainer bounds nvidia.com/gpu so a typo cannot ask the scheduler to search for 10^9 cards.
const MaxGPUsPerContainer = 64

// MaxMemoryMiB bounds nvidia.com/gpumem, which is in MiB: 2^24 MiB = 16 TiB is far beyond any card,
// and a value written in bytes by mistake (24Gi) is refused rather than read as 24 PiB.
const MaxMemoryMiB = 1 << 24

// ContainerRequest is what one container asks of GPUs.
type ContainerRequest struct {
	// Name is the container's name.
	Name string
	// Init is true for init containers.
	Init bool
	// Sidecar is true for an init container with restartPolicy Always: it keeps its cards while the
	// app containers run, so they cannot reuse them.
	Sidecar bool
	// Count is the number of distinct cards.
	Count int
	// Shared is true when the container asked for memory or cores, and so may share its cards.
	// Without it, the container wants whole cards to itself.
	Shared bool
	// MemoryMiB is the memory wanted on each card, 0 when not given.
	MemoryMiB int64
	// MemoryPercent is the percentage of each card's memory wanted, 0 when not given.
	MemoryPercent int
	// Cores is the percentage of each card's compute wanted; 100 means the card alone.
	Cores int
	// MIGProfile is set when the container asks for MIG instances instead of cards: the profile key
	// (MIGProfileKey) of its one MIG resource, e.g. "1g.10gb" for nvidia.com/mig-1g.10gb; Count is
	// then the number of instances, and Shared is false (an instance is held whole).
	MIGProfile string
}

// MIG reports whether the container asks for MIG instances.
func (r *ContainerRequest) MIG() bool { return r.MIGProfile != "" }

// Exclusive reports whether every card of the container must have nothing else on it.
func (r *ContainerRequest) Exclusive() bool { return !r.Shared || r.Cores == 100 }

// MemoryOn returns the memory in MiB the container reserves on a card with total MiB.
func (r *ContainerRequest) MemoryOn(total int64) int64 {
	switch {
	case !r.Shared:
		return total
	case r.MemoryMiB > 0:
		return r.MemoryMiB
	case r.MemoryPercent > 0:
		return total * int64(r.MemoryPercent) / 100
	}
	return 0
}

// CoresOn returns the compute percentage the container reserves on each card.
func (r *ContainerRequest) CoresOn() int {
	if !r.Shared {
		return 100
	}
	return r.Cores
}

// Interchangeable reports whether two containers ask for the same thing in the same way, so that
// either could take the other's cards (their selectors are compared by the caller).
func (r *ContainerRequest) Interchangeable(o *ContainerRequest) bool {
	return r.Count == o.Count && r.Shared == o.Shared && r.MemoryMiB == o.MemoryMiB &&
		r.MemoryPercent == o.MemoryPercent && r.Cores == o.Cores && r.MIGProfile == o.MIGProfile
}

// PodRequest is every GPU container of a pod: init containers first, in order, then app containers.
// Containers that ask for no GPU are left out.
type PodRequest struct {
	Containers []ContainerRequest
	// Guaranteed is true when the pod's QoS class is Guaranteed: the kubelet's static CPU manager
	// then gives each container that asks for a whole number of CPUs that many CPUs of its own,
	// and a TopologyManager policy aligns them with the container's cards. Set by ReadCPUs.
	Guaranteed bool
	// CPUs lists, for a Guaranteed pod only, every container of the pod, GPU or not, in the
	// kubelet's admission order (init containers, then app containers) with its CPU request. Set
	// by ReadCPUs.
	CPUs []ContainerCPU
	// ZeroGPU lists, in admission order, the containers whose limits name the GPU resource with 0
	// (they are not in Containers). The kubelet keeps a request of 0: its device manager still
	// gives such a container topology hints, which must hold the cards init containers hand on
	// (devicemanager/topology_hints.go). A container that does not name the resource at all is
	// not listed.
	ZeroGPU []ZeroGPU
}

// ZeroGPU is a container whose limits name the GPU resource with 0.
type ZeroGPU struct {
	Name string
	// Init and Sidecar are as in ContainerRequest.
	Init, Sidecar bool
	// Before is the index in PodRequest.Containers of the first GPU container admitted after it
	// (len(Containers) when none is).
	Before int
}

// ContainerCPU is one container's CPU request, as the kubelet's CPU manager reads it.
type ContainerCPU struct {
	Name string
	// Init and Sidecar are as in ContainerRequest.
	Init, Sidecar bool
	// Milli is the CPU request in millicores (the limit where no request is given, as the API
	// server defaults it).
	Milli int64
}

// WholeCPUs is the number of CPUs the static CPU manager gives the container exclusively in a
// Guaranteed pod: the request when it is a whole number of CPUs, else 0.
func (c *ContainerCPU) WholeCPUs() int {
	if c.Milli <= 0 || c.Milli%1000 != 0 {
		return 0
	}
	return int(c.Milli / 1000)
}

// Empty reports whether the pod asks for no GPU.
func (p *PodRequest) Empty() bool { return len(p.Containers) == 0 }

// ParsePodRequest reads the managed resources of every container, init containers included. Every
// problem found is reported, each naming the container, the resource and the value.
func ParsePodRequest(pod *corev1.Pod, names ResourceNames) (PodRequest, error) {
	var req PodRequest
	var errs []error
	add := func(c *corev1.Container, init bool) {
		r, err := ParseContainerRequest(c, names)
		if err != nil {
			errs = append(errs, err)
			return
		}
		side := init && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		if r.Count == 0 {
			// The kubelet reads the limits (requests of an extended resource must equal them).
			if _, listed := c.Resources.Limits[names.GPU]; listed {
				req.ZeroGPU = append(req.ZeroGPU, ZeroGPU{Name: c.Name, Init: init, Sidecar: side, Before: len(req.Containers)})
			}
			return
		}
		r.Init = init
		r.Sidecar = side
		req.Containers = append(req.Containers, r)
	}
	for i := range pod.Spec.InitContainers {
		add(&pod.Spec.InitContainers[i], true)
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i], false)
	}
	return req, errors.Join(errs...)
}

// ReadCPUs sets Guaranteed and CPUs from the pod: what the kubelet's static CPU manager and its
// TopologyManager read of it. ParsePodRequest leaves both empty; the extender calls ReadCPUs so that
// nodes whose kubelet aligns CPUs with cards can be decided. CPUs stays empty for a pod that is not
// Guaranteed or asks for no GPU.
func (r *PodRequest) ReadCPUs(pod *corev1.Pod) {
	r.CPUs = nil
	if r.Guaranteed = guaranteed(pod); !r.Guaranteed || len(r.Containers) == 0 {
		return
	}
	r.CPUs = make([]ContainerCPU, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		side := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		r.CPUs = append(r.CPUs, ContainerCPU{Name: c.Name, Init: true, Sidecar: side, Milli: cpuRequest(c)})
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		r.CPUs = append(r.CPUs, ContainerCPU{Name: c.Name, Milli: cpuRequest(c)})
	}
}

// guaranteed reports whether the pod's QoS class is Guaranteed: the class the API server recorded
// at creation, or where it recorded none (a pod not yet created), the rule of the API server's
// GetPodQOS: every container has CPU and memory limits, and its requests, where given, equal them.
// Pod-level resources are not considered.
func guaranteed(pod *corev1.Pod) bool {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass == corev1.PodQOSGuaranteed
	}
	ok := func(c *corev1.Container) bool {
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			l, has := c.Resources.Limits[name]
			if !has || l.IsZero() {
				return false
			}
			if r, has := c.Resources.Requests[name]; has && r.Cmp(l) != 0 {
				return false
			}
		}
		return true
	}
	if len(pod.Spec.Containers) == 0 {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if !ok(&pod.Spec.InitContainers[i]) {
			return false
		}
	}
	for i := range pod.Spec.Containers {
		if !ok(&pod.Spec.Containers[i]) {
			return false
		}
	}
	return true
}

// cpuRequest is the container's CPU request in millicores, the limit where no request is given.
func cpuRequest(c *corev1.Container) int64 {
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		return q.MilliValue()
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		return q.MilliValue()
	}
	return 0
}

// HasManagedResource reports whether any container (init containers included) names any managed
// resource in its limits or requests, whatever the value.
func HasManagedResource(pod *corev1.Pod, names ResourceNames) bool {
	has := func(cs []corev1.Container) bool {
		for i := range cs {
			for _, n := range names.All() {
				if _, ok := cs[i].Resources.Limits[n]; ok {
					return true
				}
				if _, ok := cs[i].Resources.Requests[n]; ok {
					return true
				}
			}
			if len(names.migResourcesOf(&cs[i])) > 0 {
				return true
			}
		}
		return false
	}
	return has(pod.Spec.InitContainers) || has(pod.Spec.Containers)
}

// ParseContainerRequest reads one container's managed resources (limits, or requests where no limit
// is given). A container with memory or cores but no nvidia.com/gpu is an error: admission adds
// nvidia.com/gpu: 1 to such containers before they get here.
func ParseContainerRequest(c *corev1.Container, names ResourceNames) (ContainerRequest, error) {
	r := ContainerRequest{Name: c.Name}
	var errs []error
	countOK := true
	get := func(name corev1.ResourceName, lo, hi int64) (int64, bool) {
		v, ok, err := quantity(c, name, lo, hi)
		if err != nil {
			err.Container = c.Name
			errs = append(errs, err)
			if name == names.GPU {
				countOK = false
			}
		}
		return v, ok
	}
	count, hasCount := get(names.GPU, 0, MaxGPUsPerContainer)
	mem, hasMem := get(names.Mem, 1, MaxMemoryMiB)
	pct, hasPct := get(names.MemPercentage, 1, 100)
	cores, hasCores := get(names.Cores, 0, 100)
	r.Count = int(count)
	r.MemoryMiB, r.MemoryPercent, r.Cores = mem, int(pct), int(cores)
	r.Shared = hasMem || hasPct || hasCores
	if hasMem && hasPct {
		errs = append(errs, &Error{Container: c.Name, Key: string(names.MemPercentage),
			Reason: fmt.Sprintf("cannot be combined with %s (choose one)", names.Mem)})
	}
	// A share beside a MIG resource is refused by readMIG; advice to add a card count would only
	// lead to a second refusal.
	migs := names.migResourcesOf(c)
	if r.Shared && countOK && len(migs) == 0 {
		share := sharedKeys(names, hasMem, hasPct)
		switch {
		case !hasCount:
			errs = append(errs, &Error{Container: c.Name, Key: string(names.GPU),
				Reason: fmt.Sprintf("missing while %s asks for a share of a card; set %s: 1 or more", share, names.GPU)})
		case count == 0:
			errs = append(errs, &Error{Container: c.Name, Key: string(names.GPU),
				Reason: fmt.Sprintf("0 while %s asks for a share of a card; set %s: 1 or more", share, names.GPU)})
		}
	}
	if len(migs) > 0 {
		errs = append(errs, r.readMIG(c, names, migs, count > 0 || r.Shared)...)
	}
	if err := errors.Join(errs...); err != nil {
		return ContainerRequest{Name: c.Name}, err
	}
	return r, nil
}

// readMIG sets Count and MIGProfile from the container's one MIG resource. A container takes
// instances of one profile and no cards: NVIDIA's mixed strategy would let it ask for several
// profiles, but one container on two instances sees two CUDA devices of unequal size, which no
// framework splits work across well, and mixing cards and instances in one container is refused for
// the same reason.
func (r *ContainerRequest) readMIG(c *corev1.Container, names ResourceNames, migs []corev1.ResourceName, cards bool) []error {
	if len(migs) > 1 {
		return []error{&Error{Container: c.Name, Key: string(migs[1]),
			Reason: fmt.Sprintf("asks for a second MIG profile beside %s; a container takes instances of one profile (split it into containers)", migs[0])}}
	}
	if cards {
		return []error{&Error{Container: c.Name, Key: string(migs[0]),
			Reason: fmt.Sprintf("cannot be combined with %s, %s, %s or %s in one container (a container takes whole cards, shares of cards, or MIG instances)", names.GPU, names.Mem, names.MemPercentage, names.Cores)}}
	}
	key, _ := names.MIGProfileKeyOf(migs[0])
	if !validMIGProfileKey(key) {
		return []error{&Error{Container: c.Name, Key: string(migs[0]),
			Reason: fmt.Sprintf("%q is not a MIG profile (resources are named like %s, %s)", key, names.MIGResource("1g.10gb"), names.MIGResource("3g.40gb+me"))}}
	}
	n, _, err := quantity(c, migs[0], 0, MaxGPUsPerContainer)
	if err != nil {
		err.Container = c.Name
		return []error{err}
	}
	if n > 0 {
		r.Count, r.MIGProfile = int(n), key
	}
	return nil
}

// migResourcesOf lists the MIG resources the container names in its limits or requests, sorted.
func (n ResourceNames) migResourcesOf(c *corev1.Container) []corev1.ResourceName {
	var out []corev1.ResourceName
	for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for name := range l {
			if n.IsMIGResource(name) && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// sharedKeys names the resource that makes a request a share, for an error message.
func sharedKeys(names ResourceNames, mem, pct bool) string {
	switch {
	case mem:
		return string(names.Mem)
	case pct:
		return string(names.MemPercentage)
	default:
		return string(names.Cores)
	}
}

// quantity reads a whole-number resource in [lo, hi] from limits, falling back to requests.
func quantity(c *corev1.Container, name corev1.ResourceName, lo, hi int64) (int64, bool, *Error) {
	q, ok := c.Resources.Limits[name]
	if !ok {
		q, ok = c.Resources.Requests[name]
		if !ok {
			return 0, false, nil
		}
	} else if rq, has := c.Resources.Requests[name]; has && !sameQuantity(rq, q) {
		return 0, true, errorf(string(name), "request %s differs from limit %s", rq.String(), q.String())
	}
	return ParseQuantity(string(name), q, lo, hi)
}

// sameQuantity reports whether a and b are equal. Quantities as large as 1e999999999 are legal, and
// comparing two of very different sizes exactly would build a number with that many digits, so
// values beyond float64's range are compared by their approximation (the range check refuses them).
func sameQuantity(a, b resource.Quantity) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() && b.IsZero()
	}
	fa, fb := a.AsApproximateFloat64(), b.AsApproximateFloat64()
	if math.IsInf(fa, 0) || math.IsInf(fb, 0) || math.IsNaN(fa) || math.IsNaN(fb) {
		return fa == fb
	}
	// Both within float64's range: their scales differ by a few hundred at most, so Cmp is cheap.
	return a.Cmp(b) == 0
}

// ParseQuantity checks that q is a whole number in [lo, hi] and names key in the error. The bool
// result is always true (the value was present); it is there so callers can pass the result on.
//
// It never does arithmetic on q's full size: quantities such as 1e999999999 or 0e999999999 are legal,
// and handling them exactly would build a number with a billion digits (or loop a billion times).
func ParseQuantity(key string, q resource.Quantity, lo, hi int64) (int64, bool, *Error) {
	v, exact := int64(0), true
	if !q.IsZero() { // AsInt64 would scale 0e999999999 up one digit at a time
		v, exact = q.AsInt64()
	}
	if exact {
		switch {
		case v < lo:
			return 0, true, errorf(key, "%s is below %d", q.String(), lo)
		case v > hi:
			return 0, true, errorf(key, "%s is above %d", q.String(), hi)
		}
		return v, true, nil
	}
	// Not an int64 as stored: far out of range, fractional, or a whole number with a negative scale
	// (2000m). The approximation settles the range, so that 1e30 is "above", not "not whole".
	switch f := q.AsApproximateFloat64(); {
	case math.IsNaN(f):
		return 0, true, errorf(key, "%s is not in %d..%d", q.String(), lo, hi)
	case f < float64(lo):
		return 0, true, errorf(key, "%s is below %d", q.String(), lo)
	case f > float64(hi):
		return 0, true, errorf(key, "%s is above %d", q.String(), hi)
	}
	// In range, so q is small (and quantities keep at most 9 decimal places): Value (rounded up)
	// fits an int64, and it equals q exactly only for a whole number.
	v = q.Value()
	if q.Cmp(*resource.NewQuantity(v, resource.DecimalSI)) != 0 || v < lo || v > hi {
		return 0, true, errorf(key, "%s is not a whole number", q.String())
	}
	return v, true, nil
}
