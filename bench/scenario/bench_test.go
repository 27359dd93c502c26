package scenario

import (
	"flag"
	"fmt"
	"testing"
	"time"
)

// Flags of the benchmarks; make bench sets them (BENCH_SIZE, BENCH_S6_WINDOW).
var (
	sizeFlag     = flag.String("size", string(SizeSmall), "scenario sizes: tiny, small or full")
	s6WindowFlag = flag.Duration("s6-window", 0, "S6's steady-state window; 0 keeps the size's")
	s2ProfileDir = flag.String("s2-profile-dir", "", "when set, S2 writes a CPU profile of each phase's kube-scheduler here")
	s2ProfileFor = flag.Duration("s2-profile-for", 20*time.Second, "how long S2 profiles each kube-scheduler, from its start")
	s2Shortlist  = flag.Int("s2-shortlist", -1, "S2's extender --filter-shortlist; negative keeps the extender's default")
	s2Percent    = flag.Int("s2-score-percent", -1, "S2's percentageOfNodesToScore (0: adaptive); negative keeps the chart's")
	s2PlainPct   = flag.Int("s2-plain-score-percent", 0, "plain kube-scheduler's percentageOfNodesToScore in S2; 0 keeps its adaptive default")
	s2Nodes      = flag.Int("s2-nodes", 0, "S2's node count; 0 keeps the size's")
	s2Pods       = flag.Int("s2-pods", 0, "S2's pod count; 0 keeps the size's")
)

func params(b *testing.B) Params {
	b.Helper()
	p, err := ParamsFor(Size(*sizeFlag))
	if err != nil {
		b.Fatal(err)
	}
	if *s6WindowFlag > 0 {
		p.S6.Window = *s6WindowFlag
	}
	p.S2.ProfileDir, p.S2.ProfileFor = *s2ProfileDir, *s2ProfileFor
	p.S2.Shortlist, p.S2.ScorePercent, p.S2.PlainScorePercent = *s2Shortlist, *s2Percent, *s2PlainPct
	if *s2Nodes > 0 {
		p.S2.Nodes = *s2Nodes
	}
	if *s2Pods > 0 {
		p.S2.Pods = *s2Pods
	}
	return p
}

// BenchmarkS2 reports pods/s of plain kube-scheduler and of Cardinal in one run, their ratio and
// kube-scheduler's scheduling-attempt p99 for both. Run with -benchtime 1x.
func BenchmarkS2(b *testing.B) {
	p := params(b)
	reportS2(b, p.S2)
}

// BenchmarkS2Scale is S2 at each of the size's other node counts (Params.S2Scale), one
// sub-benchmark per count, named nodes=N. Run with -benchtime 1x.
func BenchmarkS2Scale(b *testing.B) {
	p := params(b)
	for _, sh := range p.S2Scale {
		cfg := p.S2
		cfg.Nodes, cfg.Pods = sh.Nodes, sh.Pods
		b.Run(fmt.Sprintf("nodes=%d", sh.Nodes), func(b *testing.B) { reportS2(b, cfg) })
	}
}

func reportS2(b *testing.B, cfg S2Config) {
	var r S2Result
	for range b.N {
		r = S2(b, cfg)
	}
	for _, ph := range []S2Phase{r.Plain, r.Cardinal} {
		b.ReportMetric(ph.PodsPerSecond, ph.Scheduler+"-pods/s")
		b.ReportMetric(ms(ph.AttemptP50), ph.Scheduler+"-attempt-p50-ms")
		b.ReportMetric(ms(ph.AttemptP99), ph.Scheduler+"-attempt-p99-ms")
		b.ReportMetric(ph.AllBound.Seconds(), ph.Scheduler+"-all-bound-s")
		b.ReportMetric(ph.Attempts["error"], ph.Scheduler+"-attempt-errors")
		b.ReportMetric(ms(ph.AlgorithmP99), ph.Scheduler+"-algorithm-p99-ms")
		for comp, d := range ph.CPU {
			b.ReportMetric(d.Seconds(), ph.Scheduler+"-cpu-"+comp+"-s")
		}
	}
	b.ReportMetric(r.Ratio, "ratio")
	b.ReportMetric(float64(cfg.Nodes), "nodes")
	b.ReportMetric(float64(cfg.Pods), "pods")
}

// BenchmarkS3 reports the time from the first create to the last fitting pod bound, and the bind
// errors. Run with -benchtime 1x.
func BenchmarkS3(b *testing.B) {
	p := params(b)
	var r S3Result
	for range b.N {
		r = S3(b, p.S3)
	}
	b.ReportMetric(r.AllBound.Seconds(), "all-bound-s")
	b.ReportMetric(float64(r.BindErrors), "bind-errors")
	b.ReportMetric(float64(r.Bound), "bound")
	b.ReportMetric(float64(r.Pods), "pods")
	b.ReportMetric(float64(r.Unschedulable), "unschedulable-events")
	b.ReportMetric(float64(r.DoubleBooked), "double-booked")
	b.ReportMetric(float64(p.S3.Nodes), "nodes")
	b.ReportMetric(float64(p.S3.GPUsPerNode), "gpus/node")
	b.ReportMetric(float64(p.S3.GPUsPerPod), "gpus/pod")
}

// BenchmarkS6 reports Node writes by Cardinal per minute in steady state, scaled to every node.
// Run with -benchtime 1x.
func BenchmarkS6(b *testing.B) {
	p := params(b)
	var r S6Result
	for range b.N {
		r = S6(b, p.S6)
	}
	b.ReportMetric(r.NodeWritesPerMinute, "node-writes/min")
	b.ReportMetric(float64(r.NodeWrites), "node-writes")
	b.ReportMetric(float64(r.PodWrites), "pod-writes")
	b.ReportMetric(r.APIServerNodeWrites, "apiserver-node-writes")
	b.ReportMetric(float64(r.StartupNodeWrites), "startup-node-writes")
	b.ReportMetric(r.Window.Seconds(), "window-s")
	b.ReportMetric(float64(r.Nodes), "nodes")
	b.ReportMetric(float64(r.Plugins), "plugins")
}
