package chart

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// TestCordonPolicy: on a real API server with the chart installed, a card's cordon mark is written
// and removed by an operator in the canonical form naming themselves; a mark naming someone else, a
// key that names no UUID, a malformed value, a reason with a control character, and any mark the
// device plugin writes are refused, each naming the key.
func TestCordonPolicy(t *testing.T) {
	in := installChart(t, nil)
	ctx := context.Background()
	admin := in.c.Client
	review, err := admin.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("who am I: %v", err)
	}
	me := review.Status.UserInfo.Username
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("%v", err)
	}
	const uuid = "GPU-03f69c50-207a-2038-9b45-23cac89cb67d"
	key := annotations.CordonKey(uuid)
	patch := func(c kubernetes.Interface, k string, v *string, dryRun bool) error {
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{k: v}}})
		opts := metav1.PatchOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := c.CoreV1().Nodes().Patch(ctx, "gpu-1", types.MergePatchType, body, opts)
		return err
	}
	mark := func(reason, by string) *string {
		v, err := annotations.EncodeCordon(annotations.Cordon{Reason: reason, By: by})
		if err != nil {
			t.Fatalf("%v", err)
		}
		return &v
	}
	refusedNaming := func(err error, k string) bool {
		return err != nil && (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), k)
	}
	// The API server enforces a policy once its informer has it: wait for the first refusal (dry runs).
	cluster.WaitFor(t, 30*time.Second, "the cordon policy to be enforced", func() (bool, error) {
		return refusedNaming(patch(admin, key, mark("x", "mallory"), true), key), nil
	})

	if err := patch(admin, key, mark(`firmware update, "reseat" é`, me), false); err != nil {
		t.Fatalf("an operator's own mark was refused: %v", err)
	}
	for _, tc := range []struct {
		name  string
		key   string
		value string
	}{
		{"another user's name", key, *mark("x", "mallory")},
		{"a key naming no UUID", annotations.CordonPrefix + "card0", *mark("x", me)},
		{"not the canonical form", key, `{"by":"` + me + `","reason":"x"}`},
		{"an empty reason", key, `{"reason":"","by":"` + me + `"}`},
		{"a control character", key, `{"reason":"\u001b[2Jx","by":"` + me + `"}`},
		{"an escaped control character", key, `{"reason":"\u001b[2J","by":"` + me + `"}`},
		{"a reason of 257 characters", key, `{"reason":"` + strings.Repeat("é", 257) + `","by":"` + me + `"}`},
	} {
		if err := patch(admin, tc.key, &tc.value, true); !refusedNaming(err, tc.key) {
			t.Errorf("%s: %v, want refused naming %s", tc.name, err, tc.key)
		}
	}
	plugin := in.as(t, devicePluginName)
	if err := patch(plugin, key, nil, true); err == nil || !apierrors.IsForbidden(err) {
		t.Errorf("the device plugin removed a cordon: %v", err)
	}
	if err := patch(plugin, annotations.CordonKey("GPU-1"), mark("x", "system:serviceaccount:"+namespace+":"+devicePluginName), true); err == nil || !apierrors.IsForbidden(err) {
		t.Errorf("the device plugin wrote a cordon: %v", err)
	}
	if err := patch(admin, key, nil, false); err != nil {
		t.Errorf("uncordon: %v", err)
	}
}
