// Command links measures how well Cardinal links a multi-card container's cards (BENCHMARKS.md
// S9, issue 24): a seeded mix of 1-, 2-, 4- and 8-card pods arriving and leaving on simulated
// NVSwitch, NVLink-pair and PCIe-only nodes, placed by the scheduler's decision core with links,
// by card binpack without them, and by a topology-blind node choice with the cards picked at
// kubelet time as NVIDIA's device plugin does. It prints a Markdown table: pods placed, and of
// the multi-card pods placed the share given an all-NVLink set. The same flags print the same
// table.
//
//	go run ./bench/links
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func main() {
	fs := pflag.NewFlagSet("links", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: go run ./bench/links [flags]\n\nPrints the share of multi-card pods given all-NVLink cards, by policy and topology.\n\nFlags:\n%s", fs.FlagUsages())
	}
	var o options
	fs.IntVar(&o.nodes, "nodes", 12, "nodes per cluster (each 8 cards)")
	fs.IntVar(&o.pods, "pods", 4000, "pods arriving per run")
	fs.IntVar(&o.seeds, "seeds", 5, "runs per cluster and policy, seeds 1..N (figures are sums over them)")
	fs.IntVar(&o.duration, "duration", 40, "a pod's mean lifetime, in arrivals (lifetimes are uniform in 1..2N)")
	policy := fs.String("policy", string(annotations.PolicyBinpack), "node and card policy of every placement: binpack, spread or frag-aware")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	if o.nodes < 1 || o.pods < 1 || o.seeds < 1 || o.duration < 1 {
		fmt.Fprintln(os.Stderr, "links: --nodes, --pods, --seeds and --duration must be positive")
		os.Exit(2)
	}
	o.policy = annotations.Policy(*policy)
	if err := table(os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "links:", err)
		os.Exit(1)
	}
}
