package scenario

import (
	"fmt"
	"time"
)

// Size names a set of scenario sizes.
type Size string

const (
	// SizeTiny is the smoke test's: every scenario runs end to end in seconds.
	SizeTiny Size = "tiny"
	// SizeSmall finishes in a few minutes; CI can run it to check the benchmarks still run.
	SizeSmall Size = "small"
	// SizeFull is shared/BENCHMARKS.md's.
	SizeFull Size = "full"
)

// Params are the sizes of every scenario.
type Params struct {
	S2 S2Config
	// S2Scale are the node and pod counts S2 also runs at (BenchmarkS2Scale), each as S2 otherwise:
	// the shape of the cost as the cluster grows.
	S2Scale []S2Shape
	S3      S3Config
	S6      S6Config
}

// ParamsFor returns the sizes of s.
func ParamsFor(s Size) (Params, error) {
	// S3 is BENCHMARKS.md's at every size but tiny: it is small already.
	s3 := S3Config{Nodes: 8, GPUsPerNode: 8, Pods: 64, GPUsPerPod: 2, Idle: time.Minute}
	switch s {
	case SizeTiny:
		return Params{
			S2:      S2Config{Nodes: 10, GPUsPerNode: 8, Pods: 20, CreateWorkers: 4, Idle: time.Minute, Shortlist: -1, ScorePercent: -1},
			S2Scale: []S2Shape{{Nodes: 5, Pods: 10}, {Nodes: 20, Pods: 20}},
			S3:      S3Config{Nodes: 2, GPUsPerNode: 8, Pods: 10, GPUsPerPod: 2, Idle: time.Minute},
			S6:      S6Config{Nodes: 4, GPUsPerNode: 8, Plugins: 2, Pods: 4, Settle: time.Second, Window: 2 * time.Second},
		}, nil
	case SizeSmall:
		return Params{
			S2:      S2Config{Nodes: 100, GPUsPerNode: 8, Pods: 500, CreateWorkers: 32, Idle: time.Minute, Shortlist: -1, ScorePercent: -1},
			S2Scale: []S2Shape{{Nodes: 500, Pods: 1000}},
			S3:      s3,
			S6:      S6Config{Nodes: 100, GPUsPerNode: 8, Plugins: 5, Pods: 100, Settle: 5 * time.Second, Window: 30 * time.Second},
		}, nil
	case SizeFull:
		return Params{
			S2: S2Config{Nodes: 1000, GPUsPerNode: 8, Pods: 5000, CreateWorkers: 64, Idle: 2 * time.Minute, Shortlist: -1, ScorePercent: -1},
			// 100 nodes hold 800 cards: 800 pods. 5000 nodes: issue 39's second size, same pods.
			S2Scale: []S2Shape{{Nodes: 100, Pods: 800}, {Nodes: 5000, Pods: 5000}},
			S3:      s3,
			S6:      S6Config{Nodes: 1000, GPUsPerNode: 8, Plugins: 50, Pods: 1000, Settle: 20 * time.Second, Window: 10 * time.Minute},
		}, nil
	}
	return Params{}, fmt.Errorf("unknown size %q (want %s, %s or %s)", s, SizeTiny, SizeSmall, SizeFull)
}

// S2Shape is a node and pod count S2 runs at.
type S2Shape struct{ Nodes, Pods int }
