package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// Explanation is kubectl cardinal explain's answer: where the pod would go now and why not
// elsewhere.
type Explanation struct {
	Pod string `json:"pod"`
	// NodePolicy and GPUPolicy are the policies in force (the pod's annotations, else the flags').
	NodePolicy string `json:"nodePolicy"`
	GPUPolicy  string `json:"gpuPolicy"`
	// Node is the best node ("" when none fits) and Devices the devices it would get there, by
	// container.
	Node    string                            `json:"node"`
	Devices []annotations.ContainerAssignment `json:"devices,omitempty"`
	// Nodes is every node's verdict, in name order.
	Nodes []NodeVerdict `json:"nodes"`
}

// NodeVerdict is one node's answer: a score when the pod fits there, else the reason it does not
// (the text the extender gives kube-scheduler).
type NodeVerdict struct {
	Name   string  `json:"name"`
	Fits   bool    `json:"fits"`
	Score  float64 `json:"score,omitempty"`
	Reason string  `json:"reason,omitempty"`
}

// ExplainOptions choose the pod and the default policies (a pod's own annotations win).
type ExplainOptions struct {
	// Pod is the pod's name in Options.Namespace; File a pod manifest (YAML or JSON, "-": stdin).
	Pod, File             string
	NodePolicy, GPUPolicy annotations.Policy
}

// Explain prints where a pod would go now and, node by node, why not elsewhere.
func (o *Options) Explain(ctx context.Context, e ExplainOptions) error {
	if err := o.checkOutput(); err != nil {
		return err
	}
	pod, err := o.explainedPod(ctx, e)
	if err != nil {
		return err
	}
	d, err := core.New(core.Options{NodePolicy: e.NodePolicy, GPUPolicy: e.GPUPolicy})
	if err != nil {
		return err
	}
	key := pod.Namespace + "/" + pod.Name
	p, err := scheduler.PreparePod(d, o.Names, pod)
	if err != nil {
		return fmt.Errorf("pod %s: %w", cell(key), err)
	}
	if p == nil {
		return fmt.Errorf("pod %s requests no GPUs (no %s, %s or MIG instances): Cardinal does not place it", cell(key), o.Names.GPU, o.Names.Mem)
	}
	c, err := o.load(ctx, pod.UID)
	if err != nil {
		return err
	}
	x := explain(c, pod, p)
	x.Pod = key
	if o.Output == OutputJSON {
		return o.writeJSON(x)
	}
	return printExplanation(o, x)
}

// explain decides the pod on every node with the cache, as the extender's filter and prioritize
// do, and picks the best node: the highest score, the lowest name on ties.
func explain(c *cluster, pod *corev1.Pod, p *core.Pod) Explanation {
	x := Explanation{NodePolicy: string(p.NodePolicy), GPUPolicy: string(p.GPUPolicy), Nodes: []NodeVerdict{}}
	names := make([]string, len(c.nodes))
	for i := range c.nodes {
		names[i] = c.nodes[i].Name
	}
	verdicts := c.cache.Evaluate(pod.UID, p, names, nil)
	best := -1
	for i, v := range verdicts {
		nv := NodeVerdict{Name: names[i], Fits: v.Reason == nil}
		if v.Reason == nil {
			nv.Score = v.Score
			if best < 0 || v.Score > verdicts[best].Score {
				best = i
			}
		} else {
			nv.Reason = v.Reason.String()
		}
		x.Nodes = append(x.Nodes, nv)
	}
	if best < 0 {
		return x
	}
	x.Node = names[best]
	if st := c.cache.NodeUsage(x.Node); st != nil {
		if plan, r := p.Fit(st, c.cache.Mix()); r == nil && plan != nil {
			x.Devices = plan.Assignment(st).Containers
		}
	}
	return x
}

func printExplanation(o *Options, x Explanation) error {
	if x.Node == "" {
		fmt.Fprintf(o.Out, "Pod %s fits on no node now (node policy %s, gpu policy %s).\n", cell(x.Pod), cell(x.NodePolicy), cell(x.GPUPolicy))
	} else {
		fmt.Fprintf(o.Out, "Pod %s would go to %s (node policy %s, gpu policy %s).\n", cell(x.Pod), cell(x.Node), cell(x.NodePolicy), cell(x.GPUPolicy))
		for _, ca := range x.Devices {
			ids := make([]string, len(ca.Devices))
			for i, d := range ca.Devices {
				ids[i] = cell(d.ID)
			}
			fmt.Fprintf(o.Out, "  container %s: %s\n", cell(ca.Name), strings.Join(ids, ", "))
		}
	}
	fmt.Fprintln(o.Out)
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tFITS\tSCORE\tWHY NOT")
	for _, n := range x.Nodes {
		if n.Fits {
			fmt.Fprintf(w, "%s\tyes\t%.3f\t-\n", cell(n.Name), n.Score)
		} else {
			fmt.Fprintf(w, "%s\tno\t-\t%s\n", cell(n.Name), cell(n.Reason))
		}
	}
	return w.Flush()
}

// explainedPod reads the pod from the API server or from its manifest.
func (o *Options) explainedPod(ctx context.Context, e ExplainOptions) (*corev1.Pod, error) {
	switch {
	case e.Pod != "" && e.File != "":
		return nil, errors.New("give a pod name or -f, not both")
	case e.Pod == "" && e.File == "":
		return nil, errors.New("give a pod name or -f pod.yaml")
	case e.Pod != "":
		ns := o.Namespace
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		pod, err := o.Client.CoreV1().Pods(ns).Get(ctx, e.Pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("pod %q not found in namespace %q", e.Pod, ns)
		}
		if err != nil {
			return nil, fmt.Errorf("get pod %s/%s: %w", ns, e.Pod, err)
		}
		return pod, nil
	}
	var raw []byte
	var err error
	if e.File == "-" {
		raw, err = io.ReadAll(os.Stdin)
	} else {
		raw, err = os.ReadFile(e.File)
	}
	if err != nil {
		return nil, fmt.Errorf("-f %s: %w", e.File, err)
	}
	return o.decodePod(e.File, raw)
}

// decodePod reads a pod manifest; anything but one Pod is an error naming the file.
func (o *Options) decodePod(file string, raw []byte) (*corev1.Pod, error) {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		return nil, fmt.Errorf("-f %s: %w", file, err)
	}
	if meta.Kind != "Pod" {
		return nil, fmt.Errorf("-f %s: kind %q, want Pod (explain one pod at a time)", file, meta.Kind)
	}
	pod := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(raw, pod); err != nil {
		return nil, fmt.Errorf("-f %s: %w", file, err)
	}
	if pod.Name == "" {
		pod.Name = pod.GenerateName
	}
	if pod.Namespace == "" {
		pod.Namespace = o.Namespace
		if pod.Namespace == "" {
			pod.Namespace = metav1.NamespaceDefault
		}
	}
	return pod, nil
}
