package report

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    []Result
		wantErr string
	}{
		{
			name: "result lines with custom metrics; GOMAXPROCS suffix dropped; other lines ignored",
			in: "goos: linux\nBenchmarkFilterPrioritize/nodes=5000/names=500-2   \t       1\t 123456 ns/op\t 0.25 p50-ms\t 0.9 p99-ms\t 812 allocs/call\n" +
				"    smoke_test.go:1: a log line\nPASS\nok  \tgithub.com/x\t1.2s\n",
			want: []Result{{Name: "BenchmarkFilterPrioritize/nodes=5000/names=500", Iterations: 1,
				Metrics: map[string]float64{"ns/op": 123456, "p50-ms": 0.25, "p99-ms": 0.9, "allocs/call": 812}}},
		},
		{
			name: "a name alone (sub-benchmarks follow) and a name followed by log text are not results",
			in:   "BenchmarkAllocate\nBenchmarkS2 cluster /tmp/x: ready\nBenchmarkAllocate/devices=1 5000 2000 ns/op 3 p50-µs 9 p99-µs\n",
			want: []Result{{Name: "BenchmarkAllocate/devices=1", Iterations: 5000, Metrics: map[string]float64{"ns/op": 2000, "p50-µs": 3, "p99-µs": 9}}},
		},
		{
			name:    "a value without its unit",
			in:      "BenchmarkS3 1 5 ns/op 2\n",
			wantErr: "values and units do not pair up",
		},
		{
			name:    "a unit where a value belongs",
			in:      "BenchmarkS3 1 fast ns/op\n",
			wantErr: `value "fast" of ns/op`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add("BenchmarkS2-2 1 5 ns/op 120.5 plain-pods/s 0.8 ratio\n")
	f.Add("BenchmarkS1/nodes=1/names=1 1 1 p99-ms\nBenchmark\n")
	f.Add("Benchmark 1 NaN x\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, r := range got {
			if !strings.HasPrefix(r.Name, "Benchmark") || r.Metrics == nil {
				t.Errorf("result %+v from %q", r, in)
			}
		}
		// Rows must describe whatever parsed, without panicking.
		_ = Rows(got)
	})
}

func TestRowsVerdicts(t *testing.T) {
	results := []Result{
		// 500 names: p99 0.8 ≤ 1 ms meets; 5000 names: p99 3.5 > 3 ms misses.
		{Name: "BenchmarkFilterPrioritize/nodes=5000/names=500", Metrics: map[string]float64{"p50-µs": 500, "p99-µs": 800, "allocs/op": 900}},
		{Name: "BenchmarkFilterPrioritize/nodes=5000/names=5000", Metrics: map[string]float64{"p50-µs": 2000, "p99-µs": 3500}},
		// Distinct node states carry the targets (p99 2.5 > 1 ms misses); repeated patterns are shown
		// without one, however fast.
		{Name: "BenchmarkFilterPrioritize/nodes=5000/names=500/state=distinct", Metrics: map[string]float64{"p50-µs": 900, "p99-µs": 2500}},
		{Name: "BenchmarkFilterPrioritize/nodes=5000/names=500/state=patterns", Metrics: map[string]float64{"p50-µs": 300, "p99-µs": 600}},
		// 140 / 200 = 0.70: meets exactly.
		{Name: "BenchmarkS2", Metrics: map[string]float64{"cardinal-pods/s": 140, "plain-pods/s": 200, "ratio": 0.70, "nodes": 1000, "pods": 5000}},
		// S2 at other sizes: 100 nodes shows growth only; 5000 nodes carries the target (0.65 misses).
		{Name: "BenchmarkS2Scale/nodes=100", Metrics: map[string]float64{"cardinal-pods/s": 300, "plain-pods/s": 600, "ratio": 0.5, "nodes": 100, "pods": 800}},
		{Name: "BenchmarkS2Scale/nodes=5000", Metrics: map[string]float64{"cardinal-pods/s": 130, "plain-pods/s": 200, "ratio": 0.65, "nodes": 5000, "pods": 5000}},
		// 1 bind error misses although 2.1 s ≤ 5 s.
		{Name: "BenchmarkS3", Metrics: map[string]float64{"all-bound-s": 2.1, "bind-errors": 1, "bound": 32, "pods": 64}},
		{Name: "BenchmarkAllocate/devices=8", Metrics: map[string]float64{"p50-µs": 40, "p99-µs": 120}},
		{Name: "BenchmarkS6", Metrics: map[string]float64{"node-writes": 0, "nodes": 1000, "plugins": 50, "window-s": 600}},
	}
	type verdict struct{ Scenario, Verdict string }
	var got []verdict
	for _, r := range Rows(results) {
		got = append(got, verdict{r.Scenario, r.Verdict})
	}
	want := []verdict{
		{"S1", Meets}, {"S1", Misses}, {"S1", Misses}, {"S1", Info},
		{"S2", Meets}, {"S2", Info}, {"S2", Info}, {"S2", Info},
		{"S2", Info}, {"S2", Info}, {"S2", Misses}, {"S2", Info},
		{"S3", Misses},
		{"S4", NoRun},
		{"S5", Meets},
		{"S6", Meets},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
}

func TestRenderHasMachineCommitAndRows(t *testing.T) {
	var b bytes.Buffer
	meta := Meta{Machine: Machine{CPU: "Test CPU", Cores: 2, MemoryGiB: 23.5, OS: "linux/amd64", Go: "go1.26"},
		Date: time.Date(2026, 11, 21, 3, 0, 0, 0, time.UTC), Commit: "abc123", Size: "small", Notes: []string{"a | note"}}
	if err := Render(&b, meta, []Row{{Scenario: "S6", What: "writes", Measured: "0 per minute", Target: "0", Verdict: Meets}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| date | 2026-11-21 03:00 UTC |",
		"| commit | `abc123` |",
		"| machine | Test CPU, 2 cores, 23.5 GiB memory, linux/amd64, go1.26 |",
		"| S6 | writes | 0 per minute | 0 | meets |  |",
		`- a | note`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("page lacks %q:\n%s", want, b.String())
		}
	}
}

func TestMachineParsers(t *testing.T) {
	cpu := cpuModel(strings.NewReader("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor @ 2.30GHz\n"))
	if cpu != "Intel(R) Xeon(R) Processor @ 2.30GHz" {
		t.Errorf("cpu = %q", cpu)
	}
	// 24684096 kB / 1048576 = 23.54 GiB.
	mem := memTotalGiB(strings.NewReader("MemTotal:       24684096 kB\nMemFree: 1 kB\n"))
	if mem < 23.53 || mem > 23.55 {
		t.Errorf("memory = %v GiB, want 23.54", mem)
	}
	if got := loadAverages("25.74 20.14 19.38 3/1234 5678\n"); got != "25.74 20.14 19.38" {
		t.Errorf("load = %q", got)
	}
	if got := loadAverages("1.0"); got != "" {
		t.Errorf("load of a short line = %q, want empty", got)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Size: "small", Out: "x.md", Root: ".", Go: "go", Log: &bytes.Buffer{}, Now: time.Now}
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"valid", func(*Config) {}, ""},
		{"unknown size", func(c *Config) { c.Size = "huge" }, `size "huge"`},
		{"unknown scenario", func(c *Config) { c.Only = []string{"S7"} }, `unknown scenario "S7"`},
		{"no output", func(c *Config) { c.Out = "" }, "output file is empty"},
		{"negative window", func(c *Config) { c.S6Window = -time.Second }, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestRunWritesTheTable runs Run with a fake go command that prints canned benchmark output: the
// table gets the parsed rows, only of the scenarios asked for.
func TestRunWritesTheTable(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "go")
	script := "#!/bin/sh\necho 'BenchmarkS3-2 1 5 ns/op 1.5 all-bound-s 0 bind-errors 32 bound 64 pods 0 double-booked'\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "latest.md")
	var log bytes.Buffer
	cfg := Config{Size: "tiny", Only: []string{"S3"}, Out: out, Raw: filepath.Join(dir, "raw.txt"), Root: dir, Go: fake, Log: &log, Now: time.Now}
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "| S3 | 64 two-GPU pods") || !strings.Contains(string(page), "32 bound in 1.50 s, 0 bind errors") {
		t.Errorf("page lacks S3's row:\n%s", page)
	}
	if strings.Contains(string(page), "| S1 |") {
		t.Errorf("page has a row of a scenario not asked for:\n%s", page)
	}

	// The raw output makes the same table again, with the run's own date and commit.
	again := cfg
	again.Out, again.FromRaw, again.Now = filepath.Join(dir, "again.md"), cfg.Raw, func() time.Time { return time.Time{} }
	if err := Run(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	page2, err := os.ReadFile(again.Out)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(page), string(page2)); diff != "" {
		t.Errorf("table made again from the raw output differs (-first +again):\n%s", diff)
	}
}
