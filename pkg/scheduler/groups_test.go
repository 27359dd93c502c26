package scheduler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// groupPod is a member of pod group group (total pods) asking gpu whole cards, created at second
// created (members are planned oldest first).
func groupPod(name, group string, total int, gpu int64, created int64) *corev1.Pod {
	labels, ann := annotations.EncodePodGroup(annotations.PodGroup{Name: group, Total: total})
	p := gpuPod(name, ann, ctr{name: "m", gpu: gpu})
	p.Labels = labels
	p.CreationTimestamp = metav1.Unix(1_700_000_000+created, 0)
	return p
}

// addPending creates pods in the API and shows them to the cache, as the pod informer does.
func (h *harness) addPending(pods ...*corev1.Pod) {
	h.t.Helper()
	h.createPods(pods...)
	for _, p := range pods {
		h.cache.UpsertPod(p)
	}
}

// deletePod deletes a pod from the API and the cache, as the pod informer does.
func (h *harness) deletePod(name string) {
	h.t.Helper()
	p, err := h.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.client.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.cache.DeletePod(p.UID)
}

// filterGroup filters pod on nodes and returns the passing nodes and the failed ones' reasons.
func (h *harness) filterGroup(pod *corev1.Pod, nodes ...string) ([]string, map[string]string) {
	h.t.Helper()
	res := decodeInto[extenderv1.ExtenderFilterResult](h.t.(*testing.T), h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names(nodes...)}))
	if res.Error != "" {
		h.t.Fatalf("filter %s: %s", pod.Name, res.Error)
	}
	failed := map[string]string{}
	for n, r := range res.FailedNodes {
		failed[n] = r
	}
	for n, r := range res.FailedAndUnresolvableNodes {
		failed[n] = r
	}
	var fit []string
	if res.NodeNames != nil {
		fit = *res.NodeNames
	}
	return fit, failed
}

// schedule does what kube-scheduler does for one pod: filter, then bind to the one node that
// passes. It returns the node, or "" and the filter's reasons.
func (h *harness) schedule(pod *corev1.Pod, nodes ...string) (string, map[string]string) {
	h.t.Helper()
	fit, failed := h.filterGroup(pod, nodes...)
	if len(fit) == 0 {
		return "", failed
	}
	if len(fit) != 1 {
		h.t.Fatalf("filter of group member %s passed %v, want only its planned node", pod.Name, fit)
	}
	if err := h.bind(pod.Name, fit[0]); err != "" {
		h.t.Fatalf("bind %s to %s: %s", pod.Name, fit[0], err)
	}
	return fit[0], nil
}

// cardsHeld counts the cards held on the nodes.
func (h *harness) cardsHeld(nodes ...string) int {
	n := 0
	for _, name := range nodes {
		for _, c := range h.cache.NodeUsage(name).Cards {
			if c.Held > 0 {
				n++
			}
		}
	}
	return n
}

// Two groups of 4 pods × 4 cards on two nodes of 8 cards: each fits alone, not both. The first
// planned runs whole; the second holds nothing, each member says why, and it runs whole once the
// first is gone.
func TestGroupsThatFitAloneButNotTogether(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true},
		gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 46068, count: 8}),
		gpuNode(nodeSpec{name: "n2", model: a40, memMiB: 46068, count: 8}))
	var a, b []*corev1.Pod
	for i := range 4 {
		a = append(a, groupPod("a-"+itoa(i), "train-a", 4, 4, int64(i)))
		b = append(b, groupPod("b-"+itoa(i), "train-b", 4, 4, int64(10+i)))
	}
	h.addPending(a...)
	h.addPending(b...)

	// kube-scheduler interleaves the two groups' pods; the first member filtered plans its group.
	nodeOf := map[string]string{}
	for i := range 4 {
		node, why := h.schedule(a[i], "n1", "n2")
		if node == "" {
			t.Fatalf("group train-a member %s not placed: %v", a[i].Name, why)
		}
		nodeOf[a[i].Name] = node
		if node, why := h.schedule(b[i], "n1", "n2"); node != "" {
			t.Fatalf("group train-b member %s placed on %s while train-a holds the cards", b[i].Name, node)
		} else {
			// 16 cards held by train-a: no member of train-b fits anywhere.
			want := "group train-b needs 4 pods; 0 fit now (default/b-0 fits no node: n1: needs 4 free cards, 0 of 8 are free; n2: needs 4 free cards, 0 of 8 are free)"
			if diff := cmp.Diff(map[string]string{"n1": want, "n2": want}, why); diff != "" {
				t.Errorf("train-b reasons (-want +got):\n%s", diff)
			}
		}
	}
	// Fewest nodes: two members on each node (8 cards each), every card held once.
	if diff := cmp.Diff(map[string]string{"a-0": "n1", "a-1": "n1", "a-2": "n2", "a-3": "n2"}, nodeOf); diff != "" {
		t.Errorf("train-a nodes (-want +got):\n%s", diff)
	}
	if got := h.cardsHeld("n1", "n2"); got != 16 {
		t.Errorf("cards held = %d, want 16", got)
	}
	if got := h.cache.GroupSlots("default/train-b"); len(got) != 0 {
		t.Errorf("train-b holds reservations on %v, want none", got)
	}
	for _, p := range a {
		if asg, node := h.assignmentOf("default", p.Name); asg == nil || node != nodeOf[p.Name] || len(asg.Containers[0].Devices) != 4 {
			t.Errorf("%s: assignment %+v on %q", p.Name, asg, node)
		}
	}

	// train-a ends: train-b is planned at its next filter and runs whole.
	for _, p := range a {
		h.deletePod(p.Name)
	}
	for _, p := range b {
		if node, why := h.schedule(p, "n1", "n2"); node == "" {
			t.Fatalf("train-b member %s not placed after train-a ended: %v", p.Name, why)
		}
	}
	if got := h.cardsHeld("n1", "n2"); got != 16 {
		t.Errorf("cards held = %d, want 16", got)
	}
	if got := h.cache.GroupSlots("default/train-b"); len(got) != 0 {
		t.Errorf("train-b still has reservations %v after every member was bound", got)
	}
}

// A group whose pods cannot all be placed holds nothing, and its members cannot be bound one by one.
func TestGroupLargerThanTheClusterHoldsNothing(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 46068, count: 4}))
	var g []*corev1.Pod
	for i := range 3 {
		g = append(g, groupPod("g-"+itoa(i), "big", 3, 2, int64(i)))
	}
	h.addPending(g...)
	// 3 pods × 2 cards on 4 cards: two fit, the third does not.
	fit, failed := h.filterGroup(g[0], "n1")
	want := "group big needs 3 pods; 2 fit now (default/g-2 fits no node: n1: needs 2 free cards, 0 of 4 are free)"
	if len(fit) != 0 || failed["n1"] != want {
		t.Fatalf("filter passed %v, reason %q, want none and %q", fit, failed["n1"], want)
	}
	if got := h.cardsHeld("n1"); got != 0 {
		t.Errorf("cards held = %d after a group that cannot fit was filtered, want 0", got)
	}
	if got := h.cache.GroupSlots("default/big"); len(got) != 0 {
		t.Errorf("reservations %v, want none", got)
	}
	if err := h.bind("g-0", "n1"); !strings.Contains(err, "group big holds no cards for it yet") {
		t.Errorf("bind of an unplanned member: %q, want a refusal", err)
	}
	if got := h.cardsHeld("n1"); got != 0 {
		t.Errorf("cards held = %d after a refused bind, want 0", got)
	}
}

// A group whose pods do not all exist yet waits whole, with the count in its reason.
func TestGroupWaitsForItsPods(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 46068, count: 8}))
	p0, p1 := groupPod("w-0", "job", 4, 1, 0), groupPod("w-1", "job", 4, 1, 1)
	h.addPending(p0, p1)
	_, failed := h.filterGroup(p0, "n1")
	if want := "group job needs 4 pods; 2 exist, waiting for the rest (0 placed)"; failed["n1"] != want {
		t.Errorf("reason %q, want %q", failed["n1"], want)
	}
	if got := h.cardsHeld("n1"); got != 0 {
		t.Errorf("cards held = %d, want 0", got)
	}
	// A label without a readable count is an error naming the key and value.
	bad := groupPod("bad", "job", 4, 1, 2)
	bad.Annotations[annotations.PodGroupTotalCount] = "four"
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: bad, NodeNames: names("n1")}))
	if want := `pod default/bad: kueue.x-k8s.io/pod-group-total-count: "four" is not a whole number`; res.Error != want {
		t.Errorf("filter error %q, want %q", res.Error, want)
	}
}

// A member deleted after the plan and before its bind leaves its cards to the group; a member
// created again with the same request takes them over and the group completes with exactly the
// cards it planned. A member deleted for good is freed with the plan when it expires.
func TestGroupMemberDeletedMidPlacement(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	h := newHarness(t, harnessOptions{informer: true, clock: clk},
		gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 46068, count: 4}),
		gpuNode(nodeSpec{name: "n2", model: a40, memMiB: 46068, count: 4}))
	var m []*corev1.Pod
	for i := range 3 {
		m = append(m, groupPod("m-"+itoa(i), "mid", 3, 2, int64(i)))
	}
	h.addPending(m...)
	if node, why := h.schedule(m[0], "n1", "n2"); node == "" {
		t.Fatalf("m-0 not placed: %v", why)
	}
	// Plan: m-0 and m-1 on n1 (fewest nodes), m-2 on n2.
	if diff := cmp.Diff([]string{"n1", "n2"}, h.cache.GroupSlots("default/mid")); diff != "" {
		t.Errorf("slots after m-0 bound (-want +got):\n%s", diff)
	}
	h.deletePod("m-1")
	if diff := cmp.Diff([]string{"n1", "n2"}, h.cache.GroupSlots("default/mid")); diff != "" {
		t.Errorf("slots after m-1 deleted: its cards must stay the group's (-want +got):\n%s", diff)
	}
	if got := h.cardsHeld("n1", "n2"); got != 6 {
		t.Errorf("cards held = %d, want 6 (3 members × 2)", got)
	}
	// A pod of another group cannot take the vacant slot's cards.
	other := groupPod("o-0", "other", 1, 2, 5)
	h.addPending(other)
	if node, _ := h.schedule(other, "n1"); node != "" {
		t.Fatalf("another group's pod took the cards of mid's vacant slot on %s", node)
	}
	// The job controller creates m-1 again (new UID, same request): it rejoins on n1.
	again := groupPod("m-1b", "mid", 3, 2, 6)
	h.addPending(again)
	if node, why := h.schedule(again, "n1", "n2"); node != "n1" {
		t.Fatalf("re-created member placed on %q (%v), want n1", node, why)
	}
	if node, why := h.schedule(m[2], "n1", "n2"); node != "n2" {
		t.Fatalf("m-2 placed on %q (%v), want n2", node, why)
	}
	if got := h.cache.GroupSlots("default/mid"); len(got) != 0 {
		t.Errorf("reservations %v left after every member was bound", got)
	}
	if got := h.cardsHeld("n1", "n2"); got != 6 {
		t.Errorf("cards held = %d, want 6", got)
	}

	// A second group loses a member for good: its plan expires and frees everything unbound.
	h.deletePod("o-0")
	var q []*corev1.Pod
	for i := range 2 {
		q = append(q, groupPod("q-"+itoa(i), "gone", 2, 1, int64(20+i)))
	}
	h.addPending(q...)
	if node, why := h.schedule(q[0], "n2"); node == "" {
		t.Fatalf("q-0 not placed: %v", why)
	}
	h.deletePod("q-1")
	if got := h.cardsHeld("n2"); got != 4 {
		t.Fatalf("n2 cards held = %d, want 4 (m-2's 2, q-0's 1, q-1's vacant 1)", got)
	}
	clk.Step(DefaultReservationTTL + time.Second)
	h.srv.settleReservations(context.Background(), DefaultReservationTTL)
	if got := h.cardsHeld("n2"); got != 3 {
		t.Errorf("n2 cards held = %d after the plan expired, want 3 (the bound pods' only)", got)
	}
	if got := h.cache.GroupSlots("default/gone"); len(got) != 0 {
		t.Errorf("reservations %v left after the plan expired", got)
	}
}

// A plan whose members are never bound expires after the reservation timeout and holds nothing;
// the next member's filter plans again.
func TestGroupPlanExpires(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	h := newHarness(t, harnessOptions{informer: true, clock: clk}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 46068, count: 4}))
	p0, p1 := groupPod("e-0", "exp", 2, 2, 0), groupPod("e-1", "exp", 2, 2, 1)
	h.addPending(p0, p1)
	if fit, why := h.filterGroup(p0, "n1"); len(fit) != 1 {
		t.Fatalf("e-0 filter: %v %v", fit, why)
	}
	if got := h.cardsHeld("n1"); got != 4 {
		t.Fatalf("cards held = %d after the plan, want 4", got)
	}
	// Not yet expired: the reservation sweeper leaves group reservations to the plan.
	clk.Step(DefaultReservationTTL / 2)
	h.srv.settleReservations(context.Background(), DefaultReservationTTL)
	if got := h.cardsHeld("n1"); got != 4 {
		t.Fatalf("cards held = %d before the timeout, want 4", got)
	}
	clk.Step(DefaultReservationTTL)
	h.srv.settleReservations(context.Background(), DefaultReservationTTL)
	if got := h.cardsHeld("n1"); got != 0 {
		t.Errorf("cards held = %d after the plan expired, want 0", got)
	}
	if got := testutil.ToFloat64(h.srv.metrics.groupsExpired); got != 1 {
		t.Errorf("expired plans metric = %v, want 1", got)
	}
	// Planned again at the next filter, and bound whole.
	for _, p := range []*corev1.Pod{p1, p0} {
		if node, why := h.schedule(p, "n1"); node != "n1" {
			t.Fatalf("%s after expiry: %q %v", p.Name, node, why)
		}
	}
}

// A member of a group preempts nothing: freeing cards for one member does not place its group.
func TestGroupMemberPreemptsNothing(t *testing.T) {
	low := gpuPod("low", nil, ctr{name: "m", gpu: 4})
	low.Spec.NodeName = "n1"
	h := newHarness(t, harnessOptions{informer: true}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 46068, count: 4}), low)
	hi := groupPod("hi-0", "hi", 1, 4, 0)
	prio := int32(1000)
	hi.Spec.Priority = &prio
	h.addPending(hi)
	res := h.srv.Preempt(context.Background(), &extenderv1.ExtenderPreemptionArgs{Pod: hi,
		NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"n1": {Pods: []*extenderv1.MetaPod{{UID: string(low.UID)}}}}})
	if len(res.NodeNameToMetaVictims) != 0 {
		t.Errorf("preempt for a group member answered %v, want no node", res.NodeNameToMetaVictims)
	}
}

// A Binding the API server refuses keeps the member's reservation (its cards stay the group's),
// a bind to another node than the planned one is refused, and the retry binds the reserved cards.
func TestGroupRefusedBindingKeepsTheReservation(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true},
		gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 46068, count: 2}),
		gpuNode(nodeSpec{name: "n2", model: a40, memMiB: 46068, count: 2}))
	p0, p1 := groupPod("r-0", "ref", 2, 2, 0), groupPod("r-1", "ref", 2, 2, 1)
	h.addPending(p0, p1)
	fit, why := h.filterGroup(p0, "n1", "n2")
	if len(fit) != 1 {
		t.Fatalf("r-0 filter: %v %v", fit, why)
	}
	planned := fit[0]
	other := "n1"
	if planned == "n1" {
		other = "n2"
	}
	refuse := true
	h.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" && refuse {
			refuse = false
			return true, nil, apierrors.NewForbidden(corev1.Resource("pods/binding"), "r-0", errors.New("apiserver says no"))
		}
		return false, nil, nil
	})
	if err := h.bind("r-0", planned); !strings.Contains(err, "apiserver says no") {
		t.Fatalf("bind error %q, want the refusal", err)
	}
	if got := h.cardsHeld("n1", "n2"); got != 4 {
		t.Errorf("cards held = %d after a refused Binding, want 4 (the group's plan)", got)
	}
	if err := h.bind("r-0", other); !strings.Contains(err, ErrBindPending.Error()) {
		t.Errorf("bind to the node the plan does not hold: %q, want a refusal", err)
	}
	if err := h.bind("r-0", planned); err != "" {
		t.Fatalf("retried bind: %s", err)
	}
	if node, why := h.schedule(p1, "n1", "n2"); node != other {
		t.Fatalf("r-1 placed on %q (%v), want %s", node, why, other)
	}
	if got := h.cardsHeld("n1", "n2"); got != 4 {
		t.Errorf("cards held = %d, want 4", got)
	}
}
