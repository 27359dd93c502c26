package annotations

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestInventorySharingRoundTrip(t *testing.T) {
	for _, s := range []*Sharing{nil, {Mode: SharingMPS, Ready: true}, {Mode: SharingHAMiCore}, {Mode: "future-mode", Ready: true},
		{Mode: SharingMPS, Ready: true, EnforcementV: EnforcementVersion, Memory: EnforcementKernel, Compute: EnforcementMPSDaemon},
		{Mode: SharingHAMiCore, EnforcementV: 2, Memory: "future-enforcement", Compute: EnforcementClientEnv}} {
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

func TestInventorySharingEnforcementIsAdditive(t *testing.T) {
	// A plugin older than the enforcement fields: they decode empty, and nothing is said of them.
	got, err := DecodeInventory(`{"v":1,"gpus":[],"sharing":{"mode":"mps","ready":true}}`)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&Sharing{Mode: SharingMPS, Ready: true}, got.Sharing); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	in := sampleInventory()
	in.Sharing = &Sharing{Mode: SharingMPS, Ready: true}
	enc, err := EncodeInventory(in)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(enc, "enforcementV") || strings.Contains(enc, "memory\":\"") {
		t.Errorf("a sharing field without enforcement encodes enforcement fields: %s", enc)
	}
}

func TestInventorySharingRefusesMalformedEnforcement(t *testing.T) {
	for _, c := range []struct {
		s     Sharing
		field string
	}{
		{Sharing{Mode: SharingMPS, EnforcementV: 1, Memory: "Kernel"}, "sharing.memory"},
		{Sharing{Mode: SharingMPS, EnforcementV: 1, Compute: "mps daemon"}, "sharing.compute"},
		{Sharing{Mode: SharingMPS, EnforcementV: -1}, "sharing.enforcementV"},
	} {
		in := sampleInventory()
		in.Sharing = &c.s
		_, err := EncodeInventory(in)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %v, want a %s error", c.s, err, c.field)
		}
	}
}

func TestSharingKernelMemory(t *testing.T) {
	for _, c := range []struct {
		s    *Sharing
		want bool
	}{
		{nil, false},
		{&Sharing{Mode: SharingMPS, Ready: true}, false}, // an older plugin: nothing said
		{&Sharing{Mode: SharingMPS, EnforcementV: 1, Memory: EnforcementMPSDaemon}, false},
		{&Sharing{Mode: SharingMPS, EnforcementV: 1, Memory: EnforcementKernel}, true},
		{&Sharing{Mode: SharingHAMiCore, EnforcementV: 1, Memory: EnforcementDriver}, true},
		{&Sharing{Mode: SharingMPS, Memory: EnforcementKernel}, false}, // no version: not trusted
		{&Sharing{Mode: SharingMPS, EnforcementV: 1, Memory: "future-enforcement"}, false},
	} {
		if got := c.s.KernelMemory(); got != c.want {
			t.Errorf("%+v: KernelMemory() = %v, want %v", c.s, got, c.want)
		}
	}
}
