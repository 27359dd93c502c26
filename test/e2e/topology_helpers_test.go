package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"sigs.k8s.io/yaml"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/cluster"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// The kubelet's admission refusals the topology suite counts (pod.status.reason of a Failed pod).
const (
	reasonTopologyAffinity     = "TopologyAffinityError"
	reasonUnexpectedAdmission  = "UnexpectedAdmissionError"
	topologyNodeLabel          = "e2e.cardinal.io/topology-node"
	topologyGuaranteedMemory   = "64Mi"
	topologyPlainSchedulerName = corev1.DefaultSchedulerName
)

// tmNode is one node of the topology suite: a kubelet with a TopologyManager policy and scope and
// the static CPU manager, on a machine of 2 NUMA nodes x 8 CPUs (CPU 0 reserved), with 4 cards on
// each NUMA node.
type tmNode struct {
	name, policy, scope string
}

// demandsAlignment says whether the policy admits a pod only with its cards and exclusive CPUs
// on the fewest NUMA nodes that could hold them: one NUMA node in every scenario here.
func (n tmNode) demandsAlignment() bool {
	return n.policy == annotations.TopologyPolicyRestricted || n.policy == annotations.TopologyPolicySingleNUMANode
}

// machine is every topology node's hardware.
func topologyMachine() *cluster.Machine { return &cluster.Machine{NUMANodes: 2, CPUsPerNUMA: 8} }

// topologySim is the simulated-NVML file of the topology nodes: cards 0-3 on NUMA 0, 4-7 on NUMA 1.
func topologySim(t *testing.T, nodes []tmNode) string {
	t.Helper()
	doc := map[string]any{}
	m := map[string]any{}
	for _, n := range nodes {
		m[n.name] = []any{
			map[string]any{"model": "NVIDIA A100-SXM4-80GB", "memoryMiB": 81920, "numa": 0, "count": 4},
			map[string]any{"model": "NVIDIA A100-SXM4-80GB", "memoryMiB": 81920, "numa": 1, "count": 4},
		}
	}
	doc["nodes"] = m
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatalf("simulation file: %v", err)
	}
	path := filepath.Join(t.TempDir(), "topology-gpus.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatalf("simulation file: %v", err)
	}
	return path
}

// tmCtr is one container of a scenario pod: cards, MiB per card (shared), exclusive CPUs (a
// Guaranteed pod's integer CPUs; 0 in a pod that is not Guaranteed).
type tmCtr struct {
	name          string
	cards, memMiB int64
	cpus          int64
}

// want is what Cardinal should make of a scenario pod.
type want int

const (
	wantRunning want = iota
	// wantPending: the extender refuses the node with a reason naming the kubelet.
	wantPending
)

func (w want) String() string {
	if w == wantPending {
		return "Pending"
	}
	return "Running"
}

// tmPod is one scenario pod, pinned to a node.
type tmPod struct {
	name string
	// gpuPolicy is the pod's cardinal.io/gpu-policy, "" for the default (binpack).
	gpuPolicy annotations.Policy
	// useCard, when >= 0, is the index of the node's card the pod names with use-gpuuuid.
	useCard int
	// guaranteed makes every container request and limit its CPUs and 64Mi: Guaranteed QoS.
	guaranteed bool
	init, ctrs []tmCtr
	// cpuOnly pods ask no card; they are bound with nodeName (no scheduler; the webhook skips them)
	// to take exclusive CPUs before the next pods.
	cpuOnly bool
	// reusesSubset: the app containers take fewer of the init container's cards than it holds.
	// The kubelet then picks which at random (devicesToAllocate ranges over a Go map), so no
	// assignment can name them; checked instead: each app container's cards are among the init
	// container's assigned ones, and the plugin's allocation record names what the kubelet gave.
	reusesSubset bool
	// want is Cardinal's outcome; numa, when >= 0, the NUMA node every card of a Running pod must
	// be on (the kubelet's choice the scenario builds on), in either run.
	want want
	numa int
}

// runMode is one of the two runs of the scenarios: through Cardinal, or plain kube-scheduler with
// nvidia.com/gpu as an extended resource.
type runMode struct {
	name      string
	cardinal  bool
	namespace string
}

var (
	modeCardinal = runMode{name: "cardinal", cardinal: true, namespace: namespace}
	// Cardinal's webhook skips its own namespace, so pods there keep the default scheduler.
	modePlain = runMode{name: "plain", namespace: stack.Namespace}
)

// result is how one scenario pod ended.
type result struct {
	scenario, node, pod string
	phase               corev1.PodPhase
	reason, message     string
	// pendingReason is the FailedScheduling message of a Pending pod.
	pendingReason string
	// ignoredSelector: a Running pod that does not hold the card its use-gpuuuid names.
	ignoredSelector bool
}

// refused says whether the kubelet failed the pod at admission.
func (r result) refused() bool {
	return r.phase == corev1.PodFailed && (r.reason == reasonTopologyAffinity || r.reason == reasonUnexpectedAdmission)
}

// tally collects results from the per-node subtests.
type tally struct {
	mu      sync.Mutex
	results map[string][]result // mode -> results
}

func (y *tally) add(mode string, r result) {
	y.mu.Lock()
	defer y.mu.Unlock()
	if y.results == nil {
		y.results = map[string][]result{}
	}
	y.results[mode] = append(y.results[mode], r)
}

// nodeRun runs the scenarios of one mode on one node.
type nodeRun struct {
	e     *env
	mode  runMode
	node  tmNode
	tally *tally
	pr    podresourcesv1.PodResourcesListerClient
}

func newNodeRun(t *testing.T, e *env, mode runMode, node tmNode, y *tally) *nodeRun {
	return &nodeRun{e: e, mode: mode, node: node, tally: y, pr: e.Kubelets[node.name].PodResources(t)}
}

// object builds the scenario pod for this run's mode and node.
func (r *nodeRun) object(p tmPod) *corev1.Pod {
	names := annotations.DefaultResourceNames()
	build := func(c tmCtr, guaranteed bool) corev1.Container {
		limits := corev1.ResourceList{}
		requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("1Mi")}
		if guaranteed {
			requests = corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewQuantity(c.cpus, resource.DecimalSI),
				corev1.ResourceMemory: resource.MustParse(topologyGuaranteedMemory),
			}
			limits = maps.Clone(requests)
		}
		if c.cards > 0 {
			limits[names.GPU] = *resource.NewQuantity(c.cards, resource.DecimalSI)
		}
		// Plain kube-scheduler knows no gpumem (no node advertises it): a shared pod there asks
		// one slot, as with a time-slicing device plugin.
		if c.memMiB > 0 && r.mode.cardinal {
			limits[names.Mem] = *resource.NewQuantity(c.memMiB, resource.DecimalSI)
		}
		return corev1.Container{Name: c.name, Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: r.mode.namespace,
			Labels: map[string]string{topologyNodeLabel: r.node.name}},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(int64)},
	}
	for _, c := range p.init {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, build(c, p.guaranteed))
	}
	for _, c := range p.ctrs {
		pod.Spec.Containers = append(pod.Spec.Containers, build(c, p.guaranteed))
	}
	if p.cpuOnly {
		pod.Spec.NodeName = r.node.name
		return pod
	}
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: r.node.name}
	if r.mode.cardinal {
		ann := map[string]string{}
		if p.gpuPolicy != "" {
			ann[annotations.GPUPolicy] = string(p.gpuPolicy)
		}
		if p.useCard >= 0 {
			ann[annotations.UseGPUUUID] = r.card(p.useCard).UUID
		}
		pod.Annotations = ann
	} else {
		pod.Spec.SchedulerName = topologyPlainSchedulerName
	}
	return pod
}

// card is the node's card of the given index.
func (r *nodeRun) card(index int) stack.Card {
	for _, c := range r.e.NodeCards(r.node.name) {
		if c.Index == index {
			return c
		}
	}
	panic(fmt.Sprintf("node %s has no card %d", r.node.name, index))
}

// run creates each pod in turn, each after the previous one settled, so the kubelet admits them
// in this order; every pod's outcome is checked and recorded.
func (r *nodeRun) run(t *testing.T, scenario string, pods ...tmPod) {
	t.Helper()
	for _, p := range pods {
		p.name = r.podName(p.name)
		obj := r.object(p)
		c, cancel := context.WithTimeout(context.Background(), apiTimeout)
		_, err := r.e.client.CoreV1().Pods(r.mode.namespace).Create(c, obj, metav1.CreateOptions{})
		cancel()
		if err != nil {
			t.Fatalf("%s: create pod %s: %v", r.node.name, p.name, err)
		}
		got := r.settle(t, p)
		got.scenario = scenario
		got = r.check(t, p, got)
		if !p.cpuOnly {
			r.tally.add(r.mode.name, got)
		}
		if r.mode.cardinal {
			r.waitInventoryCPUs(t)
		}
	}
}

// settle waits until the pod is Running, Failed, or (unbound) reported unschedulable; a pod Cardinal
// should run is given until runTimeout to get there (a first FailedScheduling may be a retry).
// Init containers are completed in the fake runtime once started, as a real one would end them.
func (r *nodeRun) settle(t *testing.T, p tmPod) result {
	t.Helper()
	res := result{node: r.node.name, pod: p.name}
	timeout := runTimeout
	stack.Wait(t, timeout, fmt.Sprintf("pod %s/%s on %s Running, Failed or unschedulable", r.mode.namespace, p.name, r.node.name), func() (bool, string, error) {
		if err := r.e.componentsAlive(); err != nil {
			return false, "", err
		}
		pod, err := r.e.client.CoreV1().Pods(r.mode.namespace).Get(context.Background(), p.name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		res.phase, res.reason, res.message = pod.Status.Phase, pod.Status.Reason, pod.Status.Message
		switch pod.Status.Phase {
		case corev1.PodRunning, corev1.PodFailed, corev1.PodSucceeded:
			return true, "", nil
		}
		if pod.Spec.NodeName != "" {
			if len(p.init) > 0 {
				r.completeInit(pod)
			}
			return false, describe(pod), nil
		}
		msg, err := stack.FailedScheduling(context.Background(), r.e.client, r.mode.namespace, p.name)
		if err != nil {
			return false, "", err
		}
		res.pendingReason = msg
		// Cardinal's run waits out a pod it should run; the plain run takes the scheduler's word.
		settled := msg != "" && (!r.mode.cardinal || p.want == wantPending)
		return settled, describe(pod) + " last FailedScheduling: " + msg, nil
	})
	return res
}

// completeInit ends the pod's running init containers in the fake runtime with exit code 0.
func (r *nodeRun) completeInit(pod *corev1.Pod) { completeInit(r.e, r.node.name, pod) }

// check compares a settled pod with what the scenario demands: in Cardinal's run, the outcome
// wanted, PodResources' devices equal to the assignment, the selector honoured and, where the
// policy demands it, exclusive CPUs on the cards' NUMA node; in either run, the NUMA node the
// scenario builds on.
func (r *nodeRun) check(t *testing.T, p tmPod, got result) result {
	t.Helper()
	where := fmt.Sprintf("%s run, node %s (%s, %s scope), pod %s", r.mode.name, r.node.name, r.node.policy, r.node.scope, p.name)
	if got.phase == corev1.PodFailed {
		msg := fmt.Sprintf("%s: Failed: %s: %s", where, got.reason, got.message)
		if r.mode.cardinal || p.cpuOnly {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
		return got
	}
	if r.mode.cardinal && !p.cpuOnly {
		switch {
		case p.want == wantRunning && got.phase != corev1.PodRunning:
			t.Errorf("%s: %s, want Running; last FailedScheduling: %q", where, got.phase, got.pendingReason)
		case p.want == wantPending && got.phase == corev1.PodRunning:
			t.Errorf("%s: Running, want Pending with the kubelet's reason", where)
		case p.want == wantPending && !strings.Contains(got.pendingReason, "kubelet"):
			t.Errorf("%s: Pending, but the FailedScheduling message does not name the kubelet's reason: %q", where, got.pendingReason)
		}
	}
	if got.phase != corev1.PodRunning {
		if got.pendingReason == "" {
			t.Errorf("%s: %s without a FailedScheduling reason", where, got.phase)
		}
		return got
	}
	switch {
	case r.mode.cardinal && p.reusesSubset:
		r.checkSubsetReuse(t, where, p)
	case r.mode.cardinal && !p.cpuOnly:
		r.e.truth(t, p.name) // PodResources devices = assignment = allocation record
	}
	ctrs := r.containers(t, p.name)
	var cardNUMA []int
	for _, c := range ctrs {
		cardNUMA = append(cardNUMA, c.cardNUMA...)
	}
	if p.cpuOnly {
		for _, c := range ctrs {
			cardNUMA = append(cardNUMA, c.cpuNM...) // a CPU-only pod's premise is where its CPUs are
		}
	}
	if p.numa >= 0 {
		for _, n := range cardNUMA {
			if n != p.numa {
				t.Errorf("%s: holds cards on NUMA %v; the scenario builds on the kubelet putting them on NUMA %d", where, cardNUMA, p.numa)
				break
			}
		}
	}
	if p.useCard >= 0 {
		uuid := r.card(p.useCard).UUID
		held := false
		for _, c := range ctrs {
			held = held || slices.Contains(c.uuids, uuid)
		}
		if !held {
			got.ignoredSelector = true
			if r.mode.cardinal {
				t.Errorf("%s: Running without the card its use-gpuuuid names (%s)", where, uuid)
			}
		}
	}
	if p.guaranteed {
		r.checkAlignment(t, where, ctrs)
	}
	return got
}

// checkSubsetReuse checks a pod whose app containers reuse part of its init container's cards
// (tmPod.reusesSubset).
func (r *nodeRun) checkSubsetReuse(t *testing.T, where string, p tmPod) {
	t.Helper()
	pod, err := r.e.client.CoreV1().Pods(r.mode.namespace).Get(ctx(t), p.name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", p.name, err)
	}
	a, err := annotations.DecodeAssignment(pod.Annotations[annotations.GPUAssignment])
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var pool []string
	for _, c := range a.Containers {
		if c.Init {
			pool = append(pool, c.IDs()...)
		}
	}
	devs, err := r.e.Devices(ctx(t), r.node.name)
	if err != nil {
		t.Fatalf("%v", err)
	}
	hs := map[string]held{}
	for _, c := range pod.Spec.Containers {
		got := devs[stack.ContainerRef{Namespace: r.mode.namespace, Pod: p.name, Container: c.Name}]
		ca := a.Container(c.Name)
		if ca == nil {
			t.Errorf("%s: container %s has no assignment", where, c.Name)
			continue
		}
		for _, id := range ca.IDs() {
			if !slices.Contains(pool, id) {
				t.Errorf("%s: container %s is assigned %s, not one of its init container's cards %v", where, c.Name, id, pool)
			}
		}
		if len(got) != len(ca.Devices) {
			t.Errorf("%s: container %s holds %v in PodResources, want %d devices", where, c.Name, got, len(ca.Devices))
		}
		for _, id := range got {
			if !slices.Contains(pool, id) {
				t.Errorf("%s: container %s holds %s, not one of its init container's cards %v", where, c.Name, id, pool)
			}
		}
		if !slices.Equal(got, slices.Sorted(slices.Values(ca.IDs()))) {
			t.Logf("%s: the kubelet gave %s %v of the init container's %v; the assignment named %v", where, c.Name, got, pool, ca.IDs())
		}
		hs[p.name+"/"+c.Name] = held{Node: r.node.name, IDs: got}
	}
	r.e.waitAllocationRecords(t, hs)
}

// ctrHolds is what PodResources says one container holds.
type ctrHolds struct {
	name            string
	uuids           []string
	cardNUMA, cpuNM []int // NUMA node of each card, of each exclusive CPU
	cpus            []int64
}

// containers reads the pod's containers from the node's PodResources.
func (r *nodeRun) containers(t *testing.T, pod string) []ctrHolds {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	resp, err := r.pr.List(c, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("pod resources of %s: %v", r.node.name, err)
	}
	m := r.e.Kubelets[r.node.name].Machine
	var out []ctrHolds
	for _, p := range resp.GetPodResources() {
		if p.GetNamespace() != r.mode.namespace || p.GetName() != pod {
			continue
		}
		for _, ct := range p.GetContainers() {
			h := ctrHolds{name: ct.GetName(), cpus: ct.GetCpuIds()}
			for _, d := range ct.GetDevices() {
				if d.GetResourceName() != string(r.e.Names.GPU) {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					uuid, _, err := annotations.ParseDeviceID(id)
					if err != nil {
						t.Fatalf("%s: %v", r.node.name, err)
					}
					card, ok := r.e.Card(uuid)
					if !ok {
						t.Fatalf("%s: device %s is no card of the stack", r.node.name, id)
					}
					h.uuids = append(h.uuids, uuid)
					h.cardNUMA = append(h.cardNUMA, card.NUMA)
				}
			}
			for _, cpu := range h.cpus {
				h.cpuNM = append(h.cpuNM, m.NUMANodeOf(int(cpu)))
			}
			out = append(out, h)
		}
	}
	return out
}

// checkAlignment checks a Running Guaranteed pod's exclusive CPUs against its cards: on one NUMA
// node per container (container scope) or for the whole pod (pod scope) where the policy demands
// it; logged otherwise.
func (r *nodeRun) checkAlignment(t *testing.T, where string, ctrs []ctrHolds) {
	t.Helper()
	numaSet := func(hs ...ctrHolds) []int {
		var all []int
		for _, h := range hs {
			all = append(all, h.cardNUMA...)
			all = append(all, h.cpuNM...)
		}
		slices.Sort(all)
		return slices.Compact(all)
	}
	report := func(what string, set []int, hs ...ctrHolds) {
		var b strings.Builder
		for _, h := range hs {
			fmt.Fprintf(&b, " %s: cards on NUMA %v, CPUs %v on NUMA %v;", h.name, h.cardNUMA, h.cpus, h.cpuNM)
		}
		msg := fmt.Sprintf("%s: %s spans NUMA nodes %v:%s", where, what, set, b.String())
		if r.node.demandsAlignment() && r.mode.cardinal {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
	}
	for _, h := range ctrs {
		if len(h.cpus) == 0 && len(h.uuids) > 0 && r.node.demandsAlignment() {
			t.Errorf("%s: container %s of a Guaranteed pod holds no exclusive CPUs (static CPU manager)", where, h.name)
		}
	}
	if r.node.scope == annotations.TopologyScopePod {
		if set := numaSet(ctrs...); len(set) > 1 {
			report("the pod", set, ctrs...)
		}
		return
	}
	for _, h := range ctrs {
		if set := numaSet(h); len(set) > 1 {
			report("container "+h.name, set, h)
		}
	}
}

// waitInventoryCPUs waits until the node's inventory reports, per NUMA node, the exclusive CPUs
// PodResources lists: the extender decides on what the plugin published, so each next pod must
// see the CPUs the previous ones took.
func (r *nodeRun) waitInventoryCPUs(t *testing.T) {
	t.Helper()
	m := r.e.Kubelets[r.node.name].Machine
	stack.Wait(t, runTimeout, "the inventory of "+r.node.name+" reporting PodResources' exclusive CPUs", func() (bool, string, error) {
		c, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		resp, err := r.pr.List(c, &podresourcesv1.ListPodResourcesRequest{})
		if err != nil {
			return false, err.Error(), nil
		}
		want := make([]int, m.NUMANodes)
		seen := map[int64]bool{}
		for _, p := range resp.GetPodResources() {
			for _, ct := range p.GetContainers() {
				for _, cpu := range ct.GetCpuIds() {
					if !seen[cpu] {
						seen[cpu] = true
						want[m.NUMANodeOf(int(cpu))]++
					}
				}
			}
		}
		inv, err := r.e.Inventory(c, r.node.name)
		if err != nil {
			return false, err.Error(), nil
		}
		if inv.Kubelet == nil {
			return false, "inventory has no kubelet field", nil
		}
		got := make([]int, m.NUMANodes)
		for _, n := range inv.Kubelet.NUMA {
			if n.ID < len(got) {
				got[n.ID] = n.ExclusiveCPUs
			}
		}
		return slices.Equal(got, want), fmt.Sprintf("inventory: exclusive CPUs per NUMA node %v, PodResources %v", got, want), nil
	})
}

// cleanup deletes the run's pods on the node and waits until they are gone (and, in Cardinal's
// run, until the inventory no longer counts their CPUs).
func (r *nodeRun) cleanup(t *testing.T) {
	t.Helper()
	r.deleteAll(t)
	if r.mode.cardinal {
		r.waitInventoryCPUs(t)
	}
}

// deleteAll deletes the run's pods on the node and waits until the API server has none left, but
// not for the inventory: what comes next is decided while the kubelet may still hold their CPUs.
func (r *nodeRun) deleteAll(t *testing.T) {
	t.Helper()
	sel := metav1.ListOptions{LabelSelector: topologyNodeLabel + "=" + r.node.name}
	pods := r.e.client.CoreV1().Pods(r.mode.namespace)
	c, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	if err := pods.DeleteCollection(c, metav1.DeleteOptions{}, sel); err != nil {
		t.Fatalf("delete pods on %s: %v", r.node.name, err)
	}
	stack.Wait(t, runTimeout, "the pods of "+r.node.name+" gone", func() (bool, string, error) {
		list, err := pods.List(context.Background(), sel)
		if err != nil {
			return false, "", err
		}
		return len(list.Items) == 0, fmt.Sprintf("%d pods left", len(list.Items)), nil
	})
}

// startTopologyStack starts the stack with one kubelet per node: the emulated 2-NUMA machine, the
// node's TopologyManager policy and scope, the static CPU manager with CPU 0 reserved, and checks
// that each node's inventory carries its kubelet's facts.
func startTopologyStack(t *testing.T, nodes []tmNode) *env {
	t.Helper()
	return startTopologyStackWith(t, nodes, nil)
}

// startTopologyStackWith is startTopologyStack whose kubelets run static pods: staticPods[node]
// are the node's manifests (file name -> YAML, see cluster.KubeletSpec.StaticPods).
func startTopologyStackWith(t *testing.T, nodes []tmNode, staticPods map[string]map[string]string) *env {
	t.Helper()
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	var specs []stack.NodeSpec
	for _, n := range nodes {
		specs = append(specs, stack.NodeSpec{Name: n.name, Shares: 1, Kubelet: cluster.KubeletSpec{
			Machine:               topologyMachine(),
			TopologyManagerPolicy: n.policy,
			TopologyManagerScope:  n.scope,
			CPUManagerPolicy:      annotations.CPUManagerPolicyStatic,
			ReservedCPUs:          "0",
			StaticPods:            staticPods[n.name],
		}})
	}
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries, SimFile: topologySim(t, nodes), Nodes: specs})
	e := &env{Stack: s, client: s.Cluster.Client}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	busy := map[string]bool{}
	for node, pods := range staticPods {
		busy[node] = len(pods) > 0
	}
	checkKubeletInventory(t, e, nodes, busy)
	return e
}

// podName is the name of a scenario pod on this run's node: the nodes share the namespace.
func (r *nodeRun) podName(name string) string {
	return strings.TrimPrefix(r.node.name, "tm-") + "-" + name
}

// deletePod deletes one scenario pod and waits until it is gone.
func (r *nodeRun) deletePod(t *testing.T, name string) {
	t.Helper()
	name = r.podName(name)
	pods := r.e.client.CoreV1().Pods(r.mode.namespace)
	c, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	if err := pods.Delete(c, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
	stack.Wait(t, runTimeout, "pod "+name+" gone", func() (bool, string, error) {
		_, err := pods.Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
	if r.mode.cardinal {
		r.waitInventoryCPUs(t)
	}
}

// freePort returns a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startPlainScheduler starts a second kube-scheduler with the default profile (default-scheduler)
// and no extender: plain Kubernetes, where nvidia.com/gpu is an extended resource like any other.
func startPlainScheduler(t *testing.T, c *cluster.Cluster) *cluster.Process {
	t.Helper()
	config := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" +
		"clientConnection:\n  kubeconfig: " + strconv.Quote(c.Kubeconfig) + "\nleaderElection:\n  leaderElect: false\n" +
		"profiles:\n- schedulerName: " + topologyPlainSchedulerName + "\n"
	path := filepath.Join(t.TempDir(), "plain-scheduler.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatalf("plain kube-scheduler config: %v", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("plain kube-scheduler: %v", err)
	}
	p := c.StartProcess(t, "kube-scheduler-plain", filepath.Join(cluster.BinDir(t), "kube-scheduler"),
		"--config="+path, "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--authentication-skip-lookup=true")
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed serving cert; only /readyz is read
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/readyz"
	stack.Wait(t, runTimeout, "plain kube-scheduler ready", func() (bool, string, error) {
		if exited, err := p.Exited(); exited {
			return false, "", fmt.Errorf("plain kube-scheduler exited (%w):\n%s", err, p.Tail(30))
		}
		resp, err := client.Get(url)
		if err != nil {
			return false, err.Error(), nil //nolint:nilerr // polling: not listening yet
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	return p
}
