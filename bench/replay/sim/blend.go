package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
)

// Blend is a pod list resampled from the shared ones with the kinds of pod weighted differently:
// other blends of the same cluster, to check that a policy generalises beyond the four published
// lists. Written "kind=weight,...[,spec=p]", e.g. "8=2,cpu=2,spec=0.4".
//
// Kinds are PodKind's without "+spec": cpu, frac, 1, 2, 4, 8 (any num_gpu). A row of the pool is
// drawn with probability proportional to its kind's weight (1 when not named; 0 drops the kind), so
// "8=2" doubles the 8-card pods' share of the rows relative to the pool. With spec=p, each GPU pod
// drawn without a gpu_spec gets one with probability p, drawn from the pool's gpu_spec values
// among pods of the same num_gpu (none when the pool has no such value); spec=0 (or leaving it
// out) keeps the pool's gpu_spec as drawn.
type Blend struct {
	Weights map[string]float64
	// Spec is the chance that a GPU pod without a gpu_spec gets one.
	Spec float64
	text string
}

// String is the blend as written.
func (b *Blend) String() string { return b.text }

// ParseBlend parses "kind=weight,...[,spec=p]".
func ParseBlend(s string) (Blend, error) {
	b := Blend{Weights: map[string]float64{}, text: strings.TrimSpace(s)}
	for _, part := range strings.Split(b.text, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Blend{}, fmt.Errorf("blend %q: %q is not kind=weight", s, part)
		}
		w, err := strconv.ParseFloat(v, 64)
		if err != nil || w < 0 {
			return Blend{}, fmt.Errorf("blend %q: weight %q is not a non-negative number", s, v)
		}
		if k == "spec" {
			if w > 1 {
				return Blend{}, fmt.Errorf("blend %q: spec %v is not a probability", s, w)
			}
			b.Spec = w
			continue
		}
		if _, err := strconv.Atoi(k); err != nil && k != "cpu" && k != "frac" {
			return Blend{}, fmt.Errorf("blend %q: kind %q is not cpu, frac or a card count", s, k)
		}
		b.Weights[k] = w
	}
	return b, nil
}

// Make draws n pods (with replacement) from pool as the blend says, with its own seed.
func (b *Blend) Make(pool []trace.Pod, n int, seed uint64) ([]trace.Pod, error) {
	cum := make([]float64, len(pool))
	specs := map[int][][]string{} // gpu_spec values by num_gpu
	total := 0.0
	for i := range pool {
		p := &pool[i]
		w, ok := b.Weights[strings.TrimSuffix(PodKind(p), "+spec")]
		if !ok {
			w = 1
		}
		total += w
		cum[i] = total
		if len(p.GPUSpec) > 0 {
			specs[p.NumGPU] = append(specs[p.NumGPU], p.GPUSpec)
		}
	}
	if total == 0 {
		return nil, errors.New("blend " + b.text + ": every kind of the pool weighs 0")
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	out := make([]trace.Pod, n)
	for i := range out {
		k, _ := slices.BinarySearch(cum, rng.Float64()*total)
		k = min(k, len(pool)-1)
		for cum[k] == 0 { // a draw of exactly 0 lands on leading rows that weigh 0
			k++
		}
		p := pool[k]
		p.Name = fmt.Sprintf("blend-%d", i)
		if vals := specs[p.NumGPU]; b.Spec > 0 && p.NumGPU > 0 && len(p.GPUSpec) == 0 && len(vals) > 0 && rng.Float64() < b.Spec {
			p.GPUSpec = vals[rng.IntN(len(vals))]
		}
		out[i] = p
	}
	return out, nil
}
