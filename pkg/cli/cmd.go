package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

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
GPU inventories and pods' records with the extender's own decision core (read only).

Usage:
  kubectl cardinal nodes                  each GPU node: models, cards, what is free, health, NUMA, MIG, TopologyManager policy
  kubectl cardinal cards NODE             each card and MIG instance of NODE and who holds it
  kubectl cardinal explain POD            where POD (in -n) would go now and why not elsewhere
  kubectl cardinal explain -f pod.yaml    the same for a pod not created yet ("-f -": stdin)

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
		return errors.New("give a command: nodes, cards NODE or explain POD|-f FILE")
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
	default:
		return fmt.Errorf("unknown command %q: want nodes, cards or explain", cmd)
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
	}
	return o.Explain(ctx, e)
}
