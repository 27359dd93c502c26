package stack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// Interpose puts two loopback proxies around the extender, for fault injection: an ExtenderProxy at
// ExtenderURL (where kube-scheduler calls it), forwarding to the extender restarted on another port,
// and an APIProxy between the extender's client and the API server. Both pass everything through
// until a test queues faults; both close at t's cleanup. t must be the test that owns the stack.
func (s *Stack) Interpose(t cluster.TB) (*APIProxy, *ExtenderProxy) {
	t.Helper()
	args, err := s.Extender.Args()
	if err != nil {
		t.Fatalf("extender command line: %v", err)
	}
	ca, err := s.adminCA()
	if err != nil {
		t.Fatalf("API server CA: %v", err)
	}
	api, err := NewAPIProxy(s.Cluster.APIServerURL, ca, filepath.Join(s.Cluster.Dir, "api-proxy-certs"))
	if err != nil {
		t.Fatalf("API proxy: %v", err)
	}
	t.Cleanup(api.Close)
	kc, ok := flagValue(args, "--kubeconfig")
	if !ok {
		t.Fatalf("the extender runs without --kubeconfig: %v", args)
	}
	proxied, err := proxiedKubeconfig(kc, api.URL, api.CA)
	if err != nil {
		t.Fatalf("extender kubeconfig through the proxy: %v", err)
	}
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatalf("ports: %v", err)
	}
	backend := "127.0.0.1:" + strconv.Itoa(ports[0])
	args = setFlag(args, "--kubeconfig", proxied)
	args = setFlag(args, "--listen", backend)
	s.Extender.Stop()
	front, err := newExtenderProxy(strings.TrimPrefix(s.ExtenderURL, "http://"), "http://"+backend)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(front.Close)
	s.Extender.RestartWith(t, args...)
	s.WaitHTTP(t, s.Extender, s.ExtenderURL+"/readyz")
	return api, front
}

// proxiedKubeconfig writes a copy of the kubeconfig at path that reaches the API server through
// proxyURL, trusting proxyCA (the token is kept), and returns its path.
func proxiedKubeconfig(path, proxyURL string, proxyCA []byte) (string, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", err
	}
	for _, c := range cfg.Clusters {
		c.Server = proxyURL
		c.CertificateAuthorityData = proxyCA
		c.CertificateAuthority = ""
	}
	out := strings.TrimSuffix(path, ".kubeconfig") + "-proxied.kubeconfig"
	return out, clientcmd.WriteToFile(*cfg, out)
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// setFlag returns args with --name=value replacing any --name=… (or appended).
func setFlag(args []string, name, value string) []string {
	out := make([]string, 0, len(args)+1)
	for _, a := range args {
		if !strings.HasPrefix(a, name+"=") {
			out = append(out, a)
		}
	}
	return append(out, name+"="+value)
}

// Kill sends SIGKILL to p's process group, as a crash or an OOM kill would, and waits until it has
// exited. Restart starts it again.
func Kill(p *cluster.Process) error {
	pid := p.Pid()
	if pid == 0 {
		return fmt.Errorf("%s is not running", p.Name)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", p.Name, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if exited, _ := p.Exited(); exited {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not exit after SIGKILL", p.Name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// HelmUpgrade runs `helm upgrade --reset-then-reuse-values` of the release with --set values (e.g.
// "devicePlugin.shares=2"): the chart's current defaults, the install's values over them, the sets
// over those. (Plain --reuse-values would keep the install-time defaults too, and break on values
// the chart gained since.)
func (s *Stack) HelmUpgrade(t cluster.TB, sets ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"upgrade", Release, filepath.Join(s.root, "charts", "cardinal"),
		"--namespace", Namespace, "--kubeconfig", s.Cluster.Kubeconfig, "--reset-then-reuse-values"}
	for _, v := range sets {
		args = append(args, "--set", v)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(cluster.BinDir(t), "helm"), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(s.Cluster.Dir, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(s.Cluster.Dir, "helm", "config"),
		"HELM_DATA_HOME="+filepath.Join(s.Cluster.Dir, "helm", "data"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

// ChartShares reads --shares from the device plugin's DaemonSet the chart installed.
func (s *Stack) ChartShares(ctx context.Context) (int, error) {
	list, err := s.Cluster.Client.AppsV1().DaemonSets(Namespace).List(ctx, metav1.ListOptions{LabelSelector: componentLabel + "=device-plugin"})
	if err != nil {
		return 0, err
	}
	for _, ds := range list.Items {
		for _, c := range ds.Spec.Template.Spec.Containers {
			if v, ok := flagValue(c.Args, "--shares"); ok {
				return strconv.Atoi(v)
			}
		}
	}
	return 0, fmt.Errorf("no device-plugin DaemonSet in %s with --shares", Namespace)
}

// RollPlugin does what the DaemonSet's rolling update does on node after `helm upgrade` changed
// --shares: it stops node's plugin and starts it with the DaemonSet's --shares, then waits until
// the plugin has registered and the node advertises the new number of devices.
func (s *Stack) RollPlugin(t cluster.TB, node string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	shares, err := s.ChartShares(ctx)
	if err != nil {
		t.Fatalf("%v", err)
	}
	s.SetPluginShares(t, node, shares)
	return shares
}

// SetPluginShares restarts node's plugin with --shares=shares (the stack's own per-node setting, as
// at Start) and waits until it has registered, the inventory gives every card shares, and the
// Node's allocatable count equals the devices the kubelet offers. It does not ask for a number of
// devices: with pods holding IDs of the old share count the plugin may withhold some (WaitAdvertised
// asks for all, once no pod holds any).
func (s *Stack) SetPluginShares(t cluster.TB, node string, shares int) {
	t.Helper()
	p := s.Plugins[node]
	args, err := p.Args()
	if err != nil {
		t.Fatalf("%s command line: %v", p.Name, err)
	}
	s.nodeShare[node] = shares
	p.RestartWith(t, setFlag(args, "--shares", strconv.Itoa(shares))...)
	s.waitRegistrations(t, node, 1)
	Wait(t, readyTimeout, fmt.Sprintf("node %s advertising shares %d", node, shares), func() (bool, string, error) {
		if exited, err := p.Exited(); exited {
			return false, "", fmt.Errorf("%s exited (%s); last lines:\n%s", p.Name, fmt.Sprint(err), p.Tail(30))
		}
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		inv, err := s.Inventory(ctx, node)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, g := range inv.GPUs {
			if g.Shares != shares {
				return false, fmt.Sprintf("inventory gives %s shares %d", g.UUID, g.Shares), nil
			}
		}
		ids, err := s.Allocatable(ctx, node)
		if err != nil {
			return false, err.Error(), nil
		}
		n, err := s.Node(ctx, node)
		if err != nil {
			return false, err.Error(), nil
		}
		q := n.Status.Allocatable[s.Names.GPU]
		if len(ids) == 0 || q.Value() != int64(len(ids)) {
			return false, fmt.Sprintf("node allocatable %s is %s, the kubelet offers %d devices", s.Names.GPU, q.String(), len(ids)), nil
		}
		return true, "", nil
	})
}

// SetFault sets (or, with fault "", removes) the `fault:` field of one card's entry in the
// simulation file the plugins watch, e.g. "lost" for a card that has fallen off the bus. It edits
// the file as plain YAML, so it works whether or not package sim knows the field yet, and waits for
// nothing.
func (s *Stack) SetFault(uuid, fault string) error {
	s.simMu.Lock()
	defer s.simMu.Unlock()
	data, err := os.ReadFile(s.SimPath)
	if err != nil {
		return err
	}
	var f map[string]any
	if err := yaml.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("%s: %w", s.SimPath, err)
	}
	nodes, _ := f["nodes"].(map[string]any)
	for _, v := range nodes {
		entries, _ := v.([]any)
		for _, e := range entries {
			m, _ := e.(map[string]any)
			if m == nil || m["uuid"] != uuid {
				continue
			}
			if fault == "" {
				delete(m, "fault")
			} else {
				m["fault"] = fault
			}
			b, err := yaml.Marshal(f)
			if err != nil {
				return err
			}
			tmp := s.SimPath + ".tmp"
			if err := os.WriteFile(tmp, b, 0o644); err != nil {
				return err
			}
			return os.Rename(tmp, s.SimPath)
		}
	}
	return fmt.Errorf("card %s is not in %s", uuid, s.SimPath)
}

// Inventory returns node's cardinal.io/gpu-inventory.
func (s *Stack) Inventory(ctx context.Context, node string) (annotations.Inventory, error) {
	n, err := s.Node(ctx, node)
	if err != nil {
		return annotations.Inventory{}, err
	}
	raw, ok := n.Annotations[annotations.GPUInventory]
	if !ok {
		return annotations.Inventory{}, fmt.Errorf("node %s has no %s", node, annotations.GPUInventory)
	}
	return annotations.DecodeInventory(raw)
}
