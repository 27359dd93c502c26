// Package scenario runs the speed scenarios of shared/BENCHMARKS.md that need a whole test bed: S2
// (pods per second through a real kube-scheduler, Cardinal against plain kube-scheduler in the same
// run), S3 (many multi-GPU pods at once) and S6 (Node writes in steady state). S1, S4 and S5 are
// the benchmarks of pkg/scheduler, pkg/webhook, test/integration/webhook and pkg/deviceplugin.
//
// Each scenario is a function taking a cluster.TB and a config and returning its figures; the
// Benchmark* functions of this package report them with b.ReportMetric, and bench/ (make bench)
// turns the reports into bench/results/latest.md. Nothing here asserts a number: a scenario fails
// only when it cannot run (a component that does not start, a pod that never binds).
package scenario
