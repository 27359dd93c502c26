package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// TestPodGroupsAllOrNothing (issue 38): two groups of 4 pods × 2 A100s, named with Kueue's
// pod-group keys, on a cluster with 8 A100s (node-a): each fits alone, not both. One group runs
// whole; the other places no pod, says what it lacks, and runs whole once the first is deleted.
func TestPodGroupsAllOrNothing(t *testing.T) {
	e := startEnv(t, stack.Options{})
	group := func(name string) []*corev1.Pod {
		labels, ann := annotations.EncodePodGroup(annotations.PodGroup{Name: name, Total: 4})
		var pods []*corev1.Pod
		for i := range 4 {
			a := maps.Clone(ann)
			a[annotations.UseGPUType] = "A100"
			p := pod(fmt.Sprintf("%s-%d", name, i), a, ctr("main", gpu{cards: 2}))
			p.Labels = maps.Clone(labels)
			pods = append(pods, p)
		}
		return pods
	}
	podNames := func(pods []*corev1.Pod) []string {
		var out []string
		for _, p := range pods {
			out = append(out, p.Name)
		}
		return out
	}
	ga, gb := group("pg-a"), group("pg-b")
	e.create(t, append(append([]*corev1.Pod{}, ga...), gb...)...)

	// Whichever group was planned first runs whole; the other binds no pod.
	var first, second []*corev1.Pod
	stack.Wait(t, runTimeout, "one pod group Running whole", func() (bool, string, error) {
		for _, g := range [][]*corev1.Pod{ga, gb} {
			running := 0
			for _, p := range g {
				got, err := e.client.CoreV1().Pods(namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
				if err != nil {
					return false, "", err
				}
				if got.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			if running == len(g) {
				first = g
				return true, "", nil
			}
		}
		return false, "neither group is Running whole", nil
	})
	second = gb
	if first[0].Name == gb[0].Name {
		second = ga
	}
	e.waitRunning(t, podNames(first)...)
	e.truth(t, podNames(first)...)
	e.noDoubleBooking(t, nodeA)
	secondGroup := second[0].Labels[annotations.PodGroupName]
	msg := e.waitUnschedulable(t, second[0].Name)
	if want := "group " + secondGroup + " needs 4 pods; 0 fit now"; !strings.Contains(msg, want) {
		t.Errorf("%s's reason %q does not say %q", second[0].Name, msg, want)
	}
	for _, p := range second {
		if got := e.get(t, p.Name); got.Spec.NodeName != "" {
			t.Errorf("%s of the waiting group was bound to %s while the other group holds the cards", p.Name, got.Spec.NodeName)
		}
	}

	// The first group ends: the second is planned and runs whole on the same cards.
	for _, p := range first {
		e.delete(t, p.Name)
	}
	e.waitRunning(t, podNames(second)...)
	e.truth(t, podNames(second)...)
	e.noDoubleBooking(t, nodeA)
	for _, p := range second {
		if got := e.get(t, p.Name); got.Spec.NodeName != nodeA {
			t.Errorf("%s runs on %q, want %s (the only A100s)", p.Name, got.Spec.NodeName, nodeA)
		}
	}
}

// TestPodGroupsHoldNothingUntilWhole (issue 38): a group larger than the cluster (5 pods × 2 A100s,
// 8 A100s in all) binds no pod and holds no card: a lone 2-card pod runs beside it. A group whose
// pods do not all exist yet waits with the count; one of its pods deleted before the rest come is
// replaced, and the group runs whole once its count exists.
func TestPodGroupsHoldNothingUntilWhole(t *testing.T) {
	e := startEnv(t, stack.Options{})
	member := func(group string, total, i int, cards int64) *corev1.Pod {
		labels, ann := annotations.EncodePodGroup(annotations.PodGroup{Name: group, Total: total})
		a := maps.Clone(ann)
		a[annotations.UseGPUType] = "A100"
		p := pod(fmt.Sprintf("%s-%d", group, i), a, ctr("main", gpu{cards: cards}))
		p.Labels = maps.Clone(labels)
		return p
	}

	var big []*corev1.Pod
	for i := range 5 {
		big = append(big, member("pg-big", 5, i, 2))
	}
	e.create(t, big...)
	if msg := e.waitUnschedulable(t, "pg-big-0"); !strings.Contains(msg, "group pg-big needs 5 pods; ") {
		t.Errorf("pg-big-0's reason %q does not say what the group needs", msg)
	}
	e.create(t, pod("lone", map[string]string{annotations.UseGPUType: "A100"}, ctr("main", gpu{cards: 2})))
	e.waitRunning(t, "lone")
	for _, p := range big {
		if got := e.get(t, p.Name); got.Spec.NodeName != "" {
			t.Errorf("%s of a group larger than the cluster was bound to %s", p.Name, got.Spec.NodeName)
		}
	}

	// 2 of 3 pods exist: the group waits for the third and holds nothing.
	e.create(t, member("pg-late", 3, 0, 1), member("pg-late", 3, 1, 1))
	e.waitUnschedulable(t, "pg-late-0")
	// The first filter may have run before pg-late-1 existed ("1 exist"): the pod's next cycle says 2.
	stack.Wait(t, pendingTimeout, "pg-late-0's reason: the group waits for its third pod", func() (bool, string, error) {
		msg, err := stack.FailedScheduling(context.Background(), e.client, namespace, "pg-late-0")
		return strings.Contains(msg, "group pg-late needs 3 pods; 2 exist, waiting for the rest"), msg, err
	})
	// One of them goes before the rest come; two more make the count, and the group runs whole.
	e.delete(t, "pg-late-0")
	e.create(t, member("pg-late", 3, 2, 1), member("pg-late", 3, 3, 1))
	e.waitRunning(t, "pg-late-1", "pg-late-2", "pg-late-3")
	e.truth(t, "lone", "pg-late-1", "pg-late-2", "pg-late-3")
	e.noDoubleBooking(t, nodeA)
	for _, p := range big {
		if got := e.get(t, p.Name); got.Spec.NodeName != "" {
			t.Errorf("%s was bound to %s", p.Name, got.Spec.NodeName)
		}
	}
}
