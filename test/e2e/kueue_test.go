package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/cluster"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// Kueue's keys that users write (Kueue's API, not Cardinal's contract).
const (
	kueueQueueName = "kueue.x-k8s.io/queue-name"
	kueueGate      = "kueue.x-k8s.io/admission"
)

// gpuProduct is the node label naming the card model, as NVIDIA's GPU Feature Discovery writes it
// (the model with spaces as dashes). Cardinal's device plugin publishes the model in its inventory
// annotation, not as a label; the test bed's kubelets set this label as GFD would.
const gpuProduct = "nvidia.com/gpu.product"

// kueueExcluded are the resources Kueue's quota ignores beside Cardinal (README, "Beside Kueue"):
// Cardinal's per-card share requests, which no node advertises and which Kueue cannot count as
// cards. One prefix covers nvidia.com/gpumem and nvidia.com/gpumem-percentage.
var kueueExcluded = []string{"nvidia.com/gpumem", "nvidia.com/gpucores"}

// The quotas of the scenario's ClusterQueues, in nvidia.com/gpu (cards).
const (
	a100Quota = 6 // one 4-pod Job fits, two do not
	h100Quota = 4 // the 3-pod group fits
)

var (
	gvrFlavor       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	gvrClusterQueue = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	gvrLocalQueue   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	gvrWorkload     = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
)

// TestKueue (issue 38): a real Kueue (v0.17.0, its Job and plain-pod integrations, its webhooks)
// and kube-controller-manager's Job controller beside Cardinal. Two ClusterQueues whose
// ResourceFlavors select nodes by card model (A100: node-a; H100: node-b, shared) and hold
// nvidia.com/gpu quota; Cardinal's share resources are excluded from Kueue's quota.
//   - Jobs: a Job of 4 one-card pods is admitted by Kueue and every pod placed by Cardinal on node-a's
//     A100s (the flavor's node selector); a second such Job exceeds the quota (6 cards): Kueue keeps it
//     suspended, no pod of it exists, and it runs once the first Job is deleted.
//   - A Kueue plain pod group of 3 shared-H100 pods (1 card, 30% cores each: a resource Kueue does not
//     count): Kueue holds it gated while 2 of 3 pods exist, admits it whole, and Cardinal places it whole.
func TestKueue(t *testing.T) {
	started := time.Now()
	products := map[string]string{nodeA: "NVIDIA-A100-SXM4-80GB", "node-b": "NVIDIA-H100-80GB-HBM3", "node-c": "Tesla-T4"}
	nodes := stack.DemoNodes()
	for i := range nodes {
		nodes[i].Kubelet.Labels = map[string]string{gpuProduct: products[nodes[i].Name]}
	}
	e := startEnv(t, stack.Options{Nodes: nodes})
	c := e.Cluster
	// The Job controller makes the Jobs' pods; the garbage collector removes the pods and Kueue's
	// Workload of a deleted Job.
	c.StartControllerManager(t, "job", "garbagecollector")
	c.StartKueue(t, cluster.KueueOptions{
		Namespaces:              []string{namespace},
		Frameworks:              []string{"batch/job", "pod"},
		ExcludeResourcePrefixes: kueueExcluded,
	})
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatalf("dynamic client: %v", err)
	}
	k := &kueueEnv{env: e, dyn: dyn}
	k.queue(t, "a100", "NVIDIA-A100-SXM4-80GB", a100Quota)
	k.queue(t, "h100", "NVIDIA-H100-80GB-HBM3", h100Quota)
	t.Logf("Kueue beside Cardinal ready in %s", time.Since(started).Round(time.Millisecond))

	t.Run("Jobs", func(t *testing.T) { testKueueJobs(t, k) })
	t.Run("PodGroup", func(t *testing.T) { testKueuePodGroup(t, k) })
	t.Logf("TestKueue took %s", time.Since(started).Round(time.Millisecond))
}

// kueueEnv is the stack with Kueue's objects.
type kueueEnv struct {
	*env
	dyn dynamic.Interface
}

// queue makes a ResourceFlavor name selecting nodes labelled gpuProduct=model, a ClusterQueue name
// with quota cards of nvidia.com/gpu in it (and ample cpu and memory), and a LocalQueue name in the
// scenarios' namespace pointing at it.
func (k *kueueEnv) queue(t *testing.T, name, model string, cards int) {
	t.Helper()
	objs := []struct {
		gvr schema.GroupVersionResource
		ns  string
		obj map[string]any
	}{
		{gvrFlavor, "", map[string]any{
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"nodeLabels": map[string]any{gpuProduct: model}},
		}},
		{gvrClusterQueue, "", map[string]any{
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{
				"namespaceSelector": map[string]any{},
				"resourceGroups": []any{map[string]any{
					"coveredResources": []any{"cpu", "memory", "nvidia.com/gpu"},
					"flavors": []any{map[string]any{
						"name": name,
						"resources": []any{
							map[string]any{"name": "cpu", "nominalQuota": "100"},
							map[string]any{"name": "memory", "nominalQuota": "100Gi"},
							map[string]any{"name": "nvidia.com/gpu", "nominalQuota": fmt.Sprint(cards)},
						},
					}},
				}},
			},
		}},
		{gvrLocalQueue, namespace, map[string]any{
			"metadata": map[string]any{"name": name, "namespace": namespace},
			"spec":     map[string]any{"clusterQueue": name},
		}},
	}
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: o.obj}
		u.SetAPIVersion(o.gvr.GroupVersion().String())
		u.SetKind(map[string]string{"resourceflavors": "ResourceFlavor", "clusterqueues": "ClusterQueue", "localqueues": "LocalQueue"}[o.gvr.Resource])
		var ri dynamic.ResourceInterface = k.dyn.Resource(o.gvr)
		if o.ns != "" {
			ri = k.dyn.Resource(o.gvr).Namespace(o.ns)
		}
		if _, err := ri.Create(ctx(t), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), name, err)
		}
	}
	stack.Wait(t, runTimeout, "ClusterQueue "+name+" active", func() (bool, string, error) {
		cq, err := k.dyn.Resource(gvrClusterQueue).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		st, msg := condition(cq, "Active")
		return st == "True", "Active=" + st + ": " + msg, nil
	})
}

// condition returns the status and message of an object's status condition, or "" and "".
func condition(u *unstructured.Unstructured, kind string) (string, string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == kind {
			s, _ := m["status"].(string)
			msg, _ := m["message"].(string)
			return s, msg
		}
	}
	return "", ""
}

// job is a Job in queue of n pods, one card each, running until deleted.
func job(name, queue string, n int32) *batchv1.Job {
	p := pod("", nil, ctr("main", gpu{cards: 1}))
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{kueueQueueName: queue}},
		Spec: batchv1.JobSpec{
			Parallelism: &n, Completions: &n, BackoffLimit: new(int32),
			Template: corev1.PodTemplateSpec{Spec: p.Spec},
		},
	}
}

// jobPods returns the names of the pods of a Job, sorted.
func (k *kueueEnv) jobPods(t *testing.T, name string) []string {
	t.Helper()
	list, err := k.client.CoreV1().Pods(namespace).List(ctx(t), metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + name})
	if err != nil {
		t.Fatalf("list pods of job %s: %v", name, err)
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// waitJobPods waits until the Job has n pods and returns their names.
func (k *kueueEnv) waitJobPods(t *testing.T, name string, n int) []string {
	t.Helper()
	var pods []string
	stack.Wait(t, runTimeout, fmt.Sprintf("%d pods of job %s", n, name), func() (bool, string, error) {
		pods = k.jobPods(t, name)
		j, err := k.client.BatchV1().Jobs(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return len(pods) == n, fmt.Sprintf("%d pods, suspend=%v", len(pods), j.Spec.Suspend != nil && *j.Spec.Suspend), nil
	})
	return pods
}

// workloadOf returns the Workload Kueue made for an owner (a Job, or a pod group's pods), or nil.
func (k *kueueEnv) workloadOf(t *testing.T, match func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	list, err := k.dyn.Resource(gvrWorkload).Namespace(namespace).List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list workloads: %v", err)
	}
	for i := range list.Items {
		if match(&list.Items[i]) {
			return &list.Items[i]
		}
	}
	return nil
}

// ownedBy matches a Workload owned by the Job named name.
func ownedBy(name string) func(*unstructured.Unstructured) bool {
	return func(w *unstructured.Unstructured) bool {
		for _, o := range w.GetOwnerReferences() {
			if o.Kind == "Job" && o.Name == name {
				return true
			}
		}
		return false
	}
}

// checkPlaced checks that every named pod runs on node, on cards of model (the kubelet's record
// equals Cardinal's assignment), with the flavor's node selector Kueue put on it, sent by the webhook
// to the Cardinal profile profile (a Job's whole-card pods: the sampling one; a pod group's: the
// exact one).
func (k *kueueEnv) checkPlaced(t *testing.T, pods []string, node, model, label, profile string) {
	t.Helper()
	k.waitRunning(t, pods...)
	held := k.truth(t, pods...)
	for _, name := range pods {
		p := k.get(t, name)
		if p.Spec.NodeName != node {
			t.Errorf("%s runs on %s, want %s (its flavor's %s=%s)", name, p.Spec.NodeName, node, gpuProduct, label)
		}
		if got := p.Spec.NodeSelector[gpuProduct]; got != label {
			t.Errorf("%s has node selector %s=%q, want %q (Kueue's flavor)", name, gpuProduct, got, label)
		}
		if p.Spec.SchedulerName != profile {
			t.Errorf("%s has scheduler %q, want %s", name, p.Spec.SchedulerName, profile)
		}
		h, ok := held[name+"/main"]
		if !ok || len(h.Cards) != 1 {
			t.Errorf("%s holds %v, want one card", name, h.Cards)
			continue
		}
		if !strings.Contains(h.Cards[0].Model, model) {
			t.Errorf("%s holds %s (%s), want a %s", name, h.Cards[0].UUID, h.Cards[0].Model, model)
		}
	}
	k.noDoubleBooking(t, node)
}

func testKueueJobs(t *testing.T, k *kueueEnv) {
	jobs := k.client.BatchV1().Jobs(namespace)
	if _, err := jobs.Create(ctx(t), job("train-1", "a100", 4), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create job train-1: %v", err)
	}
	first := k.waitJobPods(t, "train-1", 4)
	k.checkPlaced(t, first, nodeA, "A100", "NVIDIA-A100-SXM4-80GB", "cardinal-scheduler")

	// 4 more cards would make 8 of a quota of 6: Kueue keeps the second Job suspended, so it has no
	// pod at all (node-a has 4 free A100s: the cards are not what holds it).
	if _, err := jobs.Create(ctx(t), job("train-2", "a100", 4), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create job train-2: %v", err)
	}
	stack.Wait(t, pendingTimeout, "job train-2's Workload waiting for quota", func() (bool, string, error) {
		w := k.workloadOf(t, ownedBy("train-2"))
		if w == nil {
			return false, "no Workload yet", nil
		}
		st, msg := condition(w, "QuotaReserved")
		return st == "False" && strings.Contains(msg, "nvidia.com/gpu"), "QuotaReserved=" + st + ": " + msg, nil
	})
	hold := time.Now().Add(5 * time.Second)
	for time.Now().Before(hold) {
		j, err := jobs.Get(ctx(t), "train-2", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get job train-2: %v", err)
		}
		if j.Spec.Suspend == nil || !*j.Spec.Suspend {
			t.Fatalf("job train-2 was unsuspended beyond the quota (%d cards)", a100Quota)
		}
		if pods := k.jobPods(t, "train-2"); len(pods) > 0 {
			t.Fatalf("job train-2 has pods %v beyond the quota", pods)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// The first Job ends: its pods go, Kueue admits the second, and Cardinal places it.
	bg := metav1.DeletePropagationBackground
	if err := jobs.Delete(ctx(t), "train-1", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatalf("delete job train-1: %v", err)
	}
	second := k.waitJobPods(t, "train-2", 4)
	k.checkPlaced(t, second, nodeA, "A100", "NVIDIA-A100-SXM4-80GB", "cardinal-scheduler")
}

func testKueuePodGroup(t *testing.T, k *kueueEnv) {
	const group, total = "kg", 3
	member := func(i int) *corev1.Pod {
		labels, ann := annotations.EncodePodGroup(annotations.PodGroup{Name: group, Total: total})
		p := pod(fmt.Sprintf("%s-%d", group, i), maps.Clone(ann), ctr("main", gpu{cards: 1, cores: 30}))
		p.Labels = maps.Clone(labels)
		p.Labels[kueueQueueName] = "h100"
		return p
	}
	// Two of three: Kueue gates both (its webhook added the gate) and makes no Workload yet.
	k.create(t, member(0), member(1))
	for _, name := range []string{"kg-0", "kg-1"} {
		p := k.get(t, name)
		if !slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == kueueGate }) {
			t.Fatalf("%s has no %s scheduling gate: Kueue's pod webhook did not see it (gates %v)", name, kueueGate, p.Spec.SchedulingGates)
		}
	}
	hold := time.Now().Add(5 * time.Second)
	for time.Now().Before(hold) {
		for _, name := range []string{"kg-0", "kg-1"} {
			p := k.get(t, name)
			if len(p.Spec.SchedulingGates) == 0 || p.Spec.NodeName != "" {
				t.Fatalf("%s of an incomplete group was released (gates %v, node %q)", name, p.Spec.SchedulingGates, p.Spec.NodeName)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The third comes: Kueue admits the group whole, Cardinal places it whole.
	k.create(t, member(2))
	pods := []string{"kg-0", "kg-1", "kg-2"}
	k.checkPlaced(t, pods, "node-b", "H100", "NVIDIA-H100-80GB-HBM3", stack.ExactSchedulerName)
	w := k.workloadOf(t, func(w *unstructured.Unstructured) bool { return w.GetName() == group })
	if w == nil {
		t.Fatalf("no Workload %s for the pod group", group)
	}
	if st, msg := condition(w, "Admitted"); st != "True" {
		t.Errorf("Workload %s: Admitted=%s: %s", group, st, msg)
	}
	for _, name := range pods {
		_, a := k.assignment(t, name)
		for _, c := range a.Containers {
			for _, d := range c.Devices {
				if d.Cores != 30 {
					t.Errorf("%s holds %d%% cores of %s, want 30 (a share Kueue does not count)", name, d.Cores, d.UUID)
				}
			}
		}
	}
}
