package annotations

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sampleKubeletInventory is docs/contract.md's second inventory example: one card and the kubelet's
// topology settings.
func sampleKubeletInventory() Inventory {
	inv := sampleInventory()
	inv.GPUs = inv.GPUs[:1]
	inv.Kubelet = &KubeletTopology{
		TopologyManagerPolicy: TopologyPolicySingleNUMANode, TopologyManagerScope: TopologyScopeContainer,
		CPUManagerPolicy: CPUManagerPolicyStatic, DeviceTopology: true,
		NUMA:  []NUMACPUs{{ID: 0, CPUs: 32, ReservedCPUs: 2, ExclusiveCPUs: 8}, {ID: 1, CPUs: 32}},
		PodsV: PodCPUsVersion, Pods: []PodCPUs{{UID: "6d1f4bd4-0f5e-4c43-a3a3-8f1c52f0a001", CPUs: []int{8, 0}}},
	}
	return inv
}

func TestKubeletTopologyEncodeGolden(t *testing.T) {
	got, err := EncodeInventory(sampleKubeletInventory())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"gpus":[{"uuid":"` + uuid0 + `","index":0,"model":"NVIDIA A40","memoryMiB":46068,"numa":0,"healthy":true,"shares":1}],` +
		`"kubelet":{"topologyManagerPolicy":"single-numa-node","topologyManagerScope":"container","cpuManagerPolicy":"static","deviceTopology":true,` +
		`"numa":[{"id":0,"cpus":32,"reservedCPUs":2,"exclusiveCPUs":8},{"id":1,"cpus":32,"reservedCPUs":0,"exclusiveCPUs":0}],` +
		`"podsV":1,"pods":[{"uid":"6d1f4bd4-0f5e-4c43-a3a3-8f1c52f0a001","cpus":[8,0]}]}}`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestKubeletTopologyRoundTrip(t *testing.T) {
	full := sampleKubeletInventory()
	full.Kubelet.TopologyManagerScope = TopologyScopePod
	full.Kubelet.PreferClosestNUMANodes = true
	full.Kubelet.MaxAllowableNUMANodes = 16
	full.Kubelet.NUMA[0].Distances = []int{10, 21}
	full.Kubelet.NUMA[1].Distances = []int{21, 10}
	none := sampleInventory()
	none.Kubelet = &KubeletTopology{TopologyManagerPolicy: TopologyPolicyNone, TopologyManagerScope: TopologyScopeContainer,
		CPUManagerPolicy: CPUManagerPolicyNone, NUMA: []NUMACPUs{}}
	for _, in := range []Inventory{sampleKubeletInventory(), full, none} {
		s, err := EncodeInventory(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeInventory(s)
		if err != nil {
			t.Fatal(err)
		}
		in.V = Version
		if diff := cmp.Diff(in, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	}
}

// An inventory written before the field existed decodes with Kubelet nil; an older reader skips
// the field (decoders ignore unknown fields, TestDecodeIgnoresUnknownFields).
func TestKubeletTopologyIsOptional(t *testing.T) {
	s, err := EncodeInventory(sampleInventory())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s, "kubelet") {
		t.Errorf("inventory without kubelet topology encodes the field: %s", s)
	}
	inv, err := DecodeInventory(s)
	if err != nil || inv.Kubelet != nil {
		t.Errorf("decoded %+v, %v; want Kubelet nil", inv.Kubelet, err)
	}
}

func TestKubeletTopologyValidation(t *testing.T) {
	const k = `cardinal.io/gpu-inventory: kubelet.`
	tests := []struct {
		name    string
		edit    func(*KubeletTopology)
		wantErr string
	}{
		{name: "sample is valid", edit: func(*KubeletTopology) {}},
		{name: "max 64 is valid", edit: func(t *KubeletTopology) { t.MaxAllowableNUMANodes = 64 }},
		{name: "NUMA 63 is valid", edit: func(t *KubeletTopology) { t.NUMA[1].ID = 63 }},
		{name: "8 NUMA nodes under a policy are valid", edit: func(t *KubeletTopology) { t.Pods, t.NUMA = nil, numaNodes(8) }},
		{name: "64 NUMA nodes under policy none are valid", edit: func(t *KubeletTopology) {
			t.TopologyManagerPolicy, t.Pods, t.NUMA = TopologyPolicyNone, nil, numaNodes(64)
		}},
		{name: "unknown policy", edit: func(t *KubeletTopology) { t.TopologyManagerPolicy = "strict" },
			wantErr: k + `topologyManagerPolicy: "strict" is not one of none, best-effort, restricted, single-numa-node`},
		{name: "empty scope", edit: func(t *KubeletTopology) { t.TopologyManagerScope = "" },
			wantErr: k + `topologyManagerScope: "" is not one of container, pod`},
		{name: "unknown CPU policy", edit: func(t *KubeletTopology) { t.CPUManagerPolicy = "Static" },
			wantErr: k + `cpuManagerPolicy: "Static" is not one of none, static`},
		{name: "max below 8", edit: func(t *KubeletTopology) { t.MaxAllowableNUMANodes = 4 },
			wantErr: k + `maxAllowableNUMANodes: 4 is not in 8..64`},
		{name: "NUMA ID 64", edit: func(t *KubeletTopology) { t.NUMA[1].ID = 64 },
			wantErr: k + `numa[1].id: 64 is not in 0..63`},
		{name: "NUMA ID twice", edit: func(t *KubeletTopology) { t.NUMA[1].ID = 0 },
			wantErr: k + `numa[1].id: 0 appears twice`},
		{name: "negative count", edit: func(t *KubeletTopology) { t.NUMA[0].ExclusiveCPUs = -1 },
			wantErr: k + `numa[0]: a CPU count is negative`},
		{name: "more held than there are", edit: func(t *KubeletTopology) { t.NUMA[0].ExclusiveCPUs = 31 },
			wantErr: k + `numa[0]: 2 reserved and 31 exclusive CPUs are more than its 32`},
		{name: "no pods reported is valid", edit: func(t *KubeletTopology) { t.PodsV, t.Pods = 0, nil }},
		{name: "pods without version", edit: func(t *KubeletTopology) { t.PodsV = 0 },
			wantErr: k + `pods: 1 entries without kubelet.podsV`},
		{name: "pods of a newer version", edit: func(t *KubeletTopology) { t.PodsV = 2 },
			wantErr: k + `podsV: 2 is not a known version (1)`},
		{name: "pod without UID", edit: func(t *KubeletTopology) { t.Pods[0].UID = "" },
			wantErr: k + `pods[0].uid: "" is empty or longer than 128 characters`},
		{name: "pod twice", edit: func(t *KubeletTopology) { t.Pods = append(t.Pods, t.Pods[0]) },
			wantErr: k + `pods[1].uid: "6d1f4bd4-0f5e-4c43-a3a3-8f1c52f0a001" appears twice`},
		{name: "pod counts for other NUMA nodes", edit: func(t *KubeletTopology) { t.Pods[0].CPUs = []int{8} },
			wantErr: k + `pods[0].cpus: 1 counts for 2 NUMA nodes`},
		{name: "pod negative count", edit: func(t *KubeletTopology) { t.Pods[0].CPUs[1] = -1 },
			wantErr: k + `pods[0].cpus[1]: -1 is negative`},
		{name: "pods hold more than unreserved", edit: func(t *KubeletTopology) { t.Pods[0].CPUs[0] = 31 },
			wantErr: k + `pods: the pods hold more exclusive CPUs on NUMA node 0 than its 30 unreserved ones`},
		{name: "negative distance", edit: func(t *KubeletTopology) { t.NUMA[1].Distances = []int{21, -10} },
			wantErr: k + `numa[1].distances[1]: -10 is negative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := sampleKubeletInventory()
			tt.edit(inv.Kubelet)
			s, err := EncodeInventory(inv)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("encode error (-want +got):\n%s", diff)
			}
			if err != nil {
				inv.V = Version
				s = mustJSON(t, inv)
			}
			_, err = DecodeInventory(s)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("decode error (-want +got):\n%s", diff)
			}
		})
	}
}

// Issue 21 item 2: the scheduler's model of the kubelet enumerates 2^NUMA masks per admission
// check (48 or 64 NUMA nodes panicked the extender). The plugin publishes what it sees; the decoder
// refuses more NUMA nodes than the model covers under a policy other than none, naming the field.
func TestDecodeRefusesUnmodelledNUMANodes(t *testing.T) {
	const k = `cardinal.io/gpu-inventory: kubelet.`
	for _, tt := range []struct {
		name    string
		edit    func(*KubeletTopology)
		wantErr string
	}{
		{name: "8 NUMA nodes under a policy", edit: func(t *KubeletTopology) { t.Pods, t.NUMA = nil, numaNodes(8) }},
		{name: "64 NUMA nodes under policy none", edit: func(t *KubeletTopology) {
			t.TopologyManagerPolicy, t.Pods, t.NUMA = TopologyPolicyNone, nil, numaNodes(64)
		}},
		{name: "9 NUMA nodes under a policy", edit: func(t *KubeletTopology) { t.Pods, t.NUMA = nil, numaNodes(9) },
			wantErr: k + `numa: 9 NUMA nodes under the single-numa-node policy, more than the 8 the GPU scheduler models (the kubelet's own default limit)`},
		{name: "64 NUMA nodes even with max-allowable-numa-nodes 64", edit: func(t *KubeletTopology) {
			t.TopologyManagerPolicy, t.MaxAllowableNUMANodes, t.Pods, t.NUMA = TopologyPolicyRestricted, 64, nil, numaNodes(64)
		}, wantErr: k + `numa: 64 NUMA nodes under the restricted policy, more than the 8 the GPU scheduler models (the kubelet's own default limit)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inv := sampleKubeletInventory()
			tt.edit(inv.Kubelet)
			s, err := EncodeInventory(inv)
			if err != nil {
				t.Fatalf("encode: %v (the plugin publishes what it sees)", err)
			}
			_, err = DecodeInventory(s)
			if diff := cmp.Diff(tt.wantErr, errString(err)); diff != "" {
				t.Errorf("decode error (-want +got):\n%s", diff)
			}
		})
	}
}

// numaNodes lists n NUMA nodes with IDs 0..n-1 and 4 CPUs each.
func numaNodes(n int) []NUMACPUs {
	out := make([]NUMACPUs, n)
	for i := range out {
		out[i] = NUMACPUs{ID: i, CPUs: 4}
	}
	return out
}
