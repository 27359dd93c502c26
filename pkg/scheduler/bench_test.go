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
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// clusterShape is how benchCluster varies its nodes.
type clusterShape string

const (
	// distinct: every node in a state of its own, as in a cluster with shared cards where usage
	// differs node by node — A100 40 GB or 80 GB, shares 1, 2, 4 or 8, cards held whole or in
	// slots of various memory and cores. Nothing is decided once for many nodes.
	distinct clusterShape = "distinct"
	// patterns: 8 exclusive A100s per node with 4 held whole, which 4 drawn at random: at most
	// C(8,4) = 70 states, so the cache decides 5000 nodes as at most 70.
	patterns clusterShape = "patterns"
)

// benchCluster is BENCHMARKS.md S1: nodes × 8 A100s, about half of each node used by bound pods,
// varied as shape says. Seeded, so runs compare.
func benchCluster(b testing.TB, nodes int, shape clusterShape) (*harness, []string) {
	// The policies a user gets without choosing (the binary's and the chart's defaults).
	d := DefaultConfig()
	h := newHarness(b, harnessOptions{nodePolicy: d.NodePolicy, gpuPolicy: d.GPUPolicy})
	all := make([]string, nodes)
	rng := rand.New(rand.NewPCG(42, 1))
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("node-%05d", i)
		all[i] = name
		var pods []*corev1.Pod
		if shape == patterns {
			h.cache.UpsertNode(gpuNode(nodeSpec{name: name, model: a100, memMiB: 81920, count: 8, numa: []int{0, 0, 0, 0, 1, 1, 1, 1}}))
			for k, card := range rng.Perm(8)[:4] {
				pods = append(pods, benchHolder(b, name, k, uuidOf(name, card), 81920, 100))
			}
		} else {
			mem := []int64{40960, 81920}[rng.IntN(2)]
			shares := []int{1, 2, 4, 8}[rng.IntN(4)]
			h.cache.UpsertNode(gpuNode(nodeSpec{name: name, model: a100, memMiB: mem, count: 8, shares: shares, numa: []int{0, 0, 0, 0, 1, 1, 1, 1}}))
			for card := 0; card < 8; card++ {
				if shares == 1 {
					if rng.IntN(2) == 0 {
						pods = append(pods, benchHolder(b, name, len(pods), uuidOf(name, card), mem, 100))
					}
					continue
				}
				// Up to half the slots, each with its own memory (GiB steps) and cores.
				for slot := 0; slot < rng.IntN(shares/2+1); slot++ {
					m := int64(1+rng.IntN(int(mem/1024)/shares)) * 1024
					pods = append(pods, benchHolder(b, name, len(pods), annotations.SlotID(uuidOf(name, card), slot), m, 5*(1+rng.IntN(4))))
				}
			}
			// One slot or card whose memory is the node's index makes every state unique.
			id := uuidOf(name, 7)
			if shares > 1 {
				id = annotations.SlotID(id, shares-1)
			}
			pods = append(pods, benchHolder(b, name, len(pods), id, 1+int64(i%1000), 1))
		}
		for _, p := range pods {
			h.cache.UpsertPod(p)
		}
	}
	return h, all
}

// benchHolder is a running pod holding device id on node with mem MiB and cores.
func benchHolder(b testing.TB, node string, k int, id string, mem int64, cores int) *corev1.Pod {
	uuid, _, _ := annotations.ParseDeviceID(id)
	p := gpuPod(fmt.Sprintf("%s-p%d", node, k), nil, ctr{name: "m", gpu: 1})
	p.UID = types.UID(p.Name)
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	p.Annotations = map[string]string{annotations.GPUAssignment: mustEncodeB(b, annotations.Assignment{Node: node,
		Containers: []annotations.ContainerAssignment{{Name: "m", Devices: []annotations.DeviceAssignment{{UUID: uuid, ID: id, MemoryMiB: mem, Cores: cores}}}}})}
	return p
}

func mustEncodeB(b testing.TB, a annotations.Assignment) string {
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
	for _, shape := range []clusterShape{distinct, patterns} {
		for _, c := range benchCases {
			benchVerbsCase(b, shape, c, verbs)
		}
	}
}

func benchVerbsCase(b *testing.B, shape clusterShape, c benchCase, verbs []string) {
	b.Run(fmt.Sprintf("nodes=%d/names=%d/state=%s", c.nodes, c.names, shape), func(b *testing.B) {
		h, all := benchCluster(b, c.nodes, shape)
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

// BenchmarkFilter is S1's filter call: a 2-card A100 pod against nodes of 8 A100s, half used.
func BenchmarkFilter(b *testing.B) { benchVerbs(b, "filter") }

// BenchmarkPrioritize is S1's prioritize call alone (no filter before it, so nothing memoised).
func BenchmarkPrioritize(b *testing.B) { benchVerbs(b, "prioritize") }

// BenchmarkFilterPrioritize is one scheduling attempt's extender cost: filter, then prioritize
// (which reuses filter's verdicts).
func BenchmarkFilterPrioritize(b *testing.B) { benchVerbs(b, "filter", "prioritize") }

// BenchmarkEvaluate is the decision work of one filter call without HTTP or JSON.
func BenchmarkEvaluate(b *testing.B) {
	for _, c := range []struct {
		names int
		shape clusterShape
	}{{1, distinct}, {500, distinct}, {5000, distinct}, {500, patterns}} {
		names := c.names
		b.Run(fmt.Sprintf("nodes=5000/names=%d/state=%s", names, c.shape), func(b *testing.B) {
			h, all := benchCluster(b, 5000, c.shape)
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

// BenchmarkDecodeArgs is the decoding of one filter request (a pod and 500 names) by the decoder
// the routes use: informer=none decodes the pod's JSON, informer=same takes the informer's copy of
// the same pod (same UID and resourceVersion; args.go).
func BenchmarkDecodeArgs(b *testing.B) {
	names := make([]string, 500)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i*10)
	}
	pod := gpuPod("bench", map[string]string{annotations.UseGPUType: "a100"}, ctr{name: "m", gpu: 2})
	pod.UID, pod.ResourceVersion = "0b3c2a1e-6f4d-4d8a-9c1b-2f3e4d5c6b7a", "123456"
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names})
	for _, c := range []struct {
		name  string
		known func(ns, name string) *corev1.Pod
	}{
		{"informer=none", nil},
		{"informer=same", func(ns, name string) *corev1.Pod { return pod }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for i := 0; i < b.N; i++ {
				req := httptest.NewRequest(http.MethodPost, "/filter", bytes.NewReader(body))
				if _, _, err := decodeBody[extenderArgs](httptest.NewRecorder(), req, DefaultMaxBodyBytes, c.known); err != nil {
					b.Fatal(err)
				}
			}
		})
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
	h, all := benchCluster(b, 5000, distinct)
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

// The S1 cluster shapes are what they claim: every node of the distinct shape in a state of its
// own, the patterns shape at most C(8,4) = 70 states.
func TestBenchClusterShapes(t *testing.T) {
	for shape, most := range map[clusterShape]int{distinct: 2000, patterns: 70} {
		h, all := benchCluster(t, 2000, shape)
		keys := map[string]bool{}
		for _, name := range all {
			keys[h.cache.nodes[name].key] = true
		}
		if shape == distinct && len(keys) != len(all) {
			t.Errorf("distinct: %d states for %d nodes", len(keys), len(all))
		}
		if len(keys) > most {
			t.Errorf("%s: %d states, want at most %d", shape, len(keys), most)
		}
	}
}
