package chart

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/webhook"
)

// TestCPUOnlyPodsWebhookMatchesPackage: with webhook.cpuOnlyPods on, the chart's routing webhook is
// pkg/webhook's (its CEL character for character), with the selectors from the values; off (the
// default), there is none.
func TestCPUOnlyPodsWebhookMatchesPackage(t *testing.T) {
	nsSel := &metav1.LabelSelector{
		MatchLabels:      map[string]string{"team": "batch"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"system"}}},
	}
	objSel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "etl"}}
	for _, tc := range []struct {
		name   string
		values map[string]any
		opts   *webhook.CPUOnlyPodsOptions
	}{
		{"default selector", map[string]any{"enabled": true},
			&webhook.CPUOnlyPodsOptions{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"cardinal.io/cpu-pods": "route"}}}},
		{"selectors from the values", map[string]any{"enabled": true,
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "batch"},
				"matchExpressions": []any{map[string]any{"key": "tier", "operator": "NotIn", "values": []any{"system"}}}},
			"objectSelector": map[string]any{"matchLabels": map[string]any{"app": "etl"}}},
			&webhook.CPUOnlyPodsOptions{NamespaceSelector: nsSel, ObjectSelector: objSel}},
		{"every namespace", map[string]any{"enabled": true, "namespaceSelector": map[string]any{
			"matchExpressions": []any{map[string]any{"key": "kubernetes.io/metadata.name", "operator": "Exists"}}}},
			&webhook.CPUOnlyPodsOptions{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpExists}}}}},
		{"off", map[string]any{"enabled": false}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, map[string]any{"webhook": map[string]any{"cpuOnlyPods": tc.values}})
			got := get[*admissionregistrationv1.MutatingWebhookConfiguration](t, r, webhookName)
			opts := webhook.DefaultConfigurationOptions()
			opts.Name, opts.Namespace = webhookName, namespace
			opts.Service = &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: webhookName, Path: ptr.To(webhook.Path), Port: ptr.To[int32](443)}
			opts.CABundle = got.Webhooks[0].ClientConfig.CABundle
			opts.TrustedUsers = []string{schedulerSA, devicePluginSA}
			opts.CPUOnlyPods = tc.opts
			want, err := webhook.MutatingWebhookConfiguration(opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want.Webhooks, got.Webhooks); diff != "" {
				t.Errorf("webhooks differ from pkg/webhook's (-package +chart):\n%s", diff)
			}
		})
	}
}

// TestCPUOnlyPodsWebhookURL: a webhook reached by URL (the test bed) serves the route on its origin.
func TestCPUOnlyPodsWebhookURL(t *testing.T) {
	r := render(t, map[string]any{"webhook": map[string]any{"cpuOnlyPods": map[string]any{"enabled": true},
		"clientConfig": map[string]any{"url": "https://127.0.0.1:9443/mutate-pods", "caBundle": "Q0E="}}})
	got := get[*admissionregistrationv1.MutatingWebhookConfiguration](t, r, webhookName)
	if len(got.Webhooks) != 2 || got.Webhooks[1].ClientConfig.URL == nil || *got.Webhooks[1].ClientConfig.URL != "https://127.0.0.1:9443"+webhook.CPUPodsPath {
		t.Fatalf("route webhook client config: %+v", got.Webhooks)
	}
	if string(got.Webhooks[1].ClientConfig.CABundle) != "CA" {
		t.Errorf("route webhook caBundle %q, want the values' CA", got.Webhooks[1].ClientConfig.CABundle)
	}
}

// TestCPUOnlyPodsExtender: the opt-in adds an extender entry for the marker alone, ignorable (a
// routed pod schedules while the extender is down) and without bind or preempt (only one extender
// may bind: kube-scheduler's own binder binds these pods); the GPU entry is unchanged.
func TestCPUOnlyPodsExtender(t *testing.T) {
	got := schedulerConfig(t, render(t, map[string]any{"webhook": map[string]any{"cpuOnlyPods": map[string]any{"enabled": true}}}))
	want := []configv1.Extender{{
		URLPrefix: "http://127.0.0.1:8888", FilterVerb: "filter", PrioritizeVerb: "prioritize", BindVerb: "bind", PreemptVerb: "preempt",
		Weight: 25, HTTPTimeout: metav1.Duration{Duration: 3 * time.Second},
		NodeCacheCapable: true, Ignorable: false,
		ManagedResources: managed(annotations.DefaultResourceNames()),
	}, {
		URLPrefix: "http://127.0.0.1:8888", FilterVerb: "filter", PrioritizeVerb: "prioritize",
		Weight: 25, HTTPTimeout: metav1.Duration{Duration: 3 * time.Second},
		NodeCacheCapable: true, Ignorable: true,
		ManagedResources: []configv1.ExtenderManagedResource{{Name: string(annotations.ResourceHostRoute), IgnoredByScheduler: true}},
	}}
	if diff := cmp.Diff(want, got.Extenders); diff != "" {
		t.Errorf("extenders (-want +got):\n%s", diff)
	}
	if off := schedulerConfig(t, render(t, nil)); len(off.Extenders) != 1 {
		t.Errorf("without the opt-in: %d extenders, want 1", len(off.Extenders))
	}
}

// TestGPUPodTolerations: webhook.gpuPodTolerations reach the webhook as --gpu-pod-tolerations, in a
// form it parses to the same tolerations; none by default.
func TestGPUPodTolerations(t *testing.T) {
	r := render(t, map[string]any{"webhook": map[string]any{"gpuPodTolerations": []any{
		map[string]any{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
		map[string]any{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute", "tolerationSeconds": 60},
	}}})
	args := flagsOf(t, container(t, get[*appsv1.Deployment](t, r, webhookName).Spec.Template.Spec, "webhook").Args)
	got, err := webhook.ParseTolerations(args["gpu-pod-tolerations"])
	if err != nil {
		t.Fatalf("--gpu-pod-tolerations=%s: %v", args["gpu-pod-tolerations"], err)
	}
	want := []corev1.Toleration{
		{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](60)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tolerations (-want +got):\n%s", diff)
	}
	none := flagsOf(t, container(t, get[*appsv1.Deployment](t, render(t, nil), webhookName).Spec.Template.Spec, "webhook").Args)
	if v, ok := none["gpu-pod-tolerations"]; ok {
		t.Errorf("default: --gpu-pod-tolerations=%s, want no flag", v)
	}
}
