package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
	"github.com/cardinal-gpu/cardinal/pkg/deviceplugin"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// S6Config sizes S6.
type S6Config struct {
	Nodes       int
	GPUsPerNode int
	// Plugins is how many nodes run the device plugin (in-process, simulated NVML): a sample of
	// Nodes; the figures are scaled to all Nodes. Each plugin holds one inotify instance.
	Plugins int
	// Pods one-GPU pods are scheduled through Cardinal before the window, so the extender and the
	// plugins hold state.
	Pods int
	// Settle is how long the scenario waits after the start-up before the window opens.
	Settle time.Duration
	// Window is the steady-state window.
	Window time.Duration
}

// S6Result counts Cardinal's writes.
type S6Result struct {
	Nodes, Plugins int
	Window         time.Duration
	// StartupNodeWrites are Node writes by Cardinal's clients before the window (inventories the
	// plugins found different from what the node carried).
	StartupNodeWrites int
	// NodeWrites and PodWrites are the writes (POST, PUT, PATCH, DELETE) by Cardinal's clients in
	// the window.
	NodeWrites, PodWrites int
	// NodeWritesPerMinute scales NodeWrites to every node and one minute.
	NodeWritesPerMinute float64
	// APIServerNodeWrites is the apiserver's own count of Node writes in the window, by anyone
	// (apiserver_request_total, verbs PATCH, UPDATE, APPLY, CREATE, DELETE on nodes).
	APIServerNodeWrites float64
}

// writeCounter counts HTTP clients' write requests by resource ("nodes", "pods", ...).
type writeCounter struct {
	mu     sync.Mutex
	writes map[string]int
}

func newWriteCounter() *writeCounter { return &writeCounter{writes: map[string]int{}} }

// wrap is a rest.Config transport wrapper that counts through c.
func (c *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.count(r.Method, r.URL.Path)
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// count records one request; path is an API path such as /api/v1/nodes/n or
// /api/v1/namespaces/ns/pods/p/status.
func (c *writeCounter) count(method, path string) {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		res := resourceOf(path)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.writes[res]++
	}
}

// resourceOf is the resource an API path names: the segment after the version, or after the
// namespace's name.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var i int
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		i = 2
	case len(parts) >= 4 && parts[0] == "apis":
		i = 3
	default:
		return ""
	}
	if parts[i] == "namespaces" && len(parts) > i+2 {
		i += 2
	}
	return parts[i]
}

func (c *writeCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.writes))
	for k, v := range c.writes {
		out[k] = v
	}
	return out
}

// S6 runs S6 of BENCHMARKS.md: cfg.Nodes API-only nodes, the webhook, the extender and
// kube-scheduler with the chart's profile, cfg.Pods pods scheduled through them, and the device
// plugin's real code (Run, simulated NVML, no kubelet) on cfg.Plugins of the nodes; then, after
// cfg.Settle, it counts the writes of every Cardinal client over cfg.Window.
func S6(t cluster.TB, cfg S6Config) S6Result {
	t.Helper()
	b := startBed(t)
	// The sampled nodes start without an inventory, as a node whose plugin has not run yet: each
	// plugin's first publish is a start-up write, which shows the count sees the plugins' writes.
	stride := max(1, cfg.Nodes/max(cfg.Plugins, 1))
	sampled := func(i int) bool { return i%stride == 0 && i/stride < cfg.Plugins }
	if err := b.addNodes(cfg.Nodes, cfg.GPUsPerNode, sampled); err != nil {
		t.Fatalf("nodes: %v", err)
	}
	counter := newWriteCounter()
	b.startWebhook(t)
	url := b.startExtender(t, counter.wrap, nil)
	b.startKubeScheduler(t, "kube-scheduler-cardinal", chartSchedulerConfig(t, url))
	for i := range cfg.Plugins {
		b.startPlugin(t, nodeName(i*stride), cfg.GPUsPerNode, counter)
	}
	cluster.WaitFor(t, readyTimeout, "every plugin to publish its inventory", func() (bool, error) {
		writes := counter.snapshot()
		return writes["nodes"] >= cfg.Plugins, nil
	})
	w, err := watchBindings(b.fast)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer w.stop()
	if _, err := b.createPods(cfg.Pods, 16, func(i int) *corev1.Pod { return gpuPod("s6-"+itoa(i), "", 1) }); err != nil {
		t.Fatalf("%v", err)
	}
	if got := w.waitBound(cfg.Pods, 2*time.Minute); got < cfg.Pods {
		t.Fatalf("S6: %d of %d pods bound", got, cfg.Pods)
	}
	time.Sleep(cfg.Settle) // the start-up's writes end; what follows is steady state

	before := counter.snapshot()
	apiBefore := b.apiServerNodeWrites(t)
	time.Sleep(cfg.Window) // the measurement window
	after := counter.snapshot()
	apiAfter := b.apiServerNodeWrites(t)

	res := S6Result{Nodes: cfg.Nodes, Plugins: cfg.Plugins, Window: cfg.Window, StartupNodeWrites: before["nodes"],
		NodeWrites: after["nodes"] - before["nodes"], PodWrites: after["pods"] - before["pods"],
		APIServerNodeWrites: apiAfter - apiBefore}
	// Plugins write their own node; the extender writes no node: scale the plugins' share.
	res.NodeWritesPerMinute = float64(res.NodeWrites) / cfg.Window.Minutes() * float64(cfg.Nodes) / float64(max(cfg.Plugins, 1))
	t.Logf("S6: %d nodes, %d plugins, window %s: %d node writes (%.1f per minute scaled to all nodes), %d pod writes by Cardinal; apiserver counted %.0f node writes; %d at start-up",
		res.Nodes, res.Plugins, res.Window, res.NodeWrites, res.NodeWritesPerMinute, res.PodWrites, res.APIServerNodeWrites, res.StartupNodeWrites)
	return res
}

// apiServerNodeWrites is the apiserver's count of write requests on nodes so far.
func (b *bed) apiServerNodeWrites(t cluster.TB) float64 {
	t.Helper()
	ms := b.apiServerMetrics(t)
	sum := 0.0
	for _, verb := range []string{"PATCH", "UPDATE", "APPLY", "CREATE", "DELETE"} {
		sum += ms.Sum("apiserver_request_total", map[string]string{"resource": "nodes", "verb": verb})
	}
	return sum
}

// startPlugin runs the device plugin's Run for node in-process, on the simulated cards of
// simCards (NUMA nodes served through a sysfs folder of its own), with no kubelet: it keeps trying
// to register, which costs no API call. Its client counts through counter.
func (b *bed) startPlugin(t cluster.TB, node string, gpus int, counter *writeCounter) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cbp") // short: the plugin's unix socket lives in it
	if err != nil {
		t.Fatalf("plugin dir: %v", err)
	}
	cards := simCards(node, gpus)
	sysfs := filepath.Join(dir, "sys")
	for _, c := range cards {
		devDir := filepath.Join(sysfs, "bus", "pci", "devices", nvidia.NormalizeBusID(sim.BusID(c.Index)))
		if err := os.MkdirAll(devDir, 0o755); err != nil {
			t.Fatalf("sysfs: %v", err)
		}
		if err := os.WriteFile(filepath.Join(devDir, "numa_node"), []byte(fmt.Sprintf("%d\n", c.NUMA)), 0o644); err != nil {
			t.Fatalf("sysfs: %v", err)
		}
	}
	rc := b.extenderConfig(counter.wrap)
	rc.Impersonate = b.c.RESTConfig.Impersonate // the plugin acts as itself (admin here)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatalf("plugin client: %v", err)
	}
	cfg := deviceplugin.DefaultConfig()
	cfg.NodeName, cfg.Client, cfg.NVML, cfg.SysfsRoot = node, client, sim.New(cards), sysfs
	cfg.DevicePluginDir = filepath.Join(dir, "dp")
	cfg.PodResourcesSocket = filepath.Join(dir, "pod-resources.sock")
	cfg.Listen, cfg.Names, cfg.Log = "", annotations.DefaultResourceNames(), logr.Discard()
	if err := os.MkdirAll(cfg.DevicePluginDir, 0o755); err != nil {
		t.Fatalf("plugin dir: %v", err)
	}
	b.goRun(t, "device plugin "+node, func(ctx context.Context) error {
		err := deviceplugin.Run(ctx, cfg)
		return errors.Join(err, os.RemoveAll(dir)) // only once the plugin has stopped serving in it
	})
}
