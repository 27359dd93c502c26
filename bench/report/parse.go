// Package report turns the output of the speed benchmarks (go test -bench) into the Markdown table
// of bench/results/latest.md: every figure of shared/BENCHMARKS.md against its target, with the
// machine, the date and the commit.
package report

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Result is one line of go test -bench output.
type Result struct {
	// Name is the benchmark's full name without the -GOMAXPROCS suffix, e.g.
	// "BenchmarkFilterPrioritize/nodes=5000/names=500".
	Name       string
	Iterations int64
	// Metrics are the line's values by unit ("ns/op", "allocs/op", "p99-ms", ...).
	Metrics map[string]float64
}

// procsSuffix is the -N go test appends to a benchmark's name when GOMAXPROCS > 1.
var procsSuffix = regexp.MustCompile(`-\d+$`)

// maxLine bounds one line of benchmark output.
const maxLine = 1 << 20

// Parse reads go test -bench output and returns its benchmark lines in order; other lines are
// ignored. A benchmark line that does not parse is an error.
func Parse(r io.Reader) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue // a benchmark's name printed alone, before its sub-benchmarks or its log
		}
		iters, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue // "BenchmarkX   some log text": not a result line
		}
		if len(fields)%2 != 0 {
			return nil, fmt.Errorf("line %d: %q: values and units do not pair up", n, line)
		}
		res := Result{Name: procsSuffix.ReplaceAllString(fields[0], ""), Iterations: iters, Metrics: map[string]float64{}}
		for i := 2; i < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: value %q of %s: %w", n, fields[i], fields[i+1], err)
			}
			res.Metrics[fields[i+1]] = v
		}
		out = append(out, res)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read benchmark output: %w", err)
	}
	return out, nil
}
