package core

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core/topology"
)

// Builders for nodes whose kubelet runs a TopologyManager policy. numaCPUs(id, cpus, reserved,
// exclusive) is one NUMA node's CPUs; kubeletOf the kubelet's settings (the plugin reports each
// device's NUMA node); onKubelet a node of those cards under that kubelet, with holdings.

func numaCPUs(id, cpus, reserved, exclusive int) annotations.NUMACPUs {
	return annotations.NUMACPUs{ID: id, CPUs: cpus, ReservedCPUs: reserved, ExclusiveCPUs: exclusive}
}

// sixteen is two NUMA nodes of 16 CPUs, none held.
var sixteen = []annotations.NUMACPUs{numaCPUs(0, 16, 0, 0), numaCPUs(1, 16, 0, 0)}

func kubeletOf(policy, scope string, static bool, numa []annotations.NUMACPUs) *annotations.KubeletTopology {
	cpu := annotations.CPUManagerPolicyNone
	if static {
		cpu = annotations.CPUManagerPolicyStatic
	}
	return &annotations.KubeletTopology{TopologyManagerPolicy: policy, TopologyManagerScope: scope,
		CPUManagerPolicy: cpu, DeviceTopology: true, NUMA: numa}
}

// testNode is a node and the inventory it was built from.
type testNode struct {
	state *NodeState
	inv   annotations.Inventory
}

func onKubelet(k *annotations.KubeletTopology, gpus []annotations.GPU, held ...Holding) testNode {
	for i := range gpus {
		gpus[i].Index = i
	}
	inv := annotations.Inventory{V: 1, GPUs: gpus, Kubelet: k}
	return testNode{state: withHeld(NewNodeState("n1", inv), held...), inv: inv}
}

// wholeHeld holds cards by UUID, whole.
func wholeHeld(uuids ...string) []Holding {
	hs := make([]Holding, len(uuids))
	for i, u := range uuids {
		hs[i] = Holding{UUID: u, Slot: -1, MemMiB: 46068, Cores: 100}
	}
	return hs
}

// a40s makes cards "G<k>" of A40s, numa[k] their NUMA nodes, shares each.
func a40s(shares int, numa ...int) []annotations.GPU {
	out := make([]annotations.GPU, len(numa))
	for k, u := range numa {
		out[k] = card(fmt.Sprintf("G%d", k), "NVIDIA A40", 46068, u, shares)
	}
	return out
}

// modelAccepts runs the kubelet model on its own over the node (before the plan) and the pod,
// letting the plugin answer with the plan's IDs, and checks that every GPU container gets exactly
// its planned IDs (Allocation.Accepts).
func modelAccepts(t *testing.T, n testNode, req annotations.PodRequest, plan *Plan) {
	t.Helper()
	planned := map[string][]string{}
	for _, c := range plan.Assignment(n.state).Containers {
		planned[c.Name] = c.IDs()
	}
	held := func(id string) bool {
		uuid, slot, err := annotations.ParseDeviceID(id)
		if err != nil {
			t.Fatal(err)
		}
		i, _ := n.state.CardIndex(uuid)
		return n.state.Cards[i].refs[n.state.Cards[i].slotIndex(slot)] > 0
	}
	count := map[string]int{}
	for _, c := range req.Containers {
		count[c.Name] = c.Count
	}
	var r topology.Request
	r.Guaranteed = req.Guaranteed
	if len(req.CPUs) == 0 {
		for _, c := range req.Containers {
			r.Containers = append(r.Containers, topology.Container{Name: c.Name, Init: c.Init, Restartable: c.Sidecar, Devices: c.Count})
		}
	}
	for _, c := range req.CPUs {
		r.Containers = append(r.Containers, topology.Container{Name: c.Name, Init: c.Init, Restartable: c.Sidecar,
			Devices: count[c.Name], CPUs: c.WholeCPUs()})
	}
	r.Pick = func(c int, fixed, pool []string, k int) []string {
		var out []string
		for _, id := range planned[r.Containers[c].Name] {
			if !slices.Contains(fixed, id) {
				out = append(out, id)
			}
		}
		return out
	}
	res, refusal := topology.Admit(topology.NodeOf(n.inv.Kubelet), topology.DevicesOf(&n.inv, held), &r)
	if refusal != nil {
		t.Fatalf("the model refuses the pod: %v", refusal)
	}
	for i, c := range res.Containers {
		if r.Containers[i].Devices == 0 {
			continue
		}
		if !c.Devices.Accepts(planned[c.Name]) {
			t.Errorf("container %q: the kubelet would not hand over the planned %v (allocation %+v)", c.Name, planned[c.Name], c.Devices)
		}
	}
}

var (
	policies = []string{annotations.TopologyPolicyBestEffort, annotations.TopologyPolicyRestricted, annotations.TopologyPolicySingleNUMANode}
	scopes   = []string{annotations.TopologyScopeContainer, annotations.TopologyScopePod}
)

func TestFitKubeletTopology(t *testing.T) {
	uuid := func(u string) map[string]string { return map[string]string{annotations.UseGPUUUID: u} }
	guaranteed := func(req annotations.PodRequest, cpus ...annotations.ContainerCPU) annotations.PodRequest {
		req.Guaranteed, req.CPUs = true, cpus
		return req
	}
	type tc struct {
		name string
		// node builds the node under a kubelet with this policy and scope.
		node   func(policy, scope string) testNode
		req    annotations.PodRequest
		ann    map[string]string
		gpu    annotations.Policy // binpack when empty
		want   map[string][]string
		reason string
		// per overrides want and reason for "policy/scope" (or "policy") keys.
		per map[string]tc
	}
	cases := []tc{
		{
			// NUMA 0: G0 G1 free; NUMA 1: G2 G3 free. 1 card: device hints {0} and {1} are both
			// preferred, the kubelet takes the lower, {0}, and asks the plugin among G0 G1 only.
			name: "use-gpuuuid names a card on NUMA 1 while NUMA 0 has free cards: misfit",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(1, 0, 0, 1, 1))
			},
			req: pod(whole("main", 1)),
			ann: uuid("G2"),
			per: map[string]tc{
				annotations.TopologyPolicyBestEffort:     {reason: "the kubelet's best-effort policy takes its 1 card from NUMA 0, where 0 of 2 free cards match use-gpuuuid=G2"},
				annotations.TopologyPolicyRestricted:     {reason: "the kubelet's restricted policy takes its 1 card from NUMA 0, where 0 of 2 free cards match use-gpuuuid=G2"},
				annotations.TopologyPolicySingleNUMANode: {reason: "the kubelet's single-numa-node policy takes its 1 card from NUMA 0, where 0 of 2 free cards match use-gpuuuid=G2"},
			},
		},
		{
			// As above with G1 held: NUMA 0 has exactly 1 free card, the kubelet takes it
			// without asking the plugin.
			name: "use-gpuuuid on NUMA 1 while NUMA 0 has its last free card: the kubelet takes that one",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(1, 0, 0, 1, 1), wholeHeld("G1")...)
			},
			req: pod(whole("main", 1)),
			ann: uuid("G3"),
			per: map[string]tc{
				annotations.TopologyPolicyBestEffort:     {reason: "the kubelet's best-effort policy hands it card G0 on NUMA 0 outright, which does not match use-gpuuuid=G3"},
				annotations.TopologyPolicyRestricted:     {reason: "the kubelet's restricted policy hands it card G0 on NUMA 0 outright, which does not match use-gpuuuid=G3"},
				annotations.TopologyPolicySingleNUMANode: {reason: "the kubelet's single-numa-node policy hands it card G0 on NUMA 0 outright, which does not match use-gpuuuid=G3"},
			},
		},
		{
			// NUMA 0 full: the kubelet picks NUMA 1, where the named card is.
			name: "use-gpuuuid on NUMA 1 when NUMA 0 is full fits",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(1, 0, 0, 1, 1), wholeHeld("G0", "G1")...)
			},
			req:  pod(whole("main", 1)),
			ann:  uuid("G3"),
			want: map[string][]string{"main": {"G3 46068/100"}},
		},
		{
			// Shares of 4. G1 (NUMA 1) holds a 10000 MiB share: binpack alone would stack on
			// it; both NUMA nodes have free slots, the kubelet takes {0}: G0.
			name: "1 shared card, binpack: on the NUMA node the kubelet picks, not the fuller card",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(4, 0, 1), Holding{UUID: "G1", Slot: 0, MemMiB: 10000, Cores: 10})
			},
			req:  pod(shared("main", 1, 5000, 10)),
			want: map[string][]string{"main": {"G0::0 5000/10"}},
		},
		{
			// G0 (NUMA 0) holds a share: spread alone would take the empty G1.
			name: "1 shared card, spread: on the NUMA node the kubelet picks, not the emptier card",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(2, 0, 1), Holding{UUID: "G0", Slot: 0, MemMiB: 10000, Cores: 10})
			},
			req:  pod(shared("main", 1, 5000, 10)),
			gpu:  annotations.PolicySpread,
			want: map[string][]string{"main": {"G0::1 5000/10"}},
		},
		{
			// NUMA 0: G0 held, G1 G2 G3 free; NUMA 1: G4..G7 free. 2 cards: {0} and {1}
			// preferred, the kubelet takes {0} and asks among G1 G2 G3. Binpack prefers the
			// tighter NUMA 0 anyway: G1 G2.
			name: "2 cards, binpack: NUMA 0",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(1, 0, 0, 0, 0, 1, 1, 1, 1), wholeHeld("G0")...)
			},
			req:  pod(whole("main", 2)),
			want: map[string][]string{"main": {"G1 46068/100", "G2 46068/100"}},
		},
		{
			// Spread alone would take the roomier NUMA 1 (G4 G5); the kubelet asks among NUMA
			// 0's G1 G2 G3.
			name: "2 cards, spread: NUMA 0 where the kubelet puts them, not the roomier NUMA 1",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(1, 0, 0, 0, 0, 1, 1, 1, 1), wholeHeld("G0")...)
			},
			req:  pod(whole("main", 2)),
			gpu:  annotations.PolicySpread,
			want: map[string][]string{"main": {"G1 46068/100", "G2 46068/100"}},
		},
		{
			// Static CPU manager. NUMA 0: 16 CPUs, 2 reserved, 12 held: 2 free; G0 G1 held, G2
			// G3 free. NUMA 1: 16 CPUs, 6 held: 10 free; G4 held, G5 G6 G7 free. 2 cards + 6
			// CPUs: device hints {0}p {1}p, CPU hints {1}p only (2 < 6 on NUMA 0): merged {1}.
			// Binpack alone would take the tighter NUMA 0 (G2 G3).
			name: "Guaranteed 2 cards + 6 CPUs fit only on NUMA 1",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, true, []annotations.NUMACPUs{numaCPUs(0, 16, 2, 12), numaCPUs(1, 16, 0, 6)}),
					a40s(1, 0, 0, 0, 0, 1, 1, 1, 1), wholeHeld("G0", "G1", "G4")...)
			},
			req:  guaranteed(pod(whole("train", 2)), annotations.ContainerCPU{Name: "train", Milli: 6000}),
			want: map[string][]string{"train": {"G5 46068/100", "G6 46068/100"}},
		},
		{
			// As above with G5 G6 held too: NUMA 1 has 1 free card. No NUMA node has 2 cards and
			// 6 CPUs: restricted and single-numa-node refuse; best-effort admits the
			// non-preferred {0} (2 cards there, the CPUs wherever).
			name: "Guaranteed 2 cards + 6 CPUs that no NUMA node holds",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, true, []annotations.NUMACPUs{numaCPUs(0, 16, 2, 12), numaCPUs(1, 16, 0, 6)}),
					a40s(1, 0, 0, 0, 0, 1, 1, 1, 1), wholeHeld("G0", "G1", "G4", "G5", "G6")...)
			},
			req:  guaranteed(pod(whole("train", 2)), annotations.ContainerCPU{Name: "train", Milli: 6000}),
			want: map[string][]string{"train": {"G2 46068/100", "G3 46068/100"}},
			per: map[string]tc{
				"restricted/container":       {reason: "container \"train\": the kubelet's restricted policy needs 2 cards and 6 CPUs on the same 1 NUMA node (the fewest that can hold each); NUMA 0 has 2 free cards and 2 free CPUs, NUMA 1 has 1 free card and 10 free CPUs"},
				"restricted/pod":             {reason: "the kubelet's restricted policy needs the pod's 2 cards and 6 CPUs on the same 1 NUMA node (the fewest that can hold each); NUMA 0 has 2 free cards and 2 free CPUs, NUMA 1 has 1 free card and 10 free CPUs"},
				"single-numa-node/container": {reason: "container \"train\": the kubelet's single-numa-node policy needs 2 cards and 6 CPUs on one NUMA node; NUMA 0 has 2 free cards and 2 free CPUs, NUMA 1 has 1 free card and 10 free CPUs"},
				"single-numa-node/pod":       {reason: "the kubelet's single-numa-node policy needs the pod's 2 cards and 6 CPUs on one NUMA node; NUMA 0 has 2 free cards and 2 free CPUs, NUMA 1 has 1 free card and 10 free CPUs"},
			},
		},
		{
			// A Burstable pod's CPUs are not the CPU manager's: 2 cards go to NUMA 0.
			name: "Burstable 2 cards: the CPUs do not count",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, true, []annotations.NUMACPUs{numaCPUs(0, 16, 2, 12), numaCPUs(1, 16, 0, 6)}),
					a40s(1, 0, 0, 0, 0, 1, 1, 1, 1), wholeHeld("G0", "G1", "G4")...)
			},
			req:  pod(whole("train", 2)),
			want: map[string][]string{"train": {"G2 46068/100", "G3 46068/100"}},
		},
		{
			// NUMA 0: G0 G1; NUMA 1: G2..G5. Container scope: init (1 card) goes to {0}, the
			// plugin picks G0 of G0 G1; the app (2) gets G0 handed on, and hints must hold it:
			// {0} has G0 + G1 = 2, preferred; the kubelet takes G1 outright (1 aligned == 1).
			// Pod scope: the pod needs max(2, 1) = 2: {0} again.
			name: "init 1 + app 2: the app reuses the init card and NUMA 0's other one",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(1, 0, 0, 1, 1, 1, 1))
			},
			req:  pod(initC(whole("setup", 1)), whole("main", 2)),
			want: map[string][]string{"setup": {"G0 46068/100"}, "main": {"G0 46068/100", "G1 46068/100"}},
		},
		{
			// Container scope: init goes to {0} (G0); the app (3) must hold G0: {0} has 2 < 3,
			// {0,1} is not preferred: restricted and single-numa-node refuse, best-effort takes
			// G0, G1 outright... no: all 5 free are aligned to {0,1}, 2 more needed < 5, the
			// plugin picks G1 G2. Pod scope: the pod needs 3, {1} (4 free): init on NUMA 1.
			name: "init 1 + app 3: the scope decides",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(1, 0, 0, 1, 1, 1, 1))
			},
			req:  pod(initC(whole("setup", 1)), whole("main", 3)),
			want: map[string][]string{"setup": {"G2 46068/100"}, "main": {"G2 46068/100", "G3 46068/100", "G4 46068/100"}},
			per: map[string]tc{
				"best-effort/container":      {want: map[string][]string{"setup": {"G0 46068/100"}, "main": {"G0 46068/100", "G1 46068/100", "G2 46068/100"}}},
				"restricted/container":       {reason: "container \"main\": the kubelet's restricted policy needs 3 cards on 1 NUMA node (the fewest that can hold them); NUMA 0 has 2 free cards, NUMA 1 has 4 free cards"},
				"single-numa-node/container": {reason: "container \"main\": the kubelet's single-numa-node policy needs 3 cards on one NUMA node; NUMA 0 has 2 free cards, NUMA 1 has 4 free cards"},
			},
		},
		{
			// As above with numa-bind: best-effort's spread of the app's cards breaks it.
			name: "init 1 + app 3 with numa-bind",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(1, 0, 0, 1, 1, 1, 1))
			},
			req:  pod(initC(whole("setup", 1)), whole("main", 3)),
			ann:  map[string]string{annotations.NUMABind: "true"},
			want: map[string][]string{"setup": {"G2 46068/100"}, "main": {"G2 46068/100", "G3 46068/100", "G4 46068/100"}},
			per: map[string]tc{
				"best-effort/container":      {reason: "container \"main\": needs 3 cards on one NUMA node; the 1 card it reuses from its init containers is on NUMA 0, which has 2"},
				"restricted/container":       {reason: "container \"main\": the kubelet's restricted policy needs 3 cards on 1 NUMA node (the fewest that can hold them); NUMA 0 has 2 free cards, NUMA 1 has 4 free cards"},
				"single-numa-node/container": {reason: "container \"main\": the kubelet's single-numa-node policy needs 3 cards on one NUMA node; NUMA 0 has 2 free cards, NUMA 1 has 4 free cards"},
			},
		},
		{
			// NUMA 0: G0 free, G1 held; NUMA 1: G2 G3 free, 3 cards: no NUMA node has 3 cards at
			// all, so {0,1} is the narrowest hint and preferred. best-effort and restricted admit
			// it and take all 3 free cards outright (3 aligned == 3): across NUMA nodes, which
			// numa-bind refuses. single-numa-node refuses the pod itself.
			name: "numa-bind when the kubelet hands over cards of two NUMA nodes",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(1, 0, 0, 1, 1), wholeHeld("G1")...)
			},
			req: pod(whole("main", 3)),
			ann: map[string]string{annotations.NUMABind: "true"},
			per: map[string]tc{
				annotations.TopologyPolicyBestEffort:     {reason: "needs 3 cards on one NUMA node; the kubelet's best-effort policy puts at most 2 on one"},
				annotations.TopologyPolicyRestricted:     {reason: "needs 3 cards on one NUMA node; the kubelet's restricted policy puts at most 2 on one"},
				annotations.TopologyPolicySingleNUMANode: {reason: "container \"main\": the kubelet's single-numa-node policy needs 3 cards on one NUMA node; NUMA 0 has 1 free card, NUMA 1 has 2 free cards"},
				"single-numa-node/pod":                   {reason: "the kubelet's single-numa-node policy needs the pod's 3 cards on one NUMA node; NUMA 0 has 1 free card, NUMA 1 has 2 free cards"},
			},
		},
		{
			// Shares of 4, whole-card requests taking a slot each. Init (2 cards) on NUMA 0
			// (G0 G1, 8 slots); the app (1) reuses one of the two: the kubelet picks at random,
			// the plan names the first.
			name: "init 2 + app 1 on shared cards: the app takes one of the init's slots",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(4, 0, 0, 1, 1))
			},
			req:  pod(initC(shared("setup", 2, 1000, 10)), shared("main", 1, 3000, 10)),
			want: map[string][]string{"setup": {"G0::0 3000/10", "G1::0 3000/10"}, "main": {"G0::0 3000/10"}},
		},
		{
			// Shares of 2: NUMA 0 has G0 with one slot free (the other held by a 40000 MiB
			// share) — the kubelet takes that slot outright for 1 device, and 6068 MiB is too
			// little for 10000.
			name: "the kubelet's only slot on NUMA 0 lacks memory",
			node: func(p, s string) testNode {
				return onKubelet(kubeletOf(p, s, false, sixteen), a40s(2, 0, 1), Holding{UUID: "G0", Slot: 0, MemMiB: 40000, Cores: 10})
			},
			req: pod(shared("main", 1, 10000, 10)),
			per: map[string]tc{
				annotations.TopologyPolicyBestEffort:     {reason: "the kubelet's best-effort policy hands it card G0 on NUMA 0 outright, which has no room for 10000 MiB, gpucores 10 and a free slot"},
				annotations.TopologyPolicyRestricted:     {reason: "the kubelet's restricted policy hands it card G0 on NUMA 0 outright, which has no room for 10000 MiB, gpucores 10 and a free slot"},
				annotations.TopologyPolicySingleNUMANode: {reason: "the kubelet's single-numa-node policy hands it card G0 on NUMA 0 outright, which has no room for 10000 MiB, gpucores 10 and a free slot"},
			},
		},
	}
	for _, tt := range cases {
		for _, policy := range policies {
			for _, scope := range scopes {
				t.Run(fmt.Sprintf("%s/%s/%s", tt.name, policy, scope), func(t *testing.T) {
					want, reason := tt.want, tt.reason
					for _, key := range []string{policy, policy + "/" + scope} {
						if o, ok := tt.per[key]; ok {
							want, reason = o.want, o.reason
						}
					}
					gpu := tt.gpu
					if gpu == "" {
						gpu = annotations.PolicyBinpack
					}
					n := tt.node(policy, scope)
					p, err := decider(t, annotations.PolicyBinpack, gpu).Prepare(tt.req, mustSel(t, tt.ann))
					if err != nil {
						t.Fatal(err)
					}
					plan, r := p.Fit(n.state, nil)
					if reason != "" {
						if r == nil {
							t.Fatalf("fit %v, want reason %q", ids(n.state, plan), reason)
						}
						if diff := cmp.Diff(reason, r.String()); diff != "" {
							t.Errorf("reason (-want +got):\n%s", diff)
						}
						return
					}
					if r != nil {
						t.Fatalf("reason %q", r)
					}
					if diff := cmp.Diff(want, ids(n.state, plan)); diff != "" {
						t.Errorf("plan (-want +got):\n%s", diff)
					}
					modelAccepts(t, n, tt.req, plan)
				})
			}
		}
	}
}

func TestFitKubeletNoneIsUnchanged(t *testing.T) {
	// The node of "2 cards, spread" above: NUMA 0 has 3 free, NUMA 1 has 4. Without a kubelet
	// policy, spread takes the roomier NUMA 1, whether the inventory says none or nothing; and
	// numa-bind keeps its meaning (init 1 + app 3 goes to NUMA 1).
	for _, k := range []*annotations.KubeletTopology{nil, kubeletOf(annotations.TopologyPolicyNone, annotations.TopologyScopeContainer, true, sixteen)} {
		n := onKubelet(k, a40s(1, 0, 0, 0, 0, 1, 1, 1, 1), wholeHeld("G0")...)
		p, err := decider(t, annotations.PolicyBinpack, annotations.PolicySpread).Prepare(pod(whole("main", 2)), annotations.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		plan, r := p.Fit(n.state, nil)
		if r != nil {
			t.Fatal(r)
		}
		if diff := cmp.Diff(map[string][]string{"main": {"G4 46068/100", "G5 46068/100"}}, ids(n.state, plan)); diff != "" {
			t.Errorf("kubelet %v: plan (-want +got):\n%s", k, diff)
		}
		n = onKubelet(k, a40s(1, 0, 0, 1, 1, 1, 1))
		p, err = decider(t, annotations.PolicyBinpack, annotations.PolicyBinpack).Prepare(pod(initC(whole("setup", 1)), whole("main", 3)), annotations.Selector{NUMABind: true})
		if err != nil {
			t.Fatal(err)
		}
		if plan, r = p.Fit(n.state, nil); r != nil {
			t.Fatal(r)
		}
		if diff := cmp.Diff(map[string][]string{"setup": {"G2 46068/100"}, "main": {"G2 46068/100", "G3 46068/100", "G4 46068/100"}}, ids(n.state, plan)); diff != "" {
			t.Errorf("kubelet %v: numa-bind plan (-want +got):\n%s", k, diff)
		}
	}
}

func TestKubeletReasonsHaveNoPercent(t *testing.T) {
	// kube-scheduler passes extender reasons through a format string.
	rs := []Reason{
		{Kind: ReasonKubeletChoice, Policy: "restricted", NUMAs: topology.MaskOf(0, 1), Need: 1, Of: 2, Shared: true, MemPercent: 50, Cores: 30, Selector: "use-gputype=a40"},
		{Kind: ReasonKubeletChoice, Policy: "restricted", UUID: "G0", Problem: CardNoRoom, Shared: true, MemPercent: 50},
		{Kind: ReasonKubeletRefuses, Kubelet: &topology.Refusal{Reason: topology.ReasonTopologyAffinity, Policy: topology.PolicyRestricted, Devices: 2, CPUs: 6}},
		{Kind: ReasonNUMA, Need: 3, Have: 2, Reused: 2, NUMA: -1},
	}
	for _, r := range rs {
		if s := r.String(); slices.Contains([]rune(s), '%') || s == "" {
			t.Errorf("%q", s)
		}
	}
}

func TestSameKubeletAndKey(t *testing.T) {
	// Two nodes differ only in one NUMA node's held CPUs: not the same, and their keys differ
	// (the extender's cache shares verdicts between nodes of equal keys).
	mk := func(exclusive int) *NodeState {
		return onKubelet(kubeletOf(annotations.TopologyPolicyRestricted, annotations.TopologyScopeContainer, true,
			[]annotations.NUMACPUs{numaCPUs(0, 16, 0, exclusive), numaCPUs(1, 16, 0, 0)}), a40s(1, 0, 1)).state
	}
	a, b, a2 := mk(0), mk(4), mk(0)
	none := onKubelet(nil, a40s(1, 0, 1)).state
	if a.SameKubelet(b) || !a.SameKubelet(a2) || a.SameKubelet(none) || !none.SameKubelet(onKubelet(nil, a40s(1, 0, 1)).state) {
		t.Error("SameKubelet")
	}
	if string(a.AppendKubeletKey(nil)) == string(b.AppendKubeletKey(nil)) || string(a.AppendKubeletKey(nil)) != string(a2.AppendKubeletKey(nil)) {
		t.Error("AppendKubeletKey")
	}
	if len(none.AppendKubeletKey(nil)) != 0 {
		t.Error("a node without a kubelet policy adds to its key")
	}
}

func TestFitKubeletPlansAreAccepted(t *testing.T) {
	// Random nodes (2-4 NUMA nodes, whole or shared cards, some held) and pods (init, sidecar and
	// app containers, whole or shared, Guaranteed with CPUs or not) under every policy and scope:
	// every plan Fit returns is one the kubelet model, run on its own, hands over exactly.
	rng := rand.New(rand.NewPCG(7, 14))
	plans := 0
	for it := 0; it < 600; it++ {
		numaN := 2 + rng.IntN(3)
		var numa []annotations.NUMACPUs
		for u := 0; u < numaN; u++ {
			numa = append(numa, numaCPUs(u, 8, rng.IntN(2), rng.IntN(6)))
		}
		k := kubeletOf(policies[rng.IntN(3)], scopes[rng.IntN(2)], rng.IntN(2) == 0, numa)
		shares := 1 + 3*rng.IntN(2)
		var at []int
		for c := 2 + rng.IntN(5); c > 0; c-- {
			at = append(at, rng.IntN(numaN))
		}
		gpus := a40s(shares, at...)
		var held []Holding
		for i := range gpus {
			if rng.IntN(3) == 0 {
				held = append(held, Holding{UUID: gpus[i].UUID, Slot: map[bool]int{true: -1, false: 0}[shares == 1], MemMiB: 20000, Cores: 30})
			}
		}
		n := onKubelet(k, gpus, held...)
		var cs []annotations.ContainerRequest
		var cpus []annotations.ContainerCPU
		for c := 1 + rng.IntN(3); c > 0; c-- {
			r := whole(fmt.Sprintf("c%d", c), 1+rng.IntN(2))
			if rng.IntN(2) == 0 {
				r = shared(r.Name, r.Count, 4000, 10)
			}
			switch rng.IntN(4) {
			case 0:
				r = initC(r)
			case 1:
				r = sidecar(r)
			}
			cs = append(cs, r)
		}
		slices.SortStableFunc(cs, func(a, b annotations.ContainerRequest) int {
			switch {
			case a.Init == b.Init:
				return 0
			case a.Init:
				return -1
			}
			return 1
		})
		req := annotations.PodRequest{Containers: cs}
		if rng.IntN(2) == 0 {
			for _, c := range cs {
				cpus = append(cpus, annotations.ContainerCPU{Name: c.Name, Init: c.Init, Sidecar: c.Sidecar, Milli: int64(1000 * rng.IntN(4))})
			}
			req.Guaranteed, req.CPUs = true, cpus
		}
		p, err := decider(t, annotations.PolicyBinpack, []annotations.Policy{annotations.PolicyBinpack, annotations.PolicySpread}[rng.IntN(2)]).
			Prepare(req, annotations.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		plan, r := p.Fit(n.state, nil)
		if r != nil {
			if r.Kind == ReasonKubeletChoice && r.Detail != "" {
				t.Errorf("case %d: the model and the plan diverge: %v", it, r)
			}
			continue
		}
		plans++
		t.Run(fmt.Sprint(it), func(t *testing.T) { modelAccepts(t, n, req, plan) })
	}
	if plans < 100 {
		t.Errorf("only %d of 600 random pods placed", plans)
	}
}
