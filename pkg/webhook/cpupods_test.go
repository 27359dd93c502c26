package webhook

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func TestRouteCPUOnly(t *testing.T) {
	withRequests := func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests = res("cpu", "2") }
	mirror := annotated(corev1.MirrorPodAnnotationKey, "x")
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want *corev1.Pod // nil: unchanged
	}{{
		name: "a CPU-only pod of the default scheduler goes to Cardinal with the marker on its first container",
		pod:  newPod(containers(ctr("web"), ctr("log"))),
		want: newPod(scheduler("cardinal-scheduler"), containers(ctr("web", "cardinal.io/host", "0"), ctr("log"))),
	}, {
		name: "naming no scheduler is the default one",
		pod:  newPod(scheduler(""), containers(ctr("web"))),
		want: newPod(scheduler("cardinal-scheduler"), containers(ctr("web", "cardinal.io/host", "0"))),
	}, {
		name: "requests, when given, carry the marker too (extended resources: requests equal limits)",
		pod:  newPod(containers(ctr("web")), withRequests),
		want: func() *corev1.Pod {
			p := newPod(scheduler("cardinal-scheduler"), containers(ctr("web", "cardinal.io/host", "0")))
			p.Spec.Containers[0].Resources.Requests = res("cpu", "2", "cardinal.io/host", "0")
			return p
		}(),
	}, {
		name: "init containers are left alone: the first app container carries it",
		pod:  newPod(initContainers(ctr("setup")), containers(ctr("web"))),
		want: newPod(scheduler("cardinal-scheduler"), initContainers(ctr("setup")), containers(ctr("web", "cardinal.io/host", "0"))),
	}, {
		name: "routed already: nothing to do (reinvocation)",
		pod:  newPod(scheduler("cardinal-scheduler"), containers(ctr("web", "cardinal.io/host", "0"))),
	}, {
		name: "a GPU pod is the pod webhook's",
		pod:  oneGPU(),
	}, {
		name: "a MIG pod is the pod webhook's",
		pod:  newPod(containers(ctr("main", "nvidia.com/mig-1g.10gb", "1"))),
	}, {
		name: "another scheduler's pod",
		pod:  newPod(scheduler("volcano"), containers(ctr("web"))),
	}, {
		name: "a pod created on its node",
		pod:  newPod(nodeName("cpu-1"), containers(ctr("web"))),
	}, {
		name: "a DaemonSet's pod",
		pod: newPod(containers(ctr("agent")), func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "1"}}
		}),
	}, {
		name: "a mirror pod",
		pod:  newPod(mirror, containers(ctr("web"))),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.pod.DeepCopy()
			changed := testRules().RouteCPUOnly(got)
			want := tc.want
			if want == nil {
				want = tc.pod
			}
			if changed != (tc.want != nil) {
				t.Errorf("changed = %v, want %v", changed, tc.want != nil)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("pod (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHostMarkerRefused: the marker is refused on a GPU pod Cardinal places (through the pod webhook)
// and at a value other than 0 (through either webhook), naming the container and the resource.
func TestHostMarkerRefused(t *testing.T) {
	gpu := newPod(containers(ctr("train", "nvidia.com/gpu", "1", "cardinal.io/host", "0")))
	_, err := testRules().ValidateCreate(gpu, nil, tenant)
	want := &Denial{Reason: ReasonHostMarker, Details: []string{
		`container "train": cardinal.io/host: is added only by Cardinal's webhook, to pods that ask for no GPU; a pod requesting nvidia.com/gpu goes to cardinal-scheduler without it: remove it`}}
	if d, _ := IsDenial(err); !cmp.Equal(want, d) {
		t.Errorf("GPU pod with the marker: %v, want %v", err, want)
	}
	// Another scheduler's GPU pod: the marker means nothing there.
	if _, err := testRules().ValidateCreate(newPod(scheduler("volcano"), containers(ctr("train", "nvidia.com/gpu", "1", "cardinal.io/host", "0"))), nil, tenant); err != nil {
		t.Errorf("another scheduler's GPU pod with the marker: %v", err)
	}

	h := NewCPUPodsHandler(testRules(), nil)
	resp := h.Handle(context.Background(), createRequest(t, newPod(containers(ctr("web", "cardinal.io/host", "2")))))
	if resp.Allowed || resp.Result == nil {
		t.Fatalf("a marker at 2 was admitted: %+v", resp)
	}
	if got, want := resp.Result.Message, `container "web": cardinal.io/host: 2 is not 0: it is a marker no node advertises, so the pod could never run; remove it (Cardinal's webhook adds it at 0)`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

// TestCPUPodsHandlerPatches: the handler's patch, applied as the apiserver applies it, routes the pod.
func TestCPUPodsHandlerPatches(t *testing.T) {
	h := NewCPUPodsHandler(testRules(), nil)
	pod := newPod(containers(ctr("web")))
	req := createRequest(t, pod)
	resp := h.Handle(context.Background(), req)
	if !resp.Allowed {
		t.Fatalf("refused: %v", resp.Result)
	}
	want := newPod(scheduler("cardinal-scheduler"), containers(ctr("web", "cardinal.io/host", "0")))
	if diff := cmp.Diff(want, applied(t, req, resp)); diff != "" {
		t.Errorf("routed pod (-want +got):\n%s", diff)
	}
	// A GPU pod sent here by mistake is not touched.
	gpuReq := createRequest(t, oneGPU())
	if resp := h.Handle(context.Background(), gpuReq); !resp.Allowed || len(resp.Patches) > 0 {
		t.Errorf("GPU pod: allowed %v, patches %v", resp.Allowed, resp.Patches)
	}
}

func TestCPUPodsWebhookShape(t *testing.T) {
	o := goldenOptions()
	o.CPUOnlyPods = &CPUOnlyPodsOptions{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"cardinal.io/cpu-pods": "route"}},
	}
	cfg, err := MutatingWebhookConfiguration(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Webhooks) != 2 {
		t.Fatalf("%d webhooks, want the pod webhook and the route", len(cfg.Webhooks))
	}
	w := cfg.Webhooks[1]
	if w.Name != CPUPodsWebhookName || *w.FailurePolicy != "Ignore" || *w.ClientConfig.Service.Path != CPUPodsPath {
		t.Errorf("route webhook %s, failurePolicy %s, path %s; want %s, Ignore (an outage leaves pods to the default scheduler), %s",
			w.Name, *w.FailurePolicy, *w.ClientConfig.Service.Path, CPUPodsWebhookName, CPUPodsPath)
	}
	wantNS := &metav1.LabelSelector{MatchLabels: map[string]string{"cardinal.io/cpu-pods": "route"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"cardinal-system"}}}}
	if diff := cmp.Diff(wantNS, w.NamespaceSelector); diff != "" {
		t.Errorf("namespaceSelector (-want +got):\n%s", diff)
	}
	if len(w.Rules) != 1 || len(w.Rules[0].Operations) != 1 || w.Rules[0].Operations[0] != "CREATE" {
		t.Errorf("rules %+v, want CREATE of pods only", w.Rules)
	}
	// Without the opt-in, the configuration is the pod webhook alone.
	plain, err := MutatingWebhookConfiguration(goldenOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Webhooks) != 1 {
		t.Errorf("without CPUOnlyPods: %d webhooks, want 1", len(plain.Webhooks))
	}
}

// FuzzCPUPodsHandle feeds arbitrary bytes as the pod of a CREATE: the handler decides or errors,
// and never panics.
func FuzzCPUPodsHandle(f *testing.F) {
	for _, p := range []*corev1.Pod{
		newPod(containers(ctr("web"))),
		newPod(containers(ctr("web", "cardinal.io/host", "3"))),
		oneGPU(),
	} {
		b, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"spec":{"containers":[]}}`))
	h := NewCPUPodsHandler(testRules(), nil)
	f.Fuzz(func(t *testing.T, obj []byte) {
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "1", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: obj},
		}}
		resp := h.Handle(context.Background(), req)
		if !resp.Allowed && resp.Result == nil {
			t.Fatal("refused without a reason")
		}
	})
}
