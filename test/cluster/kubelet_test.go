package cluster

import (
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKubeletConfigNeverWritesCapacityAfterStart pins the setting that keeps kubelet 1.34's
// container manager from writing its capacity map while the first node status reads it (a CI
// kubelet died at start with "concurrent map iteration and map write"): no override may turn
// local storage isolation back on.
func TestKubeletConfigNeverWritesCapacityAfterStart(t *testing.T) {
	raw, err := kubeletConfig(34, 10250, 10248, "unix:///cri.sock", "", map[string]any{"localStorageCapacityIsolation": true})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if got, ok := cfg["localStorageCapacityIsolation"].(bool); !ok || got {
		t.Fatalf("localStorageCapacityIsolation = %v (%T), want false whatever the overrides", cfg["localStorageCapacityIsolation"], cfg["localStorageCapacityIsolation"])
	}
}

// TestKubeletConfigFeatureGatesPerMinor: kubelet 1.34 runs with in-place resize off (its resize path
// crashed fake-runtime kubelets); 1.35+ locks that gate on and refuses to start when it is set off
// ("cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true").
func TestKubeletConfigFeatureGatesPerMinor(t *testing.T) {
	for _, tc := range []struct {
		minor   int
		wantOff bool
	}{{34, true}, {35, false}, {36, false}, {37, false}} {
		raw, err := kubeletConfig(tc.minor, 10250, 10248, "unix:///cri.sock", "")
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			FeatureGates map[string]bool `json:"featureGates"`
			FailCgroupV1 *bool           `json:"failCgroupV1"`
		}
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		v, set := cfg.FeatureGates["InPlacePodVerticalScaling"]
		if tc.wantOff != (set && !v) || (!tc.wantOff && set) {
			t.Errorf("1.%d: featureGates %v; want InPlacePodVerticalScaling off: %v, else unset", tc.minor, cfg.FeatureGates, tc.wantOff)
		}
		if cfg.FailCgroupV1 == nil || *cfg.FailCgroupV1 {
			t.Errorf("1.%d: failCgroupV1 = %v, want false (this host is cgroup v1; kubelet 1.35+ refuses it otherwise)", tc.minor, cfg.FailCgroupV1)
		}
	}
}
