package scheduler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// benchCluster is BENCHMARKS.md S1: nodes × 8 cards, half of them held whole by bound pods. Which
// 4 cards of a node are held is drawn at random (seeded), so nodes differ (70 patterns) as they do
// in a real cluster.
func benchCluster(b *testing.B, nodes int) (*harness, []string) {
	h := newHarness(&testing.T{}, harnessOptions{})
	all := make([]string, nodes)
	rng := rand.New(rand.NewPCG(42, 1))
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("node-%05d", i)
		all[i] = name
		h.cache.UpsertNode(gpuNode(nodeSpec{name: name, model: a100, memMiB: 81920, count: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1}}))
		held := rng.Perm(8)[:4]
		for k := 0; k < 4; k++ {
			id := uuidOf(name, held[k])
			p := gpuPod(fmt.Sprintf("%s-p%d", name, k), nil, ctr{name: "m", gpu: 1})
			p.Spec.NodeName = name
			p.Status.Phase = corev1.PodRunning
			p.Annotations = map[string]string{annotations.GPUAssignment: mustEncodeB(b, annotations.Assignment{Node: name,
				Containers: []annotations.ContainerAssignment{{Name: "m", Devices: []annotations.DeviceAssignment{{UUID: id, ID: id, MemoryMiB: 81920, Cores: 100}}}}})}
			h.cache.UpsertPod(p)
		}
	}
	return h, all
}

func mustEncodeB(b *testing.B, a annotations.Assignment) string {
	s, err := annotations.EncodeAssignment(a)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

type benchCase struct{ nodes, names int }

var benchCases = []benchCase{{5000, 1}, {5000, 500}, {5000, 5000}, {1000, 500}, {1000, 1000}}

// benchVerbs posts the verbs in order per operation over loopback HTTP (keep-alive) and reports
// p50/p99 of one operation, from per-operation samples.
func benchVerbs(b *testing.B, verbs ...string) {
	for _, c := range benchCases {
		b.Run(fmt.Sprintf("nodes=%d/names=%d", c.nodes, c.names), func(b *testing.B) {
			h, all := benchCluster(b, c.nodes)
			srv := httptest.NewServer(h.handler)
			defer srv.Close()
			client := srv.Client()
			// Names spread over the cluster: every (nodes/names)-th node.
			picked := make([]string, 0, c.names)
			for i := 0; i < c.names; i++ {
				picked = append(picked, all[i*len(all)/c.names])
			}
			pod := gpuPod("bench", map[string]string{annotations.UseGPUType: "a100"}, ctr{name: "m", gpu: 2})
			body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &picked})
			if err != nil {
				b.Fatal(err)
			}
			post := func(verb string) {
				resp, err := client.Post(srv.URL+"/"+verb, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %s", verb, resp.Status)
				}
			}
			for _, v := range verbs { // warm the connection and the caches
				post(v)
			}
			samples := make([]time.Duration, 0, b.N)
			cpu0 := cpuTime()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				for _, v := range verbs {
					post(v)
				}
				samples = append(samples, time.Since(start))
			}
			b.StopTimer()
			// CPU time of the whole process (client, server, GC) per operation: on a shared machine it
			// moves far less than wall time when other processes compete for the cores.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(samples[(len(samples)*99)/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkFilter is S1's filter call: a 2-card A100 pod against nodes of 8 A100s, half used.
func BenchmarkFilter(b *testing.B) { benchVerbs(b, "filter") }

// BenchmarkPrioritize is S1's prioritize call alone (no filter before it, so nothing memoised).
func BenchmarkPrioritize(b *testing.B) { benchVerbs(b, "prioritize") }

// BenchmarkFilterPrioritize is one scheduling attempt's extender cost: filter, then prioritize
// (which reuses filter's verdicts).
func BenchmarkFilterPrioritize(b *testing.B) { benchVerbs(b, "filter", "prioritize") }

// BenchmarkEvaluate is the decision work of one filter call without HTTP or JSON.
func BenchmarkEvaluate(b *testing.B) {
	for _, names := range []int{1, 500, 5000} {
		b.Run(fmt.Sprintf("nodes=5000/names=%d", names), func(b *testing.B) {
			h, all := benchCluster(b, 5000)
			picked := make([]string, names)
			for i := range picked {
				picked[i] = all[i*len(all)/names]
			}
			pod := gpuPod("bench", map[string]string{annotations.UseGPUType: "a100"}, ctr{name: "m", gpu: 2})
			p, err := h.srv.prepare(pod)
			if err != nil {
				b.Fatal(err)
			}
			out := make([]Verdict, 0, names)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				out = h.cache.Evaluate(pod.UID, p, picked, out)
			}
		})
	}
}

// BenchmarkDecodeArgs is the JSON decoding of one filter request.
func BenchmarkDecodeArgs(b *testing.B) {
	names := make([]string, 500)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i*10)
	}
	pod := gpuPod("bench", map[string]string{annotations.UseGPUType: "a100"}, ctr{name: "m", gpu: 2})
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest(http.MethodPost, "/filter", bytes.NewReader(body))
		if _, _, err := decodeBody[extenderv1.ExtenderArgs](httptest.NewRecorder(), req, DefaultMaxBodyBytes); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the user+system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFilterUUIDSelector is one filter over 5000 nodes × 8 cards for a pod whose
// nouse-gpuuuid names 1 or 4096 of the cluster's cards (the largest list admission accepts): a
// long list must cost about what a short one does (issue: UUID selectors scanned linearly).
func BenchmarkFilterUUIDSelector(b *testing.B) {
	h, all := benchCluster(b, 5000)
	for _, n := range []int{1, 4096} {
		b.Run(fmt.Sprintf("nouse-gpuuuid=%d", n), func(b *testing.B) {
			uuids := make([]string, n)
			for i := range uuids {
				uuids[i] = uuidOf(all[(i*7919)%len(all)], i%8)
			}
			pod := gpuPod("bench", map[string]string{annotations.NoUseGPUUUID: strings.Join(uuids, ",")}, ctr{name: "m", gpu: 2})
			body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &all})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if w := h.postRaw("/filter", body); w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
