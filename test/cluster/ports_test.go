package cluster

import "testing"

// FreePorts never hands out a port of the kernel's ephemeral range, which outgoing connections may
// take before the component binds it, and never the same port twice in one call.
func TestFreePortsAreOutsideTheEphemeralRange(t *testing.T) {
	start := ephemeralStart()
	ports, err := FreePorts(64)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 64 {
		t.Fatalf("%d ports, want 64", len(ports))
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p >= start || p < 1024 {
			t.Errorf("port %d is not below the ephemeral range's start %d", p, start)
		}
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
