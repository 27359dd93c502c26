package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// A cordoned card takes nothing new (a pod that asks for it by UUID is refused with the reason,
// others go to the node's other cards), its holder keeps it, and uncordoning returns it to service.
func TestCordonedCardTakesNothingNew(t *testing.T) {
	spec := nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 2}
	node := gpuNode(spec)
	mark, err := annotations.EncodeCordon(annotations.Cordon{Reason: "correctable ECC errors", By: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	node.Annotations[annotations.CordonKey(uuidOf("n1", 0))] = mark
	h := newHarness(t, harnessOptions{informer: true}, node)
	pinned := gpuPod("pinned", map[string]string{annotations.UseGPUUUID: uuidOf("n1", 0)}, ctr{name: "m", gpu: 1})
	any := gpuPod("any", nil, ctr{name: "m", gpu: 1})
	two := gpuPod("two", nil, ctr{name: "m", gpu: 2})
	h.createPods(pinned, any, two)

	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pinned, NodeNames: names("n1")}))
	want := map[string]string{"n1": "card GPU-n1-0 (index 0) is cordoned: correctable ECC errors (by ops)"}
	if diff := cmp.Diff(want, map[string]string(res.FailedNodes)); diff != "" {
		t.Errorf("pinned to the cordoned card: FailedNodes (-want +got):\n%s", diff)
	}
	res = decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: two, NodeNames: names("n1")}))
	want = map[string]string{"n1": "needs 2 cards, 1 not cordoned (1 cordoned; card GPU-n1-0 (index 0): correctable ECC errors (by ops))"}
	if diff := cmp.Diff(want, map[string]string(res.FailedNodes)); diff != "" {
		t.Errorf("two cards: FailedNodes (-want +got):\n%s", diff)
	}
	if err := h.bind("any", "n1"); err != "" {
		t.Fatal(err)
	}
	a, _ := h.assignmentOf("default", "any")
	if got := a.Containers[0].Devices[0].UUID; got != uuidOf("n1", 1) {
		t.Errorf("any got %s, want the card in service, %s", got, uuidOf("n1", 1))
	}

	// The allocation metrics count it apart.
	if got, want := gatherFleet(t, h.srv, "cardinal_extender_model_cordoned_cards"), []string{"model_cordoned_cards{model=" + a40 + "} 1"}; !cmp.Equal(want, got) {
		t.Errorf("cordoned cards per model = %v, want %v", got, want)
	}

	// Uncordoned: the card takes pods again.
	delete(node.Annotations, annotations.CordonKey(uuidOf("n1", 0)))
	h.cache.UpsertNode(node)
	res = decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pinned, NodeNames: names("n1")}))
	if len(res.FailedNodes) != 0 || !cmp.Equal([]string{"n1"}, *res.NodeNames) {
		t.Errorf("after uncordon: failed %v, fit %v", res.FailedNodes, res.NodeNames)
	}
}

// The uncordon reaches kube-scheduler before the extender's informer: the filter call it triggers
// must not be refused on the mark already gone (the pod would wait for the next cluster event).
// The cache still holds the mark; the API server does not; the filter reads the node and admits,
// also when it read the same node a moment before (a rate limit on the reads let TestCordonAndDrain
// fail in CI: its drain woke the pod less than a second before the uncordon).
func TestFilterReadsTheCordonAtTheLastMoment(t *testing.T) {
	spec := nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 1}
	node := gpuNode(spec)
	cordonCard(t, node, 0)
	h := newHarness(t, harnessOptions{}, node)
	pod := gpuPod("p", nil, ctr{name: "m", gpu: 1})
	h.createPods(pod)

	// Cordoned in both: refused, with the reason.
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1")}))
	if len(res.FailedNodes) != 1 {
		t.Fatalf("cordoned: failed %v, want n1 refused", res.FailedNodes)
	}

	// Uncordoned on the API server only (the informer is behind).
	fresh := node.DeepCopy()
	delete(fresh.Annotations, annotations.CordonKey(uuidOf("n1", 0)))
	if _, err := h.client.CoreV1().Nodes().Update(context.Background(), fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No clock moves: the first call read the node a moment ago (as in CI, where a drain's
	// deletions woke the pod just before the uncordon), and this read must still happen.
	res = decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1")}))
	if len(res.FailedNodes) != 0 || res.NodeNames == nil || !cmp.Equal([]string{"n1"}, *res.NodeNames) {
		t.Errorf("uncordoned on the API server: failed %v, fit %v; want n1 to fit", res.FailedNodes, res.NodeNames)
	}
}

// Nodes whose cards are alike but for a cordon are never decided as one (the key of a node's state
// holds each card's cordon): found by TestFewFittingNodesOutsideTheSample, where a free node's fit
// was lent to 130 nodes with the same card cordoned, and kube-scheduler was sent to bind there.
func TestCordonedNodeDoesNotShareAFreeNodesVerdict(t *testing.T) {
	mark, err := annotations.EncodeCordon(annotations.Cordon{Reason: "reseat", By: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	for i := range 6 {
		node := gpuNode(nodeSpec{name: fmt.Sprintf("n%d", i), model: a40, memMiB: 10000, count: 1})
		if i != 2 {
			node.Annotations[annotations.CordonKey(uuidOf(node.Name, 0))] = mark
		}
		objs = append(objs, node)
	}
	h := newHarness(t, harnessOptions{}, objs...)
	pod := gpuPod("p", nil, ctr{name: "m", gpu: 1})
	h.createPods(pod)
	// Each order: the free node first, last and in the middle.
	for _, order := range [][]string{{"n2", "n0", "n1", "n3", "n4", "n5"}, {"n0", "n1", "n3", "n4", "n5", "n2"}, {"n0", "n2", "n1", "n3", "n4", "n5"}} {
		res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &order}))
		if res.NodeNames == nil || !cmp.Equal([]string{"n2"}, *res.NodeNames) || len(res.FailedNodes) != 5 {
			t.Errorf("order %v: fit %v, failed %v; want only n2 to fit", order, res.NodeNames, res.FailedNodes)
		}
	}
}

// The informer delivers the uncordon while the filter reads the node at the last moment (after the
// filter decided on the cordoned state, before it compares the read with the cache): the cache and
// the API server then agree, and the verdicts, decided on the mark now gone, must be decided again.
// Seen in TestCordonAndDrain under load: kube-scheduler's retry on the uncordon was refused "card
// … is cordoned" while the read had found no cordon, and the pod waited for the next cluster event.
func TestFilterDecidesAgainWhenTheInformerUncordonsDuringTheRead(t *testing.T) {
	node := gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 1})
	cordonCard(t, node, 0)
	h := newHarness(t, harnessOptions{}, node)
	pod := gpuPod("p", map[string]string{annotations.UseGPUUUID: uuidOf("n1", 0)}, ctr{name: "m", gpu: 1})
	h.createPods(pod)
	fresh := node.DeepCopy()
	delete(fresh.Annotations, annotations.CordonKey(uuidOf("n1", 0)))
	if _, err := h.client.CoreV1().Nodes().Update(context.Background(), fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	reads := 0
	h.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		reads++
		h.cache.UpsertNode(fresh) // the informer, meanwhile
		return false, nil, nil
	})
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1")}))
	if reads != 1 {
		t.Fatalf("the filter read the node %d times, want once (the cache still held the mark)", reads)
	}
	if res.Error != "" || len(res.FailedNodes) != 0 || res.NodeNames == nil || !cmp.Equal([]string{"n1"}, *res.NodeNames) {
		t.Errorf("uncordoned during the read: error %q, failed %v, fit %v; want n1 to fit", res.Error, res.FailedNodes, res.NodeNames)
	}
}

// A cordon the filter cannot verify at the last moment (the read of the Node fails) is answered
// with an error, which kube-scheduler retries after its backoff, not with a refusal, which would
// park the pod until the next cluster event (the uncordon that woke it was that event).
func TestFilterRetriesACordonItCannotRead(t *testing.T) {
	node := gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 1})
	cordonCard(t, node, 0)
	h := newHarness(t, harnessOptions{}, node)
	pod := gpuPod("p", nil, ctr{name: "m", gpu: 1})
	h.createPods(pod)
	h.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("context deadline exceeded")
	})
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1")}))
	if want := "reading node n1 to check its cordoned cards at the last moment: context deadline exceeded; trying again"; !strings.Contains(res.Error, want) {
		t.Errorf("filter: error %q, failed %v; want an error saying %q", res.Error, res.FailedNodes, want)
	}
}

// cordonCard marks card i of node cordoned, as kubectl cardinal cordon does ("reseat", by "ops").
func cordonCard(t *testing.T, node *corev1.Node, i int) {
	t.Helper()
	mark, err := annotations.EncodeCordon(annotations.Cordon{Reason: "reseat", By: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	node.Annotations[annotations.CordonKey(uuidOf(node.Name, i))] = mark
}
