// Package trace reads the node and pod lists of the Alibaba GPU cluster trace (v2023, the data set
// of Weng et al., "Beware of Fragmentation", USENIX ATC 2023) that the placement-quality replay uses.
//
// Columns are found by name in the header, so files with extra or reordered columns read the same;
// columns the replay does not use (qos, pod_phase, times) are ignored. Every error names the file,
// the line, the column and the offending value.
package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MilliPerGPU is one whole card in the trace's gpu_milli unit.
const MilliPerGPU = 1000

// MaxGPUsPerRow bounds num_gpu and gpu so a corrupt row cannot ask for absurd sizes.
const MaxGPUsPerRow = 64

// Node is one row of a node list: a machine and its cards, all of one model.
type Node struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	// GPUs is the number of cards; 0 for a CPU-only node.
	GPUs int
	// Model is the card type (e.g. "T4", "G2"); empty for a CPU-only node.
	Model string
}

// Pod is one row of a pod list: what one pod asks for.
type Pod struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	// NumGPU is the number of cards: 0 for a CPU-only pod.
	NumGPU int
	// GPUMilli is the share of each card in thousandths: 1000 is a whole card; below 1000 (with
	// NumGPU 1) a fraction of one card's memory and compute.
	GPUMilli int64
	// GPUSpec lists the card models the pod accepts (the trace's `A|B`); empty accepts any.
	GPUSpec []string
}

// Fractional reports whether the pod asks for part of one card.
func (p *Pod) Fractional() bool { return p.NumGPU == 1 && p.GPUMilli < MilliPerGPU }

// GPUMilliTotal is the pod's whole GPU request in thousandths of a card.
func (p *Pod) GPUMilliTotal() int64 { return int64(p.NumGPU) * p.GPUMilli }

// Error is a problem in one field of one line of a trace file.
type Error struct {
	File   string
	Line   int
	Column string
	Value  string
	Reason string
	Err    error
}

func (e *Error) Error() string {
	where := fmt.Sprintf("%s:%d", e.File, e.Line)
	if e.Column == "" {
		return fmt.Sprintf("%s: %s", where, e.Reason)
	}
	return fmt.Sprintf("%s: column %s: value %q: %s", where, e.Column, e.Value, e.Reason)
}

func (e *Error) Unwrap() error { return e.Err }

// Column names of the node list.
const (
	colNodeName   = "sn"
	colNodeCPU    = "cpu_milli"
	colNodeMemory = "memory_mib"
	colNodeGPU    = "gpu"
	colNodeModel  = "model"
)

// Column names of the pod list; gpu_spec is optional (the multigpu50 variant lacks it).
const (
	colPodName     = "name"
	colPodCPU      = "cpu_milli"
	colPodMemory   = "memory_mib"
	colPodNumGPU   = "num_gpu"
	colPodGPUMilli = "gpu_milli"
	colPodGPUSpec  = "gpu_spec"
)

// LoadNodes reads a node list file.
func LoadNodes(path string) ([]Node, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("node list: %w", err)
	}
	defer f.Close()
	return ReadNodes(f, filepath.Base(path))
}

// LoadPods reads a pod list file.
func LoadPods(path string) ([]Pod, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pod list: %w", err)
	}
	defer f.Close()
	return ReadPods(f, filepath.Base(path))
}

// ReadNodes reads a node list; file names the source in errors.
func ReadNodes(r io.Reader, file string) ([]Node, error) {
	t, err := newTable(r, file, []string{colNodeName, colNodeCPU, colNodeMemory, colNodeGPU, colNodeModel}, nil)
	if err != nil {
		return nil, err
	}
	var nodes []Node
	seen := map[string]int{}
	for {
		row, err := t.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		n := Node{
			Name:      row.str(colNodeName),
			CPUMilli:  row.int(colNodeCPU, 0, 1<<40),
			MemoryMiB: row.int(colNodeMemory, 0, 1<<40),
			GPUs:      int(row.int(colNodeGPU, 0, MaxGPUsPerRow)),
			Model:     row.str(colNodeModel),
		}
		switch {
		case row.err != nil:
		case n.Name == "":
			row.fail(colNodeName, "is empty")
		case seen[n.Name] != 0:
			row.fail(colNodeName, fmt.Sprintf("node already listed on line %d", seen[n.Name]))
		case n.GPUs > 0 && n.Model == "":
			row.fail(colNodeModel, fmt.Sprintf("is empty on a node with %d GPUs", n.GPUs))
		case strings.ContainsAny(n.Model, "|,"):
			row.fail(colNodeModel, "contains a list separator")
		}
		if row.err != nil {
			return nil, row.err
		}
		seen[n.Name] = row.line
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return nil, &Error{File: file, Line: t.lastLine, Reason: "no nodes"}
	}
	return nodes, nil
}

// ReadPods reads a pod list; file names the source in errors.
func ReadPods(r io.Reader, file string) ([]Pod, error) {
	t, err := newTable(r, file, []string{colPodName, colPodCPU, colPodMemory, colPodNumGPU, colPodGPUMilli}, []string{colPodGPUSpec})
	if err != nil {
		return nil, err
	}
	var pods []Pod
	for {
		row, err := t.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		p, err := decodePod(row)
		if err != nil {
			return nil, err
		}
		pods = append(pods, p)
	}
	if len(pods) == 0 {
		return nil, &Error{File: file, Line: t.lastLine, Reason: "no pods"}
	}
	return pods, nil
}

func decodePod(row *row) (Pod, error) {
	p := Pod{
		Name:      row.str(colPodName),
		CPUMilli:  row.int(colPodCPU, 0, 1<<40),
		MemoryMiB: row.int(colPodMemory, 0, 1<<40),
		NumGPU:    int(row.int(colPodNumGPU, 0, MaxGPUsPerRow)),
		GPUMilli:  row.int(colPodGPUMilli, 0, MilliPerGPU),
	}
	if spec := row.str(colPodGPUSpec); spec != "" {
		for _, m := range strings.Split(spec, "|") {
			if m == "" {
				row.fail(colPodGPUSpec, "has an empty model between separators")
				break
			}
			p.GPUSpec = append(p.GPUSpec, m)
		}
		if strings.Contains(spec, ",") {
			row.fail(colPodGPUSpec, "contains a comma")
		}
	}
	switch {
	case row.err != nil:
	case p.Name == "":
		row.fail(colPodName, "is empty")
	case p.NumGPU == 0 && p.GPUMilli != 0:
		row.fail(colPodGPUMilli, "is not 0 on a pod with num_gpu 0")
	case p.NumGPU > 0 && p.GPUMilli == 0:
		row.fail(colPodGPUMilli, fmt.Sprintf("is 0 on a pod with num_gpu %d", p.NumGPU))
	case p.NumGPU > 1 && p.GPUMilli != MilliPerGPU:
		row.fail(colPodGPUMilli, fmt.Sprintf("is not %d on a pod with num_gpu %d (only single-card pods share a card)", MilliPerGPU, p.NumGPU))
	case p.NumGPU == 0 && len(p.GPUSpec) > 0:
		row.fail(colPodGPUSpec, "names card models on a pod with num_gpu 0")
	}
	if row.err != nil {
		return Pod{}, row.err
	}
	return p, nil
}

// table reads a CSV file whose columns are found by name in its header line.
type table struct {
	file     string
	r        *csv.Reader
	cols     map[string]int
	lastLine int
}

func newTable(r io.Reader, file string, required, optional []string) (*table, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Line: 1, Reason: "empty file, expected a header line"}
		}
		return nil, csvError(file, err)
	}
	cols := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, dup := cols[h]; dup {
			return nil, &Error{File: file, Line: 1, Column: h, Value: h, Reason: "column appears twice in the header"}
		}
		cols[h] = i
	}
	for _, c := range required {
		if _, ok := cols[c]; !ok {
			return nil, &Error{File: file, Line: 1, Reason: fmt.Sprintf("header lacks column %q (has %s)", c, strings.Join(header, ","))}
		}
	}
	keep := map[string]int{}
	for _, c := range append(append([]string(nil), required...), optional...) {
		if i, ok := cols[c]; ok {
			keep[c] = i
		}
	}
	return &table{file: file, r: cr, cols: keep, lastLine: 1}, nil
}

func csvError(file string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &Error{File: file, Line: pe.Line, Reason: pe.Err.Error(), Err: err}
	}
	return &Error{File: file, Reason: err.Error(), Err: err}
}

// next reads one record; io.EOF at the end.
func (t *table) next() (*row, error) {
	rec, err := t.r.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, err
		}
		return nil, csvError(t.file, err)
	}
	line, _ := t.r.FieldPos(0)
	t.lastLine = line
	return &row{t: t, rec: rec, line: line}, nil
}

// row is one record being decoded; the first problem found is kept in err.
type row struct {
	t    *table
	rec  []string
	line int
	err  *Error
}

func (r *row) str(col string) string {
	i, ok := r.t.cols[col]
	if !ok {
		return ""
	}
	return strings.TrimSpace(r.rec[i])
}

// int parses a whole number in [lo, hi]; on failure it records the error and returns 0.
func (r *row) int(col string, lo, hi int64) int64 {
	s := r.str(col)
	v, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		r.fail(col, "is not a whole number")
		return 0
	case v < lo:
		r.fail(col, fmt.Sprintf("is below %d", lo))
		return 0
	case v > hi:
		r.fail(col, fmt.Sprintf("is above %d", hi))
		return 0
	}
	return v
}

func (r *row) fail(col, reason string) {
	if r.err != nil {
		return
	}
	line := r.line
	if i, ok := r.t.cols[col]; ok {
		line, _ = r.t.r.FieldPos(i)
	}
	r.err = &Error{File: r.t.file, Line: line, Column: col, Value: r.str(col), Reason: reason}
}

// WritePods writes pods as a pod list that ReadPods reads back to the same pods: the columns
// name, cpu_milli, memory_mib, num_gpu, gpu_milli and gpu_spec (models joined by "|").
func WritePods(w io.Writer, pods []Pod) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{colPodName, colPodCPU, colPodMemory, colPodNumGPU, colPodGPUMilli, colPodGPUSpec}); err != nil {
		return err
	}
	for i := range pods {
		p := &pods[i]
		rec := []string{p.Name, strconv.FormatInt(p.CPUMilli, 10), strconv.FormatInt(p.MemoryMiB, 10), strconv.Itoa(p.NumGPU),
			strconv.FormatInt(p.GPUMilli, 10), strings.Join(p.GPUSpec, "|")}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
