// Command migplace compares how many MIG requests two placement policies serve (issue 40): a
// seeded stream of requests for a realistic mix of profiles arrives at a pool of A100-80GB cards
// in dynamic MIG mode, one at a time, each placed by pkg/migplace's fragmentation-aware choice or
// by first-fit (first card, lowest free start), or refused when no card has a free placement of its
// profile; placed instances leave after a random lifetime. It prints a Markdown table: requests
// served, and compute slices served, per policy and offered load, and the share served of each
// profile. The same flags print the same table.
//
//	go run ./bench/migplace
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cardinal-gpu/cardinal/pkg/migplace"
)

func main() {
	fs := pflag.NewFlagSet("migplace", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: go run ./bench/migplace [flags]\n\nPrints MIG requests served by frag-aware and first-fit placement, by offered load.\n\nFlags:\n%s", fs.FlagUsages())
	}
	cards := fs.Int("cards", 16, "A100-80GB cards in the pool")
	requests := fs.Int("requests", 20000, "requests arriving per run")
	seeds := fs.Int("seeds", 5, "runs per load and policy, seeds 1..N (figures are sums over them)")
	loads := fs.String("loads", "0.6,0.8,1.0,1.2,1.5,0", "offered loads (share of the pool's compute slices; 0: a burst without departures)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	var ls []float64
	for _, s := range strings.Split(*loads, ",") {
		l, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || l < 0 {
			fmt.Fprintf(os.Stderr, "migplace: --loads: %q is not a non-negative number\n", s)
			os.Exit(2)
		}
		ls = append(ls, l)
	}
	if *cards < 1 || *requests < 1 || *seeds < 1 {
		fmt.Fprintln(os.Stderr, "migplace: --cards, --requests and --seeds must be positive")
		os.Exit(2)
	}
	out, err := Table(migplace.A100_80GB, *cards, *requests, *seeds, ls)
	if err != nil {
		fmt.Fprintln(os.Stderr, "migplace:", err)
		os.Exit(1)
	}
	fmt.Print(out)
}

// Table runs both policies at each load over seeds 1..seeds and writes the Markdown tables.
func Table(m *migplace.Model, cards, requests, seeds int, loads []float64) (string, error) {
	var b strings.Builder
	policies := []migplace.Policy{migplace.PolicyFragAware, migplace.PolicyFirstFit}
	burst, burstSeeds := burstSize(m, cards), burstRuns*seeds
	fmt.Fprintf(&b, "%d × %s, %d requests per run, seeds 1..%d (sums over the seeds); burst: %d requests, no departures, seeds 1..%d. Mix (share of requests): %s.\n\n",
		cards, m.Name, requests, seeds, burst, burstSeeds, mixText(DefaultMix))
	fmt.Fprintf(&b, "| load | policy | requests served | compute slices served |")
	for _, q := range DefaultMix {
		fmt.Fprintf(&b, " %s |", q.Profile)
	}
	b.WriteString("\n|---|---|---|---|")
	for range DefaultMix {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, load := range loads {
		for _, p := range policies {
			sum := Result{Offered: map[string]int{}, Served: map[string]int{}}
			n, runs := requests, seeds
			if load == 0 {
				n, runs = burst, burstSeeds
			}
			for s := 1; s <= runs; s++ {
				r, err := Run(Config{Model: m, Cards: cards, Mix: DefaultMix, Requests: n, Load: load, Seed: uint64(s), Policy: p})
				if err != nil {
					return "", err
				}
				for k, v := range r.Offered {
					sum.Offered[k] += v
				}
				for k, v := range r.Served {
					sum.Served[k] += v
				}
				sum.SlicesOffered += r.SlicesOffered
				sum.SlicesServed += r.SlicesServed
			}
			served, offered := sum.ServedAll()
			name := strconv.FormatFloat(load, 'f', -1, 64)
			if load == 0 {
				name = "burst"
			}
			fmt.Fprintf(&b, "| %s | %s | %d / %d (%.1f %%) | %d / %d (%.1f %%) |", name, p, served, offered, pct(served, offered),
				sum.SlicesServed, sum.SlicesOffered, pct(sum.SlicesServed, sum.SlicesOffered))
			for _, q := range DefaultMix {
				fmt.Fprintf(&b, " %.1f %% |", pct(sum.Served[q.Profile], sum.Offered[q.Profile]))
			}
			b.WriteString("\n")
		}
	}
	return b.String(), nil
}

// burstRuns is how many more runs a burst gets than a load (a burst is short).
const burstRuns = 20

// burstSize is a burst's requests: 1.25 × the pool's compute slices over the mix's mean slices per
// request, so that a perfect packing could serve most of it and none all of it.
func burstSize(m *migplace.Model, cards int) int {
	total, slices := 0.0, 0.0
	for _, q := range DefaultMix {
		i, _ := m.Profile(q.Profile)
		total += q.Share
		slices += q.Share * float64(m.Profiles[i].Compute)
	}
	return int(1.25*float64(cards*migplace.ComputeSlices)/(slices/total) + 0.5)
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func mixText(mix []Request) string {
	total := 0.0
	for _, q := range mix {
		total += q.Share
	}
	parts := make([]string, len(mix))
	for k, q := range mix {
		parts[k] = fmt.Sprintf("%s %.0f %%", q.Profile, 100*q.Share/total)
	}
	return strings.Join(parts, ", ")
}
