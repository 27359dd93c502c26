package scheduler

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// Fault windows of the extender (issue: never double-book). Each test names the fault it injects;
// the invariant is always the same: a card a pod may run on is never given to another pod.

// held is how many device IDs of card i of node are held in the cache.
func (h *harness) held(node string, i int) int {
	h.t.Helper()
	u := h.cache.NodeUsage(node)
	if u == nil {
		h.t.Fatalf("node %s has no state", node)
	}
	return u.Cards[i].Held
}

// failBindings makes every Binding POST return err; with commit, the write is applied first (a
// reply lost after the API server stored it, e.g. kube-scheduler's httpTimeout firing).
func (h *harness) failBindings(commit bool, err error) {
	h.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "binding" {
			return false, nil, nil
		}
		if commit {
			if cerr := h.commitBinding(ca.GetObject().(*corev1.Binding), false); cerr != nil {
				return true, nil, cerr
			}
		}
		return true, nil, err
	})
}

// A second bind of a pod the informer shows bound must not move or free what it holds: before the
// fix, bind x→n2 unapplied x's card on n1 and y was then bound onto it.
func TestBindOfBoundPodKeepsItsCards(t *testing.T) {
	x, y := gpuPod("x", nil, ctr{name: "m", gpu: 1}), gpuPod("y", nil, ctr{name: "m", gpu: 1})
	h := newHarness(t, harnessOptions{informer: true},
		gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 1}), gpuNode(nodeSpec{name: "n2", model: a40, memMiB: 100, count: 1}))
	h.createPods(x, y)
	if err := h.bind("x", "n1"); err != "" {
		t.Fatal(err)
	}
	// The lister may still show x unbound; the cache's record must refuse on its own.
	h.srv.pods = staticPods{x}
	err := h.bind("x", "n2")
	if !strings.Contains(err, ErrAlreadyBound.Error()) {
		t.Fatalf("second bind of x: %q, want %q", err, ErrAlreadyBound)
	}
	if got := h.held("n1", 0); got != 1 {
		t.Fatalf("x's card on n1 held %d times after the refused bind, want 1", got)
	}
	h.srv.pods = &clientPods{client: h.client}
	if err := h.bind("y", "n1"); !strings.Contains(err, ErrNoFit.Error()) {
		t.Fatalf("bind y onto x's only card: %q, want no fit", err)
	}
	// And a bind for a pod whose object is already bound is refused before anything is reserved.
	if err := h.bind("x", "n2"); !strings.Contains(err, "already bound to node n1") {
		t.Fatalf("bind of a bound pod: %q", err)
	}
	if got := h.held("n2", 0); got != 0 {
		t.Fatalf("n2's card held %d times, want 0", got)
	}
}

// staticPods is a PodSource that answers stale copies (a lagging lister).
type staticPods []*corev1.Pod

func (s staticPods) Pod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	for _, p := range s {
		if p.Namespace == ns && p.Name == name {
			return p.DeepCopy(), nil
		}
	}
	return nil, errors.New("not found")
}

// A Binding that commits but returns an error (the context deadline kube-scheduler's httpTimeout
// produces) must not free the card: before the fix the next bind double-booked it.
func TestBindCommittedDespiteErrorKeepsCard(t *testing.T) {
	x, y := gpuPod("x", nil, ctr{name: "m", gpu: 1}), gpuPod("y", nil, ctr{name: "m", gpu: 1})
	h := newHarness(t, harnessOptions{}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 1}))
	h.createPods(x, y)
	h.failBindings(true, context.DeadlineExceeded)
	if err := h.bind("x", "n1"); err != "" {
		t.Fatalf("bind x: %q; the read-back shows it bound with its assignment, so it succeeded", err)
	}
	if got := h.held("n1", 0); got != 1 {
		t.Fatalf("card held %d times, want 1", got)
	}
	if err := h.bind("y", "n1"); !strings.Contains(err, ErrNoFit.Error()) {
		t.Fatalf("bind y: %q, want no fit (x holds the only card)", err)
	}
}

// A Binding whose outcome is unknown (no reply, pod still unbound when read back) keeps the
// reservation; a retry on the same node writes the same assignment, another node waits, and after
// the reservation timeout a pod still unbound loses it.
func TestBindOutcomeUnknown(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Unix(1_000_000, 0))
	x, y := gpuPod("x", nil, ctr{name: "m", gpu: 1}), gpuPod("y", nil, ctr{name: "m", gpu: 1})
	h := newHarness(t, harnessOptions{clock: clk},
		gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 2}), gpuNode(nodeSpec{name: "n2", model: a40, memMiB: 100, count: 1}))
	h.createPods(x, y)
	h.failBindings(false, errors.New("http2: client connection lost"))
	if err := h.bind("x", "n1"); !strings.Contains(err, "connection lost") {
		t.Fatalf("bind x: %q", err)
	}
	if got := h.held("n1", 0) + h.held("n1", 1); got != 1 {
		t.Fatalf("n1 holds %d device IDs after an unknown outcome, want x's 1", got)
	}
	first := h.cache.pods[x.UID].asg

	// Filter pins the pod to the node its earlier binding may still land on.
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: x, NodeNames: names("n1", "n2")}))
	if got := *res.NodeNames; len(got) != 1 || got[0] != "n1" {
		t.Fatalf("filter of a pod with a pending binding: fit %v, failed %v", got, res.FailedNodes)
	}
	if !strings.Contains(res.FailedNodes["n2"], "earlier binding to node n1") {
		t.Errorf("n2 reason %q", res.FailedNodes["n2"])
	}
	if err := h.bind("x", "n2"); !strings.Contains(err, ErrBindPending.Error()) {
		t.Fatalf("bind x to n2: %q, want %q", err, ErrBindPending)
	}

	// The API answers again: the retry on n1 writes the very same assignment.
	h.client.ReactionChain = h.client.ReactionChain[1:]
	if err := h.bind("x", "n1"); err != "" {
		t.Fatal(err)
	}
	got, node := h.assignmentOf("default", "x")
	if node != "n1" || got == nil || got.Containers[0].Devices[0].ID != first.Containers[0].Devices[0].ID {
		t.Fatalf("retry bound x to %s with %+v, want the reserved %+v", node, got, first)
	}

	// y's binding is lost too and y never gets bound: the reservation expires after the TTL.
	h.failBindings(false, errors.New("http2: client connection lost"))
	if err := h.bind("y", "n2"); err == "" {
		t.Fatal("bind y succeeded")
	}
	if h.held("n2", 0) != 1 {
		t.Fatal("y's reservation is not held")
	}
	h.srv.settleReservations(context.Background(), DefaultReservationTTL)
	if h.held("n2", 0) != 1 {
		t.Fatal("a fresh reservation expired")
	}
	clk.SetTime(clk.Now().Add(DefaultReservationTTL + time.Second))
	h.srv.settleReservations(context.Background(), DefaultReservationTTL)
	if got := h.held("n2", 0); got != 0 {
		t.Fatalf("y's reservation still held %d after the TTL with y unbound", got)
	}
	// x is bound (the informer was never told): settling keeps its card, now as a bound record.
	if got := h.held("n1", 0) + h.held("n1", 1); got != 1 {
		t.Fatalf("x's card held %d times after settling, want 1", got)
	}
	if rec := h.cache.pods[x.UID]; rec == nil || rec.reserved {
		t.Fatalf("x's record after settling: %+v, want a bound record", rec)
	}
}

// Until the caches have synced, a card a running pod holds looks free: bind and prioritize refuse.
func TestBindAndPrioritizeWaitForSync(t *testing.T) {
	synced := false
	x := gpuPod("x", nil, ctr{name: "m", gpu: 1})
	h := newHarness(t, harnessOptions{ready: func() bool { return synced }}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 1}))
	h.createPods(x)
	if err := h.bind("x", "n1"); !strings.Contains(err, errNotSynced.Error()) {
		t.Fatalf("bind before sync: %q", err)
	}
	if _, node := h.assignmentOf("default", "x"); node != "" {
		t.Fatalf("pod bound to %s before sync", node)
	}
	if w := h.post("/prioritize", extenderv1.ExtenderArgs{Pod: x, NodeNames: names("n1")}); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("prioritize before sync: %d %s", w.Code, w.Body.String())
	}
	synced = true
	if err := h.bind("x", "n1"); err != "" {
		t.Fatal(err)
	}
	p, err := h.client.CoreV1().Pods("default").Get(t.Context(), "x", metav1.GetOptions{})
	if err != nil || p.Spec.NodeName != "n1" {
		t.Fatalf("x not bound after sync: %v", err)
	}
}

// A `helm upgrade` that changes shares while pods run must not make their cards look free: before
// the fix, holdings whose device IDs the new inventory no longer offers were dropped silently.
func TestSharesChangeKeepsHoldings(t *testing.T) {
	share := func(name string, mem int64) *corev1.Pod {
		return gpuPod(name, nil, ctr{name: "m", gpu: 1, mem: mem, cores: 10})
	}
	cases := []struct {
		name       string
		from, to   int // shares before and after
		held       annotations.DeviceAssignment
		heldPod    *corev1.Pod
		next       *corev1.Pod
		wantHeld   int  // device IDs held on the card after the change
		wantNoRoom bool // the next pod must not fit on the card
	}{
		{"whole card on a card that becomes shared", 1, 4, dev("GPU-n1-0", 10000, 100), gpuPod("w", nil, ctr{name: "m", gpu: 1}),
			share("next", 1000), 1, true},
		{"slot beyond the new share count, memory still counted", 4, 2, dev("GPU-n1-0::3", 9000, 10), share("s", 9000),
			share("next", 2000), 1, true},
		{"slot on a card that becomes exclusive", 4, 1, dev("GPU-n1-0::2", 1000, 10), share("s", 1000),
			gpuPod("next", nil, ctr{name: "m", gpu: 1}), 1, true},
		{"slot beyond the new count leaves the other slot usable", 4, 2, dev("GPU-n1-0::3", 1000, 10), share("s", 1000),
			share("next", 1000), 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 1, shares: c.from}))
			p := withAssignment(t, bound(c.heldPod, "n1"), "n1", annotations.ContainerAssignment{Name: "m", Devices: []annotations.DeviceAssignment{c.held}})
			p.Status.Phase = corev1.PodRunning
			h.cache.UpsertPod(p)
			h.cache.UpsertNode(gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 1, shares: c.to}))
			if got := h.held("n1", 0); got != c.wantHeld {
				t.Fatalf("after shares %d→%d the card holds %d device IDs, want %d", c.from, c.to, got, c.wantHeld)
			}
			h.createPods(c.next)
			err := h.bind("next", "n1")
			if noRoom := strings.Contains(err, ErrNoFit.Error()); noRoom != c.wantNoRoom || (err != "" && !noRoom) {
				t.Fatalf("bind of the next pod: %q, want no-fit=%v", err, c.wantNoRoom)
			}
			// The running pod leaving frees exactly what it held.
			h.cache.DeletePod(p.UID)
			if got, want := h.held("n1", 0), map[bool]int{true: 0, false: 1}[c.wantNoRoom]; got != want {
				t.Fatalf("after the holder left: %d device IDs held, want %d (the next pod's)", got, want)
			}
			if u := h.cache.NodeUsage("n1").Cards[0].Usage; c.wantNoRoom && u != (core.Usage{}) {
				t.Fatalf("usage left behind: %+v", u)
			}
		})
	}
}

// Two pods on slots 2 and 3 of a card whose shares drop from 4 to 2 fill it: a third must not get
// slot 0 though the new inventory's slots 0 and 1 are unused.
func TestSharesShrinkCountsOrphanSlots(t *testing.T) {
	h := newHarness(t, harnessOptions{}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 1, shares: 4}))
	for i, id := range []string{"GPU-n1-0::2", "GPU-n1-0::3"} {
		p := withAssignment(t, bound(gpuPod("s"+itoa(i), nil, ctr{name: "m", gpu: 1, mem: 1000, cores: 10}), "n1"), "n1",
			annotations.ContainerAssignment{Name: "m", Devices: []annotations.DeviceAssignment{dev(id, 1000, 10)}})
		p.Status.Phase = corev1.PodRunning
		h.cache.UpsertPod(p)
	}
	h.cache.UpsertNode(gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 1, shares: 2}))
	h.createPods(gpuPod("next", nil, ctr{name: "m", gpu: 1, mem: 1000, cores: 10}))
	if err := h.bind("next", "n1"); !strings.Contains(err, ErrNoFit.Error()) {
		t.Fatalf("third pod on a 2-share card held twice: %q, want no fit", err)
	}
}

// A GPU pod Cardinal did not bind (another scheduler's) that the kubelet may be admitting is in
// flight: a Cardinal container of the same device count waits for it, since the device plugin
// cannot tell the two apart in GetPreferredAllocation.
func TestUnmanagedGPUPodIsInFlight(t *testing.T) {
	h := newHarness(t, harnessOptions{}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 4}))
	u := bound(gpuPod("other", nil, ctr{name: "m", gpu: 1}), "n1")
	u.Spec.SchedulerName = "default-scheduler"
	h.cache.UpsertPod(u)
	h.createPods(gpuPod("x", nil, ctr{name: "m", gpu: 1}), gpuPod("two", nil, ctr{name: "m", gpu: 2}))
	if err := h.bind("x", "n1"); !strings.Contains(err, ErrInFlight.Error()) || !strings.Contains(err, "default/other") {
		t.Fatalf("bind beside an unmanaged pod being admitted: %q, want in flight naming it", err)
	}
	if err := h.bind("two", "n1"); err != "" {
		t.Fatalf("a different device count need not wait: %q", err)
	}
	// Once the plugin records what the unmanaged pod got, it holds that card and x goes.
	u = withAllocation(t, u.DeepCopy(), "n1", annotations.ContainerAllocation{Name: "m", IDs: []string{uuidOf("n1", 3)}, Source: annotations.SourceAllocate})
	h.cache.UpsertPod(u)
	if err := h.bind("x", "n1"); err != "" {
		t.Fatal(err)
	}
	if a, _ := h.assignmentOf("default", "x"); a.Containers[0].Devices[0].UUID == uuidOf("n1", 3) {
		t.Fatal("x was given the unmanaged pod's card")
	}
}

// Issue 21 item 1: bind attempt 1 times out with the pod still unbound (outcome unknown, the
// reservation stays); the retry on the same node is refused outright (429 from API priority and
// fairness) and reads the pod back unbound. Before the fix the retry freed the reservation, attempt
// 1's Binding then committed, and y was given the same card. Only proof that no earlier write can
// land frees it: here the TTL read-back, which finds x bound and keeps its card.
func TestRetryRefusalKeepsReservationAnEarlierBindingMayCommit(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(time.Unix(1_000_000, 0))
	x, y, z := gpuPod("x", nil, ctr{name: "m", gpu: 1}), gpuPod("y", nil, ctr{name: "m", gpu: 1}), gpuPod("z", nil, ctr{name: "m", gpu: 1})
	h := newHarness(t, harnessOptions{clock: clk}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 1}),
		gpuNode(nodeSpec{name: "n2", model: a40, memMiB: 100, count: 1}))
	h.createPods(x, y, z)
	h.failBindings(false, context.DeadlineExceeded)
	if err := h.bind("x", "n1"); !strings.Contains(err, "deadline") {
		t.Fatalf("attempt 1: %q", err)
	}
	asg := *h.cache.pods[x.UID].asg
	tooMany := apierrors.NewTooManyRequests("the server is handling too many requests", 1)
	h.client.ReactionChain = h.client.ReactionChain[1:]
	h.failBindings(false, tooMany)
	if err := h.bind("x", "n1"); !strings.Contains(err, "too many requests") {
		t.Fatalf("retry: %q", err)
	}
	if got := h.held("n1", 0); got != 1 {
		t.Fatalf("after the retry's refusal n1's card is held %d times, want 1: attempt 1 may still commit", got)
	}
	// Attempt 1's Binding commits; the informer has not shown it yet.
	enc, err := annotations.EncodeAssignment(asg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.commitBinding(&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x", UID: x.UID,
		Annotations: map[string]string{annotations.GPUAssignment: enc}}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, false); err != nil {
		t.Fatal(err)
	}
	h.client.ReactionChain = h.client.ReactionChain[1:]
	if err := h.bind("y", "n1"); !strings.Contains(err, ErrNoFit.Error()) {
		t.Fatalf("bind y onto the card x's first Binding took: %q, want no fit", err)
	}
	// The TTL read-back finds x bound: its card stays held, now as a bound record.
	clk.SetTime(clk.Now().Add(DefaultReservationTTL + time.Second))
	h.srv.settleReservations(context.Background(), DefaultReservationTTL)
	if rec := h.cache.pods[x.UID]; rec == nil || rec.reserved || h.held("n1", 0) != 1 {
		t.Fatalf("x after the TTL read-back: %+v, card held %d times; want a bound record holding it", rec, h.held("n1", 0))
	}

	// A refusal with no earlier unknown outcome frees at once: z's card on n2 is free again.
	h.failBindings(false, tooMany)
	if err := h.bind("z", "n2"); !strings.Contains(err, "too many requests") {
		t.Fatalf("bind z: %q", err)
	}
	if got := h.held("n2", 0); got != 0 {
		t.Fatalf("a refused first Binding left n2's card held %d times", got)
	}
}

// bindHookClient is the fake clientset with a hook run before every Binding POST, outside the fake's
// lock (a reactor runs under it, so a reactor that blocks would stall every other call too).
type bindHookClient struct {
	kubernetes.Interface
	hook func(b *corev1.Binding) error
}

func (c bindHookClient) CoreV1() typedcorev1.CoreV1Interface {
	return bindHookCore{CoreV1Interface: c.Interface.CoreV1(), hook: c.hook}
}

type bindHookCore struct {
	typedcorev1.CoreV1Interface
	hook func(b *corev1.Binding) error
}

func (c bindHookCore) Pods(ns string) typedcorev1.PodInterface {
	return bindHookPods{PodInterface: c.CoreV1Interface.Pods(ns), hook: c.hook}
}

type bindHookPods struct {
	typedcorev1.PodInterface
	hook func(b *corev1.Binding) error
}

func (p bindHookPods) Bind(ctx context.Context, b *corev1.Binding, opts metav1.CreateOptions) error {
	if err := p.hook(b); err != nil {
		return err
	}
	return p.PodInterface.Bind(ctx, b, opts)
}

// Issue 33 item 1: bind attempt 1 has sent its Binding and waits on the API server (its read-back
// has not even started); kube-scheduler's extender timeout fires and its retry of the same pod on the
// same node is refused outright (429) and reads the pod back unbound. Before the fix the reservation
// was marked unsettled only after attempt 1's read-back, so the retry's refusal freed the card, y was
// bound onto it, and attempt 1's Binding then committed: two pods on one card. A reservation is
// unsettled from the moment its Binding may have been sent.
func TestRetryRefusalWhileFirstBindingInFlightKeepsReservation(t *testing.T) {
	x, y := gpuPod("x", nil, ctr{name: "m", gpu: 1}), gpuPod("y", nil, ctr{name: "m", gpu: 1})
	h := newHarness(t, harnessOptions{}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 1}))
	h.createPods(x, y)
	sent, answer := make(chan struct{}), make(chan struct{})
	tooMany := apierrors.NewTooManyRequests("the server is handling too many requests", 1)
	var xPosts atomic.Int32
	h.srv.client = bindHookClient{Interface: h.client, hook: func(b *corev1.Binding) error {
		if b.Name != "x" {
			return nil
		}
		switch xPosts.Add(1) {
		case 1: // attempt 1: the Binding is on its way; the API server answers late
			close(sent)
			<-answer
		case 2: // the retry: refused by API priority and fairness
			return tooMany
		}
		return nil
	}}
	first := make(chan string)
	go func() { first <- h.bind("x", "n1") }()
	<-sent
	if err := h.bind("x", "n1"); !strings.Contains(err, "too many requests") {
		t.Fatalf("retry of x: %q, want the 429", err)
	}
	if got := h.held("n1", 0); got != 1 {
		t.Errorf("after the retry's refusal n1's card is held %d times, want 1: attempt 1's Binding may still commit", got)
	}
	yErr := h.bind("y", "n1")
	close(answer) // attempt 1's Binding commits
	if err := <-first; err != "" {
		t.Fatalf("attempt 1 of x: %q", err)
	}
	xa, xn := h.assignmentOf("default", "x")
	ya, yn := h.assignmentOf("default", "y")
	if xa != nil && ya != nil && xn == yn && xa.Containers[0].Devices[0].ID == ya.Containers[0].Devices[0].ID {
		t.Fatalf("DOUBLE-BOOKED: x and y both bound to %s card %s", xn, xa.Containers[0].Devices[0].ID)
	}
	if !strings.Contains(yErr, ErrNoFit.Error()) {
		t.Fatalf("bind y while x's Binding may commit: %q, want no fit", yErr)
	}
	// Both attempts are settled: none is counted as posting any more.
	if rec := h.cache.pods[x.UID]; rec == nil || rec.posting != 0 {
		t.Fatalf("x's record after both attempts: %+v, want none posting", rec)
	}
}
