package scenario

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler"
	"github.com/cardinal-gpu/cardinal/pkg/webhook"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// Names shared by every scenario.
const (
	// CardinalScheduler is the profile the chart gives Cardinal's kube-scheduler.
	CardinalScheduler = "cardinal-scheduler"
	// CardinalExactScheduler is the chart's exact profile (exactSchedulerName), which scores every
	// node; the webhook and the extender are told of it as the chart tells them.
	CardinalExactScheduler = "cardinal-scheduler-exact"
	// Namespace holds the scenarios' pods.
	Namespace = "bench"
	// cardinalNS is Cardinal's own namespace (never sent to the webhook).
	cardinalNS = "cardinal-system"
	// extenderUser is the ServiceAccount the in-process extender acts as: the webhook trusts its
	// pod UPDATEs, as the chart's configuration does.
	extenderUser = "system:serviceaccount:" + cardinalNS + ":" + extenderSA
	// extenderSA is that ServiceAccount's name.
	extenderSA = "cardinal-scheduler"
	// GPUModel and GPUMemoryMiB describe every simulated card.
	GPUModel     = "NVIDIA A100-SXM4-80GB"
	GPUMemoryMiB = 81920
)

// Timeouts of the bring-up and of waits; generous because the machine's cores are shared.
const (
	readyTimeout = 2 * time.Minute
	apiTimeout   = 30 * time.Second
)

// bed is a test-bed cluster with the clients and components a scenario started on it.
type bed struct {
	c *cluster.Cluster
	// fast is an admin client without client-side rate limiting, for setting up and loading.
	fast kubernetes.Interface
	// extenderToken is a token of the extender's ServiceAccount (TokenRequest), which Cardinal's
	// in-process components authenticate with, as in a cluster.
	extenderToken string
	// cancels stop the in-process components, last started first.
	mu      sync.Mutex
	cancels []func()
}

// apiServerFlags lift the apiserver's defaults that would pace the scenarios' own load (nodes are
// created Ready and untainted, so TaintNodesByCondition has nothing to do here).
var apiServerFlags = []string{
	"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
	"--max-requests-inflight=1000",
	"--max-mutating-requests-inflight=500",
}

func startBed(t cluster.TB) *bed {
	t.Helper()
	ctrllog.SetLogger(logr.Discard()) // controller-runtime's package logger, used by the webhook server
	c := cluster.Start(t, cluster.Options{APIServerFlags: apiServerFlags})
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.QPS, cfg.Burst = 5000, 5000
	fast, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	b := &bed{c: c, fast: fast}
	t.Cleanup(b.stop)
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	for _, ns := range []string{Namespace, cardinalNS} {
		if _, err := fast.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}
	// The extender's identity may do what the chart's RBAC lets it do, and more: the scenarios
	// measure speed, not permissions.
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-extender"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: extenderUser}},
	}
	if _, err := fast.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("extender RBAC: %v", err)
	}
	// The extender's own ServiceAccount token, as the chart's Deployment mounts it: the API server
	// authenticates it (and caches that), where impersonation would add an authorization check of
	// the admin's right to impersonate to each of Cardinal's requests.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: extenderSA, Namespace: cardinalNS}}
	if _, err := fast.CoreV1().ServiceAccounts(cardinalNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("extender ServiceAccount: %v", err)
	}
	ttl := int64(6 * 3600)
	tok, err := fast.CoreV1().ServiceAccounts(cardinalNS).CreateToken(ctx, extenderSA,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("extender token: %v", err)
	}
	b.extenderToken = tok.Status.Token
	return b
}

// stop ends the in-process components, last started first.
func (b *bed) stop() {
	b.mu.Lock()
	cancels := b.cancels
	b.cancels = nil
	b.mu.Unlock()
	for i := len(cancels) - 1; i >= 0; i-- {
		cancels[i]()
	}
}

// goRun runs fn in a goroutine until the bed stops; an error other than at the stop fails t at
// the stop (a component that dies early also shows as pods that never bind).
func (b *bed) goRun(t cluster.TB, name string, fn func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	b.mu.Lock()
	b.cancels = append(b.cancels, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	b.mu.Unlock()
}

// simCards are the cards the simulated NVML gives node: gpus A100s, the first half on NUMA node 0.
func simCards(node string, gpus int) []sim.Card {
	cards := make([]sim.Card, gpus)
	for i := range cards {
		cards[i] = sim.Card{UUID: sim.DerivedUUID(node, i), Index: i, Model: GPUModel, MemoryMiB: GPUMemoryMiB, NUMA: 2 * i / gpus, Healthy: true}
	}
	return cards
}

// inventoryOf is the inventory the device plugin publishes for cards (whole cards, NUMA known).
func inventoryOf(cards []sim.Card) annotations.Inventory {
	inv := annotations.Inventory{V: annotations.Version}
	for _, c := range cards {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: c.UUID, Index: c.Index, Model: c.Model, MemoryMiB: c.MemoryMiB, NUMA: c.NUMA, Healthy: true, Shares: 1})
	}
	return inv
}

// nodeName is the name of the i-th node of a scenario.
func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// addNodes creates n API-only nodes of gpus cards each, Ready and untainted, with nvidia.com/gpu
// capacity and, unless bare(i), the inventory the device plugin would publish, concurrently.
func (b *bed) addNodes(n, gpus int, bare func(i int) bool) error {
	names := annotations.DefaultResourceNames()
	return parallel(n, 32, func(i int) error {
		name := nodeName(i)
		inv, err := annotations.EncodeInventory(inventoryOf(simCards(name, gpus)))
		if err != nil {
			return err
		}
		ann := map[string]string{annotations.GPUInventory: inv}
		if bare != nil && bare(i) {
			ann = nil
		}
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("64"),
			corev1.ResourceMemory:           resource.MustParse("512Gi"),
			corev1.ResourcePods:             resource.MustParse("110"),
			names.GPU:                       *resource.NewQuantity(int64(gpus), resource.DecimalSI),
			corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
		}
		now := metav1.Now()
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann,
				Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}},
			Status: corev1.NodeStatus{
				Capacity: capacity, Allocatable: capacity,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}},
				Addresses:  []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}},
				NodeInfo:   corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "v0.0.0-api-only"},
			},
		}
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		created, err := b.fast.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		if len(created.Status.Allocatable) == 0 { // an apiserver that drops status on create
			created.Status = node.Status
			if _, err := b.fast.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("status of node %s: %w", name, err)
			}
		}
		return nil
	})
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func parallel(n, workers int, fn func(i int) error) error {
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range min(workers, max(n, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first error
			for i := range next {
				if first == nil {
					first = fn(i)
				}
			}
			errs <- first
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// freeAddr is a loopback address nobody listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startWebhook runs the webhook in-process and registers it with the apiserver as the chart does
// (test/integration/webhook does the same); it returns once the apiserver calls it.
func (b *bed) startWebhook(t cluster.TB) *prometheus.Registry {
	t.Helper()
	dir := t.TempDir()
	ca, err := cluster.WriteServingCert(dir, 24*time.Hour)
	if err != nil {
		t.Fatalf("webhook certificate: %v", err)
	}
	listen, err1 := freeAddr()
	health, err2 := freeAddr()
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("webhook ports: %v", err)
	}
	reg := prometheus.NewRegistry()
	cfg := webhook.Config{
		Listen: listen, CertDir: dir, HealthListen: health, SchedulerName: CardinalScheduler, ExactSchedulerName: CardinalExactScheduler,
		TrustedServiceAccounts: []string{extenderUser}, Resources: annotations.DefaultResourceNames(),
		Client: b.c.Client, Logger: logr.Discard(), Registry: reg,
	}
	b.goRun(t, "webhook", func(ctx context.Context) error { return webhook.Run(ctx, cfg) })
	cluster.WaitFor(t, readyTimeout, "the webhook to be ready", func() (bool, error) {
		return httpOK("http://" + health + "/readyz"), nil
	})
	opts := webhook.DefaultConfigurationOptions()
	opts.Namespace, opts.URL, opts.CABundle, opts.TrustedUsers = cardinalNS, "https://"+listen+webhook.Path, ca, []string{extenderUser}
	whc, err := webhook.MutatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatalf("webhook configuration: %v", err)
	}
	ctx := context.Background()
	if _, err := b.fast.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, whc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the webhook: %v", err)
	}
	cluster.WaitFor(t, readyTimeout, "the apiserver to call the webhook", func() (bool, error) {
		p, err := b.fast.CoreV1().Pods(Namespace).Create(ctx, gpuPod("probe", "", 1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && p.Spec.SchedulerName == CardinalScheduler, nil
	})
	return reg
}

// extenderConfig is the REST config of Cardinal's in-process components: the extender's
// ServiceAccount token, with wrap (when not nil) around the transport, and no QPS of its own so each
// component applies its binary's default.
func (b *bed) extenderConfig(wrap func(http.RoundTripper) http.RoundTripper) *rest.Config {
	cfg := rest.CopyConfig(b.c.RESTConfig)
	cfg.QPS, cfg.Burst = 0, 0
	cfg.BearerToken, cfg.BearerTokenFile = b.extenderToken, ""
	if wrap != nil {
		cfg.Wrap(wrap)
	}
	return cfg
}

// startExtender runs Cardinal's extender in-process, as the binary would (same Run, its default
// client rate limits), and returns its URL once its caches have synced. tune, when set, changes
// the binary's defaults first.
func (b *bed) startExtender(t cluster.TB, wrap func(http.RoundTripper) http.RoundTripper, tune func(*scheduler.Config)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("extender listener: %v", err)
	}
	cfg := scheduler.DefaultConfig()
	cfg.Listener, cfg.RESTConfig = ln, b.extenderConfig(wrap)
	cfg.ExactSchedulerName = CardinalExactScheduler
	if tune != nil {
		tune(&cfg)
	}
	url := "http://" + ln.Addr().String()
	b.goRun(t, "extender", func(ctx context.Context) error { return scheduler.Run(ctx, cfg) })
	cluster.WaitFor(t, readyTimeout, "the extender's caches to sync", func() (bool, error) { return httpOK(url + "/readyz"), nil })
	return url
}

func httpOK(url string) bool {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// kubeScheduler is a kube-scheduler process whose /metrics the scenario can read.
type kubeScheduler struct {
	*cluster.Process
	metricsURL string
	pprofURL   string
}

// profile writes a CPU profile of the next d of kube-scheduler to path (its /debug/pprof; the
// KubeSchedulerConfiguration's enableProfiling defaults to true).
func (k *kubeScheduler) profile(path string, d time.Duration) error {
	c := &http.Client{Timeout: d + time.Minute, Transport: insecureClient.Transport}
	resp, err := c.Get(fmt.Sprintf("%s?seconds=%d", k.pprofURL, int(d.Seconds())))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", k.pprofURL, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// schedulerClientQPS is the kube-scheduler's own client rate limit in every scenario. The default
// (50) would cap plain kube-scheduler at about 50 bindings per second while Cardinal's extender
// binds with its own client, so both get the same high limit and the comparison measures
// scheduling work, as kube-scheduler's own scheduler_perf does.
const schedulerClientQPS = 5000

// chartSchedulerConfig renders charts/cardinal's KubeSchedulerConfiguration (with the helm --set
// values set, if any) with the extender at
// url, through helm template, so the scenarios run what the chart installs.
func chartSchedulerConfig(t cluster.TB, extenderURL string, set ...string) map[string]any {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("chart: %v", err)
	}
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(cluster.BinDir(t), "helm"), "template", "cardinal", filepath.Join(root, "charts", "cardinal"),
		"--kube-version", "v1.34.4", "--namespace", cardinalNS,
		"--show-only", "templates/scheduler/configmap.yaml",
		"--set", "scheduler.extender.urlPrefix="+extenderURL)
	for _, v := range set {
		cmd.Args = append(cmd.Args, "--set", v)
	}
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(out, &cm); err != nil {
		t.Fatalf("chart scheduler ConfigMap: %v", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["scheduler-config.yaml"]), &cfg); err != nil || cfg == nil {
		t.Fatalf("chart scheduler config: %v", err)
	}
	return cfg
}

// repoRoot finds the repository root (the folder with go.mod) above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// startKubeScheduler starts kube-scheduler with config (a KubeSchedulerConfiguration as a map; nil
// is the default profile only), the harness's admin kubeconfig, the high client QPS, no leader
// election, and /metrics readable without credentials.
func (b *bed) startKubeScheduler(t cluster.TB, name string, config map[string]any) *kubeScheduler {
	t.Helper()
	if config == nil {
		config = map[string]any{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
	}
	config["clientConnection"] = map[string]any{"kubeconfig": b.c.Kubeconfig, "qps": schedulerClientQPS, "burst": schedulerClientQPS}
	config["leaderElection"] = map[string]any{"leaderElect": false}
	data, err := yaml.Marshal(config)
	if err != nil {
		t.Fatalf("kube-scheduler config: %v", err)
	}
	path := filepath.Join(b.c.Dir, name+".yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("kube-scheduler config: %v", err)
	}
	addr, err := freeAddr()
	if err != nil {
		t.Fatalf("kube-scheduler port: %v", err)
	}
	_, port, _ := strings.Cut(addr, ":")
	p := b.c.StartProcess(t, name, filepath.Join(cluster.BinDir(t), "kube-scheduler"),
		"--config="+path, "--bind-address=127.0.0.1", "--secure-port="+port,
		"--authentication-kubeconfig="+b.c.Kubeconfig, "--authorization-kubeconfig="+b.c.Kubeconfig,
		"--authentication-skip-lookup=true",
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/debug/pprof/*",
		"--v=1")
	ks := &kubeScheduler{Process: p, metricsURL: "https://127.0.0.1:" + port + "/metrics", pprofURL: "https://127.0.0.1:" + port + "/debug/pprof/profile"}
	cluster.WaitFor(t, readyTimeout, name+" to be ready", func() (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("%s exited (%s):\n%s", name, fmt.Sprint(err), p.Tail(30))
		}
		return insecureOK("https://127.0.0.1:" + port + "/readyz"), nil
	})
	return ks
}

var insecureClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the scheduler's self-signed serving cert; only health and metrics are read

func insecureOK(url string) bool {
	resp, err := insecureClient.Get(url)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// metrics reads the scheduler's /metrics.
func (k *kubeScheduler) metrics() ([]byte, error) {
	resp, err := insecureClient.Get(k.metricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", k.metricsURL, resp.Status, body)
	}
	return body, nil
}

// gpuPod is a pod of one container asking for gpus whole cards, for schedulerName (empty: the
// default; the webhook sets Cardinal's on GPU pods).
func gpuPod(name, schedulerName string, gpus int) *corev1.Pod {
	q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: corev1.PodSpec{
			SchedulerName: schedulerName,
			Containers: []corev1.Container{{Name: "main", Image: "registry.invalid/cuda:12", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), "nvidia.com/gpu": q},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": q},
			}}},
		},
	}
}

// createPods creates n pods made by mk(i) with workers concurrent clients and returns how long it
// took.
func (b *bed) createPods(n, workers int, mk func(i int) *corev1.Pod) (time.Duration, error) {
	start := time.Now()
	err := parallel(n, workers, func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		p := mk(i)
		if _, err := b.fast.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
		return nil
	})
	return time.Since(start), err
}

// deletePods removes every pod of the namespace at once (grace period 0: no kubelet runs them) and
// waits until they are gone.
func (b *bed) deletePods(t cluster.TB) {
	t.Helper()
	ctx := context.Background()
	zero := int64(0)
	if err := b.fast.CoreV1().Pods(Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete pods: %v", err)
	}
	cluster.WaitFor(t, readyTimeout, "every pod to be gone", func() (bool, error) {
		l, err := b.fast.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(l.Items) == 0, nil
	})
}

// itoa is strconv.Itoa, short for names.
func itoa(i int) string { return strconv.Itoa(i) }
