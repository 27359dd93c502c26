package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/migplace"
)

func TestRunIsDeterministic(t *testing.T) {
	cfg := Config{Model: migplace.A100_80GB, Cards: 4, Mix: DefaultMix, Requests: 500, Load: 1, Seed: 7, Policy: migplace.PolicyFragAware}
	a, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Run(cfg)
	if d := cmp.Diff(a, b); d != "" {
		t.Errorf("same seed, different results (-first +second):\n%s", d)
	}
	if served, offered := a.ServedAll(); offered != 500 || served == 0 || served == offered {
		t.Errorf("served %d of %d: want some but not all at load 1 on 4 cards", served, offered)
	}
}

// TestFragAwareServesMoreThanFirstFit: on the default mix at the cluster's capacity, the
// frag-aware choice serves more compute slices and more 4g.40gb than first-fit (seeds 1-3).
func TestFragAwareServesMoreThanFirstFit(t *testing.T) {
	total := map[migplace.Policy]Result{}
	for _, p := range []migplace.Policy{migplace.PolicyFragAware, migplace.PolicyFirstFit} {
		sum := Result{Served: map[string]int{}}
		for s := uint64(1); s <= 3; s++ {
			r, err := Run(Config{Model: migplace.A100_80GB, Cards: 16, Mix: DefaultMix, Requests: 3000, Load: 1, Seed: s, Policy: p})
			if err != nil {
				t.Fatal(err)
			}
			sum.SlicesServed += r.SlicesServed
			sum.Served["4g.40gb"] += r.Served["4g.40gb"]
		}
		total[p] = sum
	}
	fa, ff := total[migplace.PolicyFragAware], total[migplace.PolicyFirstFit]
	if fa.SlicesServed <= ff.SlicesServed || fa.Served["4g.40gb"] <= ff.Served["4g.40gb"] {
		t.Errorf("frag-aware served %d slices, %d 4g.40gb; first-fit %d, %d", fa.SlicesServed, fa.Served["4g.40gb"], ff.SlicesServed, ff.Served["4g.40gb"])
	}
}

func TestTableHasARowPerLoadAndPolicy(t *testing.T) {
	out, err := Table(migplace.A100_80GB, 2, 50, 1, []float64{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 1 | frag-aware |", "| 1 | first-fit |", "| burst | frag-aware |", "| burst | first-fit |"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
