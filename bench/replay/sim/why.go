package sim

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
)

// Why explains a replay's losses (Config.Why): which GPU pods fit nowhere and why, and where the
// GPU capacity still free at the end sits. It is a diagnostic, not part of FGD's protocol.
type Why struct {
	// Failed counts GPU pods that fit nowhere, by kind (PodKind) and reason (WhyCards, WhyHost).
	Failed map[WhyKey]int
	// Free is the GPU capacity (in cards) free at the end, by node size (cards per node).
	Free map[int]*WhyFree
	// CPUPods counts CPU-only pods by the size of the node they went to: [0] onto a node none of
	// whose cards was in use, [1] onto one with cards in use.
	CPUPods map[int]*[2]int
}

func newWhy() *Why {
	return &Why{Failed: map[WhyKey]int{}, Free: map[int]*WhyFree{}, CPUPods: map[int]*[2]int{}}
}

// whyCPU records where a CPU-only pod went (before it is added to node n).
func (w *Why) whyCPU(n *simNode) {
	c := w.CPUPods[len(n.usedMilli)]
	if c == nil {
		c = &[2]int{}
		w.CPUPods[len(n.usedMilli)] = c
	}
	if slices.ContainsFunc(n.usedMilli, func(u int64) bool { return u > 0 }) {
		c[1]++
	} else {
		c[0]++
	}
}

// WhyKey is a kind of pod and the reason it fit nowhere.
type WhyKey struct {
	Kind, Reason string
}

// Reasons a GPU pod fit nowhere.
const (
	// WhyCards: no node had the free cards (model, count, share) the pod asks for.
	WhyCards = "cards"
	// WhyHost: some node had the cards, but none of those had the CPU or memory too.
	WhyHost = "cpu/memory"
)

// WhyFree is where free GPU capacity sits at the end on nodes of one size, in cards.
type WhyFree struct {
	// Nodes is how many nodes of the size there are.
	Nodes int
	// Free is all their free capacity; EmptyNodes the part on nodes none of whose cards is used.
	Free, EmptyNodes float64
	// Partial is the part on cards partly used (fractions left by shared pods).
	Partial float64
	// HostBlocked is the part on nodes whose free CPU or memory is below what the trace's smallest
	// (by CPU) GPU pod that the node's free cards could take asks for.
	HostBlocked float64
	// FreeCPUMilli is the nodes' free CPU, CPUPodMilli the CPU CPU-only pods hold on them.
	FreeCPUMilli, CPUPodMilli int64
}

// PodKind names a pod's GPU request: "cpu", "frac", "1", "2", ..., with "+spec" when it names models.
func PodKind(p *trace.Pod) string {
	k := strconv.Itoa(p.NumGPU)
	switch {
	case p.NumGPU == 0:
		return "cpu"
	case p.Fractional():
		k = "frac"
	}
	if len(p.GPUSpec) > 0 {
		k += "+spec"
	}
	return k
}

// cardsFit reports whether node n's cards (model and free milli-GPU per card, the replay's own
// accounting) could take pod p, whatever its CPU and memory.
func (n *simNode) cardsFit(p *trace.Pod) bool {
	if len(p.GPUSpec) > 0 && !slices.Contains(p.GPUSpec, n.model) {
		return false
	}
	fits := 0
	for _, u := range n.usedMilli {
		if trace.MilliPerGPU-u >= p.GPUMilli {
			fits++
		}
	}
	return fits >= p.NumGPU
}

// whyFailed records why GPU pod p fit nowhere.
func (r *replay) whyFailed(w *Why, p *trace.Pod) {
	reason := WhyCards
	for ni := range r.sim {
		if r.sim[ni].cardsFit(p) {
			reason = WhyHost
			break
		}
	}
	w.Failed[WhyKey{PodKind(p), reason}]++
}

// whyFree records where the free GPU capacity sits at the end.
func (r *replay) whyFree(w *Why) {
	for ni := range r.sim {
		n := &r.sim[ni]
		f := w.Free[len(n.usedMilli)]
		if f == nil {
			f = &WhyFree{}
			w.Free[len(n.usedMilli)] = f
		}
		f.Nodes++
		f.FreeCPUMilli += n.cpuFree
		f.CPUPodMilli += n.cpuPodMilli
		var free, partial int64
		used := false
		for _, u := range n.usedMilli {
			free += trace.MilliPerGPU - u
			if u > 0 {
				used = true
				if u < trace.MilliPerGPU {
					partial += trace.MilliPerGPU - u
				}
			}
		}
		f.Free += float64(free) / trace.MilliPerGPU
		f.Partial += float64(partial) / trace.MilliPerGPU
		if !used {
			f.EmptyNodes += float64(free) / trace.MilliPerGPU
		}
		if free > 0 && r.hostBlocked(n) {
			f.HostBlocked += float64(free) / trace.MilliPerGPU
		}
	}
}

// hostBlocked reports whether no GPU pod of the trace that node n's free cards could take fits its
// free CPU and memory, while some such pod exists.
func (r *replay) hostBlocked(n *simNode) bool {
	if n.ignoreHost {
		return false
	}
	some := false
	for i := range r.specs {
		p := r.specs[i].row
		if p.NumGPU == 0 || !n.cardsFit(p) {
			continue
		}
		if n.fitsHost(p) {
			return false
		}
		some = true
	}
	return some
}

// mergeWhy sums the seeds' diagnostics.
func mergeWhy(seeds []SeedResult) *Why {
	out := newWhy()
	for i := range seeds {
		w := seeds[i].Why
		if w == nil {
			continue
		}
		for k, v := range w.Failed {
			out.Failed[k] += v
		}
		for size, c := range w.CPUPods {
			o := out.CPUPods[size]
			if o == nil {
				o = &[2]int{}
				out.CPUPods[size] = o
			}
			o[0] += c[0]
			o[1] += c[1]
		}
		for size, f := range w.Free {
			o := out.Free[size]
			if o == nil {
				o = &WhyFree{}
				out.Free[size] = o
			}
			o.Nodes += f.Nodes
			o.Free += f.Free
			o.EmptyNodes += f.EmptyNodes
			o.Partial += f.Partial
			o.HostBlocked += f.HostBlocked
			o.FreeCPUMilli += f.FreeCPUMilli
			o.CPUPodMilli += f.CPUPodMilli
		}
	}
	return out
}

// printWhy writes the diagnostics of one run, per seed on average.
func printWhy(out io.Writer, name string, res *Result) {
	w := mergeWhy(res.Seeds)
	n := float64(len(res.Seeds))
	fmt.Fprintf(out, "\n%s %s/%s, per seed (mean of %d):\n", name, res.Config.NodePolicy, res.Config.GPUPolicy, len(res.Seeds))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "failed pods\tcards\tcpu/memory\t")
	kinds := map[string]bool{}
	for k := range w.Failed {
		kinds[k.Kind] = true
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(a, b) })
	for _, k := range names {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t\n", k, float64(w.Failed[WhyKey{k, WhyCards}])/n, float64(w.Failed[WhyKey{k, WhyHost}])/n)
	}
	tw.Flush()
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "node size (cards)\tnodes\tfree GPUs\ton empty nodes\ton partly used cards\tCPU/memory-blocked\tfree CPU (cores/node)\tCPU of CPU-only pods (cores/node)\tCPU-only pods onto unused / used nodes\t")
	sizes := make([]int, 0, len(w.Free))
	for s := range w.Free {
		sizes = append(sizes, s)
	}
	slices.Sort(sizes)
	for _, s := range sizes {
		f, c := w.Free[s], w.CPUPods[s]
		if c == nil {
			c = &[2]int{}
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f / %.1f\t\n", s, float64(f.Nodes)/n, f.Free/n, f.EmptyNodes/n, f.Partial/n, f.HostBlocked/n,
			float64(f.FreeCPUMilli)/1000/float64(max(f.Nodes, 1)), float64(f.CPUPodMilli)/1000/float64(max(f.Nodes, 1)), float64(c[0])/n, float64(c[1])/n)
	}
	tw.Flush()
}
