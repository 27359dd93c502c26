package scenario

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/scheduler"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// S2Config sizes S2: Nodes API-only nodes of GPUsPerNode cards, Pods one-GPU pods.
type S2Config struct {
	Nodes       int
	GPUsPerNode int
	Pods        int
	// CreateWorkers is how many clients create the pods at once.
	CreateWorkers int
	// Idle is how long a phase waits without a new binding before it gives up.
	Idle time.Duration
	// ProfileDir, when set, receives a CPU profile of each phase's kube-scheduler and kube-apiserver
	// over the phase's first ProfileFor (kube-scheduler-<phase>.pprof, kube-apiserver-<phase>.pprof;
	// symbolize with the pinned binaries).
	ProfileDir string
	ProfileFor time.Duration
	// Shortlist, when not negative, is the extender's --filter-shortlist (else its default).
	Shortlist int
	// ScorePercent, when not negative, is the profile's percentageOfNodesToScore (0: kube-scheduler's
	// adaptive default); else the chart's.
	ScorePercent int
	// PlainScorePercent, when positive, is plain kube-scheduler's percentageOfNodesToScore (else
	// its adaptive default), to compare both at the chart's 100.
	PlainScorePercent int
}

// S2Phase is one scheduler's run of S2.
type S2Phase struct {
	// Scheduler is "plain" (default profile, nvidia.com/gpu as an extended resource) or "cardinal"
	// (the chart's profile and extender, pods mutated by the webhook).
	Scheduler string
	Pods      int
	Bound     int
	// Create is how long creating the backlog took (before the scheduler started).
	Create time.Duration
	// PodsPerSecond is Bound-1 bindings over the time from the first to the last binding.
	PodsPerSecond float64
	// AllBound is the time from starting kube-scheduler to the last binding (start-up included).
	AllBound time.Duration
	// AttemptP50 and AttemptP99 are kube-scheduler's scheduler_scheduling_attempt_duration_seconds
	// for result "scheduled" (interpolated in its buckets, as histogram_quantile does).
	AttemptP50, AttemptP99 time.Duration
	// AlgorithmP99 is kube-scheduler's scheduler_scheduling_algorithm_duration_seconds p99: filter
	// and score (the extender's filter and prioritize calls included), without the binding cycle.
	AlgorithmP99 time.Duration
	// Attempts counts scheduling attempts by result (scheduled, unschedulable, error).
	Attempts map[string]float64
	// CPU is the CPU time each component used during the phase (from its start to the last
	// binding): "kube-apiserver", "etcd", "kube-scheduler", and "cardinal" (this process: the
	// in-process extender and webhook, and the scenario's own watch).
	CPU map[string]time.Duration
}

// S2Result is both phases of one run and their ratio.
type S2Result struct {
	Plain, Cardinal S2Phase
	// Ratio is Cardinal's pods/s over plain kube-scheduler's.
	Ratio float64
}

// S2 runs S2 of BENCHMARKS.md: on one test bed of cfg.Nodes API-only nodes, first plain
// kube-scheduler, then Cardinal (webhook, extender, the chart's scheduler profile), each scheduling
// a backlog of cfg.Pods one-GPU pods created before its kube-scheduler starts, so pods/s measures
// the scheduler and not the creation rate. The pods of the first phase are deleted before the
// second. Both kube-schedulers get the same client QPS (schedulerClientQPS).
func S2(t cluster.TB, cfg S2Config) S2Result {
	t.Helper()
	b := startBed(t)
	if err := b.addNodes(cfg.Nodes, cfg.GPUsPerNode, nil); err != nil {
		t.Fatalf("nodes: %v", err)
	}
	w, err := watchBindings(b.fast)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer w.stop()

	var res S2Result
	var plain map[string]any
	if cfg.PlainScorePercent > 0 {
		plain = map[string]any{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
			"percentageOfNodesToScore": cfg.PlainScorePercent}
	}
	res.Plain = s2Phase(t, b, w, cfg, "plain", func() *kubeScheduler { return b.startKubeScheduler(t, "kube-scheduler-plain", plain) })
	b.deletePods(t)
	w.reset()

	b.startWebhook(t)
	url := b.startExtender(t, nil, func(c *scheduler.Config) {
		if cfg.Shortlist >= 0 {
			c.FilterShortlist = cfg.Shortlist
		}
		t.Logf("S2 cardinal: --filter-shortlist=%d, percentageOfNodesToScore %d (-1: the chart's); plain %d (0: adaptive)",
			c.FilterShortlist, cfg.ScorePercent, cfg.PlainScorePercent)
	})
	var set []string
	if cfg.ScorePercent >= 0 {
		set = append(set, "scheduler.percentageOfNodesToScore="+itoa(cfg.ScorePercent))
	}
	config := chartSchedulerConfig(t, url, set...)
	res.Cardinal = s2Phase(t, b, w, cfg, "cardinal", func() *kubeScheduler { return b.startKubeScheduler(t, "kube-scheduler-cardinal", config) })
	if res.Plain.PodsPerSecond > 0 {
		res.Ratio = res.Cardinal.PodsPerSecond / res.Plain.PodsPerSecond
	}
	return res
}

func s2Phase(t cluster.TB, b *bed, w *bindings, cfg S2Config, name string, start func() *kubeScheduler) S2Phase {
	t.Helper()
	ph := S2Phase{Scheduler: name, Pods: cfg.Pods}
	var err error
	ph.Create, err = b.createPods(cfg.Pods, cfg.CreateWorkers, func(i int) *corev1.Pod { return gpuPod(name+"-"+itoa(i), "", 1) })
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if name == "cardinal" {
		// The webhook, not the pod author, chose Cardinal's scheduler.
		p, err := b.fast.CoreV1().Pods(Namespace).Get(context.Background(), name+"-0", metav1.GetOptions{})
		if err != nil || p.Spec.SchedulerName != CardinalScheduler {
			t.Fatalf("pod %s-0 was not sent to %s by the webhook (%v)", name, CardinalScheduler, err)
		}
	}
	counts := b.apiServerCounts(t)
	cpu := b.cpuMeter()
	started := time.Now()
	var selfProfile *os.File
	if cfg.ProfileDir != "" && pprof.Lookup("goroutine") != nil {
		// This process: the harness's watch, and in Cardinal's phase the webhook and the extender.
		f, err := os.Create(filepath.Join(cfg.ProfileDir, "process-"+name+".pprof"))
		if err == nil && pprof.StartCPUProfile(f) == nil {
			selfProfile = f
		} else if f != nil {
			f.Close()
		}
	}
	ks := start()
	cpu.add("kube-scheduler", ks.Pid())
	profiled := make(chan error, 2)
	if cfg.ProfileDir != "" {
		go func() {
			profiled <- ks.profile(filepath.Join(cfg.ProfileDir, "kube-scheduler-"+name+".pprof"), cfg.ProfileFor)
		}()
		go func() {
			profiled <- b.profileAPIServer(filepath.Join(cfg.ProfileDir, "kube-apiserver-"+name+".pprof"), cfg.ProfileFor)
		}()
	} else {
		profiled <- nil
		profiled <- nil
	}
	ph.Bound = w.waitBound(cfg.Pods, cfg.Idle)
	times := w.boundTimes()
	if len(times) > 0 {
		ph.AllBound = times[len(times)-1].Sub(started)
	}
	if len(times) > 1 {
		ph.PodsPerSecond = float64(len(times)-1) / times[len(times)-1].Sub(times[0]).Seconds()
	}
	ph.CPU = cpu.used()
	if selfProfile != nil {
		pprof.StopCPUProfile()
		selfProfile.Close()
		// Allocations so far (this phase and those before it): where the collector's work comes from.
		if f, err := os.Create(filepath.Join(cfg.ProfileDir, "process-allocs-"+name+".pprof")); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
	t.Logf("S2 %s: apiserver requests and watch events in the phase: %s", name, b.apiServerCounts(t).since(counts))
	if p, err := b.fast.CoreV1().Pods(Namespace).Get(context.Background(), name+"-0", metav1.GetOptions{}); err == nil {
		keys := make([]string, 0, len(p.Annotations))
		for k := range p.Annotations {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Logf("S2 %s: a bound pod is %d bytes in protobuf (%d of them managed fields, %d managers); annotations %v",
			name, p.Size(), p.Size()-func() int { q := p.DeepCopy(); q.ManagedFields = nil; return q.Size() }(), len(p.ManagedFields), keys)
	}
	// kube-scheduler records some metrics asynchronously: wait until they count every binding. A
	// timeout says what was last seen: the count, or why /metrics could not be read.
	var ms Metrics
	var last error
	for deadline := time.Now().Add(readyTimeout); ; time.Sleep(100 * time.Millisecond) {
		text, err := ks.metrics()
		if err == nil {
			if ms, err = ParseMetrics(text); err != nil {
				t.Fatalf("%s's metrics: %v", name, err)
			}
			scheduled := ms.Sum("scheduler_schedule_attempts_total", map[string]string{"result": "scheduled"})
			if scheduled >= float64(ph.Bound) {
				break
			}
			err = fmt.Errorf("scheduler_schedule_attempts_total{result=scheduled} = %v, %d pods bound", scheduled, ph.Bound)
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s's metrics to count every binding: timed out after %s; last seen: %v; scheduler log tail:\n%s",
				name, readyTimeout, last, ks.Tail(30))
		}
	}
	h := ms.Histogram("scheduler_scheduling_attempt_duration_seconds", map[string]string{"result": "scheduled"})
	ph.AttemptP50 = seconds(Quantile(0.50, h))
	ph.AttemptP99 = seconds(Quantile(0.99, h))
	ph.AlgorithmP99 = seconds(Quantile(0.99, ms.Histogram("scheduler_scheduling_algorithm_duration_seconds", nil)))
	ph.Attempts = map[string]float64{}
	for _, r := range []string{"scheduled", "unschedulable", "error"} {
		ph.Attempts[r] = ms.Sum("scheduler_schedule_attempts_total", map[string]string{"result": r})
	}
	for range 2 {
		if err := <-profiled; err != nil {
			t.Errorf("%s: profile: %v", name, err)
		}
	}
	ks.Stop()
	if ph.Bound < cfg.Pods {
		t.Fatalf("%s: %d of %d pods bound; nothing new bound for %s (attempts %v); scheduler log tail:\n%s",
			name, ph.Bound, cfg.Pods, cfg.Idle, ph.Attempts, ks.Tail(30))
	}
	t.Logf("S2 %s: %d pods bound at %.1f pods/s (created in %s), all bound %s after start, attempt p50 %s p99 %s, algorithm p99 %s, attempts %v, CPU %v",
		name, ph.Bound, ph.PodsPerSecond, ph.Create.Round(time.Millisecond), ph.AllBound.Round(time.Millisecond), ph.AttemptP50, ph.AttemptP99, ph.AlgorithmP99, ph.Attempts, ph.CPU)
	return ph
}

// profileAPIServer writes a CPU profile of the next d of kube-apiserver to path (its
// /debug/pprof, read with the admin client).
func (b *bed) profileAPIServer(path string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	raw, err := b.fast.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", itoa(int(d.Seconds()))).Timeout(d + time.Minute).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("kube-apiserver profile: %w", err)
	}
	return os.WriteFile(path, raw, 0o644)
}

// seconds turns a float of seconds into a duration; NaN is 0.
func seconds(s float64) time.Duration {
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// String is a one-line summary.
func (r S2Result) String() string {
	return fmt.Sprintf("plain %.1f pods/s, cardinal %.1f pods/s, ratio %.2f", r.Plain.PodsPerSecond, r.Cardinal.PodsPerSecond, r.Ratio)
}
