package core

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Builders for nodes with cards in MIG mode: migParent is an A100 in MIG mode with instances
// (uuid, profile) in that order; migNode the test bed's MIG node beside two whole H100s.

const (
	migA100 = "NVIDIA A100-SXM4-80GB"
	migH100 = "NVIDIA H100 80GB HBM3"
)

// migMemory is each profile's memory on an A100-80GB, in MiB.
var migMemory = map[string]int64{"1g.10gb": 9728, "2g.20gb": 19968, "3g.40gb": 40192, "1g.10gb+me": 9728}

// migParent builds a card in MIG mode; pairs are instance UUID, profile.
func migParent(uuid string, numa int, pairs ...string) annotations.GPU {
	g := annotations.GPU{UUID: uuid, Model: migA100, MemoryMiB: 81920, NUMA: numa, Shares: 1,
		MIG: &annotations.MIG{Mode: annotations.MIGEnabled}}
	for i := 0; i+1 < len(pairs); i += 2 {
		g.MIG.Instances = append(g.MIG.Instances, annotations.MIGInstance{UUID: pairs[i], Profile: pairs[i+1], Size: 1,
			MemoryMiB: migMemory[pairs[i+1]], Healthy: true})
	}
	return g
}

// sevenSmall is GPU-a7: 7× 1g.10gb, MIG-7-0 … MIG-7-6.
func sevenSmall(numa int) annotations.GPU {
	var pairs []string
	for _, id := range []string{"0", "1", "2", "3", "4", "5", "6"} {
		pairs = append(pairs, "MIG-7-"+id, "1g.10gb")
	}
	return migParent("GPU-a7", numa, pairs...)
}

// mixedParent is GPU-am: 3g.40gb + 2g.20gb + 1g.10gb.
func mixedParent(numa int) annotations.GPU {
	return migParent("GPU-am", numa, "MIG-m-3g", "3g.40gb", "MIG-m-2g", "2g.20gb", "MIG-m-1g", "1g.10gb")
}

// migNode is two whole H100s (NUMA 0, 1), GPU-a7 (NUMA 0) and GPU-am (NUMA 1).
func migNode() *NodeState {
	return nodeOf(card("GPU-h0", migH100, 81559, 0, 1), card("GPU-h1", migH100, 81559, 1, 1), sevenSmall(0), mixedParent(1))
}

func migC(name, profile string, count int) annotations.ContainerRequest {
	return annotations.ContainerRequest{Name: name, Count: count, MIGProfile: annotations.MIGProfileKey(profile)}
}

// migHeld holds instances (or cards) whole, by UUID.
func migHeld(n *NodeState, uuids ...string) *NodeState {
	for _, u := range uuids {
		i, ok := n.CardIndex(u)
		if !ok {
			panic("no device " + u)
		}
		n.Hold(Holding{UUID: u, Slot: -1, MemMiB: n.Cards[i].MemoryMiB, Cores: 100})
	}
	return n
}

func TestMIGNodeState(t *testing.T) {
	n := migNode()
	// 4 cards of the inventory, then 7 + 3 instances.
	if len(n.Cards) != 14 || n.MIG != 10 {
		t.Fatalf("%d cards, %d instances; want 14, 10", len(n.Cards), n.MIG)
	}
	i, ok := n.CardIndex("MIG-m-2g")
	if !ok {
		t.Fatal("MIG-m-2g is not a device of the node")
	}
	got := n.Cards[i]
	want := annotations.GPU{UUID: "MIG-m-2g", Index: 3, Model: migA100, MemoryMiB: 19968, NUMA: 1, Healthy: true, Shares: 1}
	if diff := cmp.Diff(want, got.GPU); diff != "" {
		t.Errorf("instance card (-want +got):\n%s", diff)
	}
	if got.Parent != "GPU-am" || got.Profile != "2g.20gb" || got.ProfileKey != "2g.20gb" || !got.Instance() {
		t.Errorf("instance: parent %q profile %q key %q", got.Parent, got.Profile, got.ProfileKey)
	}
	if p := n.Cards[3]; !p.InMIGMode() || p.Instance() {
		t.Errorf("GPU-am: in MIG mode %v, instance %v", p.InMIGMode(), p.Instance())
	}
	if want := "2x NVIDIA H100 80GB HBM3, 2x NVIDIA A100-SXM4-80GB in MIG mode"; n.Models != want {
		t.Errorf("models %q, want %q", n.Models, want)
	}
	// A card whose MIG mode takes effect at its next reset has no instance yet.
	pending := nodeOf(annotations.GPU{UUID: "GPU-p", Model: migA100, MemoryMiB: 81920, Shares: 1, MIG: &annotations.MIG{Mode: annotations.MIGEnabling}})
	if len(pending.Cards) != 1 || pending.MIG != 0 {
		t.Errorf("enabling: %d cards, %d instances", len(pending.Cards), pending.MIG)
	}
	// The key maps '+' to '.' (nvidia.com/mig-1g.10gb.me).
	me := nodeOf(migParent("GPU-e", 0, "MIG-e", "1g.10gb+me"))
	if c := me.Cards[1]; c.ProfileKey != "1g.10gb.me" || c.Profile != "1g.10gb+me" {
		t.Errorf("profile %q key %q", c.Profile, c.ProfileKey)
	}
}

func TestMIGFit(t *testing.T) {
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
		// --- by profile ---
		{
			name: "a 3g.40gb container gets the 3g.40gb instance",
			node: migNode(),
			req:  pod(migC("main", "3g.40gb", 1)),
			want: map[string][]string{"main": {"MIG-m-3g 40192/100"}},
		},
		{
			name: "a 2g.20gb container gets the 2g.20gb instance",
			node: migNode(),
			req:  pod(migC("main", "2g.20gb", 1)),
			want: map[string][]string{"main": {"MIG-m-2g 19968/100"}},
		},
		{
			name: "a profile key with + as . matches its instance",
			node: nodeOf(card("GPU-h0", migH100, 81559, 0, 1), migParent("GPU-e", 0, "MIG-e0", "1g.10gb", "MIG-e1", "1g.10gb+me")),
			req:  pod(migC("main", "1g.10gb+me", 1)),
			want: map[string][]string{"main": {"MIG-e1 9728/100"}},
		},
		{
			name: "three 1g.10gb instances, each held once",
			node: migNode(),
			req:  pod(migC("main", "1g.10gb", 3)),
			want: map[string][]string{"main": {"MIG-7-0 9728/100", "MIG-7-1 9728/100", "MIG-7-2 9728/100"}},
		},
		// --- by parent model ---
		{
			name: "use-gputype matches the parent's model",
			node: migNode(),
			req:  pod(migC("main", "3g.40gb", 1)),
			ann:  map[string]string{annotations.UseGPUType: "A100"},
			want: map[string][]string{"main": {"MIG-m-3g 40192/100"}},
		},
		{
			name:   "use-gputype of another model excludes every instance, naming the profile and model",
			node:   migNode(),
			req:    pod(migC("main", "1g.10gb", 1)),
			ann:    map[string]string{annotations.UseGPUType: "H100"},
			reason: "the node's 8 1g.10gb instances on NVIDIA A100-SXM4-80GB are excluded by use-gputype=h100",
		},
		{
			name:   "nouse-gputype of the parent's model excludes its instances",
			node:   migNode(),
			req:    pod(migC("main", "3g.40gb", 1)),
			ann:    map[string]string{annotations.NoUseGPUType: "a100"},
			reason: "the node's 1 3g.40gb instance on NVIDIA A100-SXM4-80GB is excluded by nouse-gputype=a100",
		},
		// --- by parent UUID and MIG UUID ---
		{
			name: "use-gpuuuid of a parent allows its instances only",
			node: migNode(),
			req:  pod(migC("main", "1g.10gb", 1)),
			ann:  map[string]string{annotations.UseGPUUUID: "GPU-am"},
			want: map[string][]string{"main": {"MIG-m-1g 9728/100"}},
		},
		{
			name: "use-gpuuuid of a MIG UUID picks exactly that instance",
			node: migNode(),
			req:  pod(migC("main", "1g.10gb", 1)),
			ann:  map[string]string{annotations.UseGPUUUID: "MIG-7-4"},
			want: map[string][]string{"main": {"MIG-7-4 9728/100"}},
		},
		{
			name: "use-gpuuuid of a MIG UUID of many entries picks it (set lookups)",
			node: migNode(),
			req:  pod(migC("main", "1g.10gb", 1)),
			ann:  map[string]string{annotations.UseGPUUUID: "GPU-x1,GPU-x2,GPU-x3,GPU-x4,GPU-x5,GPU-x6,GPU-x7,GPU-x8,MIG-7-5"},
			want: map[string][]string{"main": {"MIG-7-5 9728/100"}},
		},
		{
			name: "nouse-gpuuuid of a parent excludes all its instances",
			node: migNode(),
			req:  pod(migC("main", "1g.10gb", 1)),
			ann:  map[string]string{annotations.NoUseGPUUUID: "GPU-a7"},
			want: map[string][]string{"main": {"MIG-m-1g 9728/100"}},
		},
		{
			name: "nouse-gpuuuid of a parent in a long list excludes all its instances (set lookups)",
			node: migNode(),
			req:  pod(migC("main", "1g.10gb", 1)),
			ann:  map[string]string{annotations.NoUseGPUUUID: "GPU-x1,GPU-x2,GPU-x3,GPU-x4,GPU-x5,GPU-x6,GPU-x7,GPU-x8,GPU-a7"},
			want: map[string][]string{"main": {"MIG-m-1g 9728/100"}},
		},
		{
			name: "nouse-gpuuuid of a MIG UUID excludes that instance",
			node: migNode(),
			req:  pod(migC("main", "1g.10gb", 1)),
			ann:  map[string]string{annotations.NoUseGPUUUID: "MIG-7-0"},
			want: map[string][]string{"main": {"MIG-7-1 9728/100"}},
		},
		{
			name:   "nouse of a parent leaves too few instances",
			node:   migNode(),
			req:    pod(migC("main", "1g.10gb", 2)),
			ann:    map[string]string{annotations.NoUseGPUUUID: "GPU-a7"},
			reason: "needs 2 1g.10gb instances matching nouse-gpuuuid=GPU-a7, node has 1 (7x 1g.10gb free on GPU-a7, 1x 3g.40gb free on GPU-am, 1x 2g.20gb free on GPU-am (+1 more))",
		},
		// --- whole cards and MIG apart ---
		{
			name: "a whole-card container never gets a parent in MIG mode or an instance",
			node: migNode(),
			req:  pod(whole("main", 2)),
			want: map[string][]string{"main": {"GPU-h0 81559/100", "GPU-h1 81559/100"}},
		},
		{
			name:   "a third whole card is not found on the parents in MIG mode",
			node:   migNode(),
			req:    pod(whole("main", 3)),
			reason: "needs 3 cards, node has 2 (2x NVIDIA H100 80GB HBM3, 2x NVIDIA A100-SXM4-80GB in MIG mode); 2 more in MIG mode serve only MIG instances",
		},
		{
			name:   "a whole A100 is not found on the parents in MIG mode",
			node:   migNode(),
			req:    pod(whole("main", 1)),
			ann:    map[string]string{annotations.UseGPUType: "A100"},
			reason: "no card matching use-gputype=a100 can be used whole: 2 in MIG mode serve only MIG instances (node has 2x NVIDIA H100 80GB HBM3, 2x NVIDIA A100-SXM4-80GB in MIG mode)",
		},
		{
			name:   "a node of parents only has no GPU to use whole",
			node:   nodeOf(sevenSmall(0), mixedParent(0)),
			req:    pod(whole("main", 1)),
			reason: "node has no GPU to use whole: its 2 cards in MIG mode serve only MIG instances",
		},
		{
			name: "a pod with a MIG container and a whole-card container gets one of each",
			node: migNode(),
			req:  pod(whole("cards", 1), migC("mig", "2g.20gb", 1)),
			want: map[string][]string{"cards": {"GPU-h0 81559/100"}, "mig": {"MIG-m-2g 19968/100"}},
		},
		{
			name: "an init container's instance goes to the app container of its profile, not to the whole-card one",
			node: migNode(),
			req:  pod(initC(migC("init", "3g.40gb", 1)), whole("cards", 1), migC("mig", "3g.40gb", 1)),
			want: map[string][]string{"init": {"MIG-m-3g 40192/100"}, "cards": {"GPU-h0 81559/100"}, "mig": {"MIG-m-3g 40192/100"}},
		},
		// --- binpack and spread among parents ---
		{
			name: "binpack fills the partly used parent first",
			node: migHeld(migNode(), "MIG-m-2g"),
			req:  pod(migC("main", "1g.10gb", 1)),
			want: map[string][]string{"main": {"MIG-m-1g 9728/100"}},
		},
		{
			name: "binpack fills the partly used 7x parent first",
			node: migHeld(migNode(), "MIG-7-0"),
			req:  pod(migC("main", "1g.10gb", 1)),
			want: map[string][]string{"main": {"MIG-7-1 9728/100"}},
		},
		{
			name:   "spread takes an untouched parent first",
			node:   migHeld(migNode(), "MIG-7-0"),
			req:    pod(migC("main", "1g.10gb", 1)),
			policy: annotations.PolicySpread,
			want:   map[string][]string{"main": {"MIG-m-1g 9728/100"}},
		},
		{
			name:   "frag-aware without a mix places instances as binpack does",
			node:   migHeld(migNode(), "MIG-m-2g"),
			req:    pod(migC("main", "1g.10gb", 1)),
			policy: annotations.PolicyFragAware,
			want:   map[string][]string{"main": {"MIG-m-1g 9728/100"}},
		},
		// --- reasons ---
		{
			name:   "a profile the node lacks names it and what is free",
			node:   migHeld(migNode(), "MIG-7-0", "MIG-7-1", "MIG-7-2", "MIG-7-3", "MIG-7-4", "MIG-m-3g", "MIG-m-1g"),
			req:    pod(migC("main", "4g.40gb", 1)),
			reason: "no 4g.40gb instance (node has 2x 1g.10gb free on GPU-a7, 1x 2g.20gb free on GPU-am)",
		},
		{
			name:   "a held profile: no free instance of it",
			node:   migHeld(migNode(), "MIG-m-3g", "MIG-7-0", "MIG-7-1", "MIG-7-2", "MIG-7-3", "MIG-7-4", "MIG-m-1g"),
			req:    pod(migC("main", "3g.40gb", 1)),
			reason: "no free 3g.40gb instance (node has 2x 1g.10gb free on GPU-a7, 1x 2g.20gb free on GPU-am)",
		},
		{
			name:   "too few free instances of a profile",
			node:   migHeld(migNode(), "MIG-7-0", "MIG-7-1", "MIG-7-2", "MIG-7-3", "MIG-7-4", "MIG-7-5", "MIG-m-3g", "MIG-m-2g"),
			req:    pod(migC("main", "1g.10gb", 3)),
			reason: "needs 3 free 1g.10gb instances, 2 of 8 are free (node has 1x 1g.10gb free on GPU-a7, 1x 1g.10gb free on GPU-am)",
		},
		{
			name:   "no instance free at all",
			node:   migHeld(nodeOf(mixedParent(0)), "MIG-m-3g", "MIG-m-2g", "MIG-m-1g"),
			req:    pod(migC("main", "2g.20gb", 1)),
			reason: "no free 2g.20gb instance (node has no free MIG instance)",
		},
		{
			name:   "a node without MIG names the profile",
			node:   nodeOf(card("GPU-h0", migH100, 81559, 0, 1)),
			req:    pod(migC("main", "1g.10gb", 1)),
			reason: "no 1g.10gb instance (node has no free MIG instance)",
		},
		{
			name:   "numa-bind keeps a container's instances on one NUMA node",
			node:   migHeld(migNode(), "MIG-7-0", "MIG-7-1", "MIG-7-2", "MIG-7-3", "MIG-7-4", "MIG-7-5"),
			req:    pod(migC("main", "1g.10gb", 2)),
			ann:    map[string]string{annotations.NUMABind: "true"},
			reason: "needs 2 1g.10gb instances on one NUMA node, best has 1",
		},
		{
			name: "numa-bind: instances of one parent are on one NUMA node",
			node: migHeld(migNode(), "MIG-m-1g"),
			req:  pod(migC("main", "1g.10gb", 2)),
			ann:  map[string]string{annotations.NUMABind: "true"},
			want: map[string][]string{"main": {"MIG-7-0 9728/100", "MIG-7-1 9728/100"}},
		},
		// --- health ---
		{
			name: "an unhealthy instance is skipped",
			node: nodeOf(card("GPU-h0", migH100, 81559, 0, 1), unhealthyInstance(sevenSmall(0), "MIG-7-0")),
			req:  pod(migC("main", "1g.10gb", 1)),
			want: map[string][]string{"main": {"MIG-7-1 9728/100"}},
		},
		{
			name:   "the only instance of a profile unhealthy is named",
			node:   nodeOf(unhealthyInstance(mixedParent(0), "MIG-m-3g")),
			req:    pod(migC("main", "3g.40gb", 1)),
			reason: "MIG instance MIG-m-3g (3g.40gb) is unhealthy",
		},
		{
			name:   "a whole-card record on a parent (held before MIG mode) blocks its instances",
			node:   migHeld(nodeOf(mixedParent(0)), "GPU-am"),
			req:    pod(migC("main", "3g.40gb", 1)),
			reason: "no free 3g.40gb instance (node has no free MIG instance)",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			policy := c.policy
			if policy == "" {
				policy = annotations.PolicyBinpack
			}
			p, err := decider(t, annotations.PolicyBinpack, policy).Prepare(c.req, mustSel(t, c.ann))
			if err != nil {
				t.Fatal(err)
			}
			plan, r := p.Fit(c.node, nil)
			if c.reason != "" {
				if r == nil {
					t.Fatalf("fits with %v, want reason %q", ids(c.node, plan), c.reason)
				}
				if got := r.String(); got != c.reason {
					t.Fatalf("reason\n got %q\nwant %q", got, c.reason)
				}
				return
			}
			if r != nil {
				t.Fatalf("does not fit: %s", r)
			}
			if diff := cmp.Diff(c.want, ids(c.node, plan)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func unhealthyInstance(g annotations.GPU, uuid string) annotations.GPU {
	for i := range g.MIG.Instances {
		if g.MIG.Instances[i].UUID == uuid {
			g.MIG.Instances[i].Healthy = false
		}
	}
	return g
}

// The assignment of an instance names its MIG UUID as UUID and ID, its parent and profile, the
// instance's memory and all its compute; Apply holds it, Release frees it, and a holding read
// back from a record (HoldingFromID) blocks it as the plan did.
func TestMIGAssignmentHoldUnhold(t *testing.T) {
	n := migNode()
	p, err := decider(t, annotations.PolicyBinpack, annotations.PolicyBinpack).Prepare(pod(migC("main", "3g.40gb", 1)), annotations.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	plan, r := p.Fit(n, nil)
	if r != nil {
		t.Fatal(r)
	}
	a := plan.Assignment(n)
	want := []annotations.DeviceAssignment{{UUID: "MIG-m-3g", ID: "MIG-m-3g", MemoryMiB: 40192, Cores: 100, Parent: "GPU-am", Profile: "3g.40gb"}}
	if diff := cmp.Diff(want, a.Containers[0].Devices); diff != "" {
		t.Fatalf("assignment (-want +got):\n%s", diff)
	}
	before := n.Utilization()
	n.Apply(plan)
	if _, r := p.Fit(n, nil); r == nil {
		t.Fatal("the held 3g.40gb instance fits a second pod")
	}
	n.Release(plan)
	if _, r := p.Fit(n, nil); r != nil {
		t.Fatalf("released instance does not fit: %s", r)
	}
	// The record's device ID, as the extender's cache reads it back.
	d := a.Containers[0].Devices[0]
	h, err := HoldingFromID(d.ID, d.MemoryMiB, d.Cores)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Hold(h) {
		t.Fatal("Hold of a MIG UUID found no device")
	}
	if _, r := p.Fit(n, nil); r == nil || !strings.Contains(r.String(), "no free 3g.40gb instance") {
		t.Fatalf("after Hold: reason %v, want no free 3g.40gb instance", r)
	}
	// Nodes count MIG usage: 2 H100 (1 each) + GPU-a7 (1) + GPU-am (1), the 3g.40gb is
	// 40192 of 69888 MiB of GPU-am's instances: 0.575 / 4.
	if got, want := n.Utilization(), 40192.0/69888/4; math.Abs(got-want) > 1e-9 || before != 0 {
		t.Errorf("utilization %v (before %v), want %v", got, before, want)
	}
	if !n.Unhold(h) {
		t.Fatal("Unhold of a MIG UUID found no device")
	}
	if _, r := p.Fit(n, nil); r != nil {
		t.Fatalf("after Unhold: %s", r)
	}
	if got := n.Utilization(); got != 0 {
		t.Errorf("utilization after Unhold %v", got)
	}
}

// Binpack prefers the node whose MIG parents are already partly used; spread the other.
func TestMIGNodeScore(t *testing.T) {
	used := migHeld(migNode(), "MIG-7-0")
	empty := migNode()
	for _, c := range []struct {
		policy    annotations.Policy
		fullerWin bool
	}{{annotations.PolicyBinpack, true}, {annotations.PolicySpread, false}} {
		p, err := decider(t, c.policy, annotations.PolicyBinpack).Prepare(pod(migC("m", "1g.10gb", 1)), annotations.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		pu, r := p.Fit(used, nil)
		if r != nil {
			t.Fatal(r)
		}
		pe, r := p.Fit(empty, nil)
		if r != nil {
			t.Fatal(r)
		}
		fuller, emptier := p.Score(used, pu, nil), p.Score(empty, pe, nil)
		if (fuller > emptier) != c.fullerWin {
			t.Errorf("%s: partly used node %v, empty node %v", c.policy, fuller, emptier)
		}
	}
}

// The frag-aware policy with a mix of card requests places a MIG pod (binpack among instances),
// and the mix never counts MIG containers as card requests.
func TestMIGFragAware(t *testing.T) {
	mix := &TaskMix{}
	mix.AddPod(&annotations.PodRequest{Containers: []annotations.ContainerRequest{whole("w", 1), shared("s", 1, 1000, 10), migC("m", "1g.10gb", 1)}}, &annotations.Selector{})
	if len(mix.Classes) != 2 || mix.Total != 2 {
		t.Fatalf("mix counts %d classes, total %v; want the 2 card requests", len(mix.Classes), mix.Total)
	}
	n := migHeld(migNode(), "MIG-m-2g")
	p, err := decider(t, annotations.PolicyFragAware, annotations.PolicyFragAware).Prepare(pod(migC("m", "1g.10gb", 1)), annotations.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	plan, r := p.Fit(n, mix)
	if r != nil {
		t.Fatal(r)
	}
	if diff := cmp.Diff(map[string][]string{"m": {"MIG-m-1g 9728/100"}}, ids(n, plan)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if s := p.Score(n, plan, mix); s < 0 || s > MaxScore || math.IsNaN(s) {
		t.Errorf("score %v", s)
	}
}

// On a node whose kubelet runs a TopologyManager policy, a MIG container's hints come from the
// free instances of its profile (one resource per profile, on their parents' NUMA nodes): the
// kubelet picks that NUMA node first, and the plan follows it; whole cards are placed as before.
func TestMIGOnTopologyManagerNode(t *testing.T) {
	gpus := func() []annotations.GPU {
		return []annotations.GPU{card("GPU-h0", migH100, 81559, 0, 1), card("GPU-h1", migH100, 81559, 1, 1), sevenSmall(0), mixedParent(1)}
	}
	single := kubeletOf(annotations.TopologyPolicySingleNUMANode, "", false, sixteen)
	d := decider(t, annotations.PolicyBinpack, annotations.PolicyBinpack)
	sevenHeld := wholeHeld("MIG-7-0", "MIG-7-1", "MIG-7-2", "MIG-7-3", "MIG-7-4", "MIG-7-5", "MIG-7-6")
	cases := []struct {
		name   string
		node   testNode
		req    annotations.PodRequest
		ann    map[string]string
		want   map[string][]string
		reason string
		kind   ReasonKind
	}{
		{
			// Binpack alone would take MIG-m-1g (its parent is partly used); the kubelet's
			// narrowest hints are NUMA 0 (7 free) and NUMA 1 (1 free), and it takes NUMA 0.
			name: "the instance is on the NUMA node the kubelet picks",
			node: onKubelet(single, gpus(), wholeHeld("MIG-m-2g")...),
			req:  pod(migC("m", "1g.10gb", 1)),
			want: map[string][]string{"m": {"MIG-7-0 9728/100"}},
		},
		{
			name: "the kubelet takes the one free instance of NUMA 1 outright",
			node: onKubelet(single, gpus(), sevenHeld...),
			req:  pod(migC("m", "1g.10gb", 1)),
			want: map[string][]string{"m": {"MIG-m-1g 9728/100"}},
		},
		{
			name:   "an instance the kubelet hands over outright must pass the selector",
			node:   onKubelet(single, gpus(), sevenHeld...),
			req:    pod(migC("m", "1g.10gb", 1)),
			ann:    map[string]string{annotations.NoUseGPUUUID: "MIG-m-1g"},
			kind:   ReasonKubeletChoice,
			reason: "the kubelet's single-numa-node policy hands it MIG instance MIG-m-1g on NUMA 1 outright, which does not match nouse-gpuuuid=MIG-m-1g",
		},
		{
			name: "no single NUMA node has two free instances: the kubelet refuses",
			node: onKubelet(single, gpus(), wholeHeld("MIG-7-0", "MIG-7-1", "MIG-7-2", "MIG-7-3", "MIG-7-4", "MIG-7-5")...),
			req:  pod(migC("m", "1g.10gb", 2)),
			kind: ReasonKubeletRefuses,
		},
		{
			name: "whole cards beside instances: the cards' hints only",
			node: onKubelet(single, gpus()),
			req:  pod(whole("w", 1), migC("m", "3g.40gb", 1)),
			want: map[string][]string{"w": {"GPU-h0 81559/100"}, "m": {"MIG-m-3g 40192/100"}},
		},
		{
			name: "cards an init container hands on are not the MIG container's",
			node: onKubelet(single, []annotations.GPU{card("GPU-h0", migH100, 81559, 0, 1), card("GPU-h1", migH100, 81559, 0, 1), sevenSmall(0), mixedParent(1)}),
			req:  pod(initC(whole("init", 2)), migC("m", "1g.10gb", 1), whole("w", 2)),
			want: map[string][]string{"init": {"GPU-h0 81559/100", "GPU-h1 81559/100"}, "m": {"MIG-7-0 9728/100"},
				"w": {"GPU-h0 81559/100", "GPU-h1 81559/100"}},
		},
		{
			name:   "pod scope with two resources is not modelled",
			node:   onKubelet(kubeletOf(annotations.TopologyPolicySingleNUMANode, "pod", false, sixteen), gpus()),
			req:    pod(whole("w", 1), migC("m", "3g.40gb", 1)),
			reason: `container "m": takes MIG instances beside other devices in one pod, which the GPU scheduler does not place on nodes whose kubelet runs the TopologyManager policy single-numa-node at pod scope (its hints across resources are not modelled yet)`,
			kind:   ReasonKubeletMIG,
		},
		{
			name: "pod scope with one MIG resource",
			node: onKubelet(kubeletOf(annotations.TopologyPolicySingleNUMANode, "pod", false, sixteen), gpus(), wholeHeld("MIG-m-2g")...),
			req:  pod(migC("m", "1g.10gb", 1)),
			want: map[string][]string{"m": {"MIG-7-0 9728/100"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := d.Prepare(c.req, mustSel(t, c.ann))
			if err != nil {
				t.Fatal(err)
			}
			plan, r := p.Fit(c.node.state, nil)
			if c.kind != 0 {
				if r == nil || r.Kind != c.kind {
					t.Fatalf("reason %v, want kind %d", r, c.kind)
				}
				if c.reason != "" && r.String() != c.reason {
					t.Errorf("reason\n got %q\nwant %q", r.String(), c.reason)
				}
				return
			}
			if r != nil {
				t.Fatalf("does not fit: %s", r)
			}
			if diff := cmp.Diff(c.want, ids(c.node.state, plan)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}
