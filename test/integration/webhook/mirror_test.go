package webhook_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// TestMirrorPodsOnlyFromKubelets: a mirror pod (kubernetes.io/config.mirror) skips every scheduler
// and is left alone by the webhook. A tenant's GPU pod carrying the mark and spec.nodeName would hold
// cards no scheduler counted until the kubelet deletes it: refused. The same pod from the node's
// kubelet (system:node:node-a in system:nodes) is admitted as the kubelet sent it.
func TestMirrorPodsOnlyFromKubelets(t *testing.T) {
	b := start(t)
	ctx := context.Background()
	const kubelet = "system:node:node-a"
	grantPodCreate(t, b.c.Client, "alice", kubelet)
	as := func(user string, groups ...string) kubernetes.Interface {
		cfg := rest.CopyConfig(b.c.RESTConfig)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	mirror := func(name string) *corev1.Pod {
		p := gpuPod(name)
		p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "a1b2c3"}
		p.Spec.NodeName = "node-a"
		return p
	}

	want := `admission webhook "pods.webhook.cardinal.io" denied the request: metadata.annotations: kubernetes.io/config.mirror marks a mirror pod, which only a kubelet creates (user system:node:<node>), not "alice"; remove it from the pod`
	if _, err := as("alice", "system:authenticated").CoreV1().Pods(teamNS).Create(ctx, mirror("forged-mirror"), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a tenant's mirror pod: %v\nwant a refusal containing %s", err, want)
	}
	// The node's name without the group is not a kubelet either — where the API server lets a
	// request be that: some versions add system:nodes to every system:node:<name> user themselves
	// (SelfSubjectReview says which), and then no such request exists to refuse.
	review, err := as(kubelet).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("who is %s: %v", kubelet, err)
	}
	if groups := review.Status.UserInfo.Groups; slices.Contains(groups, "system:nodes") {
		t.Logf("the API server puts %s in system:nodes itself (groups %v): no request from it outside the group exists", kubelet, groups)
	} else if _, err := as(kubelet).CoreV1().Pods(teamNS).Create(ctx, mirror("no-group"), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "only a kubelet creates") {
		t.Errorf("a mirror pod from %s outside system:nodes (groups %v): %v, want a refusal", kubelet, groups, err)
	}
	got, err := as(kubelet, "system:nodes").CoreV1().Pods(teamNS).Create(ctx, mirror("static"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the kubelet's mirror pod: %v", err)
	}
	if got.Spec.SchedulerName != corev1.DefaultSchedulerName || got.Spec.NodeName != "node-a" {
		t.Errorf("the kubelet's mirror pod came back with scheduler %q on %q; want it as sent", got.Spec.SchedulerName, got.Spec.NodeName)
	}
}

// grantPodCreate lets users create pods in the team namespace.
func grantPodCreate(t *testing.T, cs kubernetes.Interface, users ...string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pod-creator"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"},
	}}}
	if _, err := cs.RbacV1().Roles(teamNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "pod-creators"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-creator"}}
	for _, u := range users {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
	}
	if _, err := cs.RbacV1().RoleBindings(teamNS).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC is read from an informer in the apiserver: wait until every user may create.
	cluster.WaitFor(t, timeout, fmt.Sprintf("RBAC to let %v create pods", users), func() (bool, error) {
		for _, u := range users {
			review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               u,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: teamNS, Verb: "create", Resource: "pods"},
			}}, metav1.CreateOptions{})
			if err != nil || !review.Status.Allowed {
				return false, nil //nolint:nilerr // polling: an error means not ready yet
			}
		}
		return true, nil
	})
}
