package webhook_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/webhook"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// TestCPUOnlyPodsRoutedInRealAPIServer registers the configuration with the CPU-only route
// (CPUOnlyPods, namespaces labelled cardinal.io/cpu-pods=route) and checks its matchConditions in the
// API server's own CEL: only a CPU-only pod of a labelled namespace, of the default scheduler, not
// created on a node and no DaemonSet's, is routed; GPU pods keep their webhook and get no marker.
func TestCPUOnlyPodsRoutedInRealAPIServer(t *testing.T) {
	b := start(t)
	ctx := context.Background()
	admin, _ := b.client(t, "")
	const routedNS = "batch"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: routedNS,
		Labels: map[string]string{"cardinal.io/cpu-pods": "route"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mwcs := admin.AdmissionregistrationV1().MutatingWebhookConfigurations()
	old, err := mwcs.Get(ctx, webhook.DefaultConfigurationOptions().Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opts := webhook.DefaultConfigurationOptions()
	opts.Namespace, opts.URL, opts.CABundle, opts.TrustedUsers = cardinalNS, b.url, old.Webhooks[0].ClientConfig.CABundle, []string{extenderSA}
	opts.CPUOnlyPods = &webhook.CPUOnlyPodsOptions{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"cardinal.io/cpu-pods": "route"}}}
	cfg, err := webhook.MutatingWebhookConfiguration(opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ResourceVersion = old.ResourceVersion
	if _, err := mwcs.Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("register the route: %v", err)
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	cluster.WaitFor(t, timeout, "the apiserver to call the route", func() (bool, error) {
		p, err := admin.CoreV1().Pods(routedNS).Create(ctx, pod("probe", nil, "cpu", "1"), dry)
		return err == nil && p.Spec.SchedulerName == "cardinal-scheduler", nil
	})

	marked := func(p *corev1.Pod) bool {
		_, ok := p.Spec.Containers[0].Resources.Limits[annotations.ResourceHostRoute]
		return ok
	}
	daemon := pod("daemon", nil, "cpu", "1")
	daemon.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "0d1e2f"}}
	onNode := pod("on-node", nil, "cpu", "1")
	onNode.Spec.NodeName = "node-a"
	other := pod("other", nil, "cpu", "1")
	other.Spec.SchedulerName = "volcano"
	for _, tc := range []struct {
		ns        string
		pod       *corev1.Pod
		scheduler string
		marked    bool
	}{
		{routedNS, pod("web", nil, "cpu", "1"), "cardinal-scheduler", true},
		{teamNS, pod("web", nil, "cpu", "1"), corev1.DefaultSchedulerName, false},
		{routedNS, gpuPod("train"), "cardinal-scheduler", false},
		{routedNS, daemon, corev1.DefaultSchedulerName, false},
		{routedNS, onNode, corev1.DefaultSchedulerName, false},
		{routedNS, other, "volcano", false},
	} {
		got, err := admin.CoreV1().Pods(tc.ns).Create(ctx, tc.pod, dry)
		if err != nil {
			t.Errorf("%s/%s: %v", tc.ns, tc.pod.Name, err)
			continue
		}
		if got.Spec.SchedulerName != tc.scheduler || marked(got) != tc.marked {
			t.Errorf("%s/%s: schedulerName %q, marker %v; want %q, %v", tc.ns, tc.pod.Name, got.Spec.SchedulerName, marked(got), tc.scheduler, tc.marked)
		}
	}
	// The marker at 2 is refused by the route, naming the container and the resource.
	bad := pod("bad", nil, "cpu", "1")
	bad.Spec.Containers[0].Resources.Limits[annotations.ResourceHostRoute] = resource.MustParse("2")
	if _, err := admin.CoreV1().Pods(routedNS).Create(ctx, bad, dry); err == nil {
		t.Error("a marker at 2 was admitted")
	}
}
