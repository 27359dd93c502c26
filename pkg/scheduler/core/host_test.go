package core

import (
	"math"
	"strings"
	"testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func hostPod(t *testing.T, policy annotations.Policy, req annotations.ContainerRequest, host HostRequest) *Pod {
	t.Helper()
	d, err := New(Options{NodePolicy: policy, GPUPolicy: policy})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.PrepareHost(annotations.PodRequest{Containers: []annotations.ContainerRequest{req}}, annotations.Selector{}, host)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHostFitApplyRelease(t *testing.T) {
	n := faNode("n", "A", 0, 0)
	p := hostPod(t, annotations.PolicyBinpack, faWhole(1), HostRequest{CPUMilli: 6000, MemMiB: 4096})
	big := hostPod(t, annotations.PolicyBinpack, faWhole(1), HostRequest{CPUMilli: 10000})

	// Unknown host resources: nothing is refused, as before.
	if _, r := big.Fit(n, nil); r != nil {
		t.Fatalf("unknown host: %s", r)
	}
	n.SetHost(8000, 16384)
	_, r := big.Fit(n, nil)
	if r == nil || r.Kind != ReasonHost {
		t.Fatalf("10 CPUs on an 8-CPU node: got %v, want ReasonHost", r)
	}
	if !r.Unresolvable() || !strings.Contains(r.String(), "needs 10000m CPU, node has 8000m free") {
		t.Errorf("reason %q unresolvable=%v", r, r.Unresolvable())
	}
	plan, r := p.Fit(n, nil)
	if r != nil {
		t.Fatal(r)
	}
	if plan.Host != p.Host {
		t.Errorf("plan.Host = %+v, want %+v", plan.Host, p.Host)
	}
	n.Apply(plan)
	if n.Host.UsedCPUMilli != 6000 || n.Host.UsedMemMiB != 4096 {
		t.Errorf("after Apply: %+v", n.Host)
	}
	// One card is left but only 2 CPUs: refused, and not for good.
	_, r = p.Fit(n, nil)
	if r == nil || r.Kind != ReasonHost || r.Unresolvable() {
		t.Fatalf("second pod: got %v, want a resolvable ReasonHost", r)
	}
	n.Release(plan)
	if n.Host.UsedCPUMilli != 0 || n.Host.UsedMemMiB != 0 {
		t.Errorf("after Release: %+v", n.Host)
	}
	// Memory alone known.
	m := faNode("m", "A", 0)
	m.SetHost(0, 2048)
	if _, r := p.Fit(m, nil); r == nil || r.Kind != ReasonHost || !strings.Contains(r.String(), "needs 4096 MiB memory") {
		t.Errorf("memory: got %v", r)
	}
}

func TestTaskMixHostBuckets(t *testing.T) {
	m := &TaskMix{}
	req := annotations.PodRequest{Containers: []annotations.ContainerRequest{faWhole(1)}}
	m.AddPodHost(&req, &annotations.Selector{}, HostRequest{CPUMilli: 3152, MemMiB: 15000})
	m.AddPodHost(&req, &annotations.Selector{}, HostRequest{CPUMilli: 2900, MemMiB: 14900})
	m.AddPodHost(&req, &annotations.Selector{}, HostRequest{CPUMilli: 100})
	if len(m.Classes) != 2 || m.Classes[0].Weight != 2 || m.Classes[0].HostCPUMilli != 3000 || m.Classes[0].HostMemMiB != 15*1024 {
		t.Fatalf("classes %+v", m.Classes)
	}
	if c := m.Classes[1]; c.HostCPUMilli != 1000 || c.HostMemMiB != 0 {
		t.Errorf("small request: %+v, want one bucket of CPU and no memory", c)
	}
}

// Two nodes with two empty cards each. The mix is one-card whole pods asking 4 CPUs. Putting the pod
// (one card, 4 CPUs) on n1 (5 CPUs) leaves 1 CPU: its last card becomes unusable. Before, n1's CPU
// fed 5/4 = 1.25 pods, so 2 − 1.25 = 0.75 card was already out of reach (hostCapacity): ΔF = +0.25.
// On n2 (8 CPUs) 4 CPUs remain for one more such pod: ΔF = 0. binpack sees equal cards and takes n1
// (the smaller name); frag-aware must take n2, and without host resources it cannot tell them apart.
func TestFragAwareCountsHostFragmentation(t *testing.T) {
	host := HostRequest{CPUMilli: 4000, MemMiB: 1024}
	req := annotations.PodRequest{Containers: []annotations.ContainerRequest{faWhole(1)}}
	mix := &TaskMix{}
	mix.AddPodHost(&req, &annotations.Selector{}, host)

	nodes := func(known bool) []*NodeState {
		n1, n2 := faNode("n1", "A", 0, 0), faNode("n2", "A", 0, 0)
		if known {
			n1.SetHost(5000, 65536)
			n2.SetHost(8000, 65536)
		}
		return []*NodeState{n1, n2}
	}
	place := func(policy annotations.Policy, known bool) (string, float64) {
		p := hostPod(t, policy, faWhole(1), host)
		var best Candidate
		for i, n := range nodes(known) {
			plan, r := p.Fit(n, mix)
			if r != nil {
				t.Fatalf("%s: %s", n.Name, r)
			}
			c := Candidate{Name: n.Name, Score: p.Score(n, plan, mix)}
			if i == 0 || c.Better(best) {
				best = c
			}
		}
		return best.Name, best.Score
	}
	if got, _ := place(annotations.PolicyBinpack, true); got != "n1" {
		t.Errorf("binpack chose %s, want n1", got)
	}
	if got, _ := place(annotations.PolicyFragAware, false); got != "n1" {
		t.Errorf("frag-aware without host resources chose %s, want n1 (a tie)", got)
	}
	got, score := place(annotations.PolicyFragAware, true)
	if got != "n2" {
		t.Errorf("frag-aware with host resources chose %s, want n2", got)
	}
	// ΔF = 0 on n2: score 5 less the tie-break.
	if math.Abs(score-5) > 1e-6 {
		t.Errorf("n2 score %v, want 5", score)
	}
	// n1: ΔF = +0.25 card, score 10/(1+e^(4×0.25)).
	p := hostPod(t, annotations.PolicyFragAware, faWhole(1), host)
	n1 := nodes(true)[0]
	plan, _ := p.Fit(n1, mix)
	if s, want := p.Score(n1, plan, mix), MaxScore/(1+math.Exp(fragSlope*0.25)); math.Abs(s-want) > 1e-6 {
		t.Errorf("n1 score %v, want %v", s, want)
	}
}

// Equal ΔF on two nodes with the same cards: the tie goes to the node whose CPU is less used after
// the pod (n2), not to the smaller name (n1).
func TestFragAwareTieBreakSeesCPU(t *testing.T) {
	host := HostRequest{CPUMilli: 1000}
	req := annotations.PodRequest{Containers: []annotations.ContainerRequest{faWhole(1)}}
	mix := &TaskMix{}
	mix.AddPodHost(&req, &annotations.Selector{}, host)
	n1, n2 := faNode("n1", "A", 0, 0, 0, 0), faNode("n2", "A", 0, 0, 0, 0)
	n1.SetHost(10000, 0)
	n1.HoldHost(HostRequest{CPUMilli: 8000})
	n2.SetHost(10000, 0)
	p := hostPod(t, annotations.PolicyFragAware, faWhole(1), host)
	if best := bestNode(t, p, mix, n1, n2); best.Name != "n2" {
		t.Errorf("frag-aware chose %s, want n2 (less CPU used)", best.Name)
	}
}

// bestNode is the candidate pod p's policy picks among nodes (every one must fit), as Decide
// compares them.
func bestNode(t *testing.T, p *Pod, mix *TaskMix, nodes ...*NodeState) Candidate {
	t.Helper()
	var best Candidate
	for i, n := range nodes {
		plan, r := p.Fit(n, mix)
		if r != nil {
			t.Fatalf("%s: %s", n.Name, r)
		}
		c := Candidate{Name: n.Name, Score: p.Score(n, plan, mix)}
		if i == 0 || c.Better(best) {
			best = c
		}
	}
	return best
}
