package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// TestCPUOnlyPods is issue #26's routing end to end, with the chart's webhook.cpuOnlyPods on (its
// default selector: namespaces labelled cardinal.io/cpu-pods=route), binpack, two nodes of whole
// cards:
//
//   - a CPU-only pod of a routed namespace gets Cardinal's scheduler and cardinal.io/host: 0, the
//     extender decides it (its filter counter moves) and puts it beside the GPU pod already running
//     (binpack: the fuller node), where it Runs with no assignment;
//   - one of a namespace not labelled is untouched (the default scheduler's);
//   - with the extender down, a routed pod still Runs (its extender entry is ignorable and does not
//     bind); with the webhook down, a CPU-only pod is admitted unrouted (failurePolicy Ignore);
//   - with the opt-in off again (helm upgrade), a pod of the labelled namespace is untouched.
func TestCPUOnlyPods(t *testing.T) {
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries,
		Nodes:       []stack.NodeSpec{{Name: nodeA, Shares: 1}, {Name: nodeC, Shares: 1}},
		ChartValues: map[string]any{"webhook": map[string]any{"cpuOnlyPods": map[string]any{"enabled": true}}}})
	client := s.Cluster.Client
	const routedNS, plainNS = "cpu-routed", "cpu-plain"
	for ns, labels := range map[string]map[string]string{routedNS: {"cardinal.io/cpu-pods": "route"}, plainNS: nil} {
		if _, err := client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	create := func(ns string, p *corev1.Pod) *corev1.Pod {
		t.Helper()
		p.Namespace = ns
		got, err := client.CoreV1().Pods(ns).Create(ctx(t), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod %s/%s: %v", ns, p.Name, err)
		}
		return got
	}
	routed := func(p *corev1.Pod) {
		t.Helper()
		q, named := p.Spec.Containers[0].Resources.Limits[annotations.ResourceHostRoute]
		if p.Spec.SchedulerName != "cardinal-scheduler" || !named || !q.IsZero() {
			t.Fatalf("pod %s: schedulerName %q, %s %v (named %v); want cardinal-scheduler and 0", p.Name, p.Spec.SchedulerName, annotations.ResourceHostRoute, q.String(), named)
		}
	}
	untouched := func(p *corev1.Pod) {
		t.Helper()
		want := cpuOnly(p.Name).Spec.Containers[0].Resources
		if diff := cmp.Diff(want, p.Spec.Containers[0].Resources); diff != "" || p.Spec.SchedulerName != corev1.DefaultSchedulerName {
			t.Errorf("pod %s: schedulerName %q, resources changed (-sent +stored):\n%s", p.Name, p.Spec.SchedulerName, diff)
		}
	}

	// A GPU pod first: binpack then prefers its node for the CPU-only pod (1 of its cards used, none
	// on the other).
	gpuPod := create(routedNS, pod("train", nil))
	gpuNode := waitRunningIn(t, s, routedNS, gpuPod.Name)
	before := filterDecisions(t, s)
	web := create(routedNS, cpuOnly("web"))
	routed(web)
	if node := waitRunningIn(t, s, routedNS, web.Name); node != gpuNode {
		t.Errorf("web runs on %s, want %s beside the GPU pod (binpack)", node, gpuNode)
	}
	if after := filterDecisions(t, s); after <= before {
		t.Errorf("the extender's filter decided %v pods before web and %v after; want it to decide web", before, after)
	}
	if got := getPod(t, s, routedNS, web.Name); got.Annotations[annotations.GPUAssignment] != "" {
		t.Errorf("web carries an assignment: %s", got.Annotations[annotations.GPUAssignment])
	}

	untouched(create(plainNS, cpuOnly("elsewhere")))

	// The extender down: the routed pod schedules without it.
	if err := stack.Kill(s.Extender); err != nil {
		t.Fatal(err)
	}
	down := create(routedNS, cpuOnly("web-extender-down"))
	routed(down)
	waitRunningIn(t, s, routedNS, down.Name)
	s.Extender.Restart(t)
	s.WaitHTTP(t, s.Extender, s.ExtenderURL+"/readyz")

	// The webhook down: admitted, unrouted.
	if err := stack.Kill(s.Webhook); err != nil {
		t.Fatal(err)
	}
	untouched(create(routedNS, cpuOnly("web-webhook-down")))
	s.Webhook.Restart(t)

	// The opt-in off: the labelled namespace's pods are the default scheduler's again.
	s.HelmUpgrade(t, "webhook.cpuOnlyPods.enabled=false")
	stack.Wait(t, apiTimeout, "the API server to drop the routing webhook", func() (bool, string, error) {
		p, err := client.CoreV1().Pods(routedNS).Create(context.Background(), cpuOnly("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, "", err
		}
		return p.Spec.SchedulerName == corev1.DefaultSchedulerName, "still routed", nil
	})
	untouched(create(routedNS, cpuOnly("web-opt-in-off")))
}

// cpuOnly is a pod asking for CPU and memory only.
func cpuOnly(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("8Mi")}}}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

func getPod(t *testing.T, s *stack.Stack, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := s.Cluster.Client.CoreV1().Pods(ns).Get(ctx(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return p
}

// waitRunningIn waits until pod ns/name is Running and returns its node; it reads no component's
// health, so it serves while the extender is down.
func waitRunningIn(t *testing.T, s *stack.Stack, ns, name string) string {
	t.Helper()
	var node string
	stack.Wait(t, runTimeout, "pod "+ns+"/"+name+" Running", func() (bool, string, error) {
		p, err := s.Cluster.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if p.Status.Phase == corev1.PodFailed {
			return false, "", fmt.Errorf("pod %s failed: %s: %s", name, p.Status.Reason, p.Status.Message)
		}
		node = p.Spec.NodeName
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s on %q%s", p.Status.Phase, node, lastSchedulingMessage(p)), nil
	})
	return node
}

// filterDecisions reads the extender's cardinal_extender_requests_total{verb="filter",outcome="ok"}:
// the filter calls it decided (not passed through).
func filterDecisions(t *testing.T, s *stack.Stack) float64 {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(s.ExtenderURL + "/metrics")
	if err != nil {
		t.Fatalf("extender metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cardinal_extender_requests_total{") || !strings.Contains(line, `verb="filter"`) || !strings.Contains(line, `outcome="ok"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		return v
	}
	return 0
}
