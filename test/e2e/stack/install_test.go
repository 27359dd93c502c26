package stack

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
)

// TestWriteSimKeepsMIG: the stack rewrites the simulation file with every card spelt out; a card's
// MIG mode and instances must survive it (they were dropped once, so no MIG node ever advertised
// an instance in the end-to-end suite).
func TestWriteSimKeepsMIG(t *testing.T) {
	const file = `nodes:
  mig-a:
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled, instances: [{profile: 1g.10gb, count: 7}]}}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 1, mig: {current: enabled, instances: [{profile: 3g.40gb}, {profile: 2g.20gb, healthy: false}, {profile: 1g.10gb}]}}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 1, mig: {current: disabled, pending: enabled}}
    - {model: "Tesla T4", memoryMiB: 15360, numa: 0}
`
	f, err := sim.Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want, err := f.Cards("mig-a")
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{SimPath: filepath.Join(t.TempDir(), "sim.yaml")}
	for _, c := range want {
		s.cards = append(s.cards, Card{Node: "mig-a", Card: c})
	}
	if err := s.writeSim(); err != nil {
		t.Fatal(err)
	}
	got, err := s.simCards("mig-a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cards after writeSim (-want +got):\n%s", diff)
	}
}
