package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/webhook"
	"github.com/cardinal-gpu/cardinal/pkg/webhook/certs"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// Short lifetimes make the rotations happen during the test: a serving certificate every 4 s (2/3
// of 6 s); a CA announced at 9 s and signing from 12 s (1/2 and 2/3 of 18 s), then every 9 s.
const (
	rotationCertLifetime = 6 * time.Second
	rotationCALifetime   = 18 * time.Second
	rotationCheck        = time.Second // at most a sixth of the certificate's life
	rotationLoad         = 20 * time.Second
	rotationRate         = 20 // pods per second
	rotationSecret       = "cardinal-webhook-certs"
	rotationConfig       = "cardinal-webhook"
)

// TestSelfManagedCertificatesRotateUnderLoad runs two webhook replicas that manage their own
// certificates in one Secret, registered with an empty caBundle, creates GPU pods at 20/s through
// the real apiserver for 20 s while the serving certificate and the CA rotate, and wants every
// pod admitted (and mutated), what both replicas serve trusted by the configurations at every
// moment, and the replicas agreeing instead of fighting.
func TestSelfManagedCertificatesRotateUnderLoad(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ns := range []string{cardinalNS, teamNS} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Registered first, without a CA: the replicas put theirs in. The apiserver calls replica b,
	// whose clock runs half a second behind a's: a takes every rotation step first, and b serves the
	// previous certificate for a while after the configurations changed (so the apiserver, which
	// connects anew when the caBundle changes, meets the lagging replica).
	listenA, listenB := freeAddr(t), freeAddr(t)
	opts := webhook.DefaultConfigurationOptions()
	opts.Name, opts.Namespace, opts.URL, opts.TrustedUsers = rotationConfig, cardinalNS, "https://"+listenB+webhook.Path, []string{extenderSA}
	mwc, err := webhook.MutatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatal(err)
	}
	vwc, err := webhook.ValidatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatal(err)
	}
	reg := c.Client.AdmissionregistrationV1()
	if _, err := reg.MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Watch the Secret from the start: every version either replica writes.
	w, err := c.Client.CoreV1().Secrets(cardinalNS).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", rotationSecret).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var versions []map[string][]byte
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*corev1.Secret); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) && len(s.Data) > 0 {
				versions = append(versions, s.Data)
			}
		}
	}()

	health := map[string]string{}
	var stopped sync.WaitGroup
	clocks := map[string]func() time.Time{"a": time.Now, "b": func() time.Time { return time.Now().Add(-500 * time.Millisecond) }}
	for name, listen := range map[string]string{"a": listenA, "b": listenB} {
		health[name] = freeAddr(t)
		cfg := webhook.Config{
			Listen: listen, HealthListen: health[name], SchedulerName: "cardinal-scheduler",
			TrustedServiceAccounts: []string{extenderSA}, DeviceEnvNamespaces: webhook.DefaultDeviceEnvNamespaces(),
			Resources: annotations.DefaultResourceNames(), Client: c.Client, Registry: prometheus.NewRegistry(),
			Logger: testr.NewWithInterface(t, testr.Options{Verbosity: 0}).WithName(name),
			Certificates: &certs.Config{Namespace: cardinalNS, SecretName: rotationSecret, WebhookConfiguration: rotationConfig,
				Hosts: []string{"127.0.0.1"}, CertLifetime: rotationCertLifetime, CALifetime: rotationCALifetime, CheckInterval: rotationCheck,
				Now: clocks[name]},
		}
		stopped.Add(1)
		go func() {
			defer stopped.Done()
			if err := webhook.Run(ctx, cfg); err != nil {
				t.Errorf("replica %s: %v", name, err)
			}
		}()
	}
	defer stopped.Wait()
	defer cancel()
	for name, addr := range health {
		cluster.WaitFor(t, timeout, "replica "+name+" ready (certificate served and trusted)", func() (bool, error) {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return false, nil //nolint:nilerr // polling: an error means not ready yet
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
	}
	cluster.WaitFor(t, timeout, "the apiserver to call the webhook", func() (bool, error) {
		p, err := c.Client.CoreV1().Pods(teamNS).Create(ctx, gpuPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && p.Spec.SchedulerName == "cardinal-scheduler", nil
	})

	// A client fast enough for 20 pods/s (client-go's default limit is 5/s).
	rc := rest.CopyConfig(c.RESTConfig)
	rc.QPS, rc.Burst = 200, 200
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	// Every 100 ms: what each replica serves must verify against the caBundle the configurations hold
	// now (what the apiserver checks at a new connection).
	var probes, distrusted atomic.Int64
	var firstDistrust atomic.Value
	probeCtx, stopProbes := context.WithCancel(ctx)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-probeCtx.Done():
				return
			case <-tick.C:
			}
			for _, addr := range []string{listenA, listenB} {
				if err := servedIsTrusted(probeCtx, c.Client, addr); err != nil && probeCtx.Err() == nil {
					distrusted.Add(1)
					firstDistrust.CompareAndSwap(nil, err.Error())
				}
				probes.Add(1)
			}
		}
	}()

	var created, failed atomic.Int64
	var firstFailure atomic.Value
	var inflight sync.WaitGroup
	started := time.Now()
	tick := time.NewTicker(time.Second / rotationRate)
	for i := 0; time.Since(started) < rotationLoad; i++ {
		<-tick.C
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			p, err := client.CoreV1().Pods(teamNS).Create(ctx, gpuPod(fmt.Sprintf("load-%04d", i)), metav1.CreateOptions{})
			switch {
			case err != nil:
				failed.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
			case p.Spec.SchedulerName != "cardinal-scheduler":
				failed.Add(1)
				firstFailure.CompareAndSwap(nil, p.Name+" admitted without the webhook's mutation")
			default:
				created.Add(1)
			}
		}()
	}
	tick.Stop()
	inflight.Wait()
	elapsed := time.Since(started)
	stopProbes()
	<-probed

	// What the replicas wrote: count the serving certificates and CAs.
	secret, err := c.Client.CoreV1().Secrets(cardinalNS).Get(ctx, rotationSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	<-watched
	servings, cas := distinct(versions, certs.KeyCert), distinct(versions, certs.KeyCACert)
	t.Logf("%d pods admitted, %d failed in %s (%.1f/s); %d Secret versions, %d serving certificates, %d CAs; %d probes, %d distrusted",
		created.Load(), failed.Load(), elapsed.Round(time.Millisecond), float64(created.Load()+failed.Load())/elapsed.Seconds(),
		len(versions), servings, cas, probes.Load(), distrusted.Load())
	if n := failed.Load(); n > 0 {
		t.Errorf("%d pod creations failed during the rotations; first: %v", n, firstFailure.Load())
	}
	if n := distrusted.Load(); n > 0 {
		t.Errorf("%d of %d probes found a replica serving a certificate the configurations do not trust; first: %v", n, probes.Load(), firstDistrust.Load())
	}
	if got, want := created.Load(), int64(rotationLoad.Seconds()*rotationRate*0.9); got < want {
		t.Errorf("%d pods created, want at least %d (the load was not applied)", got, want)
	}
	// Rotations happened: the serving certificate every ~4 s and at least one CA promotion.
	if servings < 4 || cas < 2 {
		t.Errorf("%d serving certificates and %d CAs during the load; want at least 4 and 2 (rotations did not happen)", servings, cas)
	}
	// Two replicas that fought would each write their own certificate at every step: about twice as
	// many as the steps. The steps over the run (setup included): a renewal every 4 s, one per CA
	// promotion, the first one.
	total := time.Since(started) + 10*time.Second
	if maxWant := int(total/(rotationCertLifetime*2/3)) + cas + 2; servings > maxWant {
		t.Errorf("%d serving certificates in about %s, want at most %d: the replicas fight", servings, total.Round(time.Second), maxWant)
	}
	// And both end up serving what the Secret holds.
	cluster.WaitFor(t, timeout, "both replicas serving the Secret's certificate", func() (bool, error) {
		for _, addr := range []string{listenA, listenB} {
			served, err := servedCert(addr)
			if err != nil || !bytes.Equal(served.Raw, mustParse(t, secret.Data[certs.KeyCert]).Raw) {
				secret, _ = c.Client.CoreV1().Secrets(cardinalNS).Get(ctx, rotationSecret, metav1.GetOptions{})
				return false, nil //nolint:nilerr // polling
			}
		}
		return true, nil
	})
}

// distinct counts the different values of key over the Secret's versions.
func distinct(versions []map[string][]byte, key string) int {
	seen := map[string]bool{}
	for _, v := range versions {
		seen[string(v[key])] = true
	}
	return len(seen)
}

func mustParse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatalf("not PEM: %q", certPEM)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// servedCert is the certificate the server at addr presents.
func servedCert(addr string) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // we inspect the certificate, then verify it ourselves
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// servedIsTrusted checks what addr serves against the caBundle of every webhook of both
// configurations, as the apiserver would at a new connection.
func servedIsTrusted(ctx context.Context, client kubernetes.Interface, addr string) error {
	reg := client.AdmissionregistrationV1()
	m, err := reg.MutatingWebhookConfigurations().Get(ctx, rotationConfig, metav1.GetOptions{})
	if err != nil {
		return err
	}
	v, err := reg.ValidatingWebhookConfigurations().Get(ctx, rotationConfig, metav1.GetOptions{})
	if err != nil {
		return err
	}
	served, err := servedCert(addr)
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	bundles := [][]byte{m.Webhooks[0].ClientConfig.CABundle, v.Webhooks[0].ClientConfig.CABundle}
	for i, b := range bundles {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(b) {
			return fmt.Errorf("configuration %d has no CA", i)
		}
		if _, err := served.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
			return fmt.Errorf("%s serves serial %x (not after %s), configuration %d: %w", addr, served.SerialNumber, served.NotAfter.Format(time.RFC3339), i, err)
		}
	}
	return nil
}

// TestEmptiedSecretKeepsTheOtherReplicaTrusted empties the certificate Secret (as helm upgrade
// --force, a GitOps Replace or kubectl delete and re-create do) while two replicas run: a, which reads
// the Secret every half second, makes a new CA at once; b reads it only every 10 minutes and keeps
// serving its certificate of the old CA meanwhile. The bundle a writes must keep the old CA, which
// the configurations still hold, so that what b serves stays trusted.
func TestEmptiedSecretKeepsTheOtherReplicaTrusted(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cardinalNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opts := webhook.DefaultConfigurationOptions()
	opts.Name, opts.Namespace, opts.URL = rotationConfig, cardinalNS, "https://127.0.0.1:1"+webhook.Path
	mwc, err := webhook.MutatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatal(err)
	}
	vwc, err := webhook.ValidatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatal(err)
	}
	reg := c.Client.AdmissionregistrationV1()
	if _, err := reg.MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rotators := map[string]*certs.Rotator{}
	var stopped sync.WaitGroup
	defer stopped.Wait()
	defer cancel()
	for name, check := range map[string]time.Duration{"a": 500 * time.Millisecond, "b": 10 * time.Minute} {
		r, err := certs.New(certs.Config{Client: c.Client, Namespace: cardinalNS, SecretName: rotationSecret, WebhookConfiguration: rotationConfig,
			Hosts: []string{"127.0.0.1"}, CertLifetime: time.Hour, CALifetime: 24 * time.Hour, CheckInterval: check,
			Logger: testr.New(t).WithName(name)})
		if err != nil {
			t.Fatal(err)
		}
		rotators[name] = r
		stopped.Add(1)
		go func() {
			defer stopped.Done()
			_ = r.Run(ctx)
		}()
	}
	for name, r := range rotators {
		cluster.WaitFor(t, timeout, "replica "+name+" ready", func() (bool, error) { return r.Ready(nil) == nil, nil })
	}
	secrets := c.Client.CoreV1().Secrets(cardinalNS)
	before, err := secrets.Get(ctx, rotationSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	served := func(name string) *x509.Certificate {
		cert, err := rotators[name].GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf
	}
	bServes := served("b")

	emptied := before.DeepCopy()
	emptied.Data = nil
	if _, err := secrets.Update(ctx, emptied, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// a makes a new CA and puts its bundle into the configurations.
	var after *corev1.Secret
	cluster.WaitFor(t, timeout, "replica a to write a new CA and inject its bundle", func() (bool, error) {
		after, err = secrets.Get(ctx, rotationSecret, metav1.GetOptions{})
		if err != nil || len(after.Data[certs.KeyCACert]) == 0 || bytes.Equal(after.Data[certs.KeyCACert], before.Data[certs.KeyCACert]) {
			return false, nil //nolint:nilerr // polling
		}
		m, err := reg.MutatingWebhookConfigurations().Get(ctx, rotationConfig, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, after.Data[certs.KeyBundle]), nil
	})
	if !served("b").Equal(bServes) {
		t.Fatal("replica b read the Secret again; the test needs it to lag")
	}
	m, err := reg.MutatingWebhookConfigurations().Get(ctx, rotationConfig, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := reg.ValidatingWebhookConfigurations().Get(ctx, rotationConfig, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range [][]byte{m.Webhooks[0].ClientConfig.CABundle, v.Webhooks[0].ClientConfig.CABundle} {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(b)
		if _, err := bServes.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
			t.Errorf("configuration %d: replica b's certificate (of the old CA) is no longer trusted after the Secret was emptied: %v", i, err)
		}
		if _, err := served("a").Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"}); err != nil {
			t.Errorf("configuration %d: replica a's new certificate is not trusted: %v", i, err)
		}
	}
}
