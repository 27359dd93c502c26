package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func rawPod(t testing.TB, p *corev1.Pod) runtime.RawExtension {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

func createRequest(t testing.TB, p *corev1.Pod) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "1", Operation: admissionv1.Create, Namespace: "ns", Object: rawPod(t, p),
		UserInfo: authenticationv1.UserInfo{Username: "alice"},
	}}
}

func updateRequest(t testing.TB, old, p *corev1.Pod, user string) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "2", Operation: admissionv1.Update, Namespace: "ns", Object: rawPod(t, p), OldObject: rawPod(t, old),
		UserInfo: authenticationv1.UserInfo{Username: user},
	}}
}

// applied applies the response's patch to the request's pod, as the apiserver would.
func applied(t *testing.T, req admission.Request, resp admission.Response) *corev1.Pod {
	t.Helper()
	raw := req.Object.Raw
	if len(resp.Patches) > 0 {
		ops, err := json.Marshal(resp.Patches)
		if err != nil {
			t.Fatal(err)
		}
		patch, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			t.Fatal(err)
		}
		if raw, err = patch.Apply(raw); err != nil {
			t.Fatalf("applying %s: %v", ops, err)
		}
	}
	p := &corev1.Pod{}
	if err := json.Unmarshal(raw, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHandler(t *testing.T) {
	tests := []struct {
		name         string
		req          func(t *testing.T) admission.Request
		wantAllowed  bool
		wantPod      *corev1.Pod // the pod after the patch, for allowed CREATEs
		wantMessage  string      // substring of the refusal
		wantWarnings []string
		wantOutcome  Outcome
		wantReason   Reason
	}{{
		name:        "a GPU pod is patched to Cardinal's scheduler",
		req:         func(t *testing.T) admission.Request { return createRequest(t, oneGPU()) },
		wantAllowed: true, wantPod: oneGPU(scheduler("cardinal-scheduler")), wantOutcome: OutcomeMutated,
	}, {
		name: "a card count is added with a warning",
		req: func(t *testing.T) admission.Request {
			return createRequest(t, newPod(containers(ctr("main", "nvidia.com/gpumem", "2048"))))
		},
		wantAllowed: true,
		wantPod:     newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/gpumem", "2048", "nvidia.com/gpu", "1"))),
		wantWarnings: []string{
			`container "main" asks for a share of a card without nvidia.com/gpu: Cardinal added nvidia.com/gpu: 1 (one card)`,
		},
		wantOutcome: OutcomeMutated,
	}, {
		name:        "a pod already naming Cardinal is allowed without a patch",
		req:         func(t *testing.T) admission.Request { return createRequest(t, oneGPU(scheduler("cardinal-scheduler"))) },
		wantAllowed: true, wantPod: oneGPU(scheduler("cardinal-scheduler")), wantOutcome: OutcomeAllowed,
	}, {
		name: "a selector no card matches: allowed, patched, warned",
		req: func(t *testing.T) admission.Request {
			return createRequest(t, oneGPU(annotated("nvidia.com/use-gputype", "H100")))
		},
		wantAllowed: true, wantPod: oneGPU(scheduler("cardinal-scheduler"), annotated("nvidia.com/use-gputype", "H100")),
		wantWarnings: []string{
			"no card Cardinal knows matches use-gputype=h100 (known: 8× NVIDIA A100-SXM4-80GB, 3× Tesla T4); the pod stays Pending until such a card joins",
		},
		wantOutcome: OutcomeMutated,
	}, {
		name:        "a nodeName pod is refused",
		req:         func(t *testing.T) admission.Request { return createRequest(t, oneGPU(nodeName("n1"))) },
		wantMessage: `spec.nodeName: "n1" is set, which would bypass card selection`,
		wantOutcome: OutcomeDenied, wantReason: ReasonNodeName,
	}, {
		name: "an internal annotation added by an ordinary user is refused",
		req: func(t *testing.T) admission.Request {
			return updateRequest(t, oneGPU(), oneGPU(annotated("cardinal.io/gpu-allocated", "{}")), "alice")
		},
		wantMessage: `cardinal.io/gpu-allocated is written only by Cardinal (its scheduler extender and device plugin); "alice" may not add it`,
		wantOutcome: OutcomeDenied, wantReason: ReasonInternalAnnotation,
	}, {
		name: "the extender's assignment is allowed",
		req: func(t *testing.T) admission.Request {
			return updateRequest(t, oneGPU(), oneGPU(annotated("cardinal.io/gpu-assignment", "{}")), "system:serviceaccount:cardinal-system:extender")
		},
		wantAllowed: true, wantOutcome: OutcomeAllowed,
	}, {
		name: "a body that is not a pod is an error, not a decision",
		req: func(t *testing.T) admission.Request {
			r := createRequest(t, oneGPU())
			r.Object.Raw = []byte(`{"spec":{"containers":"no"}}`)
			return r
		},
		wantOutcome: OutcomeError,
	}, {
		name: "DELETE is allowed",
		req: func(t *testing.T) admission.Request {
			r := createRequest(t, oneGPU())
			r.Operation = admissionv1.Delete
			return r
		},
		wantAllowed: true, wantOutcome: OutcomeAllowed,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			h := NewHandler(testRules(), StaticCards{testCards()}, m)
			req := tt.req(t)
			resp := h.Handle(context.Background(), req)
			if resp.Allowed != tt.wantAllowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", resp.Allowed, tt.wantAllowed, resp.Result)
			}
			if tt.wantMessage != "" && (resp.Result == nil || !strings.Contains(resp.Result.Message, tt.wantMessage)) {
				t.Errorf("result = %+v, want a message containing %q", resp.Result, tt.wantMessage)
			}
			if tt.wantPod != nil {
				if diff := cmp.Diff(tt.wantPod, applied(t, req, resp)); diff != "" {
					t.Errorf("pod after the patch (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tt.wantWarnings, resp.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			var counted, observed dto.Metric
			if err := m.decisions.WithLabelValues(string(req.Operation), string(tt.wantOutcome), string(tt.wantReason)).Write(&counted); err != nil {
				t.Fatal(err)
			}
			if got := counted.GetCounter().GetValue(); got != 1 {
				t.Errorf("decisions{%s,%s,%q} = %v, want 1", req.Operation, tt.wantOutcome, tt.wantReason, got)
			}
			if err := m.latency.WithLabelValues(string(req.Operation)).(prometheus.Metric).Write(&observed); err != nil {
				t.Fatal(err)
			}
			if got := observed.GetHistogram().GetSampleCount(); got != 1 {
				t.Errorf("latency samples = %d, want 1", got)
			}
		})
	}
}

// TestPatchTouchesOnlyWhatChanged: fields the Go type would render differently (here an empty
// annotations map, dropped by omitempty) must not be removed by the patch.
func TestPatchTouchesOnlyWhatChanged(t *testing.T) {
	raw := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","annotations":{},"labels":{"a":"b"}},` +
		`"spec":{"schedulerName":"default-scheduler","containers":[{"name":"main","image":"busybox","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`)
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}}
	resp := NewHandler(testRules(), StaticCards{}, nil).Handle(context.Background(), req)
	ops, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"op":"replace","path":"/spec/schedulerName","value":"cardinal-scheduler"}]`
	if diff := cmp.Diff(want, string(ops)); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
}

// FuzzHandle feeds arbitrary bytes as the pods of CREATE and UPDATE requests: the handler decides or
// errors, and never panics.
func FuzzHandle(f *testing.F) {
	for _, p := range []*corev1.Pod{
		oneGPU(),
		newPod(containers(ctr("main", "nvidia.com/gpumem", "2048"))),
		oneGPU(annotated("nvidia.com/use-gputype", "A100,", "cardinal.io/gpu-assignment", "{}")),
		newPod(initContainers(ctr("i", "nvidia.com/gpucores", "150")), containers(ctr("main"))),
	} {
		b, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, b)
	}
	f.Add([]byte(`{}`), []byte(`null`))
	h := NewHandler(testRules(), StaticCards{testCards()}, nil)
	f.Fuzz(func(t *testing.T, obj, old []byte) {
		for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update} {
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "1", Operation: op, Object: runtime.RawExtension{Raw: obj}, OldObject: runtime.RawExtension{Raw: old},
			}}
			resp := h.Handle(context.Background(), req)
			if !resp.Allowed && resp.Result == nil {
				t.Fatalf("%s: refused without a reason", op)
			}
		}
	})
}
