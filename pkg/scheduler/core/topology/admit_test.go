package topology

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Builders. cards(numa, n, held) makes n devices "n<numa>-<k>" on one NUMA node, the first held of
// them held by other pods; numa(id, cpus, reserved, exclusive) one NUMA node.

func cards(numaID, n, held int) []Device {
	out := make([]Device, n)
	for k := range out {
		out[k] = Device{ID: fmt.Sprintf("n%d-%d", numaID, k), NUMA: numaID, Healthy: true, Held: k < held}
	}
	return out
}

func join(lists ...[]Device) []Device {
	var out []Device
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func numa(id, cpus, reserved, exclusive int) NUMANode {
	return NUMANode{ID: id, CPUs: cpus, ReservedCPUs: reserved, ExclusiveCPUs: exclusive}
}

func twoNUMA(policy Policy, scope Scope) *Node {
	return &Node{Policy: policy, Scope: scope, CPUPolicy: CPUPolicyNone,
		NUMA: []NUMANode{numa(0, 16, 0, 0), numa(1, 16, 0, 0)}}
}

func app(name string, devices, cpus int) Container {
	return Container{Name: name, Devices: devices, CPUs: cpus}
}

func initC(name string, devices, cpus int) Container {
	return Container{Name: name, Init: true, Devices: devices, CPUs: cpus}
}

func sidecar(name string, devices, cpus int) Container {
	return Container{Name: name, Init: true, Restartable: true, Devices: devices, CPUs: cpus}
}

func pod(guaranteed bool, cs ...Container) *Request {
	return &Request{Containers: cs, Guaranteed: guaranteed}
}

func ids(prefix string, ks ...int) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = fmt.Sprintf("%s-%d", prefix, k)
	}
	return out
}

func cat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func pref(ids ...int) Hint    { return Hint{Affinity: MaskOf(ids...), Preferred: true} }
func nonPref(ids ...int) Hint { return Hint{Affinity: MaskOf(ids...)} }

func TestAdmit(t *testing.T) {
	tests := []struct {
		name string
		node *Node
		devs []Device
		req  *Request
		want Result
	}{
		{
			// 1 card; NUMA 0 has 3 free (1 held), NUMA 1 has 4.
			// Device hints: {0} 3>=1 preferred (min width 1), {1} 4>=1 preferred, {0,1} not.
			// Merge with the CPU manager's {nil,true}: {0}p, {1}p, {0,1}; both preferred: the
			// narrower (lower) {0} wins. 3 aligned free > 1 needed: the plugin picks among them.
			name: "one card goes to NUMA 0 when it has free cards",
			node: twoNUMA(PolicyBestEffort, ScopeContainer),
			devs: join(cards(0, 4, 1), cards(1, 4, 0)),
			req:  pod(false, app("main", 1, 0)),
			want: Result{Containers: []ContainerResult{{Name: "main", Hint: pref(0), Devices: Allocation{
				Pool: ids("n0", 1, 2, 3), FromPool: 1, AskPlugin: true, Taken: ids("n0", 1)}}}},
		},
		{
			// 1 card, NUMA 0 has exactly 1 free: aligned 1 == needed 1, the kubelet takes it
			// without asking the plugin.
			name: "one card, the only free card of NUMA 0 is taken outright",
			node: twoNUMA(PolicyRestricted, ScopeContainer),
			devs: join(cards(0, 4, 3), cards(1, 4, 0)),
			req:  pod(false, app("main", 1, 0)),
			want: Result{Containers: []ContainerResult{{Name: "main", Hint: pref(0), Devices: Allocation{
				Fixed: ids("n0", 3), Taken: ids("n0", 3)}}}},
		},
		{
			// 2 cards; NUMA 0 has 1 free, NUMA 1 has 3. Min width: {0} holds 4 cards in all >= 2,
			// so 1. Hints: {0} 1<2 none, {1} 3>=2 preferred, {0,1} 4>=2 not preferred -> {1}.
			name: "two cards go to NUMA 1 when NUMA 0 has one free",
			node: twoNUMA(PolicyBestEffort, ScopeContainer),
			devs: join(cards(0, 4, 3), cards(1, 4, 1)),
			req:  pod(false, app("main", 2, 0)),
			want: Result{Containers: []ContainerResult{{Name: "main", Hint: pref(1), Devices: Allocation{
				Pool: ids("n1", 1, 2, 3), FromPool: 2, AskPlugin: true, Taken: ids("n1", 1, 2)}}}},
		},
		{
			// single-numa-node, Guaranteed, 2 cards + 6 CPUs. NUMA 0: 2 free cards, 16-2-12 = 2
			// free CPUs; NUMA 1: 3 free cards, 16-0-6 = 10 free CPUs.
			// Devices: {0}p {1}p {0,1}. CPUs (min width 1: 16>=6): {0} 2<6 none, {1}p, {0,1} 12.
			// Single-NUMA filter: devices {0}p {1}p, CPUs {1}p. Permutations: {0}&{1} = {} (skipped),
			// {1}&{1} = {1} preferred -> admitted on NUMA 1, CPUs all from NUMA 1.
			name: "single-numa-node puts 2 cards and 6 CPUs on the only NUMA node that holds both",
			node: &Node{Policy: PolicySingleNUMANode, CPUPolicy: CPUPolicyStatic,
				NUMA: []NUMANode{numa(0, 16, 2, 12), numa(1, 16, 0, 6)}},
			devs: join(cards(0, 4, 2), cards(1, 4, 1)),
			req:  pod(true, app("train", 2, 6)),
			want: Result{HeldCPUs: []int{0, 6}, Containers: []ContainerResult{{Name: "train", Hint: pref(1), CPUs: []int{0, 6}, Devices: Allocation{
				Pool: ids("n1", 1, 2, 3), FromPool: 2, AskPlugin: true, Taken: ids("n1", 1, 2)}}}},
		},
		{
			// best-effort, 3 cards; each NUMA node has 2 free of 4. Min width 1 (4 >= 3), hints:
			// {0} 2<3 and {1} 2<3 none, {0,1} 4>=3 not preferred. best-effort admits {0,1}; all 4
			// free cards are aligned, 3 < 4: the plugin picks among them.
			name: "best-effort admits cards that span NUMA nodes",
			node: twoNUMA(PolicyBestEffort, ScopeContainer),
			devs: join(cards(0, 4, 2), cards(1, 4, 2)),
			req:  pod(false, app("main", 3, 0)),
			want: Result{Containers: []ContainerResult{{Name: "main", Hint: nonPref(0, 1), Devices: Allocation{
				Pool: cat(ids("n0", 2, 3), ids("n1", 2, 3)), FromPool: 3, AskPlugin: true,
				Taken: cat(ids("n0", 2, 3), ids("n1", 2))}}}},
		},
		{
			// Pod scope: init 1 card, two app containers 1 card each: pod request max(1+1, 1) = 2.
			// NUMA 0 has 1 free, NUMA 1 has 3: pod hint {1} (as the 2-card case above).
			// init: 3 aligned > 1, plugin picks n1-1; it is handed on. app a: the handed-on card
			// (1 == 1) outright. app b: nothing handed on, 2 aligned left > 1, plugin picks n1-2.
			name: "pod scope sums the containers and aligns them all on one NUMA node",
			node: twoNUMA(PolicyRestricted, ScopePod),
			devs: join(cards(0, 4, 3), cards(1, 4, 1)),
			req:  pod(false, initC("setup", 1, 0), app("a", 1, 0), app("b", 1, 0)),
			want: Result{Pod: pref(1), Containers: []ContainerResult{
				{Name: "setup", Hint: pref(1), Devices: Allocation{Pool: ids("n1", 1, 2, 3), FromPool: 1, AskPlugin: true, Taken: ids("n1", 1)}},
				{Name: "a", Hint: pref(1), Devices: Allocation{Fixed: ids("n1", 1), Taken: ids("n1", 1)}},
				{Name: "b", Hint: pref(1), Devices: Allocation{Pool: ids("n1", 2, 3), FromPool: 1, AskPlugin: true, Taken: ids("n1", 2)}},
			}},
		},
		{
			// The same pod at container scope: each container alone. setup (1 card): {0}p {1}p ->
			// {0}, n0-3 outright. a: the handed-on n0-3 lies on NUMA 0, so only masks holding 0
			// count: {0} (1 reused >= 1) preferred, {0,1} -> {0}; takes n0-3 outright. b: NUMA 0 is
			// empty now: {1}p -> NUMA 1, plugin among n1-1..3.
			name: "container scope aligns each container on its own",
			node: twoNUMA(PolicyRestricted, ScopeContainer),
			devs: join(cards(0, 4, 3), cards(1, 4, 1)),
			req:  pod(false, initC("setup", 1, 0), app("a", 1, 0), app("b", 1, 0)),
			want: Result{Containers: []ContainerResult{
				{Name: "setup", Hint: pref(0), Devices: Allocation{Fixed: ids("n0", 3), Taken: ids("n0", 3)}},
				{Name: "a", Hint: pref(0), Devices: Allocation{Fixed: ids("n0", 3), Taken: ids("n0", 3)}},
				{Name: "b", Hint: pref(1), Devices: Allocation{Pool: ids("n1", 1, 2, 3), FromPool: 1, AskPlugin: true, Taken: ids("n1", 1)}},
			}},
		},
		{
			// init 2 cards: NUMA 0 has 2 free, NUMA 1 has 4: {0}, both outright, handed on.
			// app 3 cards: 2 reused (on NUMA 0) + 1 more. Masks must hold NUMA 0: {0} 2+0 < 3
			// none; {0,1} 2+4 >= 3, not preferred (min width 1: NUMA 0 has 4 cards). best-effort
			// admits {0,1}: the 2 reused outright, then 1 of the 4 aligned free via the plugin.
			name: "init container's cards are reused first and pull the app container's mask",
			node: twoNUMA(PolicyBestEffort, ScopeContainer),
			devs: join(cards(0, 4, 2), cards(1, 4, 0)),
			req:  pod(false, initC("warmup", 2, 0), app("train", 3, 0)),
			want: Result{Containers: []ContainerResult{
				{Name: "warmup", Hint: pref(0), Devices: Allocation{Fixed: ids("n0", 2, 3), Taken: ids("n0", 2, 3)}},
				{Name: "train", Hint: nonPref(0, 1), Devices: Allocation{Fixed: ids("n0", 2, 3),
					Pool: ids("n1", 0, 1, 2, 3), FromPool: 1, AskPlugin: true, Taken: cat(ids("n0", 2, 3), ids("n1", 0))}},
			}},
		},
		{
			// init 2 cards handed on to an app container of 1: the kubelet takes 1 of the 2
			// itself (no plugin call). app hint: {0} (2 reused >= 1) preferred.
			name: "app container smaller than the handed-on set: the kubelet picks among them",
			node: twoNUMA(PolicyBestEffort, ScopeContainer),
			devs: join(cards(0, 4, 2), cards(1, 4, 0)),
			req:  pod(false, initC("warmup", 2, 0), app("train", 1, 0)),
			want: Result{Containers: []ContainerResult{
				{Name: "warmup", Hint: pref(0), Devices: Allocation{Fixed: ids("n0", 2, 3), Taken: ids("n0", 2, 3)}},
				{Name: "train", Hint: pref(0), Devices: Allocation{Pool: ids("n0", 2, 3), FromPool: 1, Taken: ids("n0", 2)}},
			}},
		},
		{
			// A sidecar keeps its card: sidecar takes NUMA 0's last free card; the app container
			// gets no hand-on and goes to NUMA 1.
			name: "sidecar's card is not handed on",
			node: twoNUMA(PolicyBestEffort, ScopeContainer),
			devs: join(cards(0, 4, 3), cards(1, 4, 0)),
			req:  pod(false, sidecar("proxy", 1, 0), app("main", 1, 0)),
			want: Result{Containers: []ContainerResult{
				{Name: "proxy", Hint: pref(0), Devices: Allocation{Fixed: ids("n0", 3), Taken: ids("n0", 3)}},
				{Name: "main", Hint: pref(1), Devices: Allocation{Pool: ids("n1", 0, 1, 2, 3), FromPool: 1, AskPlugin: true, Taken: ids("n1", 0)}},
			}},
		},
		{
			// Non-preferred tie-break (HintMerger.compare). 3 NUMA nodes of 2 cards, 1 free each;
			// 2 cards + 6 CPUs (8 free per node). Devices: min width 1 (2 cards per node) but no
			// node has 2 free: pairs and the triple, none preferred; narrowest width 2. CPUs: {0}p
			// {1}p {2}p, wider ones not preferred; narrowest 1. bestNonPreferred = max(2,1) = 2.
			// Merged hints are all non-preferred; a width-2 one beats the narrower {0} ({0,1}&{0,1}),
			// and among width 2 the lowest: {0,1}. Both free cards outright; CPUs: NUMA 0 and 1
			// have 8 each, the lower ID first: 6 from NUMA 0.
			name: "best-effort non-preferred merge prefers the width of the widest narrowest hint",
			node: &Node{Policy: PolicyBestEffort, CPUPolicy: CPUPolicyStatic,
				NUMA: []NUMANode{numa(0, 8, 0, 0), numa(1, 8, 0, 0), numa(2, 8, 0, 0)}},
			devs: join(cards(0, 2, 1), cards(1, 2, 1), cards(2, 2, 1)),
			req:  pod(true, app("main", 2, 6)),
			want: Result{HeldCPUs: []int{6, 0, 0}, Containers: []ContainerResult{{Name: "main", Hint: nonPref(0, 1), CPUs: []int{6, 0, 0},
				Devices: Allocation{Fixed: cat(ids("n0", 1), ids("n1", 1)), Taken: cat(ids("n0", 1), ids("n1", 1))}}}},
		},
		{
			// CPUs only count for a Guaranteed pod: the same node and pod, Burstable: the CPU
			// manager has no preference and the cards go to NUMA 0 as in the first case.
			name: "burstable pod's CPUs give no hints",
			node: &Node{Policy: PolicySingleNUMANode, CPUPolicy: CPUPolicyStatic,
				NUMA: []NUMANode{numa(0, 16, 2, 12), numa(1, 16, 0, 6)}},
			devs: join(cards(0, 4, 2), cards(1, 4, 1)),
			req:  pod(false, app("train", 2, 6)),
			want: Result{Containers: []ContainerResult{{Name: "train", Hint: pref(0), Devices: Allocation{
				Fixed: ids("n0", 2, 3), Taken: ids("n0", 2, 3)}}}},
		},
		{
			// single-numa-node turns the merged default affinity into nil: a container without
			// cards or exclusive CPUs is admitted with no affinity.
			name: "single-numa-node admits a container that asks for nothing aligned",
			node: twoNUMA(PolicySingleNUMANode, ScopeContainer),
			devs: join(cards(0, 4, 0), cards(1, 4, 0)),
			req:  pod(false, app("side", 0, 0)),
			want: Result{Containers: []ContainerResult{{Name: "side", Hint: Hint{Preferred: true}}}},
		},
		{
			// One NUMA node: the best hint {0} is the default affinity, single-numa-node stores nil,
			// so nothing is aligned and the plugin chooses among all free cards (today's behaviour).
			name: "one NUMA node: no alignment, the plugin chooses",
			node: &Node{Policy: PolicySingleNUMANode, NUMA: []NUMANode{numa(0, 8, 0, 0)}},
			devs: cards(0, 4, 1),
			req:  pod(false, app("main", 2, 0)),
			want: Result{Containers: []ContainerResult{{Name: "main", Hint: Hint{Preferred: true}, Devices: Allocation{
				Pool: ids("n0", 1, 2, 3), FromPool: 2, AskPlugin: true, Taken: ids("n0", 1, 2)}}}},
		},
		{
			// The plugin reports no NUMA node: the device manager has no preference; the CPU
			// manager alone picks NUMA 1 (2 free CPUs on NUMA 0 < 4); cards are not aligned.
			name: "devices without NUMA follow no hint",
			node: &Node{Policy: PolicyRestricted, CPUPolicy: CPUPolicyStatic,
				NUMA: []NUMANode{numa(0, 8, 2, 4), numa(1, 8, 0, 0)}},
			devs: []Device{{ID: "a", NUMA: -1, Healthy: true}, {ID: "b", NUMA: -1, Healthy: true}},
			req:  pod(true, app("main", 1, 4)),
			want: Result{HeldCPUs: []int{0, 4}, Containers: []ContainerResult{{Name: "main", Hint: pref(1), CPUs: []int{0, 4}, Devices: Allocation{
				Pool: []string{"a", "b"}, FromPool: 1, AskPlugin: true, Taken: []string{"a"}}}}},
		},
		{
			// prefer-closest-numa-nodes: 4 NUMA nodes with 1 free card each, 2 cards: every pair is
			// preferred (min width 2). Average distances: {0,2} and {1,3} (10+11+11+10)/4 = 10.5,
			// the others 15. Closest: {0,2} (equal to {1,3}, and the lower mask). Without the
			// option it would be {0,1}. Both aligned cards are taken outright.
			name: "prefer-closest-numa-nodes picks the closest pair",
			node: &Node{Policy: PolicyRestricted, PreferClosestNUMA: true, NUMA: []NUMANode{
				{ID: 0, CPUs: 4, Distances: []int{10, 20, 11, 20}}, {ID: 1, CPUs: 4, Distances: []int{20, 10, 20, 11}},
				{ID: 2, CPUs: 4, Distances: []int{11, 20, 10, 20}}, {ID: 3, CPUs: 4, Distances: []int{20, 11, 20, 10}}}},
			devs: join(cards(0, 1, 0), cards(1, 1, 0), cards(2, 1, 0), cards(3, 1, 0)),
			req:  pod(false, app("main", 2, 0)),
			want: Result{Containers: []ContainerResult{{Name: "main", Hint: pref(0, 2), Devices: Allocation{
				Fixed: cat(ids("n0", 0), ids("n2", 0)), Taken: cat(ids("n0", 0), ids("n2", 0))}}}},
		},
		{
			// The same without the option: the narrowest (lowest) pair {0,1}.
			name: "without prefer-closest the lowest pair wins",
			node: &Node{Policy: PolicyRestricted, NUMA: []NUMANode{
				numa(0, 4, 0, 0), numa(1, 4, 0, 0), numa(2, 4, 0, 0), numa(3, 4, 0, 0)}},
			devs: join(cards(0, 1, 0), cards(1, 1, 0), cards(2, 1, 0), cards(3, 1, 0)),
			req:  pod(false, app("main", 2, 0)),
			want: Result{Containers: []ContainerResult{{Name: "main", Hint: pref(0, 1), Devices: Allocation{
				Fixed: cat(ids("n0", 0), ids("n1", 0)), Taken: cat(ids("n0", 0), ids("n1", 0))}}}},
		},
		{
			// Pod scope with CPUs: init 4 CPUs, sidecar 2, app 2: pod CPUs max(2+2, 0+4) = 4;
			// cards: init 1, sidecar 0, app 1: max(1+0, 1) = 1.
			// NUMA 0: 2 free CPUs, NUMA 1: 8. CPUs {1}p only (min width 1); devices {0}p {1}p.
			// restricted: {1}&{1} preferred -> pod hint {1}. init: 4 CPUs on NUMA 1, handed on;
			// sidecar 2 CPUs from the handed-on ones (reused first); app 2 more handed-on ones.
			name: "pod scope with exclusive CPUs, an init container and a sidecar",
			node: &Node{Policy: PolicyRestricted, Scope: ScopePod, CPUPolicy: CPUPolicyStatic,
				NUMA: []NUMANode{numa(0, 8, 2, 4), numa(1, 8, 0, 0)}},
			devs: join(cards(0, 2, 0), cards(1, 2, 0)),
			req:  pod(true, initC("init", 1, 4), sidecar("side", 0, 2), app("main", 1, 2)),
			want: Result{HeldCPUs: []int{0, 4}, Pod: pref(1), Containers: []ContainerResult{
				{Name: "init", Hint: pref(1), CPUs: []int{0, 4}, Devices: Allocation{Pool: ids("n1", 0, 1), FromPool: 1, AskPlugin: true, Taken: ids("n1", 0)}},
				{Name: "side", Hint: pref(1), CPUs: []int{0, 2}},
				{Name: "main", Hint: pref(1), CPUs: []int{0, 2}, Devices: Allocation{Fixed: ids("n1", 0), Taken: ids("n1", 0)}},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ref := Admit(tt.node, tt.devs, tt.req)
			if ref != nil {
				t.Fatalf("refused: %v", ref)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Admit (-want +got):\n%s", diff)
			}
		})
	}
}
