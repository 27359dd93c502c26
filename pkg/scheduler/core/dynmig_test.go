package core

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/migplace"
)

// dynA100 is an A100-80GB of a dynamic pool allowing 1g.10gb, 1g.10gb+me, 2g.20gb, 3g.40gb,
// 4g.40gb and 7g.80gb at their legal starts, with instances (profile, start) already there.
func dynA100(uuid string, numa int, held ...any) annotations.GPU {
	g := annotations.GPU{UUID: uuid, Model: migA100, MemoryMiB: 81920, NUMA: numa, Shares: 1,
		MIG: &annotations.MIG{Mode: annotations.MIGEnabled, DynamicV: annotations.MIGDynamicVersion, Dynamic: []annotations.MIGDynamicProfile{
			{Profile: "1g.10gb", Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
			{Profile: "1g.10gb+me", Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
			{Profile: "2g.20gb", Size: 2, Starts: []int{0, 2, 4}},
			{Profile: "3g.40gb", Size: 4, Starts: []int{0, 4}},
			{Profile: "4g.40gb", Size: 4, Starts: []int{0}},
			{Profile: "7g.80gb", Size: 8, Starts: []int{0}},
		}}}
	size := map[string]int{"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4, "4g.40gb": 4, "7g.80gb": 8}
	for i := 0; i+1 < len(held); i += 2 {
		p, s := held[i].(string), held[i+1].(int)
		g.MIG.Instances = append(g.MIG.Instances, annotations.MIGInstance{UUID: "MIG-" + uuid + "-" + p, Profile: p, GI: i, Start: s, Size: size[p], Healthy: true})
	}
	return g
}

func pid(parent, profile string, start int) string {
	return annotations.MIGPlacementID(parent, profile, start)
}

func TestDynamicMIGFit(t *testing.T) {
	type tc struct {
		name   string
		node   *NodeState
		req    annotations.PodRequest
		ann    map[string]string
		want   map[string][]string
		reason string
	}
	cases := []tc{
		{
			// On an empty card a 1g at 6 keeps the 4g (0–3) and all three 2g (0, 2, 4) placeable;
			// at 0 it would take the 4g, the 7g, a 2g and a 3g.
			name: "a 1g.10gb goes to start 6 on an empty card",
			node: nodeOf(dynA100("GPU-d", 0)),
			req:  pod(migC("main", "1g.10gb", 1)),
			want: map[string][]string{"main": {pid("GPU-d", "1g.10gb", 6) + " 10240/100"}},
		},
		{
			// 3g at 4 keeps the 4g at 0; 3g at 0 would leave nothing for a 4g.
			name: "a 3g.40gb goes to start 4 on an empty card",
			node: nodeOf(dynA100("GPU-d", 0)),
			req:  pod(migC("main", "3g.40gb", 1)),
			want: map[string][]string{"main": {pid("GPU-d", "3g.40gb", 4) + " 40960/100"}},
		},
		{
			name: "an instance at 4–7 leaves the 3g.40gb its start 0",
			node: nodeOf(dynA100("GPU-d", 0, "3g.40gb", 4)),
			req:  pod(migC("main", "3g.40gb", 1)),
			want: map[string][]string{"main": {pid("GPU-d", "3g.40gb", 0) + " 40960/100"}},
		},
		{
			// Card 0 has a 1g at 6; card 1 is empty. On card 0 a 1g at 4 or 5 takes only the 2g at
			// 4 (the 3g and 4–7 are gone already); on card 1 any start takes more (6: the 3g at 4).
			// 4 and 5 tie; the lower start wins.
			name: "a second 1g.10gb stays on the card that holds the first",
			node: nodeOf(dynA100("GPU-d0", 0, "1g.10gb", 6), dynA100("GPU-d1", 0)),
			req:  pod(migC("main", "1g.10gb", 1)),
			want: map[string][]string{"main": {pid("GPU-d0", "1g.10gb", 4) + " 10240/100"}},
		},
		{
			name: "two containers of one pod never overlap: 4g.40gb at 0, then 3g.40gb at 4",
			node: nodeOf(dynA100("GPU-d", 0)),
			req:  pod(migC("big", "4g.40gb", 1), migC("mid", "3g.40gb", 1)),
			want: map[string][]string{"big": {pid("GPU-d", "4g.40gb", 0) + " 40960/100"}, "mid": {pid("GPU-d", "3g.40gb", 4) + " 40960/100"}},
		},
		{
			name:   "a 7g.80gb and a 1g.10gb in one pod do not fit one card",
			node:   nodeOf(dynA100("GPU-d", 0)),
			req:    pod(migC("big", "7g.80gb", 1), migC("small", "1g.10gb", 1)),
			reason: `container "small": no free 1g.10gb instance`,
		},
		{
			// The card allows one 1g.10gb+me (migplace's per-profile count), whatever the slices:
			// the container's two picks are checked together before the plan is final.
			name:   "two 1g.10gb+me on one card are refused",
			node:   nodeOf(dynA100("GPU-d", 0)),
			req:    pod(migC("main", "1g.10gb+me", 2)),
			reason: "dynamic MIG: placement GPU-d/1g.10gb+me@",
		},
		{
			name:   "a 7g.80gb does not fit a card holding a 1g.10gb; the reason names the free placements",
			node:   nodeOf(dynA100("GPU-d", 0, "1g.10gb", 6)),
			req:    pod(migC("main", "7g.80gb", 1)),
			reason: "no free 7g.80gb instance (node has ",
		},
		{
			name: "use-gpuuuid of a parent takes its placements only",
			node: nodeOf(dynA100("GPU-d0", 0, "1g.10gb", 6), dynA100("GPU-d1", 0)),
			req:  pod(migC("main", "7g.80gb", 1)),
			ann:  map[string]string{annotations.UseGPUUUID: "GPU-d1"},
			want: map[string][]string{"main": {pid("GPU-d1", "7g.80gb", 0) + " 81920/100"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := decider(t, annotations.PolicyBinpack, annotations.PolicyBinpack).Prepare(c.req, mustSel(t, c.ann))
			if err != nil {
				t.Fatal(err)
			}
			plan, r := p.Fit(c.node, nil)
			if c.reason != "" {
				if r == nil {
					t.Fatalf("fits with %v, want reason %q", ids(c.node, plan), c.reason)
				}
				if got := r.String(); !strings.Contains(got, c.reason) {
					t.Fatalf("reason\n got %q\nwant it to contain %q", got, c.reason)
				}
				if r.Unresolvable() {
					t.Errorf("reason %q is unresolvable; instances come and go", r)
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

// A placement in flight (Apply) or held by a record (Hold of its ID) blocks every placement it
// overlaps until released; the assignment names parent, profile and placement.
func TestDynamicMIGInFlightAndRecords(t *testing.T) {
	n := nodeOf(dynA100("GPU-d", 0))
	d := decider(t, annotations.PolicyBinpack, annotations.PolicyBinpack)
	big, err := d.Prepare(pod(migC("main", "4g.40gb", 1)), annotations.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	plan, r := big.Fit(n, nil)
	if r != nil {
		t.Fatal(r)
	}
	a := plan.Assignment(n)
	id := pid("GPU-d", "4g.40gb", 0)
	want := []annotations.DeviceAssignment{{UUID: id, ID: id, MemoryMiB: 40960, Cores: 100, Parent: "GPU-d", Profile: "4g.40gb",
		Placement: &annotations.MIGPlacement{Start: 0, Size: 4}}}
	if diff := cmp.Diff(want, a.Containers[0].Devices); diff != "" {
		t.Fatalf("assignment (-want +got):\n%s", diff)
	}
	if _, err := annotations.EncodeAssignment(a); err != nil {
		t.Fatalf("the assignment does not encode: %v", err)
	}
	u0 := n.Utilization()
	n.Apply(plan)
	if got := n.Utilization(); got != u0+0.5 {
		t.Errorf("utilization after a 4g.40gb: %v, want %v (half the slices)", got, u0+0.5)
	}
	// 0–3 in flight: no second 4g; a 3g goes to 4; every 1g lands in 4–6.
	if _, r := big.Fit(n, nil); r == nil {
		t.Fatal("a second 4g.40gb fits beside the one in flight")
	}
	for _, c := range []struct {
		profile string
		count   int
		want    []string
	}{
		{"3g.40gb", 1, []string{pid("GPU-d", "3g.40gb", 4)}},
		{"1g.10gb", 3, []string{pid("GPU-d", "1g.10gb", 4), pid("GPU-d", "1g.10gb", 5), pid("GPU-d", "1g.10gb", 6)}},
	} {
		p, err := d.Prepare(pod(migC("main", c.profile, c.count)), annotations.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		pl, r := p.Fit(n, nil)
		if r != nil {
			t.Fatalf("%s: %s", c.profile, r)
		}
		got := pl.Assignment(n).Containers[0].IDs()
		if diff := cmp.Diff(c.want, got, cmpSorted()); diff != "" {
			t.Errorf("%s beside a 4g.40gb in flight (-want +got):\n%s", c.profile, diff)
		}
	}
	n.Release(plan)
	// The record's ID, as the cache reads it back, blocks the same placements.
	h, err := HoldingFromID(id, 40960, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Hold(h) {
		t.Fatal("Hold of a placement ID found no device")
	}
	if _, r := big.Fit(n, nil); r == nil {
		t.Fatal("a 4g.40gb fits beside a record holding 0–3")
	}
	n.Unhold(h)
	if _, r := big.Fit(n, nil); r != nil {
		t.Fatalf("after Unhold: %s", r)
	}
}

// The mix of profiles requested steers the choice: with only 2g.20gb asked for, a 1g.10gb keeps
// the 2g placements (it goes to 6, beside them); with only 1g.20gb… the placement that loses least.
func TestDynamicMIGMixDemand(t *testing.T) {
	var mix TaskMix
	mix.AddPod(&annotations.PodRequest{Containers: []annotations.ContainerRequest{migC("a", "7g.80gb", 1)}}, &annotations.Selector{})
	if diff := cmp.Diff([]string{"7g.80gb"}, profilesOf(mix.MIGDemand())); diff != "" {
		t.Fatalf("MIGDemand (-want +got):\n%s", diff)
	}
	// Card 0 is empty, card 1 holds a 1g at 6. With 7g the only demand, a 1g must not break the
	// empty card: it goes to card 1.
	n := nodeOf(dynA100("GPU-d0", 0), dynA100("GPU-d1", 0, "1g.10gb", 6))
	p, err := decider(t, annotations.PolicyBinpack, annotations.PolicyBinpack).Prepare(pod(migC("main", "1g.10gb", 1)), annotations.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	plan, r := p.Fit(n, &mix)
	if r != nil {
		t.Fatal(r)
	}
	if got := plan.Assignment(n).Containers[0].Devices[0].Parent; got != "GPU-d1" {
		t.Errorf("1g.10gb went to %s; the only card that holds a 7g.80gb is GPU-d0", got)
	}
}

func cmpSorted() cmp.Option {
	return cmp.Transformer("sorted", func(in []string) []string {
		out := append([]string(nil), in...)
		slices.Sort(out)
		return out
	})
}

func profilesOf(ds []migplace.Demand) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Profile)
	}
	return out
}

// A pool moved back to static MIG: a running pod holds its instance by the placement ID it was
// given in the dynamic pool, and that ID holds the instance the card now serves by MIG UUID.
func TestPlacementIDHoldsTheInstanceOnAStaticCard(t *testing.T) {
	g := dynA100("GPU-d", 0, "3g.40gb", 4)
	g.MIG.DynamicV, g.MIG.Dynamic = 0, nil
	n := nodeOf(g)
	p, err := decider(t, annotations.PolicyBinpack, annotations.PolicyBinpack).Prepare(pod(migC("main", "3g.40gb", 1)), annotations.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	if _, r := p.Fit(n, nil); r != nil {
		t.Fatalf("the static instance does not fit: %s", r)
	}
	h, err := HoldingFromID(pid("GPU-d", "3g.40gb", 4), 40960, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Hold(h) {
		t.Fatal("the placement ID names no device of the static card")
	}
	if plan, r := p.Fit(n, nil); r == nil {
		t.Fatalf("the instance a running pod holds was offered again: %v", ids(n, plan))
	}
}

// A pod's placement whose instance the inventory lists counts once in the node's utilization.
func TestDynamicMIGUtilizationCountsAnInstanceOnce(t *testing.T) {
	n := nodeOf(dynA100("GPU-d", 0, "4g.40gb", 0))
	if got := n.Utilization(); got != 0.5 {
		t.Fatalf("utilization with a 4g.40gb instance: %v, want 0.5", got)
	}
	h, err := HoldingFromID(pid("GPU-d", "4g.40gb", 0), 40960, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Hold(h) {
		t.Fatal("Hold found no placement")
	}
	if got := n.Utilization(); got != 0.5 {
		t.Errorf("utilization with the pod that holds the instance: %v, want 0.5 (4 of 8 slices)", got)
	}
}
