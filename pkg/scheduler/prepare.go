package scheduler

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// PreparePod reads a pod as the extender's filter does (its GPU request, its CPUs, its selector,
// its CPU and memory request, tenant, creation time and priority) and prepares it with d, for
// tools that ask the cache where a pod would go without running the extender (kubectl cardinal
// explain). It returns nil, nil for a pod without GPU requests, unless it carries the marker of a
// CPU-only pod routed through Cardinal (annotations.ResourceHostRoute): that one is prepared with an
// empty request, as filter decides it.
func PreparePod(d *core.Decider, names annotations.ResourceNames, pod *corev1.Pod) (*core.Pod, error) {
	return (&Server{decider: d, names: names}).prepare(pod)
}
