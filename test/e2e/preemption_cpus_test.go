package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// TestPreemptionFreesExclusiveCPUs (issue 33 item 3): on a single-numa-node kubelet with the static
// CPU manager (2 NUMA nodes x 8 CPUs, CPU 0 reserved: 7 and 8 for exclusive use; 4 A100s each),
// low-a (1 card + 6 CPUs) takes NUMA 0 (7 - 6 = 1 CPU left) and low-b the same on NUMA 1 (8 - 6 = 2
// left). hi (1 card + 4 CPUs, higher priority) fits no NUMA node although 6 cards are free: only
// a victim's CPUs make room. Before the fix the extender released the victims' cards but not their
// CPUs per NUMA node, found no set and dropped the node: hi stayed Pending. Now exactly one low pod
// goes and hi runs, its cards and CPUs on the NUMA node that pod left.
func TestPreemptionFreesExclusiveCPUs(t *testing.T) {
	node := tmNode{"tm-preempt", annotations.TopologyPolicySingleNUMANode, annotations.TopologyScopeContainer}
	e := startTopologyStack(t, []tmNode{node})
	for name, value := range map[string]int32{prioLow: 100, prioHigh: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := e.client.SchedulingV1().PriorityClasses().Create(ctx(t), pc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create PriorityClass %s: %v", name, err)
		}
	}
	r := newNodeRun(t, e, modeCardinal, node, &tally{})
	t.Cleanup(func() { r.cleanup(t) })
	guaranteed := func(name, class string, cpus int64) *corev1.Pod {
		res := corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(cpus, resource.DecimalSI),
			corev1.ResourceMemory: resource.MustParse(topologyGuaranteedMemory)}
		limits := res.DeepCopy()
		limits[annotations.DefaultResourceNames().GPU] = resource.MustParse("1")
		return withPriority(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{topologyNodeLabel: node.name}},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(int64), NodeSelector: map[string]string{corev1.LabelHostname: node.name},
				Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: res, Limits: limits}}}},
		}, class)
	}
	// One after the other, each settled and counted by the inventory, so the kubelet's NUMA
	// choice is known: the lowest NUMA node with room.
	for _, name := range []string{"low-a", "low-b"} {
		e.create(t, guaranteed(name, prioLow, 6))
		e.waitRunning(t, name)
		r.waitInventoryCPUs(t)
	}
	start := time.Now()
	e.create(t, guaranteed("hi", prioHigh, 4))
	e.waitRunning(t, "hi")
	victims := e.gone(t, "low-a", "low-b")
	t.Logf("hi ran after %s; preempted %v", time.Since(start).Round(100*time.Millisecond), victims)
	if len(victims) != 1 {
		t.Fatalf("hi preempted %v, want exactly one low pod", victims)
	}
	e.noDoubleBooking(t, node.name)
	ctrs := r.containers(t, "hi")
	r.checkAlignment(t, "hi", ctrs)
}
