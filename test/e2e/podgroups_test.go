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
