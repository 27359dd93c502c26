// Package extender_test runs Cardinal's scheduler extender (in process) behind a real
// kube-scheduler and kube-apiserver (test/cluster): API-only nodes with different inventories, pods
// with each selector landing on the right node with the right cards recorded, an impossible pod
// left Pending with per-node reasons in its FailedScheduling event, and an extender restart in the
// middle that loses nothing.
package extender_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

const (
	profile = "cardinal-scheduler"
	timeout = 60 * time.Second
	ns      = "default"
	a100    = "NVIDIA A100-SXM4-80GB"
	a40     = "NVIDIA A40"
	t4      = "Tesla T4"
)

// schedulerConfig is the KubeSchedulerConfiguration the chart generates, pointed at url.
func schedulerConfig(url string) []byte {
	return fmt.Appendf(nil, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
profiles:
- schedulerName: %s
  percentageOfNodesToScore: 100
extenders:
- urlPrefix: %s
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 1
  nodeCacheCapable: true
  ignorable: false
  httpTimeout: 5s
  managedResources:
  - {name: nvidia.com/gpu, ignoredByScheduler: false}
  - {name: nvidia.com/gpumem, ignoredByScheduler: true}
  - {name: nvidia.com/gpumem-percentage, ignoredByScheduler: true}
  - {name: nvidia.com/gpucores, ignoredByScheduler: true}
`, profile, url)
}

type card struct {
	model   string
	memMiB  int64
	numa    int
	healthy bool
}

func uuid(node string, i int) string { return fmt.Sprintf("GPU-%s-%d", node, i) }

// addGPUNode creates an API-only node whose inventory lists cards (each shared by shares pods) and
// whose nvidia.com/gpu capacity is its number of device IDs, as the device plugin publishes them.
func addGPUNode(t *testing.T, c *cluster.Cluster, name string, shares int, cards ...card) {
	t.Helper()
	inv := annotations.Inventory{}
	for i, k := range cards {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: uuid(name, i), Index: i, Model: k.model, MemoryMiB: k.memMiB, NUMA: k.numa, Healthy: k.healthy, Shares: shares})
	}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	ids := int64(len(cards) * shares)
	c.AddNode(t, cluster.NodeSpec{Name: name, Annotations: map[string]string{annotations.GPUInventory: enc},
		Capacity: corev1.ResourceList{annotations.ResourceGPU: *resource.NewQuantity(ids, resource.DecimalSI)}})
}

// gpuPod is a pod of Cardinal's profile with one container asking the given resources.
func gpuPod(name string, ann map[string]string, res map[corev1.ResourceName]int64) *corev1.Pod {
	lim := corev1.ResourceList{}
	for k, v := range res {
		lim[k] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
		Spec: corev1.PodSpec{SchedulerName: profile, Containers: []corev1.Container{{
			Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Limits: lim}}}},
	}
}

// extender runs scheduler.Run in process on a fixed address, and can be restarted on it.
type extender struct {
	t      *testing.T
	c      *cluster.Cluster
	addr   string
	cancel context.CancelFunc
	done   chan error
}

func startExtender(t *testing.T, c *cluster.Cluster, addr string) *extender {
	t.Helper()
	return startExtenderWith(t, c, addr, nil)
}

// startExtenderWith is startExtender with the configuration changed by set (nil: the default).
func startExtenderWith(t *testing.T, c *cluster.Cluster, addr string, set func(*scheduler.Config)) *extender {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("extender listen: %v", err)
	}
	cfg := scheduler.DefaultConfig()
	cfg.Listener, cfg.RESTConfig, cfg.Log = ln, c.RESTConfig, testr.New(t)
	if set != nil {
		set(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &extender{t: t, c: c, addr: ln.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { e.done <- scheduler.Run(ctx, cfg) }()
	t.Cleanup(e.stop)
	cluster.WaitFor(t, timeout, "extender ready", func() (bool, error) {
		select {
		case err := <-e.done:
			return false, fmt.Errorf("extender stopped: %s", fmt.Sprint(err))
		default:
		}
		return httpOK("http://" + e.addr + "/readyz"), nil
	})
	return e
}

func (e *extender) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	if err := <-e.done; err != nil {
		e.t.Errorf("extender: %v", err)
	}
}

// assignment waits until the pod is bound and returns its node and assignment.
func assignment(t *testing.T, c *cluster.Cluster, name string) (string, annotations.Assignment) {
	t.Helper()
	var pod *corev1.Pod
	defer func() {
		if t.Failed() {
			logScheduling(t, c, name)
		}
	}()
	cluster.WaitFor(t, timeout, "pod "+name+" bound", func() (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return p.Spec.NodeName != "", nil
	})
	a, err := annotations.DecodeAssignment(pod.Annotations[annotations.GPUAssignment])
	if err != nil {
		t.Fatalf("pod %s bound to %s without a readable assignment: %v", name, pod.Spec.NodeName, err)
	}
	if a.Node != pod.Spec.NodeName {
		t.Fatalf("pod %s bound to %s, assignment says %s", name, pod.Spec.NodeName, a.Node)
	}
	return pod.Spec.NodeName, a
}

// logScheduling logs what kube-scheduler said of pod name: its PodScheduled condition and its
// events (the extender's refusals are in their messages), for a test that timed out waiting.
func logScheduling(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	ctx := context.Background()
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				t.Logf("pod %s: PodScheduled %s at %s: %s: %s", name, cond.Status, cond.LastTransitionTime.Format(time.RFC3339Nano), cond.Reason, cond.Message)
			}
		}
	}
	evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Logf("events of %s: %v", name, err)
		return
	}
	for _, e := range evs.Items {
		t.Logf("event of %s: %s ×%d (at %s, first %s, last %s): %s", name, e.Reason, max(e.Count, 1),
			e.EventTime.Format(time.RFC3339Nano), e.FirstTimestamp.Format(time.RFC3339Nano), e.LastTimestamp.Format(time.RFC3339Nano), e.Message)
	}
}

// allocate does the device plugin's part (there is no kubelet here): it records the assigned IDs as
// allocated, which ends the pod's containers being in flight.
func allocate(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	_, a := assignment(t, c, name)
	alloc := annotations.Allocation{Node: a.Node}
	for _, ca := range a.Containers {
		alloc.Containers = append(alloc.Containers, annotations.ContainerAllocation{Name: ca.Name, IDs: ca.IDs(), Source: annotations.SourceAllocate})
	}
	enc, err := annotations.EncodeAllocation(alloc)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotations.GPUAllocated: enc}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("record allocation of %s: %v", name, err)
	}
}

func ids(a annotations.Assignment) []string {
	var out []string
	for _, c := range a.Containers {
		out = append(out, c.IDs()...)
	}
	return out
}

func create(t *testing.T, c *cluster.Cluster, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if _, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}
}

// extenderAddr reserves a loopback address for the extender: kube-scheduler's configuration names it
// before the extender listens on it.
func extenderAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestExtenderWithRealScheduler(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	addr := extenderAddr(t)

	addGPUNode(t, c, "node-a100", 1,
		card{a100, 81920, 0, true}, card{a100, 81920, 0, true}, card{a100, 81920, 1, true}, card{a100, 81920, 1, true})
	addGPUNode(t, c, "node-a40", 4, card{a40, 46068, 0, true}, card{a40, 46068, 0, true})
	addGPUNode(t, c, "node-t4", 1, card{t4, 15360, 0, true}, card{t4, 15360, 0, false})

	ext := startExtender(t, c, addr)
	c.StartScheduler(t, schedulerConfig("http://"+addr))

	gpu, mem, cores := annotations.ResourceGPU, annotations.ResourceGPUMem, annotations.ResourceGPUCores
	create(t, c,
		gpuPod("a100-pair", map[string]string{annotations.UseGPUType: "A100", annotations.NUMABind: "true"}, map[corev1.ResourceName]int64{gpu: 2}),
		gpuPod("share", map[string]string{annotations.NoUseGPUType: "a100,t4"}, map[corev1.ResourceName]int64{gpu: 1, mem: 10000, cores: 30}),
		gpuPod("by-uuid", map[string]string{annotations.UseGPUUUID: uuid("node-t4", 0)}, map[corev1.ResourceName]int64{gpu: 1}),
		gpuPod("impossible", map[string]string{annotations.UseGPUType: "H100"}, map[corev1.ResourceName]int64{gpu: 1}),
	)

	// a100-pair: binpack puts the pair on the tighter NUMA node; both have 2, so NUMA 0.
	node, a := assignment(t, c, "a100-pair")
	if diff := cmp.Diff([]string{uuid("node-a100", 0), uuid("node-a100", 1)}, ids(a)); diff != "" || node != "node-a100" {
		t.Errorf("a100-pair on %s (-want +got IDs):\n%s", node, diff)
	}
	node, a = assignment(t, c, "share")
	want := annotations.Assignment{V: 1, Node: "node-a40", Containers: []annotations.ContainerAssignment{{Name: "main",
		Devices: []annotations.DeviceAssignment{{UUID: uuid("node-a40", 0), ID: uuid("node-a40", 0) + "::0", MemoryMiB: 10000, Cores: 30}}}}}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("share on %s (-want +got):\n%s", node, diff)
	}
	node, a = assignment(t, c, "by-uuid")
	if diff := cmp.Diff([]string{uuid("node-t4", 0)}, ids(a)); diff != "" || node != "node-t4" {
		t.Errorf("by-uuid on %s (-want +got IDs):\n%s", node, diff)
	}

	// The impossible pod stays Pending, and its FailedScheduling event says why, node by node.
	wantReasons := []string{
		"no card matches use-gputype=h100 (node has 4x NVIDIA A100-SXM4-80GB)",
		"no card matches use-gputype=h100 (node has 2x NVIDIA A40)",
		"no card matches use-gputype=h100 (node has 2x Tesla T4)",
	}
	var message string
	cluster.WaitFor(t, timeout, "FailedScheduling event of pod impossible", func() (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=impossible"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedScheduling" {
				message = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	for _, r := range wantReasons {
		if !strings.Contains(message, r) {
			t.Errorf("FailedScheduling message %q lacks %q", message, r)
		}
	}
	if p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), "impossible", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("impossible pod: bound to %q (%v)", p.Spec.NodeName, err)
	}

	// The device plugin would now allocate them; until it does, a pod of the same device count that
	// is not interchangeable (share-2 below asks more memory than share) would wait (DESIGN.md).
	for _, name := range []string{"a100-pair", "share", "by-uuid"} {
		allocate(t, c, name)
	}

	// Restart the extender: its new cache must rebuild every holding from the API server.
	ext.stop()
	startExtender(t, c, addr)
	// 2 A100s are left (NUMA 1): a pair fits there; a third A100 pod then finds none.
	create(t, c,
		gpuPod("a100-pair-2", map[string]string{annotations.UseGPUType: "A100"}, map[corev1.ResourceName]int64{gpu: 2}),
		gpuPod("share-2", map[string]string{annotations.NoUseGPUType: "a100,t4"}, map[corev1.ResourceName]int64{gpu: 1, mem: 40000, cores: 30}),
	)
	node, a = assignment(t, c, "a100-pair-2")
	if diff := cmp.Diff([]string{uuid("node-a100", 2), uuid("node-a100", 3)}, ids(a)); diff != "" || node != "node-a100" {
		t.Errorf("a100-pair-2 on %s (-want +got IDs):\n%s", node, diff)
	}
	// share-2 asks 40000 MiB: card 0 has 46068-10000 = 36068 left, so it goes to card 1.
	node, a = assignment(t, c, "share-2")
	if diff := cmp.Diff([]string{uuid("node-a40", 1) + "::0"}, ids(a)); diff != "" || node != "node-a40" {
		t.Errorf("share-2 on %s (-want +got IDs):\n%s", node, diff)
	}
	// The restarted cache counts what share and share-2 hold: card 0 has 46068-10000 = 36068 MiB
	// left, card 1 46068-40000 = 6068, so another 40000 MiB share fits nowhere. (The A100s are full
	// too, but kube-scheduler's own nvidia.com/gpu count already says so.)
	allocate(t, c, "share-2")
	create(t, c, gpuPod("share-3", map[string]string{annotations.NoUseGPUType: "a100,t4"}, map[corev1.ResourceName]int64{gpu: 1, mem: 40000, cores: 30}))
	last := ""
	wantReason := "needs 1 card with 40000 MiB, gpucores 30 and a free slot; 0 of 2 have"
	cluster.WaitFor(t, timeout, "FailedScheduling event of pod share-3", func() (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=share-3"})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
			if e.Reason == "FailedScheduling" && e.Message != last {
				last = e.Message
				t.Logf("share-3: %s", last)
			}
			return e.Reason == "FailedScheduling" && strings.Contains(e.Message, wantReason)
		}), nil
	})
	// No device ID was given twice across the restart.
	seen := map[string]string{}
	for _, name := range []string{"a100-pair", "share", "by-uuid", "a100-pair-2", "share-2"} {
		_, a := assignment(t, c, name)
		for _, id := range ids(a) {
			if other, dup := seen[id]; dup {
				t.Errorf("device %s given to %s and %s", id, other, name)
			}
			seen[id] = name
		}
	}
}

func httpOK(url string) bool {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
