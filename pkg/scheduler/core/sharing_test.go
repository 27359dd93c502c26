package core

import (
	"testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func TestFitSharingModes(t *testing.T) {
	sharedNode := func(s *annotations.Sharing) *NodeState {
		n := nodeOf(card("GPU-0", "NVIDIA H100", 81920, 0, 4))
		n.Sharing = s
		return n
	}
	mps := &annotations.Sharing{Mode: annotations.SharingMPS, Ready: true}
	mpsDown := &annotations.Sharing{Mode: annotations.SharingMPS, Ready: false}
	hami := &annotations.Sharing{Mode: annotations.SharingHAMiCore, Ready: true}
	none := &annotations.Sharing{Mode: annotations.SharingNone, Ready: true}
	future := &annotations.Sharing{Mode: "future-mode", Ready: true}
	share := pod(shared("main", 1, 20000, 30))
	card := pod(whole("main", 1))
	tests := []struct {
		name    string
		require bool
		node    *annotations.Sharing
		pod     annotations.PodRequest
		want    string // "" fits
	}{
		{name: "no sharing field, not required: fits as before", node: nil, pod: share},
		{name: "mode none, not required: fits (advisory limits)", node: none, pod: share},
		{name: "no sharing field, required", require: true, node: nil, pod: share,
			want: `container "main": shares a card, but the node's sharing mode is none (limits not enforced) and enforced sharing is required`},
		{name: "unknown mode, required", require: true, node: future, pod: share,
			want: `container "main": shares a card, but the node's sharing mode is future-mode (limits not enforced) and enforced sharing is required`},
		{name: "mps ready, required", require: true, node: mps, pod: share},
		{name: "hami-core ready, required", require: true, node: hami, pod: share},
		{name: "mps down, not required: refused (the plugin would refuse it)", node: mpsDown, pod: share,
			want: `container "main": shares a card, but the node's mps sharing cannot enforce limits now (not ready)`},
		{name: "mps down, whole card: fits", require: true, node: mpsDown, pod: card},
		{name: "mode none, whole card, required: fits", require: true, node: nil, pod: card},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := New(Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack, RequireEnforcedSharing: tt.require})
			if err != nil {
				t.Fatal(err)
			}
			p, err := d.Prepare(tt.pod, annotations.Selector{})
			if err != nil {
				t.Fatal(err)
			}
			var s Scratch
			plan, reason := p.FitWith(sharedNode(tt.node), nil, &s)
			switch {
			case tt.want == "" && reason != nil:
				t.Fatalf("refused: %s", reason)
			case tt.want != "" && reason == nil:
				t.Fatalf("fits (%+v), want %q", plan, tt.want)
			case tt.want != "" && reason.String() != tt.want:
				t.Fatalf("reason %q, want %q", reason, tt.want)
			}
			if reason != nil && reason.Unresolvable() != (reason.Kind == ReasonSharingNotEnforced) {
				t.Errorf("%s: Unresolvable() = %v", reason, reason.Unresolvable())
			}
		})
	}
}
