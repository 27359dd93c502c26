package core

import (
	"testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// cpuOnlyPod is a pod without GPU containers that asks host of its node, as the extender builds a
// CPU-only pod routed to Cardinal.
func cpuOnlyPod(t *testing.T, policy annotations.Policy, host HostRequest) *Pod {
	t.Helper()
	d, err := New(Options{NodePolicy: policy, GPUPolicy: policy})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.PrepareHost(annotations.PodRequest{}, annotations.Selector{}, host)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A CPU-only pod fits on host capacity alone: on a node whose cards are all held, on a node without
// cards, not where the CPU is short; its plan takes no card and Apply accounts its CPU and memory.
func TestCPUOnlyPodFitsOnHostAlone(t *testing.T) {
	p := cpuOnlyPod(t, annotations.PolicyFragAware, HostRequest{CPUMilli: 4000, MemMiB: 1024})
	full, none, short := faNode("full", "A", 100, 100), faNode("none", "A"), faNode("short", "A", 0, 0)
	full.SetHost(8000, 4096)
	none.SetHost(8000, 4096)
	short.SetHost(3000, 4096)
	mix := hostMix(faWhole(1), HostRequest{CPUMilli: 2000})
	for _, n := range []*NodeState{full, none} {
		plan, r := p.Fit(n, mix)
		if r != nil {
			t.Fatalf("%s: %s", n.Name, r)
		}
		if len(plan.Devices) != 0 || plan.Host != p.Host {
			t.Errorf("%s: plan takes devices %v, host %+v; want none and %+v", n.Name, plan.Devices, plan.Host, p.Host)
		}
		n.Apply(plan)
		if n.Host.UsedCPUMilli != 4000 || n.Host.UsedMemMiB != 1024 {
			t.Errorf("%s: host after Apply %+v, want 4000 m and 1024 MiB used", n.Name, n.Host)
		}
	}
	if _, r := p.Fit(short, mix); r == nil || r.Kind != ReasonHost {
		t.Errorf("short of CPU: reason %v, want the host reason", r)
	}
}

// Where CPU is plentiful a CPU-only pod changes no node's expected fragmentation (ΔF = 0 on all), and
// the tie decides: the node with the fewest free cards (none at all first), not the emptiest node
// that frag-aware's tie-break for GPU placements prefers, which is where kube-scheduler's
// least-allocated scoring sends CPU-only pods and strands the cards whole-card pods need.
func TestFragAwareCPUOnlyPodGoesWhereFewestCardsAreFree(t *testing.T) {
	mix := hostMix(faWhole(1), HostRequest{CPUMilli: 4000})
	p := cpuOnlyPod(t, annotations.PolicyFragAware, HostRequest{CPUMilli: 2000})
	nodes := func() (a, b, c *NodeState) {
		a, b, c = faNode("a", "A", 0, 0, 0, 0), faNode("b", "A", 100, 100, 0, 0), faNode("c", "A")
		for _, n := range []*NodeState{a, b, c} {
			n.SetHost(200000, 0)
		}
		return a, b, c
	}
	a, b, c := nodes()
	if best := bestNode(t, p, mix, a, b); best.Name != "b" {
		t.Errorf("between 4 free cards (a) and 2 (b): chose %s, want b", best.Name)
	}
	if best := bestNode(t, p, mix, a, b, c); best.Name != "c" {
		t.Errorf("with a node without cards (c): chose %s, want c", best.Name)
	}
	// binpack and spread score a CPU-only pod by the cards' use as it stands: binpack takes the
	// fullest (a node without cards counts as full), spread the emptiest.
	a, b, c = nodes()
	if best := bestNode(t, cpuOnlyPod(t, annotations.PolicyBinpack, p.Host), nil, a, b, c); best.Name != "c" {
		t.Errorf("binpack chose %s, want c", best.Name)
	}
	if best := bestNode(t, cpuOnlyPod(t, annotations.PolicySpread, p.Host), nil, a, b, c); best.Name != "a" {
		t.Errorf("spread chose %s, want a", best.Name)
	}
}

// A mix of pods sharing half a card, each asking 8 CPUs. p (4 free cards, 40 CPUs: 5 pods, 2.5
// cards' worth) and q (4 free cards, 100 CPUs: 12.5 pods, more than the 4 cards) both still fit one
// more such pod after an 8-CPU CPU-only pod, so ΔF's host rule sees nothing on either, and the
// tie-break alone would pick p, the fuller node. On p the pod leaves CPU for 4 pods, 2 cards: half a
// card more out of reach (shortfall); on q none. frag-aware must take q.
func TestFragAwareCPUOnlyPodCountsSharedCardsCPU(t *testing.T) {
	mix := hostMix(faShare(50), HostRequest{CPUMilli: 8000})
	pn, qn := faNode("p", "A", 0, 0, 0, 0), faNode("q", "A", 0, 0, 0, 0)
	pn.SetHost(40000, 0)
	qn.SetHost(100000, 0)
	pod := cpuOnlyPod(t, annotations.PolicyFragAware, HostRequest{CPUMilli: 8000})
	if best := bestNode(t, pod, mix, pn, qn); best.Name != "q" {
		t.Errorf("chose %s, want q (p's shared cards need its CPU)", best.Name)
	}
}

// Where CPU runs short, a CPU-only pod packs: a mix of one-card pods asking 10 CPUs; u has 2 free
// cards of 8 and 22 CPUs free (2.2 such pods: its cards are fed), e is untouched (8 free cards, 96
// CPUs: 9.6 pods). A 4-CPU pod on u leaves CPU for 1.8 pods, 0.2 of a card out of reach (ΔF 0.2);
// on e nothing (9.2 pods still feed 8 cards). ΔF alone takes e, and so the CPU-only pods of a
// CPU-scarce cluster spread over the untouched nodes whose CPU the GPU pods to come need; what the
// pod leaves free (fragHostPack: on e 96 % of its CPU, on u 19 %) outweighs 0.2 of a card:
// frag-aware must take u.
func TestFragAwareCPUOnlyPodPacksWhereCPUIsShort(t *testing.T) {
	mix := hostMix(faWhole(1), HostRequest{CPUMilli: 10000})
	u, e := faNode("u", "A", 100, 100, 100, 100, 100, 100, 0, 0), faNode("e", "A", 0, 0, 0, 0, 0, 0, 0, 0)
	u.SetHost(96000, 0)
	u.HoldHost(HostRequest{CPUMilli: 74000})
	e.SetHost(96000, 0)
	p := cpuOnlyPod(t, annotations.PolicyFragAware, HostRequest{CPUMilli: 4000})
	if best := bestNode(t, p, mix, e, u); best.Name != "u" {
		t.Errorf("chose %s, want u (the node already in use, not the untouched one)", best.Name)
	}
}

// shortfall counts, for a class, only the cards of its models: the mix is of pods sharing half a
// card of model B, 8 CPUs each, and p and q (as in TestFragAwareCPUOnlyPodCountsSharedCardsCPU)
// have only A cards, which no pod of the mix can take, so p's CPU strands nothing and the pod packs
// onto p, the fuller node. Counting every card for every class took q.
func TestFragAwareCPUOnlyPodShortfallCountsTheClassModelsOnly(t *testing.T) {
	mix := &TaskMix{}
	mix.AddPodHost(&annotations.PodRequest{Containers: []annotations.ContainerRequest{faShare(50)}},
		&annotations.Selector{UseTypes: []string{"b"}}, HostRequest{CPUMilli: 8000})
	pn, qn := faNode("p", "A", 0, 0, 0, 0), faNode("q", "A", 0, 0, 0, 0)
	pn.SetHost(40000, 0)
	qn.SetHost(100000, 0)
	pod := cpuOnlyPod(t, annotations.PolicyFragAware, HostRequest{CPUMilli: 8000})
	if best := bestNode(t, pod, mix, pn, qn); best.Name != "p" {
		t.Errorf("chose %s, want p (no pod of the mix can use its A cards)", best.Name)
	}
}
