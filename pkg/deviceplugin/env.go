package deviceplugin

import (
	"slices"
	"strconv"
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Environment variables Allocate sets.
const (
	// EnvVisibleDevices lists the container's card UUIDs for the NVIDIA container runtime.
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvMemoryLimitPrefix + i is HAMi-core's memory limit of the container's i-th card, "<MiB>m".
	EnvMemoryLimitPrefix = "CUDA_DEVICE_MEMORY_LIMIT_"
	// EnvSMLimit is HAMi-core's compute limit in percent, for every card of the container.
	EnvSMLimit = "CUDA_DEVICE_SM_LIMIT"
	// EnvMPSMemoryLimit is NVIDIA MPS's per-device pinned memory limit, "0=<MiB>M,1=<MiB>M".
	EnvMPSMemoryLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	// EnvMPSThreadPercentage is NVIDIA MPS's active thread percentage.
	EnvMPSThreadPercentage = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
)

// containerEnv builds the container's environment. Cards are numbered as CUDA will see them: in the
// order of NVIDIA_VISIBLE_DEVICES. Limits are set only for containers that asked for a share of their
// cards (memory or cores): whole-card containers get the visible devices alone.
func containerEnv(t *deviceTable, o outcome) map[string]string {
	var uuids []string
	for _, id := range o.IDs {
		if u := t.card(id).UUID; !slices.Contains(uuids, u) {
			uuids = append(uuids, u)
		}
	}
	env := map[string]string{EnvVisibleDevices: strings.Join(uuids, ",")}
	if o.Owner == nil {
		return env
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
		if o.Exact && o.Owner.Assigned != nil {
			for _, d := range o.Owner.Assigned.Devices {
				if d.UUID == u {
					mem, cores = d.MemoryMiB, d.Cores
				}
			}
		}
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
