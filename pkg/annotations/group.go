package annotations

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Pod groups (contract v1, additive). Cardinal reads Kueue's pod-group convention rather than a
// new one (docs/pod-groups.md): a pod names its group with a label and the group's size with an
// annotation, and every pod of the group carries both.
//
//	metadata.labels:      kueue.x-k8s.io/pod-group-name: train-7
//	metadata.annotations: kueue.x-k8s.io/pod-group-total-count: "4"
//
// A group is its namespace and name. The extender binds a group's pods only when all of them
// (the total count) can be placed at once; Cardinal never writes these keys.
const (
	// PodGroupName is the label that names a pod's group (Kueue's pod group).
	PodGroupName = "kueue.x-k8s.io/pod-group-name"
	// PodGroupTotalCount is the annotation that gives the number of pods in the group (Kueue's pod
	// group): the extender places none of them until that many can be placed together.
	PodGroupTotalCount = "kueue.x-k8s.io/pod-group-total-count"
)

// GroupKeys are the pod keys of the pod-group convention Cardinal reads (not Cardinal's own: the
// webhook neither checks nor protects them).
var GroupKeys = []string{PodGroupName, PodGroupTotalCount}

// MaxGroupPods bounds a group's total count: a larger value is read as an error rather than a
// group the extender would plan for.
const MaxGroupPods = 10000

// PodGroup is the group a pod belongs to.
type PodGroup struct {
	// Name is the group's name (the label's value); the group is unique within its namespace.
	Name string
	// Total is the number of pods in the group.
	Total int
}

// DecodePodGroup reads a pod's group from its labels and annotations. ok is false for a pod that
// names no group (no PodGroupName label). A pod that names one must give a total count of 1 to
// MaxGroupPods; errors name the key and quote the value.
func DecodePodGroup(labels, ann map[string]string) (g PodGroup, ok bool, err error) {
	name, named := labels[PodGroupName]
	if !named {
		return PodGroup{}, false, nil
	}
	if name == "" {
		return PodGroup{}, true, errorf(PodGroupName, "the group name is empty")
	}
	if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
		return PodGroup{}, true, errorf(PodGroupName, "%q is not a valid label value: %s", name, errs[0])
	}
	raw, counted := ann[PodGroupTotalCount]
	if !counted {
		return PodGroup{}, true, errorf(PodGroupTotalCount, "missing: a pod of group %q must give the group's total count", name)
	}
	n, perr := strconv.Atoi(raw)
	switch {
	case perr != nil:
		return PodGroup{}, true, errorf(PodGroupTotalCount, "%q is not a whole number", raw)
	case n < 1:
		return PodGroup{}, true, errorf(PodGroupTotalCount, "%d is below 1", n)
	case n > MaxGroupPods:
		return PodGroup{}, true, errorf(PodGroupTotalCount, "%d is above %d", n, MaxGroupPods)
	}
	return PodGroup{Name: name, Total: n}, true, nil
}

// EncodePodGroup returns the label and annotation that name g (tests, examples).
func EncodePodGroup(g PodGroup) (labels, ann map[string]string) {
	return map[string]string{PodGroupName: g.Name}, map[string]string{PodGroupTotalCount: fmt.Sprint(g.Total)}
}
