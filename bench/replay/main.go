// Command replay measures Cardinal's placement quality on a GPU cluster trace: it replays the
// Alibaba GPU trace (v2023) through the scheduler's decision core with the policies asked for and
// prints GPU allocation at 100 % and 130 % arrival, the arrival at the first failed GPU pod and the
// fragmentation at 90 % arrival (mean ± sd over seeds). See bench/replay/sim for the protocol.
//
//	go run ./bench/replay --policies binpack,spread/binpack,frag-aware
//
// With --gangs it compares all-or-nothing placement of pod groups with per-pod placement on a
// synthetic gang mix drawn from the trace (bench/replay/gangs).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/cardinal-gpu/cardinal/bench/replay/gangs"
	"github.com/cardinal-gpu/cardinal/bench/replay/sim"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

const traceDir = "testdata/traces/alibaba-gpu-v2023/"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := pflag.NewFlagSet("replay", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: go run ./bench/replay [flags]\n\nReplays a GPU cluster trace through Cardinal's decision core and prints placement quality.\n\nFlags:\n%s", fs.FlagUsages())
	}
	logOpts := logging.Options{}
	logOpts.AddFlags(fs)
	nodes := fs.String("nodes", traceDir+"openb_node_list_gpu_node.csv", "node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
	pods := fs.StringSlice("pods", []string{traceDir + "openb_pod_list_default.csv"}, "pod list CSVs, comma-separated (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]); each is replayed under every policy pair")
	policies := fs.String("policies", "binpack", `policy pairs "node/gpu", comma-separated; a lone name is both (e.g. "binpack,spread/binpack,frag-aware"); "bestfit" is the replay's BestFit baseline (both halves)`)
	seeds := fs.String("seeds", "42-51", "seeds, comma-separated seeds or ranges; each seed shuffles and samples the pods differently")
	arrival := fs.Float64("arrival", 130, "stop arrivals when the GPU they asked for reaches this % of cluster GPU capacity")
	fragAt := fs.Float64("frag-at", 90, "measure fragmentation when arrivals reach this % of cluster GPU capacity")
	cpuPods := fs.StringSlice("cpu-pods", []string{string(sim.CPUPodsLeastAllocated)}, `how CPU-only pods choose a node: "least-allocated" (kube-scheduler's default, without Cardinal), "most-allocated" (a MostAllocated profile), "gpu-tainted" (least-allocated, GPU nodes tainted: only nodes without cards), or "cardinal" (routed to Cardinal: the core places them with the run's policies, bestfit by BestFit); several, comma-separated, replay each and end with a table of them side by side with the published BestFit and FGD figures`)
	scoring := fs.String("scoring", string(sim.ScoringCore), `how GPU pods rank nodes: "core" (the core's unrounded score alone, ties to the smaller node name: the policy comparison) or "kube" (kube-scheduler with the extender and profile as the chart configures them: the extender's rank of the core's scores × --kube-weight × 10, plus the CPU and memory scores with --kube-resource-scores; ties to the smaller node name)`)
	kubeFit := fs.String("kube-fit", string(sim.CPUPodsLeastAllocated), `scoring strategy of kube-scheduler's NodeResourcesFit in the cardinal-scheduler profile (with --scoring=kube --kube-resource-scores): "least-allocated" (the default) or "most-allocated"`)
	kubeWeight := fs.Int("kube-weight", sim.DefaultKubeWeight, "the extender's weight in kube-scheduler's configuration (with --scoring=kube; the chart's scheduler.extender.weight)")
	kubeResources := fs.Bool("kube-resource-scores", false, "keep kube-scheduler's CPU and memory scores in the profile (with --scoring=kube; the chart's scheduler.inTreeResourceScores)")
	numaSplit := fs.Bool("numa-split", true, "synthesise two NUMA nodes on nodes with an even number (4 or more) of cards, half the cards each; false puts every card on NUMA node 0")
	shares := fs.Int("shares", 0, "device IDs per card (annotations.GPU.Shares); 0 picks floor(1000 / smallest fractional gpu_milli), which never limits before memory and compute")
	ignoreHost := fs.Bool("ignore-host", false, "diagnostic, not the protocol: let every pod fit every node's CPU and memory, to see what the GPU placement alone achieves")
	coreHost := fs.Bool("core-host", true, "give the core the nodes' and pods' CPU and memory (NodeState.Host, Pod.Host, the mix's classes); false hides them from it as before it knew them (the replay still checks them)")
	why := fs.Bool("why", false, "diagnostic: after the table, per run, the GPU pods that fit nowhere by kind (cpu, frac, 1, 2, 4, 8 cards; +spec when they name models) and reason (no node had the cards; some had the cards but not the CPU or memory), and where the free GPUs sit at the end by node size")
	blends := fs.StringArray("blend", nil, `replay a blend instead of the pod lists: "kind=weight,...[,spec=p]" resamples the --pods lists together, a kind (cpu, frac, 1, 2, 4, 8) drawn in proportion to its weight (1 when not named), and with spec=p a GPU pod without gpu_spec gets one of the pool's with chance p (see sim.Blend); repeat the flag for several blends`)
	blendRows := fs.Int("blend-rows", 0, "pods per blend; 0 means the pool's rows / the number of --pods lists")
	blendSeed := fs.Uint64("blend-seed", 1, "seed of the blends' draw (the replay's --seeds then shuffle and sample each blend as a pod list)")
	dump := fs.String("dump", "", "with one --blend: also write the blend's pod list to this CSV file, which --pods reads back")
	parallel := fs.Int("parallel", 0, "seeds replayed at once; 0 means GOMAXPROCS")
	format := fs.String("format", string(sim.FormatText), `output: "text" (aligned table) or "markdown"`)
	perSeed := fs.Bool("per-seed", false, "also print one line per seed")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile (pprof) to this file")
	gangMode := fs.Bool("gangs", false, `replay jobs of several pods instead (bench/replay/gangs): each seed draws a job list from the first --pods list (a whole-card row becomes a gang with chance --gang-share, of --gang-size pods; other GPU rows one pod; CPU-only rows left out) and replays it through the extender's Server twice, pods of a gang placed all or nothing (Kueue's pod-group keys) and per pod; prints jobs completed, deadlocked jobs, GPU-hours held by partly placed jobs, pods pending. Uses the first pair of --policies and the --seeds`)
	gangJobs := fs.Int("gang-jobs", gangs.DefaultJobConfig().Jobs, "with --gangs: jobs per seed")
	gangShare := fs.Float64("gang-share", gangs.DefaultJobConfig().GangShare, "with --gangs: the chance a whole-card row becomes a gang")
	gangSize := fs.String("gang-size", "2-8", "with --gangs: a gang's pods, drawn uniformly in this range")
	gangLoad := fs.Float64("gang-load", gangs.DefaultJobConfig().Load, "with --gangs: offered load, the GPU-time the jobs ask for over their arrival window as a fraction of the cluster's cards")
	gangDuration := fs.String("gang-duration", "10m-4h", "with --gangs: a job's run time, drawn log-uniformly in this range (Go durations)")
	gangNodes := fs.Int("gang-nodes", 0, "with --gangs: use every k-th node of the node list by name so that about this many remain (0: all)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	log, err := logging.New(logOpts)
	if err != nil {
		return err
	}
	seedList, err := sim.ParseSeeds(*seeds)
	if err != nil {
		return fmt.Errorf("--seeds: %w", err)
	}
	pairs, err := sim.ParsePairs(*policies)
	if err != nil {
		return fmt.Errorf("--policies: %w", err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *gangMode {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runGangs(ctx, gangFlags{nodes: *nodes, pods: *pods, pair: pairs[0], seeds: seedList, jobs: *gangJobs, share: *gangShare,
			size: *gangSize, load: *gangLoad, duration: *gangDuration, keep: *gangNodes, numaSplit: *numaSplit, shares: *shares, perSeed: *perSeed})
	}
	var protocols []sim.CPUPodPolicy
	for _, p := range *cpuPods {
		protocols = append(protocols, sim.CPUPodPolicy(p))
	}
	if len(protocols) == 0 {
		return errors.New("--cpu-pods is empty")
	}
	var compare []sim.CPUPodPolicy
	if len(protocols) > 1 {
		compare = protocols
	}
	var blendList []sim.Blend
	for _, b := range *blends {
		bl, err := sim.ParseBlend(b)
		if err != nil {
			return fmt.Errorf("--blend: %w", err)
		}
		blendList = append(blendList, bl)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return sim.RunBatch(ctx, sim.BatchConfig{
		NodesFile: *nodes, PodsFiles: *pods, Pairs: pairs,
		Replay: sim.Config{
			Seeds: seedList, Arrival: *arrival / 100, FragAt: *fragAt / 100, CPUPods: protocols[0],
			Scoring: sim.Scoring(*scoring), KubeFit: sim.CPUPodPolicy(*kubeFit), KubeWeight: *kubeWeight, KubeResourceScores: *kubeResources,
			Synthesis: sim.Synthesis{NUMASplit: *numaSplit, Shares: *shares},
			Parallel:  *parallel, IgnoreHost: *ignoreHost, HideHostFromCore: !*coreHost, Why: *why,
		},
		Blends: blendList, BlendRows: *blendRows, BlendSeed: *blendSeed, Dump: *dump,
		Format: sim.Format(*format), PerSeed: *perSeed, Protocols: compare, Log: log,
	}, os.Stdout)
}
