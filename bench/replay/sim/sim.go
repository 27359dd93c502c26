// Package sim replays a GPU cluster trace through Cardinal's decision core (pkg/scheduler/core), the
// same functions the extender calls: the protocol of Weng et al. (USENIX ATC 2023) and its
// simulator, as BENCHMARKS.md ("Placement quality") describes it.
//
// For each seed the trace's pods are shuffled, then drawn with replacement, until the GPU they ask
// for reaches Arrival (130 %) of the cluster's cards; they arrive one at a time and never leave. A GPU
// pod goes where Cardinal would put it: kube-scheduler's part (CPU and memory fit) first, then
// core.Pod.Fit and core.Pod.Score on every remaining node with the pod's node and card policies,
// the best by core.Candidate.Better (higher score, then the smaller node name). A CPU-only pod goes
// where kube-scheduler's resource scoring would put it, or, with CPUPodsCardinal, through the core
// like a GPU pod, as the extender places the CPU-only pods routed to it (see CPUPodPolicy). The
// pseudo-policy PolicyBestFit ranks nodes by the replay's own BestFit score instead of the core's.
// A pod that fits nowhere is dropped.
//
// Nodes whose cards are in the same state (model, and what is held on every card, card by card)
// get the same Fit and Score, so the replay asks the core once per distinct state, on the state's
// first node (by name) that passes CPU and memory. The choice is exactly the one a node-by-node
// loop makes (TestGroupedEqualsNodeByNode checks it); it is only faster.
package sim

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// CPUPodPolicy is how CPU-only pods, which kube-scheduler places without Cardinal, choose a node.
type CPUPodPolicy string

const (
	// CPUPodsLeastAllocated is kube-scheduler's default (NodeResourcesFit LeastAllocated): the node
	// with the most CPU and memory left after the pod, as a fraction of its capacity, averaged.
	CPUPodsLeastAllocated CPUPodPolicy = "least-allocated"
	// CPUPodsMostAllocated is NodeResourcesFit MostAllocated: the node with the least left.
	CPUPodsMostAllocated CPUPodPolicy = "most-allocated"
	// CPUPodsGPUTainted is least-allocated with every GPU node tainted (the README's taint without
	// the opt-in): CPU-only pods go only to nodes without cards, and fail where there are none.
	CPUPodsGPUTainted CPUPodPolicy = "gpu-tainted"
	// CPUPodsCardinal routes CPU-only pods to Cardinal: the core decides them with the run's
	// policies (core.Pod.Fit and Score of a pod whose request has no GPU container, with its CPU and
	// memory as Pod.Host), scored and ranked as GPU pods are (Scoring). Under PolicyBestFit they go
	// by BestFit too. This is the protocol of the published BestFit and FGD figures, whose simulator
	// places every pod, CPU-only ones included, with the policy under test.
	CPUPodsCardinal CPUPodPolicy = "cardinal"
)

// PolicyBestFit is not a Cardinal policy but the replay's baseline, as Weng et al. define BestFit:
// the node with the least resources left after the pod, a weighted sum of free GPU and free CPU,
// each as a share of the largest node's (bestFitGPUWeight, bestFitCPUWeight, bestFitMemWeight; the
// weights of the authors' simulator, which leaves memory out). Inside the node the cards are
// binpack's. Named in a policy pair it must be both halves ("bestfit").
const PolicyBestFit annotations.Policy = "bestfit"

// BestFit's weights.
const (
	bestFitGPUWeight = 0.5
	bestFitCPUWeight = 0.5
	bestFitMemWeight = 0.0
)

// Scoring is how a GPU pod's candidate nodes are ranked.
type Scoring string

const (
	// ScoringKube ranks nodes as kube-scheduler does with Cardinal's extender and profile as the
	// chart configures them: the extender answers core.Rank of the core's scores over the candidate
	// nodes (0..10), which kube-scheduler weighs × KubeWeight × 10; with KubeResourceScores the
	// profile's NodeResourcesFit (KubeFit) and NodeResourcesBalancedAllocation scores (0..100 each,
	// CPU and memory, weight 1) are added. Ties go to the smaller node name (kube-scheduler picks
	// one of the tied nodes at random).
	ScoringKube Scoring = "kube"
	// ScoringCore ranks nodes by the core's score alone, unrounded.
	ScoringCore Scoring = "core"
)

// DefaultKubeWeight is the extender weight the chart configures (scheduler.extender.weight).
const DefaultKubeWeight = 25

// Config is one replay: a cluster, a pod list, the policies and the seeds.
type Config struct {
	// Nodes and Pods are the trace's node and pod lists.
	Nodes []trace.Node
	Pods  []trace.Pod
	// NodePolicy and GPUPolicy are the Decider's defaults (no trace pod names its own).
	NodePolicy annotations.Policy
	GPUPolicy  annotations.Policy
	// Seeds to run, one replay each.
	Seeds []uint64
	// Arrival is where arrivals stop, as a fraction of cluster GPU capacity (1.3).
	Arrival float64
	// FragAt is the arrival fraction at which fragmentation is measured (0.9).
	FragAt float64
	// CPUPods places CPU-only pods.
	CPUPods CPUPodPolicy
	// Scoring ranks candidate nodes of GPU pods.
	Scoring Scoring
	// KubeFit is the scoring strategy of NodeResourcesFit in the cardinal-scheduler profile
	// (ScoringKube with KubeResourceScores only): least-allocated (kube-scheduler's default) or most-allocated.
	KubeFit CPUPodPolicy
	// KubeWeight is the extender's weight in kube-scheduler's configuration (ScoringKube only; the
	// chart's scheduler.extender.weight; 0 means DefaultKubeWeight).
	KubeWeight int
	// KubeResourceScores keeps kube-scheduler's CPU and memory scores in the profile (ScoringKube
	// only; the chart's scheduler.inTreeResourceScores, off by default).
	KubeResourceScores bool
	// Synthesis fills in what the node list lacks; Shares 0 means SharesFor(Pods).
	Synthesis Synthesis
	// Parallel is how many seeds run at once; 0 means GOMAXPROCS.
	Parallel int
	// IgnoreHost drops CPU and memory from the replay (every pod fits every node's CPU and memory):
	// a diagnostic that shows what the GPU placement alone achieves, not the protocol.
	IgnoreHost bool
	// HideHostFromCore keeps nodes' and pods' CPU and memory from the core (as before the core knew
	// them: NodeState.Host unknown, Pod.Host and the mix's host requests zero); the replay still
	// checks CPU and memory itself. By default the core sees them: NodeState.SetHost with the node's
	// cpu_milli and memory_mib, core.Decider.PrepareHost and TaskMix.AddPodHost with the pod's.
	HideHostFromCore bool
	// Record keeps, for every arrival, the index (in name order) of the node the pod went to, or -1.
	Record bool
	// NodeByNode asks the core about every node instead of once per distinct card state (slow;
	// for checking the grouping).
	NodeByNode bool
	// Why fills SeedResult.Why: why GPU pods failed and where the free GPUs sit at the end.
	Why bool
}

func (c *Config) validate() error {
	var errs []error
	if len(c.Nodes) == 0 {
		errs = append(errs, errors.New("no nodes"))
	}
	if len(c.Pods) == 0 {
		errs = append(errs, errors.New("no pods"))
	}
	if len(c.Seeds) == 0 {
		errs = append(errs, errors.New("no seeds"))
	}
	if !(c.Arrival > 0 && c.Arrival <= 10) {
		errs = append(errs, fmt.Errorf("arrival %v is not in (0, 10]", c.Arrival))
	}
	if !(c.FragAt > 0 && c.FragAt <= c.Arrival) {
		errs = append(errs, fmt.Errorf("frag-at %v is not in (0, arrival]", c.FragAt))
	}
	switch c.CPUPods {
	case CPUPodsLeastAllocated, CPUPodsMostAllocated, CPUPodsGPUTainted, CPUPodsCardinal:
	default:
		errs = append(errs, fmt.Errorf("cpu-pod policy %q is not %s, %s, %s or %s", c.CPUPods, CPUPodsLeastAllocated, CPUPodsMostAllocated, CPUPodsGPUTainted, CPUPodsCardinal))
	}
	if (c.NodePolicy == PolicyBestFit) != (c.GPUPolicy == PolicyBestFit) {
		errs = append(errs, fmt.Errorf("policy pair %s/%s: %s is both halves or neither", c.NodePolicy, c.GPUPolicy, PolicyBestFit))
	}
	switch c.KubeFit {
	case CPUPodsLeastAllocated, CPUPodsMostAllocated:
	default:
		errs = append(errs, fmt.Errorf("kube-fit %q is not %s or %s", c.KubeFit, CPUPodsLeastAllocated, CPUPodsMostAllocated))
	}
	if c.KubeWeight < 0 {
		errs = append(errs, fmt.Errorf("kube weight %d is negative", c.KubeWeight))
	}
	switch c.Scoring {
	case ScoringKube, ScoringCore:
	default:
		errs = append(errs, fmt.Errorf("scoring %q is not %s or %s", c.Scoring, ScoringKube, ScoringCore))
	}
	if c.Parallel < 0 {
		errs = append(errs, fmt.Errorf("parallel %d is negative", c.Parallel))
	}
	return errors.Join(errs...)
}

// SeedResult is what one seed's replay measured. Percentages are of the cluster's GPU capacity.
type SeedResult struct {
	Seed uint64
	// Alloc100 and AllocEnd are the GPU allocated (milli-GPU, as % of capacity) once arrivals reach
	// 100 % and Arrival.
	Alloc100, AllocEnd float64
	// FirstFail is the arrival % at the first GPU pod that fit nowhere; NaN when none failed.
	FirstFail float64
	// FragGPUs is the fragmented GPU capacity at FragAt arrival (FGD's measure, in cards), and
	// FragPercent the same as % of the unallocated GPU capacity then.
	FragGPUs, FragPercent float64
	// FragHost is the part of FragGPUs (in %) that is there only because nodes lack CPU or memory
	// for a task their cards could take.
	FragHost float64
	// Arrived, Placed and FailedGPU count pods: arrived in all, placed, and GPU pods that fit nowhere.
	Arrived, Placed, FailedGPU int
	// CoreCalls is how many times the replay called Fit (a measure of the grouping's saving).
	CoreCalls int
	Elapsed   time.Duration
	// Placements is filled when Config.Record is set: per arrival, the node index or -1.
	Placements []int
	// Why is filled when Config.Why is set.
	Why *Why
}

// Result is a replay over every seed.
type Result struct {
	Config    *Config
	Seeds     []SeedResult
	CapacityM int64 // cluster GPU capacity in milli-GPU
	Shares    int
	Elapsed   time.Duration
}

// Run replays every seed (several at once) and returns the results in seed order.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("replay config: %w", err)
	}
	decider, err := core.New(cfg.coreOptions())
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	if cfg.Synthesis.Shares == 0 {
		cfg.Synthesis.Shares = SharesFor(cfg.Pods)
	}
	nodes := SortedNodes(cfg.Nodes)
	invs := make([]annotations.Inventory, len(nodes))
	var capacity int64
	for i := range nodes {
		if invs[i], err = Inventory(&nodes[i], cfg.Synthesis); err != nil {
			return nil, err
		}
		capacity += int64(nodes[i].GPUs) * trace.MilliPerGPU
	}
	if capacity == 0 {
		return nil, errors.New("replay: the node list has no GPUs")
	}
	specs, err := preparePods(cfg.Pods)
	if err != nil {
		return nil, err
	}
	prepared := make([]*core.Pod, len(specs))
	for i := range specs {
		if specs[i].request.Empty() && cfg.CPUPods != CPUPodsCardinal {
			continue
		}
		if prepared[i], err = decider.PrepareHost(specs[i].request, specs[i].selector, cfg.podHost(specs[i].row)); err != nil {
			return nil, fmt.Errorf("pod %s: %w", specs[i].row.Name, err)
		}
	}
	typical := typicalTasks(specs)
	if len(typical) == 0 {
		return nil, errors.New("replay: no pod of the pod list asks for a GPU, so arrivals never reach a share of GPU capacity")
	}

	start := time.Now()
	res := &Result{Config: &cfg, Seeds: make([]SeedResult, len(cfg.Seeds)), CapacityM: capacity, Shares: cfg.Synthesis.Shares}
	parallel := cfg.Parallel
	if parallel == 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	errs := make([]error, len(cfg.Seeds))
	for si, seed := range cfg.Seeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[si] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			r := &replay{cfg: &cfg, nodes: nodes, invs: invs, specs: specs, pods: prepared, typical: typical, capacity: capacity}
			r.bestFitScale()
			res.Seeds[si], errs[si] = r.run(ctx, seed)
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return res, nil
}

// coreOptions are the Decider's policies: binpack's for PolicyBestFit (its cards; the replay
// scores its nodes).
func (c *Config) coreOptions() core.Options {
	if c.NodePolicy == PolicyBestFit {
		return core.Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack}
	}
	return core.Options{NodePolicy: c.NodePolicy, GPUPolicy: c.GPUPolicy}
}

// coreHost reports whether the core sees CPU and memory.
func (c *Config) coreHost() bool { return !c.IgnoreHost && !c.HideHostFromCore }

// podHost is the host request the core sees for pod p (zero when it sees none).
func (c *Config) podHost(p *trace.Pod) core.HostRequest {
	if !c.coreHost() {
		return core.HostRequest{}
	}
	return core.HostRequest{CPUMilli: p.CPUMilli, MemMiB: p.MemoryMiB}
}

// hostInKey reports whether node groups must also share CPU and memory: only when a policy reads
// them (frag-aware when the core sees them; BestFit always); binpack and spread scores do not depend
// on them, and the replay checks CPU and memory per node before asking the core.
func (c *Config) hostInKey() bool {
	return c.NodePolicy == PolicyBestFit ||
		c.coreHost() && (c.NodePolicy == annotations.PolicyFragAware || c.GPUPolicy == annotations.PolicyFragAware)
}

// simNode is one node during a replay.
type simNode struct {
	name             string
	cpuCap, memCap   int64
	cpuFree, memFree int64
	model            string
	// usedMilli is the milli-GPU held on each card, by the trace's numbers (for the measures).
	usedMilli []int64
	// cpuPodMilli is the CPU held by CPU-only pods (for Config.Why).
	cpuPodMilli int64
	state       *core.NodeState
	group       int
	// ignoreHost is Config.IgnoreHost.
	ignoreHost bool
}

// group is a set of nodes whose cards are in the same state, in name order.
type group struct {
	key     string
	members []int
}

type replay struct {
	cfg      *Config
	nodes    []trace.Node
	invs     []annotations.Inventory
	specs    []podSpec
	pods     []*core.Pod
	typical  []typicalTask
	capacity int64

	sim    []simNode
	groups []*group
	byKey  map[string]int
	mix    core.TaskMix
	// cands and candScores are the nodes a GPU pod fits and the core's scores (ScoringKube).
	cands      []int
	candScores []float64
	keyBuf     []byte
	calls      int
	// maxGPUMilli and maxCPUMilli, maxMemMiB are the largest node's, BestFit's scale.
	maxGPUMilli, maxCPUMilli, maxMemMiB int64
	// scratch holds the core's buffers across the nodes a pod is decided on.
	scratch core.Scratch
}

func (r *replay) run(ctx context.Context, seed uint64) (SeedResult, error) {
	start := time.Now()
	res := SeedResult{Seed: seed, FirstFail: nanValue()}
	if r.cfg.Why {
		res.Why = newWhy()
	}
	r.sim = make([]simNode, len(r.nodes))
	r.byKey = map[string]int{}
	r.groups = nil
	for i := range r.nodes {
		n := &r.nodes[i]
		r.sim[i] = simNode{name: n.Name, cpuCap: n.CPUMilli, memCap: n.MemoryMiB, cpuFree: n.CPUMilli, memFree: n.MemoryMiB,
			model: n.Model, usedMilli: make([]int64, n.GPUs), state: core.NewNodeState(n.Name, r.invs[i]), group: -1,
			ignoreHost: r.cfg.IgnoreHost}
		if r.cfg.coreHost() {
			r.sim[i].state.SetHost(n.CPUMilli, n.MemoryMiB)
		}
		r.regroup(i)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	order := rng.Perm(len(r.specs))
	target := int64(r.cfg.Arrival * float64(r.capacity))
	at100, atFrag := r.capacity, int64(r.cfg.FragAt*float64(r.capacity))
	var arrived, allocated int64
	done100, doneFrag := false, false
	for k := 0; arrived < target; k++ {
		if k%256 == 0 && ctx.Err() != nil {
			return res, ctx.Err()
		}
		idx := 0
		if k < len(order) {
			idx = order[k]
		} else {
			idx = rng.IntN(len(r.specs))
		}
		spec := &r.specs[idx]
		arrived += spec.gpuMilli
		res.Arrived++
		var node int
		switch {
		case spec.request.Empty() && r.cfg.CPUPods == CPUPodsCardinal:
			var err error
			if node, err = r.placeGPU(spec, r.pods[idx]); err != nil {
				return res, err
			}
			if node >= 0 && res.Why != nil {
				res.Why.whyCPU(&r.sim[node])
			}
		case spec.request.Empty():
			node = r.placeCPU(spec, res.Why)
		default:
			var err error
			if node, err = r.placeGPU(spec, r.pods[idx]); err != nil {
				return res, err
			}
			if node < 0 {
				res.FailedGPU++
				if res.FailedGPU == 1 {
					res.FirstFail = 100 * float64(arrived) / float64(r.capacity)
				}
				if res.Why != nil {
					r.whyFailed(res.Why, spec.row)
				}
			}
		}
		if r.cfg.Record {
			res.Placements = append(res.Placements, node)
		}
		if node >= 0 {
			res.Placed++
			allocated += spec.gpuMilli
		}
		if !doneFrag && arrived >= atFrag {
			doneFrag = true
			res.FragGPUs, res.FragPercent, res.FragHost = r.fragmentation()
		}
		if !done100 && arrived >= at100 {
			done100 = true
			res.Alloc100 = 100 * float64(allocated) / float64(r.capacity)
		}
	}
	res.AllocEnd = 100 * float64(allocated) / float64(r.capacity)
	if res.Why != nil {
		r.whyFree(res.Why)
	}
	res.CoreCalls = r.calls
	res.Elapsed = time.Since(start)
	return res, nil
}

// fitsHost is kube-scheduler's NodeResourcesFit for CPU and memory.
func (n *simNode) fitsHost(p *trace.Pod) bool {
	return n.ignoreHost || (n.cpuFree >= p.CPUMilli && n.memFree >= p.MemoryMiB)
}

// placeGPU places a GPU pod where Cardinal would and returns the node, or -1 when it fits nowhere;
// with CPUPodsCardinal, a CPU-only pod as well (its request has no container: the mix counts
// nothing, the plan takes no card, only the pod's CPU and memory).
func (r *replay) placeGPU(spec *podSpec, pod *core.Pod) (int, error) {
	// The mix is what the cluster has seen: every GPU pod that arrived, this one included.
	r.mix.AddPodHost(&spec.request, &spec.selector, r.cfg.podHost(spec.row))
	best, bestScore := -1, core.Candidate{}
	r.cands, r.candScores = r.cands[:0], r.candScores[:0]
	offer := func(ni int, score float64) {
		if r.cfg.Scoring == ScoringKube {
			// Ranked over all candidates once they are known (kubePick).
			r.cands, r.candScores = append(r.cands, ni), append(r.candScores, score)
			return
		}
		c := core.Candidate{Name: r.sim[ni].name, Score: score}
		if best < 0 || c.Better(bestScore) {
			best, bestScore = ni, c
		}
	}
	// evaluate asks the core about node ni, whose card state stands for every member of its group.
	evaluate := func(ni int) (float64, bool) {
		n := &r.sim[ni]
		r.calls++
		plan, reason := pod.FitWith(n.state, &r.mix, &r.scratch)
		if reason != nil {
			return 0, false
		}
		if r.cfg.NodePolicy == PolicyBestFit {
			return r.bestFit(n, spec.row), true
		}
		return pod.ScoreWith(n.state, plan, &r.mix, &r.scratch), true
	}
	for _, g := range r.groups {
		if r.cfg.NodeByNode {
			for _, ni := range g.members {
				if r.sim[ni].fitsHost(spec.row) {
					if s, ok := evaluate(ni); ok {
						offer(ni, s)
					}
				}
			}
			continue
		}
		first := slices.IndexFunc(g.members, func(ni int) bool { return r.sim[ni].fitsHost(spec.row) })
		if first < 0 {
			continue
		}
		s, ok := evaluate(g.members[first])
		if !ok {
			continue
		}
		if r.cfg.Scoring == ScoringCore {
			// Every member scores s: the first by name is the group's best.
			offer(g.members[first], s)
			continue
		}
		for _, ni := range g.members[first:] {
			if r.sim[ni].fitsHost(spec.row) {
				offer(ni, s)
			}
		}
	}
	if r.cfg.Scoring == ScoringKube {
		best = r.kubePick(spec.row)
	}
	if best < 0 {
		return -1, nil
	}
	n := &r.sim[best]
	plan, reason := pod.Fit(n.state, &r.mix)
	if reason != nil {
		// The node's group said it fits: the grouping is wrong.
		return -1, fmt.Errorf("replay: pod %s fit node %s's card state, then not the node: %s", spec.row.Name, n.name, reason.String())
	}
	n.state.Apply(plan)
	n.cpuFree -= spec.row.CPUMilli
	n.memFree -= spec.row.MemoryMiB
	if spec.request.Empty() {
		n.cpuPodMilli += spec.row.CPUMilli
	}
	perCard := int64(trace.MilliPerGPU)
	if spec.row.Fractional() {
		perCard = spec.row.GPUMilli
	}
	for _, d := range plan.Devices {
		n.usedMilli[d.Card] += perCard
	}
	r.regroup(best)
	return best, nil
}

// kubePick is kube-scheduler's choice among the candidates offered (ScoringKube): the extender's
// answer, core.Rank of the core's scores over the candidates, × KubeWeight × 10 (kube-scheduler's
// MaxNodeScore / MaxExtenderPriority), plus the profile's CPU and memory scores when it keeps
// them; ties to the smaller name. -1 when there is no candidate.
func (r *replay) kubePick(p *trace.Pod) int {
	if len(r.cands) == 0 {
		return -1
	}
	ok := make([]bool, len(r.cands))
	for i := range ok {
		ok[i] = true
	}
	ranks := make([]int64, len(r.cands))
	core.Rank(r.candScores, ok, ranks)
	best, bestTotal := -1, int64(0)
	for i, ni := range r.cands {
		total := ranks[i] * int64(cmp.Or(r.cfg.KubeWeight, DefaultKubeWeight)) * 10
		if r.cfg.KubeResourceScores {
			total += kubeResourceScores(&r.sim[ni], p, r.cfg.KubeFit)
		}
		if best < 0 || total > bestTotal || (total == bestTotal && r.sim[ni].name < r.sim[best].name) {
			best, bestTotal = ni, total
		}
	}
	return best
}

// kubeResourceScores is what kube-scheduler's NodeResourcesFit (strategy fit) and
// NodeResourcesBalancedAllocation plugins give node n for pod p, CPU and memory weighted equally,
// in kube-scheduler's integer arithmetic.
func kubeResourceScores(n *simNode, p *trace.Pod, fit CPUPodPolicy) int64 {
	cpuCap, memCap := max(n.cpuCap, 1), max(n.memCap, 1)
	cpuReq, memReq := n.cpuCap-n.cpuFree+p.CPUMilli, n.memCap-n.memFree+p.MemoryMiB
	least := ((cpuCap-cpuReq)*100/cpuCap + (memCap-memReq)*100/memCap) / 2
	if fit == CPUPodsMostAllocated {
		least = (cpuReq*100/cpuCap + memReq*100/memCap) / 2
	}
	fc, fm := float64(cpuReq)/float64(cpuCap), float64(memReq)/float64(memCap)
	balanced := int64((1 - math.Abs(fc-fm)/2) * 100)
	return least + balanced
}

// placeCPU places a CPU-only pod by kube-scheduler's resource scoring (ties go to the smaller name)
// and returns the node, or -1 when it fits nowhere.
func (r *replay) placeCPU(spec *podSpec, why *Why) int {
	best, bestScore := -1, 0.0
	for ni := range r.sim {
		n := &r.sim[ni]
		if !n.fitsHost(spec.row) || (r.cfg.CPUPods == CPUPodsGPUTainted && len(n.usedMilli) > 0) {
			continue
		}
		left := (float64(n.cpuFree-spec.row.CPUMilli)/float64(max(n.cpuCap, 1)) + float64(n.memFree-spec.row.MemoryMiB)/float64(max(n.memCap, 1))) / 2
		if r.cfg.CPUPods == CPUPodsMostAllocated {
			left = -left
		}
		if best < 0 || left > bestScore {
			best, bestScore = ni, left
		}
	}
	if best < 0 {
		return -1
	}
	if why != nil {
		why.whyCPU(&r.sim[best])
	}
	r.sim[best].cpuFree -= spec.row.CPUMilli
	r.sim[best].memFree -= spec.row.MemoryMiB
	r.sim[best].cpuPodMilli += spec.row.CPUMilli
	if r.cfg.coreHost() {
		r.sim[best].state.HoldHost(core.HostRequest{CPUMilli: spec.row.CPUMilli, MemMiB: spec.row.MemoryMiB})
		r.regroup(best)
	}
	return best
}

// regroup moves node ni to the group of its current card state.
func (r *replay) regroup(ni int) {
	n := &r.sim[ni]
	b := append(r.keyBuf[:0], n.model...)
	b = append(b, 0)
	for i := range n.state.Cards {
		c := &n.state.Cards[i]
		h := byte(0)
		if c.Healthy {
			h = 1
		}
		b = append(b, h)
		b = binary.AppendVarint(b, c.MemoryMiB)
		b = binary.AppendVarint(b, c.MemMiB)
		b = binary.AppendVarint(b, int64(c.Cores))
		b = binary.AppendVarint(b, int64(c.Held))
		b = binary.AppendVarint(b, int64(c.Whole))
		b = binary.AppendVarint(b, int64(c.Shares))
		b = binary.AppendVarint(b, int64(c.NUMA))
	}
	if r.cfg.hostInKey() {
		// The replay's own count, which equals the core's (NodeState.Host) when the core sees it.
		b = binary.AppendVarint(b, n.cpuFree)
		b = binary.AppendVarint(b, n.memFree)
	}
	r.keyBuf = b
	if n.group >= 0 {
		if r.groups[n.group].key == string(b) {
			return
		}
		r.leave(ni)
	}
	gi, ok := r.byKey[string(b)]
	if !ok {
		gi = len(r.groups)
		key := string(b)
		r.groups = append(r.groups, &group{key: key})
		r.byKey[key] = gi
	}
	g := r.groups[gi]
	pos, _ := slices.BinarySearch(g.members, ni)
	g.members = slices.Insert(g.members, pos, ni)
	n.group = gi
}

// leave removes node ni from its group, dropping the group when it empties.
func (r *replay) leave(ni int) {
	gi := r.sim[ni].group
	g := r.groups[gi]
	pos, _ := slices.BinarySearch(g.members, ni)
	g.members = slices.Delete(g.members, pos, pos+1)
	r.sim[ni].group = -1
	if len(g.members) > 0 {
		return
	}
	last := len(r.groups) - 1
	delete(r.byKey, g.key)
	if gi != last {
		moved := r.groups[last]
		r.groups[gi] = moved
		r.byKey[moved.key] = gi
		for _, m := range moved.members {
			r.sim[m].group = gi
		}
	}
	r.groups = r.groups[:last]
}

// bestFitScale finds BestFit's scale: the largest node's GPU, CPU and memory.
func (r *replay) bestFitScale() {
	for i := range r.nodes {
		n := &r.nodes[i]
		r.maxGPUMilli = max(r.maxGPUMilli, int64(n.GPUs)*trace.MilliPerGPU)
		r.maxCPUMilli = max(r.maxCPUMilli, n.CPUMilli)
		r.maxMemMiB = max(r.maxMemMiB, n.MemoryMiB)
	}
}

// bestFit is BestFit's score of pod p on node n (higher is better): minus what the node has left
// after the pod, free GPU (milli-GPU), CPU and memory each as a share of the largest node's, weighted
// (PolicyBestFit). A CPU-only pod leaves the GPU term as it is: it goes where GPU and CPU left are
// least together.
func (r *replay) bestFit(n *simNode, p *trace.Pod) float64 {
	gpuLeft := int64(len(n.usedMilli)) * trace.MilliPerGPU
	for _, u := range n.usedMilli {
		gpuLeft -= u
	}
	gpuLeft -= p.GPUMilliTotal()
	share := func(left, scale int64) float64 {
		if scale <= 0 {
			return 0
		}
		return float64(left) / float64(scale)
	}
	return -(bestFitGPUWeight*share(gpuLeft, r.maxGPUMilli) + bestFitCPUWeight*share(n.cpuFree-p.CPUMilli, r.maxCPUMilli) +
		bestFitMemWeight*share(n.memFree-p.MemoryMiB, r.maxMemMiB))
}
