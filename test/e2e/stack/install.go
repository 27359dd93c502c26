package stack

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// webhookPath is the chart's default webhook.path, where the webhook binary serves admission.
const webhookPath = "/mutate-pods"

// schedulerConfigKey is the key of the chart's scheduler ConfigMap that holds the
// KubeSchedulerConfiguration.
const schedulerConfigKey = "scheduler-config.yaml"

// componentLabel is the chart's label naming the component of each object.
const componentLabel = "app.kubernetes.io/component"

// tokenLifetime of the ServiceAccount tokens the binaries use; a kept demo outlives a test.
const tokenLifetime = 24 * time.Hour

// helmInstall installs charts/cardinal into Namespace with the values that point the scheduler at
// the extender on the host and the API server at the webhook on the host, and extra over them.
func (s *Stack) helmInstall(t cluster.TB, extenderURL, webhookURL string, caPEM []byte, extra map[string]any) error {
	t.Helper()
	values := map[string]any{
		"scheduler": map[string]any{"extender": map[string]any{"urlPrefix": extenderURL}},
		"webhook": map[string]any{"clientConfig": map[string]any{
			"url":      webhookURL,
			"caBundle": base64.StdEncoding.EncodeToString(caPEM),
		}},
	}
	mergeValues(values, extra)
	b, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	valuesPath := filepath.Join(s.Cluster.Dir, "cardinal-values.yaml")
	if err := os.WriteFile(valuesPath, b, 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(cluster.BinDir(t), "helm"), "install", Release,
		filepath.Join(s.root, "charts", "cardinal"),
		"--namespace", Namespace, "--create-namespace",
		"--kubeconfig", s.Cluster.Kubeconfig,
		"--values", valuesPath)
	// helm keeps its cache and config next to the cluster, never in the user's home.
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(s.Cluster.Dir, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(s.Cluster.Dir, "helm", "config"),
		"HELM_DATA_HOME="+filepath.Join(s.Cluster.Dir, "helm", "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// mergeValues sets every value of extra in values, descending into maps both have.
func mergeValues(values, extra map[string]any) {
	for k, v := range extra {
		sub, isMap := v.(map[string]any)
		have, hasMap := values[k].(map[string]any)
		if isMap && hasMap {
			mergeValues(have, sub)
			continue
		}
		values[k] = v
	}
}

// accounts are the chart's ServiceAccounts, by component.
type accounts struct {
	scheduler, webhook, pluginSA string
}

// serviceAccounts finds the chart's ServiceAccounts by their component label.
func (s *Stack) serviceAccounts(ctx context.Context) (accounts, error) {
	list, err := s.Cluster.Client.CoreV1().ServiceAccounts(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return accounts{}, err
	}
	var a accounts
	for _, sa := range list.Items {
		switch sa.Labels[componentLabel] {
		case "scheduler":
			a.scheduler = sa.Name
		case "webhook":
			a.webhook = sa.Name
		case "device-plugin":
			a.pluginSA = sa.Name
		}
	}
	if a.scheduler == "" || a.webhook == "" || a.pluginSA == "" {
		return a, fmt.Errorf("want a ServiceAccount labelled %s=scheduler, webhook and device-plugin in %s, found %+v", componentLabel, Namespace, a)
	}
	return a, nil
}

// chartSchedulerConfig reads the KubeSchedulerConfiguration from the chart's ConfigMap.
func (s *Stack) chartSchedulerConfig(ctx context.Context) ([]byte, error) {
	list, err := s.Cluster.Client.CoreV1().ConfigMaps(Namespace).List(ctx, metav1.ListOptions{LabelSelector: componentLabel + "=scheduler"})
	if err != nil {
		return nil, err
	}
	for _, cm := range list.Items {
		if v, ok := cm.Data[schedulerConfigKey]; ok {
			return []byte(v), nil
		}
	}
	return nil, fmt.Errorf("no ConfigMap labelled %s=scheduler in %s has %s", componentLabel, Namespace, schedulerConfigKey)
}

// tokenKubeconfig writes a kubeconfig holding a token of ServiceAccount sa, bound to node when
// node is not nil (so the API server adds the node-name claim, as for a pod's projected token).
func (s *Stack) tokenKubeconfig(ctx context.Context, name, sa string, node *corev1.Node) (string, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second))}}
	if node != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}
	}
	tok, err := s.Cluster.Client.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s: %w", sa, err)
	}
	ca, err := s.adminCA()
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cardinal-testbed"] = &clientcmdapi.Cluster{Server: s.Cluster.APIServerURL, CertificateAuthorityData: ca}
	cfg.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["cardinal-testbed"] = &clientcmdapi.Context{Cluster: "cardinal-testbed", AuthInfo: sa}
	cfg.CurrentContext = "cardinal-testbed"
	path := filepath.Join(s.Cluster.Dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

// writeSim writes the stack's simulation file: one entry per card with its UUID spelt out, so
// SetHealth can change one card, and the nodes' topologies.
func (s *Stack) writeSim() error {
	f := sim.File{Nodes: map[string][]sim.Entry{}, Topology: s.topology}
	for _, c := range s.cards {
		numa := c.NUMA
		healthy := c.Healthy
		f.Nodes[c.Node] = append(f.Nodes[c.Node], sim.Entry{Model: c.Model, MemoryMiB: c.MemoryMiB, NUMA: &numa, UUID: c.UUID, Healthy: &healthy, MIG: migEntry(&c.Card)})
	}
	return writeSimFile(s.SimPath, &f)
}

// migEntry spells out a card's MIG mode and instances (UUIDs included) as the simulation file
// writes them; nil for a card without MIG support.
func migEntry(c *sim.Card) *sim.MIGEntry {
	if c.MIG == nil {
		return nil
	}
	state := func(on bool) sim.MIGState {
		if on {
			return sim.MIGEnabled
		}
		return sim.MIGDisabled
	}
	e := &sim.MIGEntry{Current: state(c.MIG.Current), Pending: state(c.MIG.Pending)}
	for _, in := range c.Instances {
		healthy := in.Healthy
		e.Instances = append(e.Instances, sim.InstanceEntry{Profile: in.Profile, UUID: in.UUID, Healthy: &healthy, MemoryMiB: in.MemoryMiB, SMs: in.SMs})
	}
	return e
}

func writeSimFile(path string, f *sim.File) error {
	b, err := yaml.Marshal(f)
	if err != nil {
		return err
	}
	// Written beside and renamed over, so a plugin never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// simCards reads the stack's simulation file as it is now.
func (s *Stack) simCards(node string) ([]sim.Card, error) {
	cards, err := sim.Load(s.SimPath, node)
	if err != nil {
		return nil, fmt.Errorf("simulation file %s: %w", s.SimPath, err)
	}
	return cards, nil
}

// SetHealth marks a card healthy or not in the simulation file, as NVML would report it, and waits
// until the node's inventory and its kubelet's allocatable count agree.
func (s *Stack) SetHealth(t cluster.TB, uuid string, healthy bool) {
	t.Helper()
	card, ok := s.Card(uuid)
	if !ok {
		t.Fatalf("SetHealth: no card %s", uuid)
	}
	if err := s.setHealth(uuid, healthy); err != nil {
		t.Fatalf("SetHealth %s: %v", uuid, err)
	}
	s.WaitAdvertised(t, card.Node)
}

func (s *Stack) setHealth(uuid string, healthy bool) error {
	s.simMu.Lock()
	defer s.simMu.Unlock()
	data, err := os.ReadFile(s.SimPath)
	if err != nil {
		return err
	}
	f, err := sim.Parse(data)
	if err != nil {
		return err
	}
	for _, entries := range f.Nodes {
		for i := range entries {
			if entries[i].UUID == uuid {
				entries[i].Healthy = &healthy
				return writeSimFile(s.SimPath, f)
			}
			if m := entries[i].MIG; m != nil {
				for j := range m.Instances {
					if m.Instances[j].UUID == uuid {
						m.Instances[j].Healthy = &healthy
						return writeSimFile(s.SimPath, f)
					}
				}
			}
		}
	}
	return errors.New("not in the simulation file")
}

// SetMIGHealth marks a MIG instance of node healthy or not in the simulation file (an XID on it,
// as NVML would report) and waits until the node's inventory says so and its kubelet lists the
// instance as allocatable exactly when it is healthy.
func (s *Stack) SetMIGHealth(t cluster.TB, node, uuid string, healthy bool) {
	t.Helper()
	if err := s.setHealth(uuid, healthy); err != nil {
		t.Fatalf("SetMIGHealth %s: %v", uuid, err)
	}
	Wait(t, readyTimeout, fmt.Sprintf("node %s advertising instance %s healthy=%v", node, uuid, healthy), func() (bool, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		inv, err := s.Inventory(ctx, node)
		if err != nil {
			return false, err.Error(), nil //nolint:nilerr // polling: not published yet
		}
		found := false
		for i := range inv.GPUs {
			if in := inv.GPUs[i].Instance(uuid); in != nil {
				found = true
				if in.Healthy != healthy {
					return false, fmt.Sprintf("inventory has %s healthy=%v", uuid, in.Healthy), nil
				}
			}
		}
		if !found {
			return false, "", fmt.Errorf("inventory of %s lists no instance %s", node, uuid)
		}
		alloc, err := s.MIGAllocatable(ctx, node)
		if err != nil {
			return false, err.Error(), nil //nolint:nilerr // polling
		}
		listed := false
		for _, ids := range alloc {
			listed = listed || slices.Contains(ids, uuid)
		}
		if listed != healthy {
			return false, fmt.Sprintf("kubelet lists %s allocatable=%v", uuid, listed), nil
		}
		return true, "", nil
	})
}

// waitWebhookKnowsCards waits until the webhook's node watcher has every card (its
// cardinal_webhook_known_cards gauge), so admission decisions see the whole cluster.
func (s *Stack) waitWebhookKnowsCards(t cluster.TB) {
	t.Helper()
	want := len(s.cards)
	client := &http.Client{Timeout: 5 * time.Second}
	Wait(t, readyTimeout, "the webhook to know every card", func() (bool, string, error) {
		resp, err := client.Get(s.webhookMetrics)
		if err != nil {
			return false, err.Error(), nil
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			name, value, ok := strings.Cut(sc.Text(), " ")
			if ok && name == "cardinal_webhook_known_cards" {
				n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
				if err != nil {
					return false, "", fmt.Errorf("cardinal_webhook_known_cards %q: %w", value, err)
				}
				return int(n) == want, fmt.Sprintf("known cards %d, want %d", int(n), want), nil
			}
		}
		return false, "no cardinal_webhook_known_cards in " + s.webhookMetrics, sc.Err()
	})
}
