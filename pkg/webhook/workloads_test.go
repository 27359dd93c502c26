package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// template is the pod template of a pod built with the pod builders.
func template(p *corev1.Pod) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: p.Annotations, Labels: map[string]string{"app": "a"}}, Spec: p.Spec}
}

// workloads returns one of each kind around tmpl, with the kind the apiserver names in the request.
func workloads(tmpl corev1.PodTemplateSpec) map[string]struct {
	kind metav1.GroupVersionKind
	obj  runtime.Object
} {
	apps := func(k string) metav1.GroupVersionKind {
		return metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: k}
	}
	batch := func(k string) metav1.GroupVersionKind {
		return metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: k}
	}
	type w = struct {
		kind metav1.GroupVersionKind
		obj  runtime.Object
	}
	return map[string]w{
		"Deployment":  {apps("Deployment"), &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: tmpl}}},
		"StatefulSet": {apps("StatefulSet"), &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Template: tmpl}}},
		"DaemonSet":   {apps("DaemonSet"), &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: tmpl}}},
		"ReplicaSet":  {apps("ReplicaSet"), &appsv1.ReplicaSet{Spec: appsv1.ReplicaSetSpec{Template: tmpl}}},
		"Job":         {batch("Job"), &batchv1.Job{Spec: batchv1.JobSpec{Template: tmpl}}},
		"CronJob": {batch("CronJob"), &batchv1.CronJob{Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}}}}},
	}
}

func raw(t *testing.T, o runtime.Object) runtime.RawExtension {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

func TestWorkloadHandler(t *testing.T) {
	tests := []struct {
		name        string
		pod         *corev1.Pod
		wantMessage string // after the template's path and ": "; empty: admitted
		wantReason  Reason
	}{{
		name:        "a bad selector",
		pod:         oneGPU(annotated("nvidia.com/use-gputype", "A100,")),
		wantMessage: `nvidia.com/use-gputype: empty entry at position 2 in "A100,"`, wantReason: ReasonInvalidSelector,
	}, {
		name:        "a forged internal annotation",
		pod:         oneGPU(annotated("cardinal.io/gpu-assignment", "{}")),
		wantMessage: `metadata.annotations: cardinal.io/gpu-assignment is written only by Cardinal (its scheduler extender and device plugin); remove it from the pod`,
		wantReason:  ReasonInternalAnnotation,
	}, {
		name:        "a refused variable, without GPUs",
		pod:         newPod(containers(withEnv(ctr("main"), "CUDA_DEVICE_SM_LIMIT"))),
		wantMessage: `container "main": env CUDA_DEVICE_SM_LIMIT: it is HAMi-core's compute limit, which Cardinal's device plugin sets from the pod's requests; remove it`,
		wantReason:  ReasonDeviceEnv,
	}, {
		name: "a good GPU template",
		pod:  oneGPU(annotated("nvidia.com/use-gputype", "A100")),
	}, {
		// The pods will be defaulted to one card: the template is judged as they will be.
		name: "a share without a card count",
		pod:  newPod(containers(ctr("main", "nvidia.com/gpumem", "1024"))),
	}}
	h := NewWorkloadHandler(testRules(), StaticCards{}, nil)
	for _, tt := range tests {
		for kind, w := range workloads(template(tt.pod)) {
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
					UID: "1", Kind: w.kind, Operation: admissionv1.Create, Namespace: "ns", Object: raw(t, w.obj)}}
				resp := h.Handle(context.Background(), req)
				if tt.wantMessage == "" {
					if !resp.Allowed {
						t.Fatalf("refused: %s", resp.Result.Message)
					}
					return
				}
				path := "spec.template"
				if kind == "CronJob" {
					path = "spec.jobTemplate.spec.template"
				}
				if resp.Allowed {
					t.Fatal("admitted, want a refusal")
				}
				if diff := cmp.Diff(path+": "+tt.wantMessage, resp.Result.Message); diff != "" {
					t.Errorf("message (-want +got):\n%s", diff)
				}
				if got := Reason(resp.Result.Reason); resp.Result.Code != 403 || !strings.Contains(string(got), "Forbidden") {
					t.Errorf("result %+v, want 403 Forbidden", resp.Result)
				}
			})
		}
	}
}

// TestWorkloadHandlerUpdate: only a changed template is judged, so a workload admitted before the
// rules (or before the webhook) can still be scaled and relabelled.
func TestWorkloadHandlerUpdate(t *testing.T) {
	h := NewWorkloadHandler(testRules(), StaticCards{}, nil)
	bad := template(oneGPU(annotated("nvidia.com/use-gputype", "A100,")))
	old := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: bad}}
	scaled := old.DeepCopy()
	scaled.Spec.Replicas = new(int32)
	changed := old.DeepCopy()
	changed.Spec.Template.Labels["version"] = "2"
	kind := metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	for _, tc := range []struct {
		name        string
		obj         *appsv1.Deployment
		wantAllowed bool
	}{{"scaled", scaled, true}, {"template changed", changed, false}} {
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UID: "1", Kind: kind, Operation: admissionv1.Update,
			Namespace: "ns", Object: raw(t, tc.obj), OldObject: raw(t, old)}}
		if got := h.Handle(context.Background(), req).Allowed; got != tc.wantAllowed {
			t.Errorf("%s: allowed = %v, want %v", tc.name, got, tc.wantAllowed)
		}
	}
}
