package webhook

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// WebhookName is the name of the webhook inside the configuration (it appears in refusals:
// `admission webhook "pods.webhook.cardinal.io" denied the request: ...`).
const WebhookName = "pods.webhook.cardinal.io"

// WorkloadsWebhookName is the name of the workload webhook inside the ValidatingWebhookConfiguration.
const WorkloadsWebhookName = "workloads.webhook.cardinal.io"

// ConfigurationOptions fill in the MutatingWebhookConfiguration the webhook expects.
type ConfigurationOptions struct {
	// Name of the configuration object.
	Name string
	// Namespace is Cardinal's own namespace: its pods are never sent to the webhook.
	Namespace string
	// Service is where the apiserver reaches the webhook in the cluster; URL is the alternative
	// (tests, out-of-cluster): the URL of the pod endpoint (Path), whose origin also serves the
	// workload endpoint (WorkloadsPath). Exactly one is set. The Service's path is set here.
	Service *admissionregistrationv1.ServiceReference
	URL     string
	// CABundle verifies the webhook's serving certificate.
	CABundle []byte
	// Resources are the managed resource names.
	Resources annotations.ResourceNames
	// TrustedUsers are Cardinal's own service accounts. Their pod UPDATEs (the extender writing an
	// assignment, the plugin an allocation) are not sent at all: binding never waits on the webhook.
	TrustedUsers []string
	// DeviceEnvNamespaces may set the device variables (DeviceEnvNames) in their pods: system
	// components such as the GPU operator's. Their pods are not sent for that rule.
	DeviceEnvNamespaces []string
	// UncheckedBinders are users whose Bindings are not sent to the Binding webhook (bindingWebhook):
	// the cluster's default scheduler, which binds only pods naming its own profiles, so that its
	// binds never wait on Cardinal's webhook.
	UncheckedBinders []string
	// TimeoutSeconds bounds one call; the decision takes well under a millisecond.
	TimeoutSeconds int32
	// CPUOnlyPods, when set, adds the webhook that routes the CPU-only pods it selects through
	// Cardinal (cpuPodsWebhook); nil: CPU-only pods are never sent (the default).
	CPUOnlyPods *CPUOnlyPodsOptions
}

// DefaultConfigurationOptions are the values the chart uses, less the service's namespace, the CA
// and the trusted service accounts, which depend on the release.
func DefaultConfigurationOptions() ConfigurationOptions {
	return ConfigurationOptions{
		Name:                "cardinal-webhook",
		Namespace:           "cardinal-system",
		Resources:           annotations.DefaultResourceNames(),
		DeviceEnvNamespaces: DefaultDeviceEnvNamespaces(),
		UncheckedBinders:    DefaultUncheckedBinders(),
		TimeoutSeconds:      3,
	}
}

// MutatingWebhookConfiguration returns the configuration the webhook is registered with:
//
//   - pods, CREATE and UPDATE, and the pods/status and pods/ephemeralcontainers subresources, UPDATE
//     (the apiserver keeps annotation changes made through pods/status), in every namespace except
//     Cardinal's own (the namespace's kubernetes.io/metadata.name label, which the apiserver sets and
//     nobody can forge);
//   - matchConditions (CEL, see podConditions) that send a CREATE only for GPU pods, pods carrying
//     one of Cardinal's internal annotations and pods setting a device variable, and an UPDATE only
//     when it changes an internal annotation, or a selector of a GPU pod, or adds an ephemeral
//     container setting a device variable; every other request never waits on the webhook (kubelet
//     status updates, Job finalizers, ReplicaSet adoption, kubectl label); plus, when TrustedUsers is
//     set, a condition that skips their UPDATEs;
//   - failurePolicy Fail (a GPU pod must never reach a scheduler unchecked), sideEffects None,
//     reinvocationPolicy IfNeeded (the mutation is idempotent, and another webhook may add GPU
//     requests after it), admissionReviewVersions v1, a small timeout.
//
// There is no objectSelector: pod labels are the pod author's to set, so a label that turned the
// webhook off would let anyone skip the internal-annotation check.
//
// With o.CPUOnlyPods set, a second webhook routes the CPU-only pods it selects through Cardinal
// (cpupods.go); it fails open, and its selectors only choose which pods get Cardinal's placement.
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
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         WebhookName,
			ClientConfig: o.clientConfig(Path),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: &scope,
				},
			}, {
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/status", "pods/ephemeralcontainers"}, Scope: &scope,
				},
			}},
			FailurePolicy:           &fail,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       o.namespaceSelector(),
			MatchConditions:         podConditions(o),
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &reinvoke,
		}},
	}
	if o.CPUOnlyPods != nil {
		cfg.Webhooks = append(cfg.Webhooks, o.cpuPodsWebhook())
	}
	return cfg, nil
}

// ValidatingWebhookConfiguration returns the configuration of the workload webhook (WorkloadHandler):
//
//   - apps/v1 Deployments, StatefulSets, DaemonSets, ReplicaSets and batch/v1 Jobs, CronJobs, CREATE
//     and UPDATE, in every namespace except Cardinal's own;
//   - a matchCondition (CEL) that sends only a CREATE, or an UPDATE that changes the pod template,
//     whose template asks for a managed resource, carries an internal annotation or sets a device
//     variable: scaling, status and controller bookkeeping never reach it;
//   - failurePolicy Ignore: the pods a workload creates go through the pod webhook (failurePolicy
//     Fail) all the same, so this one only says earlier what the pods would be refused for, and an
//     outage never blocks a rollout;
//
// and of the Binding webhook (BindingHandler, see binding.go): CREATE of pods/binding and bindings,
// outside Cardinal's namespace, not from TrustedUsers or UncheckedBinders, failurePolicy Fail.
func ValidatingWebhookConfiguration(o ConfigurationOptions) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	scope := admissionregistrationv1.NamespacedScope
	timeout := o.TimeoutSeconds
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         WorkloadsWebhookName,
			ClientConfig: o.clientConfig(WorkloadsPath),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"apps"}, APIVersions: []string{"v1"},
					Resources: []string{"deployments", "statefulsets", "daemonsets", "replicasets"}, Scope: &scope,
				},
			}, {
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs", "cronjobs"}, Scope: &scope,
				},
			}},
			FailurePolicy:           &ignore,
			MatchPolicy:             &equivalent,
			NamespaceSelector:       o.namespaceSelector(),
			MatchConditions:         workloadConditions(o),
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
		}, o.bindingWebhook()},
	}, nil
}

// clientConfig points at path: on the Service (its path replaced), or on URL's origin.
func (o *ConfigurationOptions) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: o.CABundle}
	if o.Service != nil {
		svc := *o.Service
		svc.Path = &path
		cc.Service = &svc
		return cc
	}
	u, _ := url.Parse(o.URL) // validate parsed it
	u.Path, u.RawPath = path, ""
	s := u.String()
	cc.URL = &s
	return cc
}

func (o *ConfigurationOptions) namespaceSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{o.Namespace},
	}}}
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
	if o.URL != "" {
		if u, err := url.Parse(o.URL); err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("webhook configuration: URL %q is not https://<host>[:port]/<path>", o.URL)
		}
	}
	if err := o.Resources.Validate(); err != nil {
		return fmt.Errorf("webhook configuration: %w", err)
	}
	for _, v := range slices.Concat(resourceStrings(o.Resources), o.TrustedUsers, o.DeviceEnvNamespaces, o.UncheckedBinders) {
		if strings.ContainsAny(v, `'\"`) {
			return fmt.Errorf("webhook configuration: %q cannot appear in a CEL string literal", v)
		}
	}
	return nil
}

// The CEL below is built from small pieces, each a function of the variable or object it reads, so
// the same pieces serve pods (object) and workload templates (t). Fields that may be absent are
// guarded with has(): a pod without init containers has no spec.initContainers, a container without
// limits no resources.limits, a template no metadata. The chart builds the same strings
// (templates/webhook/_cel.tpl); test/chart compares them.

// celGPU: some container of the pod (spec) obj, init containers included, names a managed resource
// or a MIG resource (a name starting with the MIG prefix: the webhook itself tells a MIG profile from
// a malformed one).
func celGPU(names annotations.ResourceNames, obj string) string {
	resources := celList(resourceStrings(names))
	container := fmt.Sprintf("has(c.resources) && ("+
		"(has(c.resources.limits) && (%[1]s.exists(r, r in c.resources.limits) || c.resources.limits.exists(r, r.startsWith('%[2]s')))) || "+
		"(has(c.resources.requests) && (%[1]s.exists(r, r in c.resources.requests) || c.resources.requests.exists(r, r.startsWith('%[2]s')))))",
		resources, names.MIGResourcePrefix())
	return fmt.Sprintf("%[1]s.spec.containers.exists(c, %[2]s) || "+
		"(has(%[1]s.spec.initContainers) && %[1]s.spec.initContainers.exists(c, %[2]s))", obj, container)
}

// celCarries: obj's metadata (which must exist) carries one of Cardinal's internal annotations.
func celCarries(obj string) string {
	return fmt.Sprintf("(has(%[1]s.metadata.annotations) && %[2]s.exists(k, k in %[1]s.metadata.annotations))", obj, celList(annotations.InternalKeys))
}

// celChanged: an UPDATE adds, removes or changes one of keys (object against oldObject).
func celChanged(keys []string) string {
	in := func(obj string) string {
		return fmt.Sprintf("(has(%[1]s.metadata.annotations) && k in %[1]s.metadata.annotations)", obj)
	}
	return fmt.Sprintf("%[1]s.exists(k, %[2]s != %[3]s || (%[2]s && object.metadata.annotations[k] != oldObject.metadata.annotations[k]))",
		celList(keys), in("object"), in("oldObject"))
}

// celDeviceEnv: some container of obj (init and ephemeral included) sets a device variable (Go:
// deviceEnvRefusals), and obj's namespace may not.
func celDeviceEnv(obj string, allowed []string) string {
	exact, prefixes := celList(deviceEnvNames()), celList(deviceEnvPrefixes())
	env := fmt.Sprintf("(has(c.env) && c.env.exists(e, e.name in %[1]s || %[2]s.exists(p, e.name.startsWith(p)))) || "+
		"(has(c.envFrom) && c.envFrom.exists(f, has(f.prefix) && f.prefix != '' && "+
		"(%[1]s.exists(n, n.startsWith(f.prefix)) || %[2]s.exists(p, p.startsWith(f.prefix) || f.prefix.startsWith(p)))))", exact, prefixes)
	out := fmt.Sprintf("(%[1]s.spec.containers.exists(c, %[2]s) || "+
		"(has(%[1]s.spec.initContainers) && %[1]s.spec.initContainers.exists(c, %[2]s)) || "+
		"(has(%[1]s.spec.ephemeralContainers) && %[1]s.spec.ephemeralContainers.exists(c, %[2]s)))", obj, env)
	if len(allowed) > 0 {
		out += fmt.Sprintf(" && !(request.namespace in %s)", celList(allowed))
	}
	return "(" + out + ")"
}

// podConditions are the pod webhook's matchConditions; all must hold.
func podConditions(o ConfigurationOptions) []admissionregistrationv1.MatchCondition {
	gpu := celGPU(o.Resources, "object")
	env := celDeviceEnv("object", o.DeviceEnvNamespaces)
	conds := []admissionregistrationv1.MatchCondition{{
		Name: "cardinal-relevant",
		Expression: fmt.Sprintf("request.operation == 'CREATE' ? (%[1]s || %[2]s || %[3]s) : "+
			"(%[4]s || ((%[1]s) && %[5]s) || (request.subResource == 'ephemeralcontainers' && %[3]s))",
			gpu, celCarries("object"), env, celChanged(annotations.InternalKeys), celChanged(annotations.UserKeys)),
	}}
	if len(o.TrustedUsers) > 0 {
		conds = append(conds, admissionregistrationv1.MatchCondition{
			Name:       "not-an-update-by-cardinal",
			Expression: fmt.Sprintf("!(request.operation == 'UPDATE' && request.userInfo.username in %s)", celList(o.TrustedUsers)),
		})
	}
	return conds
}

// workloadConditions are the workload webhook's matchConditions. A list of one element binds the
// template to a variable (t, and o for the old one): CronJobs keep it under spec.jobTemplate.
func workloadConditions(o ConfigurationOptions) []admissionregistrationv1.MatchCondition {
	template := func(obj string) string {
		return fmt.Sprintf("[has(%[1]s.spec.jobTemplate) ? %[1]s.spec.jobTemplate.spec.template : %[1]s.spec.template]", obj)
	}
	return []admissionregistrationv1.MatchCondition{{
		Name: "template-relevant-to-cardinal",
		Expression: fmt.Sprintf("%[1]s.exists(t, (request.operation == 'CREATE' || %[2]s.exists(o, o != t)) && "+
			"(%[3]s || (has(t.metadata) && %[4]s) || %[5]s))",
			template("object"), template("oldObject"), celGPU(o.Resources, "t"), celCarries("t"), celDeviceEnv("t", o.DeviceEnvNamespaces)),
	}}
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
