package scheduler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// DESIGN.md: a container is in flight from bind until the device plugin records its allocation.
// A second container of the same device count waits unless the two are interchangeable.
func TestInFlightRule(t *testing.T) {
	whole1 := func(name string, ann map[string]string) *corev1.Pod { return gpuPod(name, ann, ctr{name: "m", gpu: 1}) }
	share1 := func(name string) *corev1.Pod { return gpuPod(name, nil, ctr{name: "m", gpu: 1, mem: 1000, cores: 10}) }
	whole2 := func(name string) *corev1.Pod { return gpuPod(name, nil, ctr{name: "m", gpu: 2}) }
	cases := []struct {
		name        string
		first       *corev1.Pod
		second      *corev1.Pod
		allocate    bool // the plugin records the first pod's allocation before the second binds
		wantWaiting bool
	}{
		{"identical replicas never wait", whole1("a", nil), whole1("b", nil), false, false},
		{"whole vs share of the same count waits", whole1("a", nil), share1("b"), false, true},
		{"different device counts do not wait", whole1("a", nil), whole2("b"), false, false},
		{"same request but the selector refuses the other's card waits",
			whole1("a", nil), whole1("b", map[string]string{annotations.UseGPUUUID: uuidOf("n1", 1) + "," + uuidOf("n1", 2)}), false, true},
		{"once the first is allocated, the second goes", whole1("a", nil), share1("b"), true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{informer: true}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 4, shares: 4}))
			h.createPods(c.first, c.second)
			if err := h.bind(c.first.Name, "n1"); err != "" {
				t.Fatal(err)
			}
			if c.allocate {
				a, _ := h.assignmentOf("default", c.first.Name)
				p, _ := h.client.CoreV1().Pods("default").Get(t.Context(), c.first.Name, metav1.GetOptions{})
				p = withAllocation(t, p.DeepCopy(), "n1", annotations.ContainerAllocation{Name: "m", IDs: a.Containers[0].IDs(), Source: annotations.SourceAllocate})
				h.cache.UpsertPod(p)
			}
			err := h.bind(c.second.Name, "n1")
			waiting := strings.Contains(err, ErrInFlight.Error())
			if waiting != c.wantWaiting || (err != "" && !waiting) {
				t.Fatalf("second bind error %q, want waiting=%v", err, c.wantWaiting)
			}
			if waiting && !strings.Contains(err, `waits until pod default/a container "m" is allocated`) {
				t.Errorf("error %q does not name the pod in flight", err)
			}
		})
	}
}

// Filter sends a pod that would wait to another node when one fits; with no other node it keeps the
// node (bind then answers a retriable error until the first container is allocated).
func TestFilterPrefersNodesWithoutWaiting(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true},
		gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 4, shares: 4}),
		gpuNode(nodeSpec{name: "n2", model: a40, memMiB: 10000, count: 4, shares: 4}))
	first := gpuPod("a", nil, ctr{name: "m", gpu: 1})
	second := gpuPod("b", nil, ctr{name: "m", gpu: 1, mem: 1000, cores: 10})
	h.createPods(first, second)
	if err := h.bind("a", "n1"); err != "" {
		t.Fatal(err)
	}
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: second, NodeNames: names("n1", "n2")}))
	want := map[string]string{"n1": `waits until pod default/a container "m" is allocated (in flight with 1 card, not interchangeable)`}
	if diff := cmp.Diff(want, map[string]string(res.FailedNodes)); diff != "" || !cmp.Equal([]string{"n2"}, *res.NodeNames) {
		t.Errorf("FailedNodes (-want +got):\n%s fit %v", diff, *res.NodeNames)
	}
	res = decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: second, NodeNames: names("n1")}))
	if !cmp.Equal([]string{"n1"}, *res.NodeNames) {
		t.Errorf("only node: fit %v, failed %v", *res.NodeNames, res.FailedNodes)
	}
	// Reserve classifies the wait so the HTTP layer can count it.
	p, err := h.srv.prepare(second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.cache.Reserve(second.UID, "default/b", p, "n1"); !errors.Is(err, ErrInFlight) {
		t.Errorf("Reserve = %v, want ErrInFlight", err)
	}
}

// A bind that would wait for a container in flight waits (up to BindWait) for it to be allocated
// and then binds, instead of sending the pod into kube-scheduler's backoff (issue: mixed bursts
// waited about 4 s per pod).
func TestBindWaitsForInFlight(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true, bindWait: 10 * time.Second}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 4, shares: 4}))
	h.createPods(gpuPod("a", nil, ctr{name: "m", gpu: 1}), gpuPod("b", nil, ctr{name: "m", gpu: 1, mem: 1000, cores: 10}))
	if err := h.bind("a", "n1"); err != "" {
		t.Fatal(err)
	}
	allocated := make(chan struct{})
	go func() {
		defer close(allocated)
		time.Sleep(50 * time.Millisecond)
		a, _ := h.assignmentOf("default", "a")
		p, _ := h.client.CoreV1().Pods("default").Get(context.Background(), "a", metav1.GetOptions{})
		h.cache.UpsertPod(withAllocation(t, p.DeepCopy(), "n1", annotations.ContainerAllocation{Name: "m", IDs: a.Containers[0].IDs(), Source: annotations.SourceAllocate}))
	}()
	if err := h.bind("b", "n1"); err != "" {
		t.Fatalf("bind of b while a is allocated during the wait: %q", err)
	}
	<-allocated
	// Without an allocation, the wait ends at its deadline, ctx or BindWait.
	h.createPods(gpuPod("c", nil, ctr{name: "m", gpu: 1}))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if res := h.srv.Bind(ctx, &bindArgs{PodName: "c", PodNamespace: "default", Node: "n1"}); !strings.Contains(res.Error, ErrInFlight.Error()) {
		t.Fatalf("bind of c with b in flight: %q, want in flight", res.Error)
	}
}

// Nodes in one state share Fit's verdict whether or not containers are in flight on them; whether
// the pod must wait is still checked on each node, in any order of the names.
func TestFilterSharesVerdictsAcrossNodesInFlight(t *testing.T) {
	var objs []runtime.Object
	for _, n := range []string{"n1", "n2", "n3"} {
		objs = append(objs, gpuNode(nodeSpec{name: n, model: a40, memMiB: 10000, count: 4, shares: 4}))
		// The same card held on each; on n1 its pod is still Pending, so its container is in flight.
		holder := benchHolder(t, n, 0, uuidOf(n, 0)+"::0", 10000, 100)
		if n == "n1" {
			holder.Status.Phase = corev1.PodPending
		}
		objs = append(objs, holder)
	}
	h := newHarness(t, harnessOptions{}, objs...)
	share := gpuPod("b", nil, ctr{name: "m", gpu: 1, mem: 1000, cores: 10})
	want := map[string]string{"n1": `waits until pod default/n1-p0 container "m" is allocated (in flight with 1 card, not interchangeable)`}
	for _, order := range [][]string{{"n2", "n1", "n3"}, {"n1", "n2", "n3"}} {
		res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: share, NodeNames: &order}))
		if diff := cmp.Diff(want, map[string]string(res.FailedNodes)); diff != "" || !cmp.Equal([]string{"n2", "n3"}, *res.NodeNames) {
			t.Errorf("order %v: FailedNodes (-want +got):\n%s fit %v", order, diff, *res.NodeNames)
		}
	}
}

// With containers of different requests in flight on a node, each still counts: a shared 1-card
// container waits for the whole 1-card one even while 2- and 3-card ones are in flight beside it
// (repeated: the node's pods are a map, walked in random order).
func TestInFlightMixedRequests(t *testing.T) {
	for range 10 {
		h := newHarness(t, harnessOptions{informer: true}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 8, shares: 4}))
		h.createPods(gpuPod("two", nil, ctr{name: "m", gpu: 2}), gpuPod("one", nil, ctr{name: "m", gpu: 1}),
			gpuPod("three", nil, ctr{name: "m", gpu: 3}), gpuPod("share", nil, ctr{name: "m", gpu: 1, mem: 1000, cores: 10}))
		for _, name := range []string{"two", "one", "three"} {
			if err := h.bind(name, "n1"); err != "" {
				t.Fatalf("bind %s: %s", name, err)
			}
		}
		if err := h.bind("share", "n1"); !strings.Contains(err, `waits until pod default/one container "m" is allocated`) {
			t.Fatalf("bind of share: %q, want it to wait for one", err)
		}
	}
}
