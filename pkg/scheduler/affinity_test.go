package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// A pod's preferred node affinity decides between nodes the policy scores within AffinityBand
// (0.5) of each other, and not between nodes farther apart.
func TestPreferredAffinityWinsOnlyBetweenCloseNodes(t *testing.T) {
	// binpack scores a node by how full it is after the pod (1 whole card):
	//   pref:  4 cards, 2 held → 3/4 = 7.50 (labelled zone=pref)
	//   close: 9 cards, 6 held → 7/9 = 7.78 (0.28 above pref: within the band)
	//   far:   6 cards, 4 held → 5/6 = 8.33 (0.83 above pref: beyond it)
	var objs []runtime.Object
	for _, n := range []struct {
		name        string
		cards, held int
	}{{"pref", 4, 2}, {"close", 9, 6}, {"far", 6, 4}} {
		node := gpuNode(nodeSpec{name: n.name, model: a40, memMiB: 100, count: n.cards})
		node.Labels = map[string]string{"zone": n.name}
		objs = append(objs, node)
		for k := 0; k < n.held; k++ {
			objs = append(objs, benchHolder(t, n.name, k, uuidOf(n.name, k), 100, 100))
		}
	}
	h := newHarness(t, harnessOptions{}, objs...)
	prefers := gpuPod("p", nil, ctr{name: "m", gpu: 1})
	prefers.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight: 50, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"pref"}}}}}}}}
	plain := gpuPod("q", nil, ctr{name: "m", gpu: 1})
	cases := []struct {
		name  string
		pod   *corev1.Pod
		nodes []string
		want  extenderv1.HostPriorityList
	}{
		{"affinity outweighs a close policy score", prefers, []string{"pref", "close"}, extenderv1.HostPriorityList{{Host: "pref", Score: 10}, {Host: "close", Score: 9}}},
		{"the policy outweighs affinity beyond the band", prefers, []string{"pref", "far"}, extenderv1.HostPriorityList{{Host: "pref", Score: 9}, {Host: "far", Score: 10}}},
		{"without affinity the policy alone", plain, []string{"pref", "close"}, extenderv1.HostPriorityList{{Host: "pref", Score: 9}, {Host: "close", Score: 10}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := decodeInto[extenderv1.HostPriorityList](t, h.post("/prioritize", extenderv1.ExtenderArgs{Pod: c.pod, NodeNames: &c.nodes}))
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
