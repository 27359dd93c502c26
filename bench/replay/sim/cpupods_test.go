package sim

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// cpuOnlyTestPods are a one-card pod and a CPU-only pod, drawn alike.
func cpuOnlyTestPods() []trace.Pod {
	return []trace.Pod{gpuPod("g", 1, 1000), {Name: "c", CPUMilli: 2000, MemoryMiB: 1024}}
}

// With --cpu-pods cardinal the core places CPU-only pods with the run's policies. Between a card
// node (a) and a node without cards (b), binpack and BestFit send them to b; frag-aware packs them
// onto a, the node in use, while a's CPU still feeds its free cards (ΔF 0), and to b when a's CPU is
// what its cards' pods need (tight: 5 CPUs for 4 one-card pods of 1 CPU, the CPU-only pods asking
// 2). kube-scheduler's least-allocated scoring, which sees two nodes equally empty, sends them to
// the card node (a, the first); with the GPU nodes tainted (gpu-tainted) they never go there.
func TestCPUPodsCardinal(t *testing.T) {
	nodes := []trace.Node{gpuNode("a", 4), {Name: "b", CPUMilli: 64000, MemoryMiB: 262144}}
	tight := slices.Clone(nodes)
	tight[0].CPUMilli = 5000
	for _, c := range []struct {
		name    string
		nodes   []trace.Node
		cpuPods CPUPodPolicy
		policy  annotations.Policy
		onCards bool // some CPU-only pod went to the card node
	}{
		{"", nodes, CPUPodsLeastAllocated, annotations.PolicyFragAware, true},
		{"", nodes, CPUPodsCardinal, annotations.PolicyFragAware, true},
		{"/tight", tight, CPUPodsCardinal, annotations.PolicyFragAware, false},
		{"", nodes, CPUPodsCardinal, annotations.PolicyBinpack, false},
		{"", nodes, CPUPodsCardinal, PolicyBestFit, false},
		{"", nodes, CPUPodsGPUTainted, annotations.PolicyFragAware, false},
	} {
		t.Run(string(c.cpuPods)+"/"+string(c.policy)+c.name, func(t *testing.T) {
			for _, scoring := range []Scoring{ScoringCore, ScoringKube} {
				cfg := baseConfig(c.nodes, cpuOnlyTestPods())
				cfg.NodePolicy, cfg.GPUPolicy, cfg.CPUPods, cfg.Scoring, cfg.Why = c.policy, c.policy, c.cpuPods, scoring, true
				res, err := Run(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				s := res.Seeds[0]
				if s.Placed != s.Arrived-s.FailedGPU || s.AllocEnd != 100 {
					t.Errorf("%s: placed %d of %d (%d GPU failed), %.2f %% allocated; want every pod placed but the GPU ones beyond the cards, 100 %%",
						scoring, s.Placed, s.Arrived, s.FailedGPU, s.AllocEnd)
				}
				if got := s.Why.CPUPods[4] != nil; got != c.onCards {
					t.Errorf("%s: CPU-only pods on the card node: %v, want %v (by node size: %v)", scoring, got, c.onCards, s.Why.CPUPods)
				}
			}
		})
	}
}

// BestFit takes the node with the least GPU and CPU left after the pod, each a share of the largest
// node's: a (8 cards, 8 CPUs) over b (2 cards, 128 CPUs), where binpack, by the share of cards used,
// takes b. Once a is full, b.
func TestBestFit(t *testing.T) {
	nodes := []trace.Node{{Name: "a", CPUMilli: 8000, MemoryMiB: 262144, GPUs: 8, Model: "T4"},
		{Name: "b", CPUMilli: 128000, MemoryMiB: 262144, GPUs: 2, Model: "T4"}}
	for _, c := range []struct {
		policy annotations.Policy
		want   []int
	}{
		{PolicyBestFit, []int{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, -1, -1, -1}},
		{annotations.PolicyBinpack, []int{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1}},
	} {
		for _, scoring := range []Scoring{ScoringCore, ScoringKube} {
			cfg := baseConfig(nodes, []trace.Pod{gpuPod("p", 1, 1000)})
			cfg.NodePolicy, cfg.GPUPolicy, cfg.Scoring, cfg.Record = c.policy, c.policy, scoring, true
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, res.Seeds[0].Placements); d != "" {
				t.Errorf("%s, %s scoring: placements (-want +got):\n%s", c.policy, scoring, d)
			}
		}
	}
}

// BestFit's score: GPU and CPU left after the pod, each a share of the largest node's, weighted 0.5.
func TestBestFitScore(t *testing.T) {
	r := &replay{nodes: []trace.Node{gpuNode("a", 8), {Name: "b", CPUMilli: 32000, MemoryMiB: 1024}}}
	r.bestFitScale()
	n := &simNode{usedMilli: make([]int64, 4), cpuFree: 32000, memFree: 1024}
	n.usedMilli[0] = 1000
	// GPU left 3000 − 1000 = 2000 of 8000; CPU left 32000 − 16000 = 16000 of 64000.
	p := &trace.Pod{CPUMilli: 16000, NumGPU: 1, GPUMilli: 1000}
	if got, want := r.bestFit(n, p), -(0.5*2000.0/8000 + 0.5*16000.0/64000); got != want {
		t.Errorf("bestFit = %v, want %v", got, want)
	}
}

func TestParsePairsBestFit(t *testing.T) {
	got, err := ParsePairs("bestfit, frag-aware")
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]annotations.Policy{{PolicyBestFit, PolicyBestFit}, {annotations.PolicyFragAware, annotations.PolicyFragAware}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("pairs (-want +got):\n%s", d)
	}
	for _, bad := range []string{"bestfit/binpack", "binpack/bestfit"} {
		if _, err := ParsePairs(bad); err == nil || !strings.Contains(err.Error(), "bestfit") {
			t.Errorf("ParsePairs(%q) = %v, want an error naming bestfit", bad, err)
		}
	}
}

// --blend … --dump writes the blend's pod list, which reads back as the pods the blend drew, and
// replays as the blend did.
func TestBlendDumpRoundTrips(t *testing.T) {
	dir := t.TempDir()
	nodesFile, podsFile, dump := filepath.Join(dir, "nodes.csv"), filepath.Join(dir, "pods.csv"), filepath.Join(dir, "blend.csv")
	if err := os.WriteFile(nodesFile, []byte("sn,cpu_milli,memory_mib,gpu,model\na,64000,262144,4,T4\nb,64000,262144,2,T4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := []trace.Pod{gpuPod("p0", 1, 1000), gpuPod("p1", 2, 1000), gpuPod("p2", 1, 300), {Name: "c", CPUMilli: 2000, MemoryMiB: 1024},
		{Name: "s", CPUMilli: 1000, MemoryMiB: 1024, NumGPU: 1, GPUMilli: 1000, GPUSpec: []string{"T4", "P100"}}}
	var b strings.Builder
	if err := trace.WritePods(&b, pool); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(podsFile, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	blend, err := ParseBlend("cpu=3,spec=0.5")
	if err != nil {
		t.Fatal(err)
	}
	run := func(pods string, blends []Blend, dump string) string {
		var out strings.Builder
		cfg := BatchConfig{NodesFile: nodesFile, PodsFiles: []string{pods}, Pairs: [][2]annotations.Policy{{PolicyBestFit, PolicyBestFit}},
			Replay: baseConfig(nil, nil), Format: FormatMarkdown, Blends: blends, BlendRows: 50, BlendSeed: 7, Dump: dump, Log: logr.Discard()}
		if err := RunBatch(context.Background(), cfg, &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	blended := run(podsFile, []Blend{blend}, dump)
	got, err := trace.LoadPods(dump)
	if err != nil {
		t.Fatal(err)
	}
	want, err := blend.Make(pool, 50, 7)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("dumped pods (-blend +read back):\n%s", d)
	}
	// The same figures, from the dump as a pod list (the rows differ only in the trace's name).
	figures := func(table string) string {
		line := strings.Split(strings.TrimSpace(table), "\n")[2]
		cols := strings.Split(line, "|")
		return strings.Join(cols[4:10], "|")
	}
	if a, b := figures(blended), figures(run(dump, nil, "")); a != b {
		t.Errorf("replaying the dump gave %s, the blend %s", b, a)
	}
	// --dump takes exactly one blend.
	cfg := BatchConfig{NodesFile: nodesFile, PodsFiles: []string{podsFile}, Pairs: [][2]annotations.Policy{{PolicyBestFit, PolicyBestFit}},
		Replay: baseConfig(nil, nil), Format: FormatText, Blends: []Blend{blend, blend}, Dump: dump, Log: logr.Discard()}
	if err := RunBatch(context.Background(), cfg, io.Discard); err == nil || !strings.Contains(err.Error(), "--dump") {
		t.Errorf("two blends with --dump: %v, want an error naming --dump", err)
	}
}

// Several CPU-only protocols replay each list under each and end with a table of them side by side:
// the published anchors where the trace has them, then each pair's allocation under each protocol,
// the figures of the detail rows.
func TestBatchComparesProtocols(t *testing.T) {
	dir := t.TempDir()
	nodesFile, podsFile := filepath.Join(dir, "nodes.csv"), filepath.Join(dir, "openb_pod_list_default.csv")
	if err := os.WriteFile(nodesFile, []byte("sn,cpu_milli,memory_mib,gpu,model\na,8000,262144,4,T4\nb,64000,262144,2,T4\nc,64000,262144,0,\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var pods []trace.Pod
	for i := range 12 {
		pods = append(pods, gpuPod(fmt.Sprintf("g%d", i), 1, 1000), trace.Pod{Name: fmt.Sprintf("c%d", i), CPUMilli: 3000, MemoryMiB: 1024})
	}
	var b strings.Builder
	if err := trace.WritePods(&b, pods); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(podsFile, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cfg := BatchConfig{NodesFile: nodesFile, PodsFiles: []string{podsFile},
		Pairs:  [][2]annotations.Policy{{annotations.PolicyFragAware, annotations.PolicyFragAware}, {PolicyBestFit, PolicyBestFit}},
		Replay: baseConfig(nil, nil), Format: FormatMarkdown, Protocols: []CPUPodPolicy{CPUPodsCardinal, CPUPodsLeastAllocated}, Log: logr.Discard()}
	if err := RunBatch(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	// The detail rows: trace, pair, protocol, alloc @100 %, alloc @130 %, ...
	detail := map[string]string{}
	var compare []string
	for _, line := range strings.Split(out.String(), "\n") {
		cols := strings.Split(line, " | ")
		switch {
		case len(cols) > 5 && cols[0] == "| default" && strings.Contains(cols[1], "/"):
			detail[strings.Split(cols[1], "/")[0]+", CPU-only pods "+cols[2]] = cols[4]
		case len(cols) > 5 && cols[0] == "| default":
			compare = cols
		}
	}
	if len(detail) != 4 {
		t.Fatalf("detail rows %v, want 2 pairs × 2 protocols:\n%s", detail, out.String())
	}
	if compare == nil {
		t.Fatalf("no side-by-side row for default:\n%s", out.String())
	}
	want := []string{"| default", "93.08", "95.39"}
	for _, col := range []string{"frag-aware, CPU-only pods cardinal", "bestfit, CPU-only pods cardinal", "frag-aware, CPU-only pods least-allocated", "bestfit, CPU-only pods least-allocated"} {
		if !strings.Contains(out.String(), col) {
			t.Errorf("no column %q", col)
		}
		want = append(want, detail[col])
	}
	if d := cmp.Diff(want, append(compare[:len(compare)-1:len(compare)-1], strings.TrimSuffix(compare[len(compare)-1], " |"))); d != "" {
		t.Errorf("side-by-side row (-want +got):\n%s\n%s", d, out.String())
	}
}

// printCompare puts each cell under its pair and protocol, the anchors beside the traces that have
// them and a dash beside those that do not.
func TestPrintCompareColumns(t *testing.T) {
	fa, bf := [2]annotations.Policy{annotations.PolicyFragAware, annotations.PolicyFragAware}, [2]annotations.Policy{PolicyBestFit, PolicyBestFit}
	cells := []compareCell{
		{"multigpu50", fa, CPUPodsCardinal, Stat{Mean: 1}}, {"multigpu50", bf, CPUPodsCardinal, Stat{Mean: 2}},
		{"multigpu50", fa, CPUPodsLeastAllocated, Stat{Mean: 3}}, {"multigpu50", bf, CPUPodsLeastAllocated, Stat{Mean: 4}},
		{"blend cpu=3", fa, CPUPodsCardinal, Stat{Mean: 5}}, {"blend cpu=3", bf, CPUPodsCardinal, Stat{Mean: 6}},
		{"blend cpu=3", fa, CPUPodsLeastAllocated, Stat{Mean: 7}}, {"blend cpu=3", bf, CPUPodsLeastAllocated, Stat{Mean: 8}},
	}
	var out strings.Builder
	printCompare(&out, FormatMarkdown, "130 %", [][2]annotations.Policy{fa, bf}, []CPUPodPolicy{CPUPodsCardinal, CPUPodsLeastAllocated}, cells)
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"| trace | BestFit (published) | FGD (published) | frag-aware, CPU-only pods cardinal | bestfit, CPU-only pods cardinal | frag-aware, CPU-only pods least-allocated | bestfit, CPU-only pods least-allocated |",
		"|---|---|---|---|---|---|---|",
		"| multigpu50 | 95.74 | 97.18 | 1.00 ± 0.00 | 2.00 ± 0.00 | 3.00 ± 0.00 | 4.00 ± 0.00 |",
		"| blend cpu=3 | — | — | 5.00 ± 0.00 | 6.00 ± 0.00 | 7.00 ± 0.00 | 8.00 ± 0.00 |",
	}
	if d := cmp.Diff(want, got[len(got)-4:]); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
}
