package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cardinal-gpu/cardinal/bench/replay/gangs"
	"github.com/cardinal-gpu/cardinal/bench/replay/sim"
	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// gangFlags are the flags of --gangs.
type gangFlags struct {
	nodes     string
	pods      []string
	pair      [2]annotations.Policy
	seeds     []uint64
	jobs      int
	share     float64
	size      string
	load      float64
	duration  string
	keep      int
	numaSplit bool
	shares    int
	perSeed   bool
}

// runGangs is --gangs: the pod-group replay of bench/replay/gangs, as a markdown table.
func runGangs(ctx context.Context, f gangFlags) error {
	jc := gangs.DefaultJobConfig()
	jc.Jobs, jc.GangShare, jc.Load = f.jobs, f.share, f.load
	var err error
	if jc.MinGang, jc.MaxGang, err = gangs.ParseSizes(f.size); err != nil {
		return fmt.Errorf("--gang-size: %w", err)
	}
	if jc.MinDuration, jc.MaxDuration, err = gangs.ParseDurations(f.duration); err != nil {
		return fmt.Errorf("--gang-duration: %w", err)
	}
	if f.keep < 0 {
		return fmt.Errorf("--gang-nodes: %d is negative", f.keep)
	}
	nodes, err := trace.LoadNodes(f.nodes)
	if err != nil {
		return err
	}
	nodes = gangs.EveryKth(sim.SortedNodes(nodes), f.keep)
	if len(f.pods) == 0 {
		return fmt.Errorf("--pods is empty")
	}
	pods, err := trace.LoadPods(f.pods[0])
	if err != nil {
		return err
	}
	start := time.Now()
	pairs, err := gangs.RunBatch(ctx, gangs.Batch{Nodes: nodes, Pods: pods, Jobs: jc, Seeds: f.seeds, NodePolicy: f.pair[0], GPUPolicy: f.pair[1],
		Synthesis: sim.Synthesis{NUMASplit: f.numaSplit, Shares: f.shares}})
	if err != nil {
		return err
	}
	cards := 0
	for i := range nodes {
		cards += nodes[i].GPUs
	}
	fmt.Printf("Pod groups: all-or-nothing vs per-pod. Cluster: %d nodes, %d cards (%s). Pods: %s. Policies %s/%s. Jobs: %d per seed, gang share %.2f of whole-card rows, gang size %s, run time %s log-uniform, offered load %.2f.\n\n",
		len(nodes), cards, f.nodes, f.pods[0], f.pair[0], f.pair[1], jc.Jobs, jc.GangShare, f.size, f.duration, jc.Load)
	gangs.WriteMarkdown(os.Stdout, pairs, f.perSeed)
	fmt.Printf("\nwall time %s\n", time.Since(start).Round(time.Second))
	return nil
}
