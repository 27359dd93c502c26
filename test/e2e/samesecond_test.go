package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/cluster"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// TestSameSecondReplicas is S8s (BENCHMARKS.md; issue 33 item 5): 50 identical replicas created at
// once onto one node whose kubelet runs single-numa-node (static CPU manager; 2 NUMA nodes, 4 A100s
// on each), whole-card onto a node that does not share cards and shared onto one with 8 share slots
// per card, each side by side with the same pods onto a node whose kubelet runs policy none, in one
// run. Each round checks what Cardinal promises (0 admission failures, every pod that fits Running,
// PodResources = assignment for each) and logs the time from the first create to the last fitting
// pod Running and the FailedScheduling events (a bind or filter answered with a wait); the times are
// reported, not asserted.
//
// Whole cards go onto a node without sharing: on a node with share slots, a whole-card pod holds one
// slot of its card and the kubelet still counts the card's other slots free, so under
// single-numa-node it keeps choosing NUMA 0 for the next whole-card pod after NUMA 0's cards are all
// held, and the extender (which models that choice) keeps such pods Pending: a limit of sharing
// beside TopologyManager the closing note of issue 33 reports; it is not this scenario's subject.
func TestSameSecondReplicas(t *testing.T) {
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	type round struct {
		kind   string
		memMiB int64 // 0: whole cards
		shares int
		fit    int
		nodes  []tmNode
	}
	rounds := []round{
		{kind: "whole", shares: 1, fit: 8, nodes: []tmNode{
			{name: "ssw-tm", policy: annotations.TopologyPolicySingleNUMANode, scope: annotations.TopologyScopeContainer},
			{name: "ssw-none", policy: annotations.TopologyPolicyNone, scope: annotations.TopologyScopeContainer}}},
		{kind: "shared", memMiB: 8000, shares: 8, fit: 50, nodes: []tmNode{
			{name: "sss-tm", policy: annotations.TopologyPolicySingleNUMANode, scope: annotations.TopologyScopeContainer},
			{name: "sss-none", policy: annotations.TopologyPolicyNone, scope: annotations.TopologyScopeContainer}}},
	}
	var all []tmNode
	var specs []stack.NodeSpec
	for _, r := range rounds {
		for _, n := range r.nodes {
			all = append(all, n)
			specs = append(specs, stack.NodeSpec{Name: n.name, Shares: r.shares, Kubelet: cluster.KubeletSpec{
				Machine: topologyMachine(), TopologyManagerPolicy: n.policy, TopologyManagerScope: n.scope,
				CPUManagerPolicy: annotations.CPUManagerPolicyStatic, ReservedCPUs: "0"}})
		}
	}
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries, SimFile: topologySim(t, all), Nodes: specs})
	e := &env{Stack: s, client: s.Cluster.Client}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	var report []string
	for _, r := range rounds {
		for _, n := range r.nodes {
			took, failedScheduling := sameSecondRound(t, e, n.name, r.kind, r.memMiB, 50, r.fit)
			report = append(report, fmt.Sprintf("%-6s %-8s %-16s: all %d that fit Running in %.2f s, %d FailedScheduling events", r.kind, n.name, n.policy, r.fit, took.Seconds(), failedScheduling))
		}
	}
	for _, l := range report {
		t.Log("S8s: " + l)
	}
}

// sameSecondRound creates n identical replicas for node at once (10 creators in parallel), waits
// until fit of them run, checks them, deletes them all and returns the time to the last Running.
func sameSecondRound(t *testing.T, e *env, node, kind string, memMiB int64, n, fit int) (time.Duration, int) {
	t.Helper()
	names := make([]string, n)
	pods := make([]*corev1.Pod, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s-%s-%02d", node, kind, i)
		c := ctr("main", gpu{cards: 1, memMiB: memMiB})
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("1Mi")}
		p := pod(names[i], nil, c)
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		pods[i] = p
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 10 {
				if _, err := e.client.CoreV1().Pods(namespace).Create(context.Background(), pods[i], metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	created := time.Since(start)
	var running []string
	var took time.Duration
	stack.Wait(t, 3*runTimeout, fmt.Sprintf("%d of %d %s replicas Running on %s", fit, n, kind, node), func() (bool, string, error) {
		list, err := e.client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		running = running[:0]
		for i := range list.Items {
			p := &list.Items[i]
			if !slices.Contains(names, p.Name) {
				continue
			}
			if p.Status.Phase == corev1.PodFailed {
				return false, "", fmt.Errorf("admission failure: %s", describe(p))
			}
			if p.Status.Phase == corev1.PodRunning {
				running = append(running, p.Name)
			}
		}
		took = time.Since(start)
		return len(running) >= fit, fmt.Sprintf("%d Running", len(running)), nil
	})
	if len(running) != fit {
		t.Errorf("%s on %s: %d Running, want exactly the %d that fit", kind, node, len(running), fit)
	}
	e.truth(t, running...)
	e.noFailedPods(t)
	seconds := map[int64]bool{}
	for _, name := range names {
		seconds[e.get(t, name).CreationTimestamp.Unix()] = true
	}
	failed := 0
	for _, name := range names {
		sel := fields.Set{"involvedObject.name": name, "involvedObject.namespace": namespace, "reason": "FailedScheduling"}.AsSelector().String()
		ev, err := e.client.CoreV1().Events(namespace).List(ctx(t), metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatalf("%v", err)
		}
		for _, x := range ev.Items {
			failed += int(max(x.Count, 1))
		}
	}
	t.Logf("%s on %s: created in %.2f s over %d distinct seconds", kind, node, created.Seconds(), len(seconds))
	e.deleteAll(t)
	return took, failed
}
