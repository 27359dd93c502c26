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
		{name: "mps, more than one slot (81920 MiB ÷ 4): refused as Allocate would", node: mps, pod: pod(shared("main", 1, 30000, 30)),
			want: `container "main": shares a card and reserves 30000 MiB of it, more than one MPS slot of this mps node (at most 20480 MiB: ` +
				`card memory ÷ shares, what its MPS daemon gives each client); reserve at most one slot per card, or whole cards`},
		{name: "mps, exactly one slot: fits", node: mps, pod: pod(shared("main", 1, 20480, 30))},
		{name: "hami-core, more than one slot: fits (HAMi-core holds any size)", node: hami, pod: pod(shared("main", 1, 30000, 30))},
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
			if reason != nil && reason.Unresolvable() != (reason.Kind == ReasonSharingNotEnforced || reason.Kind == ReasonMPSSlot) {
				t.Errorf("%s: Unresolvable() = %v", reason, reason.Unresolvable())
			}
		})
	}
}

// On an mps node with cards of two sizes, a reservation larger than the small cards' slot goes to
// a large card: fits skips only the cards whose slot is too small (Allocate's mps-slot rule).
func TestFitMPSSlotPicksTheCardWhoseSlotHoldsIt(t *testing.T) {
	n := nodeOf(card("GPU-small", "NVIDIA A100", 40960, 0, 4), card("GPU-big", "NVIDIA A100", 81920, 0, 4))
	n.Sharing = &annotations.Sharing{Mode: annotations.SharingMPS, Ready: true}
	d, err := New(Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		mem  int64
		want string
	}{{15000, "GPU-big"}, {10240, ""}} {
		p, err := d.Prepare(pod(shared("main", 1, tt.mem, 10)), annotations.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		plan, reason := p.Fit(n, nil)
		if reason != nil {
			t.Fatalf("%d MiB refused: %s", tt.mem, reason)
		}
		got := n.Cards[plan.Devices[0].Card].UUID
		if tt.want != "" && got != tt.want {
			t.Errorf("%d MiB on %s, want %s (the small card's slot is 10240 MiB)", tt.mem, got, tt.want)
		}
	}
}

// A node whose MPS daemon runs the cards in EXCLUSIVE_PROCESS (sharing.exclusiveCards) serves only
// shared containers: a whole-card pod is refused there, as its device plugin would refuse it.
func TestFitExclusiveCardsRefusesWholeCards(t *testing.T) {
	d, err := New(Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		sharing *annotations.Sharing
		pod     annotations.PodRequest
		want    string
	}{
		{"mps exclusive, whole card", &annotations.Sharing{Mode: annotations.SharingMPS, Ready: true, ExclusiveCards: true}, pod(whole("main", 1)),
			`container "main": takes cards whole, but the node's MPS daemon runs its cards in EXCLUSIVE_PROCESS: only shared containers (MPS clients) can use them`},
		{"mps exclusive, shared", &annotations.Sharing{Mode: annotations.SharingMPS, Ready: true, ExclusiveCards: true}, pod(shared("main", 1, 10000, 10)), ""},
		{"mps default compute mode, whole card", &annotations.Sharing{Mode: annotations.SharingMPS, Ready: true}, pod(whole("main", 1)), ""},
		{"not mps: the field means nothing", &annotations.Sharing{Mode: annotations.SharingHAMiCore, Ready: true, ExclusiveCards: true}, pod(whole("main", 1)), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := nodeOf(card("GPU-0", "NVIDIA H100", 81920, 0, 4))
			n.Sharing = tt.sharing
			p, err := d.Prepare(tt.pod, annotations.Selector{})
			if err != nil {
				t.Fatal(err)
			}
			_, reason := p.Fit(n, nil)
			switch {
			case tt.want == "" && reason != nil:
				t.Fatalf("refused: %s", reason)
			case tt.want != "" && (reason == nil || reason.String() != tt.want || !reason.Unresolvable()):
				t.Fatalf("reason %v, want %q (unresolvable)", reason, tt.want)
			}
		})
	}
}
