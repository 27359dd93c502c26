package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// lingerFinalizer keeps a victim in the API, being deleted, until the test lets it go: the fake
// runtime stops containers at once whatever the grace period, so this is how a victim with a grace
// period stays terminating while kube-scheduler runs more scheduling cycles for its preemptor.
const lingerFinalizer = "e2e.cardinal.io/linger"

// lingerFor is how long a lingering victim stays terminating: past kube-scheduler's first
// backoffs (1 s, 2 s), so its preemptor goes through more cycles while its victims leave.
const lingerFor = 4 * time.Second

// TestPreemptionRepeated (issue 33 item 6): two nodes of 2 A100s, each full of low-priority 1-card
// pods; a high-priority 2-card pod preempts. kube-scheduler calls the preempt verb again in every
// cycle that finds no node, also while the first victims terminate; the extender must never offer
// the other node's pods then. Ten rounds on fresh pods (kube-scheduler 1.34 preempts
// asynchronously), the odd ones with victims that have a grace period and linger: every round
// evicts exactly 2 pods, both from the node the preemptor runs on.
func TestPreemptionRepeated(t *testing.T) {
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	nodes := []string{"rep-1", "rep-2"}
	sim := "nodes:\n"
	for _, n := range nodes {
		sim += fmt.Sprintf("  %s:\n    - {model: \"NVIDIA A100-SXM4-80GB\", memoryMiB: 81920, numa: 0, count: 2}\n", n)
	}
	simPath := filepath.Join(t.TempDir(), "two-a100s.yaml")
	if err := os.WriteFile(simPath, []byte(sim), 0o644); err != nil {
		t.Fatalf("simulation file: %v", err)
	}
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries, SimFile: simPath,
		Nodes: []stack.NodeSpec{{Name: nodes[0], Shares: 1}, {Name: nodes[1], Shares: 1}}})
	e := &env{Stack: s, client: s.Cluster.Client}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	for name, value := range map[string]int32{prioLow: 100, prioHigh: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := e.client.SchedulingV1().PriorityClasses().Create(ctx(t), pc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create PriorityClass %s: %v", name, err)
		}
	}
	const rounds = 10
	failed := 0
	for round := range rounds {
		linger := round%2 == 1
		ok := t.Run(fmt.Sprintf("round %d linger=%v", round, linger), func(t *testing.T) {
			lows := names(fmt.Sprintf("low%d", round), 4)
			t.Cleanup(func() { e.releaseLingering(t, lows); e.deleteAll(t) })
			for _, name := range lows {
				p := withPriority(pod(name, nil, ctr("main", gpu{cards: 1})), prioLow)
				if linger {
					grace := int64(30)
					p.Spec.TerminationGracePeriodSeconds = &grace
					p.Finalizers = []string{lingerFinalizer}
				}
				e.create(t, p)
			}
			e.waitRunning(t, lows...)
			if linger {
				stop := e.lingerVictims(t, lows)
				defer stop()
			}
			hi := withPriority(pod(fmt.Sprintf("hi%d", round), nil, ctr("main", gpu{cards: 2})), prioHigh)
			calls := preemptCalls(t, s)
			start := time.Now()
			e.create(t, hi)
			e.waitRunning(t, hi.Name)
			node := e.get(t, hi.Name).Spec.NodeName
			victims := e.gone(t, lows...)
			t.Logf("%s ran on %s after %s; preempted %v; the preempt verb answered %v calls", hi.Name, node,
				time.Since(start).Round(100*time.Millisecond), victims, preemptCalls(t, s)-calls)
			if len(victims) != 2 {
				t.Errorf("%s preempted %v, want exactly 2 pods (the minimum)", hi.Name, victims)
			}
			for _, v := range victims {
				if p, err := e.client.CoreV1().Pods(namespace).Get(ctx(t), v, metav1.GetOptions{}); err == nil && p.Spec.NodeName != node {
					t.Errorf("victim %s was on %s, the preemptor runs on %s", v, p.Spec.NodeName, node)
				}
			}
			e.noDoubleBooking(t, node)
		})
		if !ok {
			failed++
		}
	}
	t.Logf("%d of %d rounds evicted more than the minimum or failed", failed, rounds)
}

// preemptCalls reads the extender's cardinal_extender_requests_total{verb="preempt"}, all outcomes.
func preemptCalls(t *testing.T, s *stack.Stack) float64 {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(s.ExtenderMetricsURL())
	if err != nil {
		t.Fatalf("extender metrics: %v", err)
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cardinal_extender_requests_total{") || !strings.Contains(line, `verb="preempt"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		total += v
	}
	return total
}

// lingerVictims lets each pod of names that is being deleted go lingerFor after it started going
// (removes lingerFinalizer); the returned stop ends the watch.
func (e *env) lingerVictims(t *testing.T, names []string) (stop func()) {
	c, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		seen := map[string]time.Time{}
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-c.Done():
				return
			case <-tick.C:
			}
			for _, n := range names {
				p, err := e.client.CoreV1().Pods(namespace).Get(c, n, metav1.GetOptions{})
				if err != nil || p.DeletionTimestamp == nil || len(p.Finalizers) == 0 {
					continue
				}
				if _, ok := seen[n]; !ok {
					seen[n] = time.Now()
				}
				if time.Since(seen[n]) >= lingerFor {
					_ = e.unlinger(c, n) // a failure is retried at the next tick; cleanup releases the rest
				}
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// releaseLingering removes lingerFinalizer from every pod of names that still has it.
func (e *env) releaseLingering(t *testing.T, names []string) {
	t.Helper()
	for _, n := range names {
		if err := e.unlinger(ctx(t), n); err != nil {
			t.Errorf("release %s: %v", n, err)
		}
	}
}

func (e *env) unlinger(c context.Context, name string) error {
	_, err := e.client.CoreV1().Pods(namespace).Patch(c, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
