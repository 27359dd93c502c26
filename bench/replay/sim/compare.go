package sim

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Published anchors: GPU allocation (%) at 130 % arrival that Weng et al., "Beware of
// Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC
// 2023, report for BestFit and FGD on the openb traces their artifact ships. Their simulator places
// every pod, CPU-only ones included, with the policy under test: the cardinal protocol
// (CPUPodsCardinal).
var (
	publishedBestFit = map[string]float64{"default": 93.08, "gpushare100": 85.01, "multigpu50": 95.74}
	publishedFGD     = map[string]float64{"default": 95.39, "gpushare100": 86.90, "multigpu50": 97.18}
)

// compareCell is one run's GPU allocation at the end of arrivals, for printCompare.
type compareCell struct {
	pods     string
	pair     [2]annotations.Policy
	protocol CPUPodPolicy
	alloc    Stat
}

// printCompare prints, per trace or blend, the published anchors and every policy pair's GPU
// allocation under each protocol, side by side.
func printCompare(out io.Writer, format Format, arrival string, pairs [][2]annotations.Policy, protocols []CPUPodPolicy, cells []compareCell) {
	header := []string{"trace", "BestFit (published)", "FGD (published)"}
	for _, protocol := range protocols {
		for _, pair := range pairs {
			header = append(header, fmt.Sprintf("%s, CPU-only pods %s", pairName(pair), protocol))
		}
	}
	var order []string
	byKey := map[string]Stat{}
	for _, c := range cells {
		if len(order) == 0 || order[len(order)-1] != c.pods {
			order = append(order, c.pods)
		}
		byKey[compareKey(c.pods, c.pair, c.protocol)] = c.alloc
	}
	var lines [][]string
	for _, pods := range order {
		line := []string{pods, anchor(publishedBestFit, pods), anchor(publishedFGD, pods)}
		for _, protocol := range protocols {
			for _, pair := range pairs {
				line = append(line, pm(byKey[compareKey(pods, pair, protocol)], 2))
			}
		}
		lines = append(lines, line)
	}
	title := fmt.Sprintf("GPU allocated (%%) at %s arrival, CPU-only pods placed each way; the published anchors placed them with the policy under test (%s).", arrival, CPUPodsCardinal)
	if format == FormatMarkdown {
		fmt.Fprintf(out, "\n%s\n\n| %s |\n|%s\n", title, strings.Join(header, " | "), strings.Repeat("---|", len(header)))
		for _, l := range lines {
			fmt.Fprintf(out, "| %s |\n", strings.Join(l, " | "))
		}
		return
	}
	fmt.Fprintf(out, "\n%s\n", title)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, l := range lines {
		fmt.Fprintln(tw, strings.Join(l, "\t"))
	}
	_ = tw.Flush()
}

func compareKey(pods string, pair [2]annotations.Policy, protocol CPUPodPolicy) string {
	return pods + "\x00" + pairName(pair) + "\x00" + string(protocol)
}

// pairName is "p" for a pair of one policy, else "node/gpu".
func pairName(pair [2]annotations.Policy) string {
	if pair[0] == pair[1] {
		return string(pair[0])
	}
	return string(pair[0]) + "/" + string(pair[1])
}

func anchor(m map[string]float64, pods string) string {
	if v, ok := m[pods]; ok {
		return fmt.Sprintf("%.2f", v)
	}
	return "—"
}
