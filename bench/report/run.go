package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Scenarios are the scenario ids, in the table's order.
var Scenarios = []string{"S1", "S2", "S3", "S4", "S5", "S6"}

// Config configures Run.
type Config struct {
	// Size is the scenario size passed to bench/scenario: tiny, small or full.
	Size string
	// Only lists the scenarios to run (Scenarios when empty).
	Only []string
	// S6Window overrides S6's steady-state window (0 keeps the size's).
	S6Window time.Duration
	// Out is the Markdown file written; Raw, when set, receives every benchmark's raw output.
	Out string
	Raw string
	// ProfileDir, when set, gets a CPU profile (and the test binary, for pprof) of each step.
	ProfileDir string
	// Root is the repository root; Go the go command.
	Root string
	Go   string
	// Log receives the benchmarks' output as they run.
	Log io.Writer
	// Now is the clock (the table's date).
	Now func() time.Time
	// Notes are added under the table (findings of the run, by the person who ran it).
	Notes []string
	// FromRaw, when set, runs nothing: the table is made again from that raw output file (as Raw
	// writes it; its "=== run:" line gives the run's date, commit, size and machine).
	FromRaw string
}

func (c *Config) validate() error {
	var errs []error
	switch c.Size {
	case "tiny", "small", "full":
	default:
		errs = append(errs, fmt.Errorf("size %q is not tiny, small or full", c.Size))
	}
	for _, s := range c.Only {
		if !slices.Contains(Scenarios, s) {
			errs = append(errs, fmt.Errorf("unknown scenario %q (want some of %s)", s, strings.Join(Scenarios, ", ")))
		}
	}
	if c.Out == "" {
		errs = append(errs, errors.New("output file is empty"))
	}
	if c.Root == "" || c.Go == "" {
		errs = append(errs, errors.New("repository root and go command must be set"))
	}
	if c.S6Window < 0 {
		errs = append(errs, fmt.Errorf("S6 window %s is negative", c.S6Window))
	}
	if c.Log == nil || c.Now == nil {
		errs = append(errs, errors.New("log and clock must be set"))
	}
	return errors.Join(errs...)
}

// step is one go test -bench invocation.
type step struct {
	scenario     string
	pkg          string
	bench        string // -bench pattern
	benchtime    string
	timeout      time.Duration
	scenarioArgs bool // passes -size and -s6-window to the test binary
}

// steps are the invocations, by scenario. S2, S3, S6 are bench/scenario's; S1, S4 and S5 the
// benchmarks their packages own.
func steps() []step {
	return []step{
		{scenario: "S1", pkg: "./pkg/scheduler", bench: "^Benchmark(Filter|FilterPrioritize)$", benchtime: "1000x", timeout: 30 * time.Minute},
		{scenario: "S2", pkg: "./bench/scenario", bench: "^BenchmarkS2(Scale)?$", benchtime: "1x", timeout: 80 * time.Minute, scenarioArgs: true},
		{scenario: "S3", pkg: "./bench/scenario", bench: "^BenchmarkS3$", benchtime: "1x", timeout: 30 * time.Minute, scenarioArgs: true},
		{scenario: "S4", pkg: "./pkg/webhook", bench: "^BenchmarkAdmission$", benchtime: "2000x", timeout: 10 * time.Minute},
		{scenario: "S4", pkg: "./test/integration/webhook", bench: "^BenchmarkAdmissionThroughAPIServer$", benchtime: "1x", timeout: 20 * time.Minute},
		{scenario: "S5", pkg: "./pkg/deviceplugin", bench: "^Benchmark(Allocate|PreStart)$", benchtime: "5000x", timeout: 10 * time.Minute},
		{scenario: "S6", pkg: "./bench/scenario", bench: "^BenchmarkS6$", benchtime: "1x", timeout: 60 * time.Minute, scenarioArgs: true},
	}
}

// args is the go test command line of s.
func (s step) args(cfg Config, n int) []string {
	a := []string{"test", "-run", "^$", "-bench", s.bench, "-benchtime", s.benchtime, "-benchmem", "-count", "1", "-timeout", s.timeout.String()}
	if cfg.ProfileDir != "" {
		base := filepath.Join(cfg.ProfileDir, fmt.Sprintf("%d-%s", n, s.scenario))
		a = append(a, "-cpuprofile", base+".pprof", "-o", base+".test")
	}
	a = append(a, s.pkg)
	if s.scenarioArgs {
		a = append(a, "-args", "-size="+cfg.Size)
		if cfg.S6Window > 0 {
			a = append(a, "-s6-window="+cfg.S6Window.String())
		}
	}
	return a
}

// Run runs the selected benchmarks one after the other (a failing one is noted, the others still
// run), then writes the table to cfg.Out. It returns an error when a benchmark failed, after the
// table is written.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	only := cfg.Only
	if len(only) == 0 {
		only = Scenarios
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return err
		}
	}
	if cfg.FromRaw != "" {
		return rerender(cfg, only)
	}
	meta := Meta{Machine: ThisMachine(), Date: cfg.Now(), Commit: commit(ctx, cfg.Root), Size: cfg.Size}
	var raw bytes.Buffer
	header, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	fmt.Fprintf(&raw, "%s%s\n", runLine, header)
	var results []Result
	var failed []error
	for n, s := range steps() {
		if !slices.Contains(only, s.scenario) {
			continue
		}
		args := s.args(cfg, n)
		fmt.Fprintf(cfg.Log, "=== %s: go %s\n", s.scenario, strings.Join(args, " "))
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, cfg.Go, args...)
		cmd.Dir = cfg.Root
		cmd.Stdout = io.MultiWriter(&out, cfg.Log)
		cmd.Stderr = io.MultiWriter(&out, cfg.Log)
		started := time.Now()
		err := cmd.Run()
		fmt.Fprintf(&raw, "=== %s: go %s (%s)\n%s\n", s.scenario, strings.Join(args, " "), time.Since(started).Round(time.Second), out.String())
		if err != nil {
			failed = append(failed, fmt.Errorf("%s (%s %s): %w", s.scenario, s.pkg, s.bench, err))
			meta.Notes = append(meta.Notes, fmt.Sprintf("%s: `go %s` failed (%v); see the raw output.", s.scenario, strings.Join(args, " "), err))
		}
		got, perr := Parse(&out)
		if perr != nil {
			failed = append(failed, fmt.Errorf("%s: %w", s.scenario, perr))
		}
		results = append(results, got...)
	}
	if err := writeTable(cfg, meta, results, only); err != nil {
		return err
	}
	if cfg.Raw != "" {
		if err := writeFile(cfg.Raw, func(w io.Writer) error { _, err := w.Write(raw.Bytes()); return err }); err != nil {
			return err
		}
	}
	fmt.Fprintf(cfg.Log, "wrote %s\n", cfg.Out)
	return errors.Join(failed...)
}

// runLine starts the raw output's first line, followed by the run's Meta in JSON.
const runLine = "=== run: "

// writeTable writes the rows of the scenarios in only, with the method notes and cfg's notes.
func writeTable(cfg Config, meta Meta, results []Result, only []string) error {
	meta.Notes = append(meta.Notes, methodNotes...)
	meta.Notes = append(meta.Notes, cfg.Notes...)
	var kept []Row
	for _, r := range Rows(results) {
		if slices.Contains(only, r.Scenario) {
			kept = append(kept, r)
		}
	}
	return writeFile(cfg.Out, func(w io.Writer) error { return Render(w, meta, kept) })
}

// rerender makes the table again from cfg.FromRaw.
func rerender(cfg Config, only []string) error {
	data, err := os.ReadFile(cfg.FromRaw)
	if err != nil {
		return err
	}
	meta := Meta{Machine: ThisMachine(), Date: cfg.Now(), Commit: "unknown", Size: cfg.Size}
	first, _, _ := strings.Cut(string(data), "\n")
	if rest, ok := strings.CutPrefix(first, runLine); ok {
		if err := json.Unmarshal([]byte(rest), &meta); err != nil {
			return fmt.Errorf("%s: run line: %w", cfg.FromRaw, err)
		}
		meta.Notes = nil
	}
	results, err := Parse(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.FromRaw, err)
	}
	if err := writeTable(cfg, meta, results, only); err != nil {
		return err
	}
	fmt.Fprintf(cfg.Log, "wrote %s from %s\n", cfg.Out, cfg.FromRaw)
	return nil
}

// methodNotes say how the figures were measured.
var methodNotes = []string{
	"S1: pkg/scheduler BenchmarkFilterPrioritize (and BenchmarkFilter) — the extender's real gin handler on a loopback httptest server over a cache of N nodes × 8 A100s about half held by running pods — state=distinct: every node in a state of its own (A100 40/80 GB, shares 1/2/4/8, cards held whole or in slots of varied memory and cores), the target rows; state=patterns: 4 of 8 exclusive cards held, 70 repeated states, shown for comparison; the default policies (frag-aware, with the task mix the held pods make); a 2-card pod, names spread over the cluster; 1000 operations per case, timed at the client; allocations and CPU per operation are the whole process's (client and server).",
	"S2: one test bed per node count (etcd, kube-apiserver and kube-scheduler of the test bed's Kubernetes, 1.37 unless CARDINAL_K8S_VERSION says otherwise); API-only nodes carry the inventory the device plugin publishes and nvidia.com/gpu capacity. Plain phase first: default profile (adaptive percentageOfNodesToScore), no extender, nvidia.com/gpu counted as an extended resource; then all pods deleted and the Cardinal phase: webhook registered as the chart does (pods get schedulerName cardinal-scheduler from it), the extender in-process (scheduler.Run, its binary's client defaults, authenticated by a token of its ServiceAccount), the chart's rendered KubeSchedulerConfiguration (two profiles: cardinal-scheduler, which whole-card pods get, samples nodes as kube-scheduler's adaptive default does; cardinal-scheduler-exact scores every node). CPU seconds: each process from kube-scheduler's start to the last binding; others is the machine's busy time no listed process accounts for, steal the time the hypervisor took from this machine. Each phase's pods are created first; kube-scheduler starts after, so pods/s is (bound−1) over first→last binding as seen by a watch, not the create rate. Both kube-schedulers get clientConnection qps/burst 5000 so the default 50 QPS does not cap plain binding. Attempt p50/p99: kube-scheduler's scheduler_scheduling_attempt_duration_seconds{result=scheduled}, interpolated inside its buckets.",
	"S3: Cardinal only, as in S2. With BENCHMARKS.md's sizes 64 pods × 2 GPUs ask for 128 cards of 64: the 32 that fit must bind, the other 32 must stay pending. Bind errors: the extender's GPUBindFailed events plus FailedScheduling events that mention binding; double-booked: cards named by the assignments of two bound pods.",
	"S4: pkg/webhook BenchmarkAdmission (handler over HTTP in process) and test/integration/webhook BenchmarkAdmissionThroughAPIServer (100 creates/s for 10 s through a real apiserver; the apiserver's histogram's smallest bucket is 5 ms, so its p99 is a bucket bound).",
	"S5: pkg/deviceplugin BenchmarkAllocate (64 cards × 4 shares, 60 pods in flight), podresources=off (the order rules alone) beside on (the kubelet's PodResources List asked over a unix socket which pod is being admitted, as on a node); no API call (the record is written asynchronously). BenchmarkPreStart: every container start read against the kubelet's device checkpoint (60 pods, on disk).",
	"S6: the S2 set-up plus the device plugin's own Run (simulated NVML, no kubelet) in process on a sample of the nodes; the sampled nodes start without an inventory, so each plugin's first publish is a start-up write. Writes (POST/PUT/PATCH/DELETE) of every Cardinal client are counted by a round-tripper over the window after the start-up settled, and cross-checked with the apiserver's apiserver_request_total for nodes; the per-minute figure scales the sample to all nodes.",
}

// commit is `git describe --always --dirty` of root.
func commit(ctx context.Context, root string) string {
	cmd := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty", "--abbrev=12")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// writeFile writes a file through a temporary file in the same folder, then renames it.
func writeFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
