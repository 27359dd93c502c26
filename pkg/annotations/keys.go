package annotations

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Default names of the resources a container requests.
const (
	// ResourceGPU is the number of distinct cards a container gets.
	ResourceGPU corev1.ResourceName = "nvidia.com/gpu"
	// ResourceGPUMem is the memory in MiB a container wants on each of its cards.
	ResourceGPUMem corev1.ResourceName = "nvidia.com/gpumem"
	// ResourceGPUMemPercentage is the percentage (1-100) of each card's memory a container wants.
	ResourceGPUMemPercentage corev1.ResourceName = "nvidia.com/gpumem-percentage"
	// ResourceGPUCores is the percentage (0-100) of each card's compute a container wants.
	ResourceGPUCores corev1.ResourceName = "nvidia.com/gpucores"
	// ResourceMIGRoute is the marker the webhook gives, at 0, to a container that asks for MIG
	// instances: kube-scheduler calls an extender only for pods naming one of the extender's
	// managedResources, which are exact names (no list made in advance holds every card's MIG
	// profiles), and the chart lists this one, ignored by kube-scheduler's own fit. No node advertises
	// it, so the kubelet drops it at admission and no device plugin is asked for it — unlike
	// nvidia.com/gpu: 0, which the kubelet refuses on a node whose cards are all in MIG mode ("no
	// healthy devices present").
	ResourceMIGRoute corev1.ResourceName = "cardinal.io/mig"
	// ResourceHostRoute is the marker the webhook gives, at 0, to the first app container of a pod
	// that asks for no GPU, MIG instance or share of a card when the operator routes such pods
	// through Cardinal (the chart's webhook.cpuOnlyPods): kube-scheduler calls an extender only for
	// pods naming one of its managedResources, and the chart lists this one, ignored by
	// kube-scheduler's own fit, on an extender entry of its own that is ignorable and does not bind,
	// so such a pod still schedules while the extender is down. No node advertises it, so the kubelet
	// drops it at admission and no device plugin is asked for it.
	ResourceHostRoute corev1.ResourceName = "cardinal.io/host"
)

// HostRouted reports whether some container of the pod, init containers included, names
// ResourceHostRoute in its limits or requests, whatever the value.
func HostRouted(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if _, ok := cs[i].Resources.Limits[ResourceHostRoute]; ok {
				return true
			}
			if _, ok := cs[i].Resources.Requests[ResourceHostRoute]; ok {
				return true
			}
		}
	}
	return false
}

// Pod annotations a user writes.
const (
	// UseGPUType is a comma list; a card's model must contain one entry (case-insensitive).
	UseGPUType = "nvidia.com/use-gputype"
	// NoUseGPUType is a comma list; a card's model must contain none of the entries.
	NoUseGPUType = "nvidia.com/nouse-gputype"
	// UseGPUUUID is a comma list; a card's UUID must equal one entry.
	UseGPUUUID = "nvidia.com/use-gpuuuid"
	// NoUseGPUUUID is a comma list; a card's UUID must equal none of the entries.
	NoUseGPUUUID = "nvidia.com/nouse-gpuuuid"
	// NUMABind set to "true" puts all cards of one container on one NUMA node.
	NUMABind = "nvidia.com/numa-bind"
	// NodePolicy overrides the scheduler's default node policy for this pod.
	NodePolicy = "cardinal.io/node-policy"
	// GPUPolicy overrides the scheduler's default card policy for this pod.
	GPUPolicy = "cardinal.io/gpu-policy"
)

// Annotations only Cardinal writes.
const (
	// GPUInventory is on a Node, written by the device plugin: the node's cards (Inventory).
	GPUInventory = "cardinal.io/gpu-inventory"
	// GPUAssignment is on a Pod, written by the extender at bind: the cards of each container (Assignment).
	GPUAssignment = "cardinal.io/gpu-assignment"
	// GPUAllocated is on a Pod, written by the device plugin: the devices the kubelet gave (Allocation).
	GPUAllocated = "cardinal.io/gpu-allocated"
)

// InternalKeys are the annotations only Cardinal's own components may write. A pod created with any of
// them, or changed in them by anyone else, is refused at admission.
var InternalKeys = []string{GPUInventory, GPUAssignment, GPUAllocated}

// UserKeys are the pod annotations a user may write.
var UserKeys = []string{UseGPUType, NoUseGPUType, UseGPUUUID, NoUseGPUUUID, NUMABind, NodePolicy, GPUPolicy, GPULink}

// IsInternal reports whether key is one of InternalKeys.
func IsInternal(key string) bool {
	return slices.Contains(InternalKeys, key)
}

// ResourceNames are the names of the four managed resources. Clusters that already use other names
// configure them; the zero value is not valid, start from DefaultResourceNames.
type ResourceNames struct {
	GPU           corev1.ResourceName
	Mem           corev1.ResourceName
	MemPercentage corev1.ResourceName
	Cores         corev1.ResourceName
}

// DefaultResourceNames returns the v1 default names.
func DefaultResourceNames() ResourceNames {
	return ResourceNames{GPU: ResourceGPU, Mem: ResourceGPUMem, MemPercentage: ResourceGPUMemPercentage, Cores: ResourceGPUCores}
}

// All returns the four names, GPU first.
func (n ResourceNames) All() []corev1.ResourceName {
	return []corev1.ResourceName{n.GPU, n.Mem, n.MemPercentage, n.Cores}
}

// Validate checks that every name is set, qualified (domain/name), distinct, and not among the MIG
// resources (<domain of the gpu resource>/mig-…), which would read it as a MIG profile.
func (n ResourceNames) Validate() error {
	seen := map[corev1.ResourceName]bool{}
	for i, r := range n.All() {
		field := [...]string{"gpu", "gpumem", "gpumem-percentage", "gpucores"}[i]
		switch {
		case r == "":
			return fmt.Errorf("resource name for %s is empty", field)
		case !strings.Contains(string(r), "/") || len(validation.IsQualifiedName(string(r))) > 0:
			return fmt.Errorf("resource name for %s: %q is not a qualified name (domain/name)", field, r)
		case seen[r]:
			return fmt.Errorf("resource name for %s: %q is used twice", field, r)
		case strings.HasPrefix(string(r), n.migPrefix()):
			return fmt.Errorf("resource name for %s: %q is among the MIG resources (%s<profile>)", field, r, n.migPrefix())
		}
		seen[r] = true
	}
	return nil
}
