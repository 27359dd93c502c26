package core

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// card builds an inventory entry; shares 0 means 1.
func card(uuid, model string, memMiB int64, numa, shares int) annotations.GPU {
	return annotations.GPU{UUID: uuid, Model: model, MemoryMiB: memMiB, NUMA: numa, Healthy: true, Shares: max(shares, 1)}
}

func sick(g annotations.GPU) annotations.GPU { g.Healthy = false; return g }

func nodeOf(gpus ...annotations.GPU) *NodeState {
	for i := range gpus {
		gpus[i].Index = i
	}
	return NewNodeState("n1", annotations.Inventory{V: 1, GPUs: gpus})
}

// held returns a node builder with holdings added.
func withHeld(n *NodeState, hs ...Holding) *NodeState {
	for _, h := range hs {
		if !n.Hold(h) {
			panic(fmt.Sprintf("hold %+v", h))
		}
	}
	return n
}

func whole(name string, count int) annotations.ContainerRequest {
	return annotations.ContainerRequest{Name: name, Count: count}
}

func shared(name string, count int, memMiB int64, cores int) annotations.ContainerRequest {
	return annotations.ContainerRequest{Name: name, Count: count, Shared: true, MemoryMiB: memMiB, Cores: cores}
}

func initC(c annotations.ContainerRequest) annotations.ContainerRequest { c.Init = true; return c }

func sidecar(c annotations.ContainerRequest) annotations.ContainerRequest {
	c.Init, c.Sidecar = true, true
	return c
}

func pod(cs ...annotations.ContainerRequest) annotations.PodRequest {
	return annotations.PodRequest{Containers: cs}
}

func mustSel(t *testing.T, ann map[string]string) annotations.Selector {
	t.Helper()
	s, err := annotations.ParseSelector(ann)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ids renders a plan as container -> device IDs (with reservations), the way the assignment says it.
func ids(n *NodeState, p *Plan) map[string][]string {
	out := map[string][]string{}
	a := p.Assignment(n)
	for _, c := range a.Containers {
		for _, d := range c.Devices {
			out[c.Name] = append(out[c.Name], fmt.Sprintf("%s %d/%d", d.ID, d.MemoryMiB, d.Cores))
		}
	}
	return out
}

func decider(t *testing.T, node, gpu annotations.Policy) *Decider {
	t.Helper()
	d, err := New(Options{NodePolicy: node, GPUPolicy: gpu})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestFit(t *testing.T) {
	const a100, a40, t4 = "NVIDIA A100-SXM4-80GB", "NVIDIA A40", "Tesla T4"
	type tc struct {
		name   string
		node   *NodeState
		req    annotations.PodRequest
		ann    map[string]string
		policy annotations.Policy // gpu policy, binpack when empty
		want   map[string][]string
		reason string
	}
	cases := []tc{
		// --- selectors ---
		{
			name: "use-gputype substring, case-insensitive",
			node: nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a100, 81920, 0, 1)),
			req:  pod(whole("main", 1)),
			ann:  map[string]string{annotations.UseGPUType: "A100"},
			want: map[string][]string{"main": {"G1 81920/100"}},
		},
		{
			name:   "no card matches use-gputype names the node's cards",
			node:   nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a40, 46068, 0, 1)),
			req:    pod(whole("main", 1)),
			ann:    map[string]string{annotations.UseGPUType: "A100"},
			reason: "no card matches use-gputype=a100 (node has 2x NVIDIA A40)",
		},
		{
			name: "nouse-gputype skips the A40",
			node: nodeOf(card("G0", a40, 46068, 0, 1), card("G1", t4, 15360, 0, 1)),
			req:  pod(whole("main", 1)),
			ann:  map[string]string{annotations.NoUseGPUType: "a40"},
			want: map[string][]string{"main": {"G1 15360/100"}},
		},
		{
			name: "use-gpuuuid picks exactly that card",
			node: nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a40, 46068, 0, 1), card("G2", a40, 46068, 0, 1)),
			req:  pod(whole("main", 1)),
			ann:  map[string]string{annotations.UseGPUUUID: "G2"},
			want: map[string][]string{"main": {"G2 46068/100"}},
		},
		{
			name: "nouse-gpuuuid skips the first card",
			node: nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a40, 46068, 0, 1)),
			req:  pod(whole("main", 1)),
			ann:  map[string]string{annotations.NoUseGPUUUID: "G0"},
			want: map[string][]string{"main": {"G1 46068/100"}},
		},
		{
			name: "all rules together: A100, not G1, leaves G2",
			node: nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a100, 81920, 0, 1), card("G2", a100, 81920, 0, 1)),
			req:  pod(whole("main", 1)),
			ann:  map[string]string{annotations.UseGPUType: "a100", annotations.NoUseGPUUUID: "G1"},
			want: map[string][]string{"main": {"G2 81920/100"}},
		},
		{
			name:   "use-gpuuuid names an unhealthy card",
			node:   nodeOf(card("G0", a40, 46068, 0, 1), sick(card("G1", a40, 46068, 0, 1))),
			req:    pod(whole("main", 1)),
			ann:    map[string]string{annotations.UseGPUUUID: "G1"},
			reason: "GPU G1 is unhealthy",
		},
		{
			name:   "unhealthy cards are never chosen: 3 match, 2 sick, 1 healthy < 2",
			node:   nodeOf(card("G0", a40, 46068, 0, 1), sick(card("G1", a40, 46068, 0, 1)), sick(card("G2", a40, 46068, 0, 1))),
			req:    pod(whole("main", 2)),
			reason: "needs 2 cards, 1 healthy (2 unhealthy)",
		},
		{
			name:   "too few cards on the node: 4 > 2",
			node:   nodeOf(card("G0", t4, 15360, 0, 1), card("G1", t4, 15360, 0, 1)),
			req:    pod(whole("main", 4)),
			reason: "needs 4 cards, node has 2 (2x Tesla T4)",
		},
		// --- whole cards, memory, cores, slots ---
		{
			name:   "whole card needs an empty card: G0 has a 1 GiB share on it",
			node:   withHeld(nodeOf(card("G0", a40, 46068, 0, 4)), Holding{UUID: "G0", Slot: 0, MemMiB: 1024, Cores: 10}),
			req:    pod(whole("main", 1)),
			reason: "needs 1 free card, 0 of 1 are free",
		},
		{
			name: "whole card on a shared card takes a slot ID and everything",
			node: nodeOf(card("G0", a40, 46068, 0, 4)),
			req:  pod(whole("main", 1)),
			want: map[string][]string{"main": {"G0::0 46068/100"}},
		},
		{
			name: "share fits: 46068-40000 = 6068 >= 6000 MiB, 100-50 = 50 >= 50 cores, slot 1 free",
			node: withHeld(nodeOf(card("G0", a40, 46068, 0, 4)), Holding{UUID: "G0", Slot: 0, MemMiB: 40000, Cores: 50}),
			req:  pod(shared("main", 1, 6000, 50)),
			want: map[string][]string{"main": {"G0::1 6000/50"}},
		},
		{
			name:   "share lacks memory: 46068-40000 = 6068 < 7000 MiB",
			node:   withHeld(nodeOf(card("G0", a40, 46068, 0, 4)), Holding{UUID: "G0", Slot: 0, MemMiB: 40000, Cores: 10}),
			req:    pod(shared("main", 1, 7000, 10)),
			reason: "needs 1 card with 7000 MiB, gpucores 10 and a free slot; 0 of 1 have",
		},
		{
			name:   "share lacks cores: 100-60 = 40 < 50",
			node:   withHeld(nodeOf(card("G0", a40, 46068, 0, 4)), Holding{UUID: "G0", Slot: 0, MemMiB: 1000, Cores: 60}),
			req:    pod(shared("main", 1, 1000, 50)),
			reason: "needs 1 card with 1000 MiB, gpucores 50 and a free slot; 0 of 1 have",
		},
		{
			name: "share lacks a slot: 2 shares, both held",
			node: withHeld(nodeOf(card("G0", a40, 46068, 0, 2)),
				Holding{UUID: "G0", Slot: 0, MemMiB: 1000, Cores: 10}, Holding{UUID: "G0", Slot: 1, MemMiB: 1000, Cores: 10}),
			req:    pod(shared("main", 1, 1000, 10)),
			reason: "needs 1 card with 1000 MiB, gpucores 10 and a free slot; 0 of 1 have",
		},
		{
			name: "memory percentage: 25% of 46068 = 11517 MiB",
			node: nodeOf(card("G0", a40, 46068, 0, 4)),
			req:  pod(annotations.ContainerRequest{Name: "main", Count: 1, Shared: true, MemoryPercent: 25}),
			want: map[string][]string{"main": {"G0::0 11517/0"}},
		},
		{
			name:   "gpucores 100 means the card alone: G0 holds a 1% share",
			node:   withHeld(nodeOf(card("G0", a40, 46068, 0, 4)), Holding{UUID: "G0", Slot: 0, MemMiB: 10, Cores: 1}),
			req:    pod(shared("main", 1, 1000, 100)),
			reason: "needs 1 free card, 0 of 1 are free",
		},
		{
			name:   "a card held whole takes no share, even one asking 0 cores",
			node:   withHeld(nodeOf(card("G0", a40, 46068, 0, 4)), Holding{UUID: "G0", Slot: 0, MemMiB: 0, Cores: 100}),
			req:    pod(annotations.ContainerRequest{Name: "main", Count: 1, Shared: true}),
			reason: "needs 1 card with a free slot; 0 of 1 have",
		},
		{
			name: "unshared card (shares 1) takes one share, ID is the UUID",
			node: nodeOf(card("G0", a40, 46068, 0, 1)),
			req:  pod(shared("main", 1, 1000, 10)),
			want: map[string][]string{"main": {"G0 1000/10"}},
		},
		// --- several containers, init containers ---
		{
			name: "two app containers get distinct whole cards",
			node: nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a40, 46068, 0, 1)),
			req:  pod(whole("a", 1), whole("b", 1)),
			want: map[string][]string{"a": {"G0 46068/100"}, "b": {"G1 46068/100"}},
		},
		{
			name:   "all or none: b finds no card after a took the only one",
			node:   nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a40, 46068, 0, 1)),
			req:    pod(whole("a", 2), whole("b", 1)),
			reason: `container "b": needs 1 free card, 0 of 2 are free`,
		},
		{
			name: "app container reuses the init container's card as the kubelet does",
			node: nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a40, 46068, 0, 1)),
			req:  pod(initC(whole("setup", 1)), whole("main", 1)),
			want: map[string][]string{"setup": {"G0 46068/100"}, "main": {"G0 46068/100"}},
		},
		{
			name: "app needing 2 reuses the init card and gets 1 more: 2 - 1 = 1 from the plugin",
			node: nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a40, 46068, 0, 1)),
			req:  pod(initC(whole("setup", 1)), whole("main", 2)),
			want: map[string][]string{"setup": {"G0 46068/100"}, "main": {"G0 46068/100", "G1 46068/100"}},
		},
		{
			name: "init share reused by a larger app share: reservation is max(2000, 5000) = 5000",
			node: nodeOf(card("G0", a40, 46068, 0, 4)),
			req:  pod(initC(shared("setup", 1, 2000, 10)), shared("main", 1, 5000, 20)),
			want: map[string][]string{"setup": {"G0::0 5000/20"}, "main": {"G0::0 5000/20"}},
		},
		{
			name: "sidecar keeps its card: the app container gets another",
			node: nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a40, 46068, 0, 1)),
			req:  pod(sidecar(whole("proxy", 1)), whole("main", 1)),
			want: map[string][]string{"proxy": {"G0 46068/100"}, "main": {"G1 46068/100"}},
		},
		{
			name:   "reused init card cannot hold the app: 46068-40000 = 6068 free < 8000-1000 more",
			node:   withHeld(nodeOf(card("G0", a40, 46068, 0, 4)), Holding{UUID: "G0", Slot: 3, MemMiB: 39068, Cores: 10}),
			req:    pod(initC(shared("setup", 1, 1000, 10)), shared("main", 1, 8000, 10)),
			reason: `container "main": the init containers' cards, which the kubelet hands on, cannot hold it`,
		},
		// --- NUMA ---
		{
			name: "prefer one NUMA node: NUMA 0 has 1 free, NUMA 1 has 2 -> both on NUMA 1",
			node: withHeld(nodeOf(card("G0", a100, 81920, 0, 1), card("G1", a100, 81920, 0, 1), card("G2", a100, 81920, 1, 1), card("G3", a100, 81920, 1, 1)),
				Holding{UUID: "G0", Slot: -1, MemMiB: 81920, Cores: 100}),
			req:  pod(whole("main", 2)),
			want: map[string][]string{"main": {"G2 81920/100", "G3 81920/100"}},
		},
		{
			name: "without numa-bind, cards may span NUMA nodes when none has 2 free",
			node: withHeld(nodeOf(card("G0", a100, 81920, 0, 1), card("G1", a100, 81920, 0, 1), card("G2", a100, 81920, 1, 1), card("G3", a100, 81920, 1, 1)),
				Holding{UUID: "G0", Slot: -1, MemMiB: 81920, Cores: 100}, Holding{UUID: "G2", Slot: -1, MemMiB: 81920, Cores: 100}),
			req:  pod(whole("main", 2)),
			want: map[string][]string{"main": {"G1 81920/100", "G3 81920/100"}},
		},
		{
			name: "numa-bind fails when each NUMA node has only 1 free",
			node: withHeld(nodeOf(card("G0", a100, 81920, 0, 1), card("G1", a100, 81920, 0, 1), card("G2", a100, 81920, 1, 1), card("G3", a100, 81920, 1, 1)),
				Holding{UUID: "G0", Slot: -1, MemMiB: 81920, Cores: 100}, Holding{UUID: "G2", Slot: -1, MemMiB: 81920, Cores: 100}),
			req:    pod(whole("main", 2)),
			ann:    map[string]string{annotations.NUMABind: "true"},
			reason: "needs 2 cards on one NUMA node, best has 1",
		},
		{
			name: "binpack picks the tighter NUMA node: NUMA 0 has 2 free, NUMA 1 has 3",
			node: withHeld(nodeOf(card("G0", a100, 81920, 0, 1), card("G1", a100, 81920, 0, 1), card("G2", a100, 81920, 0, 1),
				card("G3", a100, 81920, 1, 1), card("G4", a100, 81920, 1, 1), card("G5", a100, 81920, 1, 1)),
				Holding{UUID: "G0", Slot: -1, MemMiB: 81920, Cores: 100}),
			req:  pod(whole("main", 2)),
			ann:  map[string]string{annotations.NUMABind: "true"},
			want: map[string][]string{"main": {"G1 81920/100", "G2 81920/100"}},
		},
		{
			name: "spread picks the roomier NUMA node: NUMA 1 has 3 free > 2",
			node: withHeld(nodeOf(card("G0", a100, 81920, 0, 1), card("G1", a100, 81920, 0, 1), card("G2", a100, 81920, 0, 1),
				card("G3", a100, 81920, 1, 1), card("G4", a100, 81920, 1, 1), card("G5", a100, 81920, 1, 1)),
				Holding{UUID: "G0", Slot: -1, MemMiB: 81920, Cores: 100}),
			req:    pod(whole("main", 2)),
			policy: annotations.PolicySpread,
			want:   map[string][]string{"main": {"G3 81920/100", "G4 81920/100"}},
		},
		// --- card policies ---
		{
			name: "binpack shares the fuller card: G1 at 30000/46068 beats G0 at 10000",
			node: withHeld(nodeOf(card("G0", a40, 46068, 0, 4), card("G1", a40, 46068, 0, 4)),
				Holding{UUID: "G0", Slot: 0, MemMiB: 10000, Cores: 10}, Holding{UUID: "G1", Slot: 0, MemMiB: 30000, Cores: 10}),
			req:  pod(shared("main", 1, 4000, 10)),
			want: map[string][]string{"main": {"G1::1 4000/10"}},
		},
		{
			name: "spread shares the emptier card: G0 at 10000 beats G1 at 30000",
			node: withHeld(nodeOf(card("G0", a40, 46068, 0, 4), card("G1", a40, 46068, 0, 4)),
				Holding{UUID: "G0", Slot: 0, MemMiB: 10000, Cores: 10}, Holding{UUID: "G1", Slot: 0, MemMiB: 30000, Cores: 10}),
			req:    pod(shared("main", 1, 4000, 10)),
			policy: annotations.PolicySpread,
			want:   map[string][]string{"main": {"G0::1 4000/10"}},
		},
		{
			name: "binpack keeps a share off an unshared card: on G0 (1 ID) it strands 1 - 0.1 = 0.9 of the card",
			node: nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a40, 46068, 0, 4)),
			req:  pod(shared("main", 1, 1000, 10)),
			want: map[string][]string{"main": {"G1::0 1000/10"}},
		},
		{
			name: "pod annotation overrides the default card policy",
			node: withHeld(nodeOf(card("G0", a40, 46068, 0, 4), card("G1", a40, 46068, 0, 4)),
				Holding{UUID: "G0", Slot: 0, MemMiB: 10000, Cores: 10}, Holding{UUID: "G1", Slot: 0, MemMiB: 30000, Cores: 10}),
			req:  pod(shared("main", 1, 4000, 10)),
			ann:  map[string]string{annotations.GPUPolicy: "spread"},
			want: map[string][]string{"main": {"G0::1 4000/10"}},
		},
		{
			name: "equal cards tie to the lower index",
			node: nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a40, 46068, 0, 1)),
			req:  pod(whole("main", 1)),
			want: map[string][]string{"main": {"G0 46068/100"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gpu := c.policy
			if gpu == "" {
				gpu = annotations.PolicyBinpack
			}
			p, err := decider(t, annotations.PolicyBinpack, gpu).Prepare(c.req, mustSel(t, c.ann))
			if err != nil {
				t.Fatal(err)
			}
			plan, r := p.Fit(c.node, nil)
			gotReason := ""
			if r != nil {
				gotReason = r.String()
			}
			if gotReason != c.reason {
				t.Fatalf("reason = %q, want %q", gotReason, c.reason)
			}
			if strings.Contains(gotReason, "%") {
				t.Errorf("reason %q has a %%: kube-scheduler formats extender reasons", gotReason)
			}
			if r != nil {
				return
			}
			if diff := cmp.Diff(c.want, ids(c.node, plan)); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			// The assignment must be a valid record.
			if _, err := annotations.EncodeAssignment(plan.Assignment(c.node)); err != nil {
				t.Errorf("assignment does not encode: %v", err)
			}
		})
	}
}

func TestApplyReleaseRoundTrip(t *testing.T) {
	n := nodeOf(card("G0", "A40", 46068, 0, 4), card("G1", "A40", 46068, 0, 1))
	p, err := decider(t, annotations.PolicyBinpack, annotations.PolicyBinpack).Prepare(pod(shared("a", 1, 1000, 10), whole("b", 1)), annotations.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	plan, r := p.Fit(n, nil)
	if r != nil {
		t.Fatal(r)
	}
	before := n.Clone()
	n.Apply(plan)
	// a: G0::0 1000 MiB 10 cores; b: G1 whole.
	want := []Usage{{MemMiB: 1000, Cores: 10, Held: 1}, {MemMiB: 46068, Cores: 100, Held: 1, Whole: 1}}
	for i, w := range want {
		if diff := cmp.Diff(w, n.Cards[i].Usage); diff != "" {
			t.Errorf("card %d after Apply (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(plan.After(before, i), n.Cards[i].Usage); diff != "" {
			t.Errorf("card %d: Plan.After disagrees with Apply (-after +applied):\n%s", i, diff)
		}
	}
	// A second pod now finds G0::1 as the next slot.
	plan2, r := p.Fit(n, nil)
	if r == nil {
		t.Fatalf("second pod should not fit (b needs a whole card), got %v", ids(n, plan2))
	}
	n.Release(plan)
	for i := range n.Cards {
		if diff := cmp.Diff(before.Cards[i].Usage, n.Cards[i].Usage); diff != "" {
			t.Errorf("card %d after Release (-want +got):\n%s", i, diff)
		}
	}
}

func TestScore(t *testing.T) {
	// 4 whole cards, 1 held. Placing 1 more: utilization after = 2/4.
	n := withHeld(nodeOf(card("G0", "A40", 100, 0, 1), card("G1", "A40", 100, 0, 1), card("G2", "A40", 100, 0, 1), card("G3", "A40", 100, 0, 1)),
		Holding{UUID: "G0", Slot: -1, MemMiB: 100, Cores: 100})
	cases := []struct {
		policy annotations.Policy
		want   float64
	}{
		{annotations.PolicyBinpack, 5}, // 10 × 2/4
		{annotations.PolicySpread, 5},  // 10 × (1 − 2/4)
	}
	for _, c := range cases {
		p, err := decider(t, c.policy, annotations.PolicyBinpack).Prepare(pod(whole("m", 1)), annotations.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		plan, r := p.Fit(n, nil)
		if r != nil {
			t.Fatal(r)
		}
		if got := p.Score(n, plan, nil); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: score %v, want %v", c.policy, got, c.want)
		}
	}
	// Binpack prefers the fuller node, spread the emptier: n (1 of 4 held) vs an empty node.
	empty := nodeOf(card("G0", "A40", 100, 0, 1), card("G1", "A40", 100, 0, 1), card("G2", "A40", 100, 0, 1), card("G3", "A40", 100, 0, 1))
	for _, c := range []struct {
		policy    annotations.Policy
		fullerWin bool
	}{{annotations.PolicyBinpack, true}, {annotations.PolicySpread, false}} {
		p, _ := decider(t, c.policy, annotations.PolicyBinpack).Prepare(pod(whole("m", 1)), annotations.Selector{})
		pf, _ := p.Fit(n, nil)
		pe, _ := p.Fit(empty, nil)
		full, emp := p.Score(n, pf, nil), p.Score(empty, pe, nil) // binpack: 5 vs 2.5; spread: 5 vs 7.5
		if (full > emp) != c.fullerWin {
			t.Errorf("%s: fuller node %v vs empty %v", c.policy, full, emp)
		}
	}
}

func TestPolicies(t *testing.T) {
	cases := []struct {
		node, gpu annotations.Policy
		wantErr   error
	}{
		{annotations.PolicyBinpack, annotations.PolicySpread, nil},
		{annotations.PolicyFragAware, annotations.PolicyFragAware, nil},
		{annotations.PolicyBinpack, "tetris", ErrUnknownPolicy},
		{"", annotations.PolicyBinpack, ErrUnknownPolicy},
	}
	for _, c := range cases {
		_, err := New(Options{NodePolicy: c.node, GPUPolicy: c.gpu})
		if !errors.Is(err, c.wantErr) {
			t.Errorf("New(%s, %s) = %v, want %v", c.node, c.gpu, err, c.wantErr)
		}
	}
	// Every policy of the contract has both strategies in this build.
	for _, p := range annotations.Policies {
		if _, err := New(Options{NodePolicy: p, GPUPolicy: p}); err != nil {
			t.Errorf("policy %s: %v", p, err)
		}
	}
}

func TestExtenderScoreAndBetter(t *testing.T) {
	for in, want := range map[float64]int64{-1: 0, 0: 0, 4.49: 4, 4.5: 5, 10: 10, 11: 10} {
		if got := ExtenderScore(in); got != want {
			t.Errorf("ExtenderScore(%v) = %d, want %d", in, got, want)
		}
	}
	if !(Candidate{"a", 5}).Better(Candidate{"b", 5}) || (Candidate{"a", 4}).Better(Candidate{"b", 5}) {
		t.Error("Better: want higher score first, then the smaller name")
	}
}

func TestTaskMix(t *testing.T) {
	var m TaskMix
	sel := annotations.Selector{UseTypes: []string{"a100"}}
	m.AddPod(&annotations.PodRequest{Containers: []annotations.ContainerRequest{whole("a", 1), whole("b", 1), shared("c", 1, 0, 30)}}, &sel)
	// a and b are the same class (1 whole A100): weight 2; c is a 30% cores share: weight 1.
	want := []TaskClass{
		{Cards: 1, Whole: true, Cores: 100, Models: []string{"a100"}, Weight: 2},
		{Cards: 1, Cores: 30, Models: []string{"a100"}, Weight: 1},
	}
	if diff := cmp.Diff(want, m.Classes); diff != "" || m.Total != 3 {
		t.Errorf("mix (-want +got):\n%s total %v", diff, m.Total)
	}
	c := NewNodeState("n", annotations.Inventory{GPUs: []annotations.GPU{card("G", "NVIDIA A100", 1000, 0, 1)}}).Cards[0]
	if !m.Classes[0].Accepts(&c) || m.Classes[0].MemoryFraction(&c) != 1 {
		t.Error("whole A100 class should accept an A100 with memory fraction 1")
	}
}
