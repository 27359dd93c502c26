package e2e

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// PriorityClasses of the preemption scenarios.
const (
	prioLow  = "e2e-low"
	prioHigh = "e2e-high"
)

// TestPreemption runs kube-scheduler's real preemption through Cardinal's preempt verb on node-a
// (8 whole A100s) and node-b (8 H100s, 8 slots each); each scenario leaves no pod behind.
func TestPreemption(t *testing.T) {
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries,
		Nodes: []stack.NodeSpec{{Name: nodeA, Shares: 1}, {Name: nodeB, Shares: 8}}})
	e := &env{Stack: s, client: s.Cluster.Client}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	for name, value := range map[string]int32{prioLow: 100, prioHigh: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := e.client.SchedulingV1().PriorityClasses().Create(ctx(t), pc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create PriorityClass %s: %v", name, err)
		}
	}
	scenarios := []struct {
		name string
		run  func(*testing.T, *env)
	}{
		{"use-gputype A100 pod preempts as many A100 holders as it needs", testPreemptWhole},
		{"use-gpuuuid pod preempts only the holder of its card", testPreemptUUID},
		{"pod whose priority is not higher preempts nothing", testPreemptNotHigher},
		{"shared-slot pod preempts the fewest slot holders", testPreemptShared},
		{"freed cards wait for the nominated pod", testNomineeKeepsCards},
	}
	for _, sc := range scenarios {
		if !t.Run(sc.name, func(t *testing.T) {
			t.Cleanup(func() { e.deleteAll(t) })
			start := time.Now()
			sc.run(t, e)
			t.Logf("scenario took %s", time.Since(start).Round(100*time.Millisecond))
		}) {
			if err := e.componentsAlive(); err != nil {
				t.Fatalf("stopping after %q: %v", sc.name, err)
			}
		}
	}
}

// withPriority sets the pod's PriorityClass.
func withPriority(p *corev1.Pod, class string) *corev1.Pod {
	p.Spec.PriorityClassName = class
	return p
}

// fill creates pods prefix-0..n-1 of priority class low, each asking one card of model (shares
// of memMiB when memMiB > 0), waits until they run and returns the card each holds.
func (e *env) fill(t *testing.T, prefix, model string, n int, memMiB int64) map[string]string {
	t.Helper()
	ns := names(prefix, n)
	for _, name := range ns {
		e.create(t, withPriority(pod(name, map[string]string{annotations.UseGPUType: model}, ctr("main", gpu{cards: 1, memMiB: memMiB})), prioLow))
	}
	e.waitRunning(t, ns...)
	cards := map[string]string{}
	for key, h := range e.truth(t, ns...) {
		cards[strings.TrimSuffix(key, "/main")] = h.UUIDs()[0]
	}
	return cards
}

// gone returns the names of pods that no longer exist or are being deleted.
func (e *env) gone(t *testing.T, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		p, err := e.client.CoreV1().Pods(namespace).Get(ctx(t), n, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, n)
		case err != nil:
			t.Fatalf("get pod %s: %v", n, err)
		case p.DeletionTimestamp != nil:
			out = append(out, n)
		}
	}
	return out
}

// preemptionEvent returns the message of the extender's GPUPreemption Event on pod name.
func (e *env) preemptionEvent(t *testing.T, name string) string {
	t.Helper()
	uid := string(e.get(t, name).UID) // pods of the same name in earlier scenarios had Events too
	sel := fields.Set{"involvedObject.uid": uid, "involvedObject.namespace": namespace, "reason": scheduler.EventPreemption}.AsSelector().String()
	events, err := e.client.CoreV1().Events(namespace).List(ctx(t), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	var msgs []string
	for _, ev := range events.Items {
		msgs = append(msgs, ev.Message)
	}
	return strings.Join(msgs, "\n")
}

// preempted runs pod p, which must preempt: it waits until p runs and checks that exactly the
// victims it expects (want of them among candidates, each on a card in allowed when allowed is
// not nil) were preempted, that p runs on their cards, that the GPUPreemption Event named them and
// that nothing is double-booked. It returns the victims.
func (e *env) preempted(t *testing.T, p *corev1.Pod, cards map[string]string, want int, allowed func(victim string) bool) []string {
	t.Helper()
	start := time.Now()
	e.create(t, p)
	e.waitRunning(t, p.Name)
	t.Logf("%s preempted and ran in %s", p.Name, time.Since(start).Round(100*time.Millisecond))
	candidates := slices.Sorted(maps.Keys(cards))
	victims := e.gone(t, candidates...)
	if len(victims) != want {
		t.Fatalf("%s preempted %v, want %d pods", p.Name, victims, want)
	}
	var freed []string
	for _, v := range victims {
		if allowed != nil && !allowed(v) {
			t.Errorf("%s preempted %s (card %s), which frees nothing it can use", p.Name, v, cards[v])
		}
		freed = append(freed, cards[v])
	}
	h := e.truth(t, p.Name)[p.Name+"/main"]
	if got := slices.Sorted(slices.Values(h.UUIDs())); !slices.Equal(got, slices.Sorted(slices.Values(freed))) {
		t.Errorf("%s runs on %v, its victims held %v", p.Name, got, freed)
	}
	ev := e.preemptionEvent(t, p.Name)
	for _, v := range victims {
		if !strings.Contains(ev, namespace+"/"+v) {
			t.Errorf("the %s Event does not name victim %s: %q", scheduler.EventPreemption, v, ev)
		}
	}
	t.Logf("%s preempted %v; Event: %s", p.Name, victims, ev)
	e.noDoubleBooking(t, h.Node)
	return victims
}

// testPreemptWhole fills node-a with low-priority pods; a high-priority pod asking two A100s
// preempts exactly two of them and runs on their cards.
func testPreemptWhole(t *testing.T, e *env) {
	cards := e.fill(t, "low", "A100", 8, 0)
	hi := withPriority(pod("hi", map[string]string{annotations.UseGPUType: "A100"}, ctr("main", gpu{cards: 2})), prioHigh)
	e.preempted(t, hi, cards, 2, nil)
}

// testPreemptUUID: kube-scheduler's dry run picks any low-priority pod of node-a (it counts
// nvidia.com/gpu); the pod asking one card by UUID preempts the holder of that card alone.
func testPreemptUUID(t *testing.T, e *env) {
	cards := e.fill(t, "low", "A100", 8, 0)
	target := cards["low-5"]
	hi := withPriority(pod("hi", map[string]string{annotations.UseGPUUUID: target}), prioHigh)
	e.preempted(t, hi, cards, 1, func(v string) bool { return cards[v] == target })
}

// testPreemptNotHigher: a pod of the same priority as the holders waits and preempts nothing.
func testPreemptNotHigher(t *testing.T, e *env) {
	cards := e.fill(t, "low", "A100", 8, 0)
	e.create(t, withPriority(pod("same", map[string]string{annotations.UseGPUType: "A100"}), prioLow))
	msg := e.waitUnschedulable(t, "same")
	t.Logf("same: %s", msg)
	// Give kube-scheduler a few more attempts to preempt wrongly.
	time.Sleep(5 * time.Second)
	if victims := e.gone(t, slices.Sorted(maps.Keys(cards))...); len(victims) > 0 {
		t.Errorf("a pod of equal priority preempted %v", victims)
	}
	if p := e.get(t, "same"); p.Spec.NodeName != "" || p.Status.NominatedNodeName != "" {
		t.Errorf("same: bound to %q, nominated to %q; want neither", p.Spec.NodeName, p.Status.NominatedNodeName)
	}
}

// testPreemptShared fills node-b's H100s with a 50000 MiB and a 30000 MiB low-priority pod each
// (kube-scheduler sees 48 of 64 slots free there, so its dry run proposes no victim on node-b; node-a
// full of low-priority A100 pods is its only candidate, which Cardinal drops and replaces with
// node-b). A pod asking 45000 MiB of an H100 preempts one 50000 MiB holder, the fewest that make
// room, and runs on its card.
func testPreemptShared(t *testing.T, e *env) {
	e.fill(t, "low-a", "A100", 8, 0)
	big := e.fill(t, "low-big", "H100", 8, 50000)
	small := e.fill(t, "low-small", "H100", 8, 30000)
	all := map[string]string{}
	maps.Copy(all, big)
	maps.Copy(all, small)
	hi := withPriority(pod("hi", map[string]string{annotations.UseGPUType: "H100"}, ctr("main", gpu{cards: 1, memMiB: 45000})), prioHigh)
	e.preempted(t, hi, all, 1, func(v string) bool { _, isBig := big[v]; return isBig })
	if victims := e.gone(t, names("low-a", 8)...); len(victims) > 0 {
		t.Errorf("A100 holders preempted for an H100 pod: %v", victims)
	}
}

// testNomineeKeepsCards: node-b's H100s each hold a 50000 MiB low-priority pod but one, which is
// free. A high-priority pod nominated to node-b (held back by a scheduling gate, so the moment
// between its victims' end and its own bind lasts as long as the test needs) keeps that card: a
// pod of lower priority asking the same is refused there with a reason naming the nominee, and
// the nominee, released, runs on the card.
func testNomineeKeepsCards(t *testing.T, e *env) {
	big := e.fill(t, "low-big", "H100", 8, 50000)
	free := big["low-big-3"]
	e.delete(t, "low-big-3")
	hi := withPriority(pod("hi", map[string]string{annotations.UseGPUType: "H100"}, ctr("main", gpu{cards: 1, memMiB: 45000})), prioHigh)
	hi.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "e2e.cardinal.io/hold"}}
	e.create(t, hi)
	got := e.get(t, "hi")
	got.Status.NominatedNodeName = nodeB
	if _, err := e.client.CoreV1().Pods(namespace).UpdateStatus(ctx(t), got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("nominate hi: %v", err)
	}
	e.create(t, withPriority(pod("mid", map[string]string{annotations.UseGPUType: "H100"}, ctr("main", gpu{cards: 1, memMiB: 45000})), prioLow))
	msg := e.waitUnschedulable(t, "mid")
	if !strings.Contains(msg, "cards kept for nominated pods of higher or equal priority: "+namespace+"/hi") {
		t.Errorf("mid's FailedScheduling message does not name the nominee: %s", msg)
	}
	t.Logf("mid: %s", msg)
	got = e.get(t, "hi")
	got.Spec.SchedulingGates = nil
	if _, err := e.client.CoreV1().Pods(namespace).Update(ctx(t), got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("release hi: %v", err)
	}
	e.waitRunning(t, "hi")
	h := e.truth(t, "hi")["hi/main"]
	if h.UUIDs()[0] != free {
		t.Errorf("hi runs on %v, want the free card %s", h.UUIDs(), free)
	}
	if p := e.get(t, "mid"); p.Spec.NodeName != "" {
		t.Errorf("mid was bound to %s", p.Spec.NodeName)
	}
	e.noDoubleBooking(t, nodeB)
}
