package scheduler

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

const t4 = "Tesla T4"

// mixedNode has one card per entry of models, of memMiB each, with shares slots.
func mixedNode(name string, memMiB int64, shares int, models ...string) *corev1.Node {
	inv := annotations.Inventory{}
	for i, m := range models {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: uuidOf(name, i), Index: i, Model: m, MemoryMiB: memMiB, Healthy: true, Shares: max(shares, 1)})
	}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		panic(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotations.GPUInventory: enc}}}
}

// holder is a running pod of priority prio on node holding the device IDs given, whole cards
// (mem 0) or shares of mem MiB; started orders pods of equal priority (later: spared last).
func holder(t testing.TB, name string, prio int32, node string, started int, mem int64, ids ...string) *corev1.Pod {
	t.Helper()
	c := ctr{name: "m", gpu: int64(len(ids))}
	cores := 100
	if mem > 0 {
		c.mem, c.cores, cores = mem, 10, 10
	}
	p := gpuPod(name, nil, c)
	p.Spec.Priority = &prio
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &metav1.Time{Time: time.Unix(1_700_000_000+int64(started), 0)}
	var devs []annotations.DeviceAssignment
	for _, id := range ids {
		devs = append(devs, dev(id, mem, cores))
	}
	p = bound(p, node)
	p.Annotations = map[string]string{annotations.GPUAssignment: mustEncodeB(t, annotations.Assignment{Node: node,
		Containers: []annotations.ContainerAssignment{{Name: "m", Devices: devs}}})}
	return p
}

// preemptor is a pending pod of priority prio asking gpu cards (shares of mem MiB when mem > 0).
func preemptor(name string, prio int32, ann map[string]string, gpu, mem int64) *corev1.Pod {
	c := ctr{name: "m", gpu: gpu}
	if mem > 0 {
		c.mem, c.cores = mem, 10
	}
	p := gpuPod(name, ann, c)
	p.Spec.Priority = &prio
	return p
}

func uids(pods ...string) []*extenderv1.MetaPod {
	out := make([]*extenderv1.MetaPod, len(pods))
	for i, p := range pods {
		out[i] = &extenderv1.MetaPod{UID: "uid-" + p}
	}
	return out
}

// victimNames reads an answer as node -> victim pod names, in the answer's order.
func victimNames(res *extenderv1.ExtenderPreemptionResult) map[string][]string {
	out := map[string][]string{}
	for node, mv := range res.NodeNameToMetaVictims {
		var ns []string
		for _, mp := range mv.Pods {
			ns = append(ns, strings.TrimPrefix(mp.UID, "uid-"))
		}
		out[node] = ns
	}
	return out
}

func (h *harness) preempt(pod *corev1.Pod, proposals map[string][]string) *extenderv1.ExtenderPreemptionResult {
	h.t.Helper()
	args := extenderv1.ExtenderPreemptionArgs{Pod: pod, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	for node, vs := range proposals {
		args.NodeNameToMetaVictims[node] = &extenderv1.MetaVictims{Pods: uids(vs...)}
	}
	return h.srv.Preempt(context.Background(), &args)
}

func TestPreemptVictimChoice(t *testing.T) {
	a0, a1, t2, t3 := uuidOf("mix", 0), uuidOf("mix", 1), uuidOf("mix", 2), uuidOf("mix", 3)
	// mix: 2 A100 and 2 T4, each held by a priority-0 pod; lo-a1 started after lo-a0.
	mix := func(t *testing.T) []runtime.Object {
		return []runtime.Object{
			mixedNode("mix", 81920, 1, a100, a100, t4, t4),
			holder(t, "lo-a0", 0, "mix", 0, 0, a0),
			holder(t, "lo-a1", 0, "mix", 1, 0, a1),
			holder(t, "lo-t2", 0, "mix", 2, 0, t2),
			holder(t, "lo-t3", 0, "mix", 3, 0, t3),
		}
	}
	// shared: one card of 40000 MiB in 4 slots; s1 holds 20000, s2 (priority 5) 10000, s3 and
	// s4 5000 each.
	s := func(k int) string { return uuidOf("shared", 0) + "::" + itoa(k) }
	shared := func(t *testing.T) []runtime.Object {
		return []runtime.Object{
			mixedNode("shared", 40000, 4, a100),
			holder(t, "s1", 0, "shared", 0, 20000, s(0)),
			holder(t, "s2", 5, "shared", 1, 10000, s(1)),
			holder(t, "s3", 0, "shared", 2, 5000, s(2)),
			holder(t, "s4", 0, "shared", 3, 5000, s(3)),
		}
	}
	cases := []struct {
		name      string
		objs      func(t *testing.T) []runtime.Object
		pod       *corev1.Pod
		proposals map[string][]string
		want      map[string][]string
	}{
		{
			name: "use-gputype A100 replaces kube-scheduler's T4 victim with one A100 holder, the one started last",
			objs: mix, pod: preemptor("hi", 100, map[string]string{annotations.UseGPUType: "A100"}, 1, 0),
			proposals: map[string][]string{"mix": {"lo-t3"}},
			want:      map[string][]string{"mix": {"lo-a1"}},
		},
		{
			name: "two A100 cards: both A100 holders, no T4 holder",
			objs: mix, pod: preemptor("hi", 100, map[string]string{annotations.UseGPUType: "A100"}, 2, 0),
			proposals: map[string][]string{"mix": {"lo-t2", "lo-t3"}},
			want:      map[string][]string{"mix": {"lo-a0", "lo-a1"}},
		},
		{
			name: "use-gpuuuid preempts only the holder of that card",
			objs: mix, pod: preemptor("hi", 100, map[string]string{annotations.UseGPUUUID: a0}, 1, 0),
			proposals: map[string][]string{"mix": {"lo-t3"}},
			want:      map[string][]string{"mix": {"lo-a0"}},
		},
		{
			name: "no selector: kube-scheduler's victim fits and is kept",
			objs: mix, pod: preemptor("hi", 100, nil, 1, 0),
			proposals: map[string][]string{"mix": {"lo-t3"}},
			want:      map[string][]string{"mix": {"lo-t3"}},
		},
		{
			name: "a candidate sent with no victims gets Cardinal's",
			objs: mix, pod: preemptor("hi", 100, map[string]string{annotations.UseGPUType: "T4"}, 1, 0),
			proposals: map[string][]string{"mix": {}},
			want:      map[string][]string{"mix": {"lo-t3"}},
		},
		{
			name: "equal priority is never a victim: node dropped",
			objs: mix, pod: preemptor("eq", 0, map[string]string{annotations.UseGPUType: "A100"}, 1, 0),
			proposals: map[string][]string{"mix": {"lo-t3"}},
			want:      map[string][]string{},
		},
		{
			name: "more A100 cards than the node has: node dropped",
			objs: mix, pod: preemptor("hi", 100, map[string]string{annotations.UseGPUType: "A100"}, 3, 0),
			proposals: map[string][]string{"mix": {"lo-t3"}},
			want:      map[string][]string{},
		},
		{
			name: "shared slot: the one holder whose memory makes room",
			objs: shared, pod: preemptor("hi", 100, nil, 1, 20000),
			proposals: map[string][]string{"shared": {"s4"}},
			want:      map[string][]string{"shared": {"s1"}},
		},
		{
			name: "shared slot: two holders, the higher-priority one spared",
			objs: shared, pod: preemptor("hi", 100, nil, 1, 25000),
			proposals: map[string][]string{"shared": {"s4"}},
			want:      map[string][]string{"shared": {"s1", "s4"}},
		},
		{
			name: "shared slot: victims above the preemptor's priority never chosen",
			objs: shared, pod: preemptor("mid", 3, nil, 1, 35000),
			proposals: map[string][]string{"shared": {"s4"}},
			want:      map[string][]string{},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{}, c.objs(t)...)
			got := victimNames(h.preempt(c.pod, c.proposals))
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("victims (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPreemptVictimsInDecreasingPriority(t *testing.T) {
	a := func(i int) string { return uuidOf("n", i) }
	h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 1, a100, a100, a100),
		holder(t, "p1", 1, "n", 0, 0, a(0)), holder(t, "p7", 7, "n", 0, 0, a(1)), holder(t, "p3", 3, "n", 0, 0, a(2)))
	got := victimNames(h.preempt(preemptor("hi", 100, nil, 3, 0), map[string][]string{"n": {"p1"}}))
	if diff := cmp.Diff(map[string][]string{"n": {"p7", "p3", "p1"}}, got); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
}

// A pod already being deleted (an earlier preemption's victim) frees its card: it is never named
// (kube-scheduler's preemption of a pod gone by then fails and leaves the preemptor waiting for a
// deletion it never sees), and where it alone makes room no running pod goes either: the node is
// no candidate until the pod fits there.
func TestPreemptNeverNamesPodsAlreadyLeaving(t *testing.T) {
	a0, a1, a2 := uuidOf("n", 0), uuidOf("n", 1), uuidOf("n", 2)
	leaving := holder(t, "leaving", 0, "n", 0, 0, a0)
	leaving.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	// A T4 holder being deleted frees nothing an A100 pod can use: never named.
	leavingT4 := holder(t, "leaving-t4", 0, "n", 0, 0, uuidOf("n", 3))
	leavingT4.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	objs := []runtime.Object{mixedNode("n", 81920, 1, a100, a100, a100, t4), leaving, leavingT4,
		holder(t, "live", 0, "n", 9, 0, a1), holder(t, "other", 0, "n", 5, 0, a2)}
	cases := []struct {
		cards int64
		want  []string
	}{
		{1, nil},              // the leaving pod makes room: nobody goes, n is no candidate
		{2, []string{"live"}}, // the leaving pod is not counted: one more victim, the one started last
	}
	for _, c := range cases {
		h := newHarness(t, harnessOptions{}, objs...)
		// kube-scheduler's own dry run proposes the leaving pod (its snapshot still lists it).
		got := victimNames(h.preempt(preemptor("hi", 100, map[string]string{annotations.UseGPUType: "A100"}, c.cards, 0), map[string][]string{"n": {"leaving"}}))
		want := map[string][]string{}
		if c.want != nil {
			want["n"] = c.want
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d cards: victims (-want +got):\n%s", c.cards, diff)
		}
	}
}

func TestPreemptKeepsVictimsWithoutCards(t *testing.T) {
	a0 := uuidOf("n", 0)
	cpu := gpuPod("cpu-hog", nil, ctr{name: "m"})
	zero := int32(0)
	cpu.Spec.Priority, cpu.Spec.NodeName, cpu.Status.Phase = &zero, "n", corev1.PodRunning
	h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 1, a100, t4), holder(t, "lo-a0", 0, "n", 0, 0, a0), cpu)
	got := victimNames(h.preempt(preemptor("hi", 100, map[string]string{annotations.UseGPUType: "A100"}, 1, 0), map[string][]string{"n": {"cpu-hog"}}))
	if diff := cmp.Diff(map[string][]string{"n": {"cpu-hog", "lo-a0"}}, got); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
}

func TestPreemptFewestPDBViolations(t *testing.T) {
	a0, a1 := uuidOf("n", 0), uuidOf("n", 1)
	db := holder(t, "db", 0, "n", 1, 0, a0) // started last: chosen were it not for its budget
	db.Labels = map[string]string{"app": "db"}
	web := holder(t, "web", 0, "n", 0, 0, a1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0},
	}
	for _, withPDB := range []bool{false, true} {
		h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 1, a100, a100), db, web)
		if withPDB {
			h.srv.pdbs = func(ns string) []*policyv1.PodDisruptionBudget {
				if ns == "default" {
					return []*policyv1.PodDisruptionBudget{pdb}
				}
				return nil
			}
		}
		res := h.preempt(preemptor("hi", 100, nil, 1, 0), map[string][]string{"n": {}})
		want := map[string][]string{"n": {"db"}}
		if withPDB {
			want = map[string][]string{"n": {"web"}}
		}
		if diff := cmp.Diff(want, victimNames(res)); diff != "" {
			t.Errorf("with PDB %v: victims (-want +got):\n%s", withPDB, diff)
		}
		if mv := res.NodeNameToMetaVictims["n"]; mv == nil || mv.NumPDBViolations != 0 {
			t.Errorf("with PDB %v: want 0 PDB violations, got %+v", withPDB, mv)
		}
	}
}

func TestPDBViolationsCountedAsKubeScheduler(t *testing.T) {
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1, DisruptedPods: map[string]metav1.Time{"gone": {}}},
	}
	list := func(ns string) []*policyv1.PodDisruptionBudget {
		if ns == "ns" {
			return []*policyv1.PodDisruptionBudget{pdb}
		}
		return nil
	}
	x := map[string]string{"app": "x"}
	victims := []podMeta{
		{name: "a", namespace: "ns", labels: x},    // spends the one allowed disruption
		{name: "gone", namespace: "ns", labels: x}, // already disrupted: spends nothing
		{name: "b", namespace: "ns", labels: x},    // violates
		{name: "c", namespace: "other", labels: x}, // other namespace
		{name: "d", namespace: "ns"},               // no labels
		{name: "e", namespace: "ns", labels: x},    // violates
	}
	if got := pdbViolations(victims, list); got != 2 {
		t.Errorf("violations = %d, want 2", got)
	}
	if got := pdbViolations(victims, nil); got != 0 {
		t.Errorf("without a lister: %d, want 0", got)
	}
}

// A node that passed kube-scheduler's own filters but that Cardinal refused for want of a free
// A100 gets no victims from kube-scheduler's dry run (its count of nvidia.com/gpu fits): the
// preempt call offers it anyway.
func TestPreemptOffersNodesFilterRefused(t *testing.T) {
	h := newHarness(t, harnessOptions{},
		mixedNode("spare-t4", 81920, 1, a100, t4), holder(t, "lo-a", 0, "spare-t4", 0, 0, uuidOf("spare-t4", 0)),
		mixedNode("full", 81920, 1, a100), holder(t, "lo-b", 0, "full", 0, 0, uuidOf("full", 0)))
	pod := preemptor("hi", 100, map[string]string{annotations.UseGPUType: "A100"}, 1, 0)
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("spare-t4")}))
	if _, refused := res.FailedNodes["spare-t4"]; !refused {
		t.Fatalf("filter should refuse spare-t4 as resolvable, got %+v", res)
	}
	got := victimNames(h.preempt(pod, map[string][]string{"full": {"lo-b"}}))
	if diff := cmp.Diff(map[string][]string{"full": {"lo-b"}, "spare-t4": {"lo-a"}}, got); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
	// Another pod's filter call does not lend its refusals.
	other := preemptor("other", 100, map[string]string{annotations.UseGPUType: "A100"}, 1, 0)
	got = victimNames(h.preempt(other, map[string][]string{"full": {"lo-b"}}))
	if diff := cmp.Diff(map[string][]string{"full": {"lo-b"}}, got); diff != "" {
		t.Errorf("other pod's victims (-want +got):\n%s", diff)
	}
}

func TestPreemptRoute(t *testing.T) {
	a0 := uuidOf("n", 0)
	objs := []runtime.Object{mixedNode("n", 81920, 1, a100, t4), holder(t, "lo-a0", 0, "n", 0, 0, a0), holder(t, "lo-t1", 0, "n", 1, 0, uuidOf("n", 1))}
	pod := preemptor("hi", 100, map[string]string{annotations.UseGPUType: "A100"}, 1, 0)
	t.Run("meta victims", func(t *testing.T) {
		h := newHarness(t, harnessOptions{}, objs...)
		res := decodeInto[extenderv1.ExtenderPreemptionResult](t, h.post("/preempt", extenderv1.ExtenderPreemptionArgs{Pod: pod,
			NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"n": {Pods: uids("lo-t1"), NumPDBViolations: 1}, "ghost": {Pods: uids("x")}}}))
		if diff := cmp.Diff(map[string][]string{"n": {"lo-a0"}}, victimNames(&res)); diff != "" {
			t.Errorf("victims (-want +got):\n%s", diff)
		}
	})
	t.Run("full victims (not node-cache-capable)", func(t *testing.T) {
		h := newHarness(t, harnessOptions{}, objs...)
		victim := gpuPod("lo-t1", nil, ctr{name: "m", gpu: 1})
		res := decodeInto[extenderv1.ExtenderPreemptionResult](t, h.post("/preempt", extenderv1.ExtenderPreemptionArgs{Pod: pod,
			NodeNameToVictims: map[string]*extenderv1.Victims{"n": {Pods: []*corev1.Pod{victim}}}}))
		if diff := cmp.Diff(map[string][]string{"n": {"lo-a0"}}, victimNames(&res)); diff != "" {
			t.Errorf("victims (-want +got):\n%s", diff)
		}
	})
	t.Run("pod without GPUs: proposals pass through", func(t *testing.T) {
		h := newHarness(t, harnessOptions{}, objs...)
		cpu := gpuPod("cpu", nil, ctr{name: "m"})
		res := decodeInto[extenderv1.ExtenderPreemptionResult](t, h.post("/preempt", extenderv1.ExtenderPreemptionArgs{Pod: cpu,
			NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"n": {Pods: uids("lo-t1"), NumPDBViolations: 1}}}))
		want := map[string]*extenderv1.MetaVictims{"n": {Pods: uids("lo-t1"), NumPDBViolations: 1}}
		if diff := cmp.Diff(want, res.NodeNameToMetaVictims); diff != "" {
			t.Errorf("answer (-want +got):\n%s", diff)
		}
	})
	t.Run("Event names the victims", func(t *testing.T) {
		h := newHarness(t, harnessOptions{}, objs...)
		h.post("/preempt", extenderv1.ExtenderPreemptionArgs{Pod: pod, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"n": {Pods: uids("lo-t1")}}})
		select {
		case e := <-h.recorder.Events:
			if !strings.Contains(e, EventPreemption) || !strings.Contains(e, "node n: default/lo-a0") {
				t.Errorf("event %q", e)
			}
		default:
			t.Error("no event")
		}
	})
	t.Run("bad input", func(t *testing.T) {
		h := newHarness(t, harnessOptions{}, objs...)
		for _, c := range []struct {
			body   []byte
			status int
		}{
			{[]byte(`{"Pod":`), http.StatusBadRequest},
			{[]byte(`{"NodeNameToMetaVictims": 3}`), http.StatusBadRequest},
			{append([]byte(`{"Pod":{"metadata":{"name":"`), bytes.Repeat([]byte("a"), DefaultMaxBodyBytes)...), http.StatusRequestEntityTooLarge},
		} {
			if w := h.postRaw("/preempt", c.body); w.Code != c.status {
				t.Errorf("status %d, want %d: %s", w.Code, c.status, w.Body.String())
			}
		}
		res := decodeInto[extenderv1.ExtenderPreemptionResult](t, h.post("/preempt", extenderv1.ExtenderPreemptionArgs{
			NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"n": {Pods: uids("lo-t1")}}}))
		if len(res.NodeNameToMetaVictims) != 0 {
			t.Errorf("no pod: want no node, got %v", victimNames(&res))
		}
	})
	t.Run("not synced", func(t *testing.T) {
		h := newHarness(t, harnessOptions{ready: func() bool { return false }}, objs...)
		if w := h.post("/preempt", extenderv1.ExtenderPreemptionArgs{Pod: pod}); w.Code != http.StatusServiceUnavailable {
			t.Errorf("status %d, want 503", w.Code)
		}
	})
}

// never is a stop function that never stops a search.
func never() bool { return false }

func TestMinimalSetWhenBudgetRunsOut(t *testing.T) {
	// 40 candidates, the pod fits once candidates 3, 17 and 30 are all gone: C(40,1..3) exceeds
	// the budget, so the reprieve finds the set instead.
	need := []int{3, 17, 30}
	calls := 0
	fits := func(set []int) bool {
		calls++
		for _, i := range need {
			if !slices.Contains(set, i) {
				return false
			}
		}
		return true
	}
	if got := minimumSet(40, preemptFitBudget, fits, func([]int) setCost { return setCost{} }, never); got != nil {
		t.Fatalf("minimumSet = %v, want nil past the budget", got)
	}
	if calls != preemptFitBudget {
		t.Errorf("fit calls = %d, want the budget %d", calls, preemptFitBudget)
	}
	all := make([]int, 40)
	for i := range all {
		all[i] = i
	}
	if got := minimalSet(all, fits, never); !slices.Equal(got, need) {
		t.Errorf("minimalSet = %v, want %v", got, need)
	}
	// Small pools find the minimum.
	if got := minimumSet(8, preemptFitBudget, fits, func([]int) setCost { return setCost{} }, never); got != nil {
		t.Errorf("need 17, 30 out of range: got %v", got)
	}
	need = []int{2, 5}
	if got := minimumSet(8, preemptFitBudget, fits, func([]int) setCost { return setCost{} }, never); !slices.Equal(got, need) {
		t.Errorf("minimumSet = %v, want %v", got, need)
	}
}

// nominated marks a pending pod nominated to node.
func nominated(p *corev1.Pod, node string) *corev1.Pod {
	p.Status.NominatedNodeName = node
	return p
}

func TestNomineeKeepsFreedCards(t *testing.T) {
	a1 := uuidOf("n", 1)
	hi := nominated(preemptor("hi", 100, map[string]string{annotations.UseGPUType: "A100"}, 1, 0), "n")
	low := func() *corev1.Pod { return preemptor("low", 0, nil, 1, 0) }
	filter := func(h *harness, pod *corev1.Pod) *extenderv1.ExtenderFilterResult {
		res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n")}))
		return &res
	}
	t.Run("a lower-priority pod does not get the nominee's card", func(t *testing.T) {
		h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 1, a100), hi)
		res := filter(h, low())
		if len(*res.NodeNames) != 0 {
			t.Errorf("low fits n: %+v", res)
		}
		if msg := res.FailedNodes["n"]; !strings.HasSuffix(msg, "; cards kept for nominated pods of higher or equal priority: default/hi") {
			t.Errorf("low's reason on n does not name the nominee: %q", msg)
		}
		if res := filter(h, hi); len(*res.NodeNames) != 1 {
			t.Errorf("the nominee itself must fit: %+v", res)
		}
		// A pod of higher priority than the nominee is not held back.
		top := preemptor("top", 1000, nil, 1, 0)
		if res := filter(h, top); len(*res.NodeNames) != 1 {
			t.Errorf("top must fit: %+v", res)
		}
	})
	t.Run("bind gives the lower-priority pod the other card", func(t *testing.T) {
		l := low()
		h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 1, a100, t4), hi, l)
		if err := h.bind("low", "n"); err != "" {
			t.Fatal(err)
		}
		a, _ := h.assignmentOf("default", "low")
		if got := a.Containers[0].Devices[0].UUID; got != a1 {
			t.Errorf("low got %s, want the T4 %s", got, a1)
		}
	})
	t.Run("bind refuses the nominee's card", func(t *testing.T) {
		l := low()
		h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 1, a100), hi, l)
		if err := h.bind("low", "n"); err == "" {
			t.Error("low was bound on the nominee's card")
		}
	})
	t.Run("cards of pods being deleted count as the nominee's", func(t *testing.T) {
		// hi2 needs both A100s: one is free, the victim on the other is terminating. Were the
		// nominee decided on today's state it would hold nothing, and low would take a0.
		hi2 := nominated(preemptor("hi2", 100, map[string]string{annotations.UseGPUType: "A100"}, 2, 0), "n")
		victim := holder(t, "victim", 0, "n", 0, 0, a1)
		victim.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 1, a100, a100), hi2, victim)
		if res := filter(h, low()); len(*res.NodeNames) != 0 {
			t.Errorf("low fits n: %+v", res)
		}
		// The nominee's own reason says whom it waits for.
		res := filter(h, hi2)
		if msg := res.FailedNodes["n"]; !strings.HasSuffix(msg, "; nominated here, waits for preempted pods default/victim to terminate") {
			t.Errorf("hi2's reason on n: %q", msg)
		}
	})
	t.Run("a cleared nomination frees the card at once", func(t *testing.T) {
		h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 1, a100), hi)
		if res := filter(h, low()); len(*res.NodeNames) != 0 {
			t.Fatalf("low fits n: %+v", res)
		}
		cleared := hi.DeepCopy()
		cleared.Status.NominatedNodeName = ""
		h.cache.UpsertPod(cleared)
		if res := filter(h, low()); len(*res.NodeNames) != 1 {
			t.Errorf("low must fit once the nomination is gone: %+v", res)
		}
	})
	t.Run("a nominee seen before the server reads its request then", func(t *testing.T) {
		h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 1, a100))
		c := h.cache
		c.PrepareNominees(nil)
		c.UpsertPod(hi)
		c.PrepareNominees(h.srv.prepare)
		if res := filter(h, low()); len(*res.NodeNames) != 0 {
			t.Errorf("low fits n: %+v", res)
		}
	})
}

func TestNomineeIsInPreemptionState(t *testing.T) {
	// A second preemptor of lower priority than a nominee sees the nominee's card as taken: kube-
	// scheduler's dry run counts nominated pods of higher priority too.
	a0 := uuidOf("n", 0)
	hi := nominated(preemptor("hi", 100, nil, 1, 0), "n")
	h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 1, a100, a100), hi, holder(t, "lo", 0, "n", 0, 0, a0))
	mid := preemptor("mid", 50, nil, 1, 0)
	got := victimNames(h.preempt(mid, map[string][]string{"n": {}}))
	if diff := cmp.Diff(map[string][]string{"n": {"lo"}}, got); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
}

// busySharedCluster is nodes nodes of 8 H100s in 8 slots, every slot held by a 10000 MiB
// priority-0 pod.
func busySharedCluster(t testing.TB, nodes int) []runtime.Object {
	var objs []runtime.Object
	for n := range nodes {
		name := "b" + itoa(n)
		objs = append(objs, gpuNode(nodeSpec{name: name, model: "NVIDIA H100 80GB HBM3", memMiB: 81559, count: 8, shares: 8}))
		for c := range 8 {
			for k := range 8 {
				objs = append(objs, holder(t, name+"-"+itoa(c)+"-"+itoa(k), 0, name, c*8+k, 10000, uuidOf(name, c)+"::"+itoa(k)))
			}
		}
	}
	return objs
}

// A pod that needs three slot holders gone on one card, on every node of a busy cluster: past
// the Fit budget (C(64,3) sets of size 3) each node gets a minimal set, three holders of one card.
func TestPreemptPastTheBudget(t *testing.T) {
	h := newHarness(t, harnessOptions{}, busySharedCluster(t, 2)...)
	got := h.preempt(preemptor("hi", 100, nil, 1, 30000), map[string][]string{"b0": {}, "b1": {}})
	for _, node := range []string{"b0", "b1"} {
		mv := got.NodeNameToMetaVictims[node]
		if mv == nil || len(mv.Pods) != 3 {
			t.Fatalf("%s: want 3 victims, got %v", node, victimNames(got)[node])
		}
		card := ""
		for _, v := range victimNames(got)[node] {
			c := strings.Split(v, "-")[1]
			if card != "" && c != card {
				t.Errorf("%s: victims on several cards: %v", node, victimNames(got)[node])
			}
			card = c
		}
	}
}

func BenchmarkPreempt(b *testing.B) {
	const nodes = 100
	h := newHarness(b, harnessOptions{}, busySharedCluster(b, nodes)...)
	props := map[string][]string{}
	for n := range nodes {
		props["b"+itoa(n)] = nil
	}
	pod := preemptor("hi", 100, nil, 1, 20000)
	b.ResetTimer()
	for range b.N {
		if got := h.preempt(pod, props); len(got.NodeNameToMetaVictims) != nodes {
			b.Fatalf("%d nodes", len(got.NodeNameToMetaVictims))
		}
	}
}

// Nominations come and go while filters run (the informer's goroutine and kube-scheduler's
// calls): under -race this finds unguarded reads; the end state is the last nomination's.
func TestNominationsWhileEvaluating(t *testing.T) {
	hi := nominated(preemptor("hi", 100, nil, 1, 0), "n")
	h := newHarness(t, harnessOptions{}, mixedNode("n", 81920, 1, a100, a100))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			p := hi.DeepCopy()
			if i%2 == 1 {
				p.Status.NominatedNodeName = ""
			}
			h.cache.UpsertPod(p)
		}
	}()
	low, err := h.srv.prepare(preemptor("low", 0, nil, 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		h.cache.Evaluate("uid-low", low, []string{"n"}, nil)
	}
	<-done
	if v := h.cache.Evaluate("uid-low", low, []string{"n"}, nil); v[0].Reason != nil {
		t.Errorf("the nomination is cleared, yet low does not fit: %s", v[0].Reason)
	}
	h.cache.UpsertPod(hi)
	if v := h.cache.Evaluate("uid-low", low, []string{"n"}, nil); v[0].Reason == nil {
		t.Error("hi is nominated, yet low gets both cards")
	}
}

// Nodes filter refused are offered up to preemptExtraNodes per call.
func TestPreemptOffersAtMostSoManyRefusedNodes(t *testing.T) {
	var objs []runtime.Object
	var all []string
	for i := range preemptExtraNodes + 5 {
		name := "n" + itoa(i)
		all = append(all, name)
		objs = append(objs, mixedNode(name, 81920, 1, a100, t4), holder(t, "lo-"+name, 0, name, 0, 0, uuidOf(name, 0)))
	}
	h := newHarness(t, harnessOptions{}, objs...)
	pod := preemptor("hi", 100, map[string]string{annotations.UseGPUType: "A100"}, 1, 0)
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: &all}))
	if len(res.FailedNodes) != len(all) {
		t.Fatalf("filter refused %d nodes as resolvable, want %d", len(res.FailedNodes), len(all))
	}
	if got := len(h.preempt(pod, nil).NodeNameToMetaVictims); got != preemptExtraNodes {
		t.Errorf("offered %d nodes, want %d", got, preemptExtraNodes)
	}
}

// MIG holders are victims by their instances: a pod asking a 1g.10gb instance on a named parent
// preempts the holder of that parent's one 1g.10gb instance, not a whole-card holder kube-scheduler
// proposed, nor the holder of another profile's instance on the same parent.
func TestPreemptMIGInstanceHolders(t *testing.T) {
	migHolder := func(name, uuid, profile string, mem int64, started int) *corev1.Pod {
		p := migPod(name, nil, profile, 1)
		prio := int32(0)
		p.Spec.Priority = &prio
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &metav1.Time{Time: time.Unix(1_700_000_000+int64(started), 0)}
		p = bound(p, "mig")
		p.Annotations = map[string]string{annotations.GPUAssignment: mustEncodeB(t, annotations.Assignment{Node: "mig",
			Containers: []annotations.ContainerAssignment{{Name: "m", Devices: []annotations.DeviceAssignment{
				{UUID: uuid, ID: uuid, MemoryMiB: mem, Cores: 100, Parent: "GPU-mig-am", Profile: profile}}}}})}
		return p
	}
	h := newHarness(t, harnessOptions{},
		migNodeObj("mig"),
		holder(t, "lo-h0", 0, "mig", 0, 0, "GPU-mig-h0"),
		migHolder("lo-3g", "MIG-mig-3g", "3g.40gb", 40192, 1),
		migHolder("lo-1g", "MIG-mig-1g", "1g.10gb", 9728, 2))
	pod := migPod("hi", map[string]string{annotations.UseGPUUUID: "GPU-mig-am"}, "1g.10gb", 1)
	prio := int32(100)
	pod.Spec.Priority = &prio
	got := victimNames(h.preempt(pod, map[string][]string{"mig": {"lo-h0"}}))
	if diff := cmp.Diff(map[string][]string{"mig": {"lo-1g"}}, got); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
}
