package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// BenchmarkAdmissionThroughAPIServer is S4 of BENCHMARKS.md end to end: pods created through a real
// kube-apiserver at 100 per second for 10 s, first GPU pods (each goes through the webhook), then the
// same number of pods without GPU requests (never sent), side by side. It reports the client's
// create p50/p99 for both, the apiserver's own measure of the webhook call
// (apiserver_admission_webhook_admission_duration_seconds, whose smallest bucket is 5 ms) and the
// webhook's handler p99 from its histogram. Run it with -benchtime 1x: one run is 2000 creates.
func BenchmarkAdmissionThroughAPIServer(b *testing.B) {
	bed := startVerbose(b, 0)
	cfg := rest.CopyConfig(bed.c.RESTConfig)
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	const rate, seconds = 100, 10
	b.ResetTimer()
	for i := range b.N {
		gpu := createAtRate(b, cs, fmt.Sprintf("gpu-%d", i), rate, seconds, func(name string) *corev1.Pod { return gpuPod(name) })
		plain := createAtRate(b, cs, fmt.Sprintf("plain-%d", i), rate, seconds, func(name string) *corev1.Pod { return pod(name, nil, "cpu", "100m") })
		b.ReportMetric(ms(gpu[len(gpu)/2]), "gpu-create-p50-ms")
		b.ReportMetric(ms(gpu[len(gpu)*99/100]), "gpu-create-p99-ms")
		b.ReportMetric(ms(plain[len(plain)/2]), "plain-create-p50-ms")
		b.ReportMetric(ms(plain[len(plain)*99/100]), "plain-create-p99-ms")
	}
	b.StopTimer()

	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		b.Fatal(err)
	}
	f := families["apiserver_admission_webhook_admission_duration_seconds"]
	if f == nil {
		b.Fatal("the apiserver reports no apiserver_admission_webhook_admission_duration_seconds")
	}
	for _, m := range f.GetMetric() {
		if label(m, "name") == "pods.webhook.cardinal.io" && label(m, "operation") == "CREATE" && label(m, "rejected") == "false" {
			b.ReportMetric(1000*quantile(m.GetHistogram(), 0.99), "apiserver-webhook-p99-le-ms")
			b.ReportMetric(float64(m.GetHistogram().GetSampleCount()), "apiserver-webhook-calls")
		}
	}
	mine, err := bed.reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range mine {
		if f.GetName() != "cardinal_webhook_admission_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "operation") == "CREATE" {
				b.ReportMetric(1000*quantile(m.GetHistogram(), 0.99), "handler-p99-le-ms")
			}
		}
	}
}

// createAtRate creates n = rate×seconds pods, one every 1/rate s whatever the previous ones are
// doing, and returns the create latencies sorted.
func createAtRate(b *testing.B, cs kubernetes.Interface, prefix string, rate, seconds int, mk func(string) *corev1.Pod) []time.Duration {
	n := rate * seconds
	took := make([]time.Duration, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := range n {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, err := cs.CoreV1().Pods(teamNS).Create(context.Background(), mk(fmt.Sprintf("%s-%d", prefix, i)), metav1.CreateOptions{})
			took[i] = time.Since(start)
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("create: %v", err)
	}
	slices.Sort(took)
	return took
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// quantile is the upper bound of the first bucket holding the q-th observation: the histogram says
// no more than that.
func quantile(h *dto.Histogram, q float64) float64 {
	want := uint64(math.Ceil(q * float64(h.GetSampleCount())))
	for _, bk := range h.GetBucket() {
		if bk.GetCumulativeCount() >= want {
			return bk.GetUpperBound()
		}
	}
	return math.Inf(1)
}
