package scheduler

import (
	"encoding/json"
	"net/http"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// FuzzExtenderDecoding posts arbitrary bodies to every verb: the answer is always a JSON body with
// status 200 (an extender answer, perhaps carrying an error), 400 or 413 — never a panic.
func FuzzExtenderDecoding(f *testing.F) {
	seed := func(v any) []byte { b, _ := json.Marshal(v); return b }
	pod := gpuPod("p", map[string]string{annotations.UseGPUType: "a40"}, ctr{name: "m", gpu: 1, mem: 100, cores: 10})
	f.Add(uint8(0), seed(extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1", "ghost")}))
	f.Add(uint8(1), seed(extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("n1")}))
	f.Add(uint8(2), seed(extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "default", Node: "n1"}))
	f.Add(uint8(0), []byte(`{"Pod":{"spec":{"containers":[{"name":"m","resources":{"limits":{"nvidia.com/gpu":"1e9"}}}]}},"NodeNames":["n1"]}`))
	f.Add(uint8(0), []byte(`{"Pod":{"metadata":{"annotations":{"nvidia.com/use-gpuuuid":",,"}}},"Nodes":{"items":[{"metadata":{"name":"n1"}}]}}`))
	f.Add(uint8(1), []byte(`null`))
	f.Add(uint8(2), []byte(`{"PodName":"p","PodNamespace":"default","Node":""}`))
	f.Add(uint8(0), []byte(`{`))
	f.Add(uint8(1), []byte{0xff, 0xfe})
	f.Add(uint8(3), seed(extenderv1.ExtenderPreemptionArgs{Pod: pod, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"n1": {Pods: []*extenderv1.MetaPod{{UID: "x"}}}}}))
	f.Add(uint8(3), []byte(`{"Pod":{},"NodeNameToVictims":{"n1":null},"NodeNameToMetaVictims":{"n1":{"Pods":[null]}}}`))
	paths := []string{"/filter", "/prioritize", "/bind", "/preempt"}
	f.Fuzz(func(t *testing.T, verb uint8, body []byte) {
		h := newHarness(t, harnessOptions{}, gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 1000, count: 2, shares: 2}), pod.DeepCopy())
		w := h.postRaw(paths[int(verb)%len(paths)], body)
		switch w.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("answer is not JSON: %q", w.Body.String())
		}
	})
}
