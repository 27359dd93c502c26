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
	raw, err := kubeletConfig(10250, 10248, "unix:///cri.sock", "", map[string]any{"localStorageCapacityIsolation": true})
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
