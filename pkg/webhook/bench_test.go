package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// BenchmarkAdmission is S4 of BENCHMARKS.md at the handler: one AdmissionReview of a GPU pod CREATE
// over HTTP (body decoding, pod decoding, the rules, the JSON patch, the response), against a view
// of 1000 nodes × 8 cards. It reports p50 and p99 per request in microseconds.
func BenchmarkAdmission(b *testing.B) {
	nodes := map[string]annotations.Inventory{}
	for i := range 1000 {
		model := "NVIDIA A100-SXM4-80GB"
		if i%4 == 0 {
			model = "NVIDIA H100 80GB HBM3"
		}
		name := fmt.Sprintf("node-%04d", i)
		gpus := make([]annotations.GPU, 8)
		for k := range gpus {
			gpus[k] = annotations.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, k), Index: k, Model: model, MemoryMiB: 81920, Healthy: true, Shares: 1}
		}
		nodes[name] = annotations.Inventory{V: 1, GPUs: gpus}
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	hook := NewHandler(testRules(), StaticCards{NewCards(nodes)}, m).Webhook(logr.Discard())

	for _, bc := range []struct {
		name string
		pod  func() []byte
	}{
		{"gpu-pod", func() []byte { return rawPod(b, oneGPU()).Raw }},
		{"shared-with-selectors", func() []byte {
			return rawPod(b, newPod(annotated(annotations.UseGPUType, "h100,a100", annotations.NoUseGPUUUID, "GPU-node-0000-1", annotations.GPUPolicy, "spread"),
				initContainers(ctr("init", "cpu", "1")),
				containers(ctr("main", "nvidia.com/gpumem", "20000", "nvidia.com/gpucores", "50"), ctr("sidecar", "cpu", "100m")))).Raw
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			review := admissionv1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request:  &admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: "ns"},
			}
			review.Request.Object.Raw = bc.pod()
			body, err := json.Marshal(review)
			if err != nil {
				b.Fatal(err)
			}
			took := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				hook.ServeHTTP(w, req)
				took = append(took, time.Since(start))
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
		})
	}
}
