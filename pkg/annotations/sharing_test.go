package annotations

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestInventorySharingRoundTrip(t *testing.T) {
	for _, s := range []*Sharing{nil, {Mode: SharingMPS, Ready: true}, {Mode: SharingHAMiCore}, {Mode: "future-mode", Ready: true}} {
		in := sampleInventory()
		in.Sharing = s
		enc, err := EncodeInventory(in)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		if s == nil && strings.Contains(enc, "sharing") {
			t.Errorf("an inventory without sharing encodes the field: %s", enc)
		}
		got, err := DecodeInventory(enc)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		in.V = Version
		if diff := cmp.Diff(in, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	}
}

func TestInventorySharingRefusesMalformedMode(t *testing.T) {
	for _, mode := range []string{"", "MPS", "mps mode", strings.Repeat("m", 33)} {
		in := sampleInventory()
		in.Sharing = &Sharing{Mode: mode}
		_, err := EncodeInventory(in)
		if err == nil || !strings.Contains(err.Error(), "sharing.mode") {
			t.Errorf("mode %q: %v, want a sharing.mode error", mode, err)
		}
	}
}

func TestSharingEnforced(t *testing.T) {
	for _, c := range []struct {
		s    *Sharing
		want bool
		mode string
	}{
		{nil, false, SharingNone}, // no field: an older plugin, or mode none
		{&Sharing{Mode: SharingNone, Ready: true}, false, SharingNone},
		{&Sharing{Mode: SharingMPS, Ready: true}, true, SharingMPS},
		{&Sharing{Mode: SharingMPS, Ready: false}, false, SharingMPS}, // daemon down
		{&Sharing{Mode: SharingHAMiCore, Ready: true}, true, SharingHAMiCore},
		{&Sharing{Mode: "future-mode", Ready: true}, false, "future-mode"}, // unknown: not judged enforced
	} {
		if got := c.s.Enforced(); got != c.want {
			t.Errorf("%+v: Enforced() = %v, want %v", c.s, got, c.want)
		}
		if got := c.s.ModeOrNone(); got != c.mode {
			t.Errorf("%+v: ModeOrNone() = %q, want %q", c.s, got, c.mode)
		}
	}
}
