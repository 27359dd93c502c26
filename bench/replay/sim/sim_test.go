package sim

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

var traceDir = filepath.Join("..", "..", "..", "testdata", "traces", "alibaba-gpu-v2023")

func baseConfig(nodes []trace.Node, pods []trace.Pod) Config {
	return Config{Nodes: nodes, Pods: pods, NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack,
		Seeds: []uint64{42}, Arrival: 1.3, FragAt: 0.9, CPUPods: CPUPodsLeastAllocated, Scoring: ScoringKube,
		KubeFit: CPUPodsLeastAllocated, Synthesis: Synthesis{NUMASplit: true}, Parallel: 1}
}

func gpuNode(name string, gpus int) trace.Node {
	return trace.Node{Name: name, CPUMilli: 64000, MemoryMiB: 262144, GPUs: gpus, Model: "T4"}
}

func gpuPod(name string, n int, milli int64) trace.Pod {
	return trace.Pod{Name: name, CPUMilli: 1000, MemoryMiB: 1024, NumGPU: n, GPUMilli: milli}
}

// TestProtocol follows the arrivals of a tiny cluster by hand.
func TestProtocol(t *testing.T) {
	// 2 nodes × 1 card: capacity 2000 milli. Every pod asks for 1 whole card. Arrival stops at
	// 130 % = 2600 milli: the 3rd arrival (3000) is the last. Pods 1 and 2 fit, pod 3 does not.
	// At 90 % (1800): reached by the 2nd arrival (2000), when both cards are full: nothing free,
	// fragmentation 0. At 100 %: the 2nd arrival, 2000 of 2000 allocated: 100 %. First failure:
	// the 3rd arrival, at 3000/2000 = 150 %.
	cfg := baseConfig([]trace.Node{gpuNode("a", 1), gpuNode("b", 1)}, []trace.Pod{gpuPod("p", 1, 1000)})
	cfg.Record = true
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := res.Seeds[0]
	want := SeedResult{Seed: 42, Alloc100: 100, AllocEnd: 100, FirstFail: 150, Arrived: 3, Placed: 2, FailedGPU: 1,
		Placements: []int{0, 1, -1}}
	if d := cmp.Diff(want, got, cmpopts.IgnoreFields(SeedResult{}, "Elapsed", "CoreCalls")); d != "" {
		t.Errorf("seed result (-want +got):\n%s", d)
	}
}

// TestSamplingWithReplacement: after the shuffled list, arrivals are drawn from it at random until
// the target; every pod of the list arrives once before any repeats.
func TestSamplingWithReplacement(t *testing.T) {
	// 10 nodes × 8 cards = 80 000 milli; pods of 100 milli: 130 % takes 1040 arrivals, of which the
	// first 5 are the list (shuffled), the rest drawn with replacement.
	var nodes []trace.Node
	for i := range 10 {
		nodes = append(nodes, gpuNode(string(rune('a'+i)), 8))
	}
	pods := []trace.Pod{gpuPod("p0", 1, 100), gpuPod("p1", 1, 100), gpuPod("p2", 1, 100), gpuPod("p3", 1, 100), gpuPod("p4", 1, 100)}
	res, err := Run(context.Background(), baseConfig(nodes, pods))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Seeds[0].Arrived; got != 1040 {
		t.Errorf("arrived %d pods, want 1040", got)
	}
}

// TestGroupedEqualsNodeByNode: asking the core once per distinct card state picks exactly the
// nodes that asking it about every node picks, on a slice of the real trace, for every policy (BestFit
// included), both scorings and CPU-only pods placed by kube-scheduler or routed to the core.
func TestGroupedEqualsNodeByNode(t *testing.T) {
	nodes, err := trace.LoadNodes(filepath.Join(traceDir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := trace.LoadPods(filepath.Join(traceDir, "openb_pod_list_gpuspec20.csv"))
	if err != nil {
		t.Fatal(err)
	}
	// Every 10th node: 122 nodes of every model; all pods.
	var some []trace.Node
	for i := 0; i < len(nodes); i += 10 {
		some = append(some, nodes[i])
	}
	for _, scoring := range []Scoring{ScoringKube, ScoringCore} {
		for _, c := range []struct {
			policy  annotations.Policy
			cpuPods CPUPodPolicy
		}{
			{annotations.PolicyBinpack, CPUPodsLeastAllocated}, {annotations.PolicySpread, CPUPodsLeastAllocated},
			{annotations.PolicyFragAware, CPUPodsLeastAllocated}, {PolicyBestFit, CPUPodsLeastAllocated},
			{annotations.PolicyFragAware, CPUPodsCardinal}, {PolicyBestFit, CPUPodsCardinal},
		} {
			p := c.policy + "+" + annotations.Policy(c.cpuPods)
			cfg := baseConfig(some, pods)
			cfg.NodePolicy, cfg.GPUPolicy, cfg.CPUPods, cfg.Scoring, cfg.Record = c.policy, c.policy, c.cpuPods, scoring, true
			grouped, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg.NodeByNode = true
			each, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			g, e := grouped.Seeds[0], each.Seeds[0]
			if !slices.Equal(g.Placements, e.Placements) {
				t.Errorf("%s %s: grouped and node-by-node placements differ", scoring, p)
			}
			if d := cmp.Diff(e, g, cmpopts.IgnoreFields(SeedResult{}, "Elapsed", "CoreCalls", "Placements"), cmpopts.EquateNaNs()); d != "" {
				t.Errorf("%s %s: results (-node by node +grouped):\n%s", scoring, p, d)
			}
			if g.FailedGPU == 0 || g.CoreCalls >= e.CoreCalls {
				t.Errorf("%s %s: %d GPU pods failed, %d core calls grouped vs %d: want failures (a full cluster) and fewer calls",
					scoring, p, g.FailedGPU, g.CoreCalls, e.CoreCalls)
			}
		}
	}
}

func TestFragmentationMeasure(t *testing.T) {
	// One T4 node, 2 cards, 600 milli used on card 0: free 400 + 1000 = 1400 milli.
	// Tasks: A = 1 card × 500 milli (p 0.5): card 0 (400 free) cannot host it, card 1 can, so
	//   F(A) = 400. B = 2 whole cards (p 0.25): only 1 card has 1000 free, so B cannot run: F(B) =
	//   1400. C = 1 whole P100 (p 0.25): the node has no P100: F(C) = 1400.
	// F = 0.5×400 + 0.25×1400 + 0.25×1400 = 900 milli = 0.9 cards, 900/1400 = 64.29 % of free.
	r := &replay{
		sim: []simNode{{name: "n", model: "T4", cpuFree: 8000, memFree: 8000, usedMilli: []int64{600, 0}}},
		typical: []typicalTask{
			{cpuMilli: 1000, memMiB: 1000, numGPU: 1, perCard: 500, p: 0.5},
			{cpuMilli: 1000, memMiB: 1000, numGPU: 2, perCard: 1000, p: 0.25},
			{cpuMilli: 1000, memMiB: 1000, numGPU: 1, perCard: 1000, models: []string{"P100"}, p: 0.25},
		},
	}
	gpus, pct, host := r.fragmentation()
	if math.Abs(gpus-0.9) > 1e-9 || math.Abs(pct-100*900.0/1400) > 1e-9 || host != 0 {
		t.Errorf("fragmentation %v cards, %v %%, %v %% by host; want 0.9, 64.29, 0", gpus, pct, host)
	}
	// With 9000 milli-CPU wanted by A, the node lacks CPU for A: F(A) = 1400, F = 0.7+0.35+0.35 = 1.4,
	// of which A's 0.7 is there for CPU only: 50 %.
	r.typical[0].cpuMilli = 9000
	if gpus, _, host := r.fragmentation(); math.Abs(gpus-1.4) > 1e-9 || math.Abs(host-50) > 1e-9 {
		t.Errorf("fragmentation with A lacking CPU = %v cards, %v %% by host; want 1.4, 50", gpus, host)
	}
}

func TestKubeResourceScores(t *testing.T) {
	// Node 10 000 mCPU, 1000 MiB; 4000 mCPU and 200 MiB used; pod 1000 mCPU, 300 MiB.
	// Requested after: 5000/10000 CPU, 500/1000 memory.
	// LeastAllocated: (5000×100/10000 + 500×100/1000)/2 = (50+50)/2 = 50.
	// MostAllocated: (50+50)/2 = 50. Balanced: fractions 0.5 and 0.5, |diff|/2 = 0: 100.
	n := &simNode{cpuCap: 10000, memCap: 1000, cpuFree: 6000, memFree: 800}
	p := &trace.Pod{CPUMilli: 1000, MemoryMiB: 300}
	if got := kubeResourceScores(n, p, CPUPodsLeastAllocated); got != 150 {
		t.Errorf("least-allocated + balanced = %d, want 150", got)
	}
	// Pod 3000 mCPU, 0 MiB: CPU 7000/10000, memory 200/1000.
	// LeastAllocated: (30 + 80)/2 = 55; MostAllocated: (70 + 20)/2 = 45;
	// Balanced: (1 − |0.7 − 0.2|/2) × 100 = 75.
	p = &trace.Pod{CPUMilli: 3000}
	if got := kubeResourceScores(n, p, CPUPodsLeastAllocated); got != 55+75 {
		t.Errorf("least-allocated + balanced = %d, want 130", got)
	}
	if got := kubeResourceScores(n, p, CPUPodsMostAllocated); got != 45+75 {
		t.Errorf("most-allocated + balanced = %d, want 120", got)
	}
}

func TestPodObject(t *testing.T) {
	names := annotations.DefaultResourceNames()
	cases := []struct {
		pod  trace.Pod
		want annotations.PodRequest
		sel  []string
	}{
		{gpuPod("whole", 2, 1000), annotations.PodRequest{Containers: []annotations.ContainerRequest{{Name: "main", Count: 2}}}, nil},
		// 460 milli = 46 % of memory and compute.
		{gpuPod("share", 1, 460), annotations.PodRequest{Containers: []annotations.ContainerRequest{{Name: "main", Count: 1, Shared: true, MemoryPercent: 46, Cores: 46}}}, nil},
		// 455 milli rounds up to 46 %.
		{gpuPod("odd", 1, 455), annotations.PodRequest{Containers: []annotations.ContainerRequest{{Name: "main", Count: 1, Shared: true, MemoryPercent: 46, Cores: 46}}}, nil},
		{trace.Pod{Name: "cpu", CPUMilli: 1000}, annotations.PodRequest{}, nil},
		{trace.Pod{Name: "spec", NumGPU: 1, GPUMilli: 1000, GPUSpec: []string{"V100M16", "V100M32"}},
			annotations.PodRequest{Containers: []annotations.ContainerRequest{{Name: "main", Count: 1}}}, []string{"v100m16", "v100m32"}},
	}
	for _, c := range cases {
		obj := PodObject(&c.pod, names)
		req, err := annotations.ParsePodRequest(obj, names)
		if err != nil {
			t.Fatalf("%s: %v", c.pod.Name, err)
		}
		if d := cmp.Diff(c.want, req, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%s: request (-want +got):\n%s", c.pod.Name, d)
		}
		sel, err := annotations.ParseSelector(obj.Annotations)
		if err != nil {
			t.Fatalf("%s: %v", c.pod.Name, err)
		}
		if d := cmp.Diff(c.sel, sel.UseTypes, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("%s: use-gputype (-want +got):\n%s", c.pod.Name, d)
		}
	}
}

func TestInventory(t *testing.T) {
	n := trace.Node{Name: "openb-node-0001", GPUs: 4, Model: "V100M32"}
	inv, err := Inventory(&n, Synthesis{NUMASplit: true, Shares: 20})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range inv.GPUs {
		got = append(got, strings.Join([]string{g.UUID, g.Model, itoa(g.MemoryMiB), itoa(int64(g.NUMA)), itoa(int64(g.Shares))}, " "))
	}
	// 4 cards: 0-1 on NUMA 0, 2-3 on NUMA 1; V100M32 has 32510 MiB.
	want := []string{
		"GPU-openb-node-0001-0 V100M32 32510 0 20", "GPU-openb-node-0001-1 V100M32 32510 0 20",
		"GPU-openb-node-0001-2 V100M32 32510 1 20", "GPU-openb-node-0001-3 V100M32 32510 1 20",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("inventory (-want +got):\n%s", d)
	}
	g2 := trace.Node{Name: "n", GPUs: 2, Model: "G2"}
	inv, _ = Inventory(&g2, Synthesis{NUMASplit: true, Shares: 1})
	if inv.GPUs[1].NUMA != 0 || inv.GPUs[0].MemoryMiB != UndisclosedCardMemoryMiB {
		t.Errorf("2-card G2 node: %+v, want one NUMA node and the undisclosed-model memory", inv.GPUs)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestSharesFor(t *testing.T) {
	// Smallest share 50 milli: 1000/50 = 20 slots. No shares at all: 1.
	if got := SharesFor([]trace.Pod{gpuPod("a", 1, 460), gpuPod("b", 1, 50), gpuPod("c", 8, 1000)}); got != 20 {
		t.Errorf("SharesFor = %d, want 20", got)
	}
	if got := SharesFor([]trace.Pod{gpuPod("c", 8, 1000)}); got != 1 {
		t.Errorf("SharesFor whole only = %d, want 1", got)
	}
}

func TestParseSeedsAndPairs(t *testing.T) {
	seeds, err := ParseSeeds("42-45,7")
	if err != nil || !slices.Equal(seeds, []uint64{42, 43, 44, 45, 7}) {
		t.Errorf("ParseSeeds = %v, %v", seeds, err)
	}
	for _, bad := range []string{"", "x", "5-3", "1-20000"} {
		if _, err := ParseSeeds(bad); err == nil {
			t.Errorf("ParseSeeds(%q) accepted", bad)
		}
	}
	pairs, err := ParsePairs("binpack, spread/binpack,frag-aware")
	want := [][2]annotations.Policy{{"binpack", "binpack"}, {"spread", "binpack"}, {"frag-aware", "frag-aware"}}
	if err != nil || !slices.Equal(pairs, want) {
		t.Errorf("ParsePairs = %v, %v", pairs, err)
	}
	if _, err := ParsePairs("binpack/tetris"); err == nil || !strings.Contains(err.Error(), "tetris") {
		t.Errorf("ParsePairs(binpack/tetris) = %v, want an error naming tetris", err)
	}
}

func TestConfigErrors(t *testing.T) {
	cfg := baseConfig(nil, nil)
	cfg.Arrival, cfg.Scoring = 0, "best"
	_, err := Run(context.Background(), cfg)
	for _, want := range []string{"no nodes", "no pods", "arrival 0", `scoring "best"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
	cfg = baseConfig([]trace.Node{gpuNode("a", 1)}, []trace.Pod{{Name: "cpu", CPUMilli: 1}})
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "no pod of the pod list asks for a GPU") {
		t.Errorf("CPU-only pod list: error %v", err)
	}
}

// BenchmarkReplayDefault is the speed target: the default trace, one seed, binpack (ten
// seeds run as ten of these, two at a time on two cores).
func BenchmarkReplayDefault(b *testing.B) {
	nodes, err := trace.LoadNodes(filepath.Join(traceDir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		b.Fatal(err)
	}
	pods, err := trace.LoadPods(filepath.Join(traceDir, "openb_pod_list_default.csv"))
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []annotations.Policy{annotations.PolicyBinpack, annotations.PolicyFragAware} {
		b.Run(string(p), func(b *testing.B) {
			cfg := baseConfig(nodes, pods)
			cfg.NodePolicy, cfg.GPUPolicy = p, p
			for range b.N {
				if _, err := Run(context.Background(), cfg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestParallelSeedsMatchSerial: seeds replayed at once share the prepared pods and inventories and
// must give what they give one at a time (run it with -race).
func TestParallelSeedsMatchSerial(t *testing.T) {
	var nodes []trace.Node
	for i := range 6 {
		nodes = append(nodes, gpuNode(strconv.Itoa(i), 4))
	}
	pods := []trace.Pod{gpuPod("a", 1, 1000), gpuPod("b", 1, 300), gpuPod("c", 2, 1000), {Name: "cpu", CPUMilli: 8000, MemoryMiB: 1}}
	cfg := baseConfig(nodes, pods)
	cfg.Seeds, cfg.Record, cfg.NodePolicy, cfg.GPUPolicy = []uint64{1, 2, 3, 4}, true, annotations.PolicyFragAware, annotations.PolicyFragAware
	serial, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Parallel = 4
	parallel, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(serial.Seeds, parallel.Seeds, cmpopts.IgnoreFields(SeedResult{}, "Elapsed"), cmpopts.EquateNaNs()); d != "" {
		t.Errorf("serial vs parallel (-serial +parallel):\n%s", d)
	}
	if slices.Equal(serial.Seeds[0].Placements, serial.Seeds[1].Placements) {
		t.Error("seeds 1 and 2 placed alike: the seed does not shuffle")
	}
}

// With the chart's profile (no in-tree CPU and memory scores) kube-scheduler's choice is the core's
// whenever the core's best node is clear: the extender's rank keeps the order that rounding lost.
// With the old rounded answer and the resource scores, the in-tree scores overrule it.
func TestKubeScoringKeepsTheCoresChoice(t *testing.T) {
	var nodes []trace.Node
	for i := range 6 {
		nodes = append(nodes, gpuNode(strconv.Itoa(i), 8))
	}
	var pods []trace.Pod
	for i := range 30 {
		p := gpuPod("p"+strconv.Itoa(i), 1+i%3, 1000)
		p.CPUMilli = 12000 // enough for least-allocated to differ by more than a rank step at weight 1
		pods = append(pods, p)
	}
	cfg := baseConfig(nodes, pods)
	cfg.Seeds, cfg.Record, cfg.NodePolicy, cfg.GPUPolicy = []uint64{1}, true, annotations.PolicyBinpack, annotations.PolicyBinpack
	cfg.Scoring = ScoringCore
	coreRes, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Scoring = ScoringKube
	kube, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(coreRes.Seeds[0].Placements, kube.Seeds[0].Placements); d != "" {
		t.Errorf("kube scoring placed otherwise than the core (-core +kube):\n%s", d)
	}
	// Least-allocated CPU and memory scores pull towards the emptier node, against binpack.
	cfg.KubeResourceScores, cfg.KubeWeight = true, 1
	pulled, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(coreRes.Seeds[0].Placements, pulled.Seeds[0].Placements) {
		t.Error("with weight 1 and the resource scores kube scoring still placed as the core: the test shows nothing")
	}
}
