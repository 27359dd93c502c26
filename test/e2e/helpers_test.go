package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/cluster"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// Timeouts of the scenarios; generous because the machine's two cores are shared.
const (
	runTimeout     = 90 * time.Second // a pod (or a burst) from creation to Running
	pendingTimeout = 60 * time.Second // a pod to be reported unschedulable
	apiTimeout     = 30 * time.Second
)

// namespace is where every scenario's pods live.
const namespace = "e2e"

// env is the shared stack plus the helpers the scenarios use.
type env struct {
	*stack.Stack
	client kubernetes.Interface
}

// startEnv starts the stack (o's Root and Bin filled in) with the scenarios' namespace.
func startEnv(t *testing.T, o stack.Options) *env {
	t.Helper()
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	o.Root, o.Bin = root, binaries
	s := stack.Start(t, o)
	e := &env{Stack: s, client: s.Cluster.Client}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return e
}

// ctx is a context bounded by apiTimeout for one API call or a short sequence of them.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), apiTimeout)
	t.Cleanup(cancel)
	return c
}

// gpu is what one container asks for: cards, and optionally MiB, percent of memory and cores per card.
type gpu struct {
	cards, memMiB, memPercent, cores int64
}

// ctr is a container asking for g; cpu and memory are tiny so every pod fits any kubelet.
func ctr(name string, g gpu) corev1.Container {
	limits := corev1.ResourceList{}
	names := annotations.DefaultResourceNames()
	set := func(n corev1.ResourceName, v int64) {
		if v > 0 {
			limits[n] = *resource.NewQuantity(v, resource.DecimalSI)
		}
	}
	set(names.GPU, g.cards)
	set(names.Mem, g.memMiB)
	set(names.MemPercentage, g.memPercent)
	set(names.Cores, g.cores)
	return corev1.Container{
		Name:  name,
		Image: "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("1Mi")},
			Limits:   limits,
		},
	}
}

// pod is a pod named name with the given annotations and containers; without containers it has
// one, "main", asking for one whole card.
func pod(name string, ann map[string]string, containers ...corev1.Container) *corev1.Pod {
	if len(containers) == 0 {
		containers = []corev1.Container{ctr("main", gpu{cards: 1})}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Annotations: ann},
		Spec: corev1.PodSpec{
			Containers:                    containers,
			TerminationGracePeriodSeconds: new(int64), // the fake runtime stops at once anyway
		},
	}
}

// create submits pods through the API server (and so through the webhook).
// cardsOf resolves the device IDs container ref holds on node to the stack's cards; an ID that
// names no card of that node fails the test.
func (e *env) cardsOf(t *testing.T, ref stack.ContainerRef, node string, ids []string) []stack.Card {
	t.Helper()
	var cards []stack.Card
	for _, id := range ids {
		uuid, _, err := annotations.ParseDeviceID(id)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		card, ok := e.Card(uuid)
		if !ok || card.Node != node {
			t.Fatalf("%s: device %s is no card of node %s", ref, id, node)
		}
		cards = append(cards, card)
	}
	return cards
}

func (e *env) create(t *testing.T, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if _, err := e.client.CoreV1().Pods(namespace).Create(ctx(t), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}
}

// get returns the pod as stored.
func (e *env) get(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := e.client.CoreV1().Pods(namespace).Get(ctx(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

// componentsAlive fails when a kubelet, device plugin, the extender or the webhook has exited.
func (e *env) componentsAlive() error {
	procs := []*cluster.Process{e.Extender, e.Webhook}
	for _, n := range slices.Sorted(maps.Keys(e.Kubelets)) {
		procs = append(procs, e.Kubelets[n].Process, e.Plugins[n])
	}
	for _, p := range procs {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited (%s); last lines of %s:\n%s", p.Name, fmt.Sprint(err), p.LogPath, p.Tail(30))
		}
	}
	return nil
}

// waitRunning waits until every named pod is Running; a pod that failed, or a component that
// exited, ends the wait at once.
func (e *env) waitRunning(t *testing.T, names ...string) {
	t.Helper()
	e.waitRunningWithin(t, runTimeout, names...)
}

// waitRunningWithin is waitRunning with its own timeout.
func (e *env) waitRunningWithin(t *testing.T, timeout time.Duration, names ...string) {
	t.Helper()
	stack.Wait(t, timeout, fmt.Sprintf("%d pods Running", len(names)), func() (bool, string, error) {
		if err := e.componentsAlive(); err != nil {
			return false, "", err
		}
		list, err := e.client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		byName := map[string]*corev1.Pod{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		var waiting []string
		for _, n := range names {
			p, ok := byName[n]
			switch {
			case !ok:
				return false, "", fmt.Errorf("pod %s is gone", n)
			case p.Status.Phase == corev1.PodFailed:
				return false, "", fmt.Errorf("pod %s failed: %s: %s", n, p.Status.Reason, p.Status.Message)
			case p.Status.Phase != corev1.PodRunning:
				waiting = append(waiting, fmt.Sprintf("%s (%s on %q%s)", n, p.Status.Phase, p.Spec.NodeName, lastSchedulingMessage(p)))
			}
		}
		if len(waiting) > 5 {
			waiting = append(waiting[:5], fmt.Sprintf("and %d more", len(waiting)-5))
		}
		return len(waiting) == 0, "waiting for " + strings.Join(waiting, ", "), nil
	})
}

// lastSchedulingMessage is ": <message>" of the pod's PodScheduled=False condition, or "".
func lastSchedulingMessage(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return ": " + c.Message
		}
	}
	return ""
}

// waitUnschedulable waits until the scheduler has reported the pod unschedulable and returns the
// message of its latest FailedScheduling event, the reasons `kubectl describe pod` shows.
func (e *env) waitUnschedulable(t *testing.T, name string) string {
	t.Helper()
	var msg string
	stack.Wait(t, pendingTimeout, "pod "+name+" reported unschedulable", func() (bool, string, error) {
		p, err := e.client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if p.Spec.NodeName != "" {
			return false, "", fmt.Errorf("pod %s was scheduled to %s", name, p.Spec.NodeName)
		}
		m, err := stack.FailedScheduling(context.Background(), e.client, namespace, name)
		if err != nil {
			return false, "", err
		}
		msg = m
		return m != "", "no FailedScheduling event yet", nil
	})
	return msg
}

// deleteAll deletes every pod of the namespace and waits until the kubelets have let them go.
func (e *env) deleteAll(t *testing.T) {
	t.Helper()
	if err := e.client.CoreV1().Pods(namespace).DeleteCollection(ctx(t), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete pods: %v", err)
	}
	stack.Wait(t, runTimeout, "every pod of "+namespace+" gone", func() (bool, string, error) {
		list, err := e.client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		return len(list.Items) == 0, fmt.Sprintf("%d pods left", len(list.Items)), nil
	})
}

// delete deletes one pod and waits until it is gone.
func (e *env) delete(t *testing.T, name string) {
	t.Helper()
	if err := e.client.CoreV1().Pods(namespace).Delete(ctx(t), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
	stack.Wait(t, runTimeout, "pod "+name+" gone", func() (bool, string, error) {
		_, err := e.client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
}

// held is what the truth says one container holds.
type held struct {
	Node string
	// IDs are the device IDs in the kubelet's PodResources record, sorted.
	IDs []string
	// Cards are the cards of those IDs, in the same order.
	Cards []stack.Card
	// Devices is the container's part of the extender's assignment.
	Devices []annotations.DeviceAssignment
}

// UUIDs returns the UUIDs of the cards held.
func (h held) UUIDs() []string {
	out := make([]string, len(h.Cards))
	for i, c := range h.Cards {
		out[i] = c.UUID
	}
	return out
}

// assignment is pod name and the extender's assignment on it, which must name the node the pod
// is bound to.
func (e *env) assignment(t *testing.T, name string) (*corev1.Pod, annotations.Assignment) {
	t.Helper()
	p := e.get(t, name)
	raw, ok := p.Annotations[annotations.GPUAssignment]
	if !ok {
		t.Fatalf("pod %s has no %s", name, annotations.GPUAssignment)
	}
	a, err := annotations.DecodeAssignment(raw)
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	if a.Node != p.Spec.NodeName {
		t.Errorf("pod %s: assignment names node %s, pod is bound to %s", name, a.Node, p.Spec.NodeName)
	}
	return p, a
}

// truth checks each named pod, container by container: the kubelet's PodResources devices equal
// the extender's assignment (node and device IDs), and the device plugin's allocation record
// agrees. It returns what each container holds, keyed "pod/container".
func (e *env) truth(t *testing.T, names ...string) map[string]held {
	t.Helper()
	out := map[string]held{}
	records := map[string]map[stack.ContainerRef][]string{} // node -> PodResources
	for _, name := range names {
		p, a := e.assignment(t, name)
		if records[a.Node] == nil {
			devs, err := e.Devices(ctx(t), a.Node)
			if err != nil {
				t.Fatalf("%v", err)
			}
			records[a.Node] = devs
		}
		for _, c := range p.Spec.Containers {
			ref := stack.ContainerRef{Namespace: namespace, Pod: name, Container: c.Name}
			got := records[a.Node][ref]
			ca := a.Container(c.Name)
			var want []string
			if ca != nil {
				want = slices.Sorted(slices.Values(ca.IDs()))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s on %s: PodResources devices differ from the assignment (-assigned +kubelet):\n%s", ref, a.Node, diff)
			}
			if ca == nil {
				continue
			}
			h := held{Node: a.Node, IDs: got, Devices: ca.Devices}
			h.Cards = e.cardsOf(t, ref, a.Node, got)
			out[name+"/"+c.Name] = h
		}
	}
	e.waitAllocationRecords(t, out)
	return out
}

// waitAllocationRecords waits until the device plugin's allocation record of every container in
// hs names the devices the kubelet gave it.
func (e *env) waitAllocationRecords(t *testing.T, hs map[string]held) {
	t.Helper()
	stack.Wait(t, runTimeout, "allocation records matching PodResources", func() (bool, string, error) {
		list, err := e.client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		recorded := map[string][]string{}
		for _, p := range list.Items {
			raw, ok := p.Annotations[annotations.GPUAllocated]
			if !ok {
				continue
			}
			a, err := annotations.DecodeAllocation(raw)
			if err != nil {
				return false, "", fmt.Errorf("pod %s: %w", p.Name, err)
			}
			for _, c := range a.Containers {
				recorded[p.Name+"/"+c.Name] = slices.Sorted(slices.Values(c.IDs))
			}
		}
		for _, key := range slices.Sorted(maps.Keys(hs)) {
			if !slices.Equal(recorded[key], hs[key].IDs) {
				return false, fmt.Sprintf("%s: recorded %v, kubelet gave %v", key, recorded[key], hs[key].IDs), nil
			}
		}
		return true, "", nil
	})
}

// noDoubleBooking checks one node's PodResources: no device ID is held by two containers, and on
// every card the assigned memory and cores of its holders fit the card.
func (e *env) noDoubleBooking(t *testing.T, node string) {
	t.Helper()
	devs, err := e.Devices(ctx(t), node)
	if err != nil {
		t.Fatalf("%v", err)
	}
	holder := map[string]stack.ContainerRef{}
	for ref, ids := range devs {
		for _, id := range ids {
			if other, dup := holder[id]; dup {
				t.Errorf("device %s on %s is held by %s and %s", id, node, other, ref)
			}
			holder[id] = ref
		}
	}
	type use struct {
		mem   int64
		cores int
	}
	used := map[string]use{}
	list, err := e.client.CoreV1().Pods(namespace).List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	for _, p := range list.Items {
		raw, ok := p.Annotations[annotations.GPUAssignment]
		if !ok || p.Spec.NodeName != node || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue // a finished pod holds nothing (one a finalizer keeps in the API, say)
		}
		a, err := annotations.DecodeAssignment(raw)
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		for _, c := range a.Containers {
			for _, d := range c.Devices {
				u := used[d.UUID]
				u.mem += d.MemoryMiB
				u.cores += d.Cores
				used[d.UUID] = u
			}
		}
	}
	uuids := slices.Collect(maps.Keys(used))
	sort.Strings(uuids)
	for _, uuid := range uuids {
		card, _ := e.Card(uuid)
		if u := used[uuid]; u.mem > card.MemoryMiB || u.cores > 100 {
			t.Errorf("card %s on %s is overbooked: %d MiB of %d, %d%% cores", uuid, node, u.mem, card.MemoryMiB, u.cores)
		}
	}
}

// names returns prefix-0 … prefix-(n-1).
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}
