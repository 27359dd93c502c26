package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/webhook/certs"
)

// Config is everything Run needs.
type Config struct {
	// Listen is the TLS address of the webhook (host:port; the port must be set).
	Listen string
	// CertDir holds tls.crt and tls.key; they are reloaded when they change. Unused with
	// Certificates.
	CertDir string
	// Certificates, when set, makes the webhook manage its own serving certificate and the webhook
	// configurations' caBundle (package certs) instead of reading CertDir. Its Client and Logger
	// default to the ones below.
	Certificates *certs.Config
	// HealthListen serves /healthz and /readyz; empty disables it.
	HealthListen string
	// MetricsListen serves /metrics; empty disables it.
	MetricsListen string
	// SchedulerName is the kube-scheduler profile that runs Cardinal's extender.
	SchedulerName string
	// ExactSchedulerName is Cardinal's profile that scores every node (Rules.ExactSchedulerName);
	// empty: none.
	ExactSchedulerName string
	// TrustedServiceAccounts may change Cardinal's internal pod annotations, as
	// `system:serviceaccount:<namespace>:<name>`.
	TrustedServiceAccounts []string
	// DeviceEnvNamespaces may set the device variables (NVIDIA_VISIBLE_DEVICES, ...; DeviceEnvNames)
	// in their pods: system components such as the GPU operator's.
	DeviceEnvNamespaces []string
	// Resources are the managed resource names.
	Resources annotations.ResourceNames
	// GPUPodTolerations are added to every GPU pod Cardinal places (see ParseTolerations); nil: none.
	GPUPodTolerations []corev1.Toleration
	// Client watches Nodes for their card inventory.
	Client kubernetes.Interface
	// Logger is the base logger.
	Logger logr.Logger
	// Registry receives the webhook's metrics; nil makes a new one. /metrics serves it together with
	// controller-runtime's webhook metrics (which that library keeps on its own registry).
	Registry *prometheus.Registry
}

const serviceAccountPrefix = "system:serviceaccount:"

func (c *Config) validate() error {
	if _, _, err := splitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	switch {
	case c.CertDir == "" && c.Certificates == nil:
		return errors.New("--cert-dir is empty")
	case c.SchedulerName == "":
		return errors.New("--scheduler-name is empty")
	case c.ExactSchedulerName == c.SchedulerName:
		return fmt.Errorf("--exact-scheduler-name: %q is --scheduler-name too; name another profile, or leave it empty", c.ExactSchedulerName)
	case c.Client == nil:
		return errors.New("no Kubernetes client")
	}
	for _, sa := range c.TrustedServiceAccounts {
		parts := strings.Split(strings.TrimPrefix(sa, serviceAccountPrefix), ":")
		if !strings.HasPrefix(sa, serviceAccountPrefix) || len(parts) != 2 || parts[0] == "" || parts[1] == "" ||
			strings.ContainsAny(sa, `'\" `) {
			return fmt.Errorf("--trusted-service-accounts: %q is not system:serviceaccount:<namespace>:<name>", sa)
		}
	}
	for _, ns := range c.DeviceEnvNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("--device-env-namespaces: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
	}
	if err := c.Resources.Validate(); err != nil {
		return fmt.Errorf("--resource-*: %w", err)
	}
	for i := range c.GPUPodTolerations {
		if err := validToleration(&c.GPUPodTolerations[i]); err != nil {
			return fmt.Errorf("--gpu-pod-tolerations: [%d]: %w", i, err)
		}
	}
	if c.Certificates != nil {
		cc := c.certificates()
		if err := cc.Validate(); err != nil {
			return fmt.Errorf("certificates: %w", err)
		}
	}
	return nil
}

// certificates is Certificates with the client and logger defaulted.
func (c *Config) certificates() certs.Config {
	cc := *c.Certificates
	if cc.Client == nil {
		cc.Client = c.Client
	}
	if cc.Logger.GetSink() == nil {
		cc.Logger = c.Logger.WithName("certificates")
	}
	return cc
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port must be 1..65535", addr)
	}
	return host, port, nil
}

// Run serves the webhook until ctx ends. Replicas share nothing, so any number can run side by side.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	log := cfg.Logger
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	metrics, err := NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	nodes, err := NewNodeWatcher(cfg.Client, log.WithName("nodes"))
	if err != nil {
		return err
	}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "cardinal", Subsystem: "webhook", Name: "known_cards",
		Help: "Cards the webhook knows from the nodes' inventory annotations.",
	}, func() float64 { return float64(nodes.Cards().Total()) })); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}

	rules := &Rules{SchedulerName: cfg.SchedulerName, ExactSchedulerName: cfg.ExactSchedulerName, Resources: cfg.Resources, TrustedUsers: cfg.TrustedServiceAccounts,
		DeviceEnvNamespaces: cfg.DeviceEnvNamespaces, GPUTolerations: cfg.GPUPodTolerations}
	host, port, _ := splitHostPort(cfg.Listen)
	opts := crwebhook.Options{Host: host, Port: port, CertDir: cfg.CertDir}
	var rotator *certs.Rotator
	if cfg.Certificates != nil {
		if rotator, err = certs.New(cfg.certificates()); err != nil {
			return err
		}
		// The server asks the rotator at every handshake; no files are read.
		opts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = rotator.GetCertificate }}
	}
	server := crwebhook.NewServer(opts)
	server.Register(Path, NewHandler(rules, nodes, metrics).Webhook(log.WithName("admission")))
	server.Register(WorkloadsPath, NewWorkloadHandler(rules, nodes, metrics).Webhook(log.WithName("workloads")))
	server.Register(BindingsPath, NewBindingHandler(rules, cfg.Client.CoreV1(), metrics).Webhook(log.WithName("bindings")))
	// Always served: the MutatingWebhookConfiguration decides whether any pod is sent here.
	server.Register(CPUPodsPath, NewCPUPodsHandler(rules, metrics).Webhook(log.WithName("cpu-pods")))

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { nodes.Run(ctx); return nil })
	if rotator != nil {
		g.Go(func() error { return rotator.Run(ctx) })
	}
	g.Go(func() error {
		if err := server.Start(ctx); err != nil {
			return fmt.Errorf("webhook server: %w", err)
		}
		return nil
	})
	if cfg.HealthListen != "" {
		started := server.StartedChecker()
		mux := http.NewServeMux()
		handle := func(path string, h http.Handler) {
			mux.Handle(path, http.StripPrefix(path, h))
			mux.Handle(path+"/", http.StripPrefix(path, h)) // one check by name: /readyz/nodes-synced
		}
		handle("/healthz", &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}})
		ready := map[string]healthz.Checker{
			"webhook-server": started,
			"nodes-synced": func(*http.Request) error {
				if !nodes.HasSynced() {
					return errors.New("the node informer has not listed the nodes yet")
				}
				return nil
			},
		}
		if rotator != nil {
			ready["certificates"] = rotator.Ready
		}
		handle("/readyz", &healthz.Handler{Checks: ready})
		g.Go(func() error { return serve(ctx, "health", cfg.HealthListen, mux) })
	}
	if cfg.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{reg, crmetrics.Registry}, promhttp.HandlerOpts{}))
		g.Go(func() error { return serve(ctx, "metrics", cfg.MetricsListen, mux) })
	}
	log.Info("Webhook starting", "listen", cfg.Listen, "paths", []string{Path, WorkloadsPath, BindingsPath, CPUPodsPath}, "schedulerName", cfg.SchedulerName, "exactSchedulerName", cfg.ExactSchedulerName,
		"trustedServiceAccounts", cfg.TrustedServiceAccounts, "deviceEnvNamespaces", cfg.DeviceEnvNamespaces)
	return g.Wait()
}

// serve runs a plain HTTP server until ctx ends.
func serve(ctx context.Context, name, addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s server: %w", name, err)
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s server: %w", name, err)
	}
	return nil
}
