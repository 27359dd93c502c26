package stack

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

// The stack's rewritten simulation file keeps a node's topology, so its plugin publishes the links.
func TestWriteSimKeepsTopology(t *testing.T) {
	f, err := sim.Parse([]byte("nodes:\n  nvl-a:\n    - {model: A100, memoryMiB: 81920, count: 4}\n  plain:\n    - {model: T4, memoryMiB: 15360}\ntopology:\n  nvl-a: nvlink-pairs\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{SimPath: filepath.Join(t.TempDir(), "sim.yaml"), topology: map[string]sim.Topology{"nvl-a": f.Topology["nvl-a"]}}
	for _, node := range []string{"nvl-a", "plain"} {
		cards, err := f.Cards(node)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cards {
			s.cards = append(s.cards, Card{Node: node, Card: c})
		}
	}
	if err := s.writeSim(); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"nvl-a", "plain"} {
		want, _ := f.Cards(node)
		got, err := s.simCards(node)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: cards of the rewritten file (-source +rewritten):\n%s", node, diff)
		}
	}
}
