package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

const extenderUser = "system:serviceaccount:cardinal-system:extender"

func newBinding(name string, ann, labels map[string]string) *corev1.Binding {
	return &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: ann, Labels: labels},
		Target: corev1.ObjectReference{Kind: "Node", Name: "gpu-1"}}
}

func TestValidateBinding(t *testing.T) {
	cardinalPod := oneGPU(scheduler("cardinal-scheduler"))
	otherPod := oneGPU(scheduler("volcano"))
	for _, tc := range []struct {
		name    string
		binding *corev1.Binding
		pod     *corev1.Pod
		user    string
		want    *Denial
	}{{
		name:    "Cardinal's extender binds its pod with the assignment",
		binding: newBinding("p", map[string]string{"cardinal.io/gpu-assignment": "{}"}, nil),
		pod:     cardinalPod, user: extenderUser,
	}, {
		name:    "another scheduler binds its own pod",
		binding: newBinding("p", map[string]string{"example.com/note": "x"}, nil),
		pod:     otherPod, user: "system:serviceaccount:volcano:scheduler",
	}, {
		name:    "a forged assignment on another scheduler's Binding",
		binding: newBinding("p", map[string]string{"cardinal.io/gpu-assignment": "{}", "cardinal.io/gpu-policy": "spread"}, nil),
		pod:     otherPod, user: "alice",
		want: &Denial{Reason: ReasonInternalAnnotation, Details: []string{
			`metadata.annotations: cardinal.io/gpu-assignment: the metadata of a Binding is copied onto its pod, and cardinal.io/ keys are written only by Cardinal; "alice" may not bind with it`,
			`metadata.annotations: cardinal.io/gpu-policy: the metadata of a Binding is copied onto its pod, and cardinal.io/ keys are written only by Cardinal; "alice" may not bind with it`,
		}},
	}, {
		name:    "a cardinal.io/ label",
		binding: newBinding("p", nil, map[string]string{"cardinal.io/x": "y"}),
		pod:     otherPod, user: "alice",
		want: &Denial{Reason: ReasonInternalAnnotation, Details: []string{
			`metadata.labels: cardinal.io/x: the metadata of a Binding is copied onto its pod, and cardinal.io/ keys are written only by Cardinal; "alice" may not bind with it`,
		}},
	}, {
		name:    "a Binding without annotations of a pod that names Cardinal's scheduler",
		binding: newBinding("p", nil, nil),
		pod:     cardinalPod, user: "alice",
		want: &Denial{Reason: ReasonForeignBinding, Details: []string{
			`pod ns/p names scheduler "cardinal-scheduler": only Cardinal binds it, after choosing its cards and writing cardinal.io/gpu-assignment; "alice" may not bind it`,
		}},
	}, {
		name:    "a CPU-only pod routed through Cardinal is bound by kube-scheduler's own binder",
		binding: newBinding("p", nil, nil),
		pod:     newPod(scheduler("cardinal-scheduler"), containers(ctr("web", "cardinal.io/host", "0"))), user: "system:admin",
	}, {
		name:    "a pod that does not exist is the apiserver's to refuse",
		binding: newBinding("p", nil, nil),
		user:    "alice",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := testRules().ValidateBinding(tc.binding, tc.pod, tc.user)
			var got *Denial
			if err != nil {
				d, ok := IsDenial(err)
				if !ok {
					t.Fatalf("not a denial: %v", err)
				}
				got = d
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("denial (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInternalKeysHaveKeyPrefix: the Binding policy refuses keys by KeyPrefix, so it covers every
// internal annotation only if each starts with it.
func TestInternalKeysHaveKeyPrefix(t *testing.T) {
	for _, k := range annotations.InternalKeys {
		if !strings.HasPrefix(k, KeyPrefix) {
			t.Errorf("internal annotation %s does not start with %s: a forged Binding could carry it", k, KeyPrefix)
		}
	}
}

func bindingRequest(t *testing.T, resource, sub, name string, b *corev1.Binding, user string) admission.Request {
	t.Helper()
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "3", Operation: admissionv1.Create, Namespace: "ns", Name: name,
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: resource}, SubResource: sub,
		Object: runtime.RawExtension{Raw: raw}, UserInfo: authenticationv1.UserInfo{Username: user},
	}}
}

// TestBindingHandlerReadsThePod: the handler finds the pod a Binding names (through pods/binding, and
// through the legacy bindings resource) and refuses binding one that names Cardinal's scheduler.
func TestBindingHandlerReadsThePod(t *testing.T) {
	mine := oneGPU(scheduler("cardinal-scheduler"))
	mine.Name, mine.Namespace = "mine", "ns"
	theirs := oneGPU(scheduler("volcano"))
	theirs.Name, theirs.Namespace = "theirs", "ns"
	client := fake.NewClientset(mine, theirs)
	h := NewBindingHandler(testRules(), client.CoreV1(), nil)
	for _, tc := range []struct {
		name    string
		req     admission.Request
		allowed bool
	}{
		{"pods/binding of Cardinal's pod by alice", bindingRequest(t, "pods", "binding", "mine", newBinding("mine", nil, nil), "alice"), false},
		{"legacy bindings of Cardinal's pod by alice", bindingRequest(t, "bindings", "", "", newBinding("mine", nil, nil), "alice"), false},
		{"pods/binding of Cardinal's pod by its extender", bindingRequest(t, "pods", "binding", "mine", newBinding("mine", nil, nil), extenderUser), true},
		{"pods/binding of volcano's pod by alice", bindingRequest(t, "pods", "binding", "theirs", newBinding("theirs", nil, nil), "alice"), true},
		{"pods/binding of a pod that is gone", bindingRequest(t, "pods", "binding", "gone", newBinding("gone", nil, nil), "alice"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.Handle(context.Background(), tc.req)
			if resp.Allowed != tc.allowed {
				t.Errorf("allowed = %v, want %v (%v)", resp.Allowed, tc.allowed, resp.Result)
			}
		})
	}
}
