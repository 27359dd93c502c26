package e2e

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// staticPodManifest is a Guaranteed static pod of 2 exclusive CPUs and no card.
const staticPodManifest = `apiVersion: v1
kind: Pod
metadata:
  name: static-x
  namespace: kube-system
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
    resources:
      requests: {cpu: "2", memory: 64Mi}
      limits: {cpu: "2", memory: 64Mi}
`

// TestStaticPodBesideGPUPods (issue 33 item 2): a static Guaranteed pod with 2 exclusive CPUs on a
// single-numa-node kubelet with the static CPU manager (2 NUMA nodes x 8 CPUs, CPU 0 reserved: 7
// and 8 for exclusive use; 4 A100s each), then a burst of 4 GPU pods of 1 card + 2 CPUs, which fit:
// NUMA 0 has 7 - 2 = 5 CPUs (2 pods), NUMA 1 has 8 (4 pods). The kubelet's CPU checkpoint, and so
// the inventory, names the static pod by its config hash; the informer sees its mirror pod, whose
// API UID differs. Before the fix no pod ran: every one waited for the node to list the static
// pod ("has not listed the CPUs of pod kube-system/static-x-tm-static yet").
func TestStaticPodBesideGPUPods(t *testing.T) {
	node := tmNode{"tm-static", annotations.TopologyPolicySingleNUMANode, annotations.TopologyScopeContainer}
	e := startTopologyStackWith(t, []tmNode{node}, map[string]map[string]string{node.name: {"static-x.yaml": staticPodManifest}})
	mirror := "static-x-" + node.name
	stack.Wait(t, runTimeout, "mirror pod "+mirror+" Running", func() (bool, string, error) {
		p, err := e.client.CoreV1().Pods("kube-system").Get(context.Background(), mirror, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil //nolint:nilerr // polling: the kubelet has not created it yet
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%s, annotations %v", p.Status.Phase, p.Annotations), nil
	})
	p, err := e.client.CoreV1().Pods("kube-system").Get(ctx(t), mirror, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", mirror, err)
	}
	t.Logf("mirror pod UID %s, config hash %s", p.UID, p.Annotations[corev1.MirrorPodAnnotationKey])
	r := newNodeRun(t, e, modeCardinal, node, &tally{})
	t.Cleanup(func() { r.cleanup(t) })
	r.waitInventoryCPUs(t)
	var pods []tmPod
	for i := range 4 {
		pods = append(pods, tmPod{name: fmt.Sprintf("beside-%d", i), guaranteed: true, useCard: -1,
			ctrs: []tmCtr{{name: "main", cards: 1, cpus: 2}}, numa: anyNUMA})
	}
	r.burst(t, pods, 4)
}
