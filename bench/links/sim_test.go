package main

import (
	"strings"
	"testing"
)

// The table is deterministic: the same options print the same table.
func TestTableIsDeterministic(t *testing.T) {
	o := options{nodes: 3, pods: 300, seeds: 2, duration: 10}
	var a, b strings.Builder
	if err := table(&a, o); err != nil {
		t.Fatal(err)
	}
	if err := table(&b, o); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Fatalf("two runs differ:\n%s\n%s", a.String(), b.String())
	}
	if rows := strings.Count(a.String(), "\n"); rows != 2+4*len(policies) {
		t.Fatalf("%d lines, want a header and %d rows:\n%s", rows, 4*len(policies), a.String())
	}
}

// On nodes whose cards are bridged in NVLink pairs, Cardinal's link-aware placement gives a larger
// share of multi-card pods an all-NVLink set than card binpack (which sees no links), and on
// NVSwitch nodes every policy gives every multi-card pod one.
func TestCardinalLinksMultiCardPods(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		c := config{cluster: cluster(4, "nvlink-pairs"), pods: 600, seed: seed, duration: 15}
		links, err := run(c, cardinal)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := run(c, binpack)
		if err != nil {
			t.Fatal(err)
		}
		if links.multi == 0 || plain.multi == 0 {
			t.Fatalf("seed %d: no multi-card pod placed (%+v, %+v)", seed, links, plain)
		}
		if l, p := percent(links.nvlink, links.multi), percent(plain.nvlink, plain.multi); l <= p {
			t.Errorf("seed %d: all-NVLink share %.1f %% with links, %.1f %% by card binpack: want more with links", seed, l, p)
		}
		t.Logf("seed %d: with links %d of %d multi-card pods all-NVLink, binpack %d of %d", seed, links.nvlink, links.multi, plain.nvlink, plain.multi)

		c.cluster = cluster(4, "nvswitch")
		for _, p := range policies {
			r, err := run(c, p)
			if err != nil {
				t.Fatal(err)
			}
			if r.nvlink != r.multi {
				t.Errorf("seed %d, %s on NVSwitch nodes: %d of %d multi-card pods all-NVLink", seed, p.name(""), r.nvlink, r.multi)
			}
		}
	}
}
