package scheduler

import (
	"context"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// gatherFleet reads the allocation gauges as "name{labels} value", sorted; want filters by prefix.
func gatherFleet(t *testing.T, s *Server, prefix string) []string {
	t.Helper()
	families, err := s.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, strings.TrimPrefix(f.GetName(), "cardinal_extender_")+"{"+strings.Join(labels, ",")+"} "+
				strconv.FormatFloat(m.GetGauge().GetValue(), 'f', -1, 64))
		}
	}
	sort.Strings(out)
	return out
}

// The extender exports every card's reservation and state and each model's sums from its cache: a
// card held whole, a free one, a MIG parent and its instances.
func TestAllocationMetrics(t *testing.T) {
	a0 := uuidOf("mix", 0)
	h := newHarness(t, harnessOptions{}, mixedNode("mix", 81920, 1, a100, a100), holder(t, "lo-a0", 0, "mix", 0, 0, a0), migNodeObj("mig"))
	state := gatherFleet(t, h.srv, "cardinal_extender_card_state")
	for _, want := range []string{
		"card_state{model=" + a100 + ",node=mix,numa=0,state=whole,uuid=" + a0 + "} 1",
		"card_state{model=" + a100 + ",node=mix,numa=0,state=free,uuid=" + uuidOf("mix", 1) + "} 1",
		"card_state{model=" + a100 + ",node=mig,numa=0,state=mig,uuid=GPU-mig-am} 1",
		"card_state{model=" + a100 + ",node=mig,numa=0,state=free,uuid=MIG-mig-3g} 1",
	} {
		if !containsLine(state, want) {
			t.Errorf("no %s in\n%s", want, strings.Join(state, "\n"))
		}
	}
	models := gatherFleet(t, h.srv, "cardinal_extender_model_")
	want := []string{
		// The measure sees mix's two A100s (MIG parents and instances left out): one held whole.
		"model_allocation_ratio{model=" + a100 + "} 0.5",
		"model_allocation_ratio{model=NVIDIA H100 80GB HBM3} 0",
		// mix's two cards and mig's two parents; mig's two whole H100s are another model.
		"model_cards{model=" + a100 + "} 4",
		"model_cards{model=NVIDIA H100 80GB HBM3} 2",
		"model_cordoned_cards{model=NVIDIA A100-SXM4-80GB} 0",
		"model_cordoned_cards{model=NVIDIA H100 80GB HBM3} 0",
		// The mix is the holder's whole card, which every free card can take: nothing fragmented.
		"model_fragmentation_ratio{model=" + a100 + "} 0",
		"model_fragmentation_ratio{model=NVIDIA H100 80GB HBM3} 0",
		"model_fragmented_cards{model=" + a100 + "} 0",
		"model_fragmented_cards{model=NVIDIA H100 80GB HBM3} 0",
		"model_free_capacity_cards{model=" + a100 + "} 1",
		"model_free_capacity_cards{model=NVIDIA H100 80GB HBM3} 2",
		"model_free_cards{model=" + a100 + "} 1",
		"model_free_cards{model=NVIDIA H100 80GB HBM3} 2",
		// mix: 2 × 81920; mig: 7 × 9728 + 40192 + 19968 + 9728 of instances.
		"model_memory_mib{model=" + a100 + "} " + strconv.Itoa(2*81920+7*9728+40192+19968+9728),
		"model_memory_mib{model=NVIDIA H100 80GB HBM3} " + strconv.Itoa(2*81559),
		"model_reserved_memory_mib{model=" + a100 + "} 81920",
		"model_reserved_memory_mib{model=NVIDIA H100 80GB HBM3} 0",
	}
	if diff := cmp.Diff(want, models); diff != "" {
		t.Errorf("model sums (-want +got):\n%s", diff)
	}
}

func containsLine(l []string, s string) bool { return slices.Contains(l, s) }

// The extender reports per model the frag-aware measure over its cache's cards under the mix of
// the pods it has seen, and the share of the cards allocated. Node n: two A100s (10 slots), one
// half held by a share of 40960 MiB; node w: two H100s, one held whole. The mix: that share and a
// whole card, one each.
func TestFragmentationMetrics(t *testing.T) {
	const h100 = "NVIDIA H100 80GB HBM3"
	h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 10, a100, a100), mixedNode("w", 81920, 1, h100, h100),
		holder(t, "share", 0, "n", 0, 40960, annotations.SlotID(uuidOf("n", 0), 0)), holder(t, "whole", 0, "w", 0, 0, uuidOf("w", 0)))
	got := map[string]float64{}
	for _, l := range gatherFleet(t, h.srv, "cardinal_extender_model_") {
		i := strings.LastIndexByte(l, ' ')
		got[l[:i]], _ = strconv.ParseFloat(l[i+1:], 64)
	}
	// The mix ages (MixHalfLife): the second pod seen weighs 2^(1/20000) of the first, which moves
	// the fragmentation by a few millionths.
	for _, w := range []struct {
		series string
		want   float64
	}{
		// n: card 0 is half used (0.5 free), card 1 empty: 1.5 of 2 cards free, 25% allocated.
		{"model_allocation_ratio{model=" + a100 + "}", 0.25},
		{"model_free_capacity_cards{model=" + a100 + "}", 1.5},
		// The share class fits both cards (F 0); a whole card fits only card 1, so card 0's 0.5 is
		// fragmented for it (F 0.5). F(M) = (0 + 0.5) / 2 = 0.25 of 1.5 free: 1/6.
		{"model_fragmented_cards{model=" + a100 + "}", 0.25},
		{"model_fragmentation_ratio{model=" + a100 + "}", 0.25 / 1.5},
		// w: one card held whole, one free, which both classes can use.
		{"model_allocation_ratio{model=" + h100 + "}", 0.5},
		{"model_free_capacity_cards{model=" + h100 + "}", 1},
		{"model_fragmented_cards{model=" + h100 + "}", 0},
		{"model_fragmentation_ratio{model=" + h100 + "}", 0},
	} {
		if g, ok := got[w.series]; !ok || math.Abs(g-w.want) > 1e-4 {
			t.Errorf("%s = %v (reported: %v), want %v", w.series, g, ok, w.want)
		}
	}
}

// A pod no node passes counts once under the class of the reason nearest to fitting; it leaves
// the gauge when a filter passes a node, when it is bound, or deleted; a pod no filter has seen
// for pendingTTL is dropped. Every class is always reported.
func TestPendingPodsByReason(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	h := newHarness(t, harnessOptions{clock: clk}, gpuNode(nodeSpec{name: "g", model: a100, memMiB: 81920, count: 1}), plainNode("cpu"),
		holder(t, "holds", 0, "g", 0, 0, uuidOf("g", 0)))
	filter := func(pod *corev1.Pod, nodes ...string) {
		t.Helper()
		if res := h.srv.Filter(context.Background(), &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes}); res.Error != "" {
			t.Fatal(res.Error)
		}
	}
	pending := func() map[string]string {
		out := map[string]string{}
		for _, l := range gatherFleet(t, h.srv, "cardinal_extender_pending_pods") {
			k, v, _ := strings.Cut(strings.TrimPrefix(l, "pending_pods{class="), "} ")
			out[k] = v
		}
		return out
	}
	want := func(what string, counts map[string]string) {
		t.Helper()
		all := map[string]string{}
		for _, c := range pendingClasses {
			all[c] = "0"
		}
		for k, v := range counts {
			all[k] = v
		}
		if diff := cmp.Diff(all, pending()); diff != "" {
			t.Errorf("%s: pending pods (-want +got):\n%s", what, diff)
		}
	}
	want("nothing filtered", nil)
	// One card, held whole: "memory" on g beats "no_model" on the node without cards.
	busy := gpuPod("busy", nil, ctr{name: "m", gpu: 1})
	filter(busy, "g", "cpu")
	// Asks a model no node has: no_model everywhere.
	h100 := gpuPod("h100", map[string]string{annotations.UseGPUType: "h100"}, ctr{name: "m", gpu: 1})
	filter(h100, "cpu", "g")
	want("two refused", map[string]string{"memory": "1", "no_model": "1"})
	// A second filter of the same pod replaces its verdict rather than adding one.
	filter(busy, "g")
	want("filtered again", map[string]string{"memory": "1", "no_model": "1"})

	// The holder leaves: busy now fits g and leaves the gauge.
	h.cache.DeletePod("uid-holds")
	filter(busy, "cpu", "g")
	want("busy fits", map[string]string{"no_model": "1"})

	// Bound or deleted pods leave it too.
	filter(busy, "g")
	h.cache.DeletePod("uid-holds")
	shared := gpuPod("shared", nil, ctr{name: "m", gpu: 1, mem: 1 << 20, cores: 10})
	filter(shared, "g")
	want("too much memory", map[string]string{"memory": "1", "no_model": "1"})
	h.cache.UpsertPod(bound(shared.DeepCopy(), "g"))
	want("bound", map[string]string{"no_model": "1"})
	h.cache.DeletePod(h100.UID)
	want("deleted", nil)

	// Forgotten after pendingTTL without a filter.
	filter(h100, "cpu")
	clk.SetTime(clk.Now().Add(pendingTTL + time.Second))
	want("expired", nil)
}

// BenchmarkAllocationMetrics is one scrape of the fleet metrics (every card's series and the
// frag-aware measure per node) on BenchmarkFilter's cluster of 5000 nodes × 8 cards, states all
// distinct, with a mix of 13 kinds of request (whole 1, 2, 4 and 8 cards, shares of 10 to 90 %);
// the cache's read lock is held for the collection.
func BenchmarkAllocationMetrics(b *testing.B) {
	h := benchFleet(b)
	for b.Loop() {
		if _, err := h.srv.registry.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocationSnapshot is the part of BenchmarkAllocationMetrics that holds the cache's
// read lock: copying the cards' numbers and measuring fragmentation.
func BenchmarkAllocationSnapshot(b *testing.B) {
	h := benchFleet(b)
	for b.Loop() {
		allocation{h.cache}.snapshot()
	}
}

func benchFleet(b *testing.B) *harness {
	h, _ := benchCluster(b, 5000, distinct)
	for _, n := range []int{1, 2, 4, 8} {
		h.cache.mix.Add(core.TaskClass{Cards: n, Whole: true, Cores: 100}, 10)
	}
	for pct := 10; pct <= 90; pct += 10 {
		h.cache.mix.Add(core.TaskClass{Cards: 1, MemPercent: pct, Cores: pct}, 10)
	}
	return h
}

// A shared pod over one MPS slot's memory waits for memory, not for "other".
func TestPendingClassOfMPSSlotIsMemory(t *testing.T) {
	if got := pendingClasses[classOf(&core.Reason{Kind: core.ReasonMPSSlot})]; got != "memory" {
		t.Errorf("class %q, want memory", got)
	}
}
