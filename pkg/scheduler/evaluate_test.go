package scheduler

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// A long filter call is decided in parts at once (evaluateParts); the verdicts must be the ones
// one pass over every name gives — scores bit for bit, the same reasons, and the in-flight rule
// (a node that must wait is offered only when no node is free) applied over all the names, not
// per part.
func TestEvaluateInPartsMatchesOnePass(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	if evaluateParts(2000) < 2 {
		t.Fatalf("evaluateParts(2000) = %d with GOMAXPROCS 4: the test would not split", evaluateParts(2000))
	}
	for _, shape := range []clusterShape{distinct, patterns} {
		h, names := benchCluster(t, 2000, shape)
		pods := map[string]*corev1.Pod{
			"one card":     gpuPod("one", nil, ctr{name: "m", gpu: 1}),
			"two cards":    gpuPod("two", nil, ctr{name: "m", gpu: 2}),
			"shared slot":  gpuPod("slot", nil, ctr{name: "m", gpu: 1, mem: 2048, cores: 10}),
			"by uuid":      gpuPod("uuid", map[string]string{annotations.UseGPUUUID: uuidOf(names[1500], 3) + "," + uuidOf(names[10], 0)}, ctr{name: "m", gpu: 1}),
			"eight cards":  gpuPod("eight", nil, ctr{name: "m", gpu: 8}),
			"nouse a node": gpuPod("nouse", map[string]string{annotations.NoUseGPUUUID: uuidOf(names[0], 0)}, ctr{name: "m", gpu: 1, mem: 1024, cores: 5}),
		}
		for what, pod := range pods {
			p, err := h.srv.prepare(pod)
			if err != nil {
				t.Fatal(err)
			}
			got := h.cache.Evaluate(pod.UID, p, names, nil)
			want := make([]Verdict, len(names))
			h.cache.mu.RLock()
			free, waiting := h.cache.evaluate(pod.UID, p, names, want)
			h.cache.mu.RUnlock()
			if waiting && !free {
				for i := range want {
					if want[i].Reason != nil && want[i].Reason.Kind == core.ReasonInFlight {
						want[i].Reason = nil
					}
				}
			}
			fits, waits := 0, 0
			for i := range names {
				if got[i].Score != want[i].Score || got[i].gen != want[i].gen || reasonText(got[i].Reason) != reasonText(want[i].Reason) {
					t.Fatalf("%s, %s: node %s: in parts %+v (%s), in one pass %+v (%s)", shape, what, names[i],
						got[i], reasonText(got[i].Reason), want[i], reasonText(want[i].Reason))
				}
				if got[i].Reason == nil {
					fits++
				} else if got[i].Reason.Kind == core.ReasonInFlight {
					waits++
				}
			}
			t.Logf("%s, %s: %d of %d fit, %d wait for a container in flight", shape, what, fits, len(names), waits)
			if len(got) != len(names) || (what == "one card" && fits == 0) {
				t.Fatalf("%s, %s: %d verdicts for %d names, %d fit: the cluster does not exercise the split", shape, what, len(got), len(names), fits)
			}
		}
	}
}

// The in-flight rule spans the parts: a node that must wait for a container in flight keeps its
// reason while any node of any part is free, and is offered when none is.
func TestEvaluateInPartsKeepsTheInFlightRule(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, busy := range []int{1024, 1000} { // every node in flight; the last 24 free
		h := newHarness(t, harnessOptions{})
		names := make([]string, 1024)
		for i := range names {
			names[i] = fmt.Sprintf("node-%04d", i)
			h.cache.UpsertNode(gpuNode(nodeSpec{name: names[i], model: a40, memMiB: 10000, count: 2, shares: 4}))
			if i < busy {
				// Bound, not yet allocated: a whole card in flight.
				holder := benchHolder(t, names[i], 0, uuidOf(names[i], 0), 10000, 100)
				holder.Status.Phase = corev1.PodPending
				h.cache.UpsertPod(holder)
			}
		}
		pod := gpuPod("share", nil, ctr{name: "m", gpu: 1, mem: 1000, cores: 10})
		p, err := h.srv.prepare(pod)
		if err != nil {
			t.Fatal(err)
		}
		got := h.cache.Evaluate(pod.UID, p, names, nil)
		waits, fits := 0, 0
		for _, v := range got {
			switch {
			case v.Reason == nil:
				fits++
			case v.Reason.Kind == core.ReasonInFlight:
				waits++
			}
		}
		wantWaits, wantFits := busy, len(names)-busy
		if busy == len(names) {
			wantWaits, wantFits = 0, len(names)
		}
		if waits != wantWaits || fits != wantFits {
			t.Errorf("%d of %d nodes in flight: %d wait and %d fit, want %d and %d", busy, len(names), waits, fits, wantWaits, wantFits)
		}
	}
}

// reasonText is r's text, "" for none.
func reasonText(r *core.Reason) string {
	if r == nil {
		return ""
	}
	return r.String()
}
