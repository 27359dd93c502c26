package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Issue 33 item 3: on a node whose kubelet aligns CPUs with cards (single-numa-node, static CPU
// manager), a victim gives back its exclusive CPUs too, and a nominee holds the CPUs it will take.
// n1 (numaNode): 2 NUMA nodes of 16 CPUs and 4 cards each. top (priority 1000) holds cards 4-7 and
// all 16 CPUs of NUMA 1, so only NUMA 0 can take a pod that asks CPUs.
func TestPreemptionCountsExclusiveCPUs(t *testing.T) {
	top := holder(t, "top", 1000, "n1", 0, 0, uuidOf("n1", 4), uuidOf("n1", 5), uuidOf("n1", 6), uuidOf("n1", 7))
	topCPUs := annotations.PodCPUs{UID: string(top.UID), CPUs: []int{0, 16}}

	t.Run("a victim's CPUs come back", func(t *testing.T) {
		// lo (priority 0) holds card 0 and 14 CPUs of NUMA 0: NUMA 0 has 3 free cards and
		// 16 - 14 = 2 free CPUs. hi asks 1 card + 8 CPUs: evicting lo frees 14, 2 + 14 = 16 >= 8.
		lo := holder(t, "lo", 0, "n1", 1, 0, uuidOf("n1", 0))
		node := numaNode(t, annotations.TopologyPolicySingleNUMANode, 16, 0, []annotations.PodCPUs{topCPUs, {UID: string(lo.UID), CPUs: []int{14, 0}}})
		h := newHarness(t, harnessOptions{}, node, top, lo)
		got := victimNames(h.preempt(cpuPreemptor("hi", 100, 1, 8), map[string][]string{"n1": {}}))
		if diff := cmp.Diff(map[string][]string{"n1": {"lo"}}, got); diff != "" {
			t.Errorf("victims (-want +got):\n%s", diff)
		}
	})

	t.Run("a nominee holds its CPUs", func(t *testing.T) {
		// hi (priority 100, 1 card + 10 CPUs) is nominated to n1: of NUMA 0's 16 free CPUs it
		// will take 10, leaving 6. low (priority 0, 1 card + 10 CPUs) must not take them: 6 < 10.
		// Were only the nominee's card held, low would fit (3 cards, 16 CPUs) and hi would not.
		node := numaNode(t, annotations.TopologyPolicySingleNUMANode, 16, 0, []annotations.PodCPUs{topCPUs})
		hi := nominated(cpuPreemptor("hi", 100, 1, 10), "n1")
		h := newHarness(t, harnessOptions{}, node, top, hi)
		filter := func(pod *corev1.Pod) extenderv1.ExtenderFilterResult {
			return decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1")}))
		}
		if res := filter(cpuPreemptor("low", 0, 1, 10)); len(*res.NodeNames) != 0 {
			t.Errorf("low fits n1 on the CPUs the nominee will take: %+v", res)
		}
		// 1 card + 6 CPUs fit beside the nominee: 16 - 10 = 6.
		if res := filter(cpuPreemptor("small", 0, 1, 6)); len(*res.NodeNames) != 1 {
			t.Errorf("a pod of 6 CPUs must fit beside the nominee: %v %v", res.FailedNodes, res.FailedAndUnresolvableNodes)
		}
		if res := filter(hi); len(*res.NodeNames) != 1 {
			t.Errorf("the nominee itself must fit: %v %v", res.FailedNodes, res.FailedAndUnresolvableNodes)
		}
	})
}
