// Command bench runs Cardinal's speed benchmarks (S1–S6 of shared/BENCHMARKS.md) and writes their
// table; `make bench` runs it. See package bench/report.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/cardinal-gpu/cardinal/bench/report"
)

const help = `bench: run Cardinal's speed benchmarks and write their table.

Each scenario is a go test -bench invocation: S1, S2, S3 and S6 from bench/scenario (S2, S3 and S6
start a real etcd, kube-apiserver and kube-scheduler through test/cluster: root, and the pinned
binaries of hack/testbed/build.sh, which $CARDINAL_TESTBED_BIN names), S4 from pkg/webhook and
test/integration/webhook, S5 from pkg/deviceplugin. A failing benchmark is noted in the table and
makes the exit status 1; the others still run. No figure ever fails the run.

Sizes: tiny (seconds; what go test's smoke test runs), small (a few minutes), full (the sizes of
BENCHMARKS.md; S6 alone watches 10 minutes of steady state).

Run from the repository root. Flags:
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	cfg := report.Config{Root: root, Go: "go", Log: os.Stdout, Now: time.Now}
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, help)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Size, "size", "small", "scenario sizes: tiny, small or full")
	fs.StringSliceVar(&cfg.Only, "only", nil, "comma list of scenarios to run (S1..S6); empty runs all")
	fs.DurationVar(&cfg.S6Window, "s6-window", 0, "S6's steady-state window; 0 keeps the size's (30s small, 10m full)")
	fs.StringVar(&cfg.Out, "out", "bench/results/latest.md", "Markdown table written at the end")
	fs.StringVar(&cfg.Raw, "raw", "bench/results/latest-raw.txt", "every benchmark's raw output; empty writes none")
	fs.StringVar(&cfg.ProfileDir, "profile-dir", "", "when set, a CPU profile and test binary per benchmark go here (go tool pprof <bin> <profile>)")
	fs.StringVar(&cfg.Go, "go", "go", "the go command")
	fs.StringArrayVar(&cfg.Notes, "note", nil, "a note added under the table (repeatable)")
	fs.StringVar(&cfg.FromRaw, "from-raw", "", "run nothing: make the table again from this raw output file (as --raw writes it)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return report.Run(ctx, cfg)
}
