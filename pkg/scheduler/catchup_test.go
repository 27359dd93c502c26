package scheduler

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// TestFilterWaitsForTheInformerToCatchUp: kube-scheduler filters pod y, created just after pod x,
// whose two cards it needs, was deleted; the extender's informer delivers x's deletion and y's
// creation 30 ms later. Filter waits for the cache to see y as sent, and with it x gone: y fits.
// Without the wait (the control) the same sequence refuses the node for cards still held, the
// refusal kube-scheduler would park y on. A pod the cache never sees is decided after the bounded
// wait on what the cache has.
func TestFilterWaitsForTheInformerToCatchUp(t *testing.T) {
	setup := func(t *testing.T, await bool) (*harness, *corev1.Pod, *corev1.Pod) {
		h := newHarness(t, harnessOptions{informer: true, awaitInformer: await},
			gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 46068, count: 2}))
		x := gpuPod("x", nil, ctr{name: "m", gpu: 2})
		x.ResourceVersion = "10"
		h.createPods(x)
		h.cache.UpsertPod(x)
		if got := filterNames(t, h, x, []string{"n1"}); !slices.Equal(got, []string{"n1"}) {
			t.Fatalf("x: fitting nodes %v, want n1", got)
		}
		if err := h.bind("x", "n1"); err != "" {
			t.Fatalf("bind x: %s", err)
		}
		if err := h.client.CoreV1().Pods("default").Delete(context.Background(), "x", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		y := gpuPod("y", nil, ctr{name: "m", gpu: 2})
		y.ResourceVersion = "20"
		return h, x, y
	}
	deliverLater := func(h *harness, x, y *corev1.Pod) {
		go func() {
			time.Sleep(30 * time.Millisecond)
			h.cache.DeletePod(x.UID)
			h.cache.UpsertPod(y)
		}()
	}
	filterY := func(t *testing.T, h *harness, y *corev1.Pod) extenderv1.ExtenderFilterResult {
		t.Helper()
		return decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: y, NodeNames: names("n1")}))
	}

	t.Run("waits", func(t *testing.T) {
		h, x, y := setup(t, true)
		deliverLater(h, x, y)
		res := filterY(t, h, y)
		if res.NodeNames == nil || !slices.Equal(*res.NodeNames, []string{"n1"}) {
			t.Fatalf("y: fitting nodes %v (refused: %v), want n1 once the cache saw x deleted", res.NodeNames, res.FailedNodes)
		}
		if n := testutil.ToFloat64(h.srv.metrics.catchUps.WithLabelValues("true")); n != 1 {
			t.Errorf("cardinal_extender_informer_waits_total{caught=true} = %v, want 1", n)
		}
		// Seen now: the next filter of y does not wait.
		filterY(t, h, y)
		if n := testutil.ToFloat64(h.srv.metrics.catchUps.WithLabelValues("true")); n != 1 {
			t.Errorf("a filter of a pod the cache had seen waited (waits %v)", n)
		}
	})
	t.Run("control without waiting", func(t *testing.T) {
		h, x, y := setup(t, false)
		deliverLater(h, x, y)
		res := filterY(t, h, y)
		if res.NodeNames != nil && len(*res.NodeNames) > 0 {
			t.Fatalf("y fit %v without waiting: the test no longer builds the race it is for", *res.NodeNames)
		}
	})
	t.Run("never delivered", func(t *testing.T) {
		h, _, y := setup(t, true)
		start := time.Now()
		res := filterY(t, h, y)
		if took := time.Since(start); took < catchUpWait {
			t.Errorf("filter answered after %v without the pod seen, want the wait of %v", took, catchUpWait)
		}
		if _, refused := res.FailedNodes["n1"]; !refused {
			t.Errorf("y: n1 not refused (%v) though the cache still holds x there", res.NodeNames)
		}
		if n := testutil.ToFloat64(h.srv.metrics.catchUps.WithLabelValues("false")); n != 1 {
			t.Errorf("cardinal_extender_informer_waits_total{caught=false} = %v, want 1", n)
		}
	})
}

// TestCaughtComparesResourceVersions: equal versions are caught, a later numeric one too, an
// earlier or opaque different one is not, nor a pod never seen or already bound.
func TestCaughtComparesResourceVersions(t *testing.T) {
	c := NewCache(annotations.DefaultResourceNames(), "cardinal-scheduler")
	p := gpuPod("p", nil, ctr{name: "m", gpu: 1})
	p.ResourceVersion = "25"
	c.UpsertPod(p)
	for _, tc := range []struct {
		rv   string
		want bool
	}{{"25", true}, {"20", true}, {"30", false}, {"x25", false}} {
		if got := c.Caught(p.UID, tc.rv); got != tc.want {
			t.Errorf("seen 25, sent %s: caught %v, want %v", tc.rv, got, tc.want)
		}
	}
	if c.Caught("uid-other", "25") {
		t.Error("a pod never seen is caught")
	}
	// Seen bound or deleted: past any version kube-scheduler can still filter.
	p.Spec.NodeName = "n1"
	c.UpsertPod(p)
	if !c.Caught(p.UID, "30") {
		t.Error("a pod seen bound is not caught for a later version kube-scheduler sends")
	}
	q := gpuPod("q", nil, ctr{name: "m", gpu: 1})
	q.ResourceVersion = "40"
	c.UpsertPod(q)
	c.DeletePod(q.UID)
	if !c.Caught(q.UID, "45") {
		t.Error("a pod seen deleted is not caught")
	}
	// The settled pods are remembered in two generations of settledKeep.
	for i := range settledKeep + 10 {
		r := gpuPod(fmt.Sprintf("r%d", i), nil, ctr{name: "m", gpu: 1})
		c.UpsertPod(r)
		c.DeletePod(r.UID)
	}
	if !c.Caught(q.UID, "45") {
		t.Error("a pod settled one generation ago is forgotten")
	}
	if n := len(c.settled) + len(c.settledOld); n > 2*settledKeep {
		t.Errorf("%d settled pods remembered, want at most %d", n, 2*settledKeep)
	}
}

// TestFilterOfADeletedPodDoesNotWait: kube-scheduler filters a pod (its older copy) that the
// extender's informer has already shown created and deleted: the version it waits for will never
// come, so the filter answers at once (a tenant churning pods cannot hold kube-scheduler's cycle).
func TestFilterOfADeletedPodDoesNotWait(t *testing.T) {
	h := newHarness(t, harnessOptions{awaitInformer: true}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 46068, count: 2}))
	y := gpuPod("y", nil, ctr{name: "m", gpu: 1})
	y.ResourceVersion = "20"
	seen := y.DeepCopy()
	seen.ResourceVersion = "21"
	h.cache.UpsertPod(seen)
	h.cache.DeletePod(y.UID)
	start := time.Now()
	decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: y, NodeNames: names("n1")}))
	if took := time.Since(start); took >= catchUpWait {
		t.Errorf("filter of a pod seen deleted took %v: it waited for a version that will never come", took)
	}
}
