package deviceplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/cpuset"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// writeTree writes files (path relative to root -> content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var cpusetEqual = cmp.Comparer(func(a, b cpuset.CPUSet) bool { return a.String() == b.String() })

func TestReadNUMANodes(t *testing.T) {
	root := t.TempDir()
	// Two NUMA nodes of 8 CPUs with SMT siblings 8 apart, as a 2-socket machine numbers them, plus
	// the files sysfs has beside the node folders, and a memory-only node 2.
	writeTree(t, root, map[string]string{
		"devices/system/node/online":         "0-2\n",
		"devices/system/node/possible":       "0-2\n",
		"devices/system/node/has_cpu":        "0-1\n",
		"devices/system/node/power/async":    "disabled\n",
		"devices/system/node/node1/cpulist":  "4-7,12-15\n",
		"devices/system/node/node1/distance": "21 10 30\n",
		"devices/system/node/node0/cpulist":  "0-3,8-11\n",
		"devices/system/node/node0/distance": "10 21 30\n",
		"devices/system/node/node2/cpulist":  "\n",
		"devices/system/cpu/online":          "0-15\n",
	})
	got, err := readNUMANodes(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []numaNode{
		{ID: 0, CPUs: cpuset.New(0, 1, 2, 3, 8, 9, 10, 11), Distances: []int{10, 21, 30}},
		{ID: 1, CPUs: cpuset.New(4, 5, 6, 7, 12, 13, 14, 15), Distances: []int{21, 10, 30}},
		{ID: 2, CPUs: cpuset.New()},
	}
	if diff := cmp.Diff(want, got, cpusetEqual); diff != "" {
		t.Errorf("NUMA nodes (-want +got):\n%s", diff)
	}
}

func TestReadNUMANodesWithoutNUMAIsOneNode(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"devices/system/cpu/online": "0-5\n"})
	got, err := readNUMANodes(root)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]numaNode{{ID: 0, CPUs: cpuset.New(0, 1, 2, 3, 4, 5)}}, got, cpusetEqual); diff != "" {
		t.Errorf("NUMA nodes (-want +got):\n%s", diff)
	}
}

func TestReadNUMANodesErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"nothing there", map[string]string{}, "the CPUs are unknown"},
		{"bad cpulist", map[string]string{"devices/system/node/node0/cpulist": "0-\n"}, `node0/cpulist: "0-" is not a CPU list`},
		{"missing cpulist", map[string]string{"devices/system/node/node0/distance": "10\n"}, "node0/cpulist"},
		{"bad distance", map[string]string{"devices/system/node/node0/cpulist": "0\n", "devices/system/node/node0/distance": "10 far\n"}, `distance "far"`},
		{"ID beyond the kubelet's bitmask", map[string]string{"devices/system/node/node64/cpulist": "0\n"}, "NUMA node ID 64 is not in 0..63"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, tc.files)
			_, err := readNUMANodes(root)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// fakePodResources is the kubelet's PodResources API with settable answers.
type fakePodResources struct {
	mu          sync.Mutex
	allocatable []int64
	// containers holds each container's exclusive CPUs, by pod.
	containers map[string][][]int64
	err        error
	calls      int
}

func (f *fakePodResources) set(allocatable []int64, containers map[string][][]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allocatable, f.containers = allocatable, containers
}

func (f *fakePodResources) GetAllocatableResources(context.Context, *podresourcesapi.AllocatableResourcesRequest, ...grpc.CallOption) (*podresourcesapi.AllocatableResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return &podresourcesapi.AllocatableResourcesResponse{CpuIds: f.allocatable}, nil
}

func (f *fakePodResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest, ...grpc.CallOption) (*podresourcesapi.ListPodResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	resp := &podresourcesapi.ListPodResourcesResponse{}
	for pod, cs := range f.containers {
		pr := &podresourcesapi.PodResources{Name: pod, Namespace: "default"}
		for i, cpus := range cs {
			pr.Containers = append(pr.Containers, &podresourcesapi.ContainerResources{Name: "c" + string(rune('0'+i)), CpuIds: cpus})
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	return resp, nil
}

var _ podResourcesCPUs = (*fakePodResources)(nil)

// twoNUMA is a machine of two NUMA nodes: CPUs 0-7 on node 0, 8-15 on node 1.
var twoNUMA = []numaNode{{ID: 0, CPUs: cpuset.New(0, 1, 2, 3, 4, 5, 6, 7), Distances: []int{10, 21}}, {ID: 1, CPUs: cpuset.New(8, 9, 10, 11, 12, 13, 14, 15), Distances: []int{21, 10}}}

func TestKubeletTopologyCountsCPUsPerNUMANode(t *testing.T) {
	static := kubeletSettings{TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "container", CPUManagerPolicy: "static"}
	for _, tc := range []struct {
		name        string
		settings    kubeletSettings
		allocatable []int64
		containers  map[string][][]int64
		// want is (reserved, exclusive) for NUMA nodes 0 and 1.
		want [2][2]int
	}{
		{
			// Allocatable leaves out 0 and 8: reserved 1 + 1. Pod a holds 1-3 (node 0) and 9-10
			// (node 1), pod b 11 and 12 (node 1): exclusive 3 + 4.
			name: "static: reserved are the CPUs not allocatable", settings: static,
			allocatable: []int64{1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15},
			containers:  map[string][][]int64{"a": {{1, 2, 3}, {9, 10}}, "b": {{11, 12}}},
			want:        [2][2]int{{1, 3}, {1, 4}},
		},
		{
			// A reservation through kubeReserved (no reservedSystemCPUs): the kubelet took 0-1; the
			// difference still finds them.
			name: "static: a reservation without reservedSystemCPUs", settings: static,
			allocatable: []int64{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
			want:        [2][2]int{{2, 0}, {0, 0}},
		},
		{
			// The same CPUs listed twice (an init container's CPUs reused by an app container)
			// count once; a CPU on no NUMA node sysfs shows (99) is ignored: exclusive 2 + 0.
			name: "static: CPUs held twice count once", settings: static,
			allocatable: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 99},
			containers:  map[string][][]int64{"a": {{4, 5}, {5, 4, 99}}},
			want:        [2][2]int{{1, 2}, {0, 0}},
		},
		{
			// Policy none: the kubelet reports no allocatable CPUs; reservedSystemCPUs (0, 8) say
			// what is reserved, and nothing is exclusive.
			name:     "none: reserved from reservedSystemCPUs",
			settings: kubeletSettings{TopologyManagerPolicy: "best-effort", TopologyManagerScope: "pod", CPUManagerPolicy: "none", ReservedSystemCPUs: cpuset.New(0, 8)},
			want:     [2][2]int{{1, 0}, {1, 0}},
		},
		{
			// Static with an empty answer (an older kubelet): fall back to reservedSystemCPUs.
			name:     "static without allocatable CPUs: reserved from reservedSystemCPUs",
			settings: kubeletSettings{TopologyManagerPolicy: "restricted", TopologyManagerScope: "container", CPUManagerPolicy: "static", ReservedSystemCPUs: cpuset.New(15)},
			want:     [2][2]int{{0, 0}, {1, 0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := &fakePodResources{}
			pr.set(tc.allocatable, tc.containers)
			cpus, err := readKubeletCPUs(context.Background(), pr)
			if err != nil {
				t.Fatal(err)
			}
			got := kubeletTopology(tc.settings, twoNUMA, cpus, true)
			want := &annotations.KubeletTopology{
				TopologyManagerPolicy: tc.settings.TopologyManagerPolicy, TopologyManagerScope: tc.settings.TopologyManagerScope,
				CPUManagerPolicy: tc.settings.CPUManagerPolicy, DeviceTopology: true,
				NUMA: []annotations.NUMACPUs{
					{ID: 0, CPUs: 8, ReservedCPUs: tc.want[0][0], ExclusiveCPUs: tc.want[0][1], Distances: []int{10, 21}},
					{ID: 1, CPUs: 8, ReservedCPUs: tc.want[1][0], ExclusiveCPUs: tc.want[1][1], Distances: []int{21, 10}},
				},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("kubelet topology (-want +got):\n%s", diff)
			}
			if _, err := annotations.EncodeInventory(annotations.Inventory{GPUs: []annotations.GPU{}, Kubelet: got}); err != nil {
				t.Errorf("the contract refuses it: %v", err)
			}
		})
	}
}

func TestReadKubeletCPUsFailsWithThePodResourcesError(t *testing.T) {
	pr := &fakePodResources{err: errors.New("unknown method GetAllocatableResources")}
	if _, err := readKubeletCPUs(context.Background(), pr); err == nil || !strings.Contains(err.Error(), "allocatable CPUs: unknown method") {
		t.Errorf("error %v, want the PodResources error", err)
	}
}

func TestParseCPUListRefusesHugeLists(t *testing.T) {
	for _, tc := range []struct {
		list string
		want string // "" means it parses
	}{
		{"0-3,8-11", ""},
		{" 0-65535\n", ""},
		{"0-65536", "CPU 65536 is above 65535"},
		{"0-+4294967295", "CPU 4294967295 is above 65535"},
		{"0-60000,0-60000", "more than 65536 CPUs"},
		{"5-3", "invalid range"},
		{"1--5", "invalid range"},
		{"x", "invalid syntax"},
	} {
		_, err := parseCPUList(tc.list)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.list, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one containing %q", tc.list, err, tc.want)
		}
	}
}
