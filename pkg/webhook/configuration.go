package webhook

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// WebhookName is the name of the webhook inside the configuration (it appears in refusals:
// `admission webhook "pods.webhook.cardinal.io" denied the request: ...`).
const WebhookName = "pods.webhook.cardinal.io"

// ConfigurationOptions fill in the MutatingWebhookConfiguration the webhook expects.
type ConfigurationOptions struct {
	// Name of the configuration object.
	Name string
	// Namespace is Cardinal's own namespace: its pods are never sent to the webhook.
	Namespace string
	// Service is where the apiserver reaches the webhook in the cluster; URL is the alternative
	// (tests, out-of-cluster). Exactly one is set.
	Service *admissionregistrationv1.ServiceReference
	URL     string
	// CABundle verifies the webhook's serving certificate.
	CABundle []byte
	// Resources are the managed resource names.
	Resources annotations.ResourceNames
	// TrustedUsers are Cardinal's own service accounts. Their pod UPDATEs (the extender writing an
	// assignment, the plugin an allocation) are not sent at all: binding never waits on the webhook.
	TrustedUsers []string
	// TimeoutSeconds bounds one call; the decision takes well under a millisecond.
	TimeoutSeconds int32
}

// DefaultConfigurationOptions are the values the chart uses, less the service's namespace, the CA
// and the trusted service accounts, which depend on the release.
func DefaultConfigurationOptions() ConfigurationOptions {
	return ConfigurationOptions{
		Name:           "cardinal-webhook",
		Namespace:      "cardinal-system",
		Resources:      annotations.DefaultResourceNames(),
		TimeoutSeconds: 3,
	}
}

// MutatingWebhookConfiguration returns the configuration the webhook is registered with:
//
//   - pods, CREATE and UPDATE, in every namespace except Cardinal's own (the namespace's
//     kubernetes.io/metadata.name label, which the apiserver sets and nobody can forge);
//   - matchConditions (CEL) that send only pods some container of which (init containers included)
//     names a managed resource in its limits or requests, or that carry (or carried, for an UPDATE)
//     one of Cardinal's internal annotations; plus, when TrustedUsers is set, a condition that skips
//     their UPDATEs;
//   - failurePolicy Fail (a GPU pod must never reach a scheduler unchecked), sideEffects None,
//     reinvocationPolicy IfNeeded (the mutation is idempotent, and another webhook may add GPU
//     requests after it), admissionReviewVersions v1, a small timeout.
//
// There is no objectSelector: pod labels are the pod author's to set, so a label that turned the
// webhook off would let anyone skip the internal-annotation check.
func MutatingWebhookConfiguration(o ConfigurationOptions) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	reinvoke := admissionregistrationv1.IfNeededReinvocationPolicy
	equivalent := admissionregistrationv1.Equivalent
	scope := admissionregistrationv1.NamespacedScope
	timeout := o.TimeoutSeconds
	cc := admissionregistrationv1.WebhookClientConfig{Service: o.Service, CABundle: o.CABundle}
	if o.URL != "" {
		url := o.URL
		cc.URL = &url
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         WebhookName,
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: &scope,
				},
			}},
			FailurePolicy: &fail,
			MatchPolicy:   &equivalent,
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{o.Namespace},
			}}},
			MatchConditions:         matchConditions(o.Resources, o.TrustedUsers),
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &reinvoke,
		}},
	}, nil
}

func (o *ConfigurationOptions) validate() error {
	switch {
	case o.Name == "":
		return fmt.Errorf("webhook configuration: name is empty")
	case o.Namespace == "":
		return fmt.Errorf("webhook configuration: Cardinal's namespace is empty")
	case (o.Service == nil) == (o.URL == ""):
		return fmt.Errorf("webhook configuration: set exactly one of service and URL")
	case o.TimeoutSeconds < 1 || o.TimeoutSeconds > 30:
		return fmt.Errorf("webhook configuration: timeout %ds is not in 1..30", o.TimeoutSeconds)
	}
	if err := o.Resources.Validate(); err != nil {
		return fmt.Errorf("webhook configuration: %w", err)
	}
	for _, v := range append(resourceStrings(o.Resources), o.TrustedUsers...) {
		if strings.ContainsAny(v, `'\"`) {
			return fmt.Errorf("webhook configuration: %q cannot appear in a CEL string literal", v)
		}
	}
	return nil
}

// matchConditions are CEL expressions the apiserver evaluates before calling the webhook; all must
// hold. Fields that may be absent are guarded with has(): a pod without init containers has no
// spec.initContainers, a container without limits no resources.limits, and oldObject is null on CREATE.
func matchConditions(names annotations.ResourceNames, trusted []string) []admissionregistrationv1.MatchCondition {
	resources := celList(resourceStrings(names))
	container := fmt.Sprintf("has(c.resources) && ("+
		"(has(c.resources.limits) && %[1]s.exists(r, r in c.resources.limits)) || "+
		"(has(c.resources.requests) && %[1]s.exists(r, r in c.resources.requests)))", resources)
	internal := celList(annotations.InternalKeys)
	carries := func(obj string) string {
		return fmt.Sprintf("(has(%[1]s.metadata.annotations) && %[2]s.exists(k, k in %[1]s.metadata.annotations))", obj, internal)
	}
	conds := []admissionregistrationv1.MatchCondition{{
		Name: "gpu-pod-or-internal-annotations",
		Expression: fmt.Sprintf("object.spec.containers.exists(c, %[1]s) || "+
			"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, %[1]s)) || "+
			"%[2]s || (oldObject != null && %[3]s)", container, carries("object"), carries("oldObject")),
	}}
	if len(trusted) > 0 {
		conds = append(conds, admissionregistrationv1.MatchCondition{
			Name:       "not-an-update-by-cardinal",
			Expression: fmt.Sprintf("!(request.operation == 'UPDATE' && request.userInfo.username in %s)", celList(trusted)),
		})
	}
	return conds
}

func resourceStrings(names annotations.ResourceNames) []string {
	out := make([]string, 0, 4)
	for _, n := range names.All() {
		out = append(out, string(n))
	}
	return out
}

// celList renders a CEL list of string literals; validate has refused values holding a quote or a
// backslash.
func celList(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = "'" + v + "'"
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}
