// Package certs keeps the webhook's serving certificate, and the caBundle of the webhook
// configurations that trust it, current while the webhook runs: nothing expires in service and no
// render of the chart has to make a CA.
//
// State lives in one Secret (keys Key*): a CA, the serving certificate it signed, the bundle the
// configurations trust and, in the second half of the CA's life, its announced successor. Every
// replica runs a Rotator on the same Secret: it reads it, completes it (plan), writes it back with the
// resourceVersion it read (an optimistic update: when two replicas race, one write fails with a
// conflict, that replica reads the winner's Secret and finds nothing left to do), serves its serving
// certificate from memory (GetCertificate), and sets the bundle on every webhook of the Mutating- and
// ValidatingWebhookConfiguration it names.
//
// Rotation never leaves a window in which the apiserver distrusts what a replica serves: a serving
// certificate is renewed at 2/3 of its life under the same CA (the old one stays valid for the
// replicas that have not read the Secret yet); a new CA is added to the bundle at half the old
// CA's life and signs only from 2/3 on, once the configurations are seen to trust it; a CA that signs
// no more leaves the bundle once every serving certificate it signed has expired (one certificate
// lifetime after it stopped signing; plan).
package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// Config is everything a Rotator needs.
type Config struct {
	// Client reads and updates the Secret and the webhook configurations.
	Client kubernetes.Interface
	// Namespace and SecretName name the Secret that holds the CA and the serving certificate. It is
	// created (empty) when missing and allowed.
	Namespace, SecretName string
	// WebhookConfiguration names the MutatingWebhookConfiguration and the
	// ValidatingWebhookConfiguration whose caBundle the Rotator sets (they share the name).
	WebhookConfiguration string
	// Hosts are the DNS names and IP addresses of the serving certificate (the Service's names).
	Hosts []string
	// CALifetime and CertLifetime are the lifetimes of a CA and of a serving certificate.
	CALifetime, CertLifetime time.Duration
	// CheckInterval is how often the Secret and the configurations are read again (another
	// replica's rotation, a caBundle reset by a redeploy).
	CheckInterval time.Duration
	// Logger is the base logger.
	Logger logr.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Validate reports the first setting that cannot work.
func (c *Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("no Kubernetes client")
	case c.SecretName == "":
		return errors.New("--cert-secret is empty")
	case c.WebhookConfiguration == "":
		return errors.New("--webhook-configuration is empty")
	case len(c.Hosts) == 0:
		return errors.New("--cert-hosts is empty")
	case c.CertLifetime < time.Second || c.CALifetime < time.Second:
		return fmt.Errorf("--cert-lifetime %s and --ca-lifetime %s must be at least 1s", c.CertLifetime, c.CALifetime)
	case c.CertLifetime > c.CALifetime:
		return fmt.Errorf("--cert-lifetime %s is longer than --ca-lifetime %s", c.CertLifetime, c.CALifetime)
	case c.CheckInterval <= 0 || c.CheckInterval > c.CertLifetime/6:
		// A replica must read the renewed certificate well inside the last third of the old one's life.
		return fmt.Errorf("--cert-check-interval %s must be positive and at most a sixth of --cert-lifetime (%s)", c.CheckInterval, c.CertLifetime/6)
	}
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %v", c.Namespace, errs)
	}
	for _, h := range c.Hosts {
		if net.ParseIP(h) != nil {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(h); len(errs) > 0 {
			return fmt.Errorf("--cert-hosts: %q is neither an IP address nor a DNS name", h)
		}
	}
	return nil
}

// Rotator keeps the Secret, the served certificate and the configurations' caBundle current.
type Rotator struct {
	cfg    Config
	policy policy
	log    logr.Logger

	mu       sync.Mutex
	serving  *tls.Certificate
	notAfter time.Time
	injected bool // the configurations trust the served certificate's CA
}

// New checks cfg and returns a Rotator; Run starts it.
func New(cfg Config) (*Rotator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	hosts := slices.Clone(cfg.Hosts)
	hosts = normalizeHosts(hosts)
	return &Rotator{cfg: cfg, log: cfg.Logger,
		policy: policy{name: cfg.WebhookConfiguration, hosts: hosts, caLifetime: cfg.CALifetime, certLifetime: cfg.CertLifetime}}, nil
}

func normalizeHosts(hosts []string) []string {
	for i, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			hosts[i] = ip.String()
		}
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// GetCertificate serves the certificate of the last Secret read (tls.Config.GetCertificate).
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.serving == nil {
		return nil, errors.New("no serving certificate yet")
	}
	return r.serving, nil
}

// Ready is a readiness check: a certificate is served, valid, and its CA is in the configurations.
func (r *Rotator) Ready(*http.Request) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.serving == nil:
		return errors.New("no serving certificate yet")
	case !r.cfg.Now().Before(r.notAfter):
		return fmt.Errorf("the serving certificate expired at %s", r.notAfter.Format(time.RFC3339))
	case !r.injected:
		return errors.New("the webhook configurations do not trust the serving certificate's CA yet")
	}
	return nil
}

// Run reconciles until ctx ends: when a step falls due, every CheckInterval, and soon after a
// failure.
func (r *Rotator) Run(ctx context.Context) error {
	for {
		wait := r.cfg.CheckInterval
		due, err := r.Reconcile(ctx)
		switch {
		case ctx.Err() != nil:
			return nil //nolint:nilerr // stopping is not a failure; err is the cancelled context's
		case err != nil:
			r.log.Error(err, "Certificate reconciliation failed; retrying")
			wait = min(wait, time.Second)
		default:
			wait = min(wait, max(due.Sub(r.cfg.Now()), 10*time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// errRetry: the Secret or a configuration changed under us; read again at once.
var errRetry = errors.New("changed concurrently")

// Reconcile does one round: read the Secret and the configurations, write the Secret if a step is
// due, serve its certificate, set the bundle. It returns when the next step falls due.
func (r *Rotator) Reconcile(ctx context.Context) (time.Time, error) {
	for range 5 {
		due, err := r.reconcile(ctx)
		if !errors.Is(err, errRetry) {
			return due, err
		}
	}
	return r.cfg.Now(), errRetry
}

func (r *Rotator) reconcile(ctx context.Context) (time.Time, error) {
	secrets := r.cfg.Client.CoreV1().Secrets(r.cfg.Namespace)
	secret, err := secrets.Get(ctx, r.cfg.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		secret, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: r.cfg.SecretName, Namespace: r.cfg.Namespace},
			Type:       corev1.SecretTypeOpaque,
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return time.Time{}, errRetry
		}
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("secret %s/%s: %w", r.cfg.Namespace, r.cfg.SecretName, err)
	}
	bundles, err := r.caBundles(ctx)
	if err != nil {
		return time.Time{}, err
	}
	var configured []*x509.Certificate
	for _, b := range bundles {
		configured = append(configured, parseBundle(b)...)
	}
	trusted := func(c *x509.Certificate) bool {
		for _, b := range bundles {
			if !containsCert(parseBundle(b), c) {
				return false
			}
		}
		return true
	}
	now := r.cfg.Now()
	s, why, due, err := r.policy.plan(decode(secret.Data), now, trusted, configured)
	if err != nil {
		return time.Time{}, err
	}
	if len(why) > 0 {
		updated := secret.DeepCopy()
		updated.Data = s.encode()
		if _, err := secrets.Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) {
				return time.Time{}, errRetry
			}
			return time.Time{}, fmt.Errorf("updating secret %s/%s: %w", r.cfg.Namespace, r.cfg.SecretName, err)
		}
		r.log.Info("Certificates rotated", "secret", r.cfg.Namespace+"/"+r.cfg.SecretName, "steps", why,
			"servingNotAfter", s.serving.cert.NotAfter, "caNotAfter", s.ca.cert.NotAfter)
	}
	if err := r.serve(s.serving); err != nil {
		return time.Time{}, err
	}
	bundle := encodeBundle(s.bundle)
	injectErr := r.inject(ctx, bundle)
	r.mu.Lock()
	r.injected = injectErr == nil
	r.mu.Unlock()
	return due, injectErr
}

func (r *Rotator) serve(p *pair) error {
	cert, err := tls.X509KeyPair(p.certPEM, p.keyPEM)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.serving != nil && bytes.Equal(r.serving.Certificate[0], cert.Certificate[0]) {
		return nil
	}
	r.serving, r.notAfter = &cert, p.cert.NotAfter
	r.log.Info("Serving certificate loaded", "serial", p.cert.SerialNumber.Text(16), "notAfter", p.cert.NotAfter)
	return nil
}

// caBundles returns the caBundle of every webhook of both configurations.
func (r *Rotator) caBundles(ctx context.Context) ([][]byte, error) {
	reg := r.cfg.Client.AdmissionregistrationV1()
	m, err := reg.MutatingWebhookConfigurations().Get(ctx, r.cfg.WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("MutatingWebhookConfiguration %s: %w", r.cfg.WebhookConfiguration, err)
	}
	v, err := reg.ValidatingWebhookConfigurations().Get(ctx, r.cfg.WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("ValidatingWebhookConfiguration %s: %w", r.cfg.WebhookConfiguration, err)
	}
	var out [][]byte
	for _, w := range m.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out, nil
}

// inject sets bundle as the caBundle of every webhook of both configurations, with an optimistic
// update of each.
func (r *Rotator) inject(ctx context.Context, bundle []byte) error {
	reg := r.cfg.Client.AdmissionregistrationV1()
	m, err := reg.MutatingWebhookConfigurations().Get(ctx, r.cfg.WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("MutatingWebhookConfiguration %s: %w", r.cfg.WebhookConfiguration, err)
	}
	changed := false
	for i := range m.Webhooks {
		if !bytes.Equal(m.Webhooks[i].ClientConfig.CABundle, bundle) {
			m.Webhooks[i].ClientConfig.CABundle, changed = bundle, true
		}
	}
	if changed {
		if _, err := reg.MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{}); err != nil {
			return r.updateErr("MutatingWebhookConfiguration", err)
		}
		r.log.Info("caBundle set", "mutatingWebhookConfiguration", m.Name)
	}
	v, err := reg.ValidatingWebhookConfigurations().Get(ctx, r.cfg.WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("ValidatingWebhookConfiguration %s: %w", r.cfg.WebhookConfiguration, err)
	}
	changed = false
	for i := range v.Webhooks {
		if !bytes.Equal(v.Webhooks[i].ClientConfig.CABundle, bundle) {
			v.Webhooks[i].ClientConfig.CABundle, changed = bundle, true
		}
	}
	if changed {
		if _, err := reg.ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
			return r.updateErr("ValidatingWebhookConfiguration", err)
		}
		r.log.Info("caBundle set", "validatingWebhookConfiguration", v.Name)
	}
	return nil
}

func (r *Rotator) updateErr(kind string, err error) error {
	if apierrors.IsConflict(err) {
		return errRetry
	}
	return fmt.Errorf("updating %s %s: %w", kind, r.cfg.WebhookConfiguration, err)
}

// AddFlags registers the --cert-* flags, --ca-lifetime and --webhook-configuration on fs, with
// their defaults.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.SecretName, "cert-secret", "", "Secret (in --cert-namespace) where the webhook keeps its own CA and serving certificate; empty serves --cert-dir")
	fs.StringVar(&c.Namespace, "cert-namespace", inClusterNamespace(), "namespace of --cert-secret (default: the pod's own)")
	fs.StringVar(&c.WebhookConfiguration, "webhook-configuration", "", "name of the Mutating- and ValidatingWebhookConfiguration whose caBundle --cert-secret's CA goes into")
	fs.StringSliceVar(&c.Hosts, "cert-hosts", nil, "comma list of DNS names and IP addresses of the serving certificate (the Service's names)")
	fs.DurationVar(&c.CertLifetime, "cert-lifetime", 90*24*time.Hour, "lifetime of a serving certificate; renewed at 2/3 of it")
	fs.DurationVar(&c.CALifetime, "ca-lifetime", 5*365*24*time.Hour, "lifetime of a CA; its successor joins the CA bundle at 1/2 of it and signs from 2/3 on")
	fs.DurationVar(&c.CheckInterval, "cert-check-interval", time.Minute, "how often the Secret and the configurations' caBundle are read again (another replica's rotation, a redeployed configuration)")
}

// inClusterNamespace is the namespace of the pod's service account, or "" outside a cluster.
func inClusterNamespace() string {
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
