package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Timeouts for the control plane; generous because the machine's two cores are shared.
const (
	etcdReadyTimeout      = 30 * time.Second
	apiServerReadyTimeout = 90 * time.Second
	startAttempts         = 3 // a free port taken by someone else between choice and bind
)

// dirPrefix names cluster dirs under os.TempDir(); ownerFile in each names the process that made it.
const (
	dirPrefix = "cardinal-tb-"
	ownerFile = "owner"
)

// serviceCIDR is the apiserver's service range; nothing routes it, Services just need one.
const serviceCIDR = "10.96.0.0/16"

// Options configures Start.
type Options struct {
	// SchedulerConfig is a KubeSchedulerConfiguration (YAML); when set, Start also starts
	// kube-scheduler with it (see StartScheduler).
	SchedulerConfig []byte
	// APIServerFlags are appended to kube-apiserver's command line (a later flag wins), e.g.
	// "--feature-gates=...". The harness's own flags come first.
	APIServerFlags []string
}

// Cluster is an etcd and a kube-apiserver on loopback, with what was added to them. Every
// component runs as a child process with its log in the test's temp dir; all are stopped, and
// Dir removed, at the cleanup of the TB given to Start.
type Cluster struct {
	// Dir holds the cluster's state: etcd data, certificates, kubeconfig, kubelet roots. It is
	// short (under os.TempDir) so unix socket paths inside it stay below the 108-byte limit.
	Dir string
	// LogDir holds every component's log; it is a temp dir of the TB given to Start.
	LogDir string
	// Kubeconfig is the path of an admin kubeconfig (a token in group system:masters).
	Kubeconfig   string
	APIServerURL string
	// Token is the admin bearer token the kubeconfig holds.
	Token      string
	RESTConfig *rest.Config
	Client     kubernetes.Interface

	Etcd      *Process
	APIServer *Process
	Scheduler *Process // nil until StartScheduler

	bin string

	mu        sync.Mutex
	processes []*Process
	kubelets  map[string]*Kubelet
	stopped   bool
}

// Start starts etcd and kube-apiserver on free loopback ports and waits until the apiserver is
// ready; with opts.SchedulerConfig it starts kube-scheduler too. Everything is torn down at t's
// cleanup (see Stop).
func Start(t TB, opts Options) *Cluster {
	t.Helper()
	bin := BinDir(t)
	removeStaleDirs(t)
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		t.Fatalf("cluster dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(processIdentity(os.Getpid())), 0o644); err != nil {
		t.Fatalf("cluster dir: %v", err)
	}
	c := &Cluster{Dir: dir, LogDir: logDir(t), bin: bin, kubelets: map[string]*Kubelet{}}
	// Registered before any process starts, so it runs after all their cleanups (LIFO).
	t.Cleanup(func() {
		c.Stop()
		if err := os.RemoveAll(c.Dir); err != nil {
			t.Errorf("remove %s: %v", c.Dir, err)
		}
	})
	started := time.Now()
	if err := c.writeCredentials(); err != nil {
		t.Fatalf("cluster credentials: %v", err)
	}
	for attempt := 1; ; attempt++ {
		err := c.startControlPlane(t, attempt, opts.APIServerFlags)
		if err == nil {
			break
		}
		if attempt == startAttempts {
			t.Fatalf("start the control plane: %v", err)
		}
		t.Logf("start the control plane, attempt %d: %v; retrying", attempt, err)
	}
	t.Logf("cluster %s: etcd and kube-apiserver ready at %s in %s", c.Dir, c.APIServerURL, time.Since(started).Round(time.Millisecond))
	if opts.SchedulerConfig != nil {
		c.StartScheduler(t, opts.SchedulerConfig)
	}
	return c
}

// Stop stops every process of the cluster, kubelets and their namespace processes first, then the
// scheduler, kube-apiserver and etcd. It is idempotent; Start registers it at cleanup.
func (c *Cluster) Stop() {
	c.mu.Lock()
	procs := c.processes
	c.processes = nil
	c.stopped = true
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop()
	}
}

// track remembers p so that Stop ends it.
func (c *Cluster) track(p *Process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.processes = append(c.processes, p)
}

// Processes returns every process the cluster has started and not yet forgotten at Stop.
func (c *Cluster) Processes() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Process(nil), c.processes...)
}

// StartProcess starts any host command, with its output in LogDir/<name>.log, stopped at t's
// cleanup and at Stop.
func (c *Cluster) StartProcess(t TB, name string, args ...string) *Process {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("StartProcess %s: no command", name)
	}
	return c.startProcess(t, name, func() (*exec.Cmd, error) {
		return exec.Command(args[0], args[1:]...), nil
	})
}

func (c *Cluster) startProcess(t TB, name string, command func() (*exec.Cmd, error)) *Process {
	t.Helper()
	c.mu.Lock()
	stopped := c.stopped
	c.mu.Unlock()
	if stopped {
		t.Fatalf("start %s: the cluster is stopped", name)
	}
	p := startProcess(t, name, filepath.Join(c.LogDir, name+".log"), command)
	c.track(p)
	return p
}

func (c *Cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.Dir}, elem...)...)
}

// writeCredentials writes the admin token file and the service-account signing key.
func (c *Cluster) writeCredentials() error {
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	c.Token = hex.EncodeToString(token)
	tokens := fmt.Sprintf("%s,admin,admin,system:masters\n", c.Token)
	if err := os.WriteFile(c.path("tokens.csv"), []byte(tokens), 0o600); err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	return os.WriteFile(c.path("sa.key"), keyPEM, 0o600)
}

// startControlPlane starts etcd and kube-apiserver on fresh ports and waits for both; on error
// both are stopped again so the caller can retry.
func (c *Cluster) startControlPlane(t TB, attempt int, extraFlags []string) (err error) {
	t.Helper()
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	apiPort := ports[2]
	suffix := ""
	if attempt > 1 {
		suffix = "-" + strconv.Itoa(attempt)
	}
	dataDir := c.path("etcd" + suffix)
	etcd := c.startProcess(t, "etcd"+suffix, func() (*exec.Cmd, error) {
		return exec.Command(filepath.Join(c.bin, "etcd"),
			"--name=etcd",
			"--data-dir="+dataDir,
			"--listen-client-urls="+clientURL,
			"--advertise-client-urls="+clientURL,
			"--listen-peer-urls="+peerURL,
			"--initial-advertise-peer-urls="+peerURL,
			"--initial-cluster=etcd="+peerURL,
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		), nil
	})
	defer func() {
		if err != nil {
			etcd.Stop()
		}
	}()
	if err := c.waitHTTP(etcd, etcdReadyTimeout, http.DefaultClient, clientURL+"/health", ""); err != nil {
		return err
	}

	certDir := c.path("apiserver-certs")
	apiserver := c.startProcess(t, "kube-apiserver"+suffix, func() (*exec.Cmd, error) {
		args := []string{
			"--etcd-servers=" + clientURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(apiPort),
			"--cert-dir=" + certDir,
			"--token-auth-file=" + c.path("tokens.csv"),
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + c.path("sa.key"),
			"--service-account-signing-key-file=" + c.path("sa.key"),
			"--service-cluster-ip-range=" + serviceCIDR,
			"--allow-privileged=true",
			"--endpoint-reconciler-type=none",
			// No kube-controller-manager creates default ServiceAccounts or the kube-root-ca.crt
			// ConfigMap; without this plugin pods need neither. Webhook and policy admission stay on.
			"--disable-admission-plugins=ServiceAccount",
		}
		return exec.Command(filepath.Join(c.bin, "kube-apiserver"), append(args, extraFlags...)...), nil
	})
	defer func() {
		if err != nil {
			apiserver.Stop()
		}
	}()
	c.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // only to poll readiness; the kubeconfig pins the CA
	if err := c.waitHTTP(apiserver, apiServerReadyTimeout, insecure, c.APIServerURL+"/readyz", c.Token); err != nil {
		return err
	}
	if err := c.writeKubeconfig(filepath.Join(certDir, "apiserver.crt")); err != nil {
		return err
	}
	c.Etcd, c.APIServer = etcd, apiserver
	return nil
}

// waitHTTP polls url until it answers 200, failing early when p exits.
func (c *Cluster) waitHTTP(p *Process, timeout time.Duration, client *http.Client, url, token string) error {
	var last string
	err := poll(timeout, func() (bool, error) {
		if err := p.failIfExited(); err != nil {
			return false, err
		}
		var ok bool
		ok, last = probeHTTP(client, url, token)
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("%s not ready at %s (last answer: %s): %w", p.Name, url, last, err)
	}
	return nil
}

// probeHTTP GETs url (with a bearer token unless empty) and reports whether it answered 200, and
// what it answered: a status, or why there was none. Failures are answers here, not errors: the
// callers poll until the server is up.
func probeHTTP(client *http.Client, url, token string) (bool, string) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := withTimeout(client).Do(req)
	if err != nil {
		return false, err.Error()
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK, resp.Status
}

func withTimeout(c *http.Client) *http.Client {
	cc := *c
	cc.Timeout = 5 * time.Second
	return &cc
}

// writeKubeconfig writes the admin kubeconfig and builds RESTConfig and Client from it. The
// apiserver's self-signed certificate file holds its CA too, so it serves as the kubeconfig's CA.
func (c *Cluster) writeKubeconfig(caFile string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cardinal-testbed"] = &clientcmdapi.Cluster{Server: c.APIServerURL, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: c.Token}
	cfg.Contexts["cardinal-testbed"] = &clientcmdapi.Context{Cluster: "cardinal-testbed", AuthInfo: "admin"}
	cfg.CurrentContext = "cardinal-testbed"
	c.Kubeconfig = c.path("admin.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, c.Kubeconfig); err != nil {
		return err
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*cfg, cfg.CurrentContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 200, 400 // tests create objects in bursts; the default 5 QPS would pace them
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	c.RESTConfig, c.Client = rc, client
	return nil
}

// processIdentity is "<pid> <start time in clock ticks>" (field 22 of /proc/<pid>/stat), which
// tells a process apart from a later one with the same pid; "" if pid does not exist.
func processIdentity(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may hold spaces; count fields after it.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return ""
	}
	return strconv.Itoa(pid) + " " + fields[19]
}

// removeStaleDirs removes the cluster dirs of processes that are gone without cleaning up (a
// test binary killed by its -timeout, say). Their components died with them (PR_SET_PDEATHSIG)
// and their mounts with the namespaces, so only files are left.
func removeStaleDirs(t TB) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not ours to judge, or still being created
		}
		pid, _, _ := strings.Cut(string(owner), " ")
		n, err := strconv.Atoi(pid)
		if err != nil || processIdentity(n) == string(owner) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("remove stale test-bed dir %s: %v", dir, err)
		}
	}
}

// KeepLogsEnv names a folder under which each cluster's component logs are kept after the test
// (one sub-folder per test), for a failure that needs more than the last lines printed.
const KeepLogsEnv = "CARDINAL_TESTBED_KEEP_LOGS"

// logDir is where the cluster's processes log: a folder of the test, removed with it, or one kept
// under $CARDINAL_TESTBED_KEEP_LOGS.
func logDir(t TB) string {
	keep := os.Getenv(KeepLogsEnv)
	if keep == "" {
		return t.TempDir()
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	if err := os.MkdirAll(keep, 0o755); err != nil {
		t.Fatalf("%s: %v", KeepLogsEnv, err)
	}
	dir, err := os.MkdirTemp(keep, name+"-")
	if err != nil {
		t.Fatalf("%s: %v", KeepLogsEnv, err)
	}
	t.Logf("component logs kept in %s", dir)
	return dir
}
