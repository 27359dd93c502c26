// Package webhook_test runs Cardinal's admission webhook in-process, registered with a real
// kube-apiserver (test/cluster) through the MutatingWebhookConfiguration pkg/webhook generates: GPU
// pods (MIG pods included) come back with Cardinal's scheduler, other pods are never sent, forged
// and malformed pods are refused with the documented messages, warnings reach the client, and a
// rotated certificate is picked up.
package webhook_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/webhook"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

const (
	cardinalNS = "cardinal-system"
	teamNS     = "team"
	operatorNS = "gpu-operator" // allowed to set device variables (webhook.DefaultDeviceEnvNamespaces)
	extenderSA = "system:serviceaccount:cardinal-system:extender"
	timeout    = 60 * time.Second
)

// bed is one apiserver with the webhook registered.
type bed struct {
	c        *cluster.Cluster
	reg      *prometheus.Registry
	url      string // the webhook's URL, as registered
	certDir  string
	health   string // host:port of /healthz and /readyz
	metrics  string // host:port of /metrics
	stopped  chan error
	cancelFn context.CancelFunc
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// writeCert writes a fresh self-signed certificate for 127.0.0.1 (its own CA) to dir as tls.crt and
// tls.key, replacing the files atomically; it returns the certificate PEM.
func writeCert(t testing.TB, dir string, serial int64) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: "cardinal-webhook test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	for name, data := range map[string][]byte{"tls.key": keyPEM, "tls.crt": certPEM} {
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return certPEM
}

// servedSerial is the serial number of the certificate the webhook presents now.
func servedSerial(addr string) (int64, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // we inspect the certificate, not trust it
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

func start(t testing.TB) *bed { return startVerbose(t, 1) }

// startVerbose starts the bed with the webhook logging at verbosity v.
func startVerbose(t testing.TB, v int) *bed {
	ctrllog.SetLogger(logr.Discard()) // controller-runtime's own package logger
	c := cluster.Start(t, cluster.Options{})
	b := &bed{c: c, reg: prometheus.NewRegistry(), certDir: t.TempDir(), health: freeAddr(t), metrics: freeAddr(t), stopped: make(chan error, 1)}
	ca := writeCert(t, b.certDir, 1)
	listen := freeAddr(t)
	b.url = "https://" + listen + webhook.Path

	ctx, cancel := context.WithCancel(context.Background())
	b.cancelFn = cancel
	cfg := webhook.Config{
		Listen: listen, CertDir: b.certDir, HealthListen: b.health, MetricsListen: b.metrics,
		SchedulerName: "cardinal-scheduler", TrustedServiceAccounts: []string{extenderSA},
		DeviceEnvNamespaces: webhook.DefaultDeviceEnvNamespaces(),
		Resources:           annotations.DefaultResourceNames(), Client: c.Client,
		Logger: testr.NewWithInterface(t, testr.Options{Verbosity: v}), Registry: b.reg,
	}
	go func() { b.stopped <- webhook.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-b.stopped; err != nil {
			t.Errorf("webhook.Run: %v", err)
		}
	})

	// Cardinal knows one node: 2 A100s of 80 GiB.
	inv, err := annotations.EncodeInventory(annotations.Inventory{GPUs: []annotations.GPU{
		{UUID: "GPU-a-0", Index: 0, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true, Shares: 1},
		{UUID: "GPU-a-1", Index: 1, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true, Shares: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	c.AddNode(t, cluster.NodeSpec{Name: "node-a", Annotations: map[string]string{annotations.GPUInventory: inv},
		Capacity: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}})
	for _, ns := range []string{cardinalNS, teamNS, operatorNS} {
		if _, err := c.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cluster.WaitFor(t, timeout, "the webhook to be ready (serving, nodes listed)", func() (bool, error) {
		resp, err := http.Get("http://" + b.health + "/readyz")
		if err != nil {
			return false, nil //nolint:nilerr // polling: an error means not ready yet
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	cluster.WaitFor(t, timeout, "the webhook to know node-a's 2 cards", func() (bool, error) {
		return gauge(t, b.reg, "cardinal_webhook_known_cards") == 2, nil
	})

	opts := webhook.DefaultConfigurationOptions()
	opts.Namespace = cardinalNS
	opts.URL = b.url
	opts.CABundle = ca
	opts.TrustedUsers = []string{extenderSA}
	whc, err := webhook.MutatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(context.Background(), whc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the webhook: %v", err)
	}
	vwc, err := webhook.ValidatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), vwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the workload webhook: %v", err)
	}
	b.waitRegistered(t)
	return b
}

// waitRegistered waits until the apiserver calls the webhook: a dry-run GPU pod comes back with
// Cardinal's scheduler (the apiserver picks up configurations asynchronously).
func (b *bed) waitRegistered(t testing.TB) {
	t.Helper()
	cluster.WaitFor(t, timeout, "the apiserver to call the webhook", func() (bool, error) {
		p, err := b.c.Client.CoreV1().Pods(teamNS).Create(context.Background(), gpuPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && p.Spec.SchedulerName == "cardinal-scheduler", nil
	})
}

// gauge reads a metric without labels from reg; counters are summed over their labels.
func gauge(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}

// calls is how many admission requests the webhook has decided.
func (b *bed) calls(t testing.TB) float64 {
	return gauge(t, b.reg, "cardinal_webhook_admission_decisions_total")
}

// warningRecorder collects the warnings the apiserver sends a client.
type warningRecorder struct {
	mu  sync.Mutex
	got []string
}

func (w *warningRecorder) HandleWarningHeader(code int, _ string, text string) {
	if code != 299 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, text)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.got
	w.got = nil
	return out
}

// client returns a clientset acting as user (empty: the admin) that records warnings.
func (b *bed) client(t testing.TB, user string) (kubernetes.Interface, *warningRecorder) {
	t.Helper()
	rec := &warningRecorder{}
	cfg := rest.CopyConfig(b.c.RESTConfig)
	cfg.WarningHandler = rec
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, rec
}

func pod(name string, ann map[string]string, limits ...string) *corev1.Pod {
	rl := corev1.ResourceList{}
	for i := 0; i < len(limits); i += 2 {
		rl[corev1.ResourceName(limits[i])] = resource.MustParse(limits[i+1])
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if len(rl) > 0 {
		p.Spec.Containers[0].Resources.Limits = rl
	}
	return p
}

func gpuPod(name string) *corev1.Pod { return pod(name, nil, "nvidia.com/gpu", "1") }

func TestWebhookInRealAPIServer(t *testing.T) {
	b := start(t)
	ctx := context.Background()
	admin, warnings := b.client(t, "")
	pods := admin.CoreV1().Pods(teamNS)

	t.Run("GPU pods are sent to Cardinal's scheduler, once each", func(t *testing.T) {
		initOnly := pod("init-gpu", nil, "cpu", "100m")
		initOnly.Spec.InitContainers = []corev1.Container{{Name: "warm", Image: "busybox", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpucores": resource.MustParse("30"), "nvidia.com/gpu": resource.MustParse("1")}}}}
		for _, p := range []*corev1.Pod{gpuPod("gpu"), initOnly} {
			before := b.calls(t)
			got, err := pods.Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create %s: %v", p.Name, err)
			}
			if got.Spec.SchedulerName != "cardinal-scheduler" {
				t.Errorf("%s: schedulerName = %q, want cardinal-scheduler", p.Name, got.Spec.SchedulerName)
			}
			if n := b.calls(t) - before; n != 1 {
				t.Errorf("%s: webhook called %v times, want 1", p.Name, n)
			}
		}
	})

	t.Run("MIG pods are sent to Cardinal's scheduler; cards beside instances are refused", func(t *testing.T) {
		before := b.calls(t)
		got, err := pods.Create(ctx, pod("mig", nil, "nvidia.com/mig-1g.10gb", "2"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// cardinal.io/mig: 0 makes kube-scheduler call the extender, whose managedResources name no
		// MIG resource; nvidia.com/gpu stays out (the kubelet refuses even 0 of it on a node whose
		// cards are all in MIG mode).
		limit, named := got.Spec.Containers[0].Resources.Limits["cardinal.io/mig"]
		_, gpu := got.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
		if got.Spec.SchedulerName != "cardinal-scheduler" || !named || !limit.IsZero() || gpu {
			t.Errorf("schedulerName = %q, cardinal.io/mig %s (named %v), nvidia.com/gpu named %v; want cardinal-scheduler, 0, not named", got.Spec.SchedulerName, limit.String(), named, gpu)
		}
		if n := b.calls(t) - before; n != 1 {
			t.Errorf("webhook called %v times, want 1", n)
		}
		// node-a's A100s are whole cards.
		want := []string{`container "main": nvidia.com/mig-1g.10gb: no 1g.10gb instance Cardinal knows (known: no MIG instances); the pod stays Pending until one joins`}
		if diff := cmp.Diff(want, warnings.take()); diff != "" {
			t.Errorf("warnings (-want +got):\n%s", diff)
		}
		_, err = pods.Create(ctx, pod("mig-and-card", nil, "nvidia.com/gpu", "1", "nvidia.com/mig-1g.10gb", "1"), metav1.CreateOptions{})
		wantErr := `denied the request: container "main": nvidia.com/mig-1g.10gb: cannot be combined with nvidia.com/gpu, nvidia.com/gpumem, nvidia.com/gpumem-percentage or nvidia.com/gpucores in one container (a container takes whole cards, shares of cards, or MIG instances)`
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("create error = %v\nwant one containing %s", err, wantErr)
		}
		_, err = pods.Create(ctx, pod("two-profiles", nil, "nvidia.com/mig-1g.10gb", "1", "nvidia.com/mig-3g.40gb", "1"), metav1.CreateOptions{})
		wantErr = `denied the request: container "main": nvidia.com/mig-3g.40gb: asks for a second MIG profile beside nvidia.com/mig-1g.10gb`
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("create error = %v\nwant one containing %s", err, wantErr)
		}
	})

	t.Run("a share without a card count gets one card and a warning", func(t *testing.T) {
		got, err := pods.Create(ctx, pod("share", nil, "nvidia.com/gpumem", "4096"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		limit := got.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
		request := got.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]
		if limit.Value() != 1 || request.Value() != 1 || got.Spec.SchedulerName != "cardinal-scheduler" {
			t.Errorf("pod = limit %s, request %s, scheduler %q; want 1, 1, cardinal-scheduler", limit.String(), request.String(), got.Spec.SchedulerName)
		}
		want := []string{`container "main" asks for a share of a card without nvidia.com/gpu: Cardinal added nvidia.com/gpu: 1 (one card)`}
		if diff := cmp.Diff(want, warnings.take()); diff != "" {
			t.Errorf("warnings (-want +got):\n%s", diff)
		}
	})

	t.Run("pods without GPU requests are never sent", func(t *testing.T) {
		noResources := pod("plain", nil)
		cpuOnly := pod("cpu", nil, "cpu", "1")
		cpuInit := pod("cpu-init", nil)
		cpuInit.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": resource.MustParse("1")}}}}
		otherAnnotation := pod("annotated", map[string]string{"cardinal.io/other": "x", annotations.UseGPUType: "A100,"})
		before := b.calls(t)
		for _, p := range []*corev1.Pod{noResources, cpuOnly, cpuInit, otherAnnotation} {
			got, err := pods.Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create %s: %v", p.Name, err)
			}
			if got.Spec.SchedulerName != corev1.DefaultSchedulerName {
				t.Errorf("%s: schedulerName = %q, want the default", p.Name, got.Spec.SchedulerName)
			}
		}
		// A label change of a GPU-less pod is not sent either.
		if _, err := pods.Patch(ctx, "plain", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		// Nor a GPU pod in Cardinal's own namespace.
		got, err := admin.CoreV1().Pods(cardinalNS).Create(ctx, gpuPod("own"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.SchedulerName != corev1.DefaultSchedulerName {
			t.Errorf("pod in %s: schedulerName = %q, want the default", cardinalNS, got.Spec.SchedulerName)
		}
		if n := b.calls(t) - before; n != 0 {
			t.Errorf("webhook called %v times for pods without GPU requests, want 0", n)
		}
	})

	refusals := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{{
		name: "a forged assignment",
		pod:  pod("forged", map[string]string{annotations.GPUAssignment: `{"v":1,"node":"node-a","containers":[]}`}, "nvidia.com/gpu", "1"),
		want: `admission webhook "pods.webhook.cardinal.io" denied the request: metadata.annotations: cardinal.io/gpu-assignment is written only by Cardinal (its scheduler extender and device plugin); remove it from the pod`,
	}, {
		name: "a forged allocation record on a pod without GPU requests",
		pod:  pod("forged-plain", map[string]string{annotations.GPUAllocated: `{}`}),
		want: `denied the request: metadata.annotations: cardinal.io/gpu-allocated is written only by Cardinal (its scheduler extender and device plugin); remove it from the pod`,
	}, {
		name: "spec.nodeName",
		pod: func() *corev1.Pod {
			p := gpuPod("pinned")
			p.Spec.NodeName = "node-a"
			return p
		}(),
		want: `denied the request: spec.nodeName: "node-a" is set, which would bypass card selection: a pod requesting nvidia.com/gpu is placed by cardinal-scheduler, which picks its node and its cards; remove spec.nodeName and pin the node with spec.nodeSelector (kubernetes.io/hostname: node-a) instead`,
	}, {
		name: "an empty entry in use-gputype",
		pod:  pod("bad-type", map[string]string{annotations.UseGPUType: "A100,,H100"}, "nvidia.com/gpu", "1"),
		want: `denied the request: nvidia.com/use-gputype: empty entry at position 2 in "A100,,H100"`,
	}, {
		name: "an escape sequence in use-gputype",
		pod:  pod("escape-type", map[string]string{annotations.UseGPUType: "A100\x1b]8;;https://evil.example\x07x"}, "nvidia.com/gpu", "1"),
		want: `denied the request: nvidia.com/use-gputype: control character U+001B at position 5 in "A100\x1b]8;;https://evil.example\ax": a selector holds printable text only`,
	}, {
		name: "a UUID in use and nouse",
		pod:  pod("bad-uuid", map[string]string{annotations.UseGPUUUID: "GPU-a-0", annotations.NoUseGPUUUID: "GPU-a-0"}, "nvidia.com/gpu", "1"),
		want: `denied the request: nvidia.com/nouse-gpuuuid: GPU-a-0 is also in nvidia.com/use-gpuuuid`,
	}, {
		name: "an unknown policy",
		pod:  pod("bad-policy", map[string]string{annotations.GPUPolicy: "fastest"}, "nvidia.com/gpu", "1"),
		want: `denied the request: cardinal.io/gpu-policy: unknown policy "fastest" (known: binpack, spread, frag-aware)`,
	}, {
		name: "a percentage above 100",
		pod:  pod("bad-percent", nil, "nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "120"),
		want: `denied the request: container "main": nvidia.com/gpumem-percentage: 120 is above 100`,
	}, {
		name: "more memory than the largest card",
		pod:  pod("too-big", nil, "nvidia.com/gpu", "1", "nvidia.com/gpumem", "90000"),
		want: `denied the request: container "main": nvidia.com/gpumem: 90000 MiB is more than the largest card Cardinal knows holds (81920 MiB, NVIDIA A100-SXM4-80GB)`,
	}}
	for _, tt := range refusals {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			_, err := pods.Create(ctx, tt.pod, metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("create error = %v\nwant one containing %s", err, tt.want)
			}
		})
	}

	t.Run("a selector no card matches is admitted with a warning", func(t *testing.T) {
		warnings.take()
		got, err := pods.Create(ctx, pod("h100", map[string]string{annotations.UseGPUType: "H100"}, "nvidia.com/gpu", "1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.SchedulerName != "cardinal-scheduler" {
			t.Errorf("schedulerName = %q, want cardinal-scheduler", got.Spec.SchedulerName)
		}
		want := []string{"no card Cardinal knows matches use-gputype=h100 (known: 2× NVIDIA A100-SXM4-80GB); the pod stays Pending until such a card joins"}
		if diff := cmp.Diff(want, warnings.take()); diff != "" {
			t.Errorf("warnings (-want +got):\n%s", diff)
		}
	})

	t.Run("only Cardinal's service accounts write internal annotations", func(t *testing.T) {
		grantPodEditing(t, admin, "alice", extenderSA)
		alice, _ := b.client(t, "alice")
		extender, _ := b.client(t, extenderSA)
		patch := func(cs kubernetes.Interface, ann string) error {
			body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": json.RawMessage(ann)}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = cs.CoreV1().Pods(teamNS).Patch(ctx, "gpu", types.MergePatchType, body, metav1.PatchOptions{})
			return err
		}
		// kubectl annotate, as alice: refused.
		out, err := exec.Command(filepath.Join(cluster.BinDir(t), "kubectl"), "--kubeconfig", b.c.Kubeconfig, "--as", "alice",
			"-n", teamNS, "annotate", "pod", "gpu", annotations.GPUAssignment+`={"v":1}`).CombinedOutput()
		wantAdd := `denied the request: metadata.annotations: cardinal.io/gpu-assignment is written only by Cardinal (its scheduler extender and device plugin); "alice" may not add it`
		if err == nil || !bytes.Contains(out, []byte(wantAdd)) {
			t.Errorf("kubectl annotate as alice: %v\n%s\nwant a refusal containing %s", err, out, wantAdd)
		}
		// Alice may annotate the GPU pod otherwise, without a call to the webhook.
		before := b.calls(t)
		if err := patch(alice, `{"team":"vision"}`); err != nil {
			t.Errorf("alice's own annotation: %v", err)
		}
		if n := b.calls(t) - before; n != 0 {
			t.Errorf("webhook called %v times for alice's update, want 0", n)
		}
		// The extender writes the assignment, without a call to the webhook.
		before = b.calls(t)
		if err := patch(extender, `{"cardinal.io/gpu-assignment":"{\"v\":1}"}`); err != nil {
			t.Errorf("the extender's assignment: %v", err)
		}
		if n := b.calls(t) - before; n != 0 {
			t.Errorf("webhook called %v times for the extender's update, want 0", n)
		}
		// Alice may not remove it, nor change it.
		if err := patch(alice, `{"cardinal.io/gpu-assignment":null}`); err == nil || !strings.Contains(err.Error(), `"alice" may not remove it`) {
			t.Errorf("alice removing the assignment: %v, want a refusal", err)
		}
		if err := patch(alice, `{"cardinal.io/gpu-assignment":"{}"}`); err == nil || !strings.Contains(err.Error(), `"alice" may not change it`) {
			t.Errorf("alice changing the assignment: %v, want a refusal", err)
		}
	})

	t.Run("pods/status does not bypass the internal-annotation rule", func(t *testing.T) {
		alice, _ := b.client(t, "alice")
		status := func(cs kubernetes.Interface, body string) error {
			_, err := cs.CoreV1().Pods(teamNS).Patch(ctx, "gpu", types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status")
			return err
		}
		// Alice rewrites the assignment and the allocation record through the status subresource.
		for _, tc := range []struct{ key, body, verb string }{
			{annotations.GPUAssignment, `{"metadata":{"annotations":{"cardinal.io/gpu-assignment":"{\"v\":1,\"node\":\"node-a\"}"}}}`, "change"},
			{annotations.GPUAllocated, `{"metadata":{"annotations":{"cardinal.io/gpu-allocated":"{}"}}}`, "add"},
		} {
			want := fmt.Sprintf(`denied the request: metadata.annotations: %s is written only by Cardinal (its scheduler extender and device plugin); "alice" may not %s it`, tc.key, tc.verb)
			if err := status(alice, tc.body); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("alice writing %s through pods/status: %v\nwant a refusal containing %s", tc.key, err, want)
			}
		}
		got, err := pods.Get(ctx, "gpu", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Annotations[annotations.GPUAssignment] != `{"v":1}` {
			t.Errorf("the assignment is now %q, want the extender's {\"v\":1}", got.Annotations[annotations.GPUAssignment])
		}
		if _, ok := got.Annotations[annotations.GPUAllocated]; ok {
			t.Error("alice's allocation record was stored")
		}
		// A kubelet-like status update is not sent.
		before := b.calls(t)
		if err := status(alice, `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`); err != nil {
			t.Errorf("a status update: %v", err)
		}
		if n := b.calls(t) - before; n != 0 {
			t.Errorf("webhook called %v times for a status update, want 0", n)
		}
	})

	t.Run("device variables are refused, GPU pod or not", func(t *testing.T) {
		env := func(name string, ns string, vars ...string) *corev1.Pod {
			p := pod(name, nil)
			p.Namespace = ns
			for _, v := range vars {
				p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: v, Value: "all"})
			}
			return p
		}
		_, err := pods.Create(ctx, env("visible", teamNS, "NVIDIA_VISIBLE_DEVICES"), metav1.CreateOptions{})
		want := `denied the request: container "main": env NVIDIA_VISIBLE_DEVICES: it chooses the cards the NVIDIA container runtime exposes; Cardinal's device plugin sets it to the cards it assigned; remove it`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("create: %v\nwant a refusal containing %s", err, want)
		}
		gpuMPS := env("mps", teamNS, "CUDA_MPS_PIPE_DIRECTORY")
		gpuMPS.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		_, err = pods.Create(ctx, gpuMPS, metav1.CreateOptions{})
		if want := `container "main": env CUDA_MPS_PIPE_DIRECTORY: it configures NVIDIA MPS`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("create: %v\nwant a refusal containing %s", err, want)
		}
		// Neither sent nor refused: a variable that only narrows, and the GPU operator's namespace.
		before := b.calls(t)
		if _, err := pods.Create(ctx, env("narrow", teamNS, "CUDA_VISIBLE_DEVICES"), metav1.CreateOptions{}); err != nil {
			t.Errorf("CUDA_VISIBLE_DEVICES: %v", err)
		}
		if _, err := admin.CoreV1().Pods(operatorNS).Create(ctx, env("dcgm", operatorNS, "NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"), metav1.CreateOptions{}); err != nil {
			t.Errorf("the GPU operator's pod: %v", err)
		}
		if n := b.calls(t) - before; n != 0 {
			t.Errorf("webhook called %v times, want 0", n)
		}
	})

	t.Run("a Deployment with a bad selector is refused at create", func(t *testing.T) {
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "train"},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "train"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "train"}, Annotations: map[string]string{annotations.UseGPUType: "A100,"}},
					Spec:       gpuPod("x").Spec,
				},
			},
		}
		deployments := admin.AppsV1().Deployments(teamNS)
		_, err := deployments.Create(ctx, dep, metav1.CreateOptions{})
		want := `admission webhook "workloads.webhook.cardinal.io" denied the request: spec.template: nvidia.com/use-gputype: empty entry at position 2 in "A100,"`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("create: %v\nwant a refusal containing %s", err, want)
		}
		// Fixed, it is admitted; scaling it is not sent (its template does not change).
		dep.Spec.Template.Annotations[annotations.UseGPUType] = "A100"
		if _, err := deployments.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create: %v", err)
		}
		before := b.calls(t)
		if _, err := deployments.Patch(ctx, "train", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("scale: %v", err)
		}
		if n := b.calls(t) - before; n != 0 {
			t.Errorf("webhook called %v times for a scale, want 0", n)
		}
	})

	t.Run("a rotated certificate is served without a restart", func(t *testing.T) {
		addr := strings.TrimSuffix(strings.TrimPrefix(b.url, "https://"), webhook.Path)
		ca := writeCert(t, b.certDir, 2)
		cluster.WaitFor(t, timeout, "the webhook to serve the new certificate", func() (bool, error) {
			serial, err := servedSerial(addr)
			return err == nil && serial == 2, nil
		})
		whc, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "cardinal-webhook", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		whc.Webhooks[0].ClientConfig.CABundle = ca
		if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, whc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		b.waitRegistered(t)
	})

	t.Run("metrics are served", func(t *testing.T) {
		resp, err := http.Get("http://" + b.metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body bytes.Buffer
		if _, err := body.ReadFrom(resp.Body); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`cardinal_webhook_admission_duration_seconds_bucket{operation="CREATE"`,
			`cardinal_webhook_admission_decisions_total{operation="CREATE",outcome="denied",reason="NodeNameSet"} 1`,
			`cardinal_webhook_known_cards 2`,
		} {
			if !strings.Contains(body.String(), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})

	// Last: the webhook is unreachable (the configuration points at a closed port). Only what
	// touches Cardinal's annotations, or creates GPU pods, waits on it.
	t.Run("a webhook outage freezes no workload", func(t *testing.T) {
		whc, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "cardinal-webhook", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dead := "https://" + freeAddr(t) + webhook.Path
		whc.Webhooks[0].ClientConfig.URL = &dead
		if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, whc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		cluster.WaitFor(t, timeout, "the apiserver to call the dead webhook", func() (bool, error) {
			_, err := pods.Create(ctx, gpuPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil && strings.Contains(err.Error(), "failed calling webhook"), nil
		})
		alice, _ := b.client(t, "alice")
		alicePods := alice.CoreV1().Pods(teamNS)
		merge := func(body string, sub ...string) error {
			_, err := alicePods.Patch(ctx, "gpu", types.MergePatchType, []byte(body), metav1.PatchOptions{}, sub...)
			return err
		}
		for _, tc := range []struct{ name, body, sub string }{
			{"kubectl label", `{"metadata":{"labels":{"stage":"eval"}}}`, ""},
			{"a finalizer added (Job controller)", `{"metadata":{"finalizers":["batch.kubernetes.io/job-tracking"]}}`, ""},
			{"the finalizer removed", `{"metadata":{"finalizers":null}}`, ""},
			{"adoption (an owner reference)", `{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"00000000-0000-0000-0000-000000000001"}]}}`, ""},
			{"an unrelated annotation", `{"metadata":{"annotations":{"note":"x"}}}`, ""},
			{"a kubelet-like status update", `{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`, "status"},
		} {
			var sub []string
			if tc.sub != "" {
				sub = []string{tc.sub}
			}
			if err := merge(tc.body, sub...); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
		for _, tc := range []struct{ name, body, sub string }{
			{"the assignment changed", `{"metadata":{"annotations":{"cardinal.io/gpu-assignment":"{\"v\":2}"}}}`, ""},
			{"the assignment changed through pods/status", `{"metadata":{"annotations":{"cardinal.io/gpu-assignment":"{\"v\":2}"}}}`, "status"},
			{"a selector changed", `{"metadata":{"annotations":{"nvidia.com/use-gputype":"H100"}}}`, ""},
		} {
			var sub []string
			if tc.sub != "" {
				sub = []string{tc.sub}
			}
			if err := merge(tc.body, sub...); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
				t.Errorf("%s: %v, want a refusal (failurePolicy Fail)", tc.name, err)
			}
		}
	})
}

// grantPodEditing lets users edit pods in teamNS, as a namespace admin could.
func grantPodEditing(t *testing.T, cs kubernetes.Interface, users ...string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pod-editor"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"},
	}}}
	if _, err := cs.RbacV1().Roles(teamNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "pod-editors"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-editor"}}
	for _, u := range users {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
	}
	if _, err := cs.RbacV1().RoleBindings(teamNS).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC is read from an informer in the apiserver: wait until every user may patch.
	cluster.WaitFor(t, timeout, fmt.Sprintf("RBAC to let %v patch pods", users), func() (bool, error) {
		for _, u := range users {
			review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               u,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: teamNS, Verb: "patch", Resource: "pods"},
			}}, metav1.CreateOptions{})
			if err != nil || !review.Status.Allowed {
				return false, nil //nolint:nilerr // polling: an error means not ready yet
			}
		}
		return true, nil
	})
}
