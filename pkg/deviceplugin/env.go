package deviceplugin

import (
	"slices"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Environment variables Allocate sets.
const (
	// EnvVisibleDevices lists the container's card UUIDs for the NVIDIA container runtime (or, with
	// other device-list strategies than envvar, the volume-mounts folder or void).
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvCUDADeviceOrder makes CUDA number the visible cards in PCI bus order (its default puts the
	// fastest first), the order NVIDIA_VISIBLE_DEVICES and the limit variables use.
	EnvCUDADeviceOrder = "CUDA_DEVICE_ORDER"
	// EnvMemoryLimitPrefix + i is HAMi-core's memory limit of the container's i-th card, "<MiB>m".
	EnvMemoryLimitPrefix = "CUDA_DEVICE_MEMORY_LIMIT_"
	// EnvSMLimit is HAMi-core's compute limit in percent, for every card of the container.
	EnvSMLimit = "CUDA_DEVICE_SM_LIMIT"
	// EnvMPSMemoryLimit is NVIDIA MPS's per-device pinned memory limit, "0=<MiB>M,1=<MiB>M".
	EnvMPSMemoryLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	// EnvMPSThreadPercentage is NVIDIA MPS's active thread percentage.
	EnvMPSThreadPercentage = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
)

// containerResponse is a served container's Allocate response: its cards, named to the runtime as
// the device-list strategies say (devicelist.go), and its environment.
func containerResponse(t *deviceTable, o outcome, dl DeviceListConfig, sc SharingConfig) *pluginapi.ContainerAllocateResponse {
	uuids := t.visibleUUIDs(o.IDs)
	cards := make([]listedCard, len(uuids))
	for i, u := range uuids {
		if c, ok := t.byUUID[u]; ok {
			cards[i] = listedCard{UUID: u, Index: t.cards[c].Index}
		} else {
			cards[i] = listedCard{UUID: u, MIG: true}
		}
	}
	r := &pluginapi.ContainerAllocateResponse{Envs: containerEnv(t, o, uuids)}
	key := ""
	if o.Owner != nil {
		key = cdiAnnotationKey(string(o.Owner.Pod.UID), o.Owner.Name)
		r.Annotations = map[string]string{AllocatedForAnnotation: string(o.Owner.Pod.UID) + "/" + o.Owner.Name}
	}
	listDevices(dl, cards, key).apply(r)
	if shared(o) {
		sc.sharedResponse(r, key)
	}
	return r
}

// shared reports whether a served container shares its cards: a container of a pod Cardinal
// scheduled that asked for memory or cores. Its node's sharing mode applies to it; whole-card
// containers get their cards alone and nothing of the mode.
func shared(o outcome) bool {
	if o.Owner == nil || !o.Owner.Pod.HasAssignment {
		return false
	}
	req, ok := o.Owner.Pod.Requests[o.Owner.Name]
	return ok && req.Shared
}

// visibleUUIDs are the cards of a container's IDs, each once, in the order CUDA numbers them: the
// container runtime exposes the cards, and CUDA (told CUDA_DEVICE_ORDER=PCI_BUS_ID) numbers them by
// PCI bus id, which is NVML's index order too, not in the kubelet's order of IDs. MIG instances are
// named by their MIG UUIDs (MIG-…), after any cards, by parent in that order, then in NVML's order
// on the parent.
func (t *deviceTable) visibleUUIDs(ids []string) []string {
	var uuids []string
	var migs []*migDevice
	for _, id := range ids {
		d := t.devices[id]
		if d.MIG != nil {
			if !slices.Contains(migs, d.MIG) {
				migs = append(migs, d.MIG)
			}
			continue
		}
		if u := t.cards[d.Card].UUID; !slices.Contains(uuids, u) {
			uuids = append(uuids, u)
		}
	}
	t.cudaOrder(uuids)
	slices.SortStableFunc(migs, func(a, b *migDevice) int {
		if a.Parent != b.Parent {
			return t.cudaCompare(a.Parent, b.Parent)
		}
		return a.index - b.index
	})
	for _, m := range migs {
		uuids = append(uuids, m.Instance.UUID)
	}
	return uuids
}

// containerEnv builds the container's environment but NVIDIA_VISIBLE_DEVICES (listDevices sets
// it), given its cards in CUDA's order (visibleUUIDs): CUDA_DEVICE_MEMORY_LIMIT_<i> and
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT's i=… name the i-th of them, whatever the device-list strategy.
// Limits are set only for containers that asked for a share of their cards (memory or cores):
// whole-card containers get CUDA_DEVICE_ORDER alone.
//
// Limits follow the request of the container that receives the response, never the assignment: an
// ID an init container hands on is reserved at the larger of the two containers' requests, so the
// assignment's figures are not this container's. So the one core limit (CUDA_DEVICE_SM_LIMIT and
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE cover every card) is the container's own cores, which every
// card reserves at least (checkReservation; a substitute card reserves the request itself): it
// never exceeds the smallest reservation among the container's cards.
func containerEnv(t *deviceTable, o outcome, uuids []string) map[string]string {
	env := map[string]string{EnvCUDADeviceOrder: "PCI_BUS_ID"}
	if o.Owner == nil || !o.Owner.Pod.HasAssignment {
		return env // a pod Cardinal did not schedule: whole cards, no limits
	}
	req, ok := o.Owner.Pod.Requests[o.Owner.Name]
	if !ok || !req.Shared {
		return env
	}
	cores := req.CoresOn()
	var mps []string
	for i, u := range uuids {
		c := &t.cards[t.byUUID[u]]
		mem := req.MemoryOn(c.MemoryMiB)
		if mem > 0 && mem < c.MemoryMiB {
			env[EnvMemoryLimitPrefix+strconv.Itoa(i)] = strconv.FormatInt(mem, 10) + "m"
			mps = append(mps, strconv.Itoa(i)+"="+strconv.FormatInt(mem, 10)+"M")
		}
	}
	if len(mps) > 0 {
		env[EnvMPSMemoryLimit] = strings.Join(mps, ",")
	}
	if cores > 0 && cores < 100 {
		env[EnvSMLimit] = strconv.Itoa(cores)
		env[EnvMPSThreadPercentage] = strconv.Itoa(cores)
	}
	return env
}

// allocationRecord is the record one served container adds to its pod.
func allocationRecord(name string, ids []string, source string) annotations.ContainerAllocation {
	return annotations.ContainerAllocation{Name: name, IDs: slices.Clone(ids), Source: source}
}
