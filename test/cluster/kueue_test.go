package cluster

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kueueManifests is the shape of Kueue's config/components/webhook/manifests.yaml, cut down.
const kueueManifests = `---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-apps-v1-deployment}
  failurePolicy: Fail
  name: mdeployment.kb.io
  rules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  failurePolicy: Fail
  name: mpod.kb.io
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-kueue-x-k8s-io-v1beta2-clusterqueue}
  failurePolicy: Fail
  name: mclusterqueue.kb.io
  rules: [{apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE], resources: [clusterqueues]}]
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-batch-v1-job}
  failurePolicy: Fail
  name: vjob.kb.io
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [jobs]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-ray-io-v1-rayjob}
  failurePolicy: Fail
  name: vrayjob.kb.io
  rules: [{apiGroups: [ray.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [rayjobs]}]
  sideEffects: None
`

// TestKueueWebhooks: Kueue's webhooks for pods, Jobs and its own resources call the URL with the CA
// bundle, pods and Jobs only in the managed namespaces; the webhooks of frameworks the test bed does
// not run (a Deployment webhook would refuse every Deployment) are left out.
func TestKueueWebhooks(t *testing.T) {
	ca := []byte("CA")
	m, v, err := kueueWebhooks([]byte(kueueManifests), "https://127.0.0.1:9443", ca, []string{"e2e"})
	if err != nil {
		t.Fatalf("kueueWebhooks: %v", err)
	}
	type hook struct {
		Name, URL string
		CA        string
		Scoped    []string
	}
	summary := func(name string, cc admissionregistrationv1.WebhookClientConfig, ns *metav1.LabelSelector) hook {
		h := hook{Name: name, CA: string(cc.CABundle)}
		if cc.URL != nil {
			h.URL = *cc.URL
		}
		if cc.Service != nil {
			h.URL = "service " + cc.Service.Name
		}
		if ns != nil {
			for _, r := range ns.MatchExpressions {
				h.Scoped = append(h.Scoped, r.Key+" "+string(r.Operator)+" "+strings.Join(r.Values, ","))
			}
		}
		return h
	}
	var got []hook
	for _, w := range m.Webhooks {
		got = append(got, summary(w.Name, w.ClientConfig, w.NamespaceSelector))
	}
	for _, w := range v.Webhooks {
		got = append(got, summary(w.Name, w.ClientConfig, w.NamespaceSelector))
	}
	want := []hook{
		{Name: "mpod.kb.io", URL: "https://127.0.0.1:9443/mutate--v1-pod", CA: "CA", Scoped: []string{"kubernetes.io/metadata.name In e2e"}},
		{Name: "mclusterqueue.kb.io", URL: "https://127.0.0.1:9443/mutate-kueue-x-k8s-io-v1beta2-clusterqueue", CA: "CA"},
		{Name: "vjob.kb.io", URL: "https://127.0.0.1:9443/validate-batch-v1-job", CA: "CA", Scoped: []string{"kubernetes.io/metadata.name In e2e"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("webhooks (-want +got):\n%s", diff)
	}
	if m.Name == v.Name {
		t.Errorf("both configurations are named %s", m.Name)
	}
}

// TestKueueWebhooksRefusesServiceLessWebhook: a webhook of a kept group with no service path cannot
// be given a URL; it is an error, not a webhook silently dropped.
func TestKueueWebhooksRefusesServiceLessWebhook(t *testing.T) {
	bad := strings.Replace(kueueManifests, "service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}", "url: https://example.com/x", 1)
	if _, _, err := kueueWebhooks([]byte(bad), "https://127.0.0.1:1", nil, []string{"e2e"}); err == nil || !strings.Contains(err.Error(), "mpod.kb.io") {
		t.Errorf("kueueWebhooks = %v, want an error naming mpod.kb.io", err)
	}
}

// TestKueueConfig: the Configuration manages only the named namespaces, serves webhooks on
// 127.0.0.1 from the cert folder, manages no certificates, and excludes the named resources; a
// namespace Kueue refuses to manage is an error.
func TestKueueConfig(t *testing.T) {
	data, err := kueueConfig(KueueOptions{Namespaces: []string{"e2e"}, Frameworks: []string{"batch/job", "pod"},
		ExcludeResourcePrefixes: []string{"nvidia.com/gpumem"}}, "/certs", 9443, 8081)
	if err != nil {
		t.Fatalf("kueueConfig: %v", err)
	}
	var cfg struct {
		APIVersion string `json:"apiVersion"`
		Webhook    struct {
			Host    string `json:"host"`
			Port    int    `json:"port"`
			CertDir string `json:"certDir"`
		} `json:"webhook"`
		InternalCertManagement struct {
			Enable bool `json:"enable"`
		} `json:"internalCertManagement"`
		ManagedJobsNamespaceSelector metav1.LabelSelector `json:"managedJobsNamespaceSelector"`
		Integrations                 struct {
			Frameworks []string `json:"frameworks"`
		} `json:"integrations"`
		Resources struct {
			ExcludeResourcePrefixes []string `json:"excludeResourcePrefixes"`
		} `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if cfg.APIVersion != "config.kueue.x-k8s.io/v1beta2" || cfg.Webhook.Host != "127.0.0.1" || cfg.Webhook.Port != 9443 ||
		cfg.Webhook.CertDir != "/certs" || cfg.InternalCertManagement.Enable {
		t.Errorf("configuration:\n%s", data)
	}
	if diff := cmp.Diff([]metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: "In", Values: []string{"e2e"}}},
		cfg.ManagedJobsNamespaceSelector.MatchExpressions); diff != "" {
		t.Errorf("managedJobsNamespaceSelector (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"nvidia.com/gpumem"}, cfg.Resources.ExcludeResourcePrefixes); diff != "" {
		t.Errorf("excludeResourcePrefixes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"batch/job", "pod"}, cfg.Integrations.Frameworks); diff != "" {
		t.Errorf("frameworks (-want +got):\n%s", diff)
	}
	for _, ns := range []string{"kube-system", KueueNamespace} {
		if _, err := kueueConfig(KueueOptions{Namespaces: []string{ns}}, "/certs", 1, 2); err == nil || !strings.Contains(err.Error(), ns) {
			t.Errorf("kueueConfig managing %s = %v, want an error naming it", ns, err)
		}
	}
}
