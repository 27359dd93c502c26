package e2e

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/cli"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// TestCordonAndDrain (issue 36): on the stack with the chart's admission policy, kubectl cardinal
// cordons a card a pod holds; a pod that asks for that card by UUID stays Pending with the reason
// while another lands on the node's other cards; drain evicts the holder and reports a pod a
// PodDisruptionBudget protects as stayed; uncordon, and the waiting pod takes the card.
func TestCordonAndDrain(t *testing.T) {
	e := startEnv(t, stack.Options{})
	kc := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := cli.Main(context.Background(), args, &out, &errOut, func(string, string) (kubernetes.Interface, string, error) { return e.client, namespace, nil })
		t.Logf("$ kubectl cardinal %s\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
		return out.String(), errOut.String(), code
	}
	a100 := map[string]string{annotations.UseGPUType: "A100"}
	protected := pod("cd-protected", a100)
	protected.Labels = map[string]string{"app": "protected"}
	e.create(t, pod("cd-hold", a100), protected)
	e.waitRunning(t, "cd-hold", "cd-protected")
	_, hold := e.assignment(t, "cd-hold")
	_, prot := e.assignment(t, "cd-protected")
	card := hold.Container("main").Devices[0].UUID
	protCard := prot.Container("main").Devices[0].UUID
	if _, err := e.client.PolicyV1().PodDisruptionBudgets(namespace).Create(ctx(t), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "protected"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrIntOrString(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "protected"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("%v", err)
	}

	if _, _, code := kc("cordon", nodeA, card, protCard, "--reason", "e2e: reseat"); code != 0 {
		t.Fatalf("cordon failed")
	}
	pinned := pod("cd-pinned", map[string]string{annotations.UseGPUUUID: card})
	e.create(t, pinned)
	if msg := e.waitUnschedulable(t, "cd-pinned"); !strings.Contains(msg, "is cordoned: e2e: reseat (by ") {
		t.Errorf("cd-pinned's reason %q does not say the card is cordoned", msg)
	}
	e.create(t, pod("cd-other", a100))
	e.waitRunning(t, "cd-other")
	if _, other := e.assignment(t, "cd-other"); slices.Contains([]string{card, protCard}, other.Container("main").Devices[0].UUID) {
		t.Errorf("cd-other was placed on a cordoned card: %+v", other)
	}
	out, _, _ := kc("cards", nodeA)
	if !strings.Contains(out, "cordoned: e2e: reseat") {
		t.Errorf("cards %s does not show the cordon", nodeA)
	}

	// drain: the holder goes; the protected pod stays (the test bed runs no disruption controller,
	// so its budget allows no eviction), reported with the API server's reason, exit code 1.
	out, errOut, code := kc("drain", nodeA, card, protCard, "--timeout", "20s")
	if code == 0 || !strings.Contains(out, "stayed: ") || !strings.Contains(errOut, namespace+"/cd-protected") {
		t.Errorf("drain: exit %d, want 1 with cd-protected stayed", code)
	}
	if _, err := e.client.CoreV1().Pods(namespace).Get(ctx(t), "cd-hold", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cd-hold after drain: %v, want evicted and gone", err)
	}
	if _, err := e.client.CoreV1().Pods(namespace).Get(ctx(t), "cd-protected", metav1.GetOptions{}); err != nil {
		t.Errorf("cd-protected after drain: %v, want it kept", err)
	}

	if _, _, code := kc("uncordon", nodeA, card, protCard); code != 0 {
		t.Fatalf("uncordon failed")
	}
	// The uncordon wakes cd-pinned at once. Under load its extender informer could deliver the
	// uncordon while the filter read the node at the last moment, and the retry was refused on
	// the mark already gone; the pod then waited for the next cluster event (90 s in two CI runs,
	// more than 4 minutes in a third). Fixed: the filter decides again when the node's state
	// changed since its verdict (TestFilterDecidesAgainWhenTheInformerUncordonsDuringTheRead).
	e.waitRunning(t, "cd-pinned")
	if _, got := e.assignment(t, "cd-pinned"); got.Container("main").Devices[0].UUID != card {
		t.Errorf("cd-pinned got %+v, want the uncordoned card %s", got, card)
	}
	e.truth(t, "cd-pinned", "cd-other", "cd-protected")
	if err := e.client.PolicyV1().PodDisruptionBudgets(namespace).Delete(ctx(t), "protected", metav1.DeleteOptions{}); err != nil {
		t.Errorf("%v", err)
	}
	e.deleteAll(t)
}

func ptrIntOrString(v intstr.IntOrString) *intstr.IntOrString { return &v }
