package core

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// linkedNode builds a node of n cards whose NUMA node is numa(i) and whose links are link(a, b)
// for every pair a < b.
func linkedNode(n int, numa func(int) int, link func(a, b int) annotations.Link, kubelet *annotations.KubeletTopology) *NodeState {
	inv := annotations.Inventory{V: 1, Kubelet: kubelet}
	for i := range n {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: fmt.Sprintf("GPU-%d", i), Index: i, Model: "NVIDIA A100-PCIE-40GB",
			MemoryMiB: 40960, NUMA: numa(i), Healthy: true, Shares: 1})
		for j := i + 1; j < n; j++ {
			l := link(i, j)
			l.A, l.B = i, j
			inv.Links = append(inv.Links, l)
		}
	}
	return NewNodeState("n1", inv)
}

// pairsNode: 8 PCIe cards on NUMA 0, NVLink bridges between 0-1, 2-3, 4-5, 6-7; cards 0-3 under
// one PCIe switch, 4-7 under another, the switches under one host bridge.
func pairsNode() *NodeState {
	return linkedNode(8, func(int) int { return 0 }, func(a, b int) annotations.Link {
		l := annotations.Link{PCIe: annotations.PCIeHostBridge}
		if a/4 == b/4 {
			l.PCIe = annotations.PCIeSwitch
		}
		if a/2 == b/2 {
			l.NVLinks = 4
		}
		return l
	}, nil)
}

// nvswitchNode: 8 cards all NVLink-connected through NVSwitch, 4 per NUMA node.
func nvswitchNode() *NodeState {
	return linkedNode(8, func(i int) int { return i / 4 }, func(a, b int) annotations.Link {
		l := annotations.Link{NVLinks: 12, NVSwitch: true, PCIe: annotations.PCIeSystem}
		if a/4 == b/4 {
			l.PCIe = annotations.PCIeNUMA
		}
		return l
	}, nil)
}

// linkedPair: 8 cards, 0-3 on NUMA 0 and 4-7 on NUMA 1, one NVLink pair across them (3-4).
func linkedPair(kubelet *annotations.KubeletTopology) *NodeState {
	return linkedNode(8, func(i int) int { return i / 4 }, func(a, b int) annotations.Link {
		l := annotations.Link{PCIe: annotations.PCIeSystem}
		if a/4 == b/4 {
			l.PCIe = annotations.PCIeNUMA
		}
		if a == 3 && b == 4 {
			l.NVLinks = 4
		}
		return l
	}, kubelet)
}

// quadWithSick: 8 cards on NUMA 0, cards 0-3 NVLink-connected (the rest PCIe), card 0 unhealthy.
func quadWithSick() *NodeState {
	n := linkedNode(8, func(int) int { return 0 }, func(a, b int) annotations.Link {
		l := annotations.Link{PCIe: annotations.PCIeHostBridge}
		if a < 4 && b < 4 {
			l.NVLinks = 4
		}
		return l
	}, nil)
	n.Cards[0].Healthy = false
	return n
}

// holdCards holds the cards at these positions whole.
func holdCards(n *NodeState, cards ...int) *NodeState {
	for _, i := range cards {
		n.Hold(Holding{UUID: n.Cards[i].UUID, Slot: -1, Cores: 100})
	}
	return n
}

func planCards(p *Plan) []int {
	var out []int
	for _, d := range p.Devices {
		out = append(out, d.Card)
	}
	slices.Sort(out)
	return out
}

func prepare(t *testing.T, sel annotations.Selector, cs ...annotations.ContainerRequest) *Pod {
	t.Helper()
	d, err := New(Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Prepare(pod(cs...), sel)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLinksChooseCards(t *testing.T) {
	cases := []struct {
		name  string
		node  *NodeState
		count int
		want  []int
	}{
		// Without links binpack takes the first free cards (0, 2): a broken pair.
		{"2 cards get a bridged pair", holdCards(pairsNode(), 1), 2, []int{2, 3}},
		// Without links: 1, 2, 3, 4 (the first free).
		{"4 cards get two bridged pairs under one switch", holdCards(pairsNode(), 0), 4, []int{4, 5, 6, 7}},
		{"4 cards: more bridged pairs first", holdCards(pairsNode(), 0, 4), 4, []int{2, 3, 6, 7}},
		// Without links: card 0, which breaks the free pair 0-1.
		{"1 card fills a broken pair", holdCards(pairsNode(), 2), 1, []int{3}},
		{"1 card on a node of whole pairs takes the first", pairsNode(), 1, []int{0}},
		{"1 card fills the broken pair under the fuller switch", holdCards(pairsNode(), 2, 5), 1, []int{3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := prepare(t, annotations.Selector{}, whole("m", tc.count))
			plan, r := p.Fit(tc.node, nil)
			if r != nil {
				t.Fatalf("refused: %s", r)
			}
			if got := planCards(plan); !slices.Equal(got, tc.want) {
				t.Errorf("cards %v, want %v", got, tc.want)
			}
		})
	}
}

// On an NVSwitch node every pair is linked alike: links change nothing, the card strategy decides.
func TestLinksNVSwitchAllEqual(t *testing.T) {
	for _, held := range [][]int{nil, {0}, {1, 2}, {0, 5, 6}, {3, 4, 7}} {
		for _, count := range []int{1, 2, 3, 4} {
			linked := holdCards(nvswitchNode(), held...)
			plain := holdCards(nodeOf(slices.Clone(invOf(linked))...), held...)
			p := prepare(t, annotations.Selector{}, whole("m", count))
			a, ra := p.Fit(linked, nil)
			b, rb := p.Fit(plain, nil)
			if (ra == nil) != (rb == nil) || (a != nil && !slices.Equal(planCards(a), planCards(b))) {
				t.Errorf("held %v, %d cards: linked %v (%v), without links %v (%v)", held, count, a, ra, b, rb)
			}
		}
	}
}

// invOf is the node's cards as an inventory's gpus (whole cards only).
func invOf(n *NodeState) []annotations.GPU {
	out := make([]annotations.GPU, len(n.Cards))
	for i := range n.Cards {
		out[i] = n.Cards[i].GPU
	}
	return out
}

func TestLinksRequireNVLink(t *testing.T) {
	nvlink := annotations.Selector{Link: annotations.LinkNVLink}
	plain := pairsNode()
	plain.links = nil
	cases := []struct {
		name         string
		node         *NodeState
		sel          annotations.Selector
		count        int
		want         []int
		reason       string
		unresolvable bool
	}{
		{name: "a whole pair is free", node: holdCards(pairsNode(), 1, 3, 5), sel: nvlink, count: 2, want: []int{6, 7}},
		{name: "only broken pairs are free", node: holdCards(pairsNode(), 1, 3, 5, 7), sel: nvlink, count: 2,
			reason: "needs 2 NVLink-connected cards; its 4 cards free form NVLink groups of 1, 1, 1 and 1"},
		{name: "two pairs not linked to each other", node: holdCards(pairsNode(), 2, 3, 6, 7), sel: nvlink, count: 4,
			reason: "needs 4 NVLink-connected cards; its 4 cards free form NVLink groups of 2 and 2", unresolvable: true},
		{name: "one card needs no link", node: holdCards(pairsNode(), 1, 3, 5, 7), sel: nvlink, count: 1, want: []int{0}},
		{name: "no published links", node: plain, sel: nvlink, count: 2,
			reason: "needs 2 NVLink-connected cards; node publishes no NVLink topology", unresolvable: true},
		// The pair 3-4 spans the NUMA nodes: taken when nothing binds the container to one.
		{name: "across NUMA nodes", node: holdCards(linkedPair(nil), 0, 1, 5, 6), sel: nvlink, count: 2, want: []int{3, 4}},
		{name: "numa-bind stays hard", node: holdCards(linkedPair(nil), 0, 1, 5, 6), count: 2,
			sel:    annotations.Selector{Link: annotations.LinkNVLink, NUMABind: true},
			reason: "needs 2 NVLink-connected cards; its 4 cards free form NVLink groups of 2, 1 and 1"},
		// Cards 0-3 NVLink-connected, card 0 unhealthy: it may recover, so the node may yet serve.
		{name: "an unhealthy card may complete a group", node: quadWithSick(), sel: nvlink, count: 4,
			reason: "needs 4 NVLink-connected cards; its 7 cards free form NVLink groups of 3, 1, 1, 1 and 1 more"},
		{name: "without the requirement one NUMA node first", node: holdCards(linkedPair(nil), 0, 1, 5, 6), count: 2, want: []int{2, 3}},
		{name: "the kubelet's single-numa-node policy stays hard", count: 2, sel: nvlink,
			node: holdCards(linkedPair(&annotations.KubeletTopology{TopologyManagerPolicy: annotations.TopologyPolicySingleNUMANode,
				TopologyManagerScope: annotations.TopologyScopeContainer, DeviceTopology: true,
				NUMA: []annotations.NUMACPUs{{ID: 0, CPUs: 32}, {ID: 1, CPUs: 32}}}), 0, 1, 5, 6),
			reason: "needs 2 NVLink-connected cards; its 2 cards free form NVLink groups of 1 and 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := prepare(t, tc.sel, whole("m", tc.count))
			plan, r := p.Fit(tc.node, nil)
			if tc.reason != "" {
				if r == nil {
					t.Fatalf("placed on %v, want refused: %s", planCards(plan), tc.reason)
				}
				if r.Kind != ReasonNVLink || r.String() != tc.reason {
					t.Errorf("reason %q (kind %d), want %q", r, r.Kind, tc.reason)
				}
				if r.Unresolvable() != tc.unresolvable {
					t.Errorf("unresolvable %v, want %v", r.Unresolvable(), tc.unresolvable)
				}
				return
			}
			if r != nil {
				t.Fatalf("refused: %s", r)
			}
			if got := planCards(plan); !slices.Equal(got, tc.want) {
				t.Errorf("cards %v, want %v", got, tc.want)
			}
		})
	}
}

// The node score counts how well the pod's cards are linked: of two nodes equally full, the one
// where a whole pair is free wins a 2-card pod.
func TestLinksNodeScore(t *testing.T) {
	broken := holdCards(pairsNode(), 1, 3, 5, 7) // free 0, 2, 4, 6: no pair
	whole2 := holdCards(pairsNode(), 4, 5, 6, 7) // free 0-1, 2-3
	p := prepare(t, annotations.Selector{}, whole("m", 2))
	score := func(n *NodeState) float64 {
		plan, r := p.Fit(n, nil)
		if r != nil {
			t.Fatalf("refused: %s", r)
		}
		var s Scratch
		plan2, _ := p.FitWith(n, nil, &s)
		if a, b := p.Score(n, plan, nil), p.ScoreWith(n, plan2, nil, &s); a != b {
			t.Fatalf("Score %v, ScoreWith %v", a, b)
		}
		return p.Score(n, plan, nil)
	}
	if a, b := score(whole2), score(broken); a <= b {
		t.Errorf("node with a free pair scores %v, node with broken pairs %v: want the first higher", a, b)
	}
	// A single card goes where it breaks no NVLink pair: a broken pair's free card (node b)
	// rather than one of a whole pair (node a), both nodes equally full.
	one := prepare(t, annotations.Selector{}, whole("m", 1))
	a, b := holdCards(pairsNode(), 0, 1, 2, 3), holdCards(pairsNode(), 0, 2, 4, 6)
	pa, _ := one.Fit(a, nil)
	pb, _ := one.Fit(b, nil)
	if sa, sb := one.Score(a, pa, nil), one.Score(b, pb, nil); sb <= sa {
		t.Errorf("single card: %v on a node where it breaks a pair (cards %v), %v where it breaks none (cards %v): want the second higher",
			sa, planCards(pa), sb, planCards(pb))
	}
	// Empty nodes: a 2-card pod takes a bridged pair and leaves the NVSwitch node whole; a 4-card
	// pod goes to the NVSwitch node, where its 4 cards are all NVLink.
	for _, tc := range []struct {
		count    int
		nvswitch bool
		what     string
	}{{2, false, "a bridged pair"}, {4, true, "the NVSwitch node"}} {
		p := prepare(t, annotations.Selector{}, whole("m", tc.count))
		sw, pairs := nvswitchNode(), pairsNode()
		ps, _ := p.Fit(sw, nil)
		pp, _ := p.Fit(pairs, nil)
		ss, sp := p.Score(sw, ps, nil), p.Score(pairs, pp, nil)
		if (ss > sp) != tc.nvswitch || ss == sp {
			t.Errorf("%d cards: NVSwitch node %v, NVLink-pairs node %v: want %s", tc.count, ss, sp, tc.what)
		}
	}
	// Nodes that publish no links score as before.
	plain := holdCards(nodeOf(invOf(pairsNode())...), 1, 3)
	pp, _ := one.Fit(plain, nil)
	if got, want := one.Score(plain, pp, nil), binpackNode(&NodeInput{Node: plain, Plan: pp}); got != want {
		t.Errorf("without links: score %v, the policy's %v", got, want)
	}
}

// On a node of many cards the search is greedy and still finds the NVLink pairs.
func TestLinksLargeNode(t *testing.T) {
	n := linkedNode(128, func(i int) int { return 0 }, func(a, b int) annotations.Link {
		l := annotations.Link{PCIe: annotations.PCIeHostBridge}
		if a/2 == b/2 {
			l.NVLinks = 4
		}
		return l
	}, nil)
	var held []int
	for i := 0; i < 124; i += 2 {
		held = append(held, i) // breaks pairs 0-1 … 122-123: C(66, 2) sets, more than enumerated
	}
	holdCards(n, held...)
	p := prepare(t, annotations.Selector{Link: annotations.LinkNVLink}, whole("m", 2))
	plan, r := p.Fit(n, nil)
	if r != nil {
		t.Fatalf("refused: %s", r)
	}
	if got := planCards(plan); !slices.Equal(got, []int{124, 125}) {
		t.Errorf("cards %v, want 124-125", got)
	}
}

// A MIG instance has its parent's links: a container of two instances on two parents is
// NVLink-connected when the parents are; two instances of one card count as linked.
func TestLinksMIGInstancesInheritTheirParents(t *testing.T) {
	node := func(nvlink bool) *NodeState {
		a := migParent("GPU-a", 0, "MIG-a-0", "3g.40gb", "MIG-a-1", "3g.40gb")
		b := migParent("GPU-b", 0, "MIG-b-0", "3g.40gb", "MIG-b-1", "3g.40gb")
		a.Index, b.Index = 0, 1
		l := annotations.Link{A: 0, B: 1, PCIe: annotations.PCIeSystem}
		if nvlink {
			l.NVLinks = 12
		}
		return NewNodeState("n1", annotations.Inventory{V: 1, GPUs: []annotations.GPU{a, b}, Links: []annotations.Link{l}})
	}
	p := prepare(t, annotations.Selector{Link: annotations.LinkNVLink}, migC("m", "3g.40gb", 2))
	// Each parent has one instance free: the container spans the parents.
	for _, nvlink := range []bool{true, false} {
		n := migHeld(node(nvlink), "MIG-a-0", "MIG-b-0")
		plan, r := p.Fit(n, nil)
		if nvlink && r != nil {
			t.Errorf("parents NVLink-connected: refused: %s", r)
		}
		if !nvlink && (r == nil || r.Kind != ReasonNVLink) {
			t.Errorf("parents not NVLink-connected: plan %v, reason %v; want ReasonNVLink", plan, r)
		}
	}
	// Both instances of one parent free: they are one card's, linked.
	if _, r := p.Fit(migHeld(node(false), "MIG-b-0"), nil); r != nil {
		t.Errorf("two instances of one card: refused: %s", r)
	}
}
