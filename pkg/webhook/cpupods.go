package webhook

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// Routing CPU-only pods through Cardinal (opt-in: ConfigurationOptions.CPUOnlyPods, the chart's
// webhook.cpuOnlyPods). kube-scheduler's default scoring sends a pod without GPUs to the emptiest
// node, often an untouched GPU node, where it takes the CPU and memory those cards need. A pod the
// operator routes gets Cardinal's scheduler and the marker annotations.ResourceHostRoute: 0, so that
// kube-scheduler asks Cardinal's extender, whose policy weighs what the pod leaves of each node's
// cards. The route is a webhook of its own (cpu-pods.webhook.cardinal.io), so the pod webhook's
// matchConditions stay as they are, and it fails open (failurePolicy Ignore): while the webhook is
// down a CPU-only pod is admitted unrouted and the cluster's default scheduler places it, as before
// the opt-in.

// CPUPodsPath is where the webhook server serves the routing of CPU-only pods.
const CPUPodsPath = "/route-cpu-pods"

// CPUPodsWebhookName is the name of the routing webhook inside the MutatingWebhookConfiguration.
const CPUPodsWebhookName = "cpu-pods.webhook.cardinal.io"

// ReasonHostMarker: a pod names annotations.ResourceHostRoute where Cardinal would not have put it (a
// pod that asks for GPUs), or with a value other than 0.
const ReasonHostMarker Reason = "HostMarker"

// CPUOnlyPodsOptions choose the CPU-only pods routed through Cardinal: those of namespaces
// NamespaceSelector selects (Cardinal's own namespace never) whose labels ObjectSelector selects. A nil
// selector selects everything.
type CPUOnlyPodsOptions struct {
	NamespaceSelector *metav1.LabelSelector
	ObjectSelector    *metav1.LabelSelector
}

// RouteCPUOnly mutates a CPU-only pod being created in a routed namespace: it names Cardinal's
// scheduler and its first app container gets annotations.ResourceHostRoute: 0. It reports whether it
// changed the pod. GPU pods (the pod webhook's), pods naming another scheduler, mirror pods, pods
// created with spec.nodeName and DaemonSet pods are left alone (as cpuPodsCondition sends none).
func (r *Rules) RouteCPUOnly(pod *corev1.Pod) (changed bool) {
	if r.IsGPUPod(pod) || !r.placedByCardinal(pod) || pod.Spec.NodeName != "" || len(pod.Spec.Containers) == 0 || daemonSetPod(pod) {
		return false
	}
	if pod.Spec.SchedulerName != r.SchedulerName {
		pod.Spec.SchedulerName = r.SchedulerName
		changed = true
	}
	if annotations.HostRouted(pod) {
		return changed
	}
	c := &pod.Spec.Containers[0]
	q := resource.MustParse("0")
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	c.Resources.Limits[annotations.ResourceHostRoute] = q
	if c.Resources.Requests != nil {
		c.Resources.Requests[annotations.ResourceHostRoute] = q
	}
	return true
}

// daemonSetPod reports whether a DaemonSet owns the pod: its node is chosen already.
func daemonSetPod(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "DaemonSet" })
}

// hostMarkerRefusals refuses the marker where Cardinal would not have put it: on a GPU pod Cardinal
// places (the marker would send it through the extender entry that is skipped when the extender is
// down), and at any value but 0 (no node advertises it: the pod could never run).
func (r *Rules) hostMarkerRefusals(pod *corev1.Pod) []error {
	var errs []error
	gpu := r.IsGPUPod(pod) && r.placedByCardinal(pod)
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			c := &cs[i]
			if !hasResource(c, annotations.ResourceHostRoute) {
				continue
			}
			if gpu {
				errs = append(errs, &annotations.Error{Container: c.Name, Key: string(annotations.ResourceHostRoute),
					Reason: fmt.Sprintf("is added only by Cardinal's webhook, to pods that ask for no GPU; a pod requesting %s goes to %s without it: remove it", r.requested(pod), r.SchedulerName)})
				continue
			}
			for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
				if q, ok := l[annotations.ResourceHostRoute]; ok && !q.IsZero() {
					errs = append(errs, &annotations.Error{Container: c.Name, Key: string(annotations.ResourceHostRoute),
						Reason: fmt.Sprintf("%s is not 0: it is a marker no node advertises, so the pod could never run; remove it (Cardinal's webhook adds it at 0)", q.String())})
					break
				}
			}
		}
	}
	return errs
}

// CPUPodsHandler serves CPUPodsPath: RouteCPUOnly, and the refusal of a marker at a value other than
// 0 (hostMarkerRefusals).
type CPUPodsHandler struct {
	rules   *Rules
	metrics *Metrics
	decoder admission.Decoder
}

var _ admission.Handler = (*CPUPodsHandler)(nil)

// NewCPUPodsHandler builds a CPUPodsHandler. metrics may be nil.
func NewCPUPodsHandler(rules *Rules, metrics *Metrics) *CPUPodsHandler {
	return &CPUPodsHandler{rules: rules, metrics: metrics, decoder: coreDecoder()}
}

// Webhook wraps the handler in controller-runtime's admission.Webhook.
func (h *CPUPodsHandler) Webhook(log logr.Logger) *admission.Webhook {
	return newWebhook(h, log, func(req *admission.Request) logr.Logger {
		return log.WithValues(logging.KeyPod, req.Namespace+"/"+req.Name)
	})
}

// cpuPodVerdicts are the routing handler's log messages.
var cpuPodVerdicts = verdictMessages{refused: "Refused a CPU-only pod", failed: "Could not route a CPU-only pod", admitted: "Admitted a CPU-only pod"}

// Handle decides one admission request.
func (h *CPUPodsHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	return decideAndLog(ctx, req, h.metrics, cpuPodVerdicts, h.handle)
}

func (h *CPUPodsHandler) handle(req admission.Request) (admission.Response, Outcome, Reason) {
	if req.Operation != admissionv1.Create {
		return admission.Allowed(""), OutcomeAllowed, ""
	}
	pod := &corev1.Pod{}
	if err := h.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the pod: %w", err)), OutcomeError, ""
	}
	if errs := h.rules.hostMarkerRefusals(pod); len(errs) > 0 {
		var ds denials
		for _, err := range errs {
			ds.add(ReasonHostMarker, err)
		}
		return admission.Denied(ds.d.Error()), OutcomeDenied, ReasonHostMarker
	}
	original := pod.DeepCopy()
	if !h.rules.RouteCPUOnly(pod) {
		return admission.Allowed(""), OutcomeAllowed, ""
	}
	resp, err := podPatch(original, pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), OutcomeError, ""
	}
	return resp, OutcomeMutated, ""
}

// cpuPodsWebhook is the MutatingWebhookConfiguration's routing webhook: CREATE of pods in the
// namespaces and with the labels o.CPUOnlyPods selects (never Cardinal's namespace), whose
// matchCondition (cpuPodsCondition) sends only a pod that asks for no GPU, names no scheduler or the
// default one, names no node, is no mirror pod and belongs to no DaemonSet; failurePolicy Ignore.
func (o *ConfigurationOptions) cpuPodsWebhook() admissionregistrationv1.MutatingWebhook {
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	reinvoke := admissionregistrationv1.IfNeededReinvocationPolicy
	equivalent := admissionregistrationv1.Equivalent
	scope := admissionregistrationv1.NamespacedScope
	timeout := o.TimeoutSeconds
	ns := o.namespaceSelector()
	if sel := o.CPUOnlyPods.NamespaceSelector; sel != nil {
		ns.MatchLabels = sel.MatchLabels
		ns.MatchExpressions = append(ns.MatchExpressions, sel.MatchExpressions...)
	}
	objects := o.CPUOnlyPods.ObjectSelector
	if objects == nil {
		objects = &metav1.LabelSelector{}
	}
	return admissionregistrationv1.MutatingWebhook{
		Name:         CPUPodsWebhookName,
		ClientConfig: o.clientConfig(CPUPodsPath),
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: &scope,
			},
		}},
		FailurePolicy:     &ignore,
		MatchPolicy:       &equivalent,
		NamespaceSelector: ns,
		ObjectSelector:    objects,
		MatchConditions: []admissionregistrationv1.MatchCondition{{
			Name:       "cpu-only-pod-for-the-default-scheduler",
			Expression: cpuPodsCondition(o.Resources),
		}},
		SideEffects:             &none,
		TimeoutSeconds:          &timeout,
		AdmissionReviewVersions: []string{"v1"},
		ReinvocationPolicy:      &reinvoke,
	}
}

// cpuPodsCondition: the pod asks for no managed or MIG resource (celGPU), names no scheduler or
// the default one, names no node, is no mirror pod and no DaemonSet's (its node is chosen already;
// routing it would only make a node agent wait on Cardinal's scheduler).
func cpuPodsCondition(names annotations.ResourceNames) string {
	return fmt.Sprintf("!(%s) && "+
		"(!has(object.spec.schedulerName) || object.spec.schedulerName == '%s') && "+
		"(!has(object.spec.nodeName) || object.spec.nodeName == '') && "+
		"!(has(object.metadata.annotations) && '%s' in object.metadata.annotations) && "+
		"!(has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, r.kind == 'DaemonSet'))",
		celGPU(names, "object"), corev1.DefaultSchedulerName, corev1.MirrorPodAnnotationKey)
}
