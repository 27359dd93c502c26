package sim

import (
	"math"
	"slices"
	"strings"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
)

// typicalTask is one kind of GPU pod of the trace, with its share of the trace's GPU pods: the
// "target workload" M of FGD's fragmentation measure.
type typicalTask struct {
	cpuMilli, memMiB int64
	numGPU           int
	// perCard is the milli-GPU wanted on each card: gpu_milli (1000 for whole cards).
	perCard int64
	// models are the accepted models (gpu_spec); empty accepts every model.
	models []string
	p      float64
}

// typicalTasks is the distribution of the trace's GPU pods by (CPU, memory, cards, share, models).
// CPU-only pods are left out: they use no GPU, and would count every free GPU as fragmented.
func typicalTasks(specs []podSpec) []typicalTask {
	type key struct {
		cpu, mem int64
		n        int
		milli    int64
		models   string
	}
	count := map[key]int{}
	var order []key
	total := 0
	for i := range specs {
		p := specs[i].row
		if p.NumGPU == 0 {
			continue
		}
		k := key{p.CPUMilli, p.MemoryMiB, p.NumGPU, p.GPUMilli, strings.Join(p.GPUSpec, "|")}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
		total++
	}
	out := make([]typicalTask, len(order))
	for i, k := range order {
		var models []string
		if k.models != "" {
			models = strings.Split(k.models, "|")
		}
		out[i] = typicalTask{cpuMilli: k.cpu, memMiB: k.mem, numGPU: k.n, perCard: k.milli, models: models, p: float64(count[k]) / float64(total)}
	}
	return out
}

// fragmentation is FGD's measure of the cluster (Weng et al. 2023, §3): for each node n and task m
// of the target workload, F_n(m) is the free GPU capacity of n that m cannot use — all of it when m
// cannot run on n at all (model not accepted, not enough CPU or memory, fewer cards with at least
// m's share free than m needs), otherwise the free capacity of the cards with less than m's share
// free. The cluster's fragmentation is Σ_n Σ_m p_m F_n(m). It returns that in cards, and as a
// percentage of the cluster's free GPU capacity. It uses the replay's own accounting of milli-GPU
// per card, not the core's.
func (r *replay) fragmentation() (gpus, percent, hostShare float64) {
	var frag, host, free float64
	for ni := range r.sim {
		n := &r.sim[ni]
		var nodeFree int64
		for _, u := range n.usedMilli {
			nodeFree += trace.MilliPerGPU - u
		}
		if nodeFree == 0 {
			continue
		}
		free += float64(nodeFree)
		for ti := range r.typical {
			t := &r.typical[ti]
			f, byHost := taskFrag(n, t, nodeFree)
			frag += t.p * float64(f)
			if byHost {
				host += t.p * float64(f)
			}
		}
	}
	if free == 0 || frag == 0 {
		return frag / trace.MilliPerGPU, 0, 0
	}
	return frag / trace.MilliPerGPU, 100 * frag / free, 100 * host / frag
}

// taskFrag is F_n(m) in milli-GPU, and whether it is all of the node's free GPU only because the
// node lacks CPU or memory for m (its cards would do).
func taskFrag(n *simNode, t *typicalTask, nodeFree int64) (int64, bool) {
	if len(t.models) > 0 && !slices.Contains(t.models, n.model) {
		return nodeFree, false
	}
	var fits int
	var small int64
	for _, u := range n.usedMilli {
		if f := trace.MilliPerGPU - u; f >= t.perCard {
			fits++
		} else {
			small += f
		}
	}
	if fits < t.numGPU {
		return nodeFree, false
	}
	if !n.ignoreHost && (n.cpuFree < t.cpuMilli || n.memFree < t.memMiB) {
		return nodeFree, true
	}
	return small, false
}

func nanValue() float64 { return math.NaN() }

// Stat is a mean and sample standard deviation over seeds, of the values that are not NaN.
type Stat struct {
	Mean, SD float64
	// N is how many values were not NaN.
	N int
}

// Summarize computes the Stat of values.
func Summarize(values []float64) Stat {
	var s Stat
	for _, v := range values {
		if !math.IsNaN(v) {
			s.Mean += v
			s.N++
		}
	}
	if s.N == 0 {
		return Stat{Mean: math.NaN(), SD: math.NaN()}
	}
	s.Mean /= float64(s.N)
	if s.N > 1 {
		for _, v := range values {
			if !math.IsNaN(v) {
				s.SD += (v - s.Mean) * (v - s.Mean)
			}
		}
		s.SD = math.Sqrt(s.SD / float64(s.N-1))
	}
	return s
}

// Summary is a Result reduced to mean ± sd per measure.
type Summary struct {
	Alloc100, AllocEnd, FirstFail, FragGPUs, FragPercent, FragHost Stat
	// NoFail counts seeds in which no GPU pod failed.
	NoFail int
}

// Summary reduces the per-seed results.
func (r *Result) Summary() Summary {
	pick := func(f func(*SeedResult) float64) Stat {
		v := make([]float64, len(r.Seeds))
		for i := range r.Seeds {
			v[i] = f(&r.Seeds[i])
		}
		return Summarize(v)
	}
	s := Summary{
		Alloc100:    pick(func(s *SeedResult) float64 { return s.Alloc100 }),
		AllocEnd:    pick(func(s *SeedResult) float64 { return s.AllocEnd }),
		FirstFail:   pick(func(s *SeedResult) float64 { return s.FirstFail }),
		FragGPUs:    pick(func(s *SeedResult) float64 { return s.FragGPUs }),
		FragPercent: pick(func(s *SeedResult) float64 { return s.FragPercent }),
		FragHost:    pick(func(s *SeedResult) float64 { return s.FragHost }),
	}
	for i := range r.Seeds {
		if math.IsNaN(r.Seeds[i].FirstFail) {
			s.NoFail++
		}
	}
	return s
}
