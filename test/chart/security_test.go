package chart

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// grants lists every right the rendered chart gives a ServiceAccount, one README row each:
// "account | granted by | where | API groups | resources | verbs | names". A role the chart does not
// render (kube-scheduler's own) is one row naming it, marked built-in.
func grants(t *testing.T, r *rendered) []string {
	t.Helper()
	rules := map[string][]rbacv1.PolicyRule{}
	for _, cr := range all[*rbacv1.ClusterRole](r) {
		rules["ClusterRole "+cr.Name] = cr.Rules
	}
	for _, role := range all[*rbacv1.Role](r) {
		rules["Role "+role.Name] = role.Rules
	}
	list := func(xs []string) string {
		if len(xs) == 0 {
			return "-"
		}
		return strings.Join(xs, ", ")
	}
	var out []string
	add := func(subjects []rbacv1.Subject, ref rbacv1.RoleRef, where string) {
		for _, s := range subjects {
			if s.Kind != rbacv1.ServiceAccountKind {
				t.Errorf("%s %s is bound to a %s; the chart binds only its ServiceAccounts", ref.Kind, ref.Name, s.Kind)
				continue
			}
			account := s.Name
			if s.Namespace != namespace {
				account = s.Namespace + "/" + s.Name
			}
			by := ref.Kind + " " + ref.Name
			rs, ok := rules[by]
			if !ok {
				out = append(out, strings.Join([]string{account, by + " (built-in)", where, "-", "-", "-", "-"}, " | "))
				continue
			}
			for _, rule := range rs {
				groups := make([]string, len(rule.APIGroups))
				for i, g := range rule.APIGroups {
					groups[i] = cmpOr(g, "core")
				}
				out = append(out, strings.Join([]string{account, by, where, list(groups), list(rule.Resources), list(rule.Verbs), list(rule.ResourceNames)}, " | "))
			}
		}
	}
	for _, b := range all[*rbacv1.ClusterRoleBinding](r) {
		add(b.Subjects, b.RoleRef, "cluster")
	}
	for _, b := range all[*rbacv1.RoleBinding](r) {
		add(b.Subjects, b.RoleRef, b.Namespace)
	}
	slices.Sort(out)
	return out
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestREADMESecurityModelListsEveryGrant compares docs/security.md's table of every account's rights
// (between security-rbac markers) with what the chart renders, both ways:
// a grant added to the chart fails here until the page says so, and a row the chart no longer
// grants fails too.
func TestREADMESecurityModelListsEveryGrant(t *testing.T) {
	raw, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- security-rbac:begin -->", "<!-- security-rbac:end -->"
	s := string(raw)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("docs/security.md: no %s ... %s table", begin, end)
	}
	var listed []string
	for _, line := range strings.Split(s[i:j], "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 8 {
			t.Errorf("docs/security.md: security row with %d cells, want 8 (the last: why): %s", len(cells), line)
			continue
		}
		for k := range cells {
			cells[k] = strings.TrimSpace(strings.ReplaceAll(cells[k], "`", ""))
		}
		listed = append(listed, strings.Join(cells[:7], " | "))
	}
	rendered := grants(t, render(t, nil))
	for _, g := range rendered {
		if !slices.Contains(listed, g) {
			t.Errorf("the chart grants, docs/security.md's table does not list:\n| `%s` | why |", strings.ReplaceAll(g, " | ", "` | `"))
		}
	}
	for _, l := range listed {
		if !slices.Contains(rendered, l) {
			t.Errorf("docs/security.md's table lists what the chart does not grant: %s", l)
		}
	}
	if len(rendered) < 15 {
		t.Errorf("the chart renders %d grants; the walk over its roles is broken", len(rendered))
	}
	// Other settings grant less, never something the table does not list.
	for name, values := range map[string]map[string]any{
		"helm certificates":         {"webhook": map[string]any{"certificates": map[string]any{"mode": "helm"}}},
		"cert-manager certificates": {"webhook": map[string]any{"certificates": map[string]any{"mode": "cert-manager"}}},
		"mps sharing":               {"devicePlugin": map[string]any{"sharing": map[string]any{"mode": "mps"}}},
		"two scheduler replicas":    {"scheduler": map[string]any{"replicas": 2}},
	} {
		for _, g := range grants(t, render(t, values)) {
			if !slices.Contains(listed, g) {
				t.Errorf("with %s the chart grants what docs/security.md's table does not list: %s", name, g)
			}
		}
	}
}

// TestNamespacePodSecurity: with namespace.create the chart renders its namespace labelled for a Pod
// Security level that every pod it renders meets, by the API server's own evaluator, and no stricter
// level would admit them all.
func TestNamespacePodSecurity(t *testing.T) {
	if r := render(t, nil); r.has("Namespace", namespace) {
		t.Error("the namespace is rendered without namespace.create")
	}
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	levels := []psapi.Level{psapi.LevelRestricted, psapi.LevelBaseline, psapi.LevelPrivileged}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   psapi.Level
	}{
		{"defaults", map[string]any{}, psapi.LevelPrivileged},
		{"mps sharing", map[string]any{"devicePlugin": map[string]any{"sharing": map[string]any{"mode": "mps"}}}, psapi.LevelPrivileged},
		{"no device plugin", map[string]any{"devicePlugin": map[string]any{"enabled": false}}, psapi.LevelRestricted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.values["namespace"] = map[string]any{"create": true}
			r := render(t, tc.values)
			ns := get[*corev1.Namespace](t, r, namespace)
			for _, mode := range []string{psapi.EnforceLevelLabel, psapi.AuditLevelLabel, psapi.WarnLevelLabel} {
				if got := ns.Labels[mode]; got != string(tc.want) {
					t.Errorf("%s = %q, want %q", mode, got, tc.want)
				}
			}
			if ns.Annotations["helm.sh/resource-policy"] != "keep" {
				t.Error("the namespace is not kept on uninstall")
			}
			pods := map[string]corev1.PodTemplateSpec{}
			for _, d := range all[*appsv1.Deployment](r) {
				pods["Deployment "+d.Name] = d.Spec.Template
			}
			for _, d := range all[*appsv1.DaemonSet](r) {
				pods["DaemonSet "+d.Name] = d.Spec.Template
			}
			// The least level that admits every pod.
			least := psapi.LevelRestricted
			for name, tmpl := range pods {
				for _, level := range levels {
					var reasons []string
					for _, res := range evaluator.EvaluatePod(psapi.LevelVersion{Level: level, Version: psapi.LatestVersion()}, &tmpl.ObjectMeta, &tmpl.Spec) {
						if !res.Allowed {
							reasons = append(reasons, res.ForbiddenReason+": "+res.ForbiddenDetail)
						}
					}
					if len(reasons) == 0 {
						if slices.Index(levels, level) > slices.Index(levels, least) {
							least = level
						}
						break
					}
					if level == tc.want {
						t.Errorf("%s does not meet Pod Security %s: %s", name, level, strings.Join(reasons, "; "))
					}
				}
			}
			if least != tc.want {
				t.Errorf("the pods need Pod Security %s; the namespace says %s", least, tc.want)
			}
		})
	}
}

// TestInstallLabelsItsNamespace installs with namespace.create on a real API server, the way the
// README says: Helm keeps its release record in the namespace, so the namespace exists first (kubectl
// create namespace) and the chart adopts it (--take-ownership). It comes labelled for Pod Security,
// and uninstall leaves it.
func TestInstallLabelsItsNamespace(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("%v", err)
	}
	env := []string{"KUBECONFIG=" + c.Kubeconfig}
	args := append([]string{"install", releaseName, chartDir, "--namespace", namespace, "--take-ownership"},
		valuesFile(t, map[string]any{"namespace": map[string]any{"create": true}})...)
	if _, err := helm(t, env, args...); err != nil {
		t.Fatalf("%v", err)
	}
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%v", err)
	}
	if got := ns.Labels[psapi.EnforceLevelLabel]; got != string(psapi.LevelPrivileged) {
		t.Errorf("%s = %q, want privileged", psapi.EnforceLevelLabel, got)
	}
	if _, err := helm(t, env, "uninstall", releaseName, "--namespace", namespace, "--wait"); err != nil {
		t.Fatalf("%v", err)
	}
	if ns, err := c.Client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{}); err != nil || ns.DeletionTimestamp != nil {
		t.Errorf("uninstall removed the namespace (%v)", err)
	}
}
