package webhook

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// A Binding (POST pods/<name>/binding, or the legacy POST bindings) sets a pod's node, and the
// apiserver copies the Binding's annotations onto the pod without admitting the pod again. Two rules
// keep binding Cardinal's:
//
//   - a Binding carrying a cardinal.io/ key (annotation or label) from anyone but Cardinal's service
//     accounts is refused by a ValidatingAdmissionPolicy (BindingPolicy): in the apiserver itself, so
//     it holds whether or not the webhook runs, and Cardinal's own binds never wait on it;
//   - a Binding of a GPU pod that names Cardinal's scheduler, from anyone else, is refused by the webhook
//     (BindingHandler, bindings.webhook.cardinal.io). A policy cannot do this: it sees the Binding
//     (object) and nothing of the pod it binds (oldObject is null on a create, and params are fixed
//     objects chosen by the policy binding, not by the request). The webhook reads the pod. Its
//     matchConditions skip Cardinal's service accounts and UncheckedBinders (the cluster's default
//     scheduler, which binds only pods naming its own profiles), so an outage of the webhook blocks
//     only the binds of other schedulers (failurePolicy Fail), never Cardinal's or the default
//     scheduler's.

// KeyPrefix starts the annotation keys Cardinal defines (the nvidia.com/ selector keys aside), every
// internal one included (TestInternalKeysHaveKeyPrefix). A Binding carrying a key with it is refused
// unless it comes from Cardinal.
const KeyPrefix = "cardinal.io/"

// BindingsPath is where the webhook server serves the validation of Bindings.
const BindingsPath = "/validate-bindings"

// BindingsWebhookName is the name of the Binding webhook inside the ValidatingWebhookConfiguration.
const BindingsWebhookName = "bindings.webhook.cardinal.io"

// DefaultUncheckedBinders are the users whose Bindings the webhook is not sent: the default
// kube-scheduler's identity.
func DefaultUncheckedBinders() []string { return []string{"system:kube-scheduler"} }

// ReasonForeignBinding: someone other than Cardinal binds a pod that names Cardinal's scheduler.
const ReasonForeignBinding Reason = "ForeignBinding"

// ValidateBinding decides whether username may bind pod with binding. pod is nil when it does not
// exist (the apiserver then refuses the Binding itself). Cardinal's trusted users may bind anything.
func (r *Rules) ValidateBinding(binding *corev1.Binding, pod *corev1.Pod, username string) error {
	if slices.Contains(r.TrustedUsers, username) {
		return nil
	}
	var ds denials
	for _, field := range []struct {
		name string
		keys map[string]string
	}{{"metadata.annotations", binding.Annotations}, {"metadata.labels", binding.Labels}} {
		for _, k := range cardinalKeys(field.keys) {
			ds.add(ReasonInternalAnnotation, fmt.Errorf("%s: %s: the metadata of a Binding is copied onto its pod, and %s keys are written only by Cardinal; %q may not bind with it",
				field.name, k, KeyPrefix, username))
		}
	}
	// A pod that asks for no GPU gets no card whoever binds it: a CPU-only pod routed through
	// Cardinal (cpupods.go) is bound by kube-scheduler's own binder.
	if pod != nil && r.IsCardinalProfile(pod.Spec.SchedulerName) && r.IsGPUPod(pod) {
		ds.add(ReasonForeignBinding, fmt.Errorf("pod %s/%s names scheduler %q: only Cardinal binds it, after choosing its cards and writing %s; %q may not bind it",
			pod.Namespace, pod.Name, pod.Spec.SchedulerName, annotations.GPUAssignment, username))
	}
	return ds.err()
}

// cardinalKeys lists the keys with KeyPrefix, sorted.
func cardinalKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		if strings.HasPrefix(k, KeyPrefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// BindingHandler decides Bindings (ValidateBinding), reading the pod they bind from the apiserver.
type BindingHandler struct {
	rules   *Rules
	pods    corev1client.PodsGetter
	metrics *Metrics
	decoder admission.Decoder
}

var _ admission.Handler = (*BindingHandler)(nil)

// NewBindingHandler builds a BindingHandler. metrics may be nil.
func NewBindingHandler(rules *Rules, pods corev1client.PodsGetter, metrics *Metrics) *BindingHandler {
	return &BindingHandler{rules: rules, pods: pods, metrics: metrics, decoder: coreDecoder()}
}

// Webhook wraps the handler in controller-runtime's admission.Webhook.
func (h *BindingHandler) Webhook(log logr.Logger) *admission.Webhook {
	return newWebhook(h, log, func(req *admission.Request) logr.Logger {
		return log.WithValues(logging.KeyPod, req.Namespace+"/"+req.Name)
	})
}

// bindingVerdicts are the Binding handler's log messages.
var bindingVerdicts = verdictMessages{refused: "Refused a Binding", failed: "Could not decide on a Binding", admitted: "Admitted a Binding"}

// Handle decides one admission request.
func (h *BindingHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	return decideAndLog(ctx, req, h.metrics, bindingVerdicts, func(req admission.Request) (admission.Response, Outcome, Reason) {
		return h.handle(ctx, req)
	})
}

func (h *BindingHandler) handle(ctx context.Context, req admission.Request) (admission.Response, Outcome, Reason) {
	if req.Operation != admissionv1.Create {
		return admission.Allowed(""), OutcomeAllowed, ""
	}
	binding := &corev1.Binding{}
	if err := h.decoder.Decode(req, binding); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the Binding: %w", err)), OutcomeError, ""
	}
	// The pod's name: the request's (pods/<name>/binding), else the Binding's (legacy bindings).
	name := req.Name
	if name == "" {
		name = binding.Name
	}
	var pod *corev1.Pod
	if !slices.Contains(h.rules.TrustedUsers, req.UserInfo.Username) {
		p, err := h.pods.Pods(req.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return admission.Errored(http.StatusInternalServerError, fmt.Errorf("reading pod %s/%s: %w", req.Namespace, name, err)), OutcomeError, ""
		default:
			pod = p
		}
	}
	if err := h.rules.ValidateBinding(binding, pod, req.UserInfo.Username); err != nil {
		d, ok := IsDenial(err)
		if !ok {
			return admission.Errored(http.StatusInternalServerError, err), OutcomeError, ""
		}
		return admission.Denied(d.Error()), OutcomeDenied, d.Reason
	}
	return admission.Allowed(""), OutcomeAllowed, ""
}

// bindingWebhook is the ValidatingWebhookConfiguration's webhook for Bindings: CREATE of pods/binding
// and bindings, outside Cardinal's namespace, not from TrustedUsers or UncheckedBinders.
func (o *ConfigurationOptions) bindingWebhook() admissionregistrationv1.ValidatingWebhook {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	scope := admissionregistrationv1.NamespacedScope
	timeout := o.TimeoutSeconds
	w := admissionregistrationv1.ValidatingWebhook{
		Name:         BindingsWebhookName,
		ClientConfig: o.clientConfig(BindingsPath),
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"bindings", "pods/binding"}, Scope: &scope,
			},
		}},
		FailurePolicy:           &fail,
		MatchPolicy:             &equivalent,
		NamespaceSelector:       o.namespaceSelector(),
		SideEffects:             &none,
		TimeoutSeconds:          &timeout,
		AdmissionReviewVersions: []string{"v1"},
	}
	if skip := slices.Concat(o.TrustedUsers, o.UncheckedBinders); len(skip) > 0 {
		w.MatchConditions = []admissionregistrationv1.MatchCondition{{
			Name:       "not-a-binding-by-cardinal-or-unchecked-binders",
			Expression: fmt.Sprintf("!(request.userInfo.username in %s)", celList(skip)),
		}}
	}
	return w
}

// BindingPolicy returns the ValidatingAdmissionPolicy, and its binding, that refuse a Binding (through
// pods/binding or the legacy bindings resource) carrying a cardinal.io/ annotation or label, unless it
// comes from TrustedUsers. Both are named <Name>-bindings.
func BindingPolicy(o ConfigurationOptions) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	if err := o.validate(); err != nil {
		return nil, nil, err
	}
	name := o.Name + "-bindings"
	fail := admissionregistrationv1.Fail
	equivalent := admissionregistrationv1.Equivalent
	forbidden := metav1.StatusReasonForbidden
	validation := func(field string) admissionregistrationv1.Validation {
		keys := fmt.Sprintf("object.metadata.%s.filter(k, k.startsWith('%s'))", field, KeyPrefix)
		return admissionregistrationv1.Validation{
			Expression: fmt.Sprintf("!has(object.metadata.%[1]s) || !object.metadata.%[1]s.exists(k, k.startsWith('%[2]s'))", field, KeyPrefix),
			MessageExpression: fmt.Sprintf("'metadata.%s: ' + %s.join(', ') + ': the metadata of a Binding is copied onto its pod (' + request.namespace + '/' + request.name + "+
				"'), and %s keys are written only by Cardinal; ' + request.userInfo.username + ' may not bind with them'", field, keys, KeyPrefix),
			Reason: &forbidden,
		}
	}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				MatchPolicy: &equivalent,
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"bindings", "pods/binding"},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{validation("annotations"), validation("labels")},
		},
	}
	if len(o.TrustedUsers) > 0 {
		policy.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{
			Name:       "not-a-binding-by-cardinal",
			Expression: fmt.Sprintf("!(request.userInfo.username in %s)", celList(o.TrustedUsers)),
		}}
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return policy, binding, nil
}
