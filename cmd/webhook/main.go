// Command webhook is Cardinal's mutating admission webhook for pods: it sends GPU pods to Cardinal's
// scheduler and refuses pods that would fail later. See package pkg/webhook.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/kubeconfig"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
	"github.com/cardinal-gpu/cardinal/pkg/webhook"
	"github.com/cardinal-gpu/cardinal/pkg/webhook/certs"
)

const help = `webhook: Cardinal's admission webhook for pods and workloads.

A pod whose containers (init containers included) request nvidia.com/gpu, gpumem, gpumem-percentage or
gpucores is sent to Cardinal's scheduler (spec.schedulerName), unless it names another scheduler. The
webhook refuses GPU pods that set spec.nodeName, malformed selector annotations and resource requests,
memory no known card can hold, pods carrying Cardinal's internal annotations, updates of them by
anyone but --trusted-service-accounts (pods/status included), and pods (GPU or not, outside
--device-env-namespaces) whose containers set a device variable; it warns when no known card matches
a pod's selectors. Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs and CronJobs whose pod
template those rules refuse are refused too. A Binding of a GPU pod that names Cardinal's scheduler, or
carrying a cardinal.io/ key, by anyone but --trusted-service-accounts is refused (it reads the pod:
get on pods). It watches Nodes (list/watch) for their card inventory. GPU pods get
--gpu-pod-tolerations (for GPU nodes tainted to keep other pods off).

CPU-only pods: where the MutatingWebhookConfiguration sends them (the chart's webhook.cpuOnlyPods),
pods that ask for no GPU get Cardinal's scheduler and the marker cardinal.io/host: 0, so that its
extender places them where they strand no card.

Register it with the Mutating- and ValidatingWebhookConfiguration of pkg/webhook (the chart ships
them).

Certificates: with --cert-secret the webhook manages its own. It keeps a CA and a serving certificate
for --cert-hosts in that Secret, serves the certificate from memory, and sets the CA bundle on both
configurations named --webhook-configuration. The serving certificate is renewed at 2/3 of
--cert-lifetime. A new CA joins the bundle at half of --ca-lifetime and signs from 2/3 on. A CA that
signs no more stays trusted one --cert-lifetime (what it signed may still be served), then leaves the
bundle. Replicas share the Secret and update it optimistically, so they never
fight. Without --cert-secret it serves tls.crt and tls.key from --cert-dir (cert-manager, or a
certificate from the chart), reloaded when they change.

Flags:
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "webhook:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := webhook.Config{Resources: annotations.DefaultResourceNames()}
	logOpts := logging.Options{}
	var kubeconfigPath string
	var certCfg certs.Config
	fs := pflag.NewFlagSet("webhook", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, help)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Listen, "listen", ":9443", "TLS address the apiserver calls (host:port); pods are admitted at "+webhook.Path+", workloads at "+webhook.WorkloadsPath+", Bindings at "+webhook.BindingsPath+", CPU-only pods routed at "+webhook.CPUPodsPath)
	fs.StringVar(&cfg.CertDir, "cert-dir", "/etc/cardinal/webhook/certs", "folder holding tls.crt and tls.key for --listen; reloaded when they change (unused with --cert-secret)")
	fs.StringVar(&cfg.HealthListen, "health-listen", ":8081", "address of /healthz and /readyz (ready once serving and the nodes are listed); empty disables")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", ":8080", "address of /metrics (admission latency, decisions by outcome); empty disables")
	fs.StringVar(&kubeconfigPath, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account")
	fs.StringVar(&cfg.SchedulerName, "scheduler-name", "cardinal-scheduler", "scheduler profile GPU pods are sent to")
	fs.StringVar(&cfg.ExactSchedulerName, "exact-scheduler-name", "", "Cardinal's second scheduler profile, which scores every node: GPU pods with card rules, shares, MIG instances or a pod group are sent to it, the others to --scheduler-name (which may sample nodes); empty: every GPU pod goes to --scheduler-name")
	fs.StringSliceVar(&cfg.TrustedServiceAccounts, "trusted-service-accounts", nil,
		"comma list of system:serviceaccount:<namespace>:<name> allowed to add, change or remove Cardinal's internal pod annotations (the extender's and the device plugin's)")
	fs.StringSliceVar(&cfg.DeviceEnvNamespaces, "device-env-namespaces", webhook.DefaultDeviceEnvNamespaces(),
		"comma list of namespaces whose pods may set the device variables ("+strings.Join(webhook.DeviceEnvNames(), ", ")+"); empty: none")
	var tolerations string
	fs.StringVar(&tolerations, "gpu-pod-tolerations", "",
		`JSON list of tolerations added to every GPU pod Cardinal places, e.g. [{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]; empty: none`)
	certCfg.AddFlags(fs)
	logOpts.AddFlags(fs)
	cfg.Resources.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	var err error
	if cfg.GPUPodTolerations, err = webhook.ParseTolerations(tolerations); err != nil {
		return fmt.Errorf("--gpu-pod-tolerations: %w", err)
	}
	log, err := logging.New(logOpts)
	if err != nil {
		return err
	}
	// controller-runtime logs through its own package-level logger; give it ours.
	ctrllog.SetLogger(log)
	cfg.Logger = log

	rc, err := kubeconfig.Load(kubeconfigPath)
	if err != nil {
		return err
	}
	cfg.Client, err = kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	if certCfg.SecretName != "" {
		cfg.Certificates = &certCfg
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return webhook.Run(ctx, cfg)
}
