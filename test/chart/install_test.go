package chart

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/webhook/certs"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// installed is a cluster with the chart installed in it.
type installed struct {
	c       *cluster.Cluster
	dyn     dynamic.Interface
	mapper  meta.RESTMapper
	helmEnv []string
}

func installChart(t *testing.T, values map[string]any) *installed {
	t.Helper()
	c := cluster.Start(t, cluster.Options{})
	in := &installed{c: c, helmEnv: []string{"KUBECONFIG=" + c.Kubeconfig}}
	var err error
	if in.dyn, err = dynamic.NewForConfig(c.RESTConfig); err != nil {
		t.Fatalf("dynamic client: %v", err)
	}
	in.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))
	// No --wait: nothing runs pods here (no controller manager, no kubelet); what is tested is that
	// the API server accepts every object.
	args := append([]string{"install", releaseName, chartDir, "--namespace", namespace, "--create-namespace"}, valuesFile(t, values)...)
	if _, err := helm(t, in.helmEnv, args...); err != nil {
		t.Fatalf("%v", err)
	}
	return in
}

// manifest returns the objects of the release's current revision, as the server has them recorded.
func (in *installed) manifest(t *testing.T) *rendered {
	t.Helper()
	out, err := helm(t, in.helmEnv, "get", "manifest", releaseName, "--namespace", namespace)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return decode(t, out)
}

func TestInstallUpgradeUninstall(t *testing.T) {
	in := installChart(t, map[string]any{"devicePlugin": simulated})
	ctx := context.Background()
	first := in.manifest(t)
	if len(first.objects) < 20 {
		t.Fatalf("release has %d objects: %v", len(first.objects), first.keys())
	}
	for _, o := range first.objects {
		if err := in.get(ctx, o); err != nil {
			t.Errorf("%s: %v", objectKey(o), err)
		}
	}

	t.Run("RBAC", func(t *testing.T) { checkAccess(t, in.c.Client) })

	t.Run("kube-scheduler accepts the configuration", func(t *testing.T) {
		cm, err := in.c.Client.CoreV1().ConfigMaps(namespace).Get(ctx, schedulerName+"-config", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%v", err)
		}
		// StartScheduler fails the test unless the real kube-scheduler becomes ready with it.
		in.c.StartScheduler(t, []byte(cm.Data["scheduler-config.yaml"]))
	})

	t.Run("webhook match conditions", func(t *testing.T) { checkWebhookScope(t, in.c.Client) })

	// Self-managed certificates (the default): stand in for the webhook, which writes its Secret and
	// the configurations' caBundle at run time; an upgrade must leave both as they are.
	certs, err := in.c.Client.CoreV1().Secrets(namespace).Get(ctx, webhookName+"-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the self-managed certificates Secret: %v", err)
	}
	certs.Data = map[string][]byte{"ca.crt": []byte("webhook-written CA"), "tls.crt": []byte("webhook-written certificate")}
	if _, err := in.c.Client.CoreV1().Secrets(namespace).Update(ctx, certs, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("%v", err)
	}
	injected := []byte("webhook-injected bundle")
	mwc, err := in.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%v", err)
	}
	mwc.Webhooks[0].ClientConfig.CABundle = injected
	if _, err := in.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("%v", err)
	}
	upgrade := func(values map[string]any, extra ...string) {
		t.Helper()
		args := append([]string{"upgrade", releaseName, chartDir, "--namespace", namespace}, extra...)
		if _, err := helm(t, in.helmEnv, append(args, valuesFile(t, values)...)...); err != nil {
			t.Fatalf("%v", err)
		}
	}
	upgrade(map[string]any{"scheduler": map[string]any{"replicas": 2}})
	t.Run("upgrade keeps the self-managed certificates and caBundle", func(t *testing.T) {
		got, err := in.c.Client.CoreV1().Secrets(namespace).Get(ctx, webhookName+"-certs", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%v", err)
		}
		if string(got.Data["ca.crt"]) != "webhook-written CA" || string(got.Data["tls.crt"]) != "webhook-written certificate" {
			t.Errorf("the upgrade changed the webhook's Secret: %q", got.Data)
		}
		mwc, err := in.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%v", err)
		}
		if !bytes.Equal(mwc.Webhooks[0].ClientConfig.CABundle, injected) {
			t.Errorf("the upgrade reset the caBundle the webhook set to %q", mwc.Webhooks[0].ClientConfig.CABundle)
		}
		cm, err := in.c.Client.CoreV1().ConfigMaps(namespace).Get(ctx, schedulerName+"-config", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%v", err)
		}
		if !strings.Contains(cm.Data["scheduler-config.yaml"], "leaderElect: true") {
			t.Errorf("replicas 2 did not turn on leader election:\n%s", cm.Data["scheduler-config.yaml"])
		}
	})

	// "helm" mode: a chart-generated CA, rotated by every upgrade, the previous one kept trusted.
	helmMode := map[string]any{"scheduler": map[string]any{"replicas": 2}, "webhook": map[string]any{"certificates": map[string]any{"mode": "helm"}}}
	var force []string
	if cluster.TestBedVersions(t).HelmMajor >= 4 {
		// Helm 4 applies server-side: the caBundle the webhook wrote (an Update, under its own field
		// manager) conflicts with the chart's CA of helm mode, so the switch takes --force-conflicts
		// (charts/cardinal/README.md). Without it the upgrade must fail on exactly that field.
		_, err := helm(t, in.helmEnv, append([]string{"upgrade", releaseName, chartDir, "--namespace", namespace}, valuesFile(t, helmMode)...)...)
		if err == nil || !strings.Contains(err.Error(), "conflict") || !strings.Contains(err.Error(), "caBundle") {
			t.Errorf("helm 4 switching to helm mode over the webhook's caBundle without --force-conflicts: %v; want a conflict on caBundle", err)
		}
		force = []string{"--force-conflicts"}
	}
	upgrade(helmMode, force...)
	middle := in.manifest(t)
	oldSecret, err := in.c.Client.CoreV1().Secrets(namespace).Get(ctx, webhookName+"-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%v", err)
	}
	upgrade(helmMode)
	t.Run("helm mode: an upgrade rotates the CA and keeps the old one trusted", func(t *testing.T) {
		newSecret, err := in.c.Client.CoreV1().Secrets(namespace).Get(ctx, webhookName+"-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%v", err)
		}
		if bytes.Equal(newSecret.Data["ca.crt"], oldSecret.Data["ca.crt"]) {
			t.Fatal("the upgrade kept the CA; it must rotate it")
		}
		mwc, err := in.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhookName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%v", err)
		}
		// Old pods serve the old certificate until they restart: both CAs must be trusted.
		for name, secret := range map[string]*corev1.Secret{"new": newSecret, "old": oldSecret} {
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle)
			block, _ := pem.Decode(secret.Data["tls.crt"])
			if block == nil {
				t.Fatalf("%s tls.crt is not PEM", name)
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatalf("%v", err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{DNSName: webhookName + "." + namespace + ".svc", Roots: roots}); err != nil {
				t.Errorf("the %s serving certificate does not verify against the caBundle after the upgrade: %v", name, err)
			}
		}
	})
	second := in.manifest(t)

	if _, err := helm(t, in.helmEnv, "uninstall", releaseName, "--namespace", namespace, "--wait"); err != nil {
		t.Fatalf("%v", err)
	}
	for _, r := range []*rendered{first, middle, second} {
		for _, o := range r.objects {
			if err := in.get(ctx, o); !apierrors.IsNotFound(err) {
				t.Errorf("%s left behind after uninstall (get: %v)", objectKey(o), err)
			}
		}
	}
	secrets, err := in.c.Client.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		t.Fatalf("%v", err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("helm release records left behind: %d", len(secrets.Items))
	}
}

// get reads the object o from the server.
func (in *installed) get(ctx context.Context, o runtime.Object) error {
	gvk := o.GetObjectKind().GroupVersionKind()
	m, err := in.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("mapping %s: %w", gvk, err)
	}
	acc, err := meta.Accessor(o)
	if err != nil {
		return err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := acc.GetNamespace()
		if ns == "" {
			ns = namespace
		}
		_, err = in.dyn.Resource(m.Resource).Namespace(ns).Get(ctx, acc.GetName(), metav1.GetOptions{})
		return err
	}
	_, err = in.dyn.Resource(m.Resource).Get(ctx, acc.GetName(), metav1.GetOptions{})
	return err
}

// checkAccess asks the API server (SubjectAccessReview) what each ServiceAccount may do: what the
// README promises it, and nothing it should not have.
func checkAccess(t *testing.T, client kubernetes.Interface) {
	type check struct {
		user                      string
		verb, group, res, sub, ns string
		name                      string
		allowed                   bool
	}
	ext, wh, dp := schedulerSA, "system:serviceaccount:"+namespace+":"+webhookName, devicePluginSA
	for _, c := range []check{
		{user: ext, verb: "create", res: "pods", sub: "binding", ns: "default", allowed: true},
		{user: ext, verb: "patch", res: "pods", ns: "default", allowed: false}, // the assignment travels on the Binding
		{user: ext, verb: "update", res: "pods", ns: "kube-system", allowed: false},
		{user: ext, verb: "patch", res: "pods", sub: "status", ns: "default", allowed: true}, // system:kube-scheduler's own
		{user: ext, verb: "watch", res: "nodes", allowed: true},
		{user: ext, verb: "update", group: "coordination.k8s.io", res: "leases", ns: namespace, name: "cardinal-scheduler", allowed: true},
		{user: ext, verb: "get", res: "configmaps", ns: "kube-system", name: "extension-apiserver-authentication", allowed: true},
		{user: ext, verb: "patch", res: "nodes", allowed: false},
		{user: ext, verb: "get", res: "secrets", ns: namespace, allowed: false},
		{user: ext, verb: "update", group: "coordination.k8s.io", res: "leases", ns: namespace, name: "someone-else", allowed: false},
		{user: wh, verb: "list", res: "nodes", allowed: true},
		{user: wh, verb: "patch", res: "nodes", allowed: false},
		{user: wh, verb: "list", res: "pods", ns: "default", allowed: false},
		{user: wh, verb: "get", res: "pods", ns: "default", allowed: true},       // the pod a Binding names
		{user: wh, verb: "create", res: "secrets", ns: namespace, allowed: true}, // its certificate Secret, when deleted
		{user: wh, verb: "create", res: "secrets", ns: "default", allowed: false},
		{user: wh, verb: "get", res: "secrets", ns: namespace, allowed: false},
		{user: wh, verb: "update", res: "secrets", ns: namespace, name: webhookName + "-certs", allowed: true},
		{user: wh, verb: "update", res: "secrets", ns: namespace, name: webhookName + "-tls", allowed: false},
		{user: wh, verb: "update", group: "admissionregistration.k8s.io", res: "mutatingwebhookconfigurations", name: webhookName, allowed: true},
		{user: wh, verb: "update", group: "admissionregistration.k8s.io", res: "validatingwebhookconfigurations", name: webhookName, allowed: true},
		{user: wh, verb: "update", group: "admissionregistration.k8s.io", res: "mutatingwebhookconfigurations", name: "someone-else", allowed: false},
		{user: wh, verb: "delete", group: "admissionregistration.k8s.io", res: "validatingwebhookconfigurations", name: webhookName, allowed: false},
		{user: dp, verb: "patch", res: "nodes", allowed: true},
		{user: dp, verb: "patch", res: "pods", ns: "default", allowed: true},
		{user: dp, verb: "create", res: "events", ns: "default", allowed: true},
		{user: dp, verb: "delete", res: "pods", ns: "default", allowed: false},
		{user: dp, verb: "create", res: "pods", sub: "binding", ns: "default", allowed: false},
		{user: dp, verb: "update", res: "nodes", sub: "status", allowed: false},
		{user: dp, verb: "list", res: "secrets", ns: "default", allowed: false},
	} {
		name := fmt.Sprintf("%s %s %s/%s %s/%s", c.user[strings.LastIndex(c.user, ":")+1:], c.verb, c.res, c.sub, c.ns, c.name)
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   c.user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: c.verb, Group: c.group, Resource: c.res, Subresource: c.sub, Namespace: c.ns, Name: c.name,
			},
		}}
		got, err := client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Status.Allowed != c.allowed {
			t.Errorf("%s: allowed = %v, want %v (%s)", name, got.Status.Allowed, c.allowed, got.Status.Reason)
		}
	}
	// The scheduler's account writes pods only as kube-scheduler's own user (system:kube-scheduler,
	// bound to the upstream role) may: every pod write it holds, that user holds too.
	for _, sub := range []string{"", "status", "binding", "eviction", "ephemeralcontainers", "resize", "exec", "attach", "portforward", "proxy"} {
		for _, verb := range []string{"create", "update", "patch", "delete", "deletecollection"} {
			allowed := func(user string, groups ...string) bool {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: user, Groups: append(groups, "system:authenticated"),
					ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "pods", Subresource: sub, Namespace: "kube-system"},
				}}
				got, err := client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("%s %s pods/%s: %v", user, verb, sub, err)
				}
				return got.Status.Allowed
			}
			if allowed(ext, "system:serviceaccounts", "system:serviceaccounts:"+namespace) && !allowed("system:kube-scheduler") {
				t.Errorf("the scheduler's account may %s pods/%s in kube-system; kube-scheduler's own role may not", verb, sub)
			}
		}
	}
}

// checkWebhookScope: the webhook itself is not running, so every pod the API server sends to it is
// refused (failurePolicy Fail) and every pod it does not send is admitted. That shows exactly which
// pods the matchConditions and the namespaceSelector select.
func checkWebhookScope(t *testing.T, client kubernetes.Interface) {
	gpu := corev1.ResourceList{annotations.ResourceGPU: resource.MustParse("1")}
	mem := corev1.ResourceList{annotations.ResourceGPUMem: resource.MustParse("1024")}
	for _, tc := range []struct {
		name, ns   string
		limits     corev1.ResourceList
		requests   corev1.ResourceList
		initLimits corev1.ResourceList
		annotation string
		sent       bool
	}{
		{name: "cpu-only", ns: "default", sent: false},
		{name: "gpu-limit", ns: "default", limits: gpu, sent: true},
		{name: "gpumem-request", ns: "default", requests: mem, sent: true},
		{name: "gpu-in-init-container", ns: "default", initLimits: gpu, sent: true},
		{name: "forged-assignment", ns: "default", annotation: annotations.GPUAssignment, sent: true},
		{name: "user-selector-only", ns: "default", annotation: annotations.UseGPUType, sent: false},
		{name: "gpu-in-cardinal-namespace", ns: namespace, limits: gpu, sent: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: tc.ns},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox",
					Resources: corev1.ResourceRequirements{Limits: tc.limits, Requests: tc.requests}}}},
			}
			if tc.annotation != "" {
				pod.Annotations = map[string]string{tc.annotation: "x"}
			}
			if tc.initLimits != nil {
				pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox",
					Resources: corev1.ResourceRequirements{Limits: tc.initLimits}}}
			}
			_, err := client.CoreV1().Pods(tc.ns).Create(context.Background(), pod, metav1.CreateOptions{})
			sent := err != nil && strings.Contains(err.Error(), "pods.webhook.cardinal.io")
			if sent != tc.sent || (err != nil && !sent) {
				t.Errorf("sent to the webhook = %v, want %v (create: %v)", sent, tc.sent, err)
			}
		})
	}
}

// TestDevicePluginNodeRestriction runs the ValidatingAdmissionPolicy with the device plugin's real
// credentials: a bound ServiceAccount token of a pod on node-a.
func TestDevicePluginNodeRestriction(t *testing.T) {
	in := installChart(t, nil)
	ctx := context.Background()
	admin := in.c.Client
	for _, n := range []string{"node-a", "node-b"} {
		in.c.AddNode(t, cluster.NodeSpec{Name: n})
	}
	plugin := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "device-plugin-node-a", Namespace: namespace},
		Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "cardinal-device-plugin",
			Containers: []corev1.Container{{Name: "p", Image: "device-plugin"}}},
	}
	plugin, err := admin.CoreV1().Pods(namespace).Create(ctx, plugin, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("%v", err)
	}
	for _, n := range []string{"node-a", "node-b"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "workload-" + n, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: n, Containers: []corev1.Container{{Name: "w", Image: "w"}}}}
		if _, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%v", err)
		}
	}
	token := func(bound *authenticationv1.BoundObjectReference) kubernetes.Interface {
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600), BoundObjectRef: bound}}
		got, err := admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, "cardinal-device-plugin", tr, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token request: %v", err)
		}
		cfg := rest.AnonymousClientConfig(in.c.RESTConfig)
		cfg.BearerToken = got.Status.Token
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatalf("%v", err)
		}
		return cs
	}
	nodeB, err := admin.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%v", err)
	}
	// The kubelet projects a pod-bound token into the plugin's pod; a plugin run outside a pod (the
	// e2e suite) uses a token bound to the Node. Both carry the node-name claim.
	onNodeA := token(&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: plugin.Name, UID: plugin.UID})
	onNodeB := token(&authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: nodeB.Name, UID: nodeB.UID})
	unbound := token(nil)

	annotate := func(key string) []byte {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: "x"}}})
		return b
	}
	label := []byte(`{"metadata":{"labels":{"gpu":"fake"}}}`)
	// An owner that does not exist: the garbage collector would delete the object. A finalizer would
	// keep it from being deleted.
	ownerRef := []byte(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000001"}]}}`)
	finalizer := []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`)
	patchNode := func(cs kubernetes.Interface, node string, patch []byte) error {
		_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	patchPod := func(cs kubernetes.Interface, pod string, patch []byte) error {
		_, err := cs.CoreV1().Pods("default").Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	// The policy is enforced once the API server's policy informer has it: wait for the first refusal.
	cluster.WaitFor(t, 30*time.Second, "the node-restriction policy to be enforced", func() (bool, error) {
		err := patchNode(onNodeA, "node-b", annotate(annotations.GPUInventory))
		return err != nil && strings.Contains(err.Error(), "node-restriction"), nil
	})
	for _, tc := range []struct {
		name    string
		do      func() error
		allowed bool
	}{
		{"own node, inventory", func() error { return patchNode(onNodeA, "node-a", annotate(annotations.GPUInventory)) }, true},
		{"other node, inventory", func() error { return patchNode(onNodeA, "node-b", annotate(annotations.GPUInventory)) }, false},
		{"own node, other annotation", func() error { return patchNode(onNodeA, "node-a", annotate(annotations.GPUAssignment)) }, false},
		{"own node, label", func() error { return patchNode(onNodeA, "node-a", label) }, false},
		{"pod on own node, allocation", func() error { return patchPod(onNodeA, "workload-node-a", annotate(annotations.GPUAllocated)) }, true},
		{"pod on other node, allocation", func() error { return patchPod(onNodeA, "workload-node-b", annotate(annotations.GPUAllocated)) }, false},
		{"pod on own node, assignment", func() error { return patchPod(onNodeA, "workload-node-a", annotate(annotations.GPUAssignment)) }, false},
		{"pod on own node, ownerReference", func() error { return patchPod(onNodeA, "workload-node-a", ownerRef) }, false},
		{"pod on own node, finalizer", func() error { return patchPod(onNodeA, "workload-node-a", finalizer) }, false},
		{"own node, ownerReference", func() error { return patchNode(onNodeA, "node-a", ownerRef) }, false},
		{"own node, finalizer", func() error { return patchNode(onNodeA, "node-a", finalizer) }, false},
		{"node-bound token, own node", func() error { return patchNode(onNodeB, "node-b", annotate(annotations.GPUInventory)) }, true},
		{"node-bound token, other node", func() error { return patchNode(onNodeB, "node-a", annotate(annotations.GPUInventory)) }, false},
		{"token without node claim", func() error { return patchNode(unbound, "node-a", annotate(annotations.GPUInventory)) }, false},
		{"admin, other node (policy is scoped to the plugin)", func() error { return patchNode(admin, "node-b", annotate(annotations.GPUInventory)) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if tc.allowed && err != nil {
				t.Errorf("refused: %v", err)
			}
			// Refused by the policy itself (RBAC allows every one of these patches).
			if !tc.allowed && (err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), devicePluginName+"-node-restriction")) {
				t.Errorf("err = %v, want a refusal by the node-restriction policy", err)
			}
		})
	}
}

// as returns a client with the credentials of the release's ServiceAccount sa: a token of it, not
// impersonation, so that the API server authenticates the request as it would the pod's.
func (in *installed) as(t *testing.T, sa string) kubernetes.Interface {
	t.Helper()
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	tok, err := in.c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), sa, tr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request: %v", err)
	}
	cfg := rest.AnonymousClientConfig(in.c.RESTConfig)
	cfg.BearerToken = tok.Status.Token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return cs
}

// TestWebhookRecreatesItsSecret deletes the self-managed certificate Secret, then runs a fresh
// replica's certificate reconciliation with the webhook's own credentials (a token of its
// ServiceAccount, the chart's RBAC and policies): it creates the Secret again and becomes ready. The
// same credentials may not create any other Secret.
func TestWebhookRecreatesItsSecret(t *testing.T) {
	in := installChart(t, nil)
	ctx := context.Background()
	admin := in.c.Client
	secretName := webhookName + "-certs"
	if err := admin.CoreV1().Secrets(namespace).Delete(ctx, secretName, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("%v", err)
	}
	asWebhook := in.as(t, webhookName)
	rotator, err := certs.New(certs.Config{Client: asWebhook, Namespace: namespace, SecretName: secretName, WebhookConfiguration: webhookName,
		Hosts: []string{webhookName + "." + namespace + ".svc"}, CertLifetime: time.Hour, CALifetime: 24 * time.Hour, CheckInterval: time.Minute,
		Logger: testr.New(t)})
	if err != nil {
		t.Fatalf("%v", err)
	}
	// RBAC and the policy are read from informers in the API server: retry until the first round works.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := rotator.Reconcile(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a fresh replica could not re-create the Secret in 30s: %v", err)
		}
	}
	if err := rotator.Ready(nil); err != nil {
		t.Errorf("not ready after re-creating the Secret: %v", err)
	}
	s, err := admin.CoreV1().Secrets(namespace).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil || len(s.Data[certs.KeyCert]) == 0 {
		t.Fatalf("the Secret was not re-created with a certificate: %v", err)
	}
	// RBAC grants create on every Secret of the namespace; the chart's policy narrows it to one name.
	// The API server enforces a policy once its informer has it: dry runs until then.
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "not-the-webhooks", Namespace: namespace}}
	refused := func(err error) bool {
		return err != nil && apierrors.IsForbidden(err) && strings.Contains(err.Error(), "may create only its certificate Secret")
	}
	cluster.WaitFor(t, 30*time.Second, "the certificates policy to be enforced", func() (bool, error) {
		_, err := asWebhook.CoreV1().Secrets(namespace).Create(ctx, other, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return refused(err), nil
	})
	if _, err := asWebhook.CoreV1().Secrets(namespace).Create(ctx, other, metav1.CreateOptions{}); !refused(err) {
		t.Errorf("creating another Secret: %v, want a refusal by the certificates policy", err)
	}
}
