package scenario

import (
	"errors"
	"math"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func TestQuantile(t *testing.T) {
	// Cumulative counts: 10 ≤ 1, 30 ≤ 2, 40 ≤ 4, 40 ≤ +Inf.
	h := []bucket{{1, 10}, {2, 30}, {4, 40}, {math.Inf(1), 40}}
	for _, tc := range []struct {
		q, want float64
	}{
		{0.25, 1},    // rank 10 is the first bucket's top: 0 + 1×10/10
		{0.5, 1.5},   // rank 20 halfway through (1, 2]: 1 + 1×(20−10)/(30−10)
		{0.99, 3.92}, // rank 39.6 in (2, 4]: 2 + 2×(39.6−30)/(40−30)
	} {
		if got := Quantile(tc.q, h); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	// A quantile in +Inf is the largest finite bound: 5 of 10 samples above 1.
	if got := Quantile(0.9, []bucket{{1, 5}, {math.Inf(1), 10}}); got != 1 {
		t.Errorf("Quantile in +Inf = %v, want 1", got)
	}
	if got := Quantile(0.5, nil); !math.IsNaN(got) {
		t.Errorf("Quantile of nothing = %v, want NaN", got)
	}
}

func TestHistogramFromText(t *testing.T) {
	text := []byte(`# TYPE scheduler_scheduling_attempt_duration_seconds histogram
scheduler_scheduling_attempt_duration_seconds_bucket{profile="a",result="scheduled",le="0.001"} 1
scheduler_scheduling_attempt_duration_seconds_bucket{profile="a",result="scheduled",le="0.002"} 3
scheduler_scheduling_attempt_duration_seconds_bucket{profile="a",result="scheduled",le="+Inf"} 4
scheduler_scheduling_attempt_duration_seconds_sum{profile="a",result="scheduled"} 0.01
scheduler_scheduling_attempt_duration_seconds_count{profile="a",result="scheduled"} 4
scheduler_scheduling_attempt_duration_seconds_bucket{profile="a",result="error",le="0.001"} 0
scheduler_scheduling_attempt_duration_seconds_bucket{profile="a",result="error",le="0.002"} 0
scheduler_scheduling_attempt_duration_seconds_bucket{profile="a",result="error",le="+Inf"} 7
scheduler_scheduling_attempt_duration_seconds_sum{profile="a",result="error"} 70
scheduler_scheduling_attempt_duration_seconds_count{profile="a",result="error"} 7
`)
	ms, err := ParseMetrics(text)
	if err != nil {
		t.Fatal(err)
	}
	got := ms.Histogram("scheduler_scheduling_attempt_duration_seconds", map[string]string{"result": "scheduled"})
	// The +Inf bucket is counted once (4), and the error series is left out.
	want := []bucket{{0.001, 1}, {0.002, 3}, {math.Inf(1), 4}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(bucket{})); diff != "" {
		t.Errorf("histogram (-want +got):\n%s", diff)
	}
	// 4 scheduled + 7 errors.
	if n := ms.Sum("scheduler_scheduling_attempt_duration_seconds", nil); n != 11 {
		t.Errorf("Sum = %v, want 11", n)
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{
		{50, 5},  // ⌈0.5×10⌉ = 5th
		{99, 10}, // ⌈0.99×10⌉ = 10th
		{10, 1},  // ⌈0.1×10⌉ = 1st
	} {
		if got := percentile(d, tc.p); got != tc.want {
			t.Errorf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 99); got != 0 {
		t.Errorf("percentile of nothing = %v", got)
	}
}

func TestWriteCounter(t *testing.T) {
	c := newWriteCounter()
	for _, r := range []struct{ method, path string }{
		{http.MethodPatch, "/api/v1/nodes/node-0001"},
		{http.MethodPut, "/api/v1/nodes/node-0001/status"},
		{http.MethodGet, "/api/v1/nodes"},
		{http.MethodPatch, "/api/v1/namespaces/bench/pods/p"},
		{http.MethodPost, "/api/v1/namespaces/bench/pods/p/binding"},
		{http.MethodPost, "/apis/events.k8s.io/v1/namespaces/bench/events"},
		{http.MethodPost, "/api/v1/namespaces"},
	} {
		c.count(r.method, r.path)
	}
	// GETs are not writes; a pod's subresource counts as a pod write.
	want := map[string]int{"nodes": 2, "pods": 2, "events": 1, "namespaces": 1}
	if diff := cmp.Diff(want, c.snapshot()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if got := resourceOf("/healthz"); got != "" {
		t.Errorf("resourceOf(/healthz) = %q, want empty", got)
	}
}

func TestDoubleBooked(t *testing.T) {
	pod := func(name, node string, uuids ...string) corev1.Pod {
		ca := annotations.ContainerAssignment{Name: "main"}
		for _, u := range uuids {
			ca.Devices = append(ca.Devices, annotations.DeviceAssignment{UUID: u, ID: u})
		}
		raw, err := annotations.EncodeAssignment(annotations.Assignment{V: annotations.Version, Node: "n", Containers: []annotations.ContainerAssignment{ca}})
		if err != nil {
			t.Fatal(err)
		}
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotations.GPUAssignment: raw}}, Spec: corev1.PodSpec{NodeName: node}}
	}
	a, b, c := "GPU-00000000-0000-0000-0000-00000000000a", "GPU-00000000-0000-0000-0000-00000000000b", "GPU-00000000-0000-0000-0000-00000000000c"
	pods := []corev1.Pod{
		pod("p1", "n", a, b),
		pod("p2", "n", b, c), // b twice among bound pods
		pod("p3", "", a),     // not bound: does not hold a
	}
	if got := doubleBooked(pods); got != 1 {
		t.Errorf("doubleBooked = %d, want 1 (card b)", got)
	}
}

func TestParallel(t *testing.T) {
	var n atomic.Int64
	if err := parallel(100, 7, func(i int) error { n.Add(int64(i)); return nil }); err != nil {
		t.Fatal(err)
	}
	// 0 + 1 + … + 99 = 4950.
	if n.Load() != 4950 {
		t.Errorf("sum = %d, want 4950", n.Load())
	}
	boom := errors.New("boom")
	if err := parallel(10, 3, func(i int) error {
		if i == 4 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
}

func TestParamsFor(t *testing.T) {
	for _, s := range []Size{SizeTiny, SizeSmall, SizeFull} {
		p, err := ParamsFor(s)
		if err != nil {
			t.Fatal(err)
		}
		if p.S2.Pods == 0 || p.S3.Pods == 0 || p.S6.Window == 0 || p.S6.Plugins > p.S6.Nodes {
			t.Errorf("%s: %+v is incomplete", s, p)
		}
	}
	full, _ := ParamsFor(SizeFull)
	// BENCHMARKS.md: S2 1000 nodes × 8 GPUs, 5000 pods; S3 64 × 2 GPUs onto 8 × 8 (32 fit); S6 10 minutes.
	if full.S2.Nodes != 1000 || full.S2.GPUsPerNode != 8 || full.S2.Pods != 5000 || full.S3.Fitting() != 32 || full.S6.Window != 10*time.Minute {
		t.Errorf("full sizes %+v differ from BENCHMARKS.md", full)
	}
	if _, err := ParamsFor("huge"); err == nil {
		t.Error("ParamsFor(huge) did not fail")
	}
}

func TestParseMachineTime(t *testing.T) {
	// user 100, nice 10, system 40, idle 900, iowait 5, irq 3, softirq 2, steal 7 ticks of 10 ms.
	stat := "cpu  100 10 40 900 5 3 2 7 0 0\ncpu0 50 5 20 450 2 1 1 3 0 0\nintr 1 2 3\n"
	busy, steal := parseMachineTime(stat)
	if busy != 1550*time.Millisecond || steal != 70*time.Millisecond {
		t.Errorf("parseMachineTime = busy %v steal %v, want 1.55s and 70ms", busy, steal)
	}
	if busy, steal := parseMachineTime("cpu0 1 2 3"); busy != 0 || steal != 0 {
		t.Errorf("a stat without the aggregate line gave busy %v steal %v, want 0", busy, steal)
	}
	if busy, _ := machineTime(); busy <= 0 {
		t.Errorf("this machine's /proc/stat gave no busy time")
	}
}

func TestParseCPUTime(t *testing.T) {
	// utime 150 and stime 50 ticks of 10 ms: 2 s. The command name holds a space and a ')'.
	stat := "1234 (kube (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 12 0 100 1000 10"
	if got := parseCPUTime(stat); got != 2*time.Second {
		t.Errorf("parseCPUTime = %v, want 2s", got)
	}
	if got := parseCPUTime("garbage"); got != 0 {
		t.Errorf("parseCPUTime(garbage) = %v, want 0", got)
	}
	// This process's own stat: work until it has used a tick of CPU, which it must then report.
	sum := 0
	for i := 0; cpuTime(os.Getpid()) == 0; i++ {
		if i == 1e9 {
			t.Fatal("this process reports no CPU time after a billion iterations of work")
		}
		sum += i % 7
	}
	_ = sum
	if got := cpuTime(1 << 30); got != 0 {
		t.Errorf("cpuTime of a process that does not exist = %v, want 0", got)
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add([]byte("# TYPE x histogram\nx_bucket{le=\"1\"} 1\nx_bucket{le=\"+Inf\"} 2\nx_sum 3\nx_count 2\n"))
	f.Add([]byte("apiserver_request_total{resource=\"nodes\",verb=\"PATCH\"} 4\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		ms, err := ParseMetrics(text)
		if err != nil {
			return
		}
		for name := range ms {
			q := Quantile(0.99, ms.Histogram(name, nil))
			if q < 0 {
				t.Errorf("%s: quantile %v below every bucket", name, q)
			}
			_ = ms.Sum(name, map[string]string{"a": "b"})
		}
	})
}
