package scheduler

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// sampleCluster is 150 nodes of one A40 each, n000…n149; the cards of n000…n139 are unhealthy, so
// only the last ten fit a whole-card pod. taint, when set, is put on those ten.
func sampleCluster(taint *corev1.Taint) []runtime.Object {
	var objs []runtime.Object
	for i := range 150 {
		spec := nodeSpec{name: fmt.Sprintf("n%03d", i), model: a40, memMiB: 46068, count: 1}
		if i < 140 {
			spec.sick = []int{0}
		}
		node := gpuNode(spec)
		node.Labels = map[string]string{"pool": "a"}
		if i >= 140 && taint != nil {
			node.Spec.Taints = []corev1.Taint{*taint}
		}
		objs = append(objs, node)
	}
	return objs
}

func nodeRange(lo, hi int) *[]string {
	var out []string
	for i := lo; i < hi; i++ {
		out = append(out, fmt.Sprintf("n%03d", i))
	}
	return &out
}

// Issue 39: a pod of the sampling profile that no node of kube-scheduler's sample fits, while nodes
// outside the sample do, gets refusals that note the miss and its number (each attempt's message is
// then new, and kube-scheduler requeues the pod at once), and its preemption frees nothing, for as
// many misses as cover every node plus two; then, for as many misses as cover every node, an error
// (kube-scheduler retries it after its backoff, with no event needed: the fast misses can all be
// spent while kube-scheduler's own view of the node that fits is behind); then plain refusals.
func TestFilterNotesAMissedSample(t *testing.T) {
	h := newHarness(t, harnessOptions{exactProfile: "cardinal-scheduler-exact"}, sampleCluster(nil)...)
	pod := gpuPod("p", nil, ctr{name: "m", gpu: 1})
	h.createPods(pod)
	filter := func(p *corev1.Pod, nodes *[]string) extenderv1.ExtenderFilterResult {
		return decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: p, NodeNames: nodes}))
	}
	preempt := func(p *corev1.Pod) int {
		res := decodeInto[extenderv1.ExtenderPreemptionResult](t, h.post("/preempt", extenderv1.ExtenderPreemptionArgs{Pod: p,
			NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"n000": {}}}))
		return len(res.NodeNameToMetaVictims)
	}
	// 150 nodes in samples of 100: two attempts cover them, plus two fast, then two paced.
	for miss := 1; miss <= 4; miss++ {
		res := filter(pod, nodeRange(0, 100))
		want := fmt.Sprintf("GPU GPU-n000-0 is unhealthy (kube-scheduler sampled 100 nodes; n140, n141, n142 and 7 more outside the sample fit: trying another sample, miss %d of at most 6)", miss)
		if res.Error != "" || len(res.FailedNodes)+len(res.FailedAndUnresolvableNodes) != 100 {
			t.Fatalf("miss %d: error %q, %d+%d refused; want 100 refusals", miss, res.Error, len(res.FailedNodes), len(res.FailedAndUnresolvableNodes))
		}
		if got := res.FailedNodes["n000"] + res.FailedAndUnresolvableNodes["n000"]; got != want {
			t.Fatalf("miss %d: n000 refused with %q, want %q", miss, got, want)
		}
		if n := preempt(pod); n != 0 {
			t.Errorf("miss %d: preemption offered %d nodes, want none (nodes outside the sample fit)", miss, n)
		}
	}
	for miss := 5; miss <= 6; miss++ {
		res := filter(pod, nodeRange(0, 100))
		want := fmt.Sprintf("pod default/p: no node of kube-scheduler's sample of 100 fits (n000: GPU GPU-n000-0 is unhealthy); n140, n141, n142 and 7 more outside the sample fit: trying another sample after kube-scheduler's backoff, miss %d of at most 6", miss)
		if res.Error != want || len(res.FailedNodes)+len(res.FailedAndUnresolvableNodes) != 0 {
			t.Fatalf("miss %d: error %q and %d+%d refused; want the error %q", miss, res.Error, len(res.FailedNodes), len(res.FailedAndUnresolvableNodes), want)
		}
	}
	res := filter(pod, nodeRange(0, 100))
	if got := res.FailedNodes["n000"] + res.FailedAndUnresolvableNodes["n000"]; got != "GPU GPU-n000-0 is unhealthy" {
		t.Fatalf("after its misses: n000 refused with %q, want the plain reason", got)
	}
	// A sample that holds a fitting node answers it, and the pod's misses start again.
	if res := filter(pod, nodeRange(50, 150)); res.Error != "" || res.NodeNames == nil || len(*res.NodeNames) == 0 {
		t.Fatalf("a sample with fitting nodes: error %q, fit %v", res.Error, res.NodeNames)
	}
	if res := filter(pod, nodeRange(0, 100)); !strings.Contains(res.FailedNodes["n000"]+res.FailedAndUnresolvableNodes["n000"], "miss 1 of at most 6") {
		t.Fatalf("after a fit: %v, want the count started again", res.FailedAndUnresolvableNodes["n000"])
	}

	refused := func(name string, p *corev1.Pod, nodes *[]string, hh *harness) {
		t.Helper()
		res := decodeInto[extenderv1.ExtenderFilterResult](t, hh.post("/filter", extenderv1.ExtenderArgs{Pod: p, NodeNames: nodes}))
		if res.Error != "" || len(res.FailedNodes)+len(res.FailedAndUnresolvableNodes) != len(*nodes) {
			t.Errorf("%s: error %q, %d failed; want the %d refusals", name, res.Error, len(res.FailedNodes)+len(res.FailedAndUnresolvableNodes), len(*nodes))
		}
		for n, why := range res.FailedAndUnresolvableNodes {
			if strings.Contains(why, "outside the sample") {
				t.Errorf("%s: %s refused with %q, want no miss noted", name, n, why)
			}
		}
		for n, why := range res.FailedNodes {
			if strings.Contains(why, "outside the sample") {
				t.Errorf("%s: %s refused with %q, want no miss noted", name, n, why)
			}
		}
	}
	// Fewer than 100 nodes is never a sample (kube-scheduler filters every node then).
	fresh := gpuPod("q", nil, ctr{name: "m", gpu: 1})
	h.createPods(fresh)
	refused("99 nodes", fresh, nodeRange(0, 99), h)
	// The exact profile is never sampled.
	exact := gpuPod("e", nil, ctr{name: "m", gpu: 1})
	exact.Spec.SchedulerName = "cardinal-scheduler-exact"
	h.createPods(exact)
	refused("exact profile", exact, nodeRange(0, 100), h)
	// Outside nodes the pod's node selector excludes do not count.
	sel := gpuPod("sel", nil, ctr{name: "m", gpu: 1})
	sel.Spec.NodeSelector = map[string]string{"pool": "b"}
	h.createPods(sel)
	refused("node selector", sel, nodeRange(0, 100), h)

	// With one profile, a pod of it is never sampled (percentageOfNodesToScore 100).
	one := newHarness(t, harnessOptions{}, sampleCluster(nil)...)
	solo := gpuPod("p", nil, ctr{name: "m", gpu: 1})
	one.createPods(solo)
	refused("one profile", solo, nodeRange(0, 100), one)

	// Outside nodes tainted NoSchedule do not count, unless the pod tolerates the taint.
	taint := &corev1.Taint{Key: "gpu-maintenance", Effect: corev1.TaintEffectNoSchedule}
	tainted := newHarness(t, harnessOptions{exactProfile: "cardinal-scheduler-exact"}, sampleCluster(taint)...)
	plain := gpuPod("p", nil, ctr{name: "m", gpu: 1})
	tainted.createPods(plain)
	refused("untolerated taint", plain, nodeRange(0, 100), tainted)
	tolerant := gpuPod("t", nil, ctr{name: "m", gpu: 1})
	tolerant.Spec.Tolerations = []corev1.Toleration{{Key: "gpu-maintenance", Operator: corev1.TolerationOpExists}}
	tainted.createPods(tolerant)
	res = decodeInto[extenderv1.ExtenderFilterResult](t, tainted.post("/filter", extenderv1.ExtenderArgs{Pod: tolerant, NodeNames: nodeRange(0, 100)}))
	if why := res.FailedNodes["n000"] + res.FailedAndUnresolvableNodes["n000"]; !strings.Contains(why, "outside the sample fit") {
		t.Errorf("tolerated taint: n000 refused with %q, want the miss noted", why)
	}
}

// The misses' budget: as many fast misses as cover every node once plus two, then as many paced ones
// as cover every node once, at most five (their backoff then totals 25 s before preemption can run).
func TestMissBudget(t *testing.T) {
	for _, c := range []struct{ known, sampled, fast, total int }{
		{150, 100, 4, 6},
		{300, 100, 5, 8},
		{301, 100, 6, 10},
		{1000, 420, 5, 8},
		{5000, 500, 12, 17},
		{20000, 100, 202, 207},
	} {
		if fast, total := missBudget(c.known, c.sampled); fast != c.fast || total != c.total {
			t.Errorf("missBudget(%d, %d) = %d, %d; want %d, %d", c.known, c.sampled, fast, total, c.fast, c.total)
		}
	}
}
