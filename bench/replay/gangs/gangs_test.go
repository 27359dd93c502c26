package gangs

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// twoNodes is two nodes of 8 cards.
func twoNodes() []trace.Node {
	return []trace.Node{
		{Name: "n1", CPUMilli: 64000, MemoryMiB: 262144, GPUs: 8, Model: "G2"},
		{Name: "n2", CPUMilli: 64000, MemoryMiB: 262144, GPUs: 8, Model: "G2"},
	}
}

// deadlockJobs: a lone 4-card pod runs for an hour on one node; then a gang of 2 × 8 cards arrives
// (one node is free: per pod it takes it and waits for the other), then a gang of 3 × 4 cards (per
// pod it takes the 4 cards left, then 4 more when the lone pod ends, and waits for 4 more that
// the first gang holds). Per pod both gangs hold 8 cards each and neither ever runs; all or
// nothing the first gang holds nothing until the second (which fits whole at once) is done.
func deadlockJobs() []Job {
	four := &trace.Pod{Name: "four", CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 4, GPUMilli: 1000}
	eight := &trace.Pod{Name: "eight", CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 8, GPUMilli: 1000}
	return []Job{
		{ID: 0, Row: four, Size: 1, Arrive: 0, Duration: time.Hour},
		{ID: 1, Row: eight, Size: 2, Arrive: time.Minute, Duration: time.Hour},
		{ID: 2, Row: four, Size: 3, Arrive: 2 * time.Minute, Duration: time.Hour},
	}
}

func runMode(t *testing.T, m Mode, nodes []trace.Node, jobs []Job) Result {
	t.Helper()
	res, err := Run(context.Background(), Config{Nodes: nodes, Jobs: jobs, Mode: m,
		NodePolicy: annotations.PolicyFragAware, GPUPolicy: annotations.PolicyFragAware})
	if err != nil {
		t.Fatalf("%s: %v", m, err)
	}
	return res
}

func TestPerPodDeadlocksWhereGroupsComplete(t *testing.T) {
	per := runMode(t, PerPod, twoNodes(), deadlockJobs())
	if per.Completed != 1 || per.Deadlocked != 2 || per.DeadlockedGPUs != 16 || per.PendingPods != 2 || per.Waiting != 0 {
		t.Errorf("per pod: completed %d, deadlocked %d holding %v cards, %d pods pending, %d waiting; want 1, 2 holding 16, 2, 0",
			per.Completed, per.Deadlocked, per.DeadlockedGPUs, per.PendingPods, per.Waiting)
	}
	// The 2 × 8 gang holds 8 cards from minute 1, the 3 × 4 gang 4 from minute 2, until the lone
	// pod ends at 1 h (the last end).
	if want := 8*59.0/60 + 4*58.0/60; math.Abs(per.WastedGPUHours-want) > 1e-9 {
		t.Errorf("per pod: wasted %v GPU-hours, want %v", per.WastedGPUHours, want)
	}
	if per.End != time.Hour {
		t.Errorf("per pod: end %s, want 1h", per.End)
	}

	all := runMode(t, AllOrNothing, twoNodes(), deadlockJobs())
	if all.Completed != 3 || all.GangsCompleted != 2 || all.Deadlocked != 0 || all.PendingPods != 0 || all.WastedGPUHours != 0 {
		t.Errorf("all or nothing: completed %d (%d gangs), deadlocked %d, %d pods pending, %v GPU-hours wasted; want 3 (2), 0, 0, 0",
			all.Completed, all.GangsCompleted, all.Deadlocked, all.PendingPods, all.WastedGPUHours)
	}
	// The 3 × 4 gang runs at once (minute 2 to 1h02); the 2 × 8 gang waits until then and runs an hour.
	if want := 2*time.Hour + 2*time.Minute; all.End != want {
		t.Errorf("all or nothing: end %s, want %s", all.End, want)
	}
	if want := 61 * time.Minute / 3; all.MeanWait != want {
		t.Errorf("all or nothing: mean wait %s, want %s", all.MeanWait, want)
	}
	if want := 4 + 12 + 16.0; all.UsedGPUHours != want {
		t.Errorf("all or nothing: %v GPU-hours used, want %v", all.UsedGPUHours, want)
	}
}

// A gang larger than the cluster never runs either way; per pod it holds what it got.
func TestGangLargerThanClusterHoldsNothingWhole(t *testing.T) {
	eight := &trace.Pod{Name: "eight", CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 8, GPUMilli: 1000}
	jobs := []Job{{ID: 0, Row: eight, Size: 3, Duration: time.Hour}}
	per := runMode(t, PerPod, twoNodes(), jobs)
	if per.Deadlocked != 1 || per.DeadlockedGPUs != 16 || per.PendingPods != 1 {
		t.Errorf("per pod: deadlocked %d holding %v cards, %d pods pending; want 1 holding 16, 1", per.Deadlocked, per.DeadlockedGPUs, per.PendingPods)
	}
	all := runMode(t, AllOrNothing, twoNodes(), jobs)
	if all.Deadlocked != 0 || all.Waiting != 1 || all.PendingPods != 3 || all.Completed != 0 {
		t.Errorf("all or nothing: deadlocked %d, waiting %d, %d pods pending, %d completed; want 0, 1, 3, 0", all.Deadlocked, all.Waiting, all.PendingPods, all.Completed)
	}
}

func TestBuildJobs(t *testing.T) {
	pods := []trace.Pod{
		{Name: "cpu", CPUMilli: 1000, MemoryMiB: 1024},
		{Name: "frac", CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 1, GPUMilli: 500},
		{Name: "whole", CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 2, GPUMilli: 1000},
	}
	c := DefaultJobConfig()
	c.Jobs, c.CapacityGPUs, c.Load = 4000, 100, 0.8
	jobs, err := BuildJobs(pods, c, 7)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := BuildJobs(pods, c, 7)
	other, _ := BuildJobs(pods, c, 8)
	var gangs, wholes int
	var work float64
	sizes := map[int]bool{}
	for i, j := range jobs {
		if j != again[i] {
			t.Fatalf("job %d differs between two draws with one seed: %+v, %+v", i, j, again[i])
		}
		switch j.Row.Name {
		case "cpu":
			t.Fatalf("job %d is a CPU-only row", i)
		case "frac":
			if j.Size != 1 {
				t.Errorf("job %d: a fractional row made a gang of %d", i, j.Size)
			}
		case "whole":
			wholes++
		}
		if j.Gang() {
			gangs++
			sizes[j.Size] = true
			if j.Size < 2 || j.Size > 8 {
				t.Errorf("job %d: gang of %d pods, outside 2-8", i, j.Size)
			}
		}
		if j.Duration < c.MinDuration || j.Duration > c.MaxDuration {
			t.Errorf("job %d: duration %s outside %s-%s", i, j.Duration, c.MinDuration, c.MaxDuration)
		}
		if i > 0 && j.Arrive < jobs[i-1].Arrive {
			t.Errorf("job %d arrives at %s, before job %d (%s)", i, j.Arrive, i-1, jobs[i-1].Arrive)
		}
		work += float64(j.Size) * j.GPUs() * j.Duration.Hours()
	}
	if len(sizes) != 7 {
		t.Errorf("gang sizes drawn: %v, want all of 2-8", sizes)
	}
	if share := float64(gangs) / float64(wholes); math.Abs(share-c.GangShare) > 0.05 {
		t.Errorf("%d gangs of %d whole-card jobs (%.2f), want about %.2f", gangs, wholes, share, c.GangShare)
	}
	// Offered load: the work over the arrival window, per card.
	if load := work / (jobs[len(jobs)-1].Arrive.Hours() * float64(c.CapacityGPUs)); math.Abs(load-c.Load) > 0.05 {
		t.Errorf("offered load %.3f, want about %.2f", load, c.Load)
	}
	if jobs[0] == other[0] && jobs[1] == other[1] && jobs[2] == other[2] {
		t.Error("seeds 7 and 8 drew the same first jobs")
	}
}

func TestBuildJobsRefusesBadConfig(t *testing.T) {
	pods := []trace.Pod{{Name: "whole", NumGPU: 1, GPUMilli: 1000}}
	for _, tc := range []struct {
		edit func(*JobConfig)
		want string
	}{
		{func(c *JobConfig) { c.Jobs = 0 }, "jobs: 0"},
		{func(c *JobConfig) { c.GangShare = 1.5 }, "gang share: 1.5"},
		{func(c *JobConfig) { c.MinGang = 1 }, "gang size: 1-8"},
		{func(c *JobConfig) { c.MaxDuration = time.Minute }, "duration: 10m0s-1m0s"},
		{func(c *JobConfig) { c.Load = 0 }, "load: 0"},
		{func(c *JobConfig) { c.CapacityGPUs = 0 }, "capacity: 0"},
	} {
		c := DefaultJobConfig()
		c.CapacityGPUs = 8
		tc.edit(&c)
		if _, err := BuildJobs(pods, c, 1); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one naming %q", err, tc.want)
		}
	}
	c := DefaultJobConfig()
	c.CapacityGPUs = 8
	if _, err := BuildJobs([]trace.Pod{{Name: "cpu", CPUMilli: 1}}, c, 1); err == nil {
		t.Error("a pod list without GPU rows was accepted")
	}
}

func TestEveryKth(t *testing.T) {
	var nodes []trace.Node
	for i := range 10 {
		nodes = append(nodes, trace.Node{Name: string(rune('a' + i))})
	}
	var got []string
	for _, n := range EveryKth(nodes, 3) {
		got = append(got, n.Name)
	}
	if strings.Join(got, "") != "adgj" {
		t.Errorf("every 3rd of a-j: %v, want a d g j", got)
	}
	if len(EveryKth(nodes, 0)) != 10 || len(EveryKth(nodes, 20)) != 10 {
		t.Error("keep 0 or keep ≥ len should keep every node")
	}
}
