package topology

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAdmitRefuses(t *testing.T) {
	tests := []struct {
		name string
		node *Node
		devs []Device
		req  *Request
		want Refusal
		text string
	}{
		{
			// single-numa-node, 2 cards + 6 CPUs. NUMA 0: 2 free cards, 2 free CPUs (16-2-12);
			// NUMA 1: 1 free card, 10 free CPUs. Devices: {0}p only ({1} 1<2; {0,1} not preferred,
			// filtered out). CPUs: {1}p only. {0}&{1} = {}: no merged hint -> the default {0,1},
			// not preferred -> nil, refused.
			name: "single-numa-node: cards and CPUs on different NUMA nodes",
			node: &Node{Policy: PolicySingleNUMANode, CPUPolicy: CPUPolicyStatic,
				NUMA: []NUMANode{numa(0, 16, 2, 12), numa(1, 16, 0, 6)}},
			devs: join(cards(0, 4, 2), cards(1, 4, 3)),
			req:  pod(true, app("train", 2, 6)),
			want: Refusal{Reason: ReasonTopologyAffinity, Policy: PolicySingleNUMANode, Scope: ScopeContainer,
				Container: "train", Devices: 2, CPUs: 6, DeviceNUMANodes: 1, CPUNUMANodes: 1,
				NUMA: []NUMAFree{{ID: 0, Devices: 2, CPUs: 2}, {ID: 1, Devices: 1, CPUs: 10}}},
			text: `container "train": the kubelet's single-numa-node policy needs 2 cards and 6 CPUs on one NUMA node; ` +
				`NUMA 0 has 2 free cards and 2 free CPUs, NUMA 1 has 1 free card and 10 free CPUs`,
		},
		{
			// restricted, 3 cards, 2 free on each NUMA node of 4: only {0,1} (4 >= 3), and the
			// narrowest width is 1 (4 cards on NUMA 0 >= 3): not preferred -> refused.
			name: "restricted refuses cards that span NUMA nodes",
			node: twoNUMA(PolicyRestricted, ScopeContainer),
			devs: join(cards(0, 4, 2), cards(1, 4, 2)),
			req:  pod(false, app("main", 3, 0)),
			want: Refusal{Reason: ReasonTopologyAffinity, Policy: PolicyRestricted, Scope: ScopeContainer,
				Container: "main", Devices: 3, DeviceNUMANodes: 1, Best: nonPref(0, 1),
				NUMA: []NUMAFree{{ID: 0, Devices: 2, CPUs: 16}, {ID: 1, Devices: 2, CPUs: 16}}},
			text: `container "main": the kubelet's restricted policy needs 3 cards on 1 NUMA node (the fewest that can hold them); ` +
				`NUMA 0 has 2 free cards, NUMA 1 has 2 free cards`,
		},
		{
			// The narrowest width counts every card, unhealthy ones too (generateDeviceTopologyHints
			// loops over allDevices): NUMA 0 has 2 cards (one unhealthy) -> width 1; the only
			// hint {0,1} (1+1 free) is not preferred -> refused.
			name: "restricted: an unhealthy card still sets the narrowest width",
			node: twoNUMA(PolicyRestricted, ScopeContainer),
			devs: []Device{{ID: "a", NUMA: 0, Healthy: true}, {ID: "b", NUMA: 0}, {ID: "c", NUMA: 1, Healthy: true}},
			req:  pod(false, app("main", 2, 0)),
			want: Refusal{Reason: ReasonTopologyAffinity, Policy: PolicyRestricted, Scope: ScopeContainer,
				Container: "main", Devices: 2, DeviceNUMANodes: 1, Best: nonPref(0, 1),
				NUMA: []NUMAFree{{ID: 0, Devices: 1, CPUs: 16}, {ID: 1, Devices: 1, CPUs: 16}}},
		},
		{
			// restricted: init 2 cards on NUMA 0 (its 2 free), handed on; the app container wants 3:
			// masks must hold NUMA 0: {0} 2+0 < 3, {0,1} 2+4: not preferred (NUMA 0 has 4 cards)
			// -> refused at the app container, though best-effort admits it.
			name: "restricted: the handed-on cards pin the app container to a wide mask",
			node: twoNUMA(PolicyRestricted, ScopeContainer),
			devs: join(cards(0, 4, 2), cards(1, 4, 0)),
			req:  pod(false, initC("warmup", 2, 0), app("train", 3, 0)),
			want: Refusal{Reason: ReasonTopologyAffinity, Policy: PolicyRestricted, Scope: ScopeContainer,
				Container: "train", Devices: 3, DeviceNUMANodes: 1, Best: nonPref(0, 1),
				NUMA: []NUMAFree{{ID: 0, Devices: 2, CPUs: 16}, {ID: 1, Devices: 4, CPUs: 16}}},
		},
		{
			// Pod scope, single-numa-node: two containers of 2 cards -> 4 on one NUMA node; each
			// has 3 free.
			name: "pod scope: single-numa-node needs the pod's sum on one NUMA node",
			node: twoNUMA(PolicySingleNUMANode, ScopePod),
			devs: join(cards(0, 4, 1), cards(1, 4, 1)),
			req:  pod(false, app("a", 2, 0), app("b", 2, 0)),
			want: Refusal{Reason: ReasonTopologyAffinity, Policy: PolicySingleNUMANode, Scope: ScopePod,
				Devices: 4, DeviceNUMANodes: 1,
				NUMA: []NUMAFree{{ID: 0, Devices: 3, CPUs: 16}, {ID: 1, Devices: 3, CPUs: 16}}},
			text: `the kubelet's single-numa-node policy needs the pod's 4 cards on one NUMA node; NUMA 0 has 3 free cards, NUMA 1 has 3 free cards`,
		},
		{
			// restricted with cards and CPUs whose narrowest widths differ: cards need 1 NUMA
			// node, 12 CPUs need 2 (8 per node): no permutation can be preferred -> refused.
			// Merged: {0}&{0,1} = {0}, {1}, {0,1}, all non-preferred; bestNonPreferred =
			// max(1, 2) = 2, so the width-2 {0,1} beats the narrower ones.
			name: "restricted: cards and CPUs of different narrowest widths never align",
			node: &Node{Policy: PolicyRestricted, CPUPolicy: CPUPolicyStatic,
				NUMA: []NUMANode{numa(0, 8, 0, 0), numa(1, 8, 0, 0)}},
			devs: join(cards(0, 2, 0), cards(1, 2, 0)),
			req:  pod(true, app("main", 1, 12)),
			want: Refusal{Reason: ReasonTopologyAffinity, Policy: PolicyRestricted, Scope: ScopeContainer,
				Container: "main", Devices: 1, CPUs: 12, DeviceNUMANodes: 1, CPUNUMANodes: 2, Best: nonPref(0, 1),
				NUMA: []NUMAFree{{ID: 0, Devices: 2, CPUs: 8}, {ID: 1, Devices: 2, CPUs: 8}}},
			text: `container "main": the kubelet's restricted policy needs 1 card and 12 CPUs on the same NUMA nodes, ` +
				`1 for the cards and 2 for the CPUs (the fewest that can hold each); NUMA 0 has 2 free cards and 8 free CPUs, NUMA 1 has 2 free cards and 8 free CPUs`,
		},
		{
			// best-effort admits any hint, but 3 free cards cannot hold 4.
			name: "best-effort still fails when too few cards are free",
			node: twoNUMA(PolicyBestEffort, ScopeContainer),
			devs: join(cards(0, 2, 0), cards(1, 2, 1)),
			req:  pod(false, app("main", 4, 0)),
			want: Refusal{Reason: ReasonDevicesUnavailable, Policy: PolicyBestEffort, Scope: ScopeContainer,
				Container: "main", Devices: 4, Best: nonPref(0, 1),
				NUMA: []NUMAFree{{ID: 0, Devices: 2, CPUs: 16}, {ID: 1, Devices: 1, CPUs: 16}}},
			text: `container "main": the kubelet has 3 free cards, 4 needed`,
		},
		{
			// 9 NUMA nodes are above max-allowable-numa-nodes (8): the kubelet does not start.
			name: "more NUMA nodes than max-allowable-numa-nodes",
			node: &Node{Policy: PolicyBestEffort, NUMA: []NUMANode{numa(0, 1, 0, 0), numa(1, 1, 0, 0), numa(2, 1, 0, 0),
				numa(3, 1, 0, 0), numa(4, 1, 0, 0), numa(5, 1, 0, 0), numa(6, 1, 0, 0), numa(7, 1, 0, 0), numa(8, 1, 0, 0)}},
			req: pod(false, app("main", 1, 0)),
			want: Refusal{Reason: ReasonInvalidNode, Policy: PolicyBestEffort,
				Detail: "9 NUMA nodes, more than max-allowable-numa-nodes (8)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ref := Admit(tt.node, tt.devs, tt.req)
			if ref == nil {
				t.Fatalf("admitted: %+v", got)
			}
			if diff := cmp.Diff(tt.want, *ref); diff != "" {
				t.Errorf("Refusal (-want +got):\n%s", diff)
			}
			if tt.text != "" && ref.Error() != tt.text {
				t.Errorf("Error():\n got %s\nwant %s", ref.Error(), tt.text)
			}
		})
	}
}

func TestBestEffortAdmitsWhatRestrictedRefuses(t *testing.T) {
	devs := join(cards(0, 4, 2), cards(1, 4, 0))
	req := pod(false, initC("warmup", 2, 0), app("train", 3, 0))
	if _, ref := Admit(twoNUMA(PolicyRestricted, ScopeContainer), devs, req); ref == nil {
		t.Fatal("restricted admitted")
	}
	if _, ref := Admit(twoNUMA(PolicyBestEffort, ScopeContainer), devs, req); ref != nil {
		t.Fatalf("best-effort refused: %v", ref)
	}
}

func TestPolicyNoneIsUnconstrainedAndFree(t *testing.T) {
	for _, p := range []Policy{PolicyNone, ""} {
		n := twoNUMA(p, ScopeContainer)
		devs := join(cards(0, 4, 4), cards(1, 4, 4)) // all held: policy none does not look
		req := pod(true, app("main", 8, 100))
		got, ref := Admit(n, devs, req)
		if ref != nil || !got.Unconstrained || got.Containers != nil {
			t.Fatalf("policy %q: %+v, %v", p, got, ref)
		}
		if allocs := testing.AllocsPerRun(100, func() { _, _ = Admit(n, devs, req) }); allocs != 0 {
			t.Errorf("policy %q: %v allocations per Admit, want 0", p, allocs)
		}
	}
}

func TestPodRequests(t *testing.T) {
	tests := []struct {
		name        string
		cs          []Container
		devs, cpus_ int
	}{
		// apps 1+1 = 2, init 1: 2.
		{"apps sum", []Container{initC("i", 1, 1), app("a", 1, 1), app("b", 1, 1)}, 2, 2},
		// init 4 alone beats apps 1+1.
		{"largest init wins", []Container{initC("i", 4, 3), app("a", 1, 1), app("b", 1, 1)}, 4, 3},
		// sidecar 1 then init 2: 1+2 = 3 while initialising; long-running 1 (sidecar) + 1 = 2.
		{"init after a sidecar counts it", []Container{sidecar("s", 1, 1), initC("i", 2, 2), app("a", 1, 1)}, 3, 3},
		// init 2 then sidecar 1: the init runs alone (2); long-running 1 + 1 + 1 = 3.
		{"sidecars add to the apps", []Container{initC("i", 2, 2), sidecar("s", 1, 1), app("a", 1, 1), app("b", 1, 1)}, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &Node{Policy: PolicyBestEffort, CPUPolicy: CPUPolicyStatic, NUMA: []NUMANode{numa(0, 8, 0, 0)}}
			s := newSim(n, nil, &Request{Containers: tt.cs, Guaranteed: true})
			d, c := s.podRequests()
			if d != tt.devs || c != tt.cpus_ {
				t.Errorf("podRequests = %d devices, %d CPUs; want %d, %d", d, c, tt.devs, tt.cpus_)
			}
		})
	}
}

func TestPickSeesFixedAndEveryContainer(t *testing.T) {
	// Container scope, restricted. NUMA 0 has 2 free cards, NUMA 1 has 4. "a" (1 card): {0},
	// 2 aligned > 1, the plugin picks (nothing fixed). "b" (1 card): NUMA 0 has 1 left, 1 == 1,
	// the kubelet takes it without the plugin; Pick still hears of it, with n == 0. "c" (3
	// cards): {1}, 4 aligned > 3, the plugin picks.
	n := twoNUMA(PolicyRestricted, ScopeContainer)
	devs := join(cards(0, 4, 2), cards(1, 4, 0))
	req := pod(false, app("a", 1, 0), app("b", 1, 0), app("c", 3, 0))
	type call struct {
		C           int
		Fixed, Pool []string
		N           int
	}
	var got []call
	req.Pick = func(c int, fixed, pool []string, k int) []string {
		got = append(got, call{c, fixed, pool, k})
		return pool[:k]
	}
	if _, ref := Admit(n, devs, req); ref != nil {
		t.Fatal(ref)
	}
	want := []call{
		{C: 0, Pool: ids("n0", 2, 3), N: 1},
		{C: 1, Fixed: ids("n0", 3)},
		{C: 2, Pool: ids("n1", 0, 1, 2, 3), N: 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Pick calls (-want +got):\n%s", diff)
	}
}

func TestPickSteersLaterContainers(t *testing.T) {
	// Container scope, best-effort. NUMA 0 has 2 free cards, NUMA 1 has 4. "a" (1 card) goes to
	// {0}, the plugin picks among n0-2, n0-3. If it picks n0-3, NUMA 0 keeps n0-2 and "b" (1 card)
	// gets it outright (aligned 1 == 1).
	n := twoNUMA(PolicyBestEffort, ScopeContainer)
	devs := join(cards(0, 4, 2), cards(1, 4, 0))
	req := pod(false, app("a", 1, 0), app("b", 1, 0))
	req.Pick = func(c int, _, pool []string, k int) []string { return pool[len(pool)-k:] }
	got, ref := Admit(n, devs, req)
	if ref != nil {
		t.Fatal(ref)
	}
	if diff := cmp.Diff([]string{"n0-3"}, got.Containers[0].Devices.Taken); diff != "" {
		t.Errorf("a took (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Allocation{Fixed: []string{"n0-2"}, Taken: []string{"n0-2"}}, got.Containers[1].Devices); diff != "" {
		t.Errorf("b (-want +got):\n%s", diff)
	}
	// A Pick that answers outside the pool is ignored: the first of the pool is taken.
	req.Pick = func(int, []string, []string, int) []string { return []string{"n1-0"} }
	got, _ = Admit(n, devs, req)
	if diff := cmp.Diff([]string{"n0-2"}, got.Containers[0].Devices.Taken); diff != "" {
		t.Errorf("bad pick (-want +got):\n%s", diff)
	}
}

func TestAllocationAccepts(t *testing.T) {
	a := Allocation{Fixed: []string{"r"}, Pool: []string{"x", "y", "z"}, FromPool: 2, AskPlugin: true}
	for _, tt := range []struct {
		ids  []string
		want bool
	}{
		{[]string{"r", "x", "y"}, true},
		{[]string{"z", "r", "x"}, true},
		{[]string{"x", "y", "z"}, false},      // misses the fixed one
		{[]string{"r", "x"}, false},           // too few
		{[]string{"r", "x", "x"}, false},      // twice
		{[]string{"r", "x", "other"}, false},  // outside
		{[]string{"r", "x", "y", "z"}, false}, // too many
	} {
		if got := a.Accepts(tt.ids); got != tt.want {
			t.Errorf("Accepts(%v) = %v, want %v", tt.ids, got, tt.want)
		}
	}
}

func TestMaskOrderIsIterateBitMasks(t *testing.T) {
	// bitmask.IterateBitMasks([0 1 2]): {0} {1} {2} {0,1} {0,2} {1,2} {0,1,2}.
	got := appendMasks(nil, []int{0, 1, 2})
	want := []Mask{MaskOf(0), MaskOf(1), MaskOf(2), MaskOf(0, 1), MaskOf(0, 2), MaskOf(1, 2), MaskOf(0, 1, 2)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("masks (-want +got):\n%s", diff)
	}
	if s := MaskOf(1, 3).String(); s != "{1,3}" {
		t.Errorf("String = %s", s)
	}
	// IsNarrowerThan: fewer bits, then the lower value.
	if !MaskOf(3).narrowerThan(MaskOf(0, 1)) || !MaskOf(0, 2).narrowerThan(MaskOf(1, 2)) || MaskOf(1).narrowerThan(MaskOf(0)) {
		t.Error("narrowerThan")
	}
	if !slices.Equal(MaskOf(5, 0, 63).IDs(), []int{0, 5, 63}) {
		t.Error("IDs")
	}
}

func TestValidate(t *testing.T) {
	ok := twoNUMA(PolicyRestricted, ScopePod)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, n := range map[string]*Node{
		"policy":     {Policy: "strict", NUMA: ok.NUMA},
		"scope":      {Policy: PolicyRestricted, Scope: "node", NUMA: ok.NUMA},
		"cpu policy": {Policy: PolicyRestricted, CPUPolicy: "dynamic", NUMA: ok.NUMA},
		"no NUMA":    {Policy: PolicyRestricted},
		"twice":      {Policy: PolicyRestricted, NUMA: []NUMANode{numa(1, 4, 0, 0), numa(1, 4, 0, 0)}},
		"id":         {Policy: PolicyRestricted, NUMA: []NUMANode{numa(64, 4, 0, 0)}},
		"overcount":  {Policy: PolicyRestricted, NUMA: []NUMANode{numa(0, 4, 2, 3)}},
		"max":        {Policy: PolicyRestricted, MaxAllowableNUMANodes: 4, NUMA: ok.NUMA},
	} {
		if err := n.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func BenchmarkAdmit(b *testing.B) {
	n := &Node{Policy: PolicySingleNUMANode, CPUPolicy: CPUPolicyStatic,
		NUMA: []NUMANode{numa(0, 64, 2, 12), numa(1, 64, 0, 6)}}
	devs := join(cards(0, 4, 1), cards(1, 4, 1))
	req := pod(true, initC("init", 1, 2), app("train", 2, 6), app("eval", 1, 2))
	b.ReportAllocs()
	for b.Loop() {
		if _, ref := Admit(n, devs, req); ref != nil {
			b.Fatal(ref)
		}
	}
}

// Issue 21 item 2: the model enumerates 2^NUMA masks. Nodes with more NUMA nodes than the kubelet's
// default limit, even where max-allowable-numa-nodes allows them, are refused as invalid at once:
// before, 20 NUMA nodes cost 76–238 ms per check and 48 or 64 panicked (makeslice: cap out of range).
func TestAdmitRefusesMoreNUMANodesThanItModels(t *testing.T) {
	for _, count := range []int{64, 48, MaxNUMANodes + 1} {
		n := &Node{Policy: PolicyRestricted, CPUPolicy: CPUPolicyStatic, MaxAllowableNUMANodes: 64}
		var devs []Device
		for id := range count {
			n.NUMA = append(n.NUMA, numa(id, 4, 0, 0))
			devs = append(devs, cards(id, 1, 0)...)
		}
		_, ref := Admit(n, devs, pod(true, app("a", 1, 2)))
		if ref == nil || ref.Reason != ReasonInvalidNode || !strings.Contains(ref.Error(), "more than the 8 this model enumerates") {
			t.Errorf("%d NUMA nodes: refusal %v, want %s naming the model's limit", count, ref, ReasonInvalidNode)
		}
	}
	// The limit itself is modelled.
	n := &Node{Policy: PolicyRestricted, CPUPolicy: CPUPolicyStatic}
	var devs []Device
	for id := range MaxNUMANodes {
		n.NUMA = append(n.NUMA, numa(id, 4, 0, 0))
		devs = append(devs, cards(id, 1, 0)...)
	}
	if _, ref := Admit(n, devs, pod(true, app("a", 1, 2))); ref != nil {
		t.Fatalf("%d NUMA nodes: %v", MaxNUMANodes, ref)
	}
}

// Issue 21 item 4: a container whose limits name the card resource with 0 still gets device hints
// (devicemanager/topology_hints.go keeps the request of 0), and they must hold the cards init
// containers hand on. The init container takes the free card on NUMA 1; the app container, with
// the resource at 0 and 4 exclusive CPUs, which only NUMA 0 has free: its device hints are the
// masks holding NUMA 1 ({1} preferred), its CPU hint {0}, so no preferred merge exists. Before the
// fix the model treated 0 as "no preference" and admitted the pod the kubelet refuses.
func TestZeroDeviceLimitFollowsHandedOnDevices(t *testing.T) {
	devs := join(cards(0, 1, 1), cards(1, 1, 0)) // NUMA 0's card is held; NUMA 1's is free
	mk := func(policy Policy, listed bool) (*Node, *Request) {
		n := &Node{Policy: policy, CPUPolicy: CPUPolicyStatic, NUMA: []NUMANode{numa(0, 8, 0, 0), numa(1, 8, 0, 6)}}
		a := app("a", 0, 4)
		a.ListsDevices = listed
		return n, pod(true, initC("init", 1, 0), a)
	}
	for _, policy := range []Policy{PolicyRestricted, PolicySingleNUMANode} {
		n, r := mk(policy, true)
		_, ref := Admit(n, devs, r)
		if ref == nil || ref.Reason != ReasonTopologyAffinity || ref.Container != "a" {
			t.Fatalf("%s, app lists the cards with 0: refusal %v, want %s for container a", policy, ref, ReasonTopologyAffinity)
		}
		if want := "it lists the card resource with 0, so the kubelet also holds it to NUMA {1}, where init containers' cards are handed on"; !strings.Contains(ref.Error(), want) {
			t.Errorf("%s: %q, want it to say %q", policy, ref.Error(), want)
		}
		// Not listing the resource at all is "no preference": admitted on NUMA 0.
		n, r = mk(policy, false)
		res, ref := Admit(n, devs, r)
		if ref != nil || res.Containers[1].Hint.Affinity != MaskOf(0) {
			t.Fatalf("%s, app does not list the cards: %+v %v, want admitted on NUMA 0", policy, res.Containers, ref)
		}
	}
	// best-effort admits either way, with the merged (non-preferred) affinity.
	n, r := mk(PolicyBestEffort, true)
	if _, ref := Admit(n, devs, r); ref != nil {
		t.Fatalf("best-effort: %v", ref)
	}
}

// A limit of 0 with nothing handed on gives every mask, the single NUMA nodes preferred; merged
// with CPUs that need two NUMA nodes, no hint is preferred and restricted refuses, as the kubelet
// does, while a container that does not list the resource is admitted.
func TestZeroDeviceLimitWithoutHandOn(t *testing.T) {
	devs := join(cards(0, 1, 0), cards(1, 1, 0))
	for _, listed := range []bool{true, false} {
		n := &Node{Policy: PolicyRestricted, CPUPolicy: CPUPolicyStatic, NUMA: []NUMANode{numa(0, 8, 0, 0), numa(1, 8, 0, 0)}}
		a := app("a", 0, 12) // 12 CPUs: both NUMA nodes
		a.ListsDevices = listed
		_, ref := Admit(n, devs, pod(true, app("g", 1, 0), a))
		if (ref != nil) != listed {
			t.Errorf("listed=%v: refusal %v", listed, ref)
		}
	}
}
