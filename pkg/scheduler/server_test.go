package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

const a40, a100 = "NVIDIA A40", "NVIDIA A100-SXM4-80GB"

func TestFilterReasons(t *testing.T) {
	objs := []runtime.Object{
		gpuNode(nodeSpec{name: "a40s", model: a40, memMiB: 46068, count: 2}),
		gpuNode(nodeSpec{name: "a100s", model: a100, memMiB: 81920, count: 4, numa: []int{0, 0, 1, 1}}),
		gpuNode(nodeSpec{name: "sick", model: a100, memMiB: 81920, count: 1, sick: []int{0}}),
		plainNode("cpu-only"),
	}
	all := []string{"a40s", "a100s", "sick", "cpu-only", "ghost"}
	cases := []struct {
		name     string
		pod      *corev1.Pod
		fit      []string
		failed   map[string]string
		unresolv map[string]string
	}{
		{
			name: "use-gputype A100: only a100s, others say why",
			pod:  gpuPod("p", map[string]string{annotations.UseGPUType: "A100"}, ctr{name: "main", gpu: 1}),
			fit:  []string{"a100s"},
			failed: map[string]string{
				"sick": "GPU GPU-sick-0 is unhealthy",
			},
			unresolv: map[string]string{
				"a40s":     "no card matches use-gputype=a100 (node has 2x NVIDIA A40)",
				"cpu-only": "node has no GPU inventory (cardinal.io/gpu-inventory is missing)",
				"ghost":    "node is not known to the GPU scheduler",
			},
		},
		{
			name:   "numa-bind 3 cards: a100s has 2 per NUMA node",
			pod:    gpuPod("p", map[string]string{annotations.NUMABind: "true"}, ctr{name: "main", gpu: 3}),
			fit:    []string{},
			failed: map[string]string{"a100s": "needs 3 cards on one NUMA node, best has 2"},
			unresolv: map[string]string{
				"a40s":     "needs 3 cards, node has 2 (2x NVIDIA A40)",
				"sick":     "needs 3 cards, node has 0 (1x NVIDIA A100-SXM4-80GB)",
				"cpu-only": "node has no GPU inventory (cardinal.io/gpu-inventory is missing)",
				"ghost":    "node is not known to the GPU scheduler",
			},
		},
	}
	// The shortlist changes none of it: the reasons are the same, and one fitting node is all.
	for _, c := range cases {
		for _, shortlist := range []int{0, 1} {
			t.Run(c.name+"/shortlist "+itoa(shortlist), func(t *testing.T) {
				h := newHarness(t, harnessOptions{shortlist: shortlist}, objs...)
				res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: c.pod, NodeNames: names(all...)}))
				if res.Error != "" {
					t.Fatalf("error: %s", res.Error)
				}
				if diff := cmp.Diff(c.fit, *res.NodeNames); diff != "" {
					t.Errorf("fit (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(c.failed, map[string]string(res.FailedNodes)); diff != "" {
					t.Errorf("FailedNodes (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(c.unresolv, map[string]string(res.FailedAndUnresolvableNodes)); diff != "" {
					t.Errorf("FailedAndUnresolvableNodes (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestFilterPassesPodsWithoutGPUs(t *testing.T) {
	h := newHarness(t, harnessOptions{}, plainNode("n1"))
	pod := gpuPod("cpu", nil, ctr{name: "main"})
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1", "ghost")}))
	if diff := cmp.Diff([]string{"n1", "ghost"}, *res.NodeNames); diff != "" || len(res.FailedNodes) > 0 || res.Error != "" {
		t.Errorf("want every node passed untouched, got %+v (%s)", res, diff)
	}
	prio := decodeInto[extenderv1.HostPriorityList](t, h.post("/prioritize", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1")}))
	if diff := cmp.Diff(extenderv1.HostPriorityList{{Host: "n1", Score: 0}}, prio); diff != "" {
		t.Errorf("prioritize (-want +got):\n%s", diff)
	}
}

func TestBadInput(t *testing.T) {
	h := newHarness(t, harnessOptions{}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 1}))
	cases := []struct {
		name, path string
		body       []byte
		status     int
		errHas     string
	}{
		{"malformed JSON", "/filter", []byte(`{"Pod":`), http.StatusBadRequest, "not a valid"},
		{"wrong type", "/bind", []byte(`{"PodName": 5}`), http.StatusBadRequest, "not a valid"},
		{"oversized body", "/prioritize", append([]byte(`{"NodeNames":["`), bytes.Repeat([]byte("a"), DefaultMaxBodyBytes)...), http.StatusRequestEntityTooLarge, "larger than"},
		{"no pod", "/filter", []byte(`{"NodeNames":["n1"]}`), http.StatusOK, "request has no pod"},
		{"bind without names", "/bind", []byte(`{}`), http.StatusOK, "needs podName"},
		{"bad request in pod", "/filter", mustJSON(t, extenderv1.ExtenderArgs{
			Pod: gpuPod("p", map[string]string{annotations.UseGPUType: "a100,,h100"}, ctr{name: "m", gpu: 1}), NodeNames: names("n1")}),
			http.StatusOK, "nvidia.com/use-gputype: empty entry at position 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := h.postRaw(c.path, c.body)
			if w.Code != c.status || !strings.Contains(w.Body.String(), c.errHas) {
				t.Errorf("got %d %s, want %d containing %q", w.Code, w.Body.String(), c.status, c.errHas)
			}
		})
	}
}

func TestPrioritizeByNodePolicy(t *testing.T) {
	// n-busy: 4 cards, 2 held; n-idle: 4 cards, none. A 1-card pod makes n-busy 3/4 full, n-idle 1/4.
	busy := gpuPod("busy", nil, ctr{name: "m", gpu: 2})
	busy.Spec.NodeName = "n-busy"
	busy.Annotations = map[string]string{annotations.GPUAssignment: mustEncode(t, annotations.Assignment{Node: "n-busy", Containers: []annotations.ContainerAssignment{{
		Name: "m", Devices: []annotations.DeviceAssignment{
			{UUID: uuidOf("n-busy", 0), ID: uuidOf("n-busy", 0), MemoryMiB: 100, Cores: 100},
			{UUID: uuidOf("n-busy", 1), ID: uuidOf("n-busy", 1), MemoryMiB: 100, Cores: 100}}}}})}
	objs := []runtime.Object{
		gpuNode(nodeSpec{name: "n-busy", model: a40, memMiB: 100, count: 4}),
		gpuNode(nodeSpec{name: "n-idle", model: a40, memMiB: 100, count: 4}),
		busy,
	}
	cases := []struct {
		policy annotations.Policy
		want   extenderv1.HostPriorityList
	}{
		// Policy scores 7.5 and 2.5 (10-7.5, 10-2.5 for spread); the answer is their rank: 10 for the best, 9 next.
		{annotations.PolicyBinpack, extenderv1.HostPriorityList{{Host: "n-busy", Score: 10}, {Host: "n-idle", Score: 9}}},
		{annotations.PolicySpread, extenderv1.HostPriorityList{{Host: "n-busy", Score: 9}, {Host: "n-idle", Score: 10}}},
	}
	for _, c := range cases {
		t.Run(string(c.policy), func(t *testing.T) {
			h := newHarness(t, harnessOptions{nodePolicy: c.policy}, objs...)
			pod := gpuPod("new", nil, ctr{name: "m", gpu: 1})
			args := extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n-busy", "n-idle")}
			// Straight from the cache, then memoised from filter: both must agree.
			cold := decodeInto[extenderv1.HostPriorityList](t, h.post("/prioritize", args))
			decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", args))
			warm := decodeInto[extenderv1.HostPriorityList](t, h.post("/prioritize", args))
			if diff := cmp.Diff(c.want, cold); diff != "" {
				t.Errorf("cold (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.want, warm); diff != "" {
				t.Errorf("after filter (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBindWritesAssignmentOnTheBinding(t *testing.T) {
	pod := gpuPod("p", nil, ctr{name: "main", gpu: 1, mem: 1000, cores: 20})
	h := newHarness(t, harnessOptions{informer: true}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 46068, count: 1, shares: 4}), pod)
	res := decodeInto[extenderv1.ExtenderBindingResult](t, h.post("/bind", extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "default", PodUID: pod.UID, Node: "n1"}))
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	a, node := h.assignmentOf("default", "p")
	want := &annotations.Assignment{V: 1, Node: "n1", Containers: []annotations.ContainerAssignment{{Name: "main", Devices: []annotations.DeviceAssignment{
		{UUID: uuidOf("n1", 0), ID: uuidOf("n1", 0) + "::0", MemoryMiB: 1000, Cores: 20}}}}}
	if diff := cmp.Diff(want, a); diff != "" || node != "n1" {
		t.Errorf("assignment (-want +got):\n%s node %q", diff, node)
	}
	// One write: the assignment rides on the Binding, no separate patch of the pod.
	var verbs []string
	for _, a := range h.client.Actions() {
		if a.GetVerb() == "patch" || a.GetVerb() == "update" || a.GetSubresource() == "binding" {
			verbs = append(verbs, a.GetVerb()+" "+a.GetSubresource())
		}
	}
	if diff := cmp.Diff([]string{"create binding"}, verbs); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	// The cache counts the slot: 46068 - 1000 free, 80% cores, slot 0 held.
	u := h.cache.NodeUsage("n1").Cards[0]
	if u.FreeMemMiB() != 45068 || u.FreeCores() != 80 || u.FreeSlots() != 3 {
		t.Errorf("usage after bind: %+v", u.Usage)
	}
}

func TestBindFailureReleasesAndRecordsEvent(t *testing.T) {
	pod := gpuPod("p", nil, ctr{name: "main", gpu: 1})
	h := newHarness(t, harnessOptions{}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 1}), pod)
	h.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			// A refusal proves the write did not happen (an error that does not is TestBindOutcomeUnknown's).
			return true, nil, apierrors.NewForbidden(corev1.Resource("pods/binding"), "p", errors.New("apiserver says no"))
		}
		return false, nil, nil
	})
	res := decodeInto[extenderv1.ExtenderBindingResult](t, h.post("/bind", extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "default", Node: "n1"}))
	if !strings.Contains(res.Error, "apiserver says no") {
		t.Fatalf("bind error %q, want the API error", res.Error)
	}
	if got := h.cache.NodeUsage("n1").Cards[0].Held; got != 0 {
		t.Errorf("card still held by %d after a failed bind", got)
	}
	select {
	case e := <-h.recorder.Events:
		if !strings.HasPrefix(e, "Warning "+EventBindFailed) || !strings.Contains(e, "apiserver says no") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no event recorded")
	}
	// A bind for a pod that does not fit says why.
	big := gpuPod("big", nil, ctr{name: "main", gpu: 2})
	if _, err := h.client.CoreV1().Pods("default").Create(context.Background(), big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res = decodeInto[extenderv1.ExtenderBindingResult](t, h.post("/bind", extenderv1.ExtenderBindingArgs{PodName: "big", PodNamespace: "default", Node: "n1"}))
	if want := "node n1: needs 2 cards, node has 1 (1x NVIDIA A40): pod does not fit the node"; res.Error != want {
		t.Errorf("bind error %q, want %q", res.Error, want)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	h := newHarness(t, harnessOptions{}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 1}))
	decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: gpuPod("p", nil, ctr{name: "m", gpu: 1}), NodeNames: names("n1")}))
	for path, want := range map[string]string{
		"/healthz": "ok",
		"/readyz":  "ok",
		"/metrics": `cardinal_extender_request_duration_seconds_count{verb="filter"} 1`,
	} {
		w := httpGet(h, path)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), want) {
			t.Errorf("%s: %d, want %q in:\n%.2000s", path, w.Code, want, w.Body.String())
		}
	}
	h.srv.ready = func() bool { return false }
	if w := httpGet(h, "/readyz"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before sync: %d", w.Code)
	}
}

func httpGet(h *harness, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustEncode(t *testing.T, a annotations.Assignment) string {
	t.Helper()
	s, err := annotations.EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Nodes in the same state are decided once per filter call; a UUID rule turns that off, and a node
// whose state differs is decided on its own.
func TestFilterIdenticalNodes(t *testing.T) {
	held := gpuPod("held", nil, ctr{name: "m", gpu: 1})
	held.Spec.NodeName = "n3"
	held.Annotations = map[string]string{annotations.GPUAssignment: mustEncode(t, annotations.Assignment{Node: "n3", Containers: []annotations.ContainerAssignment{{
		Name: "m", Devices: []annotations.DeviceAssignment{{UUID: uuidOf("n3", 0), ID: uuidOf("n3", 0), MemoryMiB: 100, Cores: 100}}}}})}
	h := newHarness(t, harnessOptions{},
		gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 2}),
		gpuNode(nodeSpec{name: "n2", model: a40, memMiB: 100, count: 2}),
		gpuNode(nodeSpec{name: "n3", model: a40, memMiB: 100, count: 2}), held)
	cases := []struct {
		ann  map[string]string
		fit  []string
		fail map[string]string
	}{
		// n1 and n2 alike; n3 has 1 of 2 cards held.
		{nil, []string{"n1", "n2"}, map[string]string{"n3": "needs 2 free cards, 1 of 2 is free"}},
		// Only n2 has GPU-n2-1.
		{map[string]string{annotations.UseGPUUUID: uuidOf("n2", 0) + "," + uuidOf("n2", 1)}, []string{"n2"}, nil},
	}
	for _, c := range cases {
		res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{
			Pod: gpuPod("p", c.ann, ctr{name: "m", gpu: 2}), NodeNames: names("n1", "n2", "n3")}))
		if diff := cmp.Diff(c.fit, *res.NodeNames); diff != "" {
			t.Errorf("%v: fit (-want +got):\n%s", c.ann, diff)
		}
		if c.fail != nil {
			if diff := cmp.Diff(c.fail, map[string]string(res.FailedNodes)); diff != "" {
				t.Errorf("%v: failed (-want +got):\n%s", c.ann, diff)
			}
		}
	}
}

func TestProbeHandlerServesOnlyProbesAndMetrics(t *testing.T) {
	h := newHarness(t, harnessOptions{}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 1}))
	probe := h.srv.ProbeHandler()
	get := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		probe.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader("{}")))
		return w
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if w := get(http.MethodGet, path); w.Code != http.StatusOK {
			t.Errorf("GET %s on the probe handler: %d, want 200", path, w.Code)
		}
	}
	// The extender API (which writes pods) must not be reachable through the probe address.
	for _, path := range []string{"/filter", "/prioritize", "/bind"} {
		if w := get(http.MethodPost, path); w.Code != http.StatusNotFound {
			t.Errorf("POST %s on the probe handler: %d, want 404", path, w.Code)
		}
	}
}
