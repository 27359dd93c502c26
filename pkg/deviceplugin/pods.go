package deviceplugin

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// podEntry is what the plugin keeps of one pod bound to its node, decoded once when the informer
// delivers the pod so that Allocate does no parsing and no API call.
type podEntry struct {
	UID       types.UID
	Namespace string
	Name      string
	// seq orders pods by when this plugin first saw them bound here (order.go).
	seq uint64
	// bound is when the pod was bound (its PodScheduled condition; its creation when it has none), to
	// the second: the order of pods the plugin first saw together in its initial list (listed).
	bound  time.Time
	listed bool
	// created is the pod's creation time (whole seconds): the kubelet's order within one batch of
	// pods it sees at once (order.go).
	created time.Time
	// Pending is true while the pod's phase is Pending: the kubelet has not started it yet.
	Pending bool
	// Gone is true for pods that ended (Succeeded, Failed): the kubelet has freed their devices.
	Gone bool
	// Deleting is true for pods being deleted that have not ended: they hold their devices until the
	// kubelet frees them (the end of their grace period), but are never admitted again.
	Deleting bool
	// Controlled is true when a controller (ownerReference with controller: true) re-creates the pod
	// if it is evicted.
	Controlled bool

	// HasAssignment says the pod carries the assignment annotation; Assignment is nil when it did
	// not decode or names another node (AssignmentErr says why).
	HasAssignment bool
	Assignment    *annotations.Assignment
	AssignmentErr error
	// assignedIDs are the assignment's IDs by container, decoded once (Allocate reads them often).
	assignedIDs map[string][]string

	// Recorded is the allocation record on the pod, by container name.
	Recorded    map[string]annotations.ContainerAllocation
	RecordedErr error

	Selector    annotations.Selector
	SelectorErr error
	// Requests are the GPU containers' requests, by name.
	Requests map[string]annotations.ContainerRequest
	// Order is the order of the pod's GPU containers (init containers first), with their counts:
	// the order the kubelet allocates them in. A container that names several managed resources
	// (cards and MIG instances, or two MIG profiles; admission refuses it) is listed once per
	// resource, with Mixed saying so: it is never served.
	Order []containerCount
}

type containerCount struct {
	Name string
	// Resource is the managed resource the container takes devices of (the GPU resource or a MIG
	// resource); Count how many.
	Resource corev1.ResourceName
	Count    int
	// Mixed is why the container cannot be served ("" when it can): it names several resources.
	Mixed string
}

func (e *podEntry) key() string { return e.Namespace + "/" + e.Name }

// newPodEntry decodes a pod. Decoding errors are kept, not returned: a malformed annotation must
// make Allocate fail with a message naming it, not make the pod invisible.
//
// A pod that names Cardinal's scheduler (schedulerName) but carries no assignment was bound by someone
// other than Cardinal's extender (a Binding the admission guards did not stop: a webhook outage, an
// exempted user): it is treated as carrying an unusable assignment, so it is never served, and never
// served as a pod Cardinal did not schedule (whole cards, no limits, no selectors).
func newPodEntry(pod *corev1.Pod, node string, names annotations.ResourceNames, schedulerNames []string) *podEntry {
	e := &podEntry{
		UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name,
		Pending:  pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "",
		Gone:     pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed,
		Deleting: pod.DeletionTimestamp != nil,
		Requests: map[string]annotations.ContainerRequest{},
		bound:    pod.CreationTimestamp.Time,
		created:  pod.CreationTimestamp.Time,
	}
	for _, o := range pod.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			e.Controlled = true
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			e.bound = c.LastTransitionTime.Time
		}
	}
	if v, ok := pod.Annotations[annotations.GPUAssignment]; ok {
		e.HasAssignment = true
		a, err := annotations.DecodeAssignment(v)
		switch {
		case err != nil:
			e.AssignmentErr = err
		case a.Node != node:
			e.AssignmentErr = fmt.Errorf("%s names node %q, but the pod is bound to %q", annotations.GPUAssignment, a.Node, node)
		default:
			e.Assignment = &a
			e.assignedIDs = make(map[string][]string, len(a.Containers))
			for i := range a.Containers {
				e.assignedIDs[a.Containers[i].Name] = a.Containers[i].IDs()
			}
		}
	}
	if !e.HasAssignment && pod.Spec.SchedulerName != "" && slices.Contains(schedulerNames, pod.Spec.SchedulerName) {
		e.HasAssignment = true
		e.AssignmentErr = fmt.Errorf("the pod names Cardinal's scheduler %q but carries no %s: it was bound by someone other than Cardinal's extender",
			pod.Spec.SchedulerName, annotations.GPUAssignment)
	}
	if v, ok := pod.Annotations[annotations.GPUAllocated]; ok {
		rec, err := annotations.DecodeAllocation(v)
		if err != nil {
			e.RecordedErr = err
		} else {
			e.Recorded = make(map[string]annotations.ContainerAllocation, len(rec.Containers))
			for _, c := range rec.Containers {
				e.Recorded[c.Name] = c
			}
		}
	}
	e.Selector, e.SelectorErr = annotations.ParseSelector(pod.Annotations)
	add := func(cs []corev1.Container, init bool) {
		for i := range cs {
			counts := deviceCounts(&cs[i], names)
			if len(counts) == 0 {
				continue
			}
			if len(counts) > 1 {
				rs := make([]string, len(counts))
				for j := range counts {
					rs[j] = string(counts[j].Resource)
				}
				why := fmt.Sprintf("container %q asks for %s: a container takes whole cards or instances of one MIG profile", cs[i].Name, strings.Join(rs, " and "))
				for j := range counts {
					counts[j].Mixed = why
				}
			}
			e.Order = append(e.Order, counts...)
			if r, err := annotations.ParseContainerRequest(&cs[i], names); err == nil {
				r.Init = init
				// A restartable init container (sidecar) runs beside the app containers.
				r.Sidecar = init && cs[i].RestartPolicy != nil && *cs[i].RestartPolicy == corev1.ContainerRestartPolicyAlways
				e.Requests[cs[i].Name] = r
			}
		}
	}
	add(pod.Spec.InitContainers, true)
	add(pod.Spec.Containers, false)
	return e
}

// deviceCounts lists the managed resources a container takes devices of (the GPU resource first,
// then MIG resources by name), with their counts: the count alone, through the contract's parser,
// since a pod Cardinal did not schedule may ask for more than a Cardinal pod may, and the kubelet
// still hands it that many devices. Resources named with 0 are left out.
func deviceCounts(c *corev1.Container, names annotations.ResourceNames) []containerCount {
	var rs []corev1.ResourceName
	for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for r := range l {
			if (r == names.GPU || names.IsMIGResource(r)) && !slices.Contains(rs, r) {
				rs = append(rs, r)
			}
		}
	}
	slices.SortFunc(rs, func(a, b corev1.ResourceName) int {
		switch {
		case a == names.GPU:
			return -1
		case b == names.GPU:
			return 1
		}
		return strings.Compare(string(a), string(b))
	})
	var out []containerCount
	for _, r := range rs {
		q, ok := c.Resources.Limits[r]
		if !ok {
			q = c.Resources.Requests[r]
		}
		v, _, err := annotations.ParseQuantity(string(r), q, 0, math.MaxInt32)
		if err != nil || v == 0 {
			continue
		}
		out = append(out, containerCount{Name: c.Name, Resource: r, Count: int(v)})
	}
	return out
}

// holder is one GPU container of a pod on this node.
type holder struct {
	Pod *podEntry
	// Name is the container's name.
	Name string
	// Resource is the managed resource it takes devices of; Count how many it asks for.
	Resource corev1.ResourceName
	Count    int
	// Mixed is why it is never served ("" when it may be): it names several managed resources.
	Mixed string
	// Assigned is the container's assignment, nil for pods Cardinal did not schedule.
	Assigned *annotations.ContainerAssignment
	// Allocated is true once the kubelet gave it devices (the plugin served Allocate, or the record or
	// PodResources says so).
	Allocated bool
	// Held are the IDs the kubelet gave it, as far as the plugin knows (nil: not known).
	Held []string
	// NotAdmitting is true when the kubelet's PodResources shows another pod being admitted now
	// (admitting.go): the container is no candidate for this call, though still in flight.
	NotAdmitting bool
}

func (h *holder) String() string {
	return fmt.Sprintf("pod %s container %q", h.Pod.key(), h.Name)
}

// ids are the container's assigned IDs (nil without an assignment); callers must not change them.
func (h *holder) ids() []string {
	if h.Assigned == nil {
		return nil
	}
	if ids, ok := h.Pod.assignedIDs[h.Name]; ok {
		return ids
	}
	return h.Assigned.IDs()
}

// sameSet reports whether a and b hold the same IDs (each list has no duplicates).
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
