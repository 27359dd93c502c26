package scheduler

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// The test bed's MIG node: two whole H100s, GPU-<node>-a7 in MIG mode with 7× 1g.10gb
// (MIG-<node>-7-0 …) and GPU-<node>-am with 3g.40gb + 2g.20gb + 1g.10gb (MIG-<node>-3g, -2g, -1g).
func migNodeObj(name string) *corev1.Node {
	inst := func(uuid, profile string, mem int64) annotations.MIGInstance {
		return annotations.MIGInstance{UUID: uuid, Profile: profile, Size: 1, MemoryMiB: mem, Healthy: true}
	}
	seven := annotations.GPU{UUID: "GPU-" + name + "-a7", Index: 2, Model: a100, MemoryMiB: 81920, Shares: 1,
		MIG: &annotations.MIG{Mode: annotations.MIGEnabled}}
	for i := range 7 {
		seven.MIG.Instances = append(seven.MIG.Instances, inst("MIG-"+name+"-7-"+itoa(i), "1g.10gb", 9728))
	}
	mixed := annotations.GPU{UUID: "GPU-" + name + "-am", Index: 3, Model: a100, MemoryMiB: 81920, NUMA: 0, Shares: 1,
		MIG: &annotations.MIG{Mode: annotations.MIGEnabled, Instances: []annotations.MIGInstance{
			inst("MIG-"+name+"-3g", "3g.40gb", 40192), inst("MIG-"+name+"-2g", "2g.20gb", 19968), inst("MIG-"+name+"-1g", "1g.10gb", 9728)}}}
	inv := annotations.Inventory{GPUs: []annotations.GPU{
		{UUID: "GPU-" + name + "-h0", Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true, Shares: 1},
		{UUID: "GPU-" + name + "-h1", Index: 1, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true, Shares: 1},
		seven, mixed,
	}}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		panic(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotations.GPUInventory: enc}}}
}

// migPod is a pod of one container asking count instances of profile.
func migPod(name string, ann map[string]string, profile string, count int64) *corev1.Pod {
	p := gpuPod(name, ann, ctr{name: "m"})
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
		annotations.DefaultResourceNames().MIGResource(profile): *resource.NewQuantity(count, resource.DecimalSI)}
	return p
}

// Through the HTTP verbs: filter says which nodes have the profile (and why not), prioritize
// scores, bind writes the instance with its parent and profile.
func TestMIGFilterPrioritizeBind(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true}, migNodeObj("mig"), gpuNode(nodeSpec{name: "a40s", model: a40, memMiB: 46068, count: 2}))
	pod := migPod("p", map[string]string{annotations.UseGPUUUID: "GPU-mig-am"}, "3g.40gb", 1)
	h.createPods(pod)
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("mig", "a40s")}))
	if !cmp.Equal([]string{"mig"}, *res.NodeNames) {
		t.Fatalf("fit %v, failed %v", *res.NodeNames, res.FailedAndUnresolvableNodes)
	}
	if got, want := res.FailedAndUnresolvableNodes["a40s"], "no 3g.40gb instance (node has no free MIG instance)"; got != want {
		t.Errorf("a40s: %q, want %q", got, want)
	}
	prio := decodeInto[extenderv1.HostPriorityList](t, h.post("/prioritize", extenderv1.ExtenderArgs{Pod: pod, NodeNames: names("mig")}))
	if len(prio) != 1 || prio[0].Host != "mig" {
		t.Fatalf("prioritize %v", prio)
	}
	res2 := decodeInto[extenderv1.ExtenderBindingResult](t, h.post("/bind", bindArgs{PodName: "p", PodNamespace: "default", PodUID: pod.UID, Node: "mig"}))
	if res2.Error != "" {
		t.Fatal(res2.Error)
	}
	a, node := h.assignmentOf("default", "p")
	if node != "mig" || a == nil {
		t.Fatalf("bound to %q, assignment %v", node, a)
	}
	want := []annotations.DeviceAssignment{{UUID: "MIG-mig-3g", ID: "MIG-mig-3g", MemoryMiB: 40192, Cores: 100, Parent: "GPU-mig-am", Profile: "3g.40gb"}}
	if diff := cmp.Diff(want, a.Containers[0].Devices); diff != "" {
		t.Errorf("assignment (-want +got):\n%s", diff)
	}
	// The instance is held: a second 3g.40gb pod finds none free, and says what is.
	second := migPod("q", nil, "3g.40gb", 1)
	res = decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: second, NodeNames: names("mig")}))
	want2 := "no free 3g.40gb instance (node has 7x 1g.10gb free on GPU-mig-a7, 1x 2g.20gb free on GPU-mig-am, 1x 1g.10gb free on GPU-mig-am)"
	if got := res.FailedNodes["mig"]; got != want2 {
		t.Errorf("second pod: %q, want %q", got, want2)
	}
}

// A burst of 1g.10gb pods fills exactly the node's 8 1g.10gb instances, each once, binpack filling
// a parent before the other; the ninth finds none; deleting a pod frees its instance.
func TestMIGBurstFillsEveryInstanceOnce(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true}, migNodeObj("mig"))
	var got []string
	for i := range 9 {
		p := migPod("p"+itoa(i), nil, "1g.10gb", 1)
		h.createPods(p)
		err := h.bind(p.Name, "mig")
		if i == 8 {
			if !strings.Contains(err, "no free 1g.10gb instance") {
				t.Fatalf("ninth pod: %q", err)
			}
			break
		}
		if err != "" {
			t.Fatalf("pod %d: %s", i, err)
		}
		a, _ := h.assignmentOf("default", p.Name)
		got = append(got, a.Containers[0].Devices[0].ID)
	}
	// Binpack: the 7x parent fills before the mixed one's 1g.10gb is taken.
	want := []string{"MIG-mig-7-0", "MIG-mig-7-1", "MIG-mig-7-2", "MIG-mig-7-3", "MIG-mig-7-4", "MIG-mig-7-5", "MIG-mig-7-6", "MIG-mig-1g"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("instances (-want +got):\n%s", diff)
	}
	h.cache.DeletePod("uid-p3")
	p := migPod("again", nil, "1g.10gb", 1)
	h.createPods(p)
	if err := h.bind(p.Name, "mig"); err != "" {
		t.Fatalf("after a deletion: %s", err)
	}
	if a, _ := h.assignmentOf("default", "again"); a.Containers[0].Devices[0].ID != "MIG-mig-7-3" {
		t.Errorf("freed instance not reused: %v", a.Containers[0].Devices)
	}
}

// A pod the cache learns of from its records (assignment, or the plugin's allocation for a pod it
// did not schedule) holds its MIG instance by MIG UUID, and frees it when deleted.
func TestMIGRecordsHoldInstances(t *testing.T) {
	for _, c := range []struct {
		name string
		key  string
		rec  string
	}{
		{"assignment", annotations.GPUAssignment, mustEncodeAssignment(annotations.Assignment{Node: "mig", Containers: []annotations.ContainerAssignment{{Name: "m",
			Devices: []annotations.DeviceAssignment{{UUID: "MIG-mig-2g", ID: "MIG-mig-2g", MemoryMiB: 19968, Cores: 100, Parent: "GPU-mig-am", Profile: "2g.20gb"}}}}})},
		{"allocation", annotations.GPUAllocated, mustEncodeAllocation(annotations.Allocation{Node: "mig", Containers: []annotations.ContainerAllocation{{Name: "m",
			IDs: []string{"MIG-mig-2g"}, Source: annotations.SourcePodResources}}})},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{}, migNodeObj("mig"))
			held := migPod("held", map[string]string{c.key: c.rec}, "2g.20gb", 1)
			held.Spec.NodeName, held.Status.Phase = "mig", corev1.PodRunning
			h.cache.UpsertPod(held)
			p := migPod("p", nil, "2g.20gb", 1)
			res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: p, NodeNames: names("mig")}))
			if len(*res.NodeNames) != 0 || !strings.HasPrefix(res.FailedNodes["mig"], "no free 2g.20gb instance") {
				t.Fatalf("held instance: fit %v, reasons %v", *res.NodeNames, res.FailedNodes)
			}
			h.cache.DeletePod(held.UID)
			res = decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: p, NodeNames: names("mig")}))
			if !cmp.Equal([]string{"mig"}, *res.NodeNames) {
				t.Fatalf("after deletion: fit %v, reasons %v", *res.NodeNames, res.FailedNodes)
			}
		})
	}
}

func mustEncodeAssignment(a annotations.Assignment) string {
	s, err := annotations.EncodeAssignment(a)
	if err != nil {
		panic(err)
	}
	return s
}

func mustEncodeAllocation(a annotations.Allocation) string {
	s, err := annotations.EncodeAllocation(a)
	if err != nil {
		panic(err)
	}
	return s
}

// The in-flight rule for MIG: the device plugin serves each MIG profile as a resource of its own,
// so containers of another resource (cards, another profile) never wait for one another; two of
// one profile wait unless interchangeable, the selectors read through the parent.
func TestMIGInFlightRule(t *testing.T) {
	card1 := func(name string) *corev1.Pod { return gpuPod(name, nil, ctr{name: "m", gpu: 1}) }
	cases := []struct {
		name          string
		first, second *corev1.Pod
		wantWaiting   bool
	}{
		{"identical 1g.10gb replicas never wait", migPod("a", nil, "1g.10gb", 1), migPod("b", nil, "1g.10gb", 1), false},
		{"a whole card and a 1g.10gb instance never wait", card1("a"), migPod("b", nil, "1g.10gb", 1), false},
		{"two profiles of the same count never wait", migPod("a", nil, "2g.20gb", 1), migPod("b", nil, "1g.10gb", 1), false},
		{"a selector naming the other's parent is interchangeable",
			migPod("a", nil, "1g.10gb", 1), migPod("b", map[string]string{annotations.UseGPUUUID: "GPU-mig-a7"}, "1g.10gb", 1), false},
		{"a selector refusing the other's instance waits",
			migPod("a", nil, "1g.10gb", 1), migPod("b", map[string]string{annotations.UseGPUUUID: "MIG-mig-7-3,MIG-mig-1g"}, "1g.10gb", 1), true},
		{"a selector refusing the other's parent waits",
			migPod("a", nil, "1g.10gb", 1), migPod("b", map[string]string{annotations.NoUseGPUUUID: "GPU-mig-a7"}, "1g.10gb", 1), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{informer: true}, migNodeObj("mig"))
			h.createPods(c.first, c.second)
			if err := h.bind(c.first.Name, "mig"); err != "" {
				t.Fatal(err)
			}
			err := h.bind(c.second.Name, "mig")
			waiting := strings.Contains(err, ErrInFlight.Error())
			if waiting != c.wantWaiting || (err != "" && !waiting) {
				t.Fatalf("second bind error %q, want waiting=%v", err, c.wantWaiting)
			}
		})
	}
}

// Nodes in the same state share verdicts, but a MIG reason names its own node's parents.
func TestMIGReasonsNameEachNodesDevices(t *testing.T) {
	h := newHarness(t, harnessOptions{}, migNodeObj("m1"), migNodeObj("m2"))
	p := migPod("p", nil, "4g.40gb", 1)
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: p, NodeNames: names("m1", "m2")}))
	for _, n := range []string{"m1", "m2"} {
		got := res.FailedAndUnresolvableNodes[n]
		if !strings.HasPrefix(got, "no 4g.40gb instance (node has 7x 1g.10gb free on GPU-"+n+"-a7") {
			t.Errorf("%s: %q", n, got)
		}
	}
	// And the whole-card pod lands on an H100 of either.
	w := gpuPod("w", nil, ctr{name: "m", gpu: 2})
	res = decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: w, NodeNames: names("m1", "m2")}))
	if got := *res.NodeNames; !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("whole-card pod fits %v (%v)", got, res.FailedNodes)
	}
}

// The in-flight container's selector reads a MIG instance through its parent too.
func TestMIGInFlightSelectorOfTheFirst(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true}, migNodeObj("mig"))
	first := migPod("a", map[string]string{annotations.UseGPUUUID: "GPU-mig-a7"}, "1g.10gb", 1)
	second := migPod("b", nil, "1g.10gb", 1)
	h.createPods(first, second)
	if err := h.bind("a", "mig"); err != "" {
		t.Fatal(err)
	}
	// b goes to the 7x parent too (binpack), which a's use-gpuuuid accepts: interchangeable.
	if err := h.bind("b", "mig"); err != "" {
		t.Fatalf("second bind: %s", err)
	}
}

// Nodes alike but for an instance's profile are not decided as one: 1g.10gb+me is not 1g.10gb.
func TestMIGNodeKeySeesProfiles(t *testing.T) {
	node := func(name, profile string) *corev1.Node {
		inv := annotations.Inventory{GPUs: []annotations.GPU{{UUID: "GPU-" + name, Model: a100, MemoryMiB: 81920, Shares: 1,
			MIG: &annotations.MIG{Mode: annotations.MIGEnabled, Instances: []annotations.MIGInstance{
				{UUID: "MIG-" + name, Profile: profile, Size: 1, MemoryMiB: 9728, Healthy: true}}}}}}
		enc, err := annotations.EncodeInventory(inv)
		if err != nil {
			t.Fatal(err)
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotations.GPUInventory: enc}}}
	}
	h := newHarness(t, harnessOptions{}, node("me", "1g.10gb+me"), node("plain", "1g.10gb"))
	p := migPod("p", nil, "1g.10gb+me", 1)
	res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: p, NodeNames: names("me", "plain")}))
	if !cmp.Equal([]string{"me"}, *res.NodeNames) {
		t.Errorf("fit %v, reasons %v", *res.NodeNames, res.FailedAndUnresolvableNodes)
	}
}

// An instance turning unhealthy in the node's inventory is no longer placed on.
func TestMIGInstanceTurnsUnhealthy(t *testing.T) {
	h := newHarness(t, harnessOptions{}, migNodeObj("mig"))
	p := migPod("p", nil, "3g.40gb", 1)
	filter := func() *extenderv1.ExtenderFilterResult {
		res := decodeInto[extenderv1.ExtenderFilterResult](t, h.post("/filter", extenderv1.ExtenderArgs{Pod: p, NodeNames: names("mig")}))
		return &res
	}
	if res := filter(); len(*res.NodeNames) != 1 {
		t.Fatalf("healthy: %v", res.FailedNodes)
	}
	n := migNodeObj("mig")
	inv, err := annotations.DecodeInventory(n.Annotations[annotations.GPUInventory])
	if err != nil {
		t.Fatal(err)
	}
	inv.GPUs[3].MIG.Instances[0].Healthy = false
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[annotations.GPUInventory] = enc
	h.cache.UpsertNode(n)
	res := filter()
	if got, want := res.FailedNodes["mig"], "MIG instance MIG-mig-3g (3g.40gb) is unhealthy"; len(*res.NodeNames) != 0 || got != want {
		t.Errorf("unhealthy: fit %v, reason %q, want %q", *res.NodeNames, got, want)
	}
}

// On a node whose kubelet aligns CPUs and devices (single-numa-node, static CPU manager), a MIG
// container goes to the NUMA node where its profile's free instances and the pod's CPUs meet, and
// the assignment carries the CPUs the kubelet will take there.
func TestMIGFollowsKubeletAlignment(t *testing.T) {
	n := migNodeObj("mig")
	inv, err := annotations.DecodeInventory(n.Annotations[annotations.GPUInventory])
	if err != nil {
		t.Fatal(err)
	}
	// GPU-mig-a7 (7× 1g.10gb) on NUMA 0, whose CPUs are mostly held; GPU-mig-am on NUMA 1.
	inv.GPUs[1].NUMA, inv.GPUs[3].NUMA = 1, 1
	inv.Kubelet = &annotations.KubeletTopology{TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "container",
		CPUManagerPolicy: "static", DeviceTopology: true, NUMA: []annotations.NUMACPUs{{ID: 0, CPUs: 8, ExclusiveCPUs: 6}, {ID: 1, CPUs: 8}}}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations[annotations.GPUInventory] = enc
	h := newHarness(t, harnessOptions{}, n)
	p := migPod("g", nil, "1g.10gb", 1)
	c := &p.Spec.Containers[0]
	c.Resources.Limits[corev1.ResourceCPU], c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("6"), resource.MustParse("1Gi")
	c.Resources.Requests = c.Resources.Limits.DeepCopy()
	p.Status.QOSClass = corev1.PodQOSGuaranteed
	h.createPods(p)
	if err := h.bind("g", "mig"); err != "" {
		t.Fatal(err)
	}
	a, _ := h.assignmentOf("default", "g")
	if got := a.Containers[0].Devices[0].ID; got != "MIG-mig-1g" {
		t.Errorf("instance %s, want MIG-mig-1g (NUMA 1, where the 6 CPUs are)", got)
	}
	if diff := cmp.Diff([]annotations.NUMACPUCount{{NUMA: 1, CPUs: 6}}, a.CPUs); diff != "" {
		t.Errorf("CPUs (-want +got):\n%s", diff)
	}
}
