package scenario

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// S3Config sizes S3: Pods pods of GPUsPerPod cards each, created at once onto Nodes nodes of
// GPUsPerNode cards.
type S3Config struct {
	Nodes       int
	GPUsPerNode int
	Pods        int
	GPUsPerPod  int
	// Idle is how long the scenario waits without a new binding before it stops waiting.
	Idle time.Duration
}

// Fitting is how many of the pods the cards can hold: min(Pods, Nodes×⌊GPUsPerNode/GPUsPerPod⌋).
func (c S3Config) Fitting() int {
	return min(c.Pods, c.Nodes*(c.GPUsPerNode/c.GPUsPerPod))
}

// S3Result is one run of S3.
type S3Result struct {
	Pods, Fitting, Bound int
	// AllBound is the time from the first create to the last of the Fitting pods bound.
	AllBound time.Duration
	// BindErrors counts the extender's GPUBindFailed events and kube-scheduler's FailedScheduling
	// events about a failed bind.
	BindErrors int
	// Unschedulable counts the other FailedScheduling events (pods that do not fit, expected when
	// Pods > Fitting).
	Unschedulable int
	// DoubleBooked counts cards assigned to more than one bound pod (must be 0).
	DoubleBooked int
}

// S3 runs S3 of BENCHMARKS.md through Cardinal (webhook, extender, the chart's scheduler profile):
// cfg.Pods multi-GPU pods created at once by as many clients. With the shared/BENCHMARKS.md sizes
// (64 pods × 2 cards onto 8 nodes × 8 cards) only 32 pods fit; the others must stay pending.
func S3(t cluster.TB, cfg S3Config) S3Result {
	t.Helper()
	b := startBed(t)
	if err := b.addNodes(cfg.Nodes, cfg.GPUsPerNode, nil); err != nil {
		t.Fatalf("nodes: %v", err)
	}
	b.startWebhook(t)
	url := b.startExtender(t, nil, nil)
	b.startKubeScheduler(t, "kube-scheduler-cardinal", chartSchedulerConfig(t, url))
	w, err := watchBindings(b.fast)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer w.stop()

	res := S3Result{Pods: cfg.Pods, Fitting: cfg.Fitting()}
	start := time.Now()
	if _, err := b.createPods(cfg.Pods, cfg.Pods, func(i int) *corev1.Pod { return gpuPod("s3-"+itoa(i), "", cfg.GPUsPerPod) }); err != nil {
		t.Fatalf("%v", err)
	}
	res.Bound = w.waitBound(res.Fitting, cfg.Idle)
	times := w.boundTimes()
	if len(times) > 0 {
		res.AllBound = times[len(times)-1].Sub(start)
	}
	if res.Bound < res.Fitting {
		t.Fatalf("S3: %d of the %d pods that fit were bound; nothing new bound for %s", res.Bound, res.Fitting, cfg.Idle)
	}

	ctx := context.Background()
	events, err := b.fast.CoreV1().Events(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	for _, e := range events.Items {
		switch {
		case e.Reason == scheduler.EventBindFailed:
			res.BindErrors += int(max(e.Count, 1))
		case e.Reason == "FailedScheduling" && strings.Contains(strings.ToLower(e.Message), "bind"):
			res.BindErrors += int(max(e.Count, 1))
		case e.Reason == "FailedScheduling":
			res.Unschedulable += int(max(e.Count, 1))
		}
	}
	pods, err := b.fast.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("pods: %v", err)
	}
	res.DoubleBooked = doubleBooked(pods.Items)
	t.Logf("S3: %d of %d pods bound (%d fit) in %s; %d bind errors, %d unschedulable events, %d double-booked cards",
		res.Bound, res.Pods, res.Fitting, res.AllBound.Round(time.Millisecond), res.BindErrors, res.Unschedulable, res.DoubleBooked)
	return res
}

// doubleBooked counts the cards that the assignments of more than one bound pod name.
func doubleBooked(pods []corev1.Pod) int {
	holders := map[string]int{}
	for i := range pods {
		p := &pods[i]
		raw, ok := p.Annotations[annotations.GPUAssignment]
		if p.Spec.NodeName == "" || !ok {
			continue
		}
		a, err := annotations.DecodeAssignment(raw)
		if err != nil {
			continue
		}
		for _, c := range a.Containers {
			for _, d := range c.Devices {
				holders[d.UUID]++
			}
		}
	}
	n := 0
	for _, h := range holders {
		if h > 1 {
			n++
		}
	}
	return n
}
