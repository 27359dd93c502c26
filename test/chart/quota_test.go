package chart

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestPriorityClassQuota: off by default; on, a ResourceQuota in the release namespace whose
// PriorityClass scope covers the device plugin's system-node-critical pods (what GKE asks for
// before it admits them outside kube-system), with a pod limit that never binds.
func TestPriorityClassQuota(t *testing.T) {
	if r := render(t, nil); len(all[*corev1.ResourceQuota](r)) != 0 {
		t.Errorf("default rendering has a ResourceQuota: %v", r.keys())
	}
	r := render(t, map[string]any{"priorityClassQuota": map[string]any{"enabled": true}})
	q := get[*corev1.ResourceQuota](t, r, "cardinal-critical-pods")
	if q.Namespace != namespace {
		t.Errorf("quota in namespace %q, want the release's %q", q.Namespace, namespace)
	}
	if got, want := q.Spec.Hard[corev1.ResourcePods], resource.MustParse("1G"); got.Cmp(want) != 0 {
		t.Errorf("hard pods = %s, want %s", got.String(), want.String())
	}
	sel := q.Spec.ScopeSelector
	if sel == nil || len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].ScopeName != corev1.ResourceQuotaScopePriorityClass ||
		sel.MatchExpressions[0].Operator != corev1.ScopeSelectorOpIn {
		t.Fatalf("scopeSelector = %+v, want one PriorityClass In expression", sel)
	}
	classes := sel.MatchExpressions[0].Values
	plugin := get[*appsv1.DaemonSet](t, r, devicePluginName).Spec.Template.Spec.PriorityClassName
	if !slices.Contains(classes, plugin) || !slices.Contains(classes, "system-cluster-critical") {
		t.Errorf("quota covers %v; want the device plugin's %q and system-cluster-critical", classes, plugin)
	}
}
