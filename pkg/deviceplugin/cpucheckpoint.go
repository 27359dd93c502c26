package deviceplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// The kubelet's CPU manager checkpoint (<root-dir>/cpu_manager_state) is the kubelet's own record
// of which exclusive CPUs each container holds. PodResources List shows the CPUs of the containers
// it lists, but not those an init container keeps after it ends (the static policy keeps an init
// container's CPUs the app containers did not reuse for as long as the pod lives), and it names
// pods without their UIDs. The checkpoint has both, so the inventory's kubelet.pods (each pod's
// exclusive CPUs per NUMA node, by UID) comes from it.
//
// Its format is the kubelet's CPUManagerCheckpoint (v2) of k8s.io/kubernetes v1.34
// pkg/kubelet/cm/cpumanager/state/checkpoint.go, read here from its JSON names (the kubelet module
// is not a dependency of the plugin): policyName, defaultCpuSet (the shared pool), entries (pod
// UID -> container name -> CPU list) and a checksum. The checksum is not verified: it is an FNV
// hash of a Go-specific dump of the kubelet's struct, and the kubelet writes the file by an atomic
// rename, so a half-written file is never read. A v1 checkpoint (entries by container ID, from
// kubelets before 1.19, which rewrite it as v2 when they start) cannot name pods and is refused.
//
// Kubelets 1.37 write the v4 checkpoint: the authoritative record moves into "data" (a JSON string
// with its own checksum), and the v2 fields stay beside it, written from the same record at every
// save, for kubelets that can only read v2 (k8s.io/kubernetes v1.37.2, checkpoint.go,
// MarshalCheckpoint). Those fields are what is read here, on 1.34 to 1.37 alike. What v4 adds
// beside them: baselines (CPUs at admission, for in-place resize of exclusive CPUs, alpha and off
// by default) and podEntries (pod-level exclusive CPUs, behind alpha gates), neither of which a
// default kubelet writes.

// cpuCheckpoint is the JSON of the kubelet's CPU manager checkpoint.
type cpuCheckpoint struct {
	PolicyName    string                     `json:"policyName"`
	DefaultCPUSet string                     `json:"defaultCpuSet"`
	Entries       map[string]json.RawMessage `json:"entries,omitempty"`
	Checksum      uint64                     `json:"checksum"`
}

// MaxCPUCheckpointBytes bounds what is read of the checkpoint (a node of 1024 CPUs and 1000
// containers writes well under 1 MiB), and what the copier (--copy-cpu-manager-state) copies.
const MaxCPUCheckpointBytes = 4 << 20

// readCPUCheckpoint reads the checkpoint at path: each pod's exclusive CPUs (every container's,
// init containers' included), by pod UID.
func readCPUCheckpoint(path string) (map[string]cpuset.CPUSet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("CPU manager checkpoint: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxCPUCheckpointBytes+1))
	if err != nil {
		return nil, fmt.Errorf("CPU manager checkpoint %s: %w", path, err)
	}
	if len(data) > MaxCPUCheckpointBytes {
		return nil, fmt.Errorf("CPU manager checkpoint %s: larger than %d bytes", path, MaxCPUCheckpointBytes)
	}
	pods, err := parseCPUCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("CPU manager checkpoint %s: %w", path, err)
	}
	return pods, nil
}

// parseCPUCheckpoint decodes a checkpoint into each pod's exclusive CPUs by UID.
func parseCPUCheckpoint(data []byte) (map[string]cpuset.CPUSet, error) {
	var cp cpuCheckpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return nil, fmt.Errorf("not a CPU manager checkpoint: %w", err)
	}
	switch cp.PolicyName {
	case annotations.CPUManagerPolicyNone, annotations.CPUManagerPolicyStatic:
	default:
		return nil, fmt.Errorf("policyName: %q is not one of none, static", cp.PolicyName)
	}
	if _, err := parseCPUList(cp.DefaultCPUSet); err != nil {
		return nil, fmt.Errorf("defaultCpuSet: %q: %w", cp.DefaultCPUSet, err)
	}
	pods := make(map[string]cpuset.CPUSet, len(cp.Entries))
	total := 0
	for uid, raw := range cp.Entries {
		if uid == "" || len(uid) > maxPodUIDLen {
			return nil, fmt.Errorf("entries: pod UID %q is empty or longer than %d characters", uid, maxPodUIDLen)
		}
		var containers map[string]string
		if err := json.Unmarshal(raw, &containers); err != nil {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				return nil, errors.New("a v1 checkpoint (entries by container ID, no pod UIDs); the kubelet rewrites it as v2 when it starts")
			}
			return nil, fmt.Errorf("entries[%q]: not a map of container name to CPU list: %w", uid, err)
		}
		var ids []int
		for name, list := range containers {
			cpus, err := parseCPUList(list)
			if err != nil {
				return nil, fmt.Errorf("entries[%q][%q]: %q: %w", uid, name, list, err)
			}
			if total += cpus.Size(); total > maxCheckpointCPUs {
				return nil, fmt.Errorf("entries: more than %d CPUs in all", maxCheckpointCPUs)
			}
			ids = append(ids, cpus.List()...)
		}
		set := cpuset.New(ids...)
		if set.Size() > 0 {
			pods[uid] = set
		}
	}
	return pods, nil
}

// maxCheckpointCPUs bounds the CPU IDs of all the checkpoint's lists together (every container of
// a node of 8192 CPUs holding them all, several times over), so that a corrupt file cannot take the
// plugin's time or memory.
const maxCheckpointCPUs = 1 << 17

// maxPodUIDLen bounds a pod UID (the API server's are 36 characters; the inventory refuses longer
// than 128).
const maxPodUIDLen = 128

// podCPUs is the inventory's kubelet.pods: each pod's exclusive CPUs per NUMA node (indexed like
// nodes), reserved CPUs left out, sorted by UID; a CPU two pods name (the kubelet never does that)
// counts for the first only, so the counts add up to at most each NUMA node's unreserved CPUs.
func podCPUs(pods map[string]cpuset.CPUSet, nodes []numaNode, reserved cpuset.CPUSet) []annotations.PodCPUs {
	uids := make([]string, 0, len(pods))
	for uid := range pods {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	numaOf := map[int]int{}
	for i, n := range nodes {
		for _, cpu := range n.CPUs.UnsortedList() {
			numaOf[cpu] = i
		}
	}
	claimed := map[int]bool{}
	for _, cpu := range reserved.UnsortedList() {
		claimed[cpu] = true
	}
	out := []annotations.PodCPUs{}
	for _, uid := range uids {
		p := annotations.PodCPUs{UID: uid, CPUs: make([]int, len(nodes))}
		total := 0
		for _, cpu := range pods[uid].UnsortedList() {
			if i, ok := numaOf[cpu]; ok && !claimed[cpu] {
				claimed[cpu] = true
				p.CPUs[i]++
				total++
			}
		}
		if total > 0 {
			out = append(out, p)
		}
	}
	return out
}

// heldCPUs is every CPU the checkpoint's pods hold.
func heldCPUs(pods map[string]cpuset.CPUSet) cpuset.CPUSet {
	all := cpuset.New()
	for _, s := range pods {
		all = all.Union(s)
	}
	return all
}
