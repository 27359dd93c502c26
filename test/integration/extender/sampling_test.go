package extender_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

const exactProfile = "cardinal-scheduler-exact"

// twoProfiles is the chart's KubeSchedulerConfiguration shape with its two profiles: profile samples
// nodes, exactProfile scores every node. The sampling profile's percentage is 10, what
// kube-scheduler's adaptive default gives 5000 nodes; on the test's 300 nodes that is its minimum
// sample of 100 nodes, a third of the cluster. The extender
// answers preemption, as in the chart: without its preempt verb, kube-scheduler's preemption would
// nominate a node refused for a cordon with no victims (the refusal is not unresolvable), and retry
// at once. Backoff as kube-scheduler's defaults (1 s, at most 10 s).
func twoProfiles(url string) []byte {
	return fmt.Appendf(nil, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: %s
  percentageOfNodesToScore: 10
- schedulerName: %s
  percentageOfNodesToScore: 100
extenders:
- urlPrefix: %s
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  preemptVerb: preempt
  weight: 25
  nodeCacheCapable: true
  ignorable: false
  httpTimeout: 5s
  managedResources:
  - {name: nvidia.com/gpu, ignoredByScheduler: false}
`, profile, exactProfile, url)
}

// Issue 39: the only node that can take a pod is outside kube-scheduler's sample.
//
// 300 API-only nodes. kube-scheduler samples 100 of them (twoProfiles): it asks the extender about
// the next 100 nodes its own filters pass, starting where its last attempt stopped. 298 nodes have
// one A40 shared two ways, so they advertise 2 nvidia.com/gpu: kube-scheduler's resource fit counts
// them free for a pod asking 2 cards, which Cardinal refuses (one card), with the same reason on every
// node. node-200 has two A40s; node-100 one A100.
//
// First a pod asking an A100, of the exact profile: every node is filtered, so it lands on node-100
// at its first attempt. Then, eight times over, a pod asking 2 cards, of the sampling profile, is
// created, lands on node-200 and is deleted. Most first attempts sample 100 nodes without node-200.
// The extender's refusals then note the miss and its number, so the message kube-scheduler writes
// into the pod's PodScheduled condition changes, kube-scheduler requeues the pod on that update, and
// the next attempt samples the next nodes. Without the note, the second attempt's message equals the
// first's, nothing requeues the pod, and it waits for the next cluster event, which never comes
// here: the test times out.
func TestFewFittingNodesOutsideTheSample(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	addr := extenderAddr(t)

	// kube-scheduler and the extender start first: kube-scheduler then lists the nodes in the order
	// they are created (its node tree), which the samples below follow.
	startExtenderWith(t, c, addr, func(cfg *scheduler.Config) { cfg.ExactSchedulerName = exactProfile })
	c.StartScheduler(t, twoProfiles("http://"+addr))
	const nodes = 300
	for i := range nodes {
		name := fmt.Sprintf("node-%03d", i)
		cards, shares := []card{{a40, 46068, 0, true}}, 2
		switch i {
		case 100:
			cards, shares = []card{{a100, 81920, 0, true}}, 1
		case 200:
			cards, shares = []card{{a40, 46068, 0, true}, {a40, 46068, 0, true}}, 1
		}
		addGPUNode(t, c, name, shares, cards...)
	}
	// Both caches have every node before the first pod.
	cluster.WaitFor(t, timeout, "kube-scheduler and the extender see every node", func() (bool, error) {
		return extenderKnows(addr, fmt.Sprintf("node-%03d", nodes-1)), nil
	})
	time.Sleep(time.Second) // kube-scheduler's informer, which has no such probe

	a100pod := gpuPod("a100", map[string]string{annotations.UseGPUType: "A100"}, map[corev1.ResourceName]int64{annotations.ResourceGPU: 1})
	a100pod.Spec.SchedulerName = exactProfile
	create(t, c, a100pod)
	if node, _ := assignment(t, c, "a100"); node != "node-100" {
		t.Errorf("a100 bound to %s, want node-100", node)
	}
	if n := failedScheduling(t, c, "a100"); n != 0 {
		t.Errorf("the exact profile's pod failed %d attempts first; it filters every node", n)
	}

	for k := range 8 {
		name := fmt.Sprintf("whole-%d", k)
		start := time.Now()
		create(t, c, gpuPod(name, nil, map[corev1.ResourceName]int64{annotations.ResourceGPU: 2}))
		node, _ := assignment(t, c, name)
		if node != "node-200" {
			t.Errorf("%s bound to %s, want node-200, the only node with two cards", name, node)
		}
		took := time.Since(start)
		t.Logf("%s on %s after %v", name, node, took.Round(time.Millisecond))
		if took > time.Second {
			logScheduling(t, c, name)
		}
		if err := c.Client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		cluster.WaitFor(t, timeout, name+" gone", func() (bool, error) {
			_, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
	pacedMisses(t, c)
	events, answers := sampleMisses(t, c)
	t.Logf("FailedScheduling events reporting a sample miss: %d, for %d filter answers", events, answers)
	if events == 0 {
		t.Errorf("no pod's sample missed: the test no longer builds the case it is for (fitting nodes outside the first sample)")
	}
}

// pacedMisses: the fast misses can all be spent in a moment while kube-scheduler's own filters refuse
// the node that fits (in CI, for a few hundred ms after a deletion its queue had seen and its cache
// had not; here, for as long as a pod there holds the host port the next pod asks, which the extender
// does not replay). The extender then answers errors, which kube-scheduler retries after its backoff
// (1, 2, 4 s) without any cluster event, each sampling where the last stopped. 300 nodes in samples
// of 100: 5 fast misses, then 3 paced. Without the paced misses the pod is parked after the fifth,
// and the last paced miss never comes.
func pacedMisses(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	port := []corev1.ContainerPort{{ContainerPort: 9000, HostPort: 9000}}
	holder := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "port-holder", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: "node-200", Containers: []corev1.Container{{
			Name: "main", Image: "registry.k8s.io/pause:3.10", Ports: port}}},
	}
	create(t, c, holder)
	time.Sleep(time.Second) // kube-scheduler's informer
	ported := gpuPod("ported", nil, map[corev1.ResourceName]int64{annotations.ResourceGPU: 2})
	ported.Spec.Containers[0].Ports = port
	start := time.Now()
	create(t, c, ported)
	const last = "trying another sample after kube-scheduler's backoff, miss 8 of at most 8"
	ok := false
	defer func() {
		if !ok {
			logScheduling(t, c, "ported")
		}
	}()
	cluster.WaitFor(t, timeout, "the pod's last paced miss", func() (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedScheduling,involvedObject.name=ported"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, last) {
				return true, nil
			}
		}
		return false, nil
	})
	ok = true
	t.Logf("ported: last paced miss after %v", time.Since(start).Round(time.Millisecond))
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "ported", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("ported: bound to %q (%v) while node-200's host port is held", p.Spec.NodeName, err)
	}
	for _, name := range []string{"ported", "port-holder"} {
		if err := c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
}

// sampleMisses counts the FailedScheduling events of the test's pods that report a sample miss, and
// the extender's answers (the same number, read from the events' count).
func sampleMisses(t *testing.T, c *cluster.Cluster) (events, answers int) {
	t.Helper()
	evs, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if strings.Contains(e.Message, "outside the sample fit") {
			events++
			answers += int(max(e.Count, 1))
		}
	}
	return events, answers
}

// failedScheduling counts the FailedScheduling events of pod name.
func failedScheduling(t *testing.T, c *cluster.Cluster, name string) int {
	t.Helper()
	evs, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=FailedScheduling,involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return len(evs.Items)
}

// extenderKnows reports whether the extender's metrics name node (nodes come in creation order).
func extenderKnows(addr, node string) bool {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false
	}
	return strings.Contains(string(b), `node="`+node+`"`)
}
