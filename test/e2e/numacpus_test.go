package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// TestTopologyBursts is issue #21 item 3 end to end (benchmark S8): on real kubelets with the
// static CPU manager and single-numa-node (2 NUMA nodes x 8 CPUs, CPU 0 reserved: 7 and 8 CPUs for
// exclusive use; 4 cards each), pods are created at once, not one after the other settled, so the
// extender decides before the plugin writes the inventory again. Every pod must end Running or
// Pending with the kubelet's reason, none refused at admission, and every running container's
// PodResources devices equal to its assignment, its CPUs on its cards' NUMA node.
//
//   - burst: 6 pods of 1 card + 3 CPUs: room for 2 on each NUMA node: 4 Running, 2 Pending;
//   - deletes: the same burst right after deleting the first one's pods (the kubelet frees their
//     CPUs at its next admission or reconcile, the inventory a moment later);
//   - init containers: a pod whose init container takes 1 card and 6 CPUs and app container 1
//     card and 2 CPUs holds 6 CPUs on NUMA 0 for its life (PodResources lists 2); a pod of 1 card + 4 CPUs
//     created at once after it must go to NUMA 1.
func TestTopologyBursts(t *testing.T) {
	started := time.Now()
	nodes := []tmNode{
		{"tm-single", annotations.TopologyPolicySingleNUMANode, annotations.TopologyScopeContainer},
		{"tm-single-pod", annotations.TopologyPolicySingleNUMANode, annotations.TopologyScopePod},
	}
	e := startTopologyStack(t, nodes)
	y := &tally{}
	for _, n := range nodes {
		t.Run(n.name, func(t *testing.T) {
			t.Parallel()
			r := newNodeRun(t, e, modeCardinal, n, y)
			burst := func(prefix string) []tmPod {
				var pods []tmPod
				for i := range 6 {
					pods = append(pods, tmPod{name: fmt.Sprintf("%s-%d", prefix, i), guaranteed: true, useCard: -1,
						ctrs: []tmCtr{{name: "main", cards: 1, cpus: 3}}, numa: anyNUMA})
				}
				return pods
			}
			t.Run("burst", func(t *testing.T) {
				r.burst(t, burst("burst"), 4)
			})
			t.Run("deletes", func(t *testing.T) {
				t.Cleanup(func() { r.cleanup(t) })
				r.deleteAll(t) // the burst's pods; the next burst is created at once
				r.burst(t, burst("again"), 4)
			})
			t.Run("init containers", func(t *testing.T) {
				t.Cleanup(func() { r.cleanup(t) })
				r.burst(t, []tmPod{
					{name: "init-hold", guaranteed: true, useCard: -1, init: []tmCtr{{name: "init", cards: 1, cpus: 6}},
						ctrs: []tmCtr{{name: "main", cards: 1, cpus: 2}}, numa: 0},
				}, 1)
				// Created right after the first was bound: the inventory may not list it yet.
				r.burst(t, []tmPod{
					{name: "after-init", guaranteed: true, useCard: -1, ctrs: []tmCtr{{name: "main", cards: 1, cpus: 4}}, numa: 1},
				}, 1)
			})
		})
	}
	t.Cleanup(func() {
		refused := 0
		for _, res := range y.results[modeCardinal.name] {
			if res.refused() {
				refused++
			}
		}
		t.Logf("TestTopologyBursts: %d pods, %d refused at admission; took %s", len(y.results[modeCardinal.name]), refused, time.Since(started).Round(time.Second))
	})
}

// burst creates the pods at once and waits until running of them are Running and the others
// Pending with a FailedScheduling reason; no pod may fail. Each pod is then checked as in the
// topology suite (PodResources devices equal to the assignment, CPUs aligned with the cards, the
// NUMA node the scenario names).
func (r *nodeRun) burst(t *testing.T, pods []tmPod, running int) {
	t.Helper()
	client := r.e.client.CoreV1().Pods(r.mode.namespace)
	for i := range pods {
		pods[i].name = r.podName(pods[i].name)
		c, cancel := context.WithTimeout(context.Background(), apiTimeout)
		_, err := client.Create(c, r.object(pods[i]), metav1.CreateOptions{})
		cancel()
		if err != nil {
			t.Fatalf("%s: create pod %s: %v", r.node.name, pods[i].name, err)
		}
	}
	got := make([]result, len(pods))
	stack.Wait(t, runTimeout, fmt.Sprintf("%d of %d pods on %s Running, the others Pending with a reason", running, len(pods), r.node.name), func() (bool, string, error) {
		if err := r.e.componentsAlive(); err != nil {
			return false, "", err
		}
		run, pending := 0, 0
		var states []string
		for i, p := range pods {
			pod, err := client.Get(context.Background(), p.name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			res := result{node: r.node.name, pod: p.name, phase: pod.Status.Phase, reason: pod.Status.Reason, message: pod.Status.Message}
			switch {
			case pod.Status.Phase == corev1.PodFailed:
				return false, "", fmt.Errorf("pod %s Failed: %s: %s", p.name, pod.Status.Reason, pod.Status.Message)
			case pod.Status.Phase == corev1.PodRunning:
				run++
			case pod.Spec.NodeName == "":
				msg, err := stack.FailedScheduling(context.Background(), r.e.client, r.mode.namespace, p.name)
				if err != nil {
					return false, "", err
				}
				res.pendingReason = msg
				if msg != "" {
					pending++
				}
			default:
				if len(p.init) > 0 {
					r.completeInit(pod)
				}
			}
			got[i] = res
			states = append(states, fmt.Sprintf("%s %s %q", p.name, describe(pod), res.pendingReason))
		}
		return run == running && pending == len(pods)-running, strings.Join(states, "; "), nil
	})
	for i, p := range pods {
		got[i].scenario = "burst"
		if got[i].phase == corev1.PodRunning {
			p.want = wantRunning
		} else {
			p.want = wantPending
			// The extender's reason is the kubelet's refusal (no NUMA node with a card and the
			// CPUs), not a wait: the wait ends once the kubelet's counts are known.
			if !strings.Contains(got[i].pendingReason, r.node.policy) {
				t.Errorf("%s: pod %s Pending with %q, want the kubelet's %s refusal", r.node.name, p.name, got[i].pendingReason, r.node.policy)
			}
		}
		r.tally.add(r.mode.name, r.check(t, p, got[i]))
	}
}
