package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// Format is how RunBatch prints results.
type Format string

const (
	// FormatText is an aligned table for people.
	FormatText Format = "text"
	// FormatMarkdown is a Markdown table, as in bench/results.
	FormatMarkdown Format = "markdown"
)

// BatchConfig is what the replay command runs: every pod list under every pair of policies.
type BatchConfig struct {
	NodesFile string
	PodsFiles []string
	// Pairs are the (node policy, card policy) pairs to run, in order.
	Pairs [][2]annotations.Policy
	// Replay holds the settings every run shares (seeds, arrival, synthesis, ...); each run fills in
	// its Nodes, Pods, NodePolicy and GPUPolicy.
	Replay Config
	Format Format
	// Blends, when set, replace the pod lists by blends resampled from all of them together
	// (BlendRows pods each, drawn with BlendSeed).
	Blends    []Blend
	BlendRows int
	BlendSeed uint64
	// Dump, when set, is a file to which the blend's pod list is written (trace.WritePods), for the
	// replay to read back as a pod list; it takes exactly one blend.
	Dump string
	// PerSeed prints one line per seed as well.
	PerSeed bool
	// Protocols, when set, replays every list under each of these CPU-only pod policies (each
	// replacing Replay.CPUPods) and ends with the protocols side by side (printCompare).
	Protocols []CPUPodPolicy
	Log       logr.Logger
}

func (c *BatchConfig) validate() error {
	var errs []error
	if c.NodesFile == "" {
		errs = append(errs, errors.New("--nodes is empty"))
	}
	if len(c.PodsFiles) == 0 {
		errs = append(errs, errors.New("--pods is empty"))
	}
	if len(c.Pairs) == 0 {
		errs = append(errs, errors.New("no policy pair to run"))
	}
	if c.Dump != "" && len(c.Blends) != 1 {
		errs = append(errs, fmt.Errorf("--dump %s takes exactly one --blend, not %d", c.Dump, len(c.Blends)))
	}
	if c.Format != FormatText && c.Format != FormatMarkdown {
		errs = append(errs, fmt.Errorf("--format %q is not text or markdown", c.Format))
	}
	return errors.Join(errs...)
}

// ParseSeeds parses a seed list: comma-separated seeds or ranges, e.g. "42-51" or "1,5,7-9".
func ParseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("seed %q is not a non-negative integer", lo)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("seed range %q is not lo-hi with lo <= hi", part)
			}
		}
		if b-a > 10000 {
			return nil, fmt.Errorf("seed range %q has more than 10000 seeds", part)
		}
		for v := a; v <= b; v++ {
			out = append(out, v)
		}
	}
	return out, nil
}

// ParsePairs parses policy pairs "node/gpu" separated by commas; a lone name is used for both.
// "bestfit" (PolicyBestFit, the replay's baseline) stands alone.
func ParsePairs(s string) ([][2]annotations.Policy, error) {
	var out [][2]annotations.Policy
	for _, part := range strings.Split(s, ",") {
		n, g, ok := strings.Cut(strings.TrimSpace(part), "/")
		if !ok {
			g = n
		}
		if n == string(PolicyBestFit) || g == string(PolicyBestFit) {
			if n != g {
				return nil, fmt.Errorf("policy pair %q: %s is both halves or neither", part, PolicyBestFit)
			}
			out = append(out, [2]annotations.Policy{PolicyBestFit, PolicyBestFit})
			continue
		}
		np, err := annotations.ParsePolicy("node policy", n)
		if err != nil {
			return nil, err
		}
		gp, err := annotations.ParsePolicy("gpu policy", g)
		if err != nil {
			return nil, err
		}
		out = append(out, [2]annotations.Policy{np, gp})
	}
	return out, nil
}

// RunBatch loads the trace files, runs every pod list under every policy pair and prints a table.
func RunBatch(ctx context.Context, c BatchConfig, out io.Writer) error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	nodes, err := trace.LoadNodes(c.NodesFile)
	if err != nil {
		return err
	}
	type row struct {
		pods     string
		pair     [2]annotations.Policy
		protocol CPUPodPolicy
		res      *Result
	}
	protocols := c.Protocols
	if len(protocols) == 0 {
		protocols = []CPUPodPolicy{c.Replay.CPUPods}
	}
	var rows []row
	lists, names := make([][]trace.Pod, 0, len(c.PodsFiles)), make([]string, 0, len(c.PodsFiles))
	for _, pf := range c.PodsFiles {
		pods, err := trace.LoadPods(pf)
		if err != nil {
			return err
		}
		lists, names = append(lists, pods), append(names, pf)
	}
	if len(c.Blends) > 0 {
		var pool []trace.Pod
		for _, l := range lists {
			pool = append(pool, l...)
		}
		lists, names = lists[:0], names[:0]
		for i := range c.Blends {
			pods, err := c.Blends[i].Make(pool, cmp.Or(c.BlendRows, len(pool)/max(len(c.PodsFiles), 1)), c.BlendSeed)
			if err != nil {
				return err
			}
			lists, names = append(lists, pods), append(names, "blend "+c.Blends[i].String())
		}
		if c.Dump != "" {
			if err := dumpPods(c.Dump, lists[0]); err != nil {
				return err
			}
		}
	}
	for li, pods := range lists {
		pf := names[li]
		for _, protocol := range protocols {
			for _, pair := range c.Pairs {
				cfg := c.Replay
				cfg.Nodes, cfg.Pods, cfg.NodePolicy, cfg.GPUPolicy, cfg.CPUPods = nodes, pods, pair[0], pair[1], protocol
				res, err := Run(ctx, cfg)
				if err != nil {
					return fmt.Errorf("%s with %s/%s, CPU-only pods %s: %w", pf, pair[0], pair[1], protocol, err)
				}
				s := res.Summary()
				c.Log.Info("replayed", "pods", filepath.Base(pf), logging.KeyPolicy, fmt.Sprintf("%s/%s", pair[0], pair[1]), "cpuPods", protocol,
					"alloc", s.AllocEnd.Mean, logging.KeyDuration, res.Elapsed.Round(time.Millisecond).String())
				rows = append(rows, row{pods: traceName(pf), pair: pair, protocol: protocol, res: res})
			}
		}
	}
	arrival := fmt.Sprintf("%.0f %%", 100*c.Replay.Arrival)
	frag := fmt.Sprintf("%.0f %%", 100*c.Replay.FragAt)
	header := []string{"trace", "node/gpu policy", "CPU-only pods", "alloc @100 %", "alloc @" + arrival, "first failure (arrival %)", "frag @" + frag + " (GPUs)", "frag @" + frag + " (% of free)", "of which CPU/memory (%)", "seeds", "time"}
	var lines [][]string
	for _, r := range rows {
		s := r.res.Summary()
		fail := pm(s.FirstFail, 2)
		if s.NoFail > 0 {
			fail += fmt.Sprintf(" (%d seeds none)", s.NoFail)
		}
		lines = append(lines, []string{r.pods, fmt.Sprintf("%s/%s", r.pair[0], r.pair[1]), string(r.protocol), pm(s.Alloc100, 2), pm(s.AllocEnd, 2), fail,
			pm(s.FragGPUs, 1), pm(s.FragPercent, 1), pm(s.FragHost, 1), strconv.Itoa(len(r.res.Seeds)), r.res.Elapsed.Round(100 * time.Millisecond).String()})
		if c.PerSeed {
			for _, sr := range r.res.Seeds {
				lines = append(lines, []string{"", fmt.Sprintf("seed %d", sr.Seed), "", fmt.Sprintf("%.2f", sr.Alloc100), fmt.Sprintf("%.2f", sr.AllocEnd),
					fmt.Sprintf("%.2f", sr.FirstFail), fmt.Sprintf("%.1f", sr.FragGPUs), fmt.Sprintf("%.1f", sr.FragPercent), fmt.Sprintf("%.1f", sr.FragHost),
					fmt.Sprintf("%d pods, %d GPU failed, %d core calls", sr.Arrived, sr.FailedGPU, sr.CoreCalls), sr.Elapsed.Round(10 * time.Millisecond).String()})
			}
		}
	}
	if len(c.Protocols) > 0 {
		cells := make([]compareCell, 0, len(rows))
		for _, r := range rows {
			cells = append(cells, compareCell{pods: r.pods, pair: r.pair, protocol: r.protocol, alloc: r.res.Summary().AllocEnd})
		}
		defer printCompare(out, c.Format, arrival, c.Pairs, c.Protocols, cells)
	}
	if c.Format == FormatMarkdown {
		fmt.Fprintf(out, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
		for _, l := range lines {
			fmt.Fprintf(out, "| %s |\n", strings.Join(l, " | "))
		}
		if c.Replay.Why {
			for _, r := range rows {
				printWhy(out, r.pods, r.res)
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, l := range lines {
		fmt.Fprintln(tw, strings.Join(l, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if c.Replay.Why {
		for _, r := range rows {
			printWhy(out, r.pods, r.res)
		}
	}
	return nil
}

// traceName shortens a pod-list path to the trace's variant, e.g. "default" for
// openb_pod_list_default.csv.
func traceName(path string) string {
	b := strings.TrimSuffix(filepath.Base(path), ".csv")
	return strings.TrimPrefix(b, "openb_pod_list_")
}

func pm(s Stat, digits int) string {
	if math.IsNaN(s.Mean) {
		return "n/a"
	}
	return fmt.Sprintf("%.*f ± %.*f", digits, s.Mean, digits, s.SD)
}

// dumpPods writes pods to the file path as a pod list (trace.WritePods).
func dumpPods(path string, pods []trace.Pod) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--dump: %w", err)
	}
	if err := trace.WritePods(f, pods); err != nil {
		f.Close()
		return fmt.Errorf("--dump %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--dump %s: %w", path, err)
	}
	return nil
}
