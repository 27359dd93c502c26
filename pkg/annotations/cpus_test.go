package annotations

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The assignment's predicted CPUs per NUMA node (Assignment.CPUs) round-trip and are checked.
func TestAssignmentCPUs(t *testing.T) {
	const k = `cardinal.io/gpu-assignment: `
	tests := []struct {
		name    string
		cpus    []NUMACPUCount
		wantErr string
	}{
		{name: "none"},
		{name: "two NUMA nodes", cpus: []NUMACPUCount{{NUMA: 0, CPUs: 4}, {NUMA: 1, CPUs: 2}}},
		{name: "NUMA 64", cpus: []NUMACPUCount{{NUMA: 64, CPUs: 1}}, wantErr: k + `cpus[0].numa: 64 is not in 0..63`},
		{name: "NUMA twice", cpus: []NUMACPUCount{{NUMA: 1, CPUs: 1}, {NUMA: 1, CPUs: 2}}, wantErr: k + `cpus[1].numa: 1 appears twice`},
		{name: "zero CPUs", cpus: []NUMACPUCount{{NUMA: 0}}, wantErr: k + `cpus[0].cpus: 0 is not in 1..65536`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := sampleAssignment()
			a.CPUs = tt.cpus
			s, err := EncodeAssignment(a)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Fatalf("encode error (-want +got):\n%s", diff)
			}
			if err != nil {
				a.V = Version
				s = mustJSON(t, a)
			}
			got, err := DecodeAssignment(s)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Fatalf("decode error (-want +got):\n%s", diff)
			}
			if err == nil {
				a.V = Version
				if diff := cmp.Diff(a, got); diff != "" {
					t.Errorf("round trip (-want +got):\n%s", diff)
				}
			}
		})
	}
}
