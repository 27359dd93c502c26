package deviceplugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/cpuset"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

const kubeletConfigHeader = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// kubeadmKubeletConfig is a kubelet configuration as kubeadm writes it, with the topology fields set.
const kubeadmKubeletConfig = kubeletConfigHeader + `authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
cpuManagerPolicy: static
cpuManagerReconcilePeriod: 10s
evictionHard:
  memory.available: 100Mi
kubeReserved:
  cpu: 500m
logging:
  flushFrequency: 0
  verbosity: 0
memoryManagerPolicy: None
reservedSystemCPUs: "0,8"
rotateCertificates: true
staticPodPath: /etc/kubernetes/manifests
topologyManagerPolicy: single-numa-node
topologyManagerScope: pod
topologyManagerPolicyOptions:
  prefer-closest-numa-nodes: "true"
  max-allowable-numa-nodes: "16"
`

func TestParseKubeletConfig(t *testing.T) {
	defaults := kubeletSettings{TopologyManagerPolicy: "none", TopologyManagerScope: "container", CPUManagerPolicy: "none", ReservedSystemCPUs: cpuset.New()}
	with := func(f func(*kubeletSettings)) kubeletSettings {
		s := defaults
		f(&s)
		return s
	}
	for _, tc := range []struct {
		name, file string
		want       kubeletSettings
	}{
		{"fields absent: the kubelet's defaults", kubeletConfigHeader, defaults},
		{"empty strings: the kubelet's defaults", kubeletConfigHeader + "topologyManagerPolicy: \"\"\ntopologyManagerScope: \"\"\ncpuManagerPolicy: \"\"\n", defaults},
		{"best-effort", kubeletConfigHeader + "topologyManagerPolicy: best-effort\n",
			with(func(s *kubeletSettings) { s.TopologyManagerPolicy = "best-effort" })},
		{"restricted", kubeletConfigHeader + "topologyManagerPolicy: restricted\n",
			with(func(s *kubeletSettings) { s.TopologyManagerPolicy = "restricted" })},
		{"single-numa-node, pod scope", kubeletConfigHeader + "topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n",
			with(func(s *kubeletSettings) { s.TopologyManagerPolicy, s.TopologyManagerScope = "single-numa-node", "pod" })},
		{"static CPU manager with reserved CPUs", kubeletConfigHeader + "cpuManagerPolicy: static\nreservedSystemCPUs: 0-1,6\n",
			with(func(s *kubeletSettings) { s.CPUManagerPolicy, s.ReservedSystemCPUs = "static", cpuset.New(0, 1, 6) })},
		{"options", kubeletConfigHeader + "topologyManagerPolicyOptions:\n  prefer-closest-numa-nodes: \"true\"\n  max-allowable-numa-nodes: \"8\"\n",
			with(func(s *kubeletSettings) { s.PreferClosestNUMANodes, s.MaxAllowableNUMANodes = true, 8 })},
		{"prefer-closest-numa-nodes false", kubeletConfigHeader + "topologyManagerPolicyOptions:\n  prefer-closest-numa-nodes: \"false\"\n", defaults},
		{"max-allowable-numa-nodes above 64 means 64 (NUMA IDs are below 64)",
			kubeletConfigHeader + "topologyManagerPolicyOptions:\n  max-allowable-numa-nodes: \"1024\"\n",
			with(func(s *kubeletSettings) { s.MaxAllowableNUMANodes = 64 })},
		{"unknown options are ignored", kubeletConfigHeader + "topologyManagerPolicyOptions:\n  some-future-option: \"true\"\n", defaults},
		{"kubeadm's file", kubeadmKubeletConfig, kubeletSettings{TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "pod",
			CPUManagerPolicy: "static", PreferClosestNUMANodes: true, MaxAllowableNUMANodes: 16, ReservedSystemCPUs: cpuset.New(0, 8)}},
		{"JSON", `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","topologyManagerPolicy":"restricted","cpuManagerPolicy":"static"}`,
			with(func(s *kubeletSettings) { s.TopologyManagerPolicy, s.CPUManagerPolicy = "restricted", "static" })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseKubeletConfig([]byte(tc.file))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b cpuset.CPUSet) bool { return a.String() == b.String() })); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseKubeletConfigRefusesWhatTheKubeletRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		// want are substrings of the error: the field and the value.
		want []string
	}{
		{"unknown policy", kubeletConfigHeader + "topologyManagerPolicy: SingleNUMANode\n", []string{"topologyManagerPolicy", `"SingleNUMANode"`}},
		{"unknown scope", kubeletConfigHeader + "topologyManagerScope: node\n", []string{"topologyManagerScope", `"node"`}},
		{"unknown CPU manager policy", kubeletConfigHeader + "cpuManagerPolicy: Static\n", []string{"cpuManagerPolicy", `"Static"`}},
		{"prefer-closest-numa-nodes not a boolean", kubeletConfigHeader + "topologyManagerPolicyOptions:\n  prefer-closest-numa-nodes: \"yes\"\n",
			[]string{"topologyManagerPolicyOptions.prefer-closest-numa-nodes", `"yes"`}},
		{"max-allowable-numa-nodes not a number", kubeletConfigHeader + "topologyManagerPolicyOptions:\n  max-allowable-numa-nodes: \"many\"\n",
			[]string{"topologyManagerPolicyOptions.max-allowable-numa-nodes", `"many"`}},
		{"max-allowable-numa-nodes below 8", kubeletConfigHeader + "topologyManagerPolicyOptions:\n  max-allowable-numa-nodes: \"4\"\n",
			[]string{"topologyManagerPolicyOptions.max-allowable-numa-nodes", "4 is less than 8"}},
		{"reservedSystemCPUs not a CPU list", kubeletConfigHeader + "reservedSystemCPUs: 0-x\n", []string{"reservedSystemCPUs", `"0-x"`}},
		{"options not a map", kubeletConfigHeader + "topologyManagerPolicyOptions: [a]\n", []string{"topologyManagerPolicyOptions"}},
		{"policy not a string", kubeletConfigHeader + "topologyManagerPolicy: {a: b}\n", []string{"topologyManagerPolicy"}},
		{"another kind", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", []string{`kind "KubeProxyConfiguration"`}},
		{"no kind", "topologyManagerPolicy: restricted\n", []string{`kind ""`, `apiVersion ""`}},
		{"another version", "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", []string{`apiVersion "kubelet.config.k8s.io/v1alpha1"`}},
		{"not YAML", "\t{[", []string{"decode"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseKubeletConfig([]byte(tc.file))
			if err == nil {
				t.Fatal("parse succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestReadKubeletConfigNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := readKubeletConfig(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: error %v, want one naming %s", err, missing)
	}
	bad := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(bad, []byte(kubeletConfigHeader+"cpuManagerPolicy: dynamic\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readKubeletConfig(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `cpuManagerPolicy: "dynamic"`) {
		t.Errorf("bad file: error %v, want one naming %s and the field", err, bad)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(kubeletConfigHeader+"# "+strings.Repeat("x", maxKubeletConfigBytes)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readKubeletConfig(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized file: error %v, want one saying it is too large", err)
	}
}

// FuzzParseKubeletConfig: the parser never panics, and what it accepts always makes an inventory
// the annotations package accepts.
func FuzzParseKubeletConfig(f *testing.F) {
	f.Add([]byte(kubeadmKubeletConfig))
	f.Add([]byte(kubeletConfigHeader))
	f.Add([]byte(kubeletConfigHeader + "topologyManagerPolicyOptions:\n  max-allowable-numa-nodes: \"99999999999999999999\"\n"))
	f.Add([]byte(kubeletConfigHeader + "reservedSystemCPUs: 0-4294967296\n"))
	f.Add([]byte(kubeletConfigHeader + "reservedSystemCPUs: 0-+4294967296,7\n"))
	f.Add([]byte(`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","topologyManagerPolicyOptions":{"prefer-closest-numa-nodes":"1"}}`))
	nodes := []numaNode{{ID: 0, CPUs: cpuset.New(0, 1, 2, 3)}, {ID: 1, CPUs: cpuset.New(4, 5, 6, 7)}}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseKubeletConfig(data)
		if err != nil {
			return
		}
		inv := annotations.Inventory{GPUs: []annotations.GPU{}, Kubelet: kubeletTopology(s, nodes, kubeletCPUs{Allocatable: cpuset.New(), Exclusive: cpuset.New(5)}, true)}
		if _, err := annotations.EncodeInventory(inv); err != nil {
			t.Fatalf("settings %+v make an inventory the contract refuses: %v", s, err)
		}
	})
}
