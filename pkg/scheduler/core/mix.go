package core

import (
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/migplace"
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

// TaskMix is the distribution of GPU requests the cluster has seen, which a fragmentation-aware
// policy weighs placements against. The zero value is an empty mix that never forgets; set
// HalfLife to age it. It holds at most MaxClasses classes: a new class beyond that replaces the
// lightest one, so a stream of ever-different requests costs bounded memory and bounded scoring
// time. It is not safe for concurrent use; the extender's cache hands out clones.
type TaskMix struct {
	Classes []TaskClass
	// Total is the sum of the classes' weights.
	Total float64
	// HalfLife, when positive, ages the mix: a container counted HalfLife containers ago weighs
	// half of one counted now, so classes the cluster stopped asking for fade and make room. The
	// policy reads only weights relative to Total, which aging leaves consistent.
	HalfLife float64

	// mig counts the MIG instances asked for, by profile key (dynamic MIG's placement choice
	// reads them: MIGDemand); not aged.
	mig map[string]float64

	index map[classKey]int // Classes by key; rebuilt when nil
	step  float64          // the weight of one container now (aging grows it; 0 means 1)
	frag  fragIndex        // the classes the frag-aware policy counts; rebuilt by Add
}

// MaxClasses bounds the classes of a mix. The shared production traces have 53 to 362 classes.
const MaxClasses = 512

// classKey identifies a class (its fields but the weight, models joined).
type classKey struct {
	cards, memPercent, cores int
	whole                    bool
	memMiB, cpu, mem         int64
	models                   string
}

func keyOf(t *TaskClass) classKey {
	return classKey{cards: t.Cards, memPercent: t.MemPercent, cores: t.Cores, whole: t.Whole, memMiB: t.MemMiB,
		cpu: t.HostCPUMilli, mem: t.HostMemMiB, models: strings.Join(t.Models, "\x00")}
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
	m.add(t, weight)
	m.frag.build(m)
}

func (m *TaskMix) add(t TaskClass, weight float64) {
	if m.step == 0 {
		m.step = 1
	}
	w := weight * m.step
	if m.HalfLife > 0 {
		m.age(weight)
	}
	if m.index == nil {
		m.index = make(map[classKey]int, len(m.Classes))
		for i := range m.Classes {
			m.index[keyOf(&m.Classes[i])] = i
		}
	}
	k := keyOf(&t)
	m.Total += w
	if i, ok := m.index[k]; ok {
		m.Classes[i].Weight += w
		return
	}
	t.Weight = w
	t.Models = slices.Clone(t.Models)
	if len(m.Classes) < MaxClasses {
		m.index[k] = len(m.Classes)
		m.Classes = append(m.Classes, t)
		return
	}
	// Full: the lightest class makes room (the newcomer, if it is lighter still, is not kept).
	light := 0
	for i := range m.Classes {
		if m.Classes[i].Weight < m.Classes[light].Weight {
			light = i
		}
	}
	if m.Classes[light].Weight > w {
		m.Total -= w
		return
	}
	m.Total -= m.Classes[light].Weight
	delete(m.index, keyOf(&m.Classes[light]))
	m.Classes[light] = t
	m.index[k] = light
}

// age makes the next containers weigh more than those counted before (the same as shrinking every
// weight), and rescales the stored weights before the numbers grow large.
func (m *TaskMix) age(weight float64) {
	m.step *= math.Exp2(weight / m.HalfLife)
	if m.step < 1<<32 {
		return
	}
	for i := range m.Classes {
		m.Classes[i].Weight /= m.step
	}
	m.Total /= m.step
	m.step = 1
}

// AddPod counts every container of a pod that asks for cards, weight 1 each (containers that
// take MIG instances are left out: the mix describes requests for cards).
func (m *TaskMix) AddPod(req *annotations.PodRequest, sel *annotations.Selector) {
	for i := range req.Containers {
		if !req.Containers[i].MIG() {
			m.Add(ClassOf(&req.Containers[i], sel), 1)
		} else {
			m.addMIG(&req.Containers[i])
		}
	}
}

// addMIG counts the instances a MIG container asks for.
func (m *TaskMix) addMIG(c *annotations.ContainerRequest) {
	if m.mig == nil {
		m.mig = map[string]float64{}
	}
	m.mig[c.MIGProfile] += float64(c.Count)
}

// MIGDemand is the mix of MIG profiles asked for (profile keys, by count), sorted by key; nil for
// a nil mix or one without MIG requests.
func (m *TaskMix) MIGDemand() []migplace.Demand {
	if m == nil || len(m.mig) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m.mig))
	for k := range m.mig {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]migplace.Demand, len(keys))
	for i, k := range keys {
		out[i] = migplace.Demand{Profile: k, Weight: m.mig[k]}
	}
	return out
}

// AddPodHost is AddPod for a pod that also asks its node for CPU and memory: each GPU container's
// class carries the pod's request (bucketed), since a container runs only where its pod fits.
func (m *TaskMix) AddPodHost(req *annotations.PodRequest, sel *annotations.Selector, host HostRequest) {
	for i := range req.Containers {
		if req.Containers[i].MIG() {
			m.addMIG(&req.Containers[i])
			continue
		}
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
	c := &TaskMix{Total: m.Total, Classes: slices.Clone(m.Classes), HalfLife: m.HalfLife, step: m.step, mig: maps.Clone(m.mig)}
	c.frag.build(c)
	return c
}

// fragIndex returns the mix's fragIndex, or builds one into own when the mix was changed other than
// by Add (its Total or class count differ from those the index was built for).
func (m *TaskMix) fragIndex(own *fragIndex) *fragIndex {
	if x := &m.frag; x.built && x.total == m.Total && x.classes == len(m.Classes) {
		return x
	}
	own.build(m)
	return own
}
