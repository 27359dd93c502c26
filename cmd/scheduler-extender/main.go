// Command scheduler-extender is Cardinal's kube-scheduler HTTP extender: it filters nodes by their
// GPUs, scores them, and binds pods with the exact cards they get recorded on the pod.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler-extender:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := scheduler.DefaultConfig()
	var logOpts logging.Options
	var nodePolicy, gpuPolicy string
	fs := pflag.NewFlagSet("scheduler-extender", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, "Usage: scheduler-extender [flags]\n\n"+
			"Cardinal's kube-scheduler extender. kube-scheduler calls POST /filter, /prioritize, /bind and\n"+
			"/preempt (extender API v1, nodeCacheCapable); /healthz, /readyz (ready once the caches\n"+
			"synced) and /metrics are served on the same address.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to serve the extender API, health and metrics on")
	fs.StringVar(&cfg.ProbeListen, "probe-listen", "", "second address serving only /healthz, /readyz and /metrics (e.g. :8889 for kubelet probes on the pod IP); empty: none")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "path of a kubeconfig; empty uses the in-cluster service account")
	fs.StringVar(&cfg.SchedulerName, "scheduler-name", cfg.SchedulerName, "kube-scheduler profile (schedulerName) whose pods this extender places")
	fs.StringVar(&cfg.ExactSchedulerName, "exact-scheduler-name", cfg.ExactSchedulerName, "Cardinal's second kube-scheduler profile, which scores every node; with it, --scheduler-name's profile may sample nodes, and a filter of its pod whose sample holds no fitting node while nodes outside it fit answers an error so that kube-scheduler tries another sample; empty: one profile")
	fs.StringVar(&nodePolicy, "node-policy", string(cfg.NodePolicy), "default node policy for pods without cardinal.io/node-policy: binpack (fullest node first), spread (emptiest) or frag-aware (least added fragmentation for the requests seen)")
	fs.StringVar(&gpuPolicy, "gpu-policy", string(cfg.GPUPolicy), "default card policy for pods without cardinal.io/gpu-policy: binpack (fullest card first), spread (emptiest) or frag-aware")
	fs.BoolVar(&cfg.RequireEnforcedSharing, "require-enforced-sharing", cfg.RequireEnforcedSharing, "refuse containers that share a card (gpumem, gpumem-percentage, gpucores) on nodes whose device plugin runs --sharing-mode=none, where limits are advisory; nodes whose mps or hami-core sharing is not ready are refused for shares either way")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", scheduler.DefaultMaxBodyBytes, "largest request body accepted, in bytes")
	fs.DurationVar(&cfg.ReservationTTL, "reservation-ttl", cfg.ReservationTTL, "how long a bind's reservation waits for its pod to show up bound; then the pod is read back and, if still unbound or gone, its cards are freed")
	fs.DurationVar(&cfg.BindWait, "bind-wait", cfg.BindWait, "how long a bind waits for a container in flight on its node to be allocated before it asks kube-scheduler to retry (keep below the extender httpTimeout; 0: never wait)")
	fs.IntVar(&cfg.FilterShortlist, "filter-shortlist", cfg.FilterShortlist, "filter answers at most this many fitting nodes, the ones the policy ranks best (ties: lowest name first), for pods whose in-tree kube-scheduler scores cannot differ between nodes (no preferred pod affinity, ScheduleAnyway spread, Service/ReplicaSet/StatefulSet default spread, differing PreferNoSchedule taints or local images); with one node kube-scheduler skips scoring and prioritize. 0: every fitting node")
	cfg.Resources.AddFlags(fs)
	logOpts.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	var err error
	if cfg.NodePolicy, err = annotations.ParsePolicy("--node-policy", nodePolicy); err != nil {
		return err
	}
	if cfg.GPUPolicy, err = annotations.ParsePolicy("--gpu-policy", gpuPolicy); err != nil {
		return err
	}
	if cfg.Log, err = logging.New(logOpts); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return scheduler.Run(ctx, cfg)
}
