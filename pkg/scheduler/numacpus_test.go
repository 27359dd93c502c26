package scheduler

import (
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core/topology"
)

// numaNode is a node of 2 NUMA nodes x cpus CPUs (the first `reserved` of NUMA 0 reserved) and 4
// cards on each, whose kubelet runs policy with the static CPU manager; pods lists the pods its
// inventory lists with their CPUs (nil: a plugin that lists none).
func numaNode(t *testing.T, policy string, cpus, reserved int, pods []annotations.PodCPUs) *corev1.Node {
	t.Helper()
	inv := annotations.Inventory{Kubelet: &annotations.KubeletTopology{
		TopologyManagerPolicy: policy, TopologyManagerScope: "container", CPUManagerPolicy: "static", DeviceTopology: true,
		NUMA: []annotations.NUMACPUs{{ID: 0, CPUs: cpus, ReservedCPUs: reserved}, {ID: 1, CPUs: cpus}},
	}}
	if pods != nil {
		inv.Kubelet.PodsV, inv.Kubelet.Pods = annotations.PodCPUsVersion, pods
		for _, p := range pods {
			for i, c := range p.CPUs {
				inv.Kubelet.NUMA[i].ExclusiveCPUs += c
			}
		}
	}
	for i := range 8 {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: uuidOf("n1", i), Index: i, Model: a40, MemoryMiB: 100, NUMA: i / 4, Healthy: true, Shares: 1})
	}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{annotations.GPUInventory: enc}}}
}

// createdAt gives the pods guaranteedPod builds creation times one second apart, in the order they
// are built: pods the kubelet admits in a known order (created in the same second, their order is
// not known and the extender lets them go one at a time: TestSameSecondPodsGoOneAtATime).
var createdAt atomic.Int64

// guaranteedPod is a Guaranteed pod whose containers ask whole CPUs: cs[i] gets cpus[i].
func guaranteedPod(name string, cpus []int64, cs ...ctr) *corev1.Pod {
	p := gpuPod(name, nil, cs...)
	p.CreationTimestamp = metav1.Unix(1_700_000_000+createdAt.Add(1), 0)
	all := func(i int) *corev1.Container {
		if i < len(p.Spec.InitContainers) {
			return &p.Spec.InitContainers[i]
		}
		return &p.Spec.Containers[i-len(p.Spec.InitContainers)]
	}
	for i := range cpus {
		c := all(i)
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		c.Resources.Limits[corev1.ResourceCPU] = *resource.NewQuantity(cpus[i], resource.DecimalSI)
		c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("64Mi")
		c.Resources.Requests = c.Resources.Limits.DeepCopy()
	}
	p.Status.QOSClass = corev1.PodQOSGuaranteed
	return p
}

// kubeletTruth replays what the node's kubelet does with the pods in the order it admits them,
// from its own state (not the extender's): free CPUs per NUMA node and held cards.
type kubeletTruth struct {
	node topology.Node
	held map[string]bool
}

func newKubeletTruth(policy topology.Policy, cpus, reserved int) *kubeletTruth {
	return &kubeletTruth{node: topology.Node{Policy: policy, Scope: topology.ScopeContainer, CPUPolicy: topology.CPUPolicyStatic,
		NUMA: []topology.NUMANode{{ID: 0, CPUs: cpus, ReservedCPUs: reserved}, {ID: 1, CPUs: cpus}}}, held: map[string]bool{}}
}

// admit admits a pod of one GPU container (the last of cs) and reports whether the kubelet takes
// exactly the assigned IDs, the NUMA node of its CPUs, and the refusal if any.
func (k *kubeletTruth) admit(t *testing.T, req topology.Request, assigned []string) (accepts bool, numa int, held []annotations.NUMACPUCount, refusal *topology.Refusal) {
	t.Helper()
	var devs []topology.Device
	for i := range 8 {
		id := uuidOf("n1", i)
		devs = append(devs, topology.Device{ID: id, NUMA: i / 4, Healthy: true, Held: k.held[id]})
	}
	req.Pick = func(c int, fixed, pool []string, n int) []string {
		var out []string
		for _, id := range pool {
			for _, a := range assigned {
				if id == a && len(out) < n {
					out = append(out, id)
				}
			}
		}
		return out
	}
	res, ref := topology.Admit(&k.node, devs, &req)
	if ref != nil {
		return false, -1, nil, ref
	}
	last := res.Containers[len(res.Containers)-1]
	accepts = last.Devices.Accepts(assigned)
	for _, id := range last.Devices.Taken {
		k.held[id] = true
	}
	numa = -1
	for i, c := range res.HeldCPUs {
		k.node.NUMA[i].ExclusiveCPUs += c
		if c > 0 {
			numa = k.node.NUMA[i].ID
			held = append(held, annotations.NUMACPUCount{NUMA: numa, CPUs: c})
		}
	}
	return accepts, numa, held, nil
}

// Issue #21 item 3, the unit-level burst: 5 identical Guaranteed pods of 1 card + 6 CPUs on
// 2 x 16 CPUs, bound back to back before the plugin writes the inventory again. Each pod's cards
// must be where the kubelet puts them (the kubelet's own replay, kubeletTruth), and a pod the
// kubelet would refuse must not be bound. Without the charge of reserved pods' CPUs, the extender
// put the third and fourth on NUMA 0 (4 CPUs left there) and the kubelet took NUMA 1 cards.
func TestBurstChargesPredictedCPUs(t *testing.T) {
	for _, policy := range []topology.Policy{topology.PolicySingleNUMANode, topology.PolicyRestricted, topology.PolicyBestEffort} {
		t.Run(string(policy), func(t *testing.T) {
			h := newHarness(t, harnessOptions{informer: true}, numaNode(t, string(policy), 16, 0, []annotations.PodCPUs{}))
			truth := newKubeletTruth(policy, 16, 0)
			wantNUMA := []int{0, 0, 1, 1, -1} // the fifth fits nowhere aligned
			for i := range 5 {
				name := "burst-" + itoa(i)
				pod := guaranteedPod(name, []int64{6}, ctr{name: "m", gpu: 1})
				h.createPods(pod)
				err := h.bind(name, "n1")
				req := topology.Request{Guaranteed: true, Containers: []topology.Container{{Name: "m", Devices: 1, CPUs: 6}}}
				a, _ := h.assignmentOf("default", name)
				if a == nil {
					// Refused by the extender: the kubelet must refuse it too (or, best-effort,
					// admit it off its preferred NUMA node).
					_, _, _, ref := truth.admit(t, req, nil)
					if ref == nil && policy != topology.PolicyBestEffort {
						t.Errorf("pod %d: not bound (%s), but the kubelet would admit it", i, err)
					}
					if wantNUMA[i] >= 0 {
						t.Errorf("pod %d: not bound: %s", i, err)
					}
					continue
				}
				ids := a.Containers[0].IDs()
				accepts, numa, held, ref := truth.admit(t, req, ids)
				switch {
				case ref != nil:
					t.Errorf("pod %d: bound with %v, the kubelet refuses it: %v", i, ids, ref)
				case !accepts:
					t.Errorf("pod %d: assigned %v (NUMA %d), the kubelet puts it on NUMA %d", i, ids, cardNUMA(ids[0]), numa)
				case numa != cardNUMA(ids[0]) && policy != topology.PolicyBestEffort:
					t.Errorf("pod %d: card on NUMA %d, CPUs on NUMA %d", i, cardNUMA(ids[0]), numa)
				case wantNUMA[i] >= 0 && numa != wantNUMA[i]:
					t.Errorf("pod %d: on NUMA %d, want %d", i, numa, wantNUMA[i])
				}
				if !slices.Equal(a.CPUs, held) {
					t.Errorf("pod %d: assignment predicts CPUs %v, the kubelet holds %v", i, a.CPUs, held)
				}
			}
		})
	}
}

// cardNUMA is the NUMA node of card uuidOf("n1", i) on numaNode.
func cardNUMA(id string) int {
	for i := range 8 {
		if uuidOf("n1", i) == id {
			return i / 4
		}
	}
	return -1
}

// Deletes: the node lists two deleted pods' CPUs until the kubelet frees them; meanwhile a pod
// that takes exclusive CPUs waits (the kubelet may free them at any moment), and once the node's
// inventory no longer lists them, it goes where the kubelet, which has freed them, puts it.
func TestDeletedPodsCPUsCountUntilFreed(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	old := []annotations.PodCPUs{{UID: "uid-old-0", CPUs: []int{6, 0}}, {UID: "uid-old-1", CPUs: []int{6, 0}}}
	var olds []*corev1.Pod
	for i := range 2 {
		p := guaranteedPod("old-"+itoa(i), []int64{6}, ctr{name: "m", gpu: 1})
		p.Spec.NodeName = "n1"
		p.Status.Phase = corev1.PodRunning
		olds = append(olds, withAllocation(t, p, "n1", annotations.ContainerAllocation{Name: "m", IDs: []string{uuidOf("n1", i)}, Source: annotations.SourceAllocate}))
	}
	h := newHarness(t, harnessOptions{informer: true, clock: clk}, numaNode(t, "single-numa-node", 16, 0, old), olds[0], olds[1])
	if got := h.cache.NodeExclusiveCPUs("n1"); got[0] != 12 || got[1] != 0 {
		t.Fatalf("exclusive CPUs %v, want [12 0] (the listed pods)", got)
	}
	// Deleted in the API; the node still lists them (the kubelet has not freed them yet).
	for _, p := range olds {
		h.cache.DeletePod(p.UID)
	}
	if got := h.cache.NodeExclusiveCPUs("n1"); got[0] != 12 {
		t.Fatalf("exclusive CPUs %v after the delete, want 12 on NUMA 0 until the kubelet frees them", got)
	}
	h.createPods(guaranteedPod("next", []int64{6}, ctr{name: "m", gpu: 1}))
	err := h.bind("next", "n1")
	if !strings.Contains(err, ErrInFlight.Error()) || !strings.Contains(err, "the kubelet frees the CPUs of pod default/old-") {
		t.Fatalf("bind while the deleted pods' CPUs are listed: %q, want a wait naming them", err)
	}
	// The kubelet freed them; the plugin writes the inventory without them.
	h.cache.UpsertNode(numaNode(t, "single-numa-node", 16, 0, []annotations.PodCPUs{}))
	if got := h.cache.NodeExclusiveCPUs("n1"); got[0] != 0 || got[1] != 0 {
		t.Fatalf("exclusive CPUs %v after the kubelet freed them, want [0 0]", got)
	}
	if err := h.bind("next", "n1"); err != "" {
		t.Fatalf("bind after the kubelet freed the CPUs: %s", err)
	}
	a, _ := h.assignmentOf("default", "next")
	if n := cardNUMA(a.Containers[0].Devices[0].UUID); n != 0 {
		t.Errorf("next got a card on NUMA %d; the kubelet, with NUMA 0 free again, puts it on NUMA 0", n)
	}
}

// A pod that went away before its node listed it may hold CPUs the kubelet has not reported yet:
// pods that take exclusive CPUs wait for cpuGoneGrace, or until the node lists it.
func TestUnlistedGonePodWaitsForGrace(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	h := newHarness(t, harnessOptions{informer: true, clock: clk}, numaNode(t, "single-numa-node", 16, 0, []annotations.PodCPUs{}))
	h.createPods(guaranteedPod("a", []int64{6}, ctr{name: "m", gpu: 1}), guaranteedPod("b", []int64{6}, ctr{name: "m", gpu: 1}),
		gpuPod("c", nil, ctr{name: "m", gpu: 1}))
	if err := h.bind("a", "n1"); err != "" {
		t.Fatal(err)
	}
	if got := h.cache.NodeExclusiveCPUs("n1"); got[0] != 6 {
		t.Fatalf("exclusive CPUs %v with a bound and unlisted, want its predicted 6 on NUMA 0", got)
	}
	h.cache.DeletePod("uid-a")
	if err := h.bind("b", "n1"); !strings.Contains(err, "went away before the node listed its CPUs") {
		t.Fatalf("bind of b right after a went away unlisted: %q, want a wait", err)
	}
	// A pod without exclusive CPUs does not care.
	if err := h.bind("c", "n1"); err != "" {
		t.Fatalf("bind of a pod without exclusive CPUs: %s", err)
	}
	clk.Step(cpuGoneGrace)
	if err := h.bind("b", "n1"); err != "" {
		t.Fatalf("bind of b after the grace: %s", err)
	}
}

// A CPU-only Guaranteed pod bound to the node (spec.nodeName, no prediction) is not guessed: pods
// that take exclusive CPUs wait until the node lists it.
func TestUnpredictedPodWaitsUntilListed(t *testing.T) {
	hog := guaranteedPod("hog", []int64{3}, ctr{name: "m"})
	hog.Spec.NodeName = "n1"
	h := newHarness(t, harnessOptions{informer: true}, numaNode(t, "single-numa-node", 8, 1, []annotations.PodCPUs{}), hog)
	h.createPods(guaranteedPod("g", []int64{6}, ctr{name: "m", gpu: 1}))
	if err := h.bind("g", "n1"); !strings.Contains(err, "the node has not listed the CPUs of pod default/hog yet") {
		t.Fatalf("bind beside an unlisted CPU-only pod: %q, want a wait", err)
	}
	h.cache.UpsertNode(numaNode(t, "single-numa-node", 8, 1, []annotations.PodCPUs{{UID: "uid-hog", CPUs: []int{3, 0}}}))
	if err := h.bind("g", "n1"); err != "" {
		t.Fatalf("bind once the node lists the hog: %s", err)
	}
	a, _ := h.assignmentOf("default", "g")
	if n := cardNUMA(a.Containers[0].Devices[0].UUID); n != 1 {
		t.Errorf("g got a card on NUMA %d; NUMA 0 has 4 free CPUs, so the kubelet puts it on NUMA 1", n)
	}
}

// Issue 33 item 2: a static pod is listed by the node under its kubelet config hash, which the
// informer sees only in its mirror pod's kubernetes.io/config.mirror annotation (the mirror pod has
// an API UID of its own). Before the fix the mirror pod was never seen listed, and every pod that
// takes exclusive CPUs on its node waited for it forever ("has not listed the CPUs of pod
// kube-system/static-x yet"). n1: 2 NUMA nodes x 8 CPUs, CPU 0 reserved (7 + 8 free); the static
// pod holds 2 CPUs on NUMA 0 (7 - 2 = 5 free there).
func TestStaticPodListedByConfigHash(t *testing.T) {
	const hash = "6e1cb2f0a1d4e7b3c9f8a2d5e4b1c7a0"
	static := guaranteedPod("static-x", []int64{2}, ctr{name: "m"})
	static.Namespace, static.Spec.NodeName, static.Status.Phase = "kube-system", "n1", corev1.PodRunning
	static.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: hash, "kubernetes.io/config.source": "file"}
	cases := []struct {
		name   string
		listed []annotations.PodCPUs
		want   string // "" binds; else the bind's error contains it
		cpus   []int  // exclusive CPUs per NUMA node the model reads before the bind
	}{
		// Listed under its config hash: counted, no wait; 2 + 4 (g) = 6 <= 7 on NUMA 0.
		{name: "listed by hash", listed: []annotations.PodCPUs{{UID: hash, CPUs: []int{2, 0}}}, cpus: []int{2, 0}},
		// Not listed yet: the static pod's CPUs are unknown, pods with exclusive CPUs wait.
		{name: "not listed yet", listed: []annotations.PodCPUs{}, want: "has not listed the CPUs of pod kube-system/static-x yet", cpus: []int{0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{informer: true}, numaNode(t, "single-numa-node", 8, 1, tc.listed), static)
			if got := h.cache.NodeExclusiveCPUs("n1"); !slices.Equal(got, tc.cpus) {
				t.Errorf("exclusive CPUs %v, want %v", got, tc.cpus)
			}
			h.createPods(guaranteedPod("g", []int64{4}, ctr{name: "m", gpu: 1}))
			err := h.bind("g", "n1")
			switch {
			case tc.want == "" && err != "":
				t.Errorf("bind beside the static pod: %q, want bound", err)
			case tc.want != "" && !strings.Contains(err, tc.want):
				t.Errorf("bind beside the static pod: %q, want %q", err, tc.want)
			}
		})
	}
}

// Init containers: the static policy keeps an init container's exclusive CPUs the app containers
// did not reuse for the pod's life. A pod of init 1 card + 6 CPUs and app 1 card + 2 CPUs holds 6
// CPUs on NUMA 0 (2 x 8 CPUs, CPU 0 reserved: 7 free there); the next 1 card + 6 CPU pod must go
// to NUMA 1, where the kubelet puts it.
func TestInitContainersRetainedCPUsCharged(t *testing.T) {
	h := newHarness(t, harnessOptions{informer: true}, numaNode(t, "single-numa-node", 8, 1, []annotations.PodCPUs{}))
	h.createPods(guaranteedPod("init", []int64{6, 2}, ctr{name: "i", gpu: 1, init: true}, ctr{name: "m", gpu: 1}),
		guaranteedPod("next", []int64{6}, ctr{name: "m", gpu: 1}))
	if err := h.bind("init", "n1"); err != "" {
		t.Fatal(err)
	}
	a, _ := h.assignmentOf("default", "init")
	if len(a.CPUs) != 1 || a.CPUs[0] != (annotations.NUMACPUCount{NUMA: 0, CPUs: 6}) {
		t.Fatalf("init pod predicts CPUs %v, want 6 on NUMA 0 (the init container's, 2 reused)", a.CPUs)
	}
	if err := h.bind("next", "n1"); err != "" {
		t.Fatal(err)
	}
	a, _ = h.assignmentOf("default", "next")
	if n := cardNUMA(a.Containers[0].Devices[0].UUID); n != 1 {
		t.Errorf("next got a card on NUMA %d; NUMA 0 has 1 free CPU, so the kubelet puts it on NUMA 1", n)
	}
}

// On a node whose kubelet runs a TopologyManager policy, the kubelet admits pods that reach it
// together in creation order, to the second, and pods created in the same second in any order: two
// pods created together and both in flight could swap cards and NUMA nodes. So a container joins
// another in flight with its device count only when its pod was created in a later second, or when
// the two are replicas (one shape) with all their cards on one NUMA node (issue 33 item 5: swapping
// them changes nothing); other pods created together go one at a time. Nodes without a policy keep
// the interchangeable rule.
func TestSameSecondPodsGoOneAtATime(t *testing.T) {
	sameSecond := func(name string, cpus int64) *corev1.Pod {
		p := guaranteedPod(name, []int64{cpus}, ctr{name: "m", gpu: 1})
		p.CreationTimestamp = metav1.Unix(1_600_000_000, 0)
		return p
	}
	h := newHarness(t, harnessOptions{informer: true}, numaNode(t, "single-numa-node", 16, 0, []annotations.PodCPUs{}))
	later := guaranteedPod("later", []int64{2}, ctr{name: "m", gpu: 1}) // created a second or more after
	h.createPods(sameSecond("a", 2), sameSecond("b", 2), sameSecond("other", 3), later)
	if err := h.bind("a", "n1"); err != "" {
		t.Fatal(err)
	}
	if err := h.bind("b", "n1"); err != "" {
		t.Fatalf("bind of b, a replica of a created in its second, while a is in flight: %s (replicas on one NUMA node go together)", err)
	}
	aa, _ := h.assignmentOf("default", "a")
	ba, _ := h.assignmentOf("default", "b")
	if na, nb := cardNUMA(aa.Containers[0].Devices[0].UUID), cardNUMA(ba.Containers[0].Devices[0].UUID); na != nb {
		t.Fatalf("a on NUMA %d, b on NUMA %d: the test wants both on one", na, nb)
	}
	// It waits for a or b, whichever the walk meets first: both are in flight, created in its second.
	if err := h.bind("other", "n1"); !regexp.MustCompile(`waits until pod default/[ab] container "m" \(created in the same second or later`).MatchString(err) {
		t.Fatalf("bind of other (3 CPUs, created in a's second) while a and b are in flight: %q, want a wait", err)
	}
	if err := h.bind("later", "n1"); err != "" {
		t.Fatalf("bind of a pod created after a while a is in flight: %s", err)
	}
	h.allocate("a")
	h.allocate("b")
	h.allocate("later")
	if err := h.bind("other", "n1"); err != "" {
		t.Fatalf("bind of other once a, b and later are allocated: %s", err)
	}

	// Replicas that cannot share a NUMA node (10 CPUs each, 16 per node): the second waits.
	apart := newHarness(t, harnessOptions{informer: true}, numaNode(t, "single-numa-node", 16, 0, []annotations.PodCPUs{}))
	apart.createPods(sameSecond("a", 10), sameSecond("b", 10))
	if err := apart.bind("a", "n1"); err != "" {
		t.Fatal(err)
	}
	if err := apart.bind("b", "n1"); !strings.Contains(err, `waits until pod default/a container "m"`) {
		t.Fatalf("bind of b (its cards on the other NUMA node) while a is in flight: %q, want a wait", err)
	}

	none := newHarness(t, harnessOptions{informer: true}, numaNode(t, "none", 16, 0, []annotations.PodCPUs{}))
	none.createPods(sameSecond("a", 2), sameSecond("b", 2))
	for _, name := range []string{"a", "b"} {
		if err := none.bind(name, "n1"); err != "" {
			t.Fatalf("policy none, bind of %s: %s (identical replicas never wait)", name, err)
		}
	}
}
