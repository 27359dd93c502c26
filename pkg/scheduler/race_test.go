package scheduler

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// 200 binds race onto 10 nodes through the real HTTP handler (run with -race). Whatever the
// interleaving, no device ID is given twice, no card gives more memory or cores than it has, a
// card held whole holds nothing else, and no node has two non-interchangeable containers of the
// same device count in flight (nothing is allocated here, so every bound container stays in flight).
func TestConcurrentBindsNeverOverCommit(t *testing.T) {
	const nodes, pods = 10, 200
	var objs []runtime.Object
	for i := 0; i < nodes; i++ {
		objs = append(objs, gpuNode(nodeSpec{name: "n" + itoa(i), model: a40, memMiB: 10000, count: 4, shares: 4}))
	}
	h := newHarness(t, harnessOptions{informer: true}, objs...)
	// Four kinds: identical shares of one card (interchangeable with each other), shares of two
	// cards, whole single cards (same count as the 1-card shares: they must not be in flight
	// together on a node) and whole pairs.
	kinds := []func(string) *corev1.Pod{
		func(n string) *corev1.Pod { return gpuPod(n, nil, ctr{name: "m", gpu: 1, mem: 3000, cores: 30}) },
		func(n string) *corev1.Pod { return gpuPod(n, nil, ctr{name: "m", gpu: 2, mem: 2000, cores: 20}) },
		func(n string) *corev1.Pod { return gpuPod(n, nil, ctr{name: "m", gpu: 1}) },
		func(n string) *corev1.Pod { return gpuPod(n, nil, ctr{name: "m", gpu: 2}) },
	}
	all := make([]*corev1.Pod, pods)
	for i := range all {
		all[i] = kinds[i%len(kinds)](fmt.Sprintf("p%03d", i))
	}
	h.createPods(all...)
	rng := rand.New(rand.NewPCG(1, 2))
	targets := make([]string, pods)
	for i := range targets {
		targets[i] = "n" + itoa(rng.IntN(nodes))
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]extenderv1.ExtenderBindingResult, pods)
	failures := make([]string, pods)
	for i := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// No t.Fatal off the test's goroutine: record what went wrong, report it below.
			body, err := json.Marshal(bindArgs{PodName: all[i].Name, PodNamespace: "default", PodUID: all[i].UID, Node: targets[i]})
			if err != nil {
				failures[i] = err.Error()
				return
			}
			w := h.postRaw("/bind", body)
			if w.Code != http.StatusOK {
				failures[i] = fmt.Sprintf("status %d: %s", w.Code, w.Body.String())
				return
			}
			if err := json.Unmarshal(w.Body.Bytes(), &results[i]); err != nil {
				failures[i] = err.Error()
			}
		}()
	}
	close(start)
	wg.Wait()
	for i, f := range failures {
		if f != "" {
			t.Errorf("bind %s: %s", all[i].Name, f)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	list, err := h.client.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type cardUse struct {
		mem   int64
		cores int
		n     int
		whole bool
	}
	ids := map[string]string{}
	cards := map[string]*cardUse{}
	type flight struct {
		pod string
		req annotations.ContainerRequest
	}
	inFlight := map[string][]flight{}
	bound := 0
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName == "" {
			continue
		}
		bound++
		a, err := annotations.DecodeAssignment(p.Annotations[annotations.GPUAssignment])
		if err != nil || a.Node != p.Spec.NodeName {
			t.Fatalf("pod %s bound to %s with assignment %+v (%v)", p.Name, p.Spec.NodeName, a, err)
		}
		req, _ := annotations.ParsePodRequest(p, annotations.DefaultResourceNames())
		for _, c := range a.Containers {
			inFlight[a.Node] = append(inFlight[a.Node], flight{p.Name, req.Containers[0]})
			for _, d := range c.Devices {
				if other, dup := ids[d.ID]; dup {
					t.Errorf("device %s given to %s and %s", d.ID, other, p.Name)
				}
				ids[d.ID] = p.Name
				u := cards[d.UUID]
				if u == nil {
					u = &cardUse{}
					cards[d.UUID] = u
				}
				u.mem += d.MemoryMiB
				u.cores += d.Cores
				u.n++
				u.whole = u.whole || d.Cores == 100
			}
		}
	}
	for uuid, u := range cards {
		if u.mem > 10000 || u.cores > 100 || (u.whole && u.n > 1) {
			t.Errorf("card %s over-committed: %+v", uuid, *u)
		}
	}
	for node, fs := range inFlight {
		for i := range fs {
			for j := i + 1; j < len(fs); j++ {
				if fs[i].req.Count == fs[j].req.Count && !fs[i].req.Interchangeable(&fs[j].req) {
					t.Errorf("node %s: %s and %s in flight together with %d cards each", node, fs[i].pod, fs[j].pod, fs[i].req.Count)
				}
			}
		}
	}
	failed := 0
	for _, r := range results {
		if r.Error != "" {
			failed++
		}
	}
	if bound+failed != pods || bound == 0 {
		t.Errorf("bound %d + failed %d != %d", bound, failed, pods)
	}
	// The cache agrees with the API: every bound device is held, nothing else.
	held := 0
	for i := 0; i < nodes; i++ {
		for _, c := range h.cache.NodeUsage("n" + itoa(i)).Cards {
			held += c.Held
		}
	}
	if held != len(ids) {
		t.Errorf("cache holds %d device IDs, pods were bound with %d", held, len(ids))
	}
	t.Logf("%d pods bound, %d refused, %d device IDs", bound, failed, len(ids))
}
