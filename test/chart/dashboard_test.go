package chart

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The Grafana dashboard ships only when asked, in a ConfigMap carrying the sidecar's label (key and
// value configurable), with the dashboard file as it is in the chart.
func TestGrafanaDashboardConfigMap(t *testing.T) {
	const name = "cardinal-dashboard"
	if r := render(t, nil); r.has("ConfigMap", name) {
		t.Errorf("the dashboard ConfigMap is rendered by default; it must be opt-in")
	}
	want, err := os.ReadFile(chartDir + "/files/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string            `json:"uid"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(want, &dash); err != nil || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("files/grafana-dashboard.json: %v (uid %q, %d panels)", err, dash.UID, len(dash.Panels))
	}

	r := render(t, map[string]any{"grafanaDashboard": map[string]any{"enabled": true}})
	cm := get[*corev1.ConfigMap](t, r, name)
	if got := cm.Labels["grafana_dashboard"]; got != "1" {
		t.Errorf("label grafana_dashboard = %q, want \"1\" (Grafana's sidecar default)", got)
	}
	if cm.Namespace != namespace {
		t.Errorf("namespace %q, want the release's %q", cm.Namespace, namespace)
	}
	if got := cm.Data["cardinal-fleet.json"]; got != string(want) {
		t.Errorf("the ConfigMap's dashboard differs from files/grafana-dashboard.json (%d bytes, want %d)", len(got), len(want))
	}

	r = render(t, map[string]any{"grafanaDashboard": map[string]any{"enabled": true, "label": "example.com/dashboard", "labelValue": "cardinal",
		"namespace": "monitoring", "annotations": map[string]any{"grafana_folder": "GPUs"}}})
	cm = get[*corev1.ConfigMap](t, r, name)
	if cm.Labels["example.com/dashboard"] != "cardinal" || cm.Labels["grafana_dashboard"] != "" {
		t.Errorf("labels %v, want example.com/dashboard=cardinal and no grafana_dashboard", cm.Labels)
	}
	if cm.Namespace != "monitoring" || cm.Annotations["grafana_folder"] != "GPUs" {
		t.Errorf("namespace %q annotations %v, want monitoring and grafana_folder=GPUs", cm.Namespace, cm.Annotations)
	}
	if msg := renderErr(t, map[string]any{"grafanaDashboard": map[string]any{"enabled": true, "label": "bad label!"}}); !strings.Contains(msg, "grafanaDashboard") {
		t.Errorf("a bad label key: error %q does not name grafanaDashboard.label", msg)
	}
}
