package annotations

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Profile names as nvidia-smi prints them, attributes included (+me.all on Blackwell's media
// profiles), are valid and their resource names are valid keys; malformed ones are not.
func TestMIGProfileWithDottedAttribute(t *testing.T) {
	names := ResourceNames{GPU: corev1.ResourceName("nvidia.com/gpu")}
	for _, p := range []string{"1g.10gb", "7g.80gb", "1g.10gb+me", "1g.10gb-me", "1g.10gb+gfx", "1g.23gb+me.all", "1c.3g.40gb", "2c.4g.40gb+gfx"} {
		if !ValidMIGProfile(p) {
			t.Errorf("ValidMIGProfile(%q) = false, want true", p)
		}
		key, ok := names.MIGProfileKeyOf(names.MIGResource(p))
		if !ok || !validMIGProfileKey(key) {
			t.Errorf("profile %q: resource key %q is not a valid key", p, key)
		}
	}
	for _, p := range []string{"", "1g", "1g.10", "0g.10gb", "1g.10gb+", "1g.10gb+me.", "1g.10gb+.all", "1g.10gb me", "g.10gb"} {
		if ValidMIGProfile(p) {
			t.Errorf("ValidMIGProfile(%q) = true, want false", p)
		}
	}
}
