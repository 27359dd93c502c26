package scheduler

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// withAlloc gives a node allocatable CPU and memory ("" leaves one out).
func withAlloc(n *corev1.Node, cpu, mem string) *corev1.Node {
	n.Status.Allocatable = corev1.ResourceList{}
	if cpu != "" {
		n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		n.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return n
}

// requests returns resource requests of CPU and memory ("" leaves one out).
func requests(cpu, mem string) corev1.ResourceRequirements {
	l := corev1.ResourceList{}
	if cpu != "" {
		l[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return corev1.ResourceRequirements{Requests: l}
}

// cpuPod is a pod without GPUs, of another scheduler, asking cpu and mem in one container.
func cpuPod(name, node, cpu, mem string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{SchedulerName: "default-scheduler", NodeName: node,
			Containers: []corev1.Container{{Name: "c", Image: "x", Resources: requests(cpu, mem)}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// withHost sets the CPU and memory requests of a pod's first app container.
func withHost(p *corev1.Pod, cpu, mem string) *corev1.Pod {
	p.Spec.Containers[0].Resources.Requests = requests(cpu, mem).Requests
	return p
}

func TestPodHostEffectiveRequest(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	c := func(cpu, mem string) corev1.Container {
		return corev1.Container{Name: "c", Resources: requests(cpu, mem)}
	}
	side := func(cpu, mem string) corev1.Container {
		k := c(cpu, mem)
		k.RestartPolicy = &always
		return k
	}
	cases := []struct {
		name       string
		init, apps []corev1.Container
		overhead   corev1.ResourceList
		want       core.HostRequest
	}{
		{"nothing", nil, []corev1.Container{{Name: "c"}}, nil, core.HostRequest{}},
		{"apps add up", nil, []corev1.Container{c("1", "1Gi"), c("500m", "512Mi")}, nil, core.HostRequest{CPUMilli: 1500, MemMiB: 1536}},
		{"memory rounds up to a MiB", nil, []corev1.Container{c("", "1M")}, nil, core.HostRequest{MemMiB: 1}},
		{"largest init wins", []corev1.Container{c("4", "1Gi"), c("1", "8Gi")}, []corev1.Container{c("2", "2Gi")}, nil,
			core.HostRequest{CPUMilli: 4000, MemMiB: 8192}},
		{"sidecars run beside the apps", []corev1.Container{side("1", "1Gi")}, []corev1.Container{c("2", "2Gi")}, nil,
			core.HostRequest{CPUMilli: 3000, MemMiB: 3072}},
		// init after a sidecar: 1+3 = 4 CPUs at its peak, above 1+2 for the apps.
		{"init beside earlier sidecars", []corev1.Container{side("1", ""), c("3", "")}, []corev1.Container{c("2", "")}, nil,
			core.HostRequest{CPUMilli: 4000}},
		{"overhead", nil, []corev1.Container{c("1", "1Gi")}, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"),
			corev1.ResourceMemory: resource.MustParse("128Mi")}, core.HostRequest{CPUMilli: 1250, MemMiB: 1152}},
	}
	for _, tc := range cases {
		pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: tc.init, Containers: tc.apps, Overhead: tc.overhead}}
		if got := podHost(pod); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// Kubernetes 1.34-1.37 (issue 35): pod-level requests replace the containers' sum where a pod sets
// them, and a bound pod resized in place holds the larger of what it asks and what the kubelet
// allocated, or what it had when the kubelet found the resize infeasible, as kube-scheduler counts.
func TestHostFollowsPodLevelRequestsAndResize(t *testing.T) {
	podLevel := cpuPod("pl", "", "500m", "1Gi")
	podLevel.Spec.Resources = &corev1.ResourceRequirements{Requests: requests("4", "8Gi").Requests}
	if got, want := podHost(podLevel), (core.HostRequest{CPUMilli: 4000, MemMiB: 8192}); got != want {
		t.Errorf("pod-level requests: %+v, want %+v", got, want)
	}

	resized := func(spec, allocated, actual string, infeasible bool) *corev1.Pod {
		p := cpuPod("r", "n1", spec, "1Gi")
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c",
			AllocatedResources: requests(allocated, "1Gi").Requests,
			Resources:          &corev1.ResourceRequirements{Requests: requests(actual, "1Gi").Requests}}}
		if infeasible {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible}}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want int64
	}{
		{"up, in progress: the new request", resized("4", "2", "2", false), 4000},
		{"down, not yet applied: what the runtime still gives", resized("1", "1", "3", false), 3000},
		{"infeasible: what it had", resized("8", "2", "2", true), 2000},
		{"settled", resized("2", "2", "2", false), 2000},
	} {
		rec, ok := hostOf(tc.pod)
		if !ok || rec.req.CPUMilli != tc.want {
			t.Errorf("%s: held %+v (ok %v), want %d millicores", tc.name, rec.req, ok, tc.want)
		}
	}
}

func TestCacheHostAccounting(t *testing.T) {
	type step struct {
		name string
		do   func(c *Cache)
		// want is n1's host state after the step.
		want core.HostState
	}
	node := func() *corev1.Node { return withAlloc(cacheNode(), "16", "64Gi") }
	gpu := func() *corev1.Pod {
		return withHost(withAssignment(t, bound(gpuPod("g", nil, ctr{name: "m", gpu: 1}), "n1"), "n1",
			annotations.ContainerAssignment{Name: "m", Devices: []annotations.DeviceAssignment{dev(uuidOf("n1", 0), 10000, 100)}}), "4", "8Gi")
	}
	finishedPod := func(p *corev1.Pod) *corev1.Pod { p.Status.Phase = corev1.PodSucceeded; return p }
	terminating := func(p *corev1.Pod) *corev1.Pod { now := metav1.Now(); p.DeletionTimestamp = &now; return p }
	steps := []step{
		{"a pod before its node", func(c *Cache) { c.UpsertPod(cpuPod("early", "n1", "1", "1Gi")) }, core.HostState{}},
		{"node: allocatable, and the early pod", func(c *Cache) { c.UpsertNode(node()) },
			core.HostState{AllocCPUMilli: 16000, UsedCPUMilli: 1000, AllocMemMiB: 65536, UsedMemMiB: 1024}},
		{"CPU-only pod counted", func(c *Cache) { c.UpsertPod(cpuPod("web", "n1", "2", "4Gi")) },
			core.HostState{AllocCPUMilli: 16000, UsedCPUMilli: 3000, AllocMemMiB: 65536, UsedMemMiB: 5120}},
		{"pod on another node", func(c *Cache) { c.UpsertPod(cpuPod("other", "n2", "3", "")) },
			core.HostState{AllocCPUMilli: 16000, UsedCPUMilli: 3000, AllocMemMiB: 65536, UsedMemMiB: 5120}},
		{"pending pod not counted", func(c *Cache) { c.UpsertPod(cpuPod("pending", "", "5", "")) },
			core.HostState{AllocCPUMilli: 16000, UsedCPUMilli: 3000, AllocMemMiB: 65536, UsedMemMiB: 5120}},
		{"GPU pod counted", func(c *Cache) { c.UpsertPod(gpu()) },
			core.HostState{AllocCPUMilli: 16000, UsedCPUMilli: 7000, AllocMemMiB: 65536, UsedMemMiB: 13312}},
		{"update counts once", func(c *Cache) { c.UpsertPod(gpu()); c.UpsertPod(cpuPod("web", "n1", "2", "4Gi")) },
			core.HostState{AllocCPUMilli: 16000, UsedCPUMilli: 7000, AllocMemMiB: 65536, UsedMemMiB: 13312}},
		{"terminating pod keeps its share", func(c *Cache) { c.UpsertPod(terminating(cpuPod("web", "n1", "2", "4Gi"))) },
			core.HostState{AllocCPUMilli: 16000, UsedCPUMilli: 7000, AllocMemMiB: 65536, UsedMemMiB: 13312}},
		{"finished pod freed", func(c *Cache) { c.UpsertPod(finishedPod(cpuPod("web", "n1", "2", "4Gi"))) },
			core.HostState{AllocCPUMilli: 16000, UsedCPUMilli: 5000, AllocMemMiB: 65536, UsedMemMiB: 9216}},
		{"new allocatable keeps the pods", func(c *Cache) { c.UpsertNode(withAlloc(cacheNode(), "32", "")) },
			core.HostState{AllocCPUMilli: 32000, UsedCPUMilli: 5000, UsedMemMiB: 9216}},
		{"new inventory keeps the pods", func(c *Cache) {
			c.UpsertNode(withAlloc(gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 10000, count: 3, shares: 4}), "32", ""))
		}, core.HostState{AllocCPUMilli: 32000, UsedCPUMilli: 5000, UsedMemMiB: 9216}},
		{"node gone and back", func(c *Cache) { c.DeleteNode("n1"); c.UpsertNode(node()) },
			core.HostState{AllocCPUMilli: 16000, UsedCPUMilli: 5000, AllocMemMiB: 65536, UsedMemMiB: 9216}},
		{"deleted GPU pod freed", func(c *Cache) { c.DeletePod("uid-g") },
			core.HostState{AllocCPUMilli: 16000, UsedCPUMilli: 1000, AllocMemMiB: 65536, UsedMemMiB: 1024}},
		{"deleted CPU pod freed", func(c *Cache) { c.DeletePod("uid-early") },
			core.HostState{AllocCPUMilli: 16000, AllocMemMiB: 65536}},
	}
	c := NewCache(annotations.DefaultResourceNames(), "cardinal-scheduler")
	for _, s := range steps {
		s.do(c)
		var got core.HostState
		if st := c.NodeUsage("n1"); st != nil {
			got = st.Host
		}
		if got != s.want {
			t.Fatalf("%s: host %+v, want %+v", s.name, got, s.want)
		}
	}
}

func TestCacheHostReservation(t *testing.T) {
	c := NewCache(annotations.DefaultResourceNames(), "cardinal-scheduler")
	c.UpsertNode(withAlloc(cacheNode(), "8", ""))
	d, err := core.New(core.Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack})
	if err != nil {
		t.Fatal(err)
	}
	pod := withHost(gpuPod("p", nil, ctr{name: "m", gpu: 1}), "6", "")
	p, err := d.PrepareHost(annotations.PodRequest{Containers: []annotations.ContainerRequest{{Name: "m", Count: 1}}}, annotations.Selector{}, podHost(pod))
	if err != nil {
		t.Fatal(err)
	}
	used := func() int64 { return c.NodeUsage("n1").Host.UsedCPUMilli }
	if _, err := c.Reserve(pod.UID, "default/p", p, "n1"); err != nil {
		t.Fatal(err)
	}
	if used() != 6000 {
		t.Fatalf("reserved: %dm used, want 6000m", used())
	}
	c.UpsertPod(pod) // the informer sees it pending: the reservation stays
	if _, err := c.Reserve("uid-q", "default/q", p, "n1"); err == nil {
		t.Fatal("a second 6-CPU pod fits 2 free CPUs")
	}
	c.Release(pod.UID)
	if used() != 0 {
		t.Fatalf("released: %dm used, want 0", used())
	}
}

// Two nodes alike in cards (2 empty A40s each): n1 has 16 CPUs, 11 held by a pod without GPUs, so
// 5 free; n2 has 8 CPUs free. The mix is one-card whole pods asking 4 CPUs, as the new pod does.
// frag-aware, by hand: on n1 the pod leaves 1 CPU, so n1's last card can serve no pod of the mix:
// ΔF = +1 card, score 10/(1+e^4) = 0.18, rounded 0. On n2 4 CPUs remain for one more: ΔF = 0, score
// 5. Without the nodes' CPU both are ΔF = 0 (5 and 5), and binpack scores both 5 (1 of 2 cards).
func TestFragAwareSeesHostThroughHandler(t *testing.T) {
	mixPod := withHost(gpuPod("seen", nil, ctr{name: "m", gpu: 1}), "4", "1Gi")
	objs := func(known bool) []runtime.Object {
		n1 := gpuNode(nodeSpec{name: "n1", model: a40, memMiB: 100, count: 2})
		n2 := gpuNode(nodeSpec{name: "n2", model: a40, memMiB: 100, count: 2})
		if known {
			n1, n2 = withAlloc(n1, "16", "64Gi"), withAlloc(n2, "8", "64Gi")
		}
		return []runtime.Object{n1, n2, cpuPod("busy", "n1", "11", "1Gi"), mixPod.DeepCopy()}
	}
	cases := []struct {
		name   string
		policy annotations.Policy
		known  bool
		want   extenderv1.HostPriorityList
	}{
		// Answers are ranks (core.Rank): the better node 10, the other 9; equal scores share 10.
		{"frag-aware", annotations.PolicyFragAware, true, extenderv1.HostPriorityList{{Host: "n1", Score: 9}, {Host: "n2", Score: 10}}},
		{"frag-aware, CPU unknown", annotations.PolicyFragAware, false, extenderv1.HostPriorityList{{Host: "n1", Score: 10}, {Host: "n2", Score: 10}}},
		{"binpack", annotations.PolicyBinpack, true, extenderv1.HostPriorityList{{Host: "n1", Score: 10}, {Host: "n2", Score: 10}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{nodePolicy: tc.policy, gpuPolicy: tc.policy}, objs(tc.known)...)
			args := extenderv1.ExtenderArgs{Pod: withHost(gpuPod("new", nil, ctr{name: "m", gpu: 1}), "4", "1Gi"), NodeNames: names("n1", "n2")}
			res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", args))
			if diff := cmp.Diff([]string{"n1", "n2"}, *res.NodeNames); diff != "" {
				t.Errorf("fit (-want +got):\n%s", diff)
			}
			got := decodeInto[extenderv1.HostPriorityList](t, h.post("/prioritize", args))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
			if tc.known && tc.policy == annotations.PolicyFragAware {
				n1 := h.cache.NodeUsage("n1").Host
				if n1.UsedCPUMilli != 11000 || n1.AllocCPUMilli != 16000 {
					t.Errorf("n1 host %+v, want 11000m of 16000m used", n1)
				}
			}
		})
	}
}

// Filter refuses nodes whose known CPU or memory cannot hold the pod, for every policy, and never
// lends one node's verdict to another alike in cards but not in CPU.
func TestFilterRefusesNodesWithoutHost(t *testing.T) {
	for _, policy := range []annotations.Policy{annotations.PolicyBinpack, annotations.PolicySpread, annotations.PolicyFragAware} {
		t.Run(string(policy), func(t *testing.T) {
			node := func(name, cpu, mem string) *corev1.Node {
				return withAlloc(gpuNode(nodeSpec{name: name, model: a40, memMiB: 100, count: 2}), cpu, mem)
			}
			h := newHarness(t, harnessOptions{nodePolicy: policy, gpuPolicy: policy},
				node("big", "16", "64Gi"), node("small", "16", "64Gi"), node("big2", "16", "64Gi"), node("tiny", "4", "2Gi"),
				cpuPod("busy", "small", "11", "1Gi"))
			args := extenderv1.ExtenderArgs{Pod: withHost(gpuPod("new", nil, ctr{name: "m", gpu: 1}), "6", "4Gi"),
				NodeNames: names("big", "small", "big2", "tiny")}
			res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", args))
			if diff := cmp.Diff([]string{"big", "big2"}, *res.NodeNames); diff != "" {
				t.Errorf("fit (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]string{"small": "needs 6000m CPU, node has 5000m free"}, map[string]string(res.FailedNodes)); diff != "" {
				t.Errorf("failed (-want +got):\n%s", diff)
			}
			want := map[string]string{"tiny": "needs 6000m CPU, node has 4000m free; needs 4096 MiB memory, node has 2048 MiB free"}
			if diff := cmp.Diff(want, map[string]string(res.FailedAndUnresolvableNodes)); diff != "" {
				t.Errorf("unresolvable (-want +got):\n%s", diff)
			}
		})
	}
}
