package chart

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// schemaNode is the part of values.schema.json the walk needs.
type schemaNode struct {
	Type                 any                    `json:"type"`
	Properties           map[string]*schemaNode `json:"properties"`
	AdditionalProperties *bool                  `json:"additionalProperties"`
}

func readSchema(t *testing.T) *schemaNode {
	t.Helper()
	raw, err := os.ReadFile(chartDir + "/values.schema.json")
	if err != nil {
		t.Fatalf("%v", err)
	}
	var s schemaNode
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	return &s
}

// lookup follows a dotted value path through the schema's properties.
func (s *schemaNode) lookup(path string) *schemaNode {
	n := s
	for _, k := range strings.Split(path, ".") {
		if n == nil || n.Properties == nil {
			return nil
		}
		n = n.Properties[k]
	}
	return n
}

// TestSchemaKnowsEveryValue walks values.yaml as TestREADMEListsEveryValue does: every value a
// reader can set has a schema entry (so the schema refuses no documented value), every object the
// schema describes key by key refuses unknown keys, and the schema describes no value that
// values.yaml lacks.
func TestSchemaKnowsEveryValue(t *testing.T) {
	values, paths := chartValues(t)
	schema := readSchema(t)
	for _, p := range paths {
		if schema.lookup(p) == nil {
			t.Errorf("values.schema.json has no entry for the value `%s`", p)
		}
	}
	if len(paths) < 80 {
		t.Errorf("found only %d value paths; the walk over values.yaml is broken", len(paths))
	}
	// The other way round, and additionalProperties: false wherever the schema lists the keys.
	var walk func(prefix string, n *schemaNode)
	walk = func(prefix string, n *schemaNode) {
		if n.Properties == nil {
			return
		}
		if n.AdditionalProperties == nil || *n.AdditionalProperties {
			t.Errorf("values.schema.json: %q lists its keys but allows others (additionalProperties is not false): a misspelt key would pass", prefix)
		}
		for k, child := range n.Properties {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			if !hasPath(values, p) {
				t.Errorf("values.schema.json describes `%s`, which values.yaml does not have", p)
			}
			walk(p, child)
		}
	}
	walk("", schema)
}

func hasPath(values map[string]any, path string) bool {
	var cur any = values
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[k]; !ok {
			return false
		}
	}
	return true
}

// TestSchemaRefusesMistakes: a misspelt key, an unknown policy, mode or strategy, a wrong type fail
// `helm template` (so install, upgrade and lint) with a message that names the key.
func TestSchemaRefusesMistakes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{"misspelt key", map[string]any{"scheduler": map[string]any{"extender": map[string]any{"nodePolcy": "spread"}}},
			[]string{"/scheduler/extender", "'nodePolcy' not allowed"}},
		{"misspelt top-level key", map[string]any{"webhooks": map[string]any{"replicas": 3}}, []string{"'webhooks' not allowed"}},
		{"unknown node policy", map[string]any{"scheduler": map[string]any{"extender": map[string]any{"nodePolicy": "random"}}},
			[]string{"/scheduler/extender/nodePolicy", "must be one of"}},
		{"unknown certificates mode", map[string]any{"webhook": map[string]any{"certificates": map[string]any{"mode": "auto"}}},
			[]string{"/webhook/certificates/mode", "must be one of"}},
		{"unknown pull policy", map[string]any{"webhook": map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}},
			[]string{"/webhook/image/pullPolicy"}},
		{"a number as a word", map[string]any{"webhook": map[string]any{"replicas": "two"}}, []string{"/webhook/replicas", "want integer"}},
		{"a duration without a unit", map[string]any{"scheduler": map[string]any{"extender": map[string]any{"bindWait": "2"}}},
			[]string{"/scheduler/extender/bindWait"}},
		{"a port out of range", map[string]any{"webhook": map[string]any{"port": 70000}}, []string{"/webhook/port"}},
		{"an XID that is no number", map[string]any{"devicePlugin": map[string]any{"health": map[string]any{"ignoredXids": []any{"13"}}}},
			[]string{"/devicePlugin/health/ignoredXids/0"}},
		{"the old webhook.tls", map[string]any{"webhook": map[string]any{"tls": map[string]any{"mode": "helm"}}}, []string{"/webhook", "'tls' not allowed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := renderErr(t, tc.values)
			if !strings.Contains(got, "don't meet the specifications of the schema") {
				t.Errorf("error %q is not the schema's", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("error %q does not contain %q", got, w)
				}
			}
		})
	}
}
