package cluster

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCPUListAndMask(t *testing.T) {
	tests := []struct {
		ids        []int
		n          int
		list, mask string
	}{
		{[]int{0}, 2, "0\n", "00000001\n"},
		{[]int{0, 1, 2, 3, 8, 10, 11}, 16, "0-3,8,10-11\n", "00000d0f\n"},
		// 40 CPUs take two 32-bit words, most significant first: CPU 32 is bit 0 of the first.
		{[]int{7, 32}, 40, "7,32\n", "00000001,00000080\n"},
	}
	for _, tt := range tests {
		if got := cpuList(tt.ids); got != tt.list {
			t.Errorf("cpuList(%v) = %q, want %q", tt.ids, got, tt.list)
		}
		if got := cpuMask(tt.ids, tt.n); got != tt.mask {
			t.Errorf("cpuMask(%v, %d) = %q, want %q", tt.ids, tt.n, got, tt.mask)
		}
	}
}

func TestMachineValidate(t *testing.T) {
	for _, m := range []Machine{
		{NUMANodes: 0, CPUsPerNUMA: 4},
		{NUMANodes: 9, CPUsPerNUMA: 4},                    // more than the topology manager takes
		{NUMANodes: 2, CPUsPerNUMA: 3, ThreadsPerCore: 2}, // half a core
		{NUMANodes: 3, CPUsPerNUMA: 4, NUMAPerSocket: 2},  // half a socket
		{NUMANodes: 2, CPUsPerNUMA: 0},
	} {
		if err := m.validate(); err == nil {
			t.Errorf("%+v: validate() = nil, want an error", m)
		}
	}
	if got, want := (Machine{NUMANodes: 2, CPUsPerNUMA: 1}).withDefaults().MemoryMiBPerNUMA, hostMemoryMiB()/2; got != want || want < 1 {
		t.Errorf("default MiB per NUMA node = %d, want the host's %d MiB split in 2 = %d", got, hostMemoryMiB(), want)
	}
	if err := (Machine{NUMANodes: 4, CPUsPerNUMA: 4, ThreadsPerCore: 2, NUMAPerSocket: 2}).validate(); err != nil {
		t.Errorf("4x4 SMT2 2 NUMA per socket: %v", err)
	}
}

// readMachineFile reads a file of the synthetic tree, following its symlinks as sysfs readers do.
func readMachineFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestWriteMachineTwoNUMAByEight(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "machine")
	mounts, err := writeMachine(Machine{NUMANodes: 2, CPUsPerNUMA: 8, MemoryMiBPerNUMA: 4096}, dir)
	if err != nil {
		t.Fatal(err)
	}
	wantMounts := []machineMount{
		{filepath.Join(dir, "cpu"), "/sys/devices/system/cpu"},
		{filepath.Join(dir, "node"), "/sys/devices/system/node"},
		{filepath.Join(dir, "cpuinfo"), "/proc/cpuinfo"},
	}
	if diff := cmp.Diff(wantMounts, mounts, cmp.AllowUnexported(machineMount{})); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	// What cadvisor reads, by the paths it reads them through (node*/cpu* are symlinks).
	for name, want := range map[string]string{
		"cpu/online":                                         "0-15",
		"node/online":                                        "0-1",
		"node/node0/cpulist":                                 "0-7",
		"node/node1/cpulist":                                 "8-15",
		"node/node1/cpumap":                                  "0000ff00",
		"node/node0/distance":                                "10 21",
		"node/node1/distance":                                "21 10",
		"node/node1/cpu9/topology/core_id":                   "9",
		"node/node1/cpu9/topology/physical_package_id":       "1",
		"node/node0/cpu7/topology/physical_package_id":       "0",
		"node/node0/hugepages/hugepages-2048kB/nr_hugepages": "0",
		"cpu/cpu9/node1/cpulist":                             "8-15",     // and back
		"cpu/cpu9/cache/index3/shared_cpu_map":               "0000ff00", // L3 per NUMA node
		"cpu/cpu9/cache/index3/id":                           "1",
		"cpu/cpu9/cache/index2/shared_cpu_list":              "9", // L2 per core
	} {
		if got := readMachineFile(t, dir, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got := readMachineFile(t, dir, "node/node1/meminfo"); !strings.HasPrefix(got, "Node 1 MemTotal:       4194304 kB") {
		t.Errorf("node1 meminfo starts %q, want 4 GiB MemTotal", got)
	}
	// cadvisor counts processors, distinct "physical id" (sockets) and distinct "core id" lines.
	info := readMachineFile(t, dir, "cpuinfo")
	for field, want := range map[string]int{"processor": 16, "physical id": 2, "core id": 16} {
		re := regexp.MustCompile(`(?m)^` + field + `\s*:\s*([0-9]+)$`)
		distinct := map[string]bool{}
		for _, m := range re.FindAllStringSubmatch(info, -1) {
			distinct[m[1]] = true
		}
		if len(distinct) != want {
			t.Errorf("/proc/cpuinfo: %d distinct %q, want %d", len(distinct), field, want)
		}
	}
	if !regexp.MustCompile(`cpu MHz\s*:\s*[0-9]+\.[0-9]+`).MatchString(info) {
		t.Errorf("/proc/cpuinfo has no cpu MHz cadvisor can parse")
	}
}

func TestWriteMachineFourNUMAByFourWithSMT(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "machine")
	m := Machine{NUMANodes: 4, CPUsPerNUMA: 4, ThreadsPerCore: 2, NUMAPerSocket: 2}
	if _, err := writeMachine(m, dir); err != nil {
		t.Fatal(err)
	}
	// CPU 5: NUMA 1 (CPUs 4-7), core 2 (CPUs 4-5), socket 0 (NUMA 0-1, CPUs 0-7).
	for name, want := range map[string]string{
		"node/node1/cpu5/topology/core_id":              "2",
		"node/node1/cpu5/topology/thread_siblings_list": "4-5",
		"node/node1/cpu5/topology/physical_package_id":  "0",
		"node/node2/cpu8/topology/physical_package_id":  "1",
		"cpu/cpu5/topology/package_cpus_list":           "0-7",
		"node/node1/distance":                           "11 10 21 21",
		"node/node3/distance":                           "21 21 11 10",
		"cpu/smt/active":                                "1",
	} {
		if got := readMachineFile(t, dir, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got, want := m.NUMANodeOf(5), 1; got != want {
		t.Errorf("NUMANodeOf(5) = %d, want %d", got, want)
	}
	if diff := cmp.Diff([]int{12, 13, 14, 15}, m.CPUsOf(3)); diff != "" {
		t.Errorf("CPUsOf(3) (-want +got):\n%s", diff)
	}
}

func TestKubeletSpecResourceManagerConfig(t *testing.T) {
	tests := []struct {
		name    string
		spec    KubeletSpec
		want    map[string]any
		wantErr bool
	}{
		{name: "nothing set keeps the kubelet's defaults", want: map[string]any{}},
		{
			name: "typed fields",
			spec: KubeletSpec{TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "pod", CPUManagerPolicy: "static", ReservedCPUs: "0"},
			want: map[string]any{"topologyManagerPolicy": "single-numa-node", "topologyManagerScope": "pod", "cpuManagerPolicy": "static", "reservedSystemCPUs": "0"},
		},
		{
			name: "static memory manager gets a reservation on NUMA node 0",
			spec: KubeletSpec{MemoryManagerPolicy: "Static"},
			want: map[string]any{
				"memoryManagerPolicy": "Static",
				"systemReserved":      map[string]any{"memory": "64Mi"},
				"reservedMemory":      []any{map[string]any{"numaNode": 0, "limits": map[string]any{"memory": "64Mi"}}},
			},
		},
		{
			name: "static memory manager with the caller's reservation",
			spec: KubeletSpec{MemoryManagerPolicy: "Static", Config: map[string]any{"reservedMemory": []any{}}},
			want: map[string]any{"memoryManagerPolicy": "Static"},
		},
		{
			name: "static CPU manager with a cpu reservation in Config",
			spec: KubeletSpec{CPUManagerPolicy: "static", Config: map[string]any{"kubeReserved": map[string]any{"cpu": "1"}}},
			want: map[string]any{"cpuManagerPolicy": "static"},
		},
		{name: "static CPU manager without reserved CPUs", spec: KubeletSpec{CPUManagerPolicy: "static"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.spec.resourceManagerConfig()
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); !tt.wantErr && diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}
