// Package gangs replays jobs of several pods (gangs) through Cardinal's extender, in process, and
// compares all-or-nothing placement of pod groups with plain per-pod placement on the same cluster
// and the same arrivals (issue 38).
//
// The Alibaba GPU trace (v2023) has no job column: every row is one pod, and nothing says which
// pods belong together. The gang mix is therefore synthetic, drawn from the trace's rows by a
// stated, seeded rule (BuildJobs): a whole-card GPU row becomes a gang of 2–8 replicas of itself
// with chance GangShare, any other GPU row a job of one pod; CPU-only rows are left out.
//
// Both modes drive the extender's own Server (pkg/scheduler: Filter, Prioritize and Bind, the
// calls kube-scheduler makes, with a Binding the replay commits as the API server would): with
// all-or-nothing the members of a gang carry Kueue's pod-group keys and the extender's group
// planner places them; per pod they carry none and each member is placed as a lone pod. See Run.
package gangs

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
)

// JobConfig is the rule that makes jobs from a trace's pod rows.
type JobConfig struct {
	// Jobs is how many jobs to draw.
	Jobs int
	// GangShare is the chance that a whole-card GPU row (gpu_milli 1000) becomes a gang.
	GangShare float64
	// MinGang and MaxGang bound a gang's pods (drawn uniformly between them).
	MinGang, MaxGang int
	// MinDuration and MaxDuration bound a job's run time once all its pods run (drawn
	// log-uniformly between them).
	MinDuration, MaxDuration time.Duration
	// Load is the offered load: the GPU-time the jobs ask for over the window in which they
	// arrive, as a fraction of the cluster's cards over that window.
	Load float64
	// CapacityGPUs is the cluster's cards (for Load).
	CapacityGPUs int
}

// DefaultJobConfig is the mix the recorded run uses (bench/results/gangs-*.md).
func DefaultJobConfig() JobConfig {
	return JobConfig{Jobs: 2000, GangShare: 0.5, MinGang: 2, MaxGang: 8, MinDuration: 10 * time.Minute,
		MaxDuration: 4 * time.Hour, Load: 1.0}
}

func (c *JobConfig) validate() error {
	var errs []error
	if c.Jobs <= 0 {
		errs = append(errs, fmt.Errorf("jobs: %d is not positive", c.Jobs))
	}
	if c.GangShare < 0 || c.GangShare > 1 || math.IsNaN(c.GangShare) {
		errs = append(errs, fmt.Errorf("gang share: %v is not between 0 and 1", c.GangShare))
	}
	if c.MinGang < 2 || c.MaxGang < c.MinGang {
		errs = append(errs, fmt.Errorf("gang size: %d-%d is not a range of at least 2 pods", c.MinGang, c.MaxGang))
	}
	if c.MinDuration <= 0 || c.MaxDuration < c.MinDuration {
		errs = append(errs, fmt.Errorf("duration: %s-%s is not a positive range", c.MinDuration, c.MaxDuration))
	}
	if !(c.Load > 0) || math.IsInf(c.Load, 0) {
		errs = append(errs, fmt.Errorf("load: %v is not positive", c.Load))
	}
	if c.CapacityGPUs <= 0 {
		errs = append(errs, fmt.Errorf("capacity: %d cards is not positive", c.CapacityGPUs))
	}
	return errors.Join(errs...)
}

// Job is one job: Size replicas of one trace row.
type Job struct {
	ID int
	// Row is the trace row each of the job's pods asks for.
	Row *trace.Pod
	// Size is the job's pods; a gang has 2 or more.
	Size int
	// Arrive is when the job's pods are created; Duration how long the job runs once all its
	// pods run.
	Arrive, Duration time.Duration
}

// Gang reports whether the job has several pods.
func (j *Job) Gang() bool { return j.Size > 1 }

// GPUs is what one pod of the job holds, in cards (a fraction for a fractional row).
func (j *Job) GPUs() float64 { return float64(j.Row.GPUMilliTotal()) / trace.MilliPerGPU }

// BuildJobs draws c.Jobs jobs from the GPU rows of pods with the seed: each job takes a row drawn
// uniformly (with replacement); a whole-card row becomes a gang of MinGang..MaxGang replicas with
// chance GangShare, any other row a job of one pod. Each job runs for a duration drawn
// log-uniformly in [MinDuration, MaxDuration]. Jobs arrive as a Poisson stream whose rate makes
// the offered GPU-time Load × the cluster's cards over the arrival window. CPU-only rows are left
// out: they do not go through Cardinal's cards.
func BuildJobs(pods []trace.Pod, c JobConfig, seed uint64) ([]Job, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	var rows []*trace.Pod
	for i := range pods {
		if pods[i].NumGPU > 0 {
			rows = append(rows, &pods[i])
		}
	}
	if len(rows) == 0 {
		return nil, errors.New("jobs: no pod row asks for a GPU")
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc908))
	jobs := make([]Job, c.Jobs)
	lo, hi := math.Log(float64(c.MinDuration)), math.Log(float64(c.MaxDuration))
	var work float64 // GPU-nanoseconds asked for
	for i := range jobs {
		row := rows[rng.IntN(len(rows))]
		size := 1
		if row.GPUMilli == trace.MilliPerGPU && rng.Float64() < c.GangShare {
			size = c.MinGang + rng.IntN(c.MaxGang-c.MinGang+1)
		}
		d := time.Duration(math.Exp(lo + rng.Float64()*(hi-lo)))
		jobs[i] = Job{ID: i, Row: row, Size: size, Duration: d}
		work += float64(size) * jobs[i].GPUs() * float64(d)
	}
	window := work / (c.Load * float64(c.CapacityGPUs))
	mean := window / float64(len(jobs))
	var at float64
	for i := range jobs {
		at += rng.ExpFloat64() * mean
		jobs[i].Arrive = time.Duration(at)
	}
	return jobs, nil
}

// EveryKth keeps every k-th node of nodes (k = len/keep, rounded down, at least 1), so that about
// keep remain in the list's proportions of models and sizes; keep 0 keeps all.
func EveryKth(nodes []trace.Node, keep int) []trace.Node {
	if keep <= 0 || keep >= len(nodes) {
		return nodes
	}
	k := len(nodes) / keep
	var out []trace.Node
	for i := 0; i < len(nodes); i += k {
		out = append(out, nodes[i])
	}
	return out
}

// ParseSizes reads a range of gang sizes, "2-8", or one size, "4" (the --gang-size flag). The
// range itself is checked by BuildJobs.
func ParseSizes(s string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if !isRange {
		b = a
	}
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("gang size %q: want a whole number or a range such as 2-8", s)
	}
	return lo, hi, nil
}

// ParseDurations reads a range of run times, "10m-4h", or one, "1h" (the --gang-duration flag), in
// Go's duration syntax. The range itself is checked by BuildJobs.
func ParseDurations(s string) (lo, hi time.Duration, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if !isRange {
		b = a
	}
	lo, err1 := time.ParseDuration(strings.TrimSpace(a))
	hi, err2 := time.ParseDuration(strings.TrimSpace(b))
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("run time %q: want a duration or a range such as 10m-4h", s)
	}
	return lo, hi, nil
}
