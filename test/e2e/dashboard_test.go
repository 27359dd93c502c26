package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// TestDashboard runs a real Prometheus (Debian's package: bash hack/prometheus.sh puts it in
// .cache/prometheus/, CARDINAL_PROMETHEUS names another) scraping the stack's extender, webhook
// and device plugins, and a stand-in for dcgm-exporter serving its metrics with its labels for the
// cards the pods hold (dcgm-exporter needs a GPU). With a pod on a whole card, one on a share and
// one on any card and one Pending, every query of every panel of the chart's Grafana dashboard must parse and return
// data. It then checks the docs/operating.md's metrics table against what the three binaries expose.
func TestDashboard(t *testing.T) {
	promBin := prometheusBinary(t)
	root, err := stack.Root()
	if err != nil {
		t.Fatal(err)
	}
	queries := dashboardQueries(t, filepath.Join(root, "charts/cardinal/files/grafana-dashboard.json"))

	s := stack.Start(t, stack.Options{Root: root, Bin: binaries})
	e := &env{Stack: s, client: s.Cluster.Client}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	dcgm := &fakeDCGM{}
	dcgmSrv := httptest.NewServer(dcgm)
	t.Cleanup(dcgmSrv.Close)
	targets := map[string]string{"cardinal-extender": s.ExtenderMetricsURL(), "cardinal-webhook": s.WebhookMetricsURL(), "dcgm-exporter": dcgmSrv.URL + "/metrics"}
	for _, n := range s.Nodes {
		targets["cardinal-device-plugin-"+n.Name] = s.PluginMetricsURL(n.Name)
	}
	prom := startPrometheus(t, promBin, targets)

	e.create(t,
		pod("d-whole", map[string]string{annotations.UseGPUType: "A100"}),
		pod("d-shared", map[string]string{annotations.UseGPUType: "H100"}, ctr("main", gpu{cards: 1, memMiB: 20000, cores: 30})),
		// Any model: several nodes fit, so the filter shortlist counts it.
		pod("d-any", nil),
		pod("d-pending", map[string]string{annotations.UseGPUType: "V100"}))
	e.waitRunning(t, "d-whole", "d-shared", "d-any")
	e.waitUnschedulable(t, "d-pending")
	dcgm.set(s.Cards(), e.truth(t, "d-whole", "d-shared"))

	// Beyond data, what the pods make true: the Pending pod counts under no_model (no V100
	// anywhere), the whole A100 makes its model partly allocated, and the shared H100 card is
	// reserved and used (the stand-in's series joined with the holdings).
	queries = append(queries,
		panelQuery{"(check) the Pending pod", `cardinal_extender_pending_pods{class="no_model"} >= 1`},
		panelQuery{"(check) A100s allocated", `cardinal_extender_model_allocation_ratio{model="NVIDIA A100-SXM4-80GB"} > 0`},
		panelQuery{"(check) reserved vs used joined", `DCGM_FI_DEV_FB_USED{pod="d-shared"} / on (Hostname, UUID, namespace, pod, container) cardinal_device_plugin_container_reserved_memory_mib{pod="d-shared"}`})
	// Counters need two scrapes after they moved for rate() to answer, so wait for all of them.
	stack.Wait(t, 90*time.Second, "every panel query returns data", func() (bool, string, error) {
		var empty []string
		for _, q := range queries {
			n, err := prom.query(q.expr)
			if err != nil {
				return false, "", fmt.Errorf("panel %q: %w", q.panel, err)
			}
			if n == 0 {
				empty = append(empty, fmt.Sprintf("panel %q: %s", q.panel, q.expr))
			}
		}
		return len(empty) == 0, "no data yet for\n" + strings.Join(empty, "\n"), nil
	})
	t.Logf("%d queries (the dashboard's panels and 3 checks) return data", len(queries))

	t.Run("docs metrics table", func(t *testing.T) {
		exposed := map[string]metricRow{}
		scrape := func(component, url string) {
			for name, row := range scrapeFamilies(t, url) {
				row.component = component
				exposed[name] = row
			}
		}
		scrape("extender", s.ExtenderMetricsURL())
		scrape("webhook", s.WebhookMetricsURL())
		for _, n := range s.Nodes {
			scrape("device plugin", s.PluginMetricsURL(n.Name))
		}
		checkMetricsTable(t, filepath.Join(root, "docs", "operating.md"), exposed)
	})
}

// prometheusBinary finds the prometheus binary: $CARDINAL_PROMETHEUS, hack/prometheus.sh's cache,
// or $PATH. Without one the test fails: `make test` and .ci/run fetch it first.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CARDINAL_PROMETHEUS"); p != "" {
		return p
	}
	if root, err := stack.Root(); err == nil {
		if p := filepath.Join(root, ".cache/prometheus/usr/bin/prometheus"); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p
	}
	t.Fatalf("no prometheus binary (CI=%q): run `bash hack/prometheus.sh` (Debian's package into .cache/prometheus/) or set CARDINAL_PROMETHEUS", os.Getenv("CI"))
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// panelQuery is one target of one panel of the dashboard.
type panelQuery struct{ panel, expr string }

// dashboardQueries reads every target's expression of every panel (rows' panels included).
func dashboardQueries(t *testing.T, path string) []panelQuery {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var dash struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []panelQuery
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("%s: panel %q has a target without expr", path, p.Title)
				}
				out = append(out, panelQuery{panel: p.Title, expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	if len(out) < 10 {
		t.Fatalf("%s: only %d panel queries", path, len(out))
	}
	return out
}

// prometheus is a running Prometheus server.
type prometheus struct{ url string }

// startPrometheus runs bin scraping each job's one target every second, until the test ends.
func startPrometheus(t *testing.T, bin string, targets map[string]string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nscrape_configs:\n")
	jobs := slices.Sorted(func(yield func(string) bool) {
		for j := range targets {
			if !yield(j) {
				return
			}
		}
	})
	for _, job := range jobs {
		u, err := url.Parse(targets[job])
		if err != nil || u.Host == "" {
			t.Fatalf("job %s: bad target %q", job, targets[job])
		}
		fmt.Fprintf(&cfg, "  - job_name: %q\n    metrics_path: %q\n    static_configs:\n      - targets: [%q]\n", job, u.Path, u.Host)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		exit := <-exited // killed
		_ = logFile.Close()
		if t.Failed() {
			if log, err := os.ReadFile(logPath); err == nil {
				t.Logf("prometheus (%v) log:\n%s", exit, log)
			}
		}
	})
	p := &prometheus{url: "http://" + addr}
	stack.Wait(t, 30*time.Second, "prometheus ready", func() (bool, string, error) {
		select {
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(logPath)
			return false, "", fmt.Errorf("prometheus exited: %w\n%s", err, log)
		default:
		}
		// Not listening yet is a state to wait out, not an error.
		state := "not answering"
		if resp, err := http.Get(p.url + "/-/ready"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, "", nil
			}
			state = resp.Status
		}
		return false, state, nil
	})
	return p
}

// query runs an instant query and returns how many series or samples it answered; a query
// Prometheus refuses (a parse error) is an error.
func (p *prometheus) query(expr string) (int, error) {
	resp, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, fmt.Errorf("query %q: %s: %w", expr, resp.Status, err)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("query %q: %s", expr, r.Error)
	}
	switch r.Data.ResultType {
	case "vector", "matrix":
		var series []json.RawMessage
		if err := json.Unmarshal(r.Data.Result, &series); err != nil {
			return 0, err
		}
		return len(series), nil
	}
	return 1, nil // scalar, string
}

// fakeDCGM serves what dcgm-exporter would for the stack's cards, with its labels (gpu, UUID,
// device, modelName, Hostname, and with its Kubernetes mapping namespace, pod, container on the
// cards a container holds): memory used (half of what the container reserved, or 1 GiB) and
// utilization.
type fakeDCGM struct {
	mu   sync.Mutex
	text []byte
}

func (f *fakeDCGM) set(cards []stack.Card, truth map[string]held) {
	type use struct{ ns, pod, container string }
	users := map[string][]use{}
	for key, h := range truth {
		podName, container, _ := strings.Cut(key, "/")
		for _, c := range h.Cards {
			users[c.UUID] = append(users[c.UUID], use{namespace, podName, container})
		}
	}
	var b bytes.Buffer
	for _, m := range []struct{ name, help string }{
		{"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."},
		{"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."},
	} {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", m.name, m.help, m.name)
		for _, c := range cards {
			labels := fmt.Sprintf(`gpu="%d",UUID=%q,device="nvidia%d",modelName=%q,Hostname=%q,DCGM_FI_DRIVER_VERSION="550.54.15"`, c.Index, c.UUID, c.Index, c.Model, c.Node)
			value := 1024
			if m.name == "DCGM_FI_DEV_GPU_UTIL" {
				value = 0
			}
			us := users[c.UUID]
			if len(us) == 0 {
				us = []use{{}}
			} else if m.name == "DCGM_FI_DEV_FB_USED" {
				value = int(c.MemoryMiB / 2)
			} else {
				value = 40
			}
			for _, u := range us {
				l := labels
				if u.pod != "" {
					l += fmt.Sprintf(`,namespace=%q,pod=%q,container=%q`, u.ns, u.pod, u.container)
				}
				fmt.Fprintf(&b, "%s{%s} %d\n", m.name, l, value)
			}
		}
	}
	f.mu.Lock()
	f.text = b.Bytes()
	f.mu.Unlock()
}

func (f *fakeDCGM) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write(f.text)
}

// metricRow is one metric as docs/operating.md's table lists it, or as a binary exposes it.
type metricRow struct {
	component, kind string
	labels          []string
}

func (r metricRow) String() string {
	return fmt.Sprintf("%s, %s, labels %v", r.component, r.kind, r.labels)
}

// scrapeFamilies reads a /metrics endpoint's cardinal_* families: type and label names.
func scrapeFamilies(t *testing.T, url string) map[string]metricRow {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	out := map[string]metricRow{}
	for name, f := range families {
		if !strings.HasPrefix(name, "cardinal_") {
			continue
		}
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		row := metricRow{kind: strings.ToLower(f.GetType().String())}
		for l := range labels {
			row.labels = append(row.labels, l)
		}
		sort.Strings(row.labels)
		out[name] = row
	}
	return out
}

// checkMetricsTable compares the docs/operating.md's metrics table (rows "| `name` | type | `label`, … | component | …")
// with what the binaries expose, both ways.
func checkMetricsTable(t *testing.T, readme string, exposed map[string]metricRow) {
	t.Helper()
	raw, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]metricRow{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| `cardinal_") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 5 {
			t.Errorf("docs/operating.md: metrics row with %d cells, want 5: %s", len(cells), line)
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		row := metricRow{kind: strings.TrimSpace(cells[1]), component: strings.TrimSpace(cells[3])}
		if ls := strings.TrimSpace(cells[2]); ls != "-" {
			for _, l := range strings.Split(ls, ",") {
				row.labels = append(row.labels, strings.Trim(strings.TrimSpace(l), "`"))
			}
		}
		sort.Strings(row.labels)
		if _, dup := listed[name]; dup {
			t.Errorf("docs/operating.md lists %s twice", name)
		}
		listed[name] = row
	}
	for name, want := range exposed {
		got, ok := listed[name]
		switch {
		case !ok:
			t.Errorf("docs/operating.md's metrics table has no row for %s (%v)", name, want)
		case got.String() != want.String():
			t.Errorf("docs/operating.md's metrics table: %s is %v; the binary exposes %v", name, got, want)
		}
	}
	for name, row := range listed {
		if _, ok := exposed[name]; !ok {
			t.Errorf("docs/operating.md's metrics table lists %s (%v), which no binary exposed", name, row)
		}
	}
	if len(listed) < 20 {
		t.Errorf("docs/operating.md's metrics table has %d rows; its parser is broken", len(listed))
	}
}
