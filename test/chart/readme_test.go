package chart

import (
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// opaque are value keys whose content is free-form Kubernetes (or user) data: the README lists the
// key itself, not what is inside.
var opaque = []string{"resources", "podSecurityContext", "securityContext", "nodeSelector", "tolerations", "affinity",
	"podAnnotations", "podLabels", "annotations", "labels", "config", "issuerRef", "extraArgs", "imagePullSecrets",
	"trustedServiceAccounts", "namespaceSelectorExpressions", "namespaceSelector", "objectSelector", "gpuPodTolerations"}

// valuePaths lists the dotted paths of values.yaml a reader can set.
func valuePaths(prefix string, v any, out *[]string) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		*out = append(*out, prefix)
		return
	}
	for k, child := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if slices.Contains(opaque, k) {
			*out = append(*out, p)
			continue
		}
		valuePaths(p, child, out)
	}
}

// chartValues reads the chart's values.yaml and lists its settable paths (valuePaths), sorted.
func chartValues(t *testing.T) (values map[string]any, paths []string) {
	t.Helper()
	raw, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatalf("%v", err)
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	valuePaths("", values, &paths)
	sort.Strings(paths)
	return values, paths
}

func TestREADMEListsEveryValue(t *testing.T) {
	_, paths := chartValues(t)
	readme, err := os.ReadFile(chartDir + "/README.md")
	if err != nil {
		t.Fatalf("%v", err)
	}
	for _, p := range paths {
		if !strings.Contains(string(readme), "| `"+p+"` |") {
			t.Errorf("README.md has no table row for the value `%s`", p)
		}
	}
	if len(paths) < 80 {
		t.Errorf("found only %d value paths; the walk over values.yaml is broken", len(paths))
	}
	// And the other way round: no row of the Values table for a value that does not exist.
	_, table, ok := strings.Cut(string(readme), "\n## Values\n")
	if !ok {
		t.Fatal("README.md has no \"## Values\" section")
	}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		key := strings.TrimPrefix(line, "| `")
		key = key[:strings.Index(key, "`")]
		if !slices.Contains(paths, key) {
			t.Errorf("README.md documents `%s`, which values.yaml does not have", key)
		}
	}
}

// TestValuesAreCommented: every key of values.yaml has a comment line right above it or is inside a
// commented block (the keys of a commented map are allowed to be self-explanatory only when they are
// image fields).
func TestValuesAreCommented(t *testing.T) {
	raw, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatalf("%v", err)
	}
	lines := strings.Split(string(raw), "\n")
	selfExplanatory := []string{"repository", "tag", "pullPolicy", "create", "requests", "limits", "cpu", "memory",
		"runAsNonRoot", "runAsUser", "runAsGroup", "seccompProfile", "type", "allowPrivilegeEscalation", "readOnlyRootFilesystem",
		"capabilities", "drop", "privileged", "nodes", "key", "operator", "effect", "nvidia.com/gpu.present"}
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "- ") || !strings.Contains(trimmed, ":") {
			continue
		}
		key := strings.TrimSpace(trimmed[:strings.Index(trimmed, ":")])
		if slices.Contains(selfExplanatory, key) {
			continue
		}
		if i == 0 || !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "#") {
			t.Errorf("values.yaml line %d: %q has no comment above it", i+1, trimmed)
		}
	}
}
