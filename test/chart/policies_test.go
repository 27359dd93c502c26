package chart

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/cardinal-gpu/cardinal/pkg/webhook/certs"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// What the accounts' own tokens may do on a real API server: the chart's ValidatingAdmissionPolicies
// that narrow the webhook's credentials, and the scheduler's pod writes.

// TestWebhookConfigurationsPolicy: with the webhook's own credentials (RBAC grants update on its two
// configurations), the certificate rotator sets their caBundle, and every other change to them is
// refused by the chart's policy: a URL of an attacker's, rules that send every object, another
// webhook, a label.
func TestWebhookConfigurationsPolicy(t *testing.T) {
	in := installChart(t, nil)
	ctx := context.Background()
	asWebhook := in.as(t, webhookName)
	reg := asWebhook.AdmissionregistrationV1()
	refused := func(err error) bool {
		return err != nil && apierrors.IsForbidden(err) && strings.Contains(err.Error(), webhookName+"-configurations")
	}
	updateMutating := func(change func(*admissionregistrationv1.MutatingWebhookConfiguration), dryRun bool) error {
		m, err := reg.MutatingWebhookConfigurations().Get(ctx, webhookName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(m)
		opts := metav1.UpdateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = reg.MutatingWebhookConfigurations().Update(ctx, m, opts)
		return err
	}
	updateValidating := func(change func(*admissionregistrationv1.ValidatingWebhookConfiguration), dryRun bool) error {
		v, err := reg.ValidatingWebhookConfigurations().Get(ctx, webhookName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(v)
		opts := metav1.UpdateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = reg.ValidatingWebhookConfigurations().Update(ctx, v, opts)
		return err
	}
	attacker := func(c *admissionregistrationv1.WebhookClientConfig) {
		c.Service, c.URL = nil, ptr.To("https://attacker.example.com/admit")
	}
	everything := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
	}}
	// The API server enforces a policy once its informer has it: wait for the first refusal. Every
	// refused change below is a dry run (admission runs, nothing is stored), so that without the
	// policy each fails on its own.
	cluster.WaitFor(t, 30*time.Second, "the configurations policy to be enforced", func() (bool, error) {
		return refused(updateMutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) { attacker(&m.Webhooks[0].ClientConfig) }, true)), nil
	})

	t.Run("the rotator sets the caBundle", func(t *testing.T) {
		rotator, err := certs.New(certs.Config{Client: asWebhook, Namespace: namespace, SecretName: webhookName + "-certs", WebhookConfiguration: webhookName,
			Hosts: []string{webhookName + "." + namespace + ".svc"}, CertLifetime: time.Hour, CALifetime: 24 * time.Hour, CheckInterval: time.Minute,
			Logger: testr.New(t)})
		if err != nil {
			t.Fatalf("%v", err)
		}
		if _, err := rotator.Reconcile(ctx); err != nil {
			t.Fatalf("reconcile with the webhook's credentials: %v", err)
		}
		if err := rotator.Ready(nil); err != nil {
			t.Errorf("not ready: %v", err)
		}
		m, err := in.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%v", err)
		}
		if len(m.Webhooks[0].ClientConfig.CABundle) == 0 {
			t.Error("no caBundle set")
		}
	})

	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"mutating: a URL instead of the Service", func() error {
			return updateMutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) { attacker(&m.Webhooks[0].ClientConfig) }, true)
		}},
		{"validating: a URL instead of the Service", func() error {
			return updateValidating(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) { attacker(&v.Webhooks[0].ClientConfig) }, true)
		}},
		{"mutating: another Service port", func() error {
			return updateMutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
				m.Webhooks[0].ClientConfig.Service.Port = ptr.To[int32](8443)
			}, true)
		}},
		{"mutating: rules */*", func() error {
			return updateMutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) { m.Webhooks[0].Rules = everything }, true)
		}},
		{"validating: rules */*", func() error {
			return updateValidating(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) { v.Webhooks[0].Rules = everything }, true)
		}},
		{"mutating: matchConditions dropped", func() error {
			return updateMutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) { m.Webhooks[0].MatchConditions = nil }, true)
		}},
		{"mutating: no namespaceSelector", func() error {
			return updateMutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
				m.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{}
			}, true)
		}},
		{"mutating: failurePolicy Ignore", func() error {
			return updateMutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
				m.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			}, true)
		}},
		{"mutating: reinvocationPolicy", func() error {
			return updateMutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
				m.Webhooks[0].ReinvocationPolicy = ptr.To(admissionregistrationv1.NeverReinvocationPolicy)
			}, true)
		}},
		{"validating: timeoutSeconds", func() error {
			return updateValidating(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[0].TimeoutSeconds = ptr.To[int32](29)
			}, true)
		}},
		{"mutating: another webhook", func() error {
			return updateMutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
				extra := *m.Webhooks[0].DeepCopy()
				extra.Name = "extra.attacker.example.com"
				attacker(&extra.ClientConfig)
				extra.Rules = everything
				m.Webhooks = append(m.Webhooks, extra)
			}, true)
		}},
		{"validating: a webhook removed", func() error {
			return updateValidating(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) { v.Webhooks = v.Webhooks[1:] }, true)
		}},
		{"mutating: a label", func() error {
			return updateMutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) { m.Labels["attacker"] = "x" }, true)
		}},
		{"validating: an ownerReference", func() error {
			return updateValidating(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "gone", UID: "00000000-0000-0000-0000-000000000001"}}
			}, true)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); !refused(err) {
				t.Errorf("err = %v, want a refusal by the configurations policy", err)
			}
		})
	}
	t.Run("caBundle alone, both configurations", func(t *testing.T) {
		bundle := []byte("another bundle")
		if err := updateMutating(func(m *admissionregistrationv1.MutatingWebhookConfiguration) {
			for i := range m.Webhooks {
				m.Webhooks[i].ClientConfig.CABundle = bundle
			}
		}, false); err != nil {
			t.Errorf("mutating: %v", err)
		}
		if err := updateValidating(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
			for i := range v.Webhooks {
				v.Webhooks[i].ClientConfig.CABundle = bundle
			}
		}, false); err != nil {
			t.Errorf("validating: %v", err)
		}
	})
	t.Run("admin is not restricted", func(t *testing.T) {
		m, err := in.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%v", err)
		}
		m.Webhooks[0].TimeoutSeconds = ptr.To[int32](7)
		if _, err := in.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
			t.Errorf("%v", err)
		}
	})
}

// TestWebhookSecretPolicy: with the webhook's own credentials, its certificate Secret cannot be handed
// to the garbage collector (an ownerReference to a missing owner) or held (a finalizer), and once it
// is gone the same name cannot come back as a Secret of another type — a
// kubernetes.io/service-account-token Secret naming the scheduler's ServiceAccount would have the token
// controller mint a long-lived token for that account.
func TestWebhookSecretPolicy(t *testing.T) {
	in := installChart(t, nil)
	ctx := context.Background()
	admin := in.c.Client
	asWebhook := in.as(t, webhookName)
	secretName := webhookName + "-certs"
	refused := func(err error) bool {
		return err != nil && apierrors.IsForbidden(err) && strings.Contains(err.Error(), webhookName+"-certs")
	}
	update := func(change func(*corev1.Secret), dryRun bool) error {
		s, err := asWebhook.CoreV1().Secrets(namespace).Get(ctx, secretName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(s)
		opts := metav1.UpdateOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = asWebhook.CoreV1().Secrets(namespace).Update(ctx, s, opts)
		return err
	}
	ownerRef := func(s *corev1.Secret) {
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "gone", UID: "00000000-0000-0000-0000-000000000001"}}
	}
	finalizer := func(s *corev1.Secret) { s.Finalizers = []string{"example.com/hold"} }
	// The API server enforces a policy once its informer has it: dry runs until the first refusal (of
	// another name, which the policy refused before it checked types and owners too).
	cluster.WaitFor(t, 30*time.Second, "the certificates policy to be enforced", func() (bool, error) {
		other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-the-webhooks", Namespace: namespace}}
		_, err := asWebhook.CoreV1().Secrets(namespace).Create(ctx, other, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return refused(err), nil
	})
	t.Run("its own data", func(t *testing.T) {
		if err := update(func(s *corev1.Secret) { s.Data = map[string][]byte{"ca.crt": []byte("x")} }, false); err != nil {
			t.Errorf("%v", err)
		}
	})
	t.Run("an ownerReference", func(t *testing.T) {
		if err := update(ownerRef, false); !refused(err) {
			t.Errorf("err = %v, want a refusal by the certificates policy", err)
		}
	})
	t.Run("a finalizer", func(t *testing.T) {
		if err := update(finalizer, false); !refused(err) {
			t.Errorf("err = %v, want a refusal by the certificates policy", err)
		}
	})

	// The Secret is gone (deleted, or collected by the garbage collector). Whatever the cases above
	// left on it (without the policy: a finalizer) goes first, so that it is gone at once.
	s, err := admin.CoreV1().Secrets(namespace).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%v", err)
	}
	s.OwnerReferences, s.Finalizers = nil, nil
	if _, err := admin.CoreV1().Secrets(namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("%v", err)
	}
	if err := admin.CoreV1().Secrets(namespace).Delete(ctx, secretName, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("%v", err)
	}
	create := func(s *corev1.Secret) error {
		s.Name, s.Namespace = secretName, namespace
		_, err := asWebhook.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	for _, tc := range []struct {
		name    string
		secret  *corev1.Secret
		allowed bool
	}{
		{"a service-account token of the scheduler's account", &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.ServiceAccountNameKey: schedulerName}},
			Type:       corev1.SecretTypeServiceAccountToken,
		}, false},
		{"a TLS Secret", &corev1.Secret{Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: []byte("c"), corev1.TLSPrivateKeyKey: []byte("k")}}, false},
		{"Opaque with an ownerReference", func() *corev1.Secret { s := &corev1.Secret{}; ownerRef(s); return s }(), false},
		{"Opaque with a finalizer", func() *corev1.Secret { s := &corev1.Secret{}; finalizer(s); return s }(), false},
		{"Opaque", &corev1.Secret{Type: corev1.SecretTypeOpaque}, true},
		{"no type (Opaque by default)", &corev1.Secret{}, true},
	} {
		t.Run("re-created as "+tc.name, func(t *testing.T) {
			err := create(tc.secret)
			if tc.allowed && err != nil {
				t.Errorf("refused: %v", err)
			}
			if !tc.allowed && !refused(err) {
				t.Errorf("err = %v, want a refusal by the certificates policy", err)
			}
		})
	}
}

// TestSchedulerCannotRewritePods: with the scheduler's own token, a kube-system pod's image cannot be
// replaced (the extender no longer holds pods patch; kube-scheduler's role writes only status), while
// what kube-scheduler does to pods still works: bind one, write its status.
func TestSchedulerCannotRewritePods(t *testing.T) {
	in := installChart(t, nil)
	ctx := context.Background()
	in.c.AddNode(t, cluster.NodeSpec{Name: "node-a"})
	for _, ns := range []string{"kube-system", "default"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		if _, err := in.c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%v", err)
		}
	}
	asScheduler := in.as(t, schedulerName)
	image := []byte(`{"spec":{"containers":[{"name":"c","image":"attacker.example.com/pause"}]}}`)
	if _, err := asScheduler.CoreV1().Pods("kube-system").Patch(ctx, "victim", types.StrategicMergePatchType, image, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("replacing a kube-system pod's image as the scheduler: %v, want forbidden", err)
	}
	annotate := []byte(`{"metadata":{"annotations":{"cardinal.io/gpu-assignment":"{}"}}}`)
	if _, err := asScheduler.CoreV1().Pods("default").Patch(ctx, "victim", types.MergePatchType, annotate, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("annotating a pod as the scheduler: %v, want forbidden (the assignment travels on the Binding)", err)
	}
	condition := []byte(`{"status":{"conditions":[{"type":"PodScheduled","status":"False","reason":"Unschedulable"}]}}`)
	if _, err := asScheduler.CoreV1().Pods("default").Patch(ctx, "victim", types.StrategicMergePatchType, condition, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("kube-scheduler's status write: %v", err)
	}
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: "default"}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}
	if err := asScheduler.CoreV1().Pods("default").Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Errorf("binding as the scheduler: %v", err)
	}
}
