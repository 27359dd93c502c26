// Command demo shows Cardinal working on a machine without GPUs: it starts a local Kubernetes (etcd,
// kube-apiserver, kube-scheduler and four real kubelets with a fake container runtime), installs
// Cardinal from its Helm chart with the device plugin on the simulated cards of
// examples/simulated-gpus.yaml, submits the example pods of examples/ one by one, and prints where
// each went: node, cards (model, UUID, NUMA node) as the kubelet's PodResources API reports them
// (and, on node-c, whose kubelet runs the TopologyManager policy single-numa-node with the static CPU
// manager, a Guaranteed pod's exclusive CPUs and their NUMA node), and for a pod that stays Pending
// the reason on each node.
//
// Run it with `make demo` (as root: kubelets need mount namespaces). With DEMO_KEEP=1 the cluster
// keeps running until Ctrl-C, and the demo prints how to point kubectl at it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/cpuset"
	"sigs.k8s.io/yaml"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/cli"
	"github.com/cardinal-gpu/cardinal/test/cluster"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// examplePods are the files of examples/ submitted, in this order, each after the previous one has
// settled: by-uuid first, so that no other A100 pod can take the card it names.
func examplePods() []string {
	return []string{"by-uuid", "by-type", "nouse-type", "numa-bind", "shared", "multi-container", "numa-aligned", "mig", "impossible"}
}

// topologyNode is the demo node whose kubelet runs a TopologyManager policy with the static CPU
// manager, on a machine of 2 NUMA nodes x 8 CPUs (CPU 0 reserved): Guaranteed pods there get
// exclusive CPUs on their cards' NUMA node (examples/numa-aligned.yaml).
const topologyNode = "node-c"

// demoNodes are stack.DemoNodes with topologyNode's kubelet set up.
func demoNodes() []stack.NodeSpec {
	nodes := stack.DemoNodes()
	for i := range nodes {
		if nodes[i].Name == topologyNode {
			nodes[i].Kubelet = cluster.KubeletSpec{
				Machine:               &cluster.Machine{NUMANodes: 2, CPUsPerNUMA: 8},
				TopologyManagerPolicy: annotations.TopologyPolicySingleNUMANode,
				CPUManagerPolicy:      annotations.CPUManagerPolicyStatic,
				ReservedCPUs:          "0",
			}
		}
	}
	return append(nodes, stack.NodeSpec{Name: migNode, Shares: 1})
}

// migNode is the demo node whose one A100 is in MIG mode (examples/mig.yaml lands there); the
// end-to-end suite's default stack does not start it.
const migNode = "node-d"

// settleTimeout bounds the wait for one pod to be Running or reported unschedulable.
const settleTimeout = 90 * time.Second

// namespace is where the example pods go (they name none).
const namespace = "default"

func main() {
	root, err := stack.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	bin := filepath.Join(root, "bin")
	keep := os.Getenv("DEMO_KEEP") == "1"
	fs := pflag.NewFlagSet("demo", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, "Usage: demo [flags]  (make demo; DEMO_KEEP=1 keeps the cluster running)\n\n"+
			"Starts a local cluster with simulated GPUs, installs Cardinal from charts/cardinal, submits the\n"+
			"pods of examples/ and prints where each went. Needs root and the test-bed binaries\n"+
			"(make testbed-bins; $CARDINAL_TESTBED_BIN).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&bin, "bin", bin, "folder holding the scheduler-extender, webhook and device-plugin binaries (make build)")
	fs.BoolVar(&keep, "keep", keep, "keep the cluster running until Ctrl-C and print how to use it (also DEMO_KEEP=1)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	t := newTB("demo")
	code := 0
	if !t.run(func() { demo(t, root, bin, keep) }) {
		code = 1
	}
	if !t.cleanup() {
		code = 1
	}
	os.Exit(code)
}

func demo(t *tb, root, bin string, keep bool) {
	started := time.Now()
	fmt.Println("Starting a local cluster: etcd, kube-apiserver, kube-scheduler, 4 kubelets with simulated GPUs;")
	fmt.Printf("%s's kubelet sees 2 NUMA nodes x 8 CPUs and runs the TopologyManager policy single-numa-node\n", topologyNode)
	fmt.Println("with the static CPU manager; installing Cardinal from charts/cardinal ...")
	s := stack.Start(t, stack.Options{Root: root, Bin: bin, Nodes: demoNodes()})
	fmt.Printf("Cluster ready in %s. Submitting the pods of examples/ ...\n\n", time.Since(started).Round(100*time.Millisecond))

	// Admission warnings (kubectl prints them) are collected and shown with the table.
	rc := rest.CopyConfig(s.Cluster.RESTConfig)
	warnings := &warningCollector{}
	rc.WarningHandlerWithContext = warnings
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	var rows []row
	for _, name := range examplePods() {
		path := filepath.Join(root, "examples", name+".yaml")
		p, err := readPod(path)
		if err != nil {
			t.Fatalf("%v", err)
		}
		warnings.pod = p.Name
		if _, err := client.CoreV1().Pods(namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("kubectl apply -f examples/%s.yaml: %v", name, err)
		}
		rows = append(rows, settle(t, s, p.Name))
	}
	printTable(os.Stdout, rows)
	for _, w := range warnings.list {
		fmt.Printf("\nWarning from Cardinal's webhook when %s was created: %s\n", w.pod, w.text)
	}
	fmt.Printf("\nEverything above came from the kubelets' PodResources API (cards) and Cardinal's filter (reasons).\n")
	// What kubectl cardinal nodes (bin/kubectl-cardinal) prints for the cluster now.
	fmt.Printf("\n$ kubectl cardinal nodes\n")
	o := cli.Options{Client: client, Names: annotations.DefaultResourceNames(), Out: os.Stdout}
	if err := o.Nodes(context.Background()); err != nil {
		fmt.Printf("kubectl cardinal nodes: %v\n", err)
	}
	fmt.Printf("Demo took %s.\n", time.Since(started).Round(100*time.Millisecond))
	if !keep {
		fmt.Println("Tearing down (DEMO_KEEP=1 make demo keeps the cluster running).")
		return
	}
	kubectl := filepath.Join(cluster.BinDir(t), "kubectl")
	fmt.Printf("\nThe cluster keeps running. In another shell:\n\n")
	fmt.Printf("  export KUBECONFIG=%s\n", s.Kubeconfig())
	fmt.Printf("  %s get pods -o wide\n", kubectl)
	fmt.Printf("  %s describe pod impossible\n", kubectl)
	fmt.Printf("  %s apply -f examples/by-type.yaml   # after editing its name\n", kubectl)
	fmt.Printf("\nLogs of every component: %s\nPress Ctrl-C to stop it and clean up.\n", s.Cluster.LogDir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Println("\nStopping.")
}

// warningCollector keeps the API server's warnings (the webhook's) per pod, as kubectl shows them.
type warningCollector struct {
	pod  string
	list []struct{ pod, text string }
}

func (w *warningCollector) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.list = append(w.list, struct{ pod, text string }{w.pod, text})
}

// readPod reads one example pod.
func readPod(path string) (*corev1.Pod, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p corev1.Pod
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if p.Kind != "Pod" {
		return nil, fmt.Errorf("%s: kind %q, want Pod", path, p.Kind)
	}
	return &p, nil
}

// row is one line of the table (with its per-node reasons when Pending).
type row struct {
	pod, selector, node string
	cards               []string
	phase               corev1.PodPhase
	reasons             []string // "node: reason", for a Pending pod
}

// settle waits until the pod is Running or reported unschedulable, and describes it.
func settle(t *tb, s *stack.Stack, name string) row {
	var p *corev1.Pod
	var event string
	stack.Wait(t, settleTimeout, "pod "+name+" Running or reported unschedulable", func() (bool, string, error) {
		var err error
		p, err = s.Cluster.Client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		switch p.Status.Phase {
		case corev1.PodRunning:
			return true, "", nil
		case corev1.PodFailed:
			return false, "", fmt.Errorf("pod %s failed: %s", name, p.Status.Message)
		}
		if p.Spec.NodeName != "" {
			return false, "bound to " + p.Spec.NodeName + ", starting", nil
		}
		event, err = stack.FailedScheduling(context.Background(), s.Cluster.Client, namespace, name)
		return event != "", "not scheduled yet", err
	})
	r := row{pod: name, selector: selector(p), node: p.Spec.NodeName, phase: p.Status.Phase}
	if p.Status.Phase == corev1.PodRunning {
		cards, err := cardsOf(t, s, p)
		if err != nil {
			t.Fatalf("%v", err)
		}
		r.cards = cards
		return r
	}
	reasons, err := filterReasons(s, p)
	if err != nil {
		t.Fatalf("%v", err)
	}
	r.reasons = reasons
	return r
}

// selector describes what the pod asks for: its GPU resources and Cardinal annotations.
func selector(p *corev1.Pod) string {
	var parts []string
	names := annotations.DefaultResourceNames()
	for _, c := range p.Spec.Containers {
		var res []string
		for _, n := range names.All() {
			if q, ok := c.Resources.Limits[n]; ok {
				res = append(res, strings.TrimPrefix(string(n), "nvidia.com/")+"="+strconv.FormatInt(q.Value(), 10))
			}
		}
		for n, q := range c.Resources.Limits {
			if names.IsMIGResource(n) {
				res = append(res, strings.TrimPrefix(string(n), "nvidia.com/")+"="+strconv.FormatInt(q.Value(), 10))
			}
		}
		if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok && len(res) > 0 {
			res = append(res, "cpu="+q.String()) // a limit: Guaranteed, exclusive CPUs under the static policy
		}
		if len(res) > 0 {
			prefix := ""
			if len(p.Spec.Containers) > 1 {
				prefix = c.Name + ":"
			}
			parts = append(parts, prefix+strings.Join(res, ","))
		}
	}
	for _, k := range annotations.UserKeys {
		if v, ok := p.Annotations[k]; ok {
			short := k[strings.Index(k, "/")+1:]
			if k == annotations.UseGPUUUID || k == annotations.NoUseGPUUUID {
				v = shortUUIDs(v)
			}
			parts = append(parts, short+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

func shortUUIDs(list string) string {
	var out []string
	for _, u := range strings.Split(list, ",") {
		out = append(out, shortUUID(strings.TrimSpace(u)))
	}
	return strings.Join(out, ",")
}

// shortUUID keeps a UUID's first group: GPU-ccd212fd.
func shortUUID(u string) string {
	if i := strings.Index(u, "-"); i >= 0 {
		if j := strings.Index(u[i+1:], "-"); j >= 0 {
			return u[:i+1+j]
		}
	}
	return u
}

// cardsOf lists, per GPU container, the cards its kubelet's PodResources record holds.
func cardsOf(t *tb, s *stack.Stack, p *corev1.Pod) ([]string, error) {
	devs, err := s.Devices(context.Background(), p.Spec.NodeName)
	if err != nil {
		return nil, err
	}
	migs, err := s.MIGDevices(context.Background(), p.Spec.NodeName)
	if err != nil {
		return nil, err
	}
	cpus, err := exclusiveCPUs(t, s, p)
	if err != nil {
		return nil, err
	}
	var assignment annotations.Assignment
	if raw, ok := p.Annotations[annotations.GPUAssignment]; ok {
		if assignment, err = annotations.DecodeAssignment(raw); err != nil {
			return nil, err
		}
	}
	var out []string
	for _, c := range p.Spec.Containers {
		ref := stack.ContainerRef{Namespace: p.Namespace, Pod: p.Name, Container: c.Name}
		ids := devs[ref]
		var cards []string
		for _, id := range migs[ref] {
			d, ok := assignedDevice(assignment.Container(c.Name), id)
			card, known := s.Card(d.Parent)
			if !ok || !known {
				return nil, fmt.Errorf("pod %s holds MIG device %s its assignment does not name", p.Name, id)
			}
			cards = append(cards, fmt.Sprintf("%s %s (%s on %s) NUMA %d", card.Model, shortUUID(id), d.Profile, shortUUID(d.Parent), card.NUMA))
		}
		if len(ids) == 0 && len(cards) == 0 {
			continue
		}
		for _, id := range ids {
			uuid, slot, err := annotations.ParseDeviceID(id)
			if err != nil {
				return nil, err
			}
			card, ok := s.Card(uuid)
			if !ok {
				return nil, fmt.Errorf("pod %s holds unknown device %s", p.Name, id)
			}
			desc := fmt.Sprintf("%s %s NUMA %d", card.Model, shortUUID(uuid), card.NUMA)
			if slot >= 0 {
				desc += fmt.Sprintf(" slot %d%s", slot, reserved(assignment.Container(c.Name), id))
			}
			cards = append(cards, desc)
		}
		prefix := ""
		if len(p.Spec.Containers) > 1 {
			prefix = c.Name + ": "
		}
		out = append(out, prefix+strings.Join(cards, "; ")+cpus[c.Name])
	}
	return out, nil
}

// exclusiveCPUs describes, per container, the CPUs the kubelet's static CPU manager gave it for
// its exclusive use (PodResources) and their NUMA nodes: "; CPUs 1-4 on NUMA 0". Containers that
// share the node's CPU pool are left out.
func exclusiveCPUs(t *tb, s *stack.Stack, p *corev1.Pod) (map[string]string, error) {
	k := s.Kubelets[p.Spec.NodeName]
	out := map[string]string{}
	if k == nil || k.Machine == nil {
		return out, nil
	}
	resp, err := k.PodResources(t).List(context.Background(), &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod resources of %s: %w", k.Name, err)
	}
	for _, pr := range resp.GetPodResources() {
		if pr.GetNamespace() != p.Namespace || pr.GetName() != p.Name {
			continue
		}
		for _, c := range pr.GetContainers() {
			var ids []int
			numa := map[int]bool{}
			for _, id := range c.GetCpuIds() {
				ids = append(ids, int(id))
				numa[k.Machine.NUMANodeOf(int(id))] = true
			}
			if len(ids) == 0 {
				continue
			}
			var nodes []string
			for _, n := range slices.Sorted(maps.Keys(numa)) {
				nodes = append(nodes, strconv.Itoa(n))
			}
			out[c.GetName()] = fmt.Sprintf("; CPUs %s on NUMA %s", cpuset.New(ids...).String(), strings.Join(nodes, ","))
		}
	}
	return out, nil
}

// reserved is " (N MiB, C% cores)" of a shared device in the assignment.
func reserved(ca *annotations.ContainerAssignment, id string) string {
	if ca == nil {
		return ""
	}
	for _, d := range ca.Devices {
		if d.ID == id {
			return fmt.Sprintf(" (%d MiB, %d%% cores)", d.MemoryMiB, d.Cores)
		}
	}
	return ""
}

// filterReasons asks Cardinal's extender, as kube-scheduler does, why each node cannot take the
// pod; the scheduler's own event merges equal reasons and drops the node names.
func filterReasons(s *stack.Stack, p *corev1.Pod) ([]string, error) {
	var nodes []string
	for _, n := range s.Nodes {
		nodes = append(nodes, n.Name)
	}
	body, err := json.Marshal(extenderv1.ExtenderArgs{Pod: p, NodeNames: &nodes})
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post(s.ExtenderURL+"/filter", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("extender filter: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("extender filter answered %s: %w", resp.Status, err)
	}
	if res.Error != "" {
		return nil, fmt.Errorf("extender filter: %s", res.Error)
	}
	var out []string
	for _, n := range nodes {
		reason, ok := res.FailedAndUnresolvableNodes[n]
		if !ok {
			reason, ok = res.FailedNodes[n]
		}
		if !ok {
			reason = "fits now (the pod waits for the scheduler's next attempt)"
		}
		out = append(out, n+": "+reason)
	}
	return out, nil
}

// printTable prints the rows as aligned columns, then the per-node reasons of each Pending pod.
func printTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tASKS FOR\tNODE\tCARDS (model, UUID, NUMA) FROM THE KUBELET")
	for _, r := range rows {
		node := r.node
		if r.phase != corev1.PodRunning {
			node = string(r.phase)
		}
		cards := slices.Clone(r.cards)
		if len(cards) == 0 {
			cards = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.pod, r.selector, node, cards[0])
		for _, c := range cards[1:] {
			fmt.Fprintf(tw, "\t\t\t%s\n", c)
		}
	}
	_ = tw.Flush()
	for _, r := range rows {
		if len(r.reasons) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s is %s. Why not on each node (what kubectl describe pod %s summarises):\n", r.pod, r.phase, r.pod)
		for _, reason := range r.reasons {
			fmt.Fprintf(w, "  %s\n", reason)
		}
	}
}

// assignedDevice is the device of the container's assignment with this ID.
func assignedDevice(c *annotations.ContainerAssignment, id string) (annotations.DeviceAssignment, bool) {
	if c != nil {
		for _, d := range c.Devices {
			if d.ID == id {
				return d, true
			}
		}
	}
	return annotations.DeviceAssignment{}, false
}
