package core

import (
	"slices"
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// TaskClass is one kind of GPU request the cluster has seen, with how often.
type TaskClass struct {
	// Cards is the number of cards per container.
	Cards int
	// Whole is true when the container wants its cards alone.
	Whole bool
	// MemMiB or MemPercent is the memory wanted on each card (at most one is set; neither for whole
	// cards or cores-only shares).
	MemMiB     int64
	MemPercent int
	// Cores is the compute percentage per card (100 for whole cards).
	Cores int
	// Models is use-gputype (lower-cased substrings); empty means any model.
	Models []string
	// HostCPUMilli and HostMemMiB are the CPU (millicores) and memory (MiB) the pod of this kind
	// asks of its node, rounded to HostCPUBucket and HostMemBucket (0: none or not known, then the
	// node's CPU and memory never keep the class out).
	HostCPUMilli int64
	HostMemMiB   int64
	// Weight is how many containers of this kind were seen.
	Weight float64
}

// HostCPUBucket and HostMemBucket are the steps to which AddPodHost rounds a pod's CPU and memory
// (to the nearest step, at least one step when nonzero), so that a mix keeps a handful of classes
// rather than one per distinct request.
const (
	HostCPUBucket = 1000
	HostMemBucket = 1024
)

// bucket rounds v to the nearest multiple of step, at least step when v > 0.
func bucket(v, step int64) int64 {
	if v <= 0 {
		return 0
	}
	return max((v+step/2)/step, 1) * step
}

// HostFits reports whether the class's CPU and memory fit what node state h has free of its known
// resources, after taking away extra.
func (t *TaskClass) HostFits(h *HostState, extra HostRequest) bool {
	return h.Fits(t.HostCPUMilli, t.HostMemMiB, extra)
}

// MemoryFraction is the share of card c's memory the class wants, in [0, 1].
func (t *TaskClass) MemoryFraction(c *Card) float64 {
	switch {
	case t.Whole:
		return 1
	case t.MemPercent > 0:
		return float64(t.MemPercent) / 100
	case t.MemMiB > 0 && c.MemoryMiB > 0:
		return min(float64(t.MemMiB)/float64(c.MemoryMiB), 1)
	}
	return 0
}

// Accepts reports whether a card of this model may serve the class (Models is empty or one entry
// is a substring of the lower-cased model).
func (t *TaskClass) Accepts(c *Card) bool {
	if len(t.Models) == 0 {
		return true
	}
	for _, m := range t.Models {
		if strings.Contains(c.modelLower, m) {
			return true
		}
	}
	return false
}

func (t *TaskClass) same(o *TaskClass) bool {
	return t.Cards == o.Cards && t.Whole == o.Whole && t.MemMiB == o.MemMiB &&
		t.MemPercent == o.MemPercent && t.Cores == o.Cores && slices.Equal(t.Models, o.Models) &&
		t.HostCPUMilli == o.HostCPUMilli && t.HostMemMiB == o.HostMemMiB
}

// TaskMix is the distribution of GPU requests the cluster has seen, which a fragmentation-aware
// policy weighs placements against. The zero value is an empty mix. It is not safe for concurrent
// use; the extender's cache hands out clones.
type TaskMix struct {
	Classes []TaskClass
	// Total is the sum of the classes' weights.
	Total float64
}

// ClassOf returns the class of a container request and its pod's selector, with weight 0.
func ClassOf(r *annotations.ContainerRequest, sel *annotations.Selector) TaskClass {
	t := TaskClass{Cards: r.Count, Whole: r.Exclusive(), Cores: r.CoresOn(), Models: sel.UseTypes}
	if !t.Whole {
		t.MemMiB, t.MemPercent = r.MemoryMiB, r.MemoryPercent
	}
	return t
}

// Add counts weight more containers of class t.
func (m *TaskMix) Add(t TaskClass, weight float64) {
	m.Total += weight
	for i := range m.Classes {
		if m.Classes[i].same(&t) {
			m.Classes[i].Weight += weight
			return
		}
	}
	t.Weight = weight
	t.Models = slices.Clone(t.Models)
	m.Classes = append(m.Classes, t)
}

// AddPod counts every container of a pod, weight 1 each.
func (m *TaskMix) AddPod(req *annotations.PodRequest, sel *annotations.Selector) {
	for i := range req.Containers {
		m.Add(ClassOf(&req.Containers[i], sel), 1)
	}
}

// AddPodHost is AddPod for a pod that also asks its node for CPU and memory: each GPU container's
// class carries the pod's request (bucketed), since a container runs only where its pod fits.
func (m *TaskMix) AddPodHost(req *annotations.PodRequest, sel *annotations.Selector, host HostRequest) {
	for i := range req.Containers {
		t := ClassOf(&req.Containers[i], sel)
		t.HostCPUMilli, t.HostMemMiB = bucket(host.CPUMilli, HostCPUBucket), bucket(host.MemMiB, HostMemBucket)
		m.Add(t, 1)
	}
}

// Clone returns a copy that shares nothing with m.
func (m *TaskMix) Clone() *TaskMix {
	if m == nil {
		return nil
	}
	c := &TaskMix{Total: m.Total, Classes: slices.Clone(m.Classes)}
	return c
}
