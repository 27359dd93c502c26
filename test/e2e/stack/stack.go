package stack

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// Where Cardinal is installed.
const (
	Namespace = "cardinal-system"
	Release   = "cardinal"
)

// Timeouts of the bring-up; generous because the machine's cores are shared.
const (
	readyTimeout = 90 * time.Second
	apiTimeout   = 30 * time.Second
)

// NodeSpec is one node of the stack: a real kubelet and a device plugin on the simulated cards the
// simulation file lists under Name.
type NodeSpec struct {
	Name string
	// Shares is the plugin's --shares: 1 for whole cards only, N > 1 for N pods per card.
	Shares int
	// PluginArgs are more flags for the node's device plugin (e.g. --sharing-mode).
	PluginArgs []string
	// Kubelet is the node's kubelet; Start fills in Name and adds the nvidia.com/gpu.present
	// label. With a Machine or a TopologyManager or CPU manager policy, the device plugin also
	// reads the kubelet's configuration file and the machine's NUMA nodes (--kubelet-config,
	// --sysfs-root) and publishes them in the inventory, so the extender predicts the kubelet.
	// With a Machine, every card of the node must be on one of its NUMA nodes.
	Kubelet cluster.KubeletSpec
}

// reportsKubelet says whether the node's plugin publishes its kubelet's topology settings.
func (n NodeSpec) reportsKubelet() bool {
	k := n.Kubelet
	return k.Machine != nil || k.TopologyManagerPolicy != "" || k.CPUManagerPolicy != ""
}

// DemoNodes are the nodes of examples/simulated-gpus.yaml: node-a and node-c give whole cards,
// node-b's H100s are shared by up to 8 pods each.
func DemoNodes() []NodeSpec {
	return []NodeSpec{{Name: "node-a", Shares: 1}, {Name: "node-b", Shares: 8}, {Name: "node-c", Shares: 1}}
}

// VerbosityEnv, when set, raises the --v of Cardinal's binaries in every stack (Options.Verbosity).
const VerbosityEnv = "CARDINAL_STACK_V"

// Options configures Start.
type Options struct {
	// Root is the repository root (charts/cardinal, examples/).
	Root string
	// Bin holds the scheduler-extender, webhook and device-plugin binaries (see Build).
	Bin string
	// SimFile is the simulated-NVML file; empty means Root/examples/simulated-gpus.yaml. The stack
	// runs on a copy (Stack.SimPath) that SetHealth edits.
	SimFile string
	// Nodes are started in order; empty means DemoNodes.
	Nodes []NodeSpec
	// NodePolicy and GPUPolicy are the extender's defaults; empty means binpack.
	NodePolicy, GPUPolicy annotations.Policy
	// Verbosity is the --v of Cardinal's binaries ($CARDINAL_STACK_V raises it, for a failure that
	// needs their decisions logged).
	Verbosity int
	// HealthRecovery is the plugin's --health-recovery-interval; 0 means 2s, so a card marked
	// healthy again in the file recovers quickly.
	HealthRecovery time.Duration
	// Reconcile is the plugin's --reconcile-interval; 0 means 5s.
	Reconcile time.Duration
	// KubeletPoll is the plugin's --kubelet-poll-interval on nodes whose kubelet it reports
	// (NodeSpec.Kubelet); 0 means 1s.
	KubeletPoll time.Duration
	// ChartValues are more values for `helm install` (e.g. {"webhook": {"cpuOnlyPods": {"enabled":
	// true}}}), merged key by key over the ones the stack sets.
	ChartValues map[string]any
}

func (o *Options) defaults() {
	if o.SimFile == "" {
		o.SimFile = filepath.Join(o.Root, "examples", "simulated-gpus.yaml")
	}
	if len(o.Nodes) == 0 {
		o.Nodes = DemoNodes()
	}
	if o.NodePolicy == "" {
		o.NodePolicy = annotations.PolicyBinpack
	}
	if o.GPUPolicy == "" {
		o.GPUPolicy = annotations.PolicyBinpack
	}
	if o.HealthRecovery == 0 {
		o.HealthRecovery = 2 * time.Second
	}
	if o.Reconcile == 0 {
		o.Reconcile = 5 * time.Second
	}
	if o.KubeletPoll == 0 {
		o.KubeletPoll = time.Second
	}
}

func (o *Options) validate() error {
	var errs []error
	if _, err := os.Stat(filepath.Join(o.Root, "charts", "cardinal", "Chart.yaml")); err != nil {
		errs = append(errs, fmt.Errorf("root %q holds no charts/cardinal: %w", o.Root, err))
	}
	for _, b := range []string{ExtenderBinary, WebhookBinary, PluginBinary} {
		if _, err := os.Stat(filepath.Join(o.Bin, b)); err != nil {
			errs = append(errs, fmt.Errorf("binary %s: %w", b, err))
		}
	}
	seen := map[string]bool{}
	for _, n := range o.Nodes {
		switch {
		case n.Name == "":
			errs = append(errs, errors.New("a node has no name"))
		case seen[n.Name]:
			errs = append(errs, fmt.Errorf("node %s is listed twice", n.Name))
		case n.Shares < 1:
			errs = append(errs, fmt.Errorf("node %s: shares %d is below 1", n.Name, n.Shares))
		}
		seen[n.Name] = true
	}
	return errors.Join(errs...)
}

// Card is one simulated card and the node it is on.
type Card struct {
	Node string
	sim.Card
}

// Stack is Cardinal running on the test bed.
type Stack struct {
	Cluster *cluster.Cluster
	Nodes   []NodeSpec
	// SimPath is the simulated-NVML file every plugin watches; SetHealth edits it.
	SimPath string
	// Kubelets and Plugins are keyed by node name.
	Kubelets map[string]*cluster.Kubelet
	Plugins  map[string]*cluster.Process
	Extender *cluster.Process
	Webhook  *cluster.Process
	// ExtenderURL is the extender's base URL (http://127.0.0.1:<port>).
	ExtenderURL string
	// SchedulerConfig is the KubeSchedulerConfiguration from the chart's ConfigMap.
	SchedulerConfig []byte
	// Names are the managed resource names (the defaults).
	Names annotations.ResourceNames

	root           string
	cards          []Card                  // in node order, then index order
	topology       map[string]sim.Topology // the simulation file's topologies of the stack's nodes
	nodeShare      map[string]int
	webhookMetrics string
	pluginMetrics  map[string]string // node -> the plugin's /metrics URL
	simMu          sync.Mutex        // SetHealth's read-modify-write of SimPath
}

// Start brings the whole stack up (see the package documentation) and waits until every node's
// cards are advertised by its kubelet and known to the webhook. Everything stops at t's cleanup.
func Start(t cluster.TB, o Options) *Stack {
	t.Helper()
	started := time.Now()
	o.defaults()
	if err := o.validate(); err != nil {
		t.Fatalf("stack options: %v", err)
	}
	data, err := os.ReadFile(o.SimFile)
	if err != nil {
		t.Fatalf("simulation file: %v", err)
	}
	simFile, err := sim.Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", o.SimFile, err)
	}
	s := &Stack{Nodes: o.Nodes, Kubelets: map[string]*cluster.Kubelet{}, Plugins: map[string]*cluster.Process{},
		Names: annotations.DefaultResourceNames(), nodeShare: map[string]int{}, root: o.Root,
		pluginMetrics: map[string]string{}}
	for _, n := range o.Nodes {
		cards, err := simFile.Cards(n.Name)
		if err != nil {
			t.Fatalf("%s: %v", o.SimFile, err)
		}
		for _, c := range cards {
			if m := n.Kubelet.Machine; m != nil && (c.NUMA < 0 || c.NUMA >= m.NUMANodes) {
				t.Fatalf("%s: card %s of %s is on NUMA %d; its machine has NUMA nodes 0 to %d", o.SimFile, c.UUID, n.Name, c.NUMA, m.NUMANodes-1)
			}
			s.cards = append(s.cards, Card{Node: n.Name, Card: c})
		}
		s.nodeShare[n.Name] = n.Shares
		if top, ok := simFile.Topology[n.Name]; ok {
			if s.topology == nil {
				s.topology = map[string]sim.Topology{}
			}
			s.topology[n.Name] = top
		}
	}

	s.Cluster = cluster.Start(t, cluster.Options{})
	c := s.Cluster
	s.SimPath = filepath.Join(c.Dir, "simulated-gpus.yaml")
	if err := s.writeSim(); err != nil {
		t.Fatalf("simulation file: %v", err)
	}
	ports, err := cluster.FreePorts(4 + len(o.Nodes))
	if err != nil {
		t.Fatalf("ports: %v", err)
	}
	extPort, whPort, whHealth, whMetrics := ports[0], ports[1], ports[2], ports[3]
	s.ExtenderURL = "http://127.0.0.1:" + strconv.Itoa(extPort)

	certDir := filepath.Join(c.Dir, "webhook-certs")
	caPEM, err := cluster.WriteServingCert(certDir, tokenLifetime)
	if err != nil {
		t.Fatalf("webhook certificate: %v", err)
	}
	webhookURL := "https://127.0.0.1:" + strconv.Itoa(whPort) + webhookPath
	if err := s.helmInstall(t, s.ExtenderURL, webhookURL, caPEM, o.ChartValues); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	accounts, err := s.serviceAccounts(ctx)
	if err != nil {
		t.Fatalf("the chart's ServiceAccounts: %v", err)
	}
	s.SchedulerConfig, err = s.chartSchedulerConfig(ctx)
	if err != nil {
		t.Fatalf("the chart's scheduler configuration: %v", err)
	}

	verbosity := o.Verbosity
	if v := os.Getenv(VerbosityEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s=%q: want a number (the --v of Cardinal's binaries)", VerbosityEnv, v)
		}
		verbosity = max(verbosity, n)
	}
	logArgs := []string{"--v=" + strconv.Itoa(verbosity), "--log-format=console"}
	extKubeconfig, err := s.tokenKubeconfig(ctx, "extender", accounts.scheduler, nil)
	if err != nil {
		t.Fatalf("extender credentials: %v", err)
	}
	s.Extender = c.StartProcess(t, "scheduler-extender", append([]string{filepath.Join(o.Bin, ExtenderBinary),
		"--listen=127.0.0.1:" + strconv.Itoa(extPort),
		"--kubeconfig=" + extKubeconfig,
		"--node-policy=" + string(o.NodePolicy),
		"--gpu-policy=" + string(o.GPUPolicy),
		"--exact-scheduler-name=" + ExactSchedulerName,
	}, logArgs...)...)
	whKubeconfig, err := s.tokenKubeconfig(ctx, "webhook", accounts.webhook, nil)
	if err != nil {
		t.Fatalf("webhook credentials: %v", err)
	}
	s.Webhook = c.StartProcess(t, "webhook", append([]string{filepath.Join(o.Bin, WebhookBinary),
		"--listen=127.0.0.1:" + strconv.Itoa(whPort),
		"--cert-dir=" + certDir,
		"--health-listen=127.0.0.1:" + strconv.Itoa(whHealth),
		"--metrics-listen=127.0.0.1:" + strconv.Itoa(whMetrics),
		"--kubeconfig=" + whKubeconfig,
		"--trusted-service-accounts=" + saUser(accounts.scheduler) + "," + saUser(accounts.pluginSA),
		"--exact-scheduler-name=" + ExactSchedulerName,
	}, logArgs...)...)
	s.webhookMetrics = "http://127.0.0.1:" + strconv.Itoa(whMetrics) + "/metrics"
	s.WaitHTTP(t, s.Extender, s.ExtenderURL+"/readyz")
	s.WaitHTTP(t, s.Webhook, "http://127.0.0.1:"+strconv.Itoa(whHealth)+"/readyz")
	c.StartScheduler(t, s.SchedulerConfig)

	for i, n := range o.Nodes {
		spec := n.Kubelet
		spec.Name = n.Name
		spec.Labels = maps.Clone(spec.Labels)
		if spec.Labels == nil {
			spec.Labels = map[string]string{}
		}
		spec.Labels["nvidia.com/gpu.present"] = "true"
		k := c.AddKubelet(t, spec)
		s.Kubelets[n.Name] = k
		node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
		kc, err := s.tokenKubeconfig(ctx, "device-plugin-"+n.Name, accounts.pluginSA, node)
		if err != nil {
			t.Fatalf("device plugin credentials on %s: %v", n.Name, err)
		}
		s.pluginMetrics[n.Name] = "http://127.0.0.1:" + strconv.Itoa(ports[4+i]) + "/metrics"
		var kubeletArgs []string
		if n.reportsKubelet() {
			kubeletArgs, err = pluginKubeletArgs(t, c, k, o.KubeletPoll, filepath.Join(o.Bin, PluginBinary), logArgs)
			if err != nil {
				t.Fatalf("device plugin on %s: %v", n.Name, err)
			}
		}
		s.Plugins[n.Name] = c.StartProcess(t, "device-plugin-"+n.Name, append(append([]string{filepath.Join(o.Bin, PluginBinary),
			"--node-name=" + n.Name,
			"--kubeconfig=" + kc,
			"--device-plugin-dir=" + k.DevicePluginDir,
			"--pod-resources-socket=" + k.PodResourcesSocket,
			"--simulate=" + s.SimPath,
			"--shares=" + strconv.Itoa(n.Shares),
			"--exact-scheduler-name=" + ExactSchedulerName,
			"--listen=127.0.0.1:" + strconv.Itoa(ports[4+i]),
			"--health-recovery-interval=" + o.HealthRecovery.String(),
			"--reconcile-interval=" + o.Reconcile.String(),
		}, append(kubeletArgs, n.PluginArgs...)...), logArgs...)...)
	}
	for _, n := range o.Nodes {
		s.WaitAdvertised(t, n.Name)
	}
	s.waitWebhookKnowsCards(t)
	t.Logf("Cardinal stack ready in %s: %d nodes, %d cards", time.Since(started).Round(time.Millisecond), len(o.Nodes), len(s.cards))
	return s
}

// pluginKubeletArgs are the device plugin's flags that make it report kubelet k's topology: the
// kubelet's configuration file, a sysfs root whose devices/system/{node,cpu} are the synthetic
// machine the kubelet sees in its mount namespace (the plugin runs outside it), or the host's /sys,
// and the CPU manager checkpoint as the chart gives it: a copy that a copier process (the plugin
// binary's --copy-cpu-manager-state, the chart's cpu-state-copier container) keeps of the
// kubelet's, which it starts.
func pluginKubeletArgs(t cluster.TB, c *cluster.Cluster, k *cluster.Kubelet, poll time.Duration, plugin string, logArgs []string) ([]string, error) {
	config := filepath.Join(k.Dir, "config.yaml")
	if _, err := os.Stat(config); err != nil {
		return nil, fmt.Errorf("the kubelet's configuration file: %w", err)
	}
	sysfs := "/sys"
	if k.Machine != nil {
		machine := filepath.Join(k.Dir, "machine") // test/cluster's synthetic tree: cpu, node, cpuinfo
		sysfs = filepath.Join(c.Dir, "sysfs-"+k.Name)
		system := filepath.Join(sysfs, "devices", "system")
		if err := os.MkdirAll(system, 0o755); err != nil {
			return nil, err
		}
		for _, d := range []string{"node", "cpu"} {
			if _, err := os.Stat(filepath.Join(machine, d)); err != nil {
				return nil, fmt.Errorf("the kubelet's synthetic machine: %w", err)
			}
			if err := os.Symlink(filepath.Join(machine, d), filepath.Join(system, d)); err != nil {
				return nil, err
			}
		}
	}
	copyDir := filepath.Join(c.Dir, "cpu-state-"+k.Name)
	if err := os.MkdirAll(copyDir, 0o755); err != nil {
		return nil, err
	}
	cpuState := filepath.Join(copyDir, "cpu_manager_state")
	c.StartProcess(t, "cpu-state-copier-"+k.Name, append([]string{plugin,
		"--copy-cpu-manager-state=" + filepath.Join(k.Root, "cpu_manager_state") + ":" + cpuState}, logArgs...)...)
	return []string{"--kubelet-config=" + config, "--sysfs-root=" + sysfs, "--kubelet-poll-interval=" + poll.String(),
		"--cpu-manager-state=" + cpuState}, nil
}

// saUser is the username of a ServiceAccount in Namespace.
func saUser(name string) string { return "system:serviceaccount:" + Namespace + ":" + name }

// Cards returns every simulated card of the stack's nodes, in node order, then index order, with
// the health the simulation file gave at start.
func (s *Stack) Cards() []Card { return slices.Clone(s.cards) }

// NodeCards returns the cards of one node.
func (s *Stack) NodeCards(node string) []Card {
	var out []Card
	for _, c := range s.cards {
		if c.Node == node {
			out = append(out, c)
		}
	}
	return out
}

// Card returns the card with the given UUID.
func (s *Stack) Card(uuid string) (Card, bool) {
	for _, c := range s.cards {
		if c.UUID == uuid {
			return c, true
		}
	}
	return Card{}, false
}

// Shares is the --shares of a node's plugin.
func (s *Stack) Shares(node string) int { return s.nodeShare[node] }

// Kubeconfig is the admin kubeconfig of the stack's cluster.
func (s *Stack) Kubeconfig() string { return s.Cluster.Kubeconfig }

// WaitHTTP waits until url answers 200, failing t early when p exits.
func (s *Stack) WaitHTTP(t cluster.TB, p *cluster.Process, url string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var last string
	cluster.WaitFor(t, readyTimeout, p.Name+" at "+url, func() (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("%s exited (%s); last lines of %s:\n%s (last answer: %s)", p.Name, fmt.Sprint(err), p.LogPath, p.Tail(30), last)
		}
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // polling: an error means not ready yet
		}
		_ = resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
}

// WaitAdvertised waits until node's inventory annotation lists its cards with the health the
// simulation file gives them now, and its kubelet reports as allocatable one device per healthy
// card (Shares per card when shared). A card in MIG mode (now or pending) is never served whole: it
// is listed unhealthy and gives no device.
func (s *Stack) WaitAdvertised(t cluster.TB, node string) {
	t.Helper()
	cards, err := s.simCards(node)
	if err != nil {
		t.Fatalf("%v", err)
	}
	want := 0
	healthy := map[string]bool{}
	for _, c := range cards {
		healthy[c.UUID] = c.Healthy && (c.MIG == nil || !c.MIG.Enabled())
		if healthy[c.UUID] {
			want += s.nodeShare[node]
		}
	}
	Wait(t, readyTimeout, "node "+node+" advertising its cards", func() (bool, string, error) {
		if p := s.Plugins[node]; p != nil {
			if exited, err := p.Exited(); exited {
				return false, "", fmt.Errorf("%s exited (%s); last lines:\n%s", p.Name, fmt.Sprint(err), p.Tail(30))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		n, err := s.Node(ctx, node)
		if err != nil {
			return false, "", err
		}
		raw, ok := n.Annotations[annotations.GPUInventory]
		if !ok {
			return false, "no inventory annotation", nil
		}
		inv, err := annotations.DecodeInventory(raw)
		if err != nil {
			return false, "", err
		}
		if len(inv.GPUs) != len(healthy) {
			return false, fmt.Sprintf("inventory lists %d cards, want %d", len(inv.GPUs), len(healthy)), nil
		}
		for _, g := range inv.GPUs {
			if h, known := healthy[g.UUID]; !known || h != g.Healthy {
				return false, fmt.Sprintf("inventory has %s healthy=%v", g.UUID, g.Healthy), nil
			}
		}
		q := n.Status.Allocatable[s.Names.GPU]
		if q.Value() != int64(want) {
			return false, fmt.Sprintf("node allocatable %s is %s, want %d", s.Names.GPU, q.String(), want), nil
		}
		// What the kubelet's admission uses: its device manager's healthy devices.
		ids, err := s.Allocatable(ctx, node)
		if err != nil {
			return false, err.Error(), nil
		}
		if len(ids) != want {
			return false, fmt.Sprintf("kubelet has %d allocatable %s devices, want %d", len(ids), s.Names.GPU, want), nil
		}
		return true, "", nil
	})
}

// Wait calls cond every 100ms until it reports done; an error from cond fails t at once, and so
// does the timeout, with what and the last state cond reported in the message.
func Wait(t cluster.TB, timeout time.Duration, what string, cond func() (done bool, state string, err error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, state, err := cond()
		switch {
		case err != nil:
			t.Fatalf("waiting for %s: %v", what, err)
			return
		case done:
			return
		case time.Now().After(deadline):
			t.Fatalf("waiting for %s: timed out after %s; last state: %s", what, timeout, state)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Node returns the Node object.
func (s *Stack) Node(ctx context.Context, name string) (*corev1.Node, error) {
	return s.Cluster.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// adminCA returns the CA the admin kubeconfig trusts.
func (s *Stack) adminCA() ([]byte, error) {
	cfg, err := clientcmd.LoadFromFile(s.Cluster.Kubeconfig)
	if err != nil {
		return nil, err
	}
	for _, cl := range cfg.Clusters {
		return cl.CertificateAuthorityData, nil
	}
	return nil, errors.New("admin kubeconfig has no cluster")
}
