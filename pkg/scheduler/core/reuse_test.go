package core

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// The two NUMA defects of the review: numa-bind placing an init container where the container
// that reuses its cards cannot go, and an app container reusing some of a larger init pool.
func TestInitContainersAndNUMA(t *testing.T) {
	const a40 = "NVIDIA A40"
	bind := map[string]string{annotations.NUMABind: "true"}
	// NUMA 0: G0 G1; NUMA 1: G2..G5.
	twoFour := func() *NodeState {
		return nodeOf(card("G0", a40, 46068, 0, 1), card("G1", a40, 46068, 0, 1),
			card("G2", a40, 46068, 1, 1), card("G3", a40, 46068, 1, 1), card("G4", a40, 46068, 1, 1), card("G5", a40, 46068, 1, 1))
	}
	tests := []struct {
		name   string
		node   *NodeState
		req    annotations.PodRequest
		ann    map[string]string
		policy annotations.Policy
		want   map[string][]string
		reason string
	}{
		{
			// Placed alone, the init container's 1 card goes to G0 (lowest index, NUMA 0); the
			// app reuses it and needs 2 more on NUMA 0, which has 1. With NUMA 1 preferred for
			// every container, init takes G2 and the app G2 + G3 G4: 3 on NUMA 1.
			name: "numa-bind: init 1 + app 3 go to NUMA 1, the only NUMA node with 3",
			node: twoFour(),
			req:  pod(initC(whole("setup", 1)), whole("main", 3)),
			ann:  bind,
			want: map[string][]string{"setup": {"G2 46068/100"}, "main": {"G2 46068/100", "G3 46068/100", "G4 46068/100"}},
		},
		{
			name:   "numa-bind: spread keeps the same rule",
			node:   twoFour(),
			req:    pod(initC(whole("setup", 1)), whole("main", 3)),
			ann:    bind,
			policy: annotations.PolicySpread,
			want:   map[string][]string{"setup": {"G2 46068/100"}, "main": {"G2 46068/100", "G3 46068/100", "G4 46068/100"}},
		},
		{
			name: "without numa-bind nothing changes: init on G0, app G0 + G1 and one of NUMA 1",
			node: twoFour(),
			req:  pod(initC(whole("setup", 1)), whole("main", 3)),
			want: map[string][]string{"setup": {"G0 46068/100"}, "main": {"G0 46068/100", "G1 46068/100", "G2 46068/100"}},
		},
		{
			// 5 cards, app needs 5 on one NUMA node: no NUMA node has them. The reason counts
			// only the NUMA node the reused card fixes: G0 (reused) + G1 = 2, not NUMA 1's 4.
			name:   "numa-bind reason counts the NUMA node the reused cards fix",
			node:   twoFour(),
			req:    pod(initC(whole("setup", 1)), whole("main", 5)),
			ann:    bind,
			reason: `container "main": needs 5 cards on one NUMA node; the 1 card it reuses from its init containers is on NUMA 0, which has 2`,
		},
		{
			// Two init containers of 1 card each: the first goes to G0, the second to G1 (the
			// first's card is handed on, so the second reuses it... it needs 1 and the pool has
			// 1: it reuses G0). App of 2: pool {G0}: G0 + 1 more, NUMA 0 has G1.
			name: "numa-bind: two init containers hand the same card on",
			node: twoFour(),
			req:  pod(initC(whole("a", 1)), initC(whole("b", 1)), whole("main", 2)),
			ann:  bind,
			want: map[string][]string{"a": {"G0 46068/100"}, "b": {"G0 46068/100"}, "main": {"G0 46068/100", "G1 46068/100"}},
		},
		{
			// The init container holds 2 shares (G0, G1); the app needs 1: the kubelet takes one
			// of the two at random. Both must hold the app (5000 MiB), and both reserve
			// max(2000, 5000) = 5000 so that either is accounted; the plan names the binpack pick.
			name: "app reusing 1 of 2 init cards: both reserve the larger request",
			node: nodeOf(card("G0", a40, 46068, 0, 4), card("G1", a40, 46068, 0, 4)),
			req:  pod(initC(shared("setup", 2, 2000, 10)), shared("main", 1, 5000, 20)),
			want: map[string][]string{"setup": {"G0::0 5000/20", "G1::0 5000/20"}, "main": {"G0::0 5000/20"}},
		},
		{
			// G1 has 42068 MiB held by another pod: 46068-42068 = 4000 free; the init share
			// (2000) leaves 2000, the app wants 5000 (3000 more). The kubelet may hand the app
			// G1: refused, though G0 could take it.
			name: "app reusing 1 of 2 init cards: every one must hold it",
			node: withHeld(nodeOf(card("G0", a40, 46068, 0, 4), card("G1", a40, 46068, 0, 4)),
				Holding{UUID: "G1", Slot: 3, MemMiB: 42068, Cores: 10}),
			req:    pod(initC(shared("setup", 2, 2000, 10)), shared("main", 1, 5000, 20)),
			reason: `container "main": the init containers' cards, which the kubelet hands on, cannot hold it`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy := tt.policy
			if policy == "" {
				policy = annotations.PolicyBinpack
			}
			p, err := decider(t, annotations.PolicyBinpack, policy).Prepare(tt.req, mustSel(t, tt.ann))
			if err != nil {
				t.Fatal(err)
			}
			plan, r := p.Fit(tt.node, nil)
			if tt.reason != "" {
				if r == nil {
					t.Fatalf("fit %v, want reason %q", ids(tt.node, plan), tt.reason)
				}
				if diff := cmp.Diff(tt.reason, r.String()); diff != "" {
					t.Errorf("reason (-want +got):\n%s", diff)
				}
				return
			}
			if r != nil {
				t.Fatalf("reason %q", r)
			}
			if diff := cmp.Diff(tt.want, ids(tt.node, plan)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}
