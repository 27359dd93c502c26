package webhook

import (
	"context"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// WorkloadsPath is where the webhook server serves the validation of workloads (the pod templates
// of Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs and CronJobs).
const WorkloadsPath = "/validate-workloads"

// WorkloadHandler refuses a workload whose pod template the pod rules would refuse, when it is
// created or its template changes, so the author hears of it at once and not from the events of a
// controller that cannot create pods. The pods themselves are still checked when they are created.
type WorkloadHandler struct {
	rules   *Rules
	cards   CardSource
	metrics *Metrics
	decoder admission.Decoder
}

var _ admission.Handler = (*WorkloadHandler)(nil)

// NewWorkloadHandler builds a WorkloadHandler. metrics may be nil.
func NewWorkloadHandler(rules *Rules, cards CardSource, metrics *Metrics) *WorkloadHandler {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme} {
		// Registering built-in types only fails on a programming error.
		if err := add(scheme); err != nil {
			panic(fmt.Sprintf("registering built-in types: %v", err))
		}
	}
	return &WorkloadHandler{rules: rules, cards: cards, metrics: metrics, decoder: admission.NewDecoder(scheme)}
}

// Webhook wraps the handler in controller-runtime's admission.Webhook.
func (h *WorkloadHandler) Webhook(log logr.Logger) *admission.Webhook {
	return newWebhook(h, log, func(req *admission.Request) logr.Logger {
		return log.WithValues("workload", req.Kind.Kind+" "+req.Namespace+"/"+req.Name)
	})
}

// workloadVerdicts are the workload handler's log messages.
var workloadVerdicts = verdictMessages{refused: "Refused a workload", failed: "Could not decide on a workload", admitted: "Admitted a workload"}

// Handle decides one admission request.
func (h *WorkloadHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	return decideAndLog(ctx, req, h.metrics, workloadVerdicts, h.handle)
}

func (h *WorkloadHandler) handle(req admission.Request) (admission.Response, Outcome, Reason) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed(""), OutcomeAllowed, ""
	}
	path, tmpl, err := h.template(req.Kind, req.Object)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err), OutcomeError, ""
	}
	if req.Operation == admissionv1.Update {
		_, old, err := h.template(req.Kind, req.OldObject)
		if err != nil {
			return admission.Errored(http.StatusBadRequest, fmt.Errorf("old object: %w", err)), OutcomeError, ""
		}
		if equality.Semantic.DeepEqual(old, tmpl) {
			return admission.Allowed(""), OutcomeAllowed, ""
		}
	}
	warnings, err := h.rules.ValidateTemplate(req.Namespace, tmpl, h.cards.Cards())
	for i := range warnings {
		warnings[i] = path + ": " + warnings[i]
	}
	if err != nil {
		d, ok := IsDenial(err)
		if !ok {
			return admission.Errored(http.StatusInternalServerError, err), OutcomeError, ""
		}
		details := make([]string, len(d.Details))
		for i, m := range d.Details {
			details[i] = path + ": " + m
		}
		return admission.Denied((&Denial{Reason: d.Reason, Details: details}).Error()), OutcomeDenied, d.Reason
	}
	return admission.Allowed("").WithWarnings(warnings...), OutcomeAllowed, ""
}

// template decodes a workload and returns its pod template and the template's field path.
func (h *WorkloadHandler) template(kind metav1.GroupVersionKind, raw runtime.RawExtension) (string, *corev1.PodTemplateSpec, error) {
	decode := func(into runtime.Object) error {
		if err := h.decoder.DecodeRaw(raw, into); err != nil {
			return fmt.Errorf("decoding the %s: %w", kind.Kind, err)
		}
		return nil
	}
	const spec = "spec.template"
	switch kind.Group + "/" + kind.Kind {
	case "apps/Deployment":
		o := &appsv1.Deployment{}
		return spec, &o.Spec.Template, decode(o)
	case "apps/StatefulSet":
		o := &appsv1.StatefulSet{}
		return spec, &o.Spec.Template, decode(o)
	case "apps/DaemonSet":
		o := &appsv1.DaemonSet{}
		return spec, &o.Spec.Template, decode(o)
	case "apps/ReplicaSet":
		o := &appsv1.ReplicaSet{}
		return spec, &o.Spec.Template, decode(o)
	case "batch/Job":
		o := &batchv1.Job{}
		return spec, &o.Spec.Template, decode(o)
	case "batch/CronJob":
		o := &batchv1.CronJob{}
		return "spec.jobTemplate.spec.template", &o.Spec.JobTemplate.Spec.Template, decode(o)
	}
	return "", nil, fmt.Errorf("kind %s/%s is not a workload the webhook knows", kind.Group, kind.Kind)
}

// ValidateTemplate applies the pod rules to the pods a workload in namespace ns will create from
// tmpl: they are defaulted as the pod webhook will default them, then validated as a CREATE by a
// controller (no kubelet: a template marked as a mirror pod is refused).
func (r *Rules) ValidateTemplate(ns string, tmpl *corev1.PodTemplateSpec, cards *Cards) (warnings []string, err error) {
	pod := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
	pod.Namespace = ns
	r.Default(pod)
	return r.ValidateCreate(pod, cards, authenticationv1.UserInfo{})
}
