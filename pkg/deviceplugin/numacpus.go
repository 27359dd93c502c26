package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/cpuset"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// maxNUMANodes is how many NUMA nodes the kubelet's topology bitmask (and the inventory) holds:
// IDs 0 to 63.
const maxNUMANodes = 64

// numaNode is one NUMA node as sysfs shows it.
type numaNode struct {
	ID   int
	CPUs cpuset.CPUSet
	// Distances is the node's row of <root>/devices/system/node/node<N>/distance, indexed by NUMA
	// node ID as the kubelet reads it; nil when the file is not there.
	Distances []int
}

// readNUMANodes reads the NUMA nodes and their CPUs from sysfs under root (as the kubelet's
// cadvisor does): <root>/devices/system/node/node<N>/cpulist and .../distance. A kernel without
// NUMA support has no node folder; the machine is then one NUMA node 0 holding
// <root>/devices/system/cpu/online. The result is sorted by ID.
func readNUMANodes(root string) ([]numaNode, error) {
	dir := filepath.Join(root, "devices", "system", "node")
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read NUMA nodes: %w", err)
	}
	var nodes []numaNode
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "node")
		if !ok {
			continue
		}
		id, err := strconv.Atoi(rest)
		if err != nil || strconv.Itoa(id) != rest {
			continue // not node<N> (e.g. "node_foo")
		}
		if id < 0 || id >= maxNUMANodes {
			return nil, fmt.Errorf("read NUMA nodes: %s: NUMA node ID %d is not in 0..%d", dir, id, maxNUMANodes-1)
		}
		n := numaNode{ID: id}
		if n.CPUs, err = readCPUList(filepath.Join(dir, e.Name(), "cpulist")); err != nil {
			return nil, fmt.Errorf("read NUMA nodes: %w", err)
		}
		if n.Distances, err = readDistances(filepath.Join(dir, e.Name(), "distance")); err != nil {
			return nil, fmt.Errorf("read NUMA nodes: %w", err)
		}
		nodes = append(nodes, n)
	}
	if len(nodes) > 0 {
		slices.SortFunc(nodes, func(a, b numaNode) int { return a.ID - b.ID })
		return nodes, nil
	}
	online := filepath.Join(root, "devices", "system", "cpu", "online")
	cpus, err := readCPUList(online)
	if err != nil {
		return nil, fmt.Errorf("read NUMA nodes: no node<N> folder in %s, and the CPUs are unknown: %w", dir, err)
	}
	return []numaNode{{ID: 0, CPUs: cpus}}, nil
}

// readCPUList reads a kernel CPU list ("0-3,8-11", or empty) from a file.
func readCPUList(path string) (cpuset.CPUSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return cpuset.New(), err
	}
	set, err := parseCPUList(string(b))
	if err != nil {
		return cpuset.New(), fmt.Errorf("%s: %q is not a CPU list: %w", path, strings.TrimSpace(string(b)), err)
	}
	return set, nil
}

// maxCPUID bounds the CPU IDs of a CPU list (Linux allows at most 8192 CPUs on x86, fewer
// elsewhere): cpuset.Parse adds every ID of a range one by one, so "0-4294967295", or many large
// ranges, would take all memory or time.
const maxCPUID = 1<<16 - 1

// parseCPUList parses a kernel CPU list ("0-3,8-11"), refusing IDs above maxCPUID and lists whose
// ranges add up to more than maxCPUID+1 IDs.
func parseCPUList(s string) (cpuset.CPUSet, error) {
	s = strings.TrimSpace(s)
	total := 0
	for _, part := range strings.Split(s, ",") {
		bounds := strings.SplitN(part, "-", 2)
		var ns [2]int
		for i, f := range bounds {
			n, err := strconv.Atoi(f) // as cpuset.Parse reads it ("+7" too)
			if err != nil {
				break // cpuset.Parse says what is wrong
			}
			if n > maxCPUID {
				return cpuset.New(), fmt.Errorf("CPU %d is above %d", n, maxCPUID)
			}
			ns[i] = n
		}
		if len(bounds) == 2 && ns[1] > ns[0] {
			total += ns[1] - ns[0]
		}
		if total++; total > maxCPUID+1 {
			return cpuset.New(), fmt.Errorf("more than %d CPUs", maxCPUID+1)
		}
	}
	return cpuset.Parse(s)
}

// readDistances reads a NUMA node's distance row; a missing file is no row.
func readDistances(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fields := strings.Fields(string(b))
	if len(fields) > maxNUMANodes {
		return nil, fmt.Errorf("%s: %d distances, more than %d", path, len(fields), maxNUMANodes)
	}
	var row []int
	for _, f := range fields {
		d, err := strconv.Atoi(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%s: distance %q is not a non-negative integer", path, f)
		}
		row = append(row, d)
	}
	return row, nil
}

// podResourcesCPUs is the part of the kubelet's PodResources API the CPU counts come from.
type podResourcesCPUs interface {
	podResourcesLister
	GetAllocatableResources(ctx context.Context, in *podresourcesapi.AllocatableResourcesRequest, opts ...grpc.CallOption) (*podresourcesapi.AllocatableResourcesResponse, error)
}

var _ podResourcesCPUs = podresourcesapi.PodResourcesListerClient(nil)

// kubeletCPUs is what the kubelet's PodResources API says about CPUs.
type kubeletCPUs struct {
	// Allocatable are the CPUs the CPU manager may give exclusively (empty under policy none).
	Allocatable cpuset.CPUSet
	// Exclusive are the CPUs containers hold exclusively now.
	Exclusive cpuset.CPUSet
	// Pods are the exclusive CPUs of each pod by UID, from the kubelet's CPU manager checkpoint
	// (cpucheckpoint.go); nil when it is not read. Their CPUs count as Exclusive too.
	Pods map[string]cpuset.CPUSet
}

// readKubeletCPUs asks the kubelet for its allocatable CPUs and every container's exclusive ones.
func readKubeletCPUs(ctx context.Context, client podResourcesCPUs) (kubeletCPUs, error) {
	alloc, err := client.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return kubeletCPUs{}, fmt.Errorf("pod resources: allocatable CPUs: %w", err)
	}
	list, err := client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return kubeletCPUs{}, fmt.Errorf("pod resources: list: %w", err)
	}
	var held []int
	for _, pod := range list.GetPodResources() {
		for _, c := range pod.GetContainers() {
			held = appendCPUs(held, c.GetCpuIds())
		}
	}
	return kubeletCPUs{Allocatable: cpuset.New(appendCPUs(nil, alloc.GetCpuIds())...), Exclusive: cpuset.New(held...)}, nil
}

func appendCPUs(dst []int, ids []int64) []int {
	for _, id := range ids {
		if id >= 0 && id <= int64(^uint32(0)>>1) {
			dst = append(dst, int(id))
		}
	}
	return dst
}

// kubeletTopology builds the inventory's kubelet field (with kubelet.pods when cpus.Pods is set). A NUMA node's reserved CPUs are those of
// its CPUs the kubelet does not count as allocatable when its static CPU manager reports them
// (that covers a reservation made through kubeReserved/systemReserved too), otherwise those in
// reservedSystemCPUs. Its exclusive CPUs are the ones containers hold, reserved ones left out.
// CPUs on no NUMA node sysfs shows are ignored.
func kubeletTopology(s kubeletSettings, nodes []numaNode, cpus kubeletCPUs, deviceTopology bool) *annotations.KubeletTopology {
	all := cpuset.New()
	for _, n := range nodes {
		all = all.Union(n.CPUs)
	}
	reserved := s.ReservedSystemCPUs
	if s.CPUManagerPolicy == annotations.CPUManagerPolicyStatic && cpus.Allocatable.Size() > 0 {
		reserved = all.Difference(cpus.Allocatable)
	}
	k := &annotations.KubeletTopology{
		TopologyManagerPolicy:  s.TopologyManagerPolicy,
		TopologyManagerScope:   s.TopologyManagerScope,
		PreferClosestNUMANodes: s.PreferClosestNUMANodes,
		MaxAllowableNUMANodes:  s.MaxAllowableNUMANodes,
		CPUManagerPolicy:       s.CPUManagerPolicy,
		DeviceTopology:         deviceTopology,
		NUMA:                   make([]annotations.NUMACPUs, 0, len(nodes)),
	}
	exclusive := cpus.Exclusive
	if cpus.Pods != nil {
		exclusive = exclusive.Union(heldCPUs(cpus.Pods))
		k.PodsV, k.Pods = annotations.PodCPUsVersion, podCPUs(cpus.Pods, nodes, reserved)
	}
	for _, n := range nodes {
		r := n.CPUs.Intersection(reserved)
		k.NUMA = append(k.NUMA, annotations.NUMACPUs{
			ID:            n.ID,
			CPUs:          n.CPUs.Size(),
			ReservedCPUs:  r.Size(),
			ExclusiveCPUs: n.CPUs.Intersection(exclusive).Difference(r).Size(),
			Distances:     slices.Clone(n.Distances),
		})
	}
	return k
}
