package gangs

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/cardinal-gpu/cardinal/bench/replay/sim"
	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Batch is a comparison: for each seed, one job list replayed in both modes on the same cluster.
type Batch struct {
	Nodes []trace.Node
	Pods  []trace.Pod
	Jobs  JobConfig
	Seeds []uint64
	// NodePolicy and GPUPolicy are the extender's default policies.
	NodePolicy, GPUPolicy annotations.Policy
	Synthesis             sim.Synthesis
}

// Pair is one seed's two replays.
type Pair struct {
	Seed    uint64
	Results [2]Result // AllOrNothing, PerPod
}

// Modes are the modes a Batch compares, in its order.
var Modes = [2]Mode{AllOrNothing, PerPod}

// RunBatch replays every seed in both modes, one after the other.
func RunBatch(ctx context.Context, b Batch) ([]Pair, error) {
	if b.Jobs.CapacityGPUs == 0 {
		for i := range b.Nodes {
			b.Jobs.CapacityGPUs += b.Nodes[i].GPUs
		}
	}
	out := make([]Pair, 0, len(b.Seeds))
	for _, seed := range b.Seeds {
		jobs, err := BuildJobs(b.Pods, b.Jobs, seed)
		if err != nil {
			return nil, err
		}
		p := Pair{Seed: seed}
		for i, m := range Modes {
			res, err := Run(ctx, Config{Nodes: b.Nodes, Jobs: jobs, Mode: m, NodePolicy: b.NodePolicy, GPUPolicy: b.GPUPolicy, Synthesis: b.Synthesis})
			if err != nil {
				return nil, fmt.Errorf("seed %d, %s: %w", seed, m, err)
			}
			p.Results[i] = res
		}
		out = append(out, p)
	}
	return out, nil
}

// row is one figure of the table: its name and how to read it from a result.
type row struct {
	name string
	of   func(r *Result) float64
	prec int
}

var rows = []row{
	{"jobs completed", func(r *Result) float64 { return float64(r.Completed) }, 1},
	{"gangs completed", func(r *Result) float64 { return float64(r.GangsCompleted) }, 1},
	{"jobs completed by the last arrival", func(r *Result) float64 { return float64(r.CompletedByLastArrival) }, 1},
	{"pods pending at the last arrival", func(r *Result) float64 { return float64(r.PendingPodsAtLastArrival) }, 1},
	{"pods pending at the end", func(r *Result) float64 { return float64(r.PendingPods) }, 1},
	{"jobs deadlocked at the end (hold cards, never ran)", func(r *Result) float64 { return float64(r.Deadlocked) }, 1},
	{"cards the deadlocked jobs hold", func(r *Result) float64 { return r.DeadlockedGPUs }, 1},
	{"jobs waiting at the end, holding nothing", func(r *Result) float64 { return float64(r.Waiting) }, 1},
	{"GPU-hours held by partly placed jobs (wasted)", func(r *Result) float64 { return r.WastedGPUHours }, 0},
	{"GPU-hours of running jobs", func(r *Result) float64 { return r.UsedGPUHours }, 0},
	{"mean wait of completed jobs (h)", func(r *Result) float64 { return r.MeanWait.Hours() }, 2},
	{"end: last job ended (h)", func(r *Result) float64 { return r.End.Hours() }, 1},
	{"extender filter calls", func(r *Result) float64 { return float64(r.Filters) }, 1},
}

// WriteMarkdown writes the comparison: each figure's mean ± sd over the seeds in both modes, and
// with perSeed one line per seed and mode.
func WriteMarkdown(w io.Writer, pairs []Pair, perSeed bool) {
	if len(pairs) == 0 {
		return
	}
	r0 := &pairs[0].Results[0]
	fmt.Fprintf(w, "%d seeds; per seed %d jobs, %d of them gangs (mean over seeds %.0f)\n\n", len(pairs), r0.Jobs, r0.Gangs, mean(pairs, 0, func(r *Result) float64 { return float64(r.Gangs) }))
	fmt.Fprintf(w, "| figure (mean ± sd over seeds) | %s | %s |\n|---|---|---|\n", Modes[0], Modes[1])
	for _, rw := range rows {
		fmt.Fprintf(w, "| %s | %s | %s |\n", rw.name, stat(pairs, 0, rw), stat(pairs, 1, rw))
	}
	if !perSeed {
		return
	}
	fmt.Fprintf(w, "\n| seed | mode | completed | gangs completed | deadlocked | cards held by them | wasted GPU-h | pending pods at end | elapsed |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range pairs {
		for i := range p.Results {
			r := &p.Results[i]
			fmt.Fprintf(w, "| %d | %s | %d | %d | %d | %.0f | %.0f | %d | %s |\n", p.Seed, r.Mode, r.Completed, r.GangsCompleted,
				r.Deadlocked, r.DeadlockedGPUs, r.WastedGPUHours, r.PendingPods, r.Elapsed.Round(time.Millisecond))
		}
	}
}

func mean(pairs []Pair, mode int, of func(*Result) float64) float64 {
	var s float64
	for i := range pairs {
		s += of(&pairs[i].Results[mode])
	}
	return s / float64(len(pairs))
}

func stat(pairs []Pair, mode int, rw row) string {
	m := mean(pairs, mode, rw.of)
	if len(pairs) == 1 {
		return fmt.Sprintf("%.*f", rw.prec, m)
	}
	var ss float64
	for i := range pairs {
		d := rw.of(&pairs[i].Results[mode]) - m
		ss += d * d
	}
	return fmt.Sprintf("%.*f ± %.*f", rw.prec, m, rw.prec, math.Sqrt(ss/float64(len(pairs)-1)))
}
