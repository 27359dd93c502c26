package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Client is how Main gets its client: from the kubeconfig flags, the namespace they select
// included (kubeconfig and context empty: kubectl's defaults, $KUBECONFIG and ~/.kube/config).
type Client func(kubeconfig, context string) (kubernetes.Interface, string, error)

// Kubeconfig is the Client kubectl uses: clientcmd's loading rules and overrides.
func Kubeconfig(kubeconfig, kubeContext string) (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	source := "kubeconfig"
	if kubeconfig != "" {
		source = "--kubeconfig " + kubeconfig
	}
	if kubeContext != "" {
		source += " --context " + kubeContext
	}
	rc, err := cfg.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", source, err)
	}
	ns, _, err := cfg.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("%s: namespace: %w", source, err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", source, err)
	}
	return cs, ns, nil
}

const usage = `kubectl cardinal shows what Cardinal's scheduler extender sees, computed from the cluster's
GPU inventories and pods' records with the extender's own decision core; cordon, uncordon and
drain are its only writes (a Node annotation per card, and evictions).

Usage:
  kubectl cardinal nodes                  each GPU node: models, cards, what is free, health, NUMA, MIG, TopologyManager policy
  kubectl cardinal cards NODE             each card and MIG instance of NODE and who holds it
  kubectl cardinal explain POD            where POD (in -n) would go now and why not elsewhere
  kubectl cardinal explain -f pod.yaml    the same for a pod not created yet ("-f -": stdin)
  kubectl cardinal cordon NODE CARD... --reason WHY
                                          take cards (index or UUID; MIG instances by UUID) out of service:
                                          nothing new lands there, pods on them keep running
  kubectl cardinal uncordon NODE CARD...  return them to service
  kubectl cardinal drain NODE CARD...     evict the pods on cordoned cards (Eviction API: budgets respected)

Flags:
`

// Main runs kubectl cardinal with args (without the program name) and returns its exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, client Client) int {
	if err := run(ctx, args, stdout, client); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "kubectl cardinal:", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, args []string, stdout io.Writer, client Client) error {
	o := Options{Names: annotations.DefaultResourceNames(), Out: stdout}
	var kubeconfig, kubeContext, namespace, nodePolicy, gpuPolicy string
	var e ExplainOptions
	var co CordonOptions
	fs := pflag.NewFlagSet("kubectl cardinal", pflag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprint(stdout, usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&kubeconfig, "kubeconfig", "", "path of the kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&kubeContext, "context", "", "kubeconfig context to use (default: the current context)")
	fs.StringVarP(&namespace, "namespace", "n", "", "namespace of the pod to explain (default: the context's)")
	fs.StringVarP(&o.Output, "output", "o", OutputTable, "output format: table or json")
	fs.StringVarP(&e.File, "filename", "f", "", "explain: the pod manifest (YAML or JSON; - reads stdin)")
	fs.StringVar(&nodePolicy, "node-policy", string(annotations.PolicyBinpack), "explain: node policy for pods without cardinal.io/node-policy (binpack, spread, frag-aware); use the extender's --node-policy")
	fs.StringVar(&gpuPolicy, "gpu-policy", string(annotations.PolicyBinpack), "explain: card policy for pods without cardinal.io/gpu-policy (binpack, spread, frag-aware); use the extender's --gpu-policy")
	fs.StringVar(&o.SchedulerName, "scheduler-name", "cardinal-scheduler", "kube-scheduler profile whose pods make the task mix frag-aware weighs (the extender's --scheduler-name)")
	fs.StringVar(&o.ExactSchedulerName, "exact-scheduler-name", "cardinal-scheduler-exact", "Cardinal's second profile, whose pods count in the task mix too (the extender's --exact-scheduler-name; empty: none)")
	fs.StringVar(&co.Reason, "reason", "", "cordon: why the cards go out of service (required; shown in kubectl describe pod and kubectl cardinal cards)")
	fs.BoolVar(&co.DryRun, "dry-run", false, "cordon, uncordon: have the API server check the change without making it; drain: list the pods that would be evicted")
	fs.DurationVar(&co.Timeout, "timeout", 2*time.Minute, "drain: how long to retry evictions a PodDisruptionBudget refuses and to wait for evicted pods to go")
	o.Names.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := o.Names.Validate(); err != nil {
		return err
	}
	if err := o.checkOutput(); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("give a command: nodes, cards NODE, explain POD|-f FILE, or cordon|uncordon|drain NODE CARD")
	}
	cmd, rest := rest[0], rest[1:]
	var err error
	if cmd == "explain" {
		if e.NodePolicy, err = annotations.ParsePolicy("--node-policy", nodePolicy); err != nil {
			return err
		}
		if e.GPUPolicy, err = annotations.ParsePolicy("--gpu-policy", gpuPolicy); err != nil {
			return err
		}
	}
	check := func(n int, form string) error {
		if len(rest) > n {
			return fmt.Errorf("%s: unexpected argument %q (usage: kubectl cardinal %s)", cmd, rest[n], form)
		}
		return nil
	}
	switch cmd {
	case "nodes":
		err = check(0, "nodes")
	case "cards":
		if len(rest) == 0 {
			return errors.New("cards: give a node name (usage: kubectl cardinal cards NODE)")
		}
		err = check(1, "cards NODE")
	case "explain":
		err = check(1, "explain POD|-f FILE")
		if len(rest) == 1 {
			e.Pod = rest[0]
		}
	case "cordon", "uncordon", "drain":
		if len(rest) < 2 {
			return fmt.Errorf("%s: give a node and at least one card (usage: kubectl cardinal %s NODE CARD...)", cmd, cmd)
		}
		co.Node, co.Cards = rest[0], rest[1:]
	default:
		return fmt.Errorf("unknown command %q: want nodes, cards, explain, cordon, uncordon or drain", cmd)
	}
	if err != nil {
		return err
	}
	cs, ns, err := client(kubeconfig, kubeContext)
	if err != nil {
		return err
	}
	o.Client, o.Namespace = cs, ns
	if namespace != "" {
		o.Namespace = namespace
	}
	switch cmd {
	case "nodes":
		return o.Nodes(ctx)
	case "cards":
		return o.Cards(ctx, rest[0])
	case "cordon":
		return o.Cordon(ctx, co)
	case "uncordon":
		return o.Uncordon(ctx, co)
	case "drain":
		return o.Drain(ctx, co)
	}
	return o.Explain(ctx, e)
}
