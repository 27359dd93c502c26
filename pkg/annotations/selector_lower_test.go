package annotations

import (
	"strings"
	"testing"
)

// CheckLower must agree with Check for every model once the model is lower-cased.
func TestCheckLowerAgreesWithCheck(t *testing.T) {
	sel := Selector{UseTypes: []string{"a100", "h100"}, NoUseTypes: []string{"pcie"}, NoUseUUIDs: []string{"GPU-2"}}
	cases := []struct {
		model, uuid string
		want        Mismatch
	}{
		{"NVIDIA A100-SXM4-80GB", "GPU-1", MatchOK},
		{"NVIDIA A100-PCIE-40GB", "GPU-1", MismatchNoUseType},
		{"NVIDIA A40", "GPU-1", MismatchUseType},
		{"NVIDIA H100 80GB HBM3", "GPU-2", MismatchNoUseUUID},
	}
	for _, c := range cases {
		if got := sel.Check(c.model, c.uuid); got != c.want {
			t.Errorf("Check(%q, %q) = %v, want %v", c.model, c.uuid, got, c.want)
		}
		if got := sel.CheckLower(strings.ToLower(c.model), c.uuid); got != c.want {
			t.Errorf("CheckLower(%q, %q) = %v, want %v", c.model, c.uuid, got, c.want)
		}
	}
}
