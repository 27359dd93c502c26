package chart

import (
	"crypto/x509"
	"encoding/pem"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
	"github.com/cardinal-gpu/cardinal/pkg/webhook"
)

// Object names of the test release ("cardinal" contains the chart name, so it is the prefix).
const (
	schedulerName    = "cardinal-scheduler"
	webhookName      = "cardinal-webhook"
	devicePluginName = "cardinal-device-plugin"
	schedulerSA      = "system:serviceaccount:" + namespace + ":cardinal-scheduler"
	devicePluginSA   = "system:serviceaccount:" + namespace + ":cardinal-device-plugin"
)

// agreedFlags are the flags each binary takes (the interface agreed between the components); the
// chart must pass nothing else.
var agreedFlags = map[string][]string{
	"extender": {"listen", "probe-listen", "kubeconfig", "scheduler-name", "exact-scheduler-name", "node-policy", "gpu-policy", "bind-wait", "reservation-ttl",
		"require-enforced-sharing", "filter-shortlist"},
	"webhook": {"listen", "cert-dir", "health-listen", "metrics-listen", "kubeconfig", "scheduler-name", "exact-scheduler-name", "trusted-service-accounts", "device-env-namespaces", "gpu-pod-tolerations",
		"cert-secret", "cert-namespace", "webhook-configuration", "cert-hosts", "cert-lifetime", "ca-lifetime", "cert-check-interval"},
	"device-plugin": {"node-name", "kubeconfig", "device-plugin-dir", "pod-resources-socket", "simulate", "scheduler-name", "exact-scheduler-name", "shares", "topology", "listen",
		"health-ignored-xids", "health-reset-xids", "kubelet-config", "kubelet-poll-interval", "sysfs-root",
		"device-list-strategy", "cdi-kind", "cdi-device-id-strategy", "cdi-annotation-prefix",
		"sharing-mode", "sharing-check-interval", "mps-pipe-dir", "mps-shm-dir", "mps-tenant-dir", "mps-compute-mode", "hami-core-library", "hami-core-preload-dir", "hami-core-lock-dir",
		"kernel-memory-limits", "cgroup-root", "mig-dynamic-profiles"},
}

var commonFlags = []string{"resource-gpu", "resource-gpumem", "resource-gpumem-percentage", "resource-gpucores", "v", "log-format"}

// flagsOf parses "--name=value" arguments into a map; a bare "--name" maps to "".
func flagsOf(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			t.Fatalf("argument %q is not a --flag", a)
		}
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if _, dup := out[name]; dup {
			t.Errorf("flag --%s given twice", name)
		}
		out[name] = value
	}
	return out
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

// schedulerConfig decodes the KubeSchedulerConfiguration of the rendering, strictly.
func schedulerConfig(t *testing.T, r *rendered) configv1.KubeSchedulerConfiguration {
	t.Helper()
	cm := get[*corev1.ConfigMap](t, r, schedulerName+"-config")
	var cfg configv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict([]byte(cm.Data["scheduler-config.yaml"]), &cfg); err != nil {
		t.Fatalf("scheduler-config.yaml: %v\n%s", err, cm.Data["scheduler-config.yaml"])
	}
	return cfg
}

func managed(names annotations.ResourceNames) []configv1.ExtenderManagedResource {
	return []configv1.ExtenderManagedResource{
		{Name: string(names.GPU), IgnoredByScheduler: false}, // the device plugin advertises it
		{Name: string(names.Mem), IgnoredByScheduler: true},  // nobody advertises the other three
		{Name: string(names.MemPercentage), IgnoredByScheduler: true},
		{Name: string(names.Cores), IgnoredByScheduler: true},
		// The webhook's marker on containers asking for MIG instances, whose resources have names no
		// list could hold in advance: without it kube-scheduler binds MIG pods without the extender.
		{Name: string(annotations.ResourceMIGRoute), IgnoredByScheduler: true},
	}
}

func TestSchedulerConfigurationDefault(t *testing.T) {
	got := schedulerConfig(t, render(t, nil))
	want := configv1.KubeSchedulerConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubescheduler.config.k8s.io/v1", Kind: "KubeSchedulerConfiguration"},
		LeaderElection: componentbaseconfigv1alpha1.LeaderElectionConfiguration{
			LeaderElect:  ptr.To(false), // one replica
			ResourceLock: "leases", ResourceName: "cardinal-scheduler", ResourceNamespace: namespace,
		},
		// Two profiles (issue 39): the first samples nodes as kube-scheduler's adaptive default does
		// (0), the exact one scores every node; the same plugins in each.
		Profiles: []configv1.KubeSchedulerProfile{{
			SchedulerName:            ptr.To("cardinal-scheduler"),
			PercentageOfNodesToScore: ptr.To[int32](0),
			// The policy weighs CPU and memory; kube-scheduler's own scores would overrule its ranks.
			Plugins: &configv1.Plugins{Score: configv1.PluginSet{Disabled: []configv1.Plugin{
				{Name: "NodeResourcesFit"}, {Name: "NodeResourcesBalancedAllocation"}}}},
		}, {
			SchedulerName:            ptr.To("cardinal-scheduler-exact"),
			PercentageOfNodesToScore: ptr.To[int32](100),
			Plugins: &configv1.Plugins{Score: configv1.PluginSet{Disabled: []configv1.Plugin{
				{Name: "NodeResourcesFit"}, {Name: "NodeResourcesBalancedAllocation"}}}},
		}},
		Extenders: []configv1.Extender{{
			URLPrefix: "http://127.0.0.1:8888", FilterVerb: "filter", PrioritizeVerb: "prioritize", BindVerb: "bind", PreemptVerb: "preempt",
			Weight: 25, HTTPTimeout: metav1.Duration{Duration: 3 * time.Second},
			NodeCacheCapable: true, Ignorable: false,
			ManagedResources: managed(annotations.DefaultResourceNames()),
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("KubeSchedulerConfiguration (-want +got):\n%s", diff)
	}
}

func TestSchedulerConfigurationFollowsValues(t *testing.T) {
	names := annotations.ResourceNames{GPU: "example.com/card", Mem: "example.com/card-mem", MemPercentage: "example.com/card-mem-pct", Cores: "example.com/card-cores"}
	r := render(t, map[string]any{
		"schedulerName":      "gpu-scheduler",
		"exactSchedulerName": "gpu-scheduler-all-nodes",
		"resourceNames":      map[string]any{"gpu": names.GPU, "gpumem": names.Mem, "gpumemPercentage": names.MemPercentage, "gpucores": names.Cores},
		"scheduler": map[string]any{
			"replicas":                 3,
			"inTreeResourceScores":     true,
			"percentageOfNodesToScore": 30,
			"leaderElection":           map[string]any{"resourceName": "gpu-lease"},
			"extender":                 map[string]any{"urlPrefix": "http://127.0.0.1:39999", "weight": 5, "httpTimeout": "750ms", "nodePolicy": "spread", "gpuPolicy": "frag-aware"},
		},
	})
	got := schedulerConfig(t, r)
	want := configv1.KubeSchedulerConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubescheduler.config.k8s.io/v1", Kind: "KubeSchedulerConfiguration"},
		LeaderElection: componentbaseconfigv1alpha1.LeaderElectionConfiguration{
			LeaderElect:  ptr.To(true), // 3 replicas > 1
			ResourceLock: "leases", ResourceName: "gpu-lease", ResourceNamespace: namespace,
		},
		Profiles: []configv1.KubeSchedulerProfile{{SchedulerName: ptr.To("gpu-scheduler"), PercentageOfNodesToScore: ptr.To[int32](30)},
			{SchedulerName: ptr.To("gpu-scheduler-all-nodes"), PercentageOfNodesToScore: ptr.To[int32](100)}},
		Extenders: []configv1.Extender{{
			URLPrefix: "http://127.0.0.1:39999", FilterVerb: "filter", PrioritizeVerb: "prioritize", BindVerb: "bind", PreemptVerb: "preempt",
			Weight: 5, HTTPTimeout: metav1.Duration{Duration: 750 * time.Millisecond},
			NodeCacheCapable: true, ManagedResources: managed(names),
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("KubeSchedulerConfiguration (-want +got):\n%s", diff)
	}
	d := get[*appsv1.Deployment](t, r, schedulerName)
	if *d.Spec.Replicas != 3 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("scheduler replicas = %d, strategy %q; want 3, RollingUpdate (leader election is on)", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	ext := flagsOf(t, container(t, d.Spec.Template.Spec, "extender").Args)
	wantExt := map[string]string{"scheduler-name": "gpu-scheduler", "exact-scheduler-name": "gpu-scheduler-all-nodes", "node-policy": "spread", "gpu-policy": "frag-aware",
		"resource-gpu": "example.com/card", "resource-gpumem": "example.com/card-mem",
		"resource-gpumem-percentage": "example.com/card-mem-pct", "resource-gpucores": "example.com/card-cores"}
	for k, v := range wantExt {
		if ext[k] != v {
			t.Errorf("extender --%s = %q, want %q", k, ext[k], v)
		}
	}
	role := get[*rbacv1.Role](t, r, schedulerName+"-leader-election")
	if !slices.Contains(role.Rules[1].ResourceNames, "gpu-lease") {
		t.Errorf("leader-election Role names %v, want the lease gpu-lease", role.Rules[1].ResourceNames)
	}
}

func TestSchedulerDeployment(t *testing.T) {
	r := render(t, nil)
	d := get[*appsv1.Deployment](t, r, schedulerName)
	spec := d.Spec.Template.Spec
	ks := container(t, spec, "kube-scheduler")
	if want := "registry.k8s.io/kube-scheduler:" + kubeVersion(t); ks.Image != want {
		t.Errorf("kube-scheduler image = %q, want the cluster's own version, %q", ks.Image, want)
	}
	if !slices.Contains(ks.Command, "--config=/etc/cardinal/scheduler/scheduler-config.yaml") {
		t.Errorf("kube-scheduler command %v lacks the generated --config", ks.Command)
	}
	ext := container(t, spec, "extender")
	if ext.Image != "ghcr.io/cardinal-gpu/scheduler-extender:0.1.0" {
		t.Errorf("extender image = %q, want the chart's appVersion tag", ext.Image)
	}
	flags := flagsOf(t, ext.Args)
	if flags["listen"] != "127.0.0.1:8888" {
		t.Errorf("extender --listen = %q, want loopback 127.0.0.1:8888", flags["listen"])
	}
	// Only the probe address is on the pod IP; the API (which writes pods) stays on loopback.
	if flags["probe-listen"] != ":8889" || len(ext.Ports) != 1 || ext.Ports[0].ContainerPort != 8889 {
		t.Errorf("extender --probe-listen = %q, ports %v; want :8889 and that one port", flags["probe-listen"], ext.Ports)
	}
	if ext.LivenessProbe == nil || ext.LivenessProbe.HTTPGet == nil || ext.LivenessProbe.HTTPGet.Path != "/healthz" ||
		ext.ReadinessProbe == nil || ext.ReadinessProbe.HTTPGet == nil || ext.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("extender probes: liveness %+v readiness %+v; want /healthz and /readyz on the probe port", ext.LivenessProbe, ext.ReadinessProbe)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q with one replica (no leader election), want Recreate: two schedulers must not run side by side", d.Spec.Strategy.Type)
	}
	if d.Spec.Template.Annotations["checksum/config"] == "" {
		t.Error("no checksum/config annotation: a new scheduler configuration would not restart kube-scheduler")
	}
	if got := spec.ServiceAccountName; got != "cardinal-scheduler" {
		t.Errorf("serviceAccountName = %q", got)
	}
}

// simulated are device-plugin values for simulate mode with one node of two cards.
var simulated = map[string]any{"simulate": map[string]any{"enabled": true, "config": map[string]any{
	"nodes": map[string]any{"node-a": []any{map[string]any{"model": "Tesla T4", "memoryMiB": 15360, "numa": 0, "count": 2}}}}}}

// TestBinariesGetOnlyAgreedFlags catches a misspelt or unknown flag before a binary refuses to start.
func TestBinariesGetOnlyAgreedFlags(t *testing.T) {
	r := render(t, map[string]any{"devicePlugin": simulated})
	pods := map[string]corev1.PodSpec{
		"extender":      get[*appsv1.Deployment](t, r, schedulerName).Spec.Template.Spec,
		"webhook":       get[*appsv1.Deployment](t, r, webhookName).Spec.Template.Spec,
		"device-plugin": get[*appsv1.DaemonSet](t, r, devicePluginName).Spec.Template.Spec,
	}
	for bin, spec := range pods {
		allowed := append(append([]string(nil), agreedFlags[bin]...), commonFlags...)
		flags := flagsOf(t, container(t, spec, bin).Args)
		for name := range flags {
			if !slices.Contains(allowed, name) {
				t.Errorf("%s gets --%s, which is not one of its flags %v", bin, name, allowed)
			}
		}
		for _, name := range commonFlags {
			if _, ok := flags[name]; !ok {
				t.Errorf("%s does not get --%s", bin, name)
			}
		}
	}
}

func TestWebhookConfigurationMatchesPackage(t *testing.T) {
	r := render(t, nil)
	got := get[*admissionregistrationv1.MutatingWebhookConfiguration](t, r, webhookName)
	if len(got.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(got.Webhooks))
	}
	opts := webhook.DefaultConfigurationOptions()
	opts.Name = webhookName
	opts.Namespace = namespace
	opts.Service = &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: webhookName, Path: ptr.To(webhook.Path), Port: ptr.To[int32](443)}
	opts.CABundle = got.Webhooks[0].ClientConfig.CABundle
	opts.TrustedUsers = []string{schedulerSA, devicePluginSA}
	want, err := webhook.MutatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatalf("pkg/webhook configuration: %v", err)
	}
	if diff := cmp.Diff(want.Webhooks, got.Webhooks); diff != "" {
		t.Errorf("webhooks differ from pkg/webhook's (-package +chart):\n%s", diff)
	}
	gotV := get[*admissionregistrationv1.ValidatingWebhookConfiguration](t, r, webhookName)
	wantV, err := webhook.ValidatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatalf("pkg/webhook configuration: %v", err)
	}
	if diff := cmp.Diff(wantV.Webhooks, gotV.Webhooks); diff != "" {
		t.Errorf("workload webhooks differ from pkg/webhook's (-package +chart):\n%s", diff)
	}
}

// TestBindingPolicyMatchesPackage: the chart's ValidatingAdmissionPolicy for Bindings is
// pkg/webhook.BindingPolicy's, with the release's trusted accounts.
func TestBindingPolicyMatchesPackage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		values  map[string]any
		trusted []string
	}{
		{"defaults", nil, []string{schedulerSA, devicePluginSA}},
		{"an extra trusted account and no device plugin", map[string]any{"devicePlugin": map[string]any{"enabled": false},
			"webhook": map[string]any{"trustedServiceAccounts": []string{"system:serviceaccount:ops:binder"}}},
			[]string{schedulerSA, "system:serviceaccount:ops:binder"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.values)
			opts := webhook.DefaultConfigurationOptions()
			opts.Name, opts.Namespace, opts.URL, opts.TrustedUsers = webhookName, namespace, "https://unused", tc.trusted
			wantPolicy, wantBinding, err := webhook.BindingPolicy(opts)
			if err != nil {
				t.Fatal(err)
			}
			got := get[*admissionregistrationv1.ValidatingAdmissionPolicy](t, r, webhookName+"-bindings")
			if diff := cmp.Diff(wantPolicy.Spec, got.Spec); diff != "" {
				t.Errorf("policy differs from pkg/webhook's (-package +chart):\n%s", diff)
			}
			gotBinding := get[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, r, webhookName+"-bindings")
			if diff := cmp.Diff(wantBinding.Spec, gotBinding.Spec); diff != "" {
				t.Errorf("policy binding differs from pkg/webhook's (-package +chart):\n%s", diff)
			}
		})
	}
}

func TestWebhookConfigurationFollowsValues(t *testing.T) {
	names := annotations.ResourceNames{GPU: "example.com/card", Mem: "example.com/mem", MemPercentage: "example.com/mem-pct", Cores: "example.com/cores"}
	r := render(t, map[string]any{
		"resourceNames": map[string]any{"gpu": names.GPU, "gpumem": names.Mem, "gpumemPercentage": names.MemPercentage, "gpucores": names.Cores},
		"devicePlugin":  map[string]any{"enabled": false},
		"webhook": map[string]any{
			"timeoutSeconds":         7,
			"trustedServiceAccounts": []string{"system:serviceaccount:ops:annotator"},
			"uncheckedBinders":       []string{"system:serviceaccount:kube-system:other-scheduler"},
			"deviceEnvNamespaces":    []string{"ops", "monitoring"},
			"clientConfig":           map[string]any{"url": "https://127.0.0.1:9443/mutate-pods", "caBundle": "Q0E="},
		},
	})
	got := get[*admissionregistrationv1.MutatingWebhookConfiguration](t, r, webhookName)
	opts := webhook.ConfigurationOptions{
		Name: webhookName, Namespace: namespace, URL: "https://127.0.0.1:9443/mutate-pods", CABundle: []byte("CA"),
		Resources: names, TimeoutSeconds: 7, DeviceEnvNamespaces: []string{"ops", "monitoring"},
		UncheckedBinders: []string{"system:serviceaccount:kube-system:other-scheduler"},
		// The device plugin is off: only the scheduler and the extra account are trusted.
		TrustedUsers: []string{schedulerSA, "system:serviceaccount:ops:annotator"},
	}
	want, err := webhook.MutatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatalf("pkg/webhook configuration: %v", err)
	}
	if diff := cmp.Diff(want.Webhooks, got.Webhooks); diff != "" {
		t.Errorf("webhooks differ from pkg/webhook's (-package +chart):\n%s", diff)
	}
	wantV, err := webhook.ValidatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatalf("pkg/webhook configuration: %v", err)
	}
	if diff := cmp.Diff(wantV.Webhooks, get[*admissionregistrationv1.ValidatingWebhookConfiguration](t, r, webhookName).Webhooks); diff != "" {
		t.Errorf("workload webhooks differ from pkg/webhook's (-package +chart):\n%s", diff)
	}
	args := flagsOf(t, container(t, get[*appsv1.Deployment](t, r, webhookName).Spec.Template.Spec, "webhook").Args)
	if want := schedulerSA + ",system:serviceaccount:ops:annotator"; args["trusted-service-accounts"] != want {
		t.Errorf("--trusted-service-accounts = %q, want %q", args["trusted-service-accounts"], want)
	}
	if want := "ops,monitoring"; args["device-env-namespaces"] != want {
		t.Errorf("--device-env-namespaces = %q, want %q", args["device-env-namespaces"], want)
	}
	if r.has("DaemonSet", devicePluginName) || r.has("ClusterRole", devicePluginName) || r.has("ServiceAccount", devicePluginName) {
		t.Errorf("devicePlugin.enabled=false still renders device-plugin objects: %v", r.keys())
	}
}

// TestWebhookTLSChartGenerated checks the chart's own CA: the webhook configuration trusts it and
// the Secret's certificate is valid for the Service's DNS name.
func TestWebhookTLSChartGenerated(t *testing.T) {
	helmMode := map[string]any{"webhook": map[string]any{"certificates": map[string]any{"mode": "helm"}}}
	r := render(t, helmMode)
	secret := get[*corev1.Secret](t, r, webhookName+"-tls")
	mwc := get[*admissionregistrationv1.MutatingWebhookConfiguration](t, r, webhookName)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle) {
		t.Fatalf("caBundle holds no PEM certificate: %q", mwc.Webhooks[0].ClientConfig.CABundle)
	}
	block, _ := pem.Decode(secret.Data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("tls.crt: %v", err)
	}
	// The apiserver dials <service>.<namespace>.svc.
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: webhookName + "." + namespace + ".svc", Roots: roots}); err != nil {
		t.Errorf("the serving certificate does not verify against caBundle: %v", err)
	}
	if got := cert.NotAfter.Sub(cert.NotBefore); got < 364*24*time.Hour || got > 366*24*time.Hour {
		t.Errorf("certificate valid for %s, want about 365 days (webhook.certificates.helm.validityDays)", got)
	}
	dep := get[*appsv1.Deployment](t, r, webhookName)
	if dep.Spec.Template.Annotations["checksum/tls"] == "" {
		t.Error("no checksum/tls annotation: a rotated certificate would not roll the webhook pods")
	}
	if r2 := render(t, helmMode); string(get[*corev1.Secret](t, r2, webhookName+"-tls").Data["ca.crt"]) == string(secret.Data["ca.crt"]) {
		t.Error("two renderings produced the same CA; the chart must rotate it at every upgrade")
	}
}

func TestWebhookTLSCertManager(t *testing.T) {
	for _, tc := range []struct {
		name       string
		values     map[string]any
		extra      []string
		wantIssuer bool // the chart's own CA (self-signed Issuer, CA Certificate, CA Issuer)
	}{
		{name: "the chart's own CA", values: map[string]any{"webhook": map[string]any{"certificates": map[string]any{"mode": "cert-manager"}}}, wantIssuer: true},
		{name: "existing ClusterIssuer", values: map[string]any{"webhook": map[string]any{"certificates": map[string]any{
			"mode": "cert-manager", "certManager": map[string]any{"issuerRef": map[string]any{"kind": "ClusterIssuer", "name": "corp-ca"}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.values, tc.extra...)
			if r.has("Secret", webhookName+"-tls") {
				t.Error("the chart renders the TLS Secret itself in cert-manager mode")
			}
			cert := get[*unstructured.Unstructured](t, r, webhookName)
			if cert.GetKind() != "Certificate" {
				t.Fatalf("object %s is a %s, want a Certificate", webhookName, cert.GetKind())
			}
			secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
			if secretName != webhookName+"-tls" {
				t.Errorf("Certificate secretName = %q, want the Secret the webhook mounts", secretName)
			}
			dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
			if !slices.Contains(dns, webhookName+"."+namespace+".svc") {
				t.Errorf("Certificate dnsNames %v lack the Service name", dns)
			}
			if got := r.has("Issuer", webhookName+"-selfsigned"); got != tc.wantIssuer {
				t.Errorf("self-signed Issuer rendered = %v, want %v", got, tc.wantIssuer)
			}
			// The serving certificate comes from a CA Issuer, never from the self-signed one: the CA the
			// injector copies then outlives each serving certificate.
			issuer, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
			if tc.wantIssuer {
				if issuer["name"] != webhookName+"-ca" {
					t.Errorf("serving Certificate issuerRef = %v, want the chart's CA Issuer %s-ca", issuer, webhookName)
				}
				if !r.has("Certificate", webhookName+"-ca") || !r.has("Issuer", webhookName+"-ca") {
					t.Errorf("no CA Certificate and CA Issuer %s-ca in %v", webhookName, r.keys())
				}
				for _, o := range all[*unstructured.Unstructured](r) {
					if o.GetName() != webhookName+"-ca" {
						continue
					}
					switch o.GetKind() {
					case "Certificate":
						if isCA, _, _ := unstructured.NestedBool(o.Object, "spec", "isCA"); !isCA {
							t.Error("the chart's CA Certificate is not isCA")
						}
					case "Issuer":
						if secret, _, _ := unstructured.NestedString(o.Object, "spec", "ca", "secretName"); secret != webhookName+"-ca" {
							t.Errorf("CA Issuer reads %q, want the CA Certificate's Secret", secret)
						}
					}
				}
			} else if issuer["kind"] != "ClusterIssuer" || issuer["name"] != "corp-ca" {
				t.Errorf("serving Certificate issuerRef = %v, want the given ClusterIssuer", issuer)
			}
			if dep := get[*appsv1.Deployment](t, r, webhookName); flagsOf(t, container(t, dep.Spec.Template.Spec, "webhook").Args)["cert-dir"] == "" {
				t.Error("the webhook does not read the certificate cert-manager writes (--cert-dir)")
			}
			mwc := get[*admissionregistrationv1.MutatingWebhookConfiguration](t, r, webhookName)
			if got, want := mwc.Annotations["cert-manager.io/inject-ca-from"], namespace+"/"+webhookName; got != want {
				t.Errorf("inject-ca-from = %q, want %q", got, want)
			}
			if len(mwc.Webhooks[0].ClientConfig.CABundle) != 0 {
				t.Error("caBundle set by the chart; cert-manager's CA injector owns it")
			}
		})
	}
}

func TestWebhookDeployment(t *testing.T) {
	r := render(t, nil)
	d := get[*appsv1.Deployment](t, r, webhookName)
	if *d.Spec.Replicas != 2 {
		t.Errorf("webhook replicas = %d, want 2", *d.Spec.Replicas)
	}
	if mu := d.Spec.Strategy.RollingUpdate.MaxUnavailable; mu == nil || mu.IntValue() != 0 {
		t.Errorf("maxUnavailable = %v, want 0", mu)
	}
	pdb := get[*policyv1.PodDisruptionBudget](t, r, webhookName)
	if pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB minAvailable = %v, want 1", pdb.Spec.MinAvailable)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("PDB selector %v does not select the webhook pods %v (%v)", pdb.Spec.Selector, podLabels, err)
	}
	svc := get[*corev1.Service](t, r, webhookName)
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service selector %v does not select the webhook pods %v", svc.Spec.Selector, podLabels)
	}
	c := container(t, d.Spec.Template.Spec, "webhook")
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, sp := range svc.Spec.Ports {
		if _, ok := ports[sp.TargetPort.String()]; !ok {
			t.Errorf("Service port %s targets %q, which the container does not name (%v)", sp.Name, sp.TargetPort.String(), ports)
		}
	}
	flags := flagsOf(t, c.Args)
	want := map[string]string{"listen": ":9443", "health-listen": ":8081", "metrics-listen": ":8080",
		"scheduler-name": "cardinal-scheduler", "exact-scheduler-name": "cardinal-scheduler-exact", "trusted-service-accounts": schedulerSA + "," + devicePluginSA,
		"device-env-namespaces": "gpu-operator"}
	for k, v := range want {
		if flags[k] != v {
			t.Errorf("webhook --%s = %q, want %q", k, flags[k], v)
		}
	}
	if ports["https"] != 9443 {
		t.Errorf("container port https = %d, want 9443 (--listen)", ports["https"])
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port.String() != "health" {
		t.Errorf("readiness probe %+v, want /readyz on the health port", c.ReadinessProbe)
	}
}

func TestDevicePluginDaemonSet(t *testing.T) {
	t.Run("real NVML", func(t *testing.T) {
		r := render(t, nil)
		ds := get[*appsv1.DaemonSet](t, r, devicePluginName)
		spec := ds.Spec.Template.Spec
		if diff := cmp.Diff(map[string]string{"nvidia.com/gpu.present": "true"}, spec.NodeSelector); diff != "" {
			t.Errorf("nodeSelector (-want +got):\n%s", diff)
		}
		hostPaths := map[string]string{}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				hostPaths[v.Name] = v.HostPath.Path
			}
		}
		wantPaths := map[string]string{"device-plugins": "/var/lib/kubelet/device-plugins", "pod-resources": "/var/lib/kubelet/pod-resources", "cgroup": "/sys/fs/cgroup"}
		if diff := cmp.Diff(wantPaths, hostPaths); diff != "" {
			t.Errorf("hostPath volumes (-want +got):\n%s", diff)
		}
		c := container(t, spec, "device-plugin")
		flags := flagsOf(t, c.Args)
		want := map[string]string{"node-name": "$(NODE_NAME)", "device-plugin-dir": "/var/lib/kubelet/device-plugins",
			"pod-resources-socket": "/var/lib/kubelet/pod-resources/kubelet.sock", "scheduler-name": "cardinal-scheduler", "exact-scheduler-name": "cardinal-scheduler-exact", "shares": "1", "topology": "true", "listen": ":9400",
			"health-ignored-xids": "13,31,43,45,68,109", "health-reset-xids": "48,63,64,74,79,94,95,119,120",
			"device-list-strategy": "envvar", "sharing-mode": "none", "kernel-memory-limits": "true", "cgroup-root": "/host/cgroup"}
		if diff := cmp.Diff(want, flags, cmpopts.IgnoreMapEntries(func(k, _ string) bool { return slices.Contains(commonFlags, k) })); diff != "" {
			t.Errorf("device-plugin flags (-want +got):\n%s", diff)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
		}
		if e := env["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
			t.Errorf("NODE_NAME = %+v, want the downward API spec.nodeName", e)
		}
		if env["NVIDIA_VISIBLE_DEVICES"].Value != "all" || env["NVIDIA_DRIVER_CAPABILITIES"].Value != "utility" {
			t.Errorf("NVIDIA container toolkit env = %v, want all/utility", env)
		}
		if r.has("ConfigMap", devicePluginName+"-simulated-nvml") {
			t.Error("simulated-NVML ConfigMap rendered with simulate off")
		}
	})
	t.Run("dynamic MIG", func(t *testing.T) {
		r := render(t, map[string]any{"devicePlugin": map[string]any{"mig": map[string]any{"dynamicProfiles": []any{"1g.10gb", "3g.40gb", "1g.10gb+me"}}}})
		c := container(t, get[*appsv1.DaemonSet](t, r, devicePluginName).Spec.Template.Spec, "device-plugin")
		if got := flagsOf(t, c.Args)["mig-dynamic-profiles"]; got != "1g.10gb,3g.40gb,1g.10gb+me" {
			t.Errorf("--mig-dynamic-profiles = %q, want the allow-list", got)
		}
		config := false
		for _, e := range c.Env {
			config = config || (e.Name == "NVIDIA_MIG_CONFIG_DEVICES" && e.Value == "all")
		}
		if !config || c.SecurityContext.Capabilities == nil || !slices.Contains(c.SecurityContext.Capabilities.Add, "SYS_ADMIN") {
			t.Errorf("dynamic MIG on real cards: env %v, capabilities %+v; want NVIDIA_MIG_CONFIG_DEVICES=all and SYS_ADMIN", c.Env, c.SecurityContext.Capabilities)
		}
	})
	t.Run("simulated NVML", func(t *testing.T) {
		nodes := map[string]any{"node-a": []any{map[string]any{"model": "NVIDIA A100-SXM4-80GB", "memoryMiB": 81920, "numa": 0, "count": 4}}}
		r := render(t, map[string]any{"devicePlugin": map[string]any{
			"nodeSelector": map[string]any{"cardinal.io/simulated": "true"}, "shares": 4,
			"simulate": map[string]any{"enabled": true, "config": map[string]any{"nodes": nodes}},
		}})
		ds := get[*appsv1.DaemonSet](t, r, devicePluginName)
		c := container(t, ds.Spec.Template.Spec, "device-plugin")
		flags := flagsOf(t, c.Args)
		if flags["simulate"] != "/etc/cardinal/simulate/nvml.yaml" || flags["shares"] != "4" {
			t.Errorf("--simulate = %q, --shares = %q", flags["simulate"], flags["shares"])
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "NVIDIA_") {
				t.Errorf("simulate mode still sets %s", e.Name)
			}
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || (m.MountPath == "/etc/cardinal/simulate" && m.SubPath == "")
		}
		if !mounted {
			t.Errorf("the simulated-NVML directory is not mounted (without subPath): %+v", c.VolumeMounts)
		}
		// The device plugin's own parser reads the file the chart writes.
		cm := get[*corev1.ConfigMap](t, r, devicePluginName+"-simulated-nvml")
		file, err := sim.Parse([]byte(cm.Data["nvml.yaml"]))
		if err != nil {
			t.Fatalf("nvml.yaml: %v\n%s", err, cm.Data["nvml.yaml"])
		}
		cards, err := file.Cards("node-a")
		if err != nil || len(cards) != 4 || cards[3].Model != "NVIDIA A100-SXM4-80GB" || cards[3].NUMA != 0 {
			t.Errorf("node-a cards = %+v (%v), want the 4 A100s on NUMA 0 of the values", cards, err)
		}
	})
}

// TestSecurityContexts: every container drops all capabilities, cannot escalate and has a read-only
// root; all but the device plugin (which writes into root-owned kubelet directories) run as non-root.
func TestSecurityContexts(t *testing.T) {
	r := render(t, nil)
	pods := map[string]corev1.PodSpec{
		schedulerName:    get[*appsv1.Deployment](t, r, schedulerName).Spec.Template.Spec,
		webhookName:      get[*appsv1.Deployment](t, r, webhookName).Spec.Template.Spec,
		devicePluginName: get[*appsv1.DaemonSet](t, r, devicePluginName).Spec.Template.Spec,
	}
	for name, spec := range pods {
		nonRoot := spec.SecurityContext != nil && ptr.Deref(spec.SecurityContext.RunAsNonRoot, false)
		if wantNonRoot := name != devicePluginName; nonRoot != wantNonRoot {
			t.Errorf("%s: runAsNonRoot = %v, want %v", name, nonRoot, wantNonRoot)
		}
		for _, c := range spec.Containers {
			sc := c.SecurityContext
			switch {
			case sc == nil:
				t.Errorf("%s/%s: no securityContext", name, c.Name)
			case !ptr.Deref(sc.ReadOnlyRootFilesystem, false), ptr.Deref(sc.AllowPrivilegeEscalation, true),
				ptr.Deref(sc.Privileged, false), sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
				t.Errorf("%s/%s: securityContext %+v, want read-only root, no escalation, not privileged, drop ALL", name, c.Name, sc)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s/%s: resources %+v, want cpu and memory requests and a memory limit", name, c.Name, c.Resources)
			}
		}
	}
}

// TestRBAC pins every rule of every role: a new verb has to be added here and to the README.
func TestRBAC(t *testing.T) {
	r := render(t, nil)
	rule := func(groups, resources, verbs []string, names ...string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: groups, Resources: resources, Verbs: verbs, ResourceNames: names}
	}
	core, events := []string{""}, []string{"", "events.k8s.io"}
	wantCluster := map[string][]rbacv1.PolicyRule{
		schedulerName + "-extender": {
			rule(core, []string{"nodes"}, []string{"get", "list", "watch"}),
			// No pod write: the assignment travels on the Binding.
			rule(core, []string{"pods"}, []string{"get", "list", "watch"}),
			// --filter-shortlist: a pod a Service selects gets every fitting node.
			rule(core, []string{"services"}, []string{"list", "watch"}),
			// Preempt verb: victims whose eviction no budget forbids first.
			rule([]string{"policy"}, []string{"poddisruptionbudgets"}, []string{"list", "watch"}),
			rule(core, []string{"pods/binding"}, []string{"create"}),
			rule(events, []string{"events"}, []string{"create", "patch"}),
		},
		webhookName: {
			rule(core, []string{"nodes"}, []string{"get", "list", "watch"}),
			// The pod a Binding names (bindings.webhook.cardinal.io): get only, no list or watch.
			rule(core, []string{"pods"}, []string{"get"}),
			// Self-managed certificates: the caBundle of its own two configurations, nothing else.
			rule([]string{"admissionregistration.k8s.io"}, []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"},
				[]string{"get", "update"}, webhookName),
		},
		devicePluginName: {
			rule(core, []string{"nodes"}, []string{"get", "list", "watch", "patch"}),
			rule(core, []string{"pods"}, []string{"get", "list", "watch", "patch"}),
			// A pod started with another container's devices is evicted to be placed again.
			rule(core, []string{"pods/eviction"}, []string{"create"}),
			rule(events, []string{"events"}, []string{"create", "patch"}),
		},
	}
	gotCluster := map[string][]rbacv1.PolicyRule{}
	for _, cr := range all[*rbacv1.ClusterRole](r) {
		gotCluster[cr.Name] = cr.Rules
	}
	if diff := cmp.Diff(wantCluster, gotCluster); diff != "" {
		t.Errorf("ClusterRoles (-want +got):\n%s", diff)
	}
	wantRole := []rbacv1.PolicyRule{
		rule([]string{"coordination.k8s.io"}, []string{"leases"}, []string{"create"}),
		rule([]string{"coordination.k8s.io"}, []string{"leases"}, []string{"get", "update"}, "cardinal-scheduler"),
	}
	if diff := cmp.Diff(wantRole, get[*rbacv1.Role](t, r, schedulerName+"-leader-election").Rules); diff != "" {
		t.Errorf("leader-election Role (-want +got):\n%s", diff)
	}
	// create cannot be restricted by name in RBAC (the object does not exist yet): a policy restricts it.
	wantCerts := []rbacv1.PolicyRule{
		rule(core, []string{"secrets"}, []string{"get", "update"}, webhookName+"-certs"),
		rule(core, []string{"secrets"}, []string{"create"}),
	}
	if diff := cmp.Diff(wantCerts, get[*rbacv1.Role](t, r, webhookName+"-certs").Rules); diff != "" {
		t.Errorf("webhook certificates Role (-want +got):\n%s", diff)
	}
	certsPolicy := get[*admissionregistrationv1.ValidatingAdmissionPolicy](t, r, webhookName+"-certs")
	if got, want := certsPolicy.Spec.Validations[0].Expression, "request.namespace == '"+namespace+"' && object.metadata.name == '"+webhookName+"-certs'"; got != want {
		t.Errorf("certificates policy: %q, want %q", got, want)
	}
	if !r.has("ValidatingAdmissionPolicyBinding", webhookName+"-certs") {
		t.Error("the certificates policy is not bound")
	}
	// Every binding names a rendered ServiceAccount of the release, and a rendered or built-in role.
	sas := map[string]bool{}
	for _, sa := range all[*corev1.ServiceAccount](r) {
		sas[sa.Namespace+"/"+sa.Name] = true
	}
	builtin := map[string]bool{"system:kube-scheduler": true, "system:volume-scheduler": true, "extension-apiserver-authentication-reader": true}
	type binding struct {
		name     string
		role     rbacv1.RoleRef
		subjects []rbacv1.Subject
	}
	var bindings []binding
	for _, b := range all[*rbacv1.ClusterRoleBinding](r) {
		bindings = append(bindings, binding{b.Name, b.RoleRef, b.Subjects})
	}
	for _, b := range all[*rbacv1.RoleBinding](r) {
		bindings = append(bindings, binding{b.Name, b.RoleRef, b.Subjects})
	}
	// Scheduler 5 (system:kube-scheduler, system:volume-scheduler, extender, lease, authentication
	// reader) + webhook 2 (nodes and configurations; its certificates Secret) + device plugin 1 = 8.
	if len(bindings) != 8 {
		t.Errorf("%d bindings, want 8", len(bindings))
	}
	for _, b := range bindings {
		if !builtin[b.role.Name] && !r.has(b.role.Kind, b.role.Name) {
			t.Errorf("binding %s refers to %s %s, which is neither rendered nor built in", b.name, b.role.Kind, b.role.Name)
		}
		for _, s := range b.subjects {
			if s.Kind != "ServiceAccount" || !sas[s.Namespace+"/"+s.Name] {
				t.Errorf("binding %s: subject %+v is not a ServiceAccount of the release", b.name, s)
			}
		}
	}
}

// TestConfigurationsPolicyComparesEveryField: the policy that leaves the webhook only the caBundle of
// its configurations compares every other field of a webhook, of both kinds: a field a newer
// k8s.io/api adds fails this test until the policy compares it too.
func TestConfigurationsPolicyComparesEveryField(t *testing.T) {
	r := render(t, nil)
	policy := get[*admissionregistrationv1.ValidatingAdmissionPolicy](t, r, webhookName+"-configurations")
	var cel strings.Builder
	for _, v := range policy.Spec.Validations {
		cel.WriteString(v.Expression + "\n")
	}
	jsonFields := func(v any) []string {
		var out []string
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			out = append(out, strings.Split(typ.Field(i).Tag.Get("json"), ",")[0])
		}
		return out
	}
	compared := func(prefix, field string) {
		if want := strings.ReplaceAll("w.PREFIX?FIELD == o.PREFIX?FIELD", "PREFIX", prefix); !strings.Contains(cel.String(), strings.ReplaceAll(want, "FIELD", field)) {
			t.Errorf("the configurations policy does not compare %s%s", prefix, field)
		}
	}
	for _, f := range slices.Concat(jsonFields(admissionregistrationv1.MutatingWebhook{}), jsonFields(admissionregistrationv1.ValidatingWebhook{})) {
		switch f {
		case "name": // the key the webhooks are matched by
		case "clientConfig":
			for _, c := range jsonFields(admissionregistrationv1.WebhookClientConfig{}) {
				if c != "caBundle" {
					compared("clientConfig.", c)
				}
			}
		default:
			compared("", f)
		}
	}
	for _, f := range []string{"labels", "annotations", "ownerReferences", "finalizers"} {
		if want := "object.metadata.?" + f + " == oldObject.metadata.?" + f; !strings.Contains(cel.String(), want) {
			t.Errorf("the configurations policy does not compare metadata.%s", f)
		}
	}
	if !r.has("ValidatingAdmissionPolicyBinding", webhookName+"-configurations") {
		t.Error("the configurations policy is not bound")
	}
	// Without self-managed certificates the webhook has no write on its configurations, and no policy.
	if r := render(t, map[string]any{"webhook": map[string]any{"certificates": map[string]any{"mode": "helm"}}}); r.has("ValidatingAdmissionPolicy", webhookName+"-configurations") {
		t.Error("the configurations policy is rendered in helm mode")
	}
}

func TestServiceMonitorsOptional(t *testing.T) {
	if r := render(t, nil); len(all[*unstructured.Unstructured](r)) != 0 {
		t.Errorf("default rendering has non-core objects %v; ServiceMonitors must be opt-in", r.keys())
	}
	r := render(t, map[string]any{
		"webhook":      map[string]any{"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}}},
		"devicePlugin": map[string]any{"serviceMonitor": map[string]any{"enabled": true}},
	})
	for _, name := range []string{webhookName, devicePluginName} {
		sm := get[*unstructured.Unstructured](t, r, name)
		if sm.GetKind() != "ServiceMonitor" {
			t.Fatalf("%s is a %s", name, sm.GetKind())
		}
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" {
			t.Errorf("%s endpoints = %v, want the metrics port", name, eps)
		}
	}
	if got := get[*unstructured.Unstructured](t, r, webhookName).GetLabels()["release"]; got != "prom" {
		t.Errorf("ServiceMonitor label release = %q, want prom", got)
	}
	svc := get[*corev1.Service](t, r, devicePluginName+"-metrics")
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("device-plugin metrics Service clusterIP = %q, want headless", svc.Spec.ClusterIP)
	}
}

func TestNodeRestrictionPolicyNeedsTheAPI(t *testing.T) {
	// helm template reports the API versions of its built-in Kubernetes version (1.34 here), which
	// serves ValidatingAdmissionPolicy; --kube-version 1.29 predates its GA.
	if r := render(t, nil); !r.has("ValidatingAdmissionPolicy", devicePluginName+"-node-restriction") || !r.has("ValidatingAdmissionPolicyBinding", devicePluginName+"-node-restriction") {
		t.Errorf("no node-restriction policy and binding in %v", r.keys())
	}
	if r := render(t, map[string]any{"devicePlugin": map[string]any{"nodeRestriction": map[string]any{"enabled": false}}}); r.has("ValidatingAdmissionPolicy", devicePluginName+"-node-restriction") {
		t.Error("nodeRestriction.enabled=false still renders the policy")
	}
}

func TestInvalidValuesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"unknown node policy", map[string]any{"scheduler": map[string]any{"extender": map[string]any{"nodePolicy": "random"}}}, `/scheduler/extender/nodePolicy': value must be one of`},
		{"unknown gpu policy", map[string]any{"scheduler": map[string]any{"extender": map[string]any{"gpuPolicy": "first"}}}, `/scheduler/extender/gpuPolicy': value must be one of`},
		{"log format", map[string]any{"log": map[string]any{"format": "text"}}, `/log/format': value must be one of`},
		{"zero replicas", map[string]any{"scheduler": map[string]any{"replicas": 0}}, "/scheduler/replicas': minimum: got 0, want 1"},
		{"certificates mode", map[string]any{"webhook": map[string]any{"certificates": map[string]any{"mode": "manual"}}}, `/webhook/certificates/mode': value must be one of`},
		{"the old webhook.tls", map[string]any{"webhook": map[string]any{"tls": map[string]any{"mode": "helm"}}}, `/webhook': additional properties 'tls' not allowed`},
		{"failure policy", map[string]any{"webhook": map[string]any{"failurePolicy": "Retry"}}, `/webhook/failurePolicy': value must be one of`},
		{"timeout 31s", map[string]any{"webhook": map[string]any{"timeoutSeconds": 31}}, "/webhook/timeoutSeconds': maximum: got 31, want 30"},
		{"url without CA", map[string]any{"webhook": map[string]any{"clientConfig": map[string]any{"url": "https://127.0.0.1:9443/mutate-pods"},
			"certificates": map[string]any{"mode": "helm"}}}, "caBundle is required"},
		{"http url", map[string]any{"webhook": map[string]any{"clientConfig": map[string]any{"url": "http://x", "caBundle": "Q0E="}}}, "/webhook/clientConfig/url': 'http://x' does not match"},
		{"unqualified resource", map[string]any{"resourceNames": map[string]any{"gpu": "gpu"}}, `/resourceNames/gpu': 'gpu' does not match`},
		{"same resource twice", map[string]any{"resourceNames": map[string]any{"gpucores": "nvidia.com/gpu"}}, "every name must be different"},
		{"zero shares", map[string]any{"devicePlugin": map[string]any{"shares": 0}}, "/devicePlugin/shares': minimum: got 0, want 1"},
		{"simulate without cards", map[string]any{"devicePlugin": map[string]any{"simulate": map[string]any{"enabled": true}}}, "simulate.config.nodes is empty"},
		{"webhook.path", map[string]any{"webhook": map[string]any{"path": "/admit"}}, "/webhook': additional properties 'path' not allowed"},
		{"a PDB that blocks drains", map[string]any{"webhook": map[string]any{"replicas": 1}},
			"webhook.podDisruptionBudget.minAvailable: 1 with webhook.replicas 1 lets no webhook pod be evicted, which blocks every node drain"},
		{"a PDB of 100%", map[string]any{"webhook": map[string]any{"podDisruptionBudget": map[string]any{"minAvailable": "100%"}}},
			"webhook.podDisruptionBudget.minAvailable: 100% with webhook.replicas 2"},
		// The disruption controller rounds up: 51% of 2 pods is 2 pods.
		{"a PDB percentage that rounds up to every replica", map[string]any{"webhook": map[string]any{"podDisruptionBudget": map[string]any{"minAvailable": "51%"}}},
			"webhook.podDisruptionBudget.minAvailable: 51% with webhook.replicas 2 (51% of 2 rounds up to 2) lets no webhook pod be evicted"},
		{"a PDB percentage of 3 replicas that rounds up to 3", map[string]any{"webhook": map[string]any{"replicas": 3, "podDisruptionBudget": map[string]any{"minAvailable": "67%"}}},
			"webhook.podDisruptionBudget.minAvailable: 67% with webhook.replicas 3 (67% of 3 rounds up to 3)"},
		{"a PDB count above the replicas", map[string]any{"webhook": map[string]any{"podDisruptionBudget": map[string]any{"minAvailable": 3}}},
			"webhook.podDisruptionBudget.minAvailable: 3 with webhook.replicas 2 lets no webhook pod be evicted"},
		{"the scheduler as the default account", map[string]any{"scheduler": map[string]any{"serviceAccount": map[string]any{"create": false}}},
			`scheduler.serviceAccount: with create=false and name "" the scheduler would run as the namespace's default ServiceAccount`},
		{"the device plugin named default", map[string]any{"devicePlugin": map[string]any{"serviceAccount": map[string]any{"name": "default"}}},
			`devicePlugin.serviceAccount: with create=true and name "default"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := renderErr(t, tc.values); !strings.Contains(got, tc.want) {
				t.Errorf("error %q does not contain %q", got, tc.want)
			}
		})
	}
}

func TestHelmLint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
	}{
		{"defaults", nil},
		{"simulate and monitors", map[string]any{
			"devicePlugin": map[string]any{"simulate": simulated["simulate"], "serviceMonitor": map[string]any{"enabled": true}},
			"webhook":      map[string]any{"serviceMonitor": map[string]any{"enabled": true}, "certificates": map[string]any{"mode": "cert-manager"}},
			"scheduler":    map[string]any{"replicas": 2},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helm(t, nil, append([]string{"lint", "--strict", chartDir, "--namespace", namespace, "--kube-version", kubeVersion(t)}, valuesFile(t, tc.values)...)...)
			if err != nil {
				t.Fatalf("%v", err)
			}
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

// TestWebhookValuesThatRender: the combinations next to the refused ones that must still render.
func TestWebhookValuesThatRender(t *testing.T) {
	r := render(t, map[string]any{"webhook": map[string]any{"replicas": 1, "podDisruptionBudget": map[string]any{"enabled": false}}})
	if r.has("PodDisruptionBudget", webhookName) {
		t.Error("podDisruptionBudget.enabled=false still renders the budget")
	}
	r = render(t, map[string]any{"webhook": map[string]any{"replicas": 3, "podDisruptionBudget": map[string]any{"minAvailable": 2}}})
	if got := get[*policyv1.PodDisruptionBudget](t, r, webhookName).Spec.MinAvailable.IntValue(); got != 2 {
		t.Errorf("minAvailable = %d, want 2", got)
	}
	// Percentages that leave one pod to evict: 50% of 2 is 1, 66% of 3 rounds up to 2.
	for _, v := range []struct {
		replicas int
		pct      string
	}{{2, "50%"}, {3, "66%"}, {2, "0%"}} {
		r = render(t, map[string]any{"webhook": map[string]any{"replicas": v.replicas, "podDisruptionBudget": map[string]any{"minAvailable": v.pct}}})
		if got := get[*policyv1.PodDisruptionBudget](t, r, webhookName).Spec.MinAvailable.String(); got != v.pct {
			t.Errorf("%s of %d: minAvailable = %s, want the percentage as given", v.pct, v.replicas, got)
		}
	}
	// An account the user names and manages is the one the scheduler runs as, and trusted as such.
	r = render(t, map[string]any{"scheduler": map[string]any{"serviceAccount": map[string]any{"create": false, "name": "sched"}}})
	args := flagsOf(t, container(t, get[*appsv1.Deployment](t, r, webhookName).Spec.Template.Spec, "webhook").Args)
	if want := "system:serviceaccount:" + namespace + ":sched," + devicePluginSA; args["trusted-service-accounts"] != want {
		t.Errorf("--trusted-service-accounts = %q, want %q", args["trusted-service-accounts"], want)
	}
}

// Issue 21 item 5: a shortlisted pod reaches kube-scheduler with one node and skips its scores, so
// with scheduler.inTreeResourceScores the shortlist is off whatever filterShortlist says; without
// it, filterShortlist is rendered as given.
func TestInTreeResourceScoresTurnShortlistOff(t *testing.T) {
	for _, c := range []struct {
		inTree bool
		want   string
	}{{true, "0"}, {false, "3"}} {
		r := render(t, map[string]any{"scheduler": map[string]any{
			"inTreeResourceScores": c.inTree,
			"extender":             map[string]any{"filterShortlist": 3},
		}})
		d := get[*appsv1.Deployment](t, r, schedulerName)
		if got := flagsOf(t, container(t, d.Spec.Template.Spec, "extender").Args)["filter-shortlist"]; got != c.want {
			t.Errorf("inTreeResourceScores=%v, filterShortlist 3: --filter-shortlist=%s, want %s", c.inTree, got, c.want)
		}
		if in := slices.ContainsFunc(schedulerConfig(t, r).Profiles, func(p configv1.KubeSchedulerProfile) bool { return p.Plugins == nil }); in != c.inTree {
			t.Errorf("inTreeResourceScores=%v: profile keeps the in-tree scores = %v", c.inTree, in)
		}
	}
}

// TestMIGMonitor: devicePlugin.mig.monitor gives the plugin what NVML's GPU-instance queries need on
// a real node (the toolkit's MIG monitor capability and SYS_ADMIN) and nothing else changes; off by
// default and never in simulate mode.
func TestMIGMonitor(t *testing.T) {
	plugin := func(values map[string]any) corev1.Container {
		return get[*appsv1.DaemonSet](t, render(t, values), devicePluginName).Spec.Template.Spec.Containers[0]
	}
	monitor := func(c corev1.Container) (env, sysAdmin bool) {
		for _, e := range c.Env {
			env = env || (e.Name == "NVIDIA_MIG_MONITOR_DEVICES" && e.Value == "all")
		}
		sc := c.SecurityContext
		sysAdmin = sc != nil && sc.Capabilities != nil && slices.Contains(sc.Capabilities.Add, "SYS_ADMIN")
		if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || ptr.Deref(sc.Privileged, false) {
			t.Errorf("securityContext %+v: want drop ALL and not privileged whatever mig.monitor says", sc)
		}
		return env, sysAdmin
	}
	if env, admin := monitor(plugin(nil)); env || admin {
		t.Errorf("default: NVIDIA_MIG_MONITOR_DEVICES %v, SYS_ADMIN %v; want neither", env, admin)
	}
	on := map[string]any{"devicePlugin": map[string]any{"mig": map[string]any{"monitor": true}}}
	if env, admin := monitor(plugin(on)); !env || !admin {
		t.Errorf("mig.monitor=true: NVIDIA_MIG_MONITOR_DEVICES %v, SYS_ADMIN %v; want both", env, admin)
	}
	sim := map[string]any{"devicePlugin": maps.Clone(simulated)}
	sim["devicePlugin"].(map[string]any)["mig"] = map[string]any{"monitor": true}
	if env, admin := monitor(plugin(sim)); env || admin {
		t.Errorf("mig.monitor=true in simulate mode: NVIDIA_MIG_MONITOR_DEVICES %v, SYS_ADMIN %v; want neither", env, admin)
	}
}

// TestKubeSchedulerImageFollowsTheCluster: without a tag, the kube-scheduler image is the cluster's own
// version (a kube-scheduler must not be newer than the API server, nor more than one minor older), a
// provider's suffix dropped; a tag given wins.
func TestKubeSchedulerImageFollowsTheCluster(t *testing.T) {
	for _, tc := range []struct {
		kube, tag, want string
	}{
		{kube: "v1.35.4", want: "v1.35.4"},
		{kube: "v1.36.3-gke.1245000", want: "v1.36.3"},
		{kube: "v1.37.2+k3s1", want: "v1.37.2"},
		{kube: "v1.37.2", tag: "v1.36.1", want: "v1.36.1"},
	} {
		values := map[string]any{}
		if tc.tag != "" {
			values["scheduler"] = map[string]any{"kubeScheduler": map[string]any{"image": map[string]any{"tag": tc.tag}}}
		}
		d := get[*appsv1.Deployment](t, render(t, values, "--kube-version", tc.kube), schedulerName)
		if got := container(t, d.Spec.Template.Spec, "kube-scheduler").Image; got != "registry.k8s.io/kube-scheduler:"+tc.want {
			t.Errorf("--kube-version %s, tag %q: kube-scheduler image %q, want tag %s", tc.kube, tc.tag, got, tc.want)
		}
	}
}
