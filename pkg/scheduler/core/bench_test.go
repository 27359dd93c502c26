package core

import (
	"fmt"
	"testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// benchNodes builds n nodes of 8 A100s on 2 NUMA nodes, 4 cards held whole on each (a pattern
// per node), the shape of BENCHMARKS.md S1; kubelet, when set, is every node's kubelet topology.
func benchNodes(n int, kubelet *annotations.KubeletTopology) []*NodeState {
	out := make([]*NodeState, n)
	for i := range out {
		gpus := make([]annotations.GPU, 8)
		for k := range gpus {
			gpus[k] = annotations.GPU{UUID: fmt.Sprintf("GPU-%d-%d", i, k), Index: k, Model: "NVIDIA A100-SXM4-80GB",
				MemoryMiB: 81920, NUMA: k / 4, Healthy: true, Shares: 1}
		}
		s := NewNodeState(fmt.Sprintf("node-%d", i), annotations.Inventory{V: 1, GPUs: gpus, Kubelet: kubelet})
		for k := 0; k < 4; k++ {
			s.Hold(Holding{UUID: gpus[(i+3*k)%8].UUID, Slot: -1, MemMiB: 81920, Cores: 100})
		}
		out[i] = s
	}
	return out
}

func benchFit(b *testing.B, nodes []*NodeState) {
	d, err := New(Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack})
	if err != nil {
		b.Fatal(err)
	}
	p, err := d.Prepare(annotations.PodRequest{Containers: []annotations.ContainerRequest{{Name: "m", Count: 2}}},
		annotations.Selector{UseTypes: []string{"a100"}})
	if err != nil {
		b.Fatal(err)
	}
	var s Scratch
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := nodes[i%len(nodes)]
		if plan, r := p.FitWith(n, nil, &s); plan != nil {
			p.ScoreWith(n, plan, nil, &s)
		} else if r == nil {
			b.Fatal("no plan and no reason")
		}
	}
}

// BenchmarkFitWith is the per-node cost of Filter and Prioritize in the core, policy none.
func BenchmarkFitWith(b *testing.B) { benchFit(b, benchNodes(64, nil)) }

// BenchmarkFitWithKubelet is the same on nodes whose kubelet runs restricted (container scope,
// static CPU manager): the kubelet model runs once per node.
func BenchmarkFitWithKubelet(b *testing.B) {
	benchFit(b, benchNodes(64, &annotations.KubeletTopology{TopologyManagerPolicy: annotations.TopologyPolicyRestricted,
		TopologyManagerScope: annotations.TopologyScopeContainer, CPUManagerPolicy: annotations.CPUManagerPolicyStatic, DeviceTopology: true,
		NUMA: []annotations.NUMACPUs{{ID: 0, CPUs: 32, ReservedCPUs: 2}, {ID: 1, CPUs: 32}}}))
}

// BenchmarkFitWithLinks is BenchmarkFitWith on nodes that publish their links (NVLink pairs, two
// PCIe switches): the 2-card container's set is chosen by links.
func BenchmarkFitWithLinks(b *testing.B) {
	nodes := benchNodes(64, nil)
	for i, n := range nodes {
		inv := annotations.Inventory{V: 1}
		for k := range n.Cards {
			inv.GPUs = append(inv.GPUs, n.Cards[k].GPU)
			for j := k + 1; j < len(n.Cards); j++ {
				l := annotations.Link{A: k, B: j, PCIe: annotations.PCIeSystem}
				if k/4 == j/4 {
					l.PCIe = annotations.PCIeSwitch
				}
				if k/2 == j/2 {
					l.NVLinks = 4
				}
				inv.Links = append(inv.Links, l)
			}
		}
		s := NewNodeState(n.Name, inv)
		for k := range n.Cards {
			if n.Cards[k].Held > 0 {
				s.Hold(Holding{UUID: n.Cards[k].UUID, Slot: -1, MemMiB: 81920, Cores: 100})
			}
		}
		nodes[i] = s
	}
	benchFit(b, nodes)
}

// BenchmarkFitWithLinksLarge is a 4-card container on a node of 1024 cards in NVLink pairs, every
// other pair broken: the greedy search.
func BenchmarkFitWithLinksLarge(b *testing.B) {
	inv := annotations.Inventory{V: 1}
	for k := range 1024 {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: fmt.Sprintf("GPU-%d", k), Index: k, Model: "NVIDIA A100-SXM4-80GB",
			MemoryMiB: 81920, NUMA: k / 512, Healthy: true, Shares: 1})
		if k%2 == 1 {
			inv.Links = append(inv.Links, annotations.Link{A: k - 1, B: k, NVLinks: 4, PCIe: annotations.PCIeSwitch})
		}
	}
	s := NewNodeState("big", inv)
	for k := 0; k < 1024; k += 4 {
		s.Hold(Holding{UUID: inv.GPUs[k].UUID, Slot: -1, MemMiB: 81920, Cores: 100})
	}
	benchFit(b, []*NodeState{s})
}
