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
