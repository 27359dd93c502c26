package core

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// The sets Prepare builds for long UUID lists decide exactly as Selector.CheckDeviceLower does,
// for cards and for MIG instances (by their own UUID or their parent's).
func TestUUIDRulesAgreeWithCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	uuid := func(i int) string { return fmt.Sprintf("GPU-%04d", i) }
	models := []string{"nvidia a100-sxm4-80gb", "tesla t4", "nvidia h100 80gb hbm3"}
	for trial := 0; trial < 200; trial++ {
		var sel annotations.Selector
		pick := func(n int) []string {
			var l []string
			for i := 0; i < n; i++ {
				l = append(l, uuid(rng.IntN(200)))
			}
			return l
		}
		switch trial % 4 {
		case 0:
			sel.UseUUIDs = pick(uuidSetMin + rng.IntN(50))
		case 1:
			sel.NoUseUUIDs = pick(uuidSetMin + rng.IntN(50))
		case 2:
			sel.UseUUIDs, sel.NoUseUUIDs = pick(uuidSetMin+rng.IntN(50)), pick(rng.IntN(20))
		case 3:
			sel.NoUseUUIDs, sel.UseTypes = pick(uuidSetMin+rng.IntN(50)), []string{"a100"}
		}
		r := newUUIDRules(&sel)
		if r == nil {
			t.Fatalf("no sets for lists of %d and %d", len(sel.UseUUIDs), len(sel.NoUseUUIDs))
		}
		for i := 0; i < 200; i++ {
			m := models[i%len(models)]
			parent := ""
			if i%2 == 1 {
				parent = uuid(rng.IntN(200))
			}
			want := sel.CheckDeviceLower(m, uuid(i), parent) == annotations.MatchOK
			if got := r.accepts(m, uuid(i), parent); got != want {
				t.Fatalf("selector %s, card %s %s (parent %q): sets say %v, CheckDeviceLower %v", sel.String(), m, uuid(i), parent, got, want)
			}
		}
	}
}

// A reason repeated for every node names a few entries of a long list, not all of them.
func TestReasonCutsLongLists(t *testing.T) {
	var l []string
	for i := 0; i < 4096; i++ {
		l = append(l, fmt.Sprintf("GPU-%04d", i))
	}
	d, err := New(Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack})
	if err != nil {
		t.Fatal(err)
	}
	req := annotations.PodRequest{Containers: []annotations.ContainerRequest{{Name: "m", Count: 1}}}
	p, err := d.Prepare(req, annotations.Selector{UseUUIDs: l})
	if err != nil {
		t.Fatal(err)
	}
	n := NewNodeState("n", annotations.Inventory{GPUs: []annotations.GPU{{UUID: "GPU-other", Model: "Tesla T4", MemoryMiB: 15360, Healthy: true, Shares: 1}}})
	_, r := p.Fit(n, nil)
	if r == nil {
		t.Fatal("a card outside use-gpuuuid fits")
	}
	want := "no card matches use-gpuuuid=GPU-0000,GPU-0001,GPU-0002 (+4093 more) (node has 1x Tesla T4)"
	if got := r.String(); got != want || strings.Count(got, "GPU-") > 4 {
		t.Fatalf("reason %q, want %q", got, want)
	}
}
