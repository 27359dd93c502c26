package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// shortlistNodes are four nodes of 4 cards for binpack (score: how full after one more card):
//
//	b-full, a-full: 2 held → 3/4 (the best, tied)
//	half:           1 held → 2/4
//	empty:          0 held → 1/4
func shortlistNodes(t *testing.T) []runtime.Object {
	var objs []runtime.Object
	for _, n := range []struct {
		name string
		held int
	}{{"b-full", 2}, {"half", 1}, {"a-full", 2}, {"empty", 0}} {
		node := gpuNode(nodeSpec{name: n.name, model: a40, memMiB: 100, count: 4})
		node.Labels = map[string]string{"zone": n.name}
		objs = append(objs, node)
		for k := 0; k < n.held; k++ {
			objs = append(objs, benchHolder(t, n.name, k, uuidOf(n.name, k), 100, 100))
		}
	}
	return objs
}

var shortlistAll = []string{"b-full", "half", "a-full", "empty"}

func filterNames(t *testing.T, h *harness, pod *corev1.Pod, nodes []string) []string {
	t.Helper()
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &nodes}))
	if res.Error != "" {
		t.Fatalf("filter error: %s", res.Error)
	}
	return *res.NodeNames
}

// A pod that nothing in kube-scheduler's own scores tells apart gets only the best-ranked nodes:
// the best and its ties, at most the shortlist, lowest name first.
func TestFilterShortlistsTheBestNodes(t *testing.T) {
	cases := []struct {
		name      string
		shortlist int
		nodes     []string
		want      []string
	}{
		{"off: every fitting node", 0, shortlistAll, shortlistAll},
		{"one of two tied: the lowest name", 1, shortlistAll, []string{"a-full"}},
		{"two: both tied, in request order", 2, shortlistAll, []string{"b-full", "a-full"}},
		{"three: still only the tied best", 3, shortlistAll, []string{"b-full", "a-full"}},
		{"no more fitting nodes than the shortlist: all", 3, []string{"half", "empty", "a-full"}, []string{"half", "empty", "a-full"}},
		{"the best without ties", 1, []string{"half", "empty"}, []string{"half"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{shortlist: c.shortlist}, shortlistNodes(t)...)
			got := filterNames(t, h, gpuPod("p", nil, ctr{name: "m", gpu: 1}), c.nodes)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The pod's preferred node affinity counts in the shortlist as in prioritize: within AffinityBand
// (0.5) it decides between nodes the policy ranks apart.
func TestFilterShortlistFoldsPreferredNodeAffinity(t *testing.T) {
	// binpack: pref 3/4 = 7.50 with affinity 7.50 + 0.5 = 8.00; close 7/9 = 7.78.
	var objs []runtime.Object
	for _, n := range []struct {
		name        string
		cards, held int
	}{{"pref", 4, 2}, {"close", 9, 6}} {
		node := gpuNode(nodeSpec{name: n.name, model: a40, memMiB: 100, count: n.cards})
		node.Labels = map[string]string{"zone": n.name}
		objs = append(objs, node)
		for k := 0; k < n.held; k++ {
			objs = append(objs, benchHolder(t, n.name, k, uuidOf(n.name, k), 100, 100))
		}
	}
	h := newHarness(t, harnessOptions{shortlist: 1}, objs...)
	plain := gpuPod("q", nil, ctr{name: "m", gpu: 1})
	prefers := plain.DeepCopy()
	prefers.Name = "p"
	prefers.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight: 50, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"pref"}}}}}}}}
	all := []string{"pref", "close"}
	if got := filterNames(t, h, plain, all); !cmp.Equal(got, []string{"close"}) {
		t.Errorf("without affinity: %v, want [close]", got)
	}
	if got := filterNames(t, h, prefers, all); !cmp.Equal(got, []string{"pref"}) {
		t.Errorf("with affinity: %v, want [pref]", got)
	}
}

// Every soft constraint kube-scheduler scores itself gets the full list; what it only filters on
// (or never scores) does not.
func TestFilterFullListWhenKubeSchedulerScoresDiffer(t *testing.T) {
	web := map[string]string{"app": "web"}
	podTerm := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: web}, TopologyKey: "kubernetes.io/hostname"}
	preferred := []corev1.WeightedPodAffinityTerm{{Weight: 10, PodAffinityTerm: podTerm}}
	spread := func(w corev1.UnsatisfiableConstraintAction) []corev1.TopologySpreadConstraint {
		return []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: w, LabelSelector: &metav1.LabelSelector{MatchLabels: web}}}
	}
	owned := func(apiVersion, kind string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "o", UID: "o", Controller: new(bool)}}
			*p.OwnerReferences[0].Controller = true
		}
	}
	// existing is a running pod (no GPUs) on half whose affinity terms select pods labelled web.
	existing := func(a *corev1.Affinity) []runtime.Object {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default", UID: "other"},
			Spec: corev1.PodSpec{NodeName: "half", Affinity: a}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		return []runtime.Object{p}
	}
	taint := func(node string, t corev1.Taint) func([]runtime.Object) {
		return func(objs []runtime.Object) {
			for _, o := range objs {
				if n, ok := o.(*corev1.Node); ok && n.Name == node {
					n.Spec.Taints = append(n.Spec.Taints, t)
				}
			}
		}
	}
	soft := corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectPreferNoSchedule}
	best := []string{"a-full"}
	cases := []struct {
		name     string
		pod      func(*corev1.Pod)
		extra    []runtime.Object
		nodes    func([]runtime.Object)
		services ServiceSelects
		want     []string
	}{
		{name: "no soft constraint", want: best},
		{name: "preferred pod affinity", pod: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}}
		}, want: shortlistAll},
		{name: "preferred pod anti-affinity", pod: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}}
		}, want: shortlistAll},
		{name: "required pod anti-affinity only filters", pod: func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{podTerm}}}
		}, want: best},
		{name: "topology spread ScheduleAnyway", pod: func(p *corev1.Pod) { p.Spec.TopologySpreadConstraints = spread(corev1.ScheduleAnyway) }, want: shortlistAll},
		{name: "topology spread DoNotSchedule only filters", pod: func(p *corev1.Pod) { p.Spec.TopologySpreadConstraints = spread(corev1.DoNotSchedule) }, want: best},
		{name: "ReplicaSet pod: default spread", pod: owned("apps/v1", "ReplicaSet"), want: shortlistAll},
		{name: "StatefulSet pod: default spread", pod: owned("apps/v1", "StatefulSet"), want: shortlistAll},
		{name: "ReplicationController pod: default spread", pod: owned("v1", "ReplicationController"), want: shortlistAll},
		{name: "Job pod: no default spread", pod: owned("batch/v1", "Job"), want: best},
		{name: "a Service selects the pod: default spread", services: func(*corev1.Pod) bool { return true }, want: shortlistAll},
		{name: "an existing pod's preferred anti-affinity selects the pod", extra: existing(&corev1.Affinity{
			PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}}), want: shortlistAll},
		{name: "an existing pod's required affinity selects the pod", extra: existing(&corev1.Affinity{
			PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{podTerm}}}), want: shortlistAll},
		{name: "an existing pod's terms select other pods", pod: func(p *corev1.Pod) { p.Labels = map[string]string{"app": "db"} }, extra: existing(&corev1.Affinity{
			PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}}), want: best},
		{name: "untolerated PreferNoSchedule taint on one candidate", nodes: taint("half", soft), want: shortlistAll},
		{name: "tolerated PreferNoSchedule taint", nodes: taint("half", soft), pod: func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}
		}, want: best},
		{name: "the same untolerated taint on every candidate", nodes: func(objs []runtime.Object) {
			for _, n := range shortlistAll {
				taint(n, soft)(objs)
			}
		}, want: best},
		{name: "a candidate has the pod's image", nodes: func(objs []runtime.Object) {
			for _, o := range objs {
				if n, ok := o.(*corev1.Node); ok && n.Name == "empty" {
					n.Status.Images = []corev1.ContainerImage{{Names: []string{"x:latest"}, SizeBytes: 1 << 30}}
				}
			}
		}, want: shortlistAll},
		{name: "candidates have other images", nodes: func(objs []runtime.Object) {
			for _, o := range objs {
				if n, ok := o.(*corev1.Node); ok {
					n.Status.Images = []corev1.ContainerImage{{Names: []string{"y:1"}, SizeBytes: 1 << 30}}
				}
			}
		}, want: best},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := append(shortlistNodes(t), c.extra...)
			if c.nodes != nil {
				c.nodes(objs)
			}
			h := newHarness(t, harnessOptions{shortlist: 1, services: c.services}, objs...)
			pod := gpuPod("p", nil, ctr{name: "m", gpu: 1})
			pod.Labels = web
			if c.pod != nil {
				c.pod(pod)
			}
			if diff := cmp.Diff(c.want, filterNames(t, h, pod, shortlistAll)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The shortlisted node binds as any other: prioritize of the one name, then bind with its cards.
func TestShortlistedNodeBinds(t *testing.T) {
	h := newHarness(t, harnessOptions{shortlist: 1}, shortlistNodes(t)...)
	pod := gpuPod("p", nil, ctr{name: "m", gpu: 1})
	h.createPods(pod)
	got := filterNames(t, h, pod, shortlistAll)
	if !cmp.Equal(got, []string{"a-full"}) {
		t.Fatalf("filter: %v, want [a-full]", got)
	}
	prio := decodeInto[extenderv1.HostPriorityList](t, h.post("/prioritize", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &got}))
	if diff := cmp.Diff(extenderv1.HostPriorityList{{Host: "a-full", Score: 10}}, prio); diff != "" {
		t.Errorf("prioritize (-want +got):\n%s", diff)
	}
	if err := h.bind("p", "a-full"); err != "" {
		t.Fatalf("bind: %s", err)
	}
	asg, _ := h.assignmentOf("default", "p")
	if asg == nil || asg.Node != "a-full" || len(asg.Containers) != 1 || asg.Containers[0].Devices[0].UUID != uuidOf("a-full", 2) {
		t.Errorf("assignment %+v, want card %s of a-full", asg, uuidOf("a-full", 2))
	}
}

// TestLowestNamesIsTheSortedPrefix: the one-pass selection keeps what sorting by name and cutting
// would keep, in the same order, for limits below and above its cut-over to sorting.
func TestLowestNamesIsTheSortedPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 300 {
		n := 1 + rng.IntN(400)
		names := make([]string, n)
		for i, j := range rng.Perm(n) {
			names[i] = fmt.Sprintf("node-%04d", j)
		}
		top := rng.Perm(n)[:1+rng.IntN(n)]
		limit := 1 + rng.IntN(20)
		if limit >= len(top) {
			continue
		}
		want := slices.Clone(top)
		slices.SortFunc(want, func(a, b int) int { return strings.Compare(names[a], names[b]) })
		want = want[:limit]
		if got := lowestNames(names, slices.Clone(top), limit); !slices.Equal(got, want) {
			t.Fatalf("trial %d: limit %d of %d: got %v, want %v", trial, limit, len(top), got, want)
		}
	}
}
