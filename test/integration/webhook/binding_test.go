package webhook_test

import (
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/webhook"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// otherScheduler is a team's own scheduler: it may bind pods in teamNS, as such schedulers commonly may.
const otherScheduler = "system:serviceaccount:team:volcano"

// TestForgedBindingsAreRefused: the apiserver copies a Binding's annotations onto the pod without
// admitting the pod again, so a Binding is where an assignment could be forged. With Cardinal's
// ValidatingAdmissionPolicy and Binding webhook registered, a team's scheduler may bind its own pods,
// but not with a cardinal.io/ annotation (refused by the policy, in the apiserver), and not a pod that
// names Cardinal's scheduler (refused by the webhook), through pods/binding or the legacy bindings
// resource; Cardinal's extender binds with its assignment without the webhook being called.
func TestForgedBindingsAreRefused(t *testing.T) {
	b := start(t)
	ctx := context.Background()
	admin, _ := b.client(t, "")
	opts := webhook.DefaultConfigurationOptions()
	opts.Namespace, opts.URL, opts.TrustedUsers = cardinalNS, b.url, []string{extenderSA}
	policy, policyBinding, err := webhook.BindingPolicy(opts)
	if err != nil {
		t.Fatal(err)
	}
	reg := admin.AdmissionregistrationV1()
	if _, err := reg.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.ValidatingAdmissionPolicyBindings().Create(ctx, policyBinding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grantBinding(t, admin, otherScheduler, extenderSA)

	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := admin.CoreV1().Pods(teamNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", p.Name, err)
		}
	}
	theirs := func(name string) *corev1.Pod {
		p := gpuPod(name)
		p.Spec.SchedulerName = "volcano"
		return p
	}
	// Cardinal's pods: the webhook gives them Cardinal's scheduler.
	for _, name := range []string{"cardinal-a", "cardinal-b", "cardinal-c"} {
		create(gpuPod(name))
	}
	for _, name := range []string{"volcano-a", "volcano-b", "volcano-c"} {
		create(theirs(name))
	}
	volcano, _ := b.client(t, otherScheduler)
	extender, _ := b.client(t, extenderSA)
	forged := map[string]string{annotations.GPUAssignment: `{"v":1,"node":"node-a","containers":[]}`}
	bindOpts := func(cs kubernetes.Interface, pod string, ann map[string]string, o metav1.CreateOptions) error {
		return cs.CoreV1().Pods(teamNS).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod, Annotations: ann},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}, o)
	}
	bindPod := func(cs kubernetes.Interface, pod string, ann map[string]string) error {
		return bindOpts(cs, pod, ann, metav1.CreateOptions{})
	}
	bindLegacy := func(cs kubernetes.Interface, pod string, ann map[string]string) error {
		return cs.CoreV1().RESTClient().Post().Namespace(teamNS).Resource("bindings").
			Body(&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod, Annotations: ann}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}}).
			Do(ctx).Error()
	}
	// The apiserver enforces a policy once its informer has it: wait for the first refusal of a
	// dry-run Binding (admitted, never committed).
	cluster.WaitFor(t, timeout, "the Binding policy to be enforced", func() (bool, error) {
		err := bindOpts(volcano, "volcano-a", forged, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), policy.Name), nil
	})

	const byPolicy, byWebhook = "ValidatingAdmissionPolicy", `admission webhook "` + webhook.BindingsWebhookName + `" denied the request`
	for _, tc := range []struct {
		name string
		bind func() error
		want string // "" allowed, else a part of the refusal
	}{
		{"pods/binding with a forged assignment, of the team's own pod", func() error { return bindPod(volcano, "volcano-a", forged) }, byPolicy},
		{"legacy bindings with a forged assignment", func() error { return bindLegacy(volcano, "volcano-b", forged) }, byPolicy},
		{"pods/binding of a pod that names Cardinal's scheduler, no annotations", func() error { return bindPod(volcano, "cardinal-a", nil) }, byWebhook},
		{"legacy bindings of a pod that names Cardinal's scheduler", func() error { return bindLegacy(volcano, "cardinal-b", nil) }, byWebhook},
		{"the team's scheduler binds its own pod", func() error { return bindPod(volcano, "volcano-c", nil) }, ""},
		{"Cardinal's extender binds its pod with the assignment", func() error { return bindPod(extender, "cardinal-c", forged) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.calls(t)
			err := tc.bind()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want a refusal (%s)", err, tc.want)
			case tc.want == byPolicy && !strings.Contains(err.Error(), "metadata.annotations: "+annotations.GPUAssignment+": the metadata of a Binding is copied onto its pod"):
				t.Errorf("the policy's message does not name the key: %v", err)
			case tc.want == byWebhook && !strings.Contains(err.Error(), `names scheduler "cardinal-scheduler": only Cardinal binds it`):
				t.Errorf("the webhook's message does not say why: %v", err)
			}
			if strings.Contains(tc.name, "extender") && b.calls(t) != before {
				t.Errorf("the webhook was called for Cardinal's own Binding")
			}
		})
	}
	// What was refused left the pods unbound and unannotated; what was allowed landed.
	for name, wantNode := range map[string]string{"volcano-a": "", "volcano-b": "", "cardinal-a": "", "cardinal-b": "", "volcano-c": "node-a", "cardinal-c": "node-a"} {
		p, err := admin.CoreV1().Pods(teamNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, hasAssignment := p.Annotations[annotations.GPUAssignment]
		if p.Spec.NodeName != wantNode || hasAssignment != (name == "cardinal-c") {
			t.Errorf("pod %s: node %q, assignment %v; want node %q", name, p.Spec.NodeName, hasAssignment, wantNode)
		}
	}
}

// grantBinding lets users bind pods in teamNS (pods/binding and the legacy bindings resource), as a
// team running its own scheduler may.
func grantBinding(t *testing.T, cs kubernetes.Interface, users ...string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "binder"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods/binding", "bindings"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
	}}
	if _, err := cs.RbacV1().Roles(teamNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "binders"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "binder"}}
	for _, u := range users {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
	}
	if _, err := cs.RbacV1().RoleBindings(teamNS).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, timeout, "RBAC to let the binders bind", func() (bool, error) {
		for _, u := range users {
			review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               u,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: teamNS, Verb: "create", Resource: "bindings"},
			}}, metav1.CreateOptions{})
			if err != nil || !review.Status.Allowed {
				return false, err
			}
		}
		return true, nil
	})
}
