package cluster

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/cpuset"
)

const gpuResource corev1.ResourceName = "example.com/gpu"

// guaranteedPod is a pod pinned to node whose containers each request (and are limited to) the
// given CPUs, 64Mi and GPUs: Guaranteed QoS, so the static CPU manager gives integer CPUs
// exclusively.
func guaranteedPod(name, node string, containers ...containerAsk) *corev1.Pod {
	pod := testPod(name, node, nil)
	pod.Spec.Containers = nil
	for i, ask := range containers {
		rl := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(int64(ask.cpus), resource.DecimalSI),
			corev1.ResourceMemory: resource.MustParse("64Mi"),
		}
		if ask.gpus > 0 {
			rl[gpuResource] = *resource.NewQuantity(int64(ask.gpus), resource.DecimalSI)
		}
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name:      "c" + strconv.Itoa(i),
			Image:     "registry.invalid/testbed/pause:1",
			Resources: corev1.ResourceRequirements{Requests: rl, Limits: rl},
		})
	}
	return pod
}

type containerAsk struct{ cpus, gpus int }

// waitPodRejected waits until the kubelet fails pod name with reason.
func waitPodRejected(t *testing.T, c *Cluster, name, reason string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	WaitFor(t, waitTimeout, "pod "+name+" Failed with "+reason, func() (bool, error) {
		var err error
		pod, err = getPod(c, name)
		if err != nil {
			return false, err
		}
		if pod.Status.Phase == corev1.PodRunning {
			t.Fatalf("pod %s Running, want it refused with %s", name, reason)
		}
		return pod.Status.Phase == corev1.PodFailed, nil
	})
	if pod.Status.Reason != reason {
		t.Errorf("pod %s failed with reason %q (%s), want %q", name, pod.Status.Reason, pod.Status.Message, reason)
	}
	return pod
}

// containerResources is what the kubelet's pod-resources List says container holds.
func containerResources(t *testing.T, pr podresourcesv1.PodResourcesListerClient, pod, container string) *podresourcesv1.ContainerResources {
	t.Helper()
	resp, err := pr.List(context.Background(), &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("pod-resources List: %v", err)
	}
	for _, p := range resp.PodResources {
		if p.Name != pod {
			continue
		}
		for _, c := range p.Containers {
			if c.Name == container {
				return c
			}
		}
	}
	t.Fatalf("pod-resources List has no container %s/%s", pod, container)
	return nil
}

// numaNodesOf is the set of NUMA nodes of m that hold cpus.
func numaNodesOf(m *Machine, cpus []int64) []int {
	var nodes []int
	for _, cpu := range cpus {
		if n := m.NUMANodeOf(int(cpu)); !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// runtimeCpuset is the cpuset the kubelet gave the fake runtime when it created the container
// (CreateContainer's linux resources).
func runtimeCpuset(t *testing.T, k *Kubelet, pod, container string) string {
	t.Helper()
	rs := k.Runtime.RuntimeService
	rs.Lock()
	defer rs.Unlock()
	for _, c := range rs.Containers {
		if c.Labels["io.kubernetes.pod.name"] == pod && c.Metadata.GetName() == container {
			return c.LinuxResources.GetCpusetCpus()
		}
	}
	t.Fatalf("the fake runtime has no container %s/%s", pod, container)
	return ""
}

// exclusiveCPUs checks that container holds n exclusive CPUs, that the runtime was given the same
// cpuset, and returns them.
func exclusiveCPUs(t *testing.T, k *Kubelet, pr podresourcesv1.PodResourcesListerClient, pod, container string, n int) []int64 {
	t.Helper()
	cr := containerResources(t, pr, pod, container)
	cpus := slices.Sorted(slices.Values(cr.CpuIds))
	if len(cpus) != n {
		t.Fatalf("%s/%s holds CPUs %v, want %d exclusive CPUs", pod, container, cpus, n)
	}
	ints := make([]int, len(cpus))
	for i, c := range cpus {
		ints[i] = int(c)
	}
	if got, want := runtimeCpuset(t, k, pod, container), cpuset.New(ints...).String(); got != want {
		t.Errorf("%s/%s: runtime got cpuset %q, pod-resources says %q", pod, container, got, want)
	}
	return cpus
}

// TestKubeletNUMATopology runs a real kubelet on a synthetic 2 NUMA × 8 CPU machine with the
// static CPU manager and the single-numa-node topology manager, and a device plugin with one card
// per NUMA node.
func TestKubeletNUMATopology(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{SchedulerConfig: []byte(defaultSchedulerConfig)})
	k := c.AddKubelet(t, KubeletSpec{
		Name:                  "numa-2x8",
		Machine:               &Machine{NUMANodes: 2, CPUsPerNUMA: 8},
		TopologyManagerPolicy: "single-numa-node",
		TopologyManagerScope:  "container",
		CPUManagerPolicy:      "static",
		ReservedCPUs:          "0",
	})
	m := k.Machine
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	plugin := &fakeDevicePlugin{resource: string(gpuResource), numa: []int64{0, 1}} // dev-0 on NUMA 0, dev-1 on NUMA 1
	if err := plugin.serve(ctx, k.DevicePluginDir); err != nil {
		t.Fatal(err)
	}
	waitAllocatable(t, c, k.Name, gpuResource, 2)
	pr := k.PodResources(t)

	t.Run("namespace shows the synthetic topology, the host keeps its own", func(t *testing.T) {
		p := k.StartInNamespace(t, "inspect-topology", "sh", "-c",
			"cat /sys/devices/system/node/node1/cpulist /sys/devices/system/node/node1/cpu9/topology/physical_package_id; grep -c ^processor /proc/cpuinfo")
		WaitFor(t, waitTimeout, "inspect-topology to exit", func() (bool, error) { return p.Exited() })
		lines := strings.Split(strings.TrimSpace(p.Tail(3)), "\n")
		if diff := cmp.Diff([]string{"8-15", "1", "16"}, lines); diff != "" {
			t.Errorf("inside the namespace (-want +got):\n%s", diff)
		}
		if b, err := os.ReadFile("/proc/cpuinfo"); err != nil || strings.Contains(string(b), "Cardinal test-bed CPU") {
			t.Errorf("host /proc/cpuinfo is the synthetic one (read error: %v)", err)
		}
	})

	t.Run("node capacity and pod-resources allocatable match the shape", func(t *testing.T) {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, k.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// 16 CPUs of capacity; allocatable 16 - 1 reserved (CPU 0).
		if got := node.Status.Capacity.Cpu().Value(); got != 16 {
			t.Errorf("node cpu capacity %d, want 16", got)
		}
		if got := node.Status.Allocatable.Cpu().Value(); got != 15 {
			t.Errorf("node cpu allocatable %d, want 15", got)
		}
		alloc, err := pr.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		cpus := slices.Sorted(slices.Values(alloc.CpuIds))
		want := make([]int64, 0, 15)
		for cpu := int64(1); cpu < 16; cpu++ {
			want = append(want, cpu)
		}
		if diff := cmp.Diff(want, cpus); diff != "" {
			t.Errorf("allocatable CPUs (-want +got):\n%s", diff)
		}
		// NUMA 0 offers 1-7 (CPU 0 reserved), NUMA 1 offers 8-15.
		perNUMA := map[int]int{}
		for _, cpu := range cpus {
			perNUMA[m.NUMANodeOf(int(cpu))]++
		}
		if diff := cmp.Diff(map[int]int{0: 7, 1: 8}, perNUMA); diff != "" {
			t.Errorf("allocatable CPUs per NUMA node (-want +got):\n%s", diff)
		}
		devNUMA := map[string][]int64{}
		for _, d := range alloc.Devices {
			if d.ResourceName != string(gpuResource) {
				continue
			}
			for _, id := range d.DeviceIds {
				for _, n := range d.GetTopology().GetNodes() {
					devNUMA[id] = append(devNUMA[id], n.ID)
				}
			}
		}
		if diff := cmp.Diff(map[string][]int64{"dev-0": {0}, "dev-1": {1}}, devNUMA); diff != "" {
			t.Errorf("allocatable devices' NUMA nodes (-want +got):\n%s", diff)
		}
	})

	var firstNUMA int
	t.Run("guaranteed pod gets exclusive CPUs on one NUMA node", func(t *testing.T) {
		createPod(t, c, guaranteedPod("four-cpus", k.Name, containerAsk{cpus: 4}))
		waitPodRunning(t, c, "four-cpus")
		cpus := exclusiveCPUs(t, k, pr, "four-cpus", "c0", 4)
		nodes := numaNodesOf(m, cpus)
		if len(nodes) != 1 {
			t.Fatalf("four-cpus holds CPUs %v on NUMA nodes %v, want one NUMA node", cpus, nodes)
		}
		firstNUMA = nodes[0]
		t.Logf("four-cpus: CPUs %v on NUMA node %d", cpus, firstNUMA)
	})

	t.Run("pod fitting on no single NUMA node is refused", func(t *testing.T) {
		// 9 CPUs: the node has 11 free (15 - 4), but no NUMA node has more than 8.
		createPod(t, c, guaranteedPod("nine-cpus", k.Name, containerAsk{cpus: 9}))
		pod := waitPodRejected(t, c, "nine-cpus", "TopologyAffinityError")
		t.Logf("nine-cpus: %s: %s", pod.Status.Reason, pod.Status.Message)
	})

	t.Run("GPU and CPUs aligned on one NUMA node", func(t *testing.T) {
		// 5 CPUs: four-cpus left at most 4 free on its NUMA node (8 - 4, or 7 - 4 on NUMA 0), so
		// only the other NUMA node fits them, and the card must come from there too.
		createPod(t, c, guaranteedPod("gpu-and-cpus", k.Name, containerAsk{cpus: 5, gpus: 1}))
		waitPodRunning(t, c, "gpu-and-cpus")
		other := 1 - firstNUMA
		cpus := exclusiveCPUs(t, k, pr, "gpu-and-cpus", "c0", 5)
		if nodes := numaNodesOf(m, cpus); !slices.Equal(nodes, []int{other}) {
			t.Errorf("gpu-and-cpus holds CPUs %v on NUMA nodes %v, want all on NUMA node %d", cpus, nodes, other)
		}
		cr := containerResources(t, pr, "gpu-and-cpus", "c0")
		var devices []string
		for _, d := range cr.Devices {
			if d.ResourceName == string(gpuResource) {
				devices = append(devices, d.DeviceIds...)
			}
		}
		if want := []string{"dev-" + strconv.Itoa(other)}; !slices.Equal(devices, want) {
			t.Errorf("gpu-and-cpus holds devices %v, want %v (the card on NUMA node %d)", devices, want, other)
		}
		t.Logf("gpu-and-cpus: CPUs %v, devices %v", cpus, devices)
	})

	t.Run("restart keeps the topology and the assignments", func(t *testing.T) {
		before := exclusiveCPUs(t, k, pr, "four-cpus", "c0", 4)
		// The static policy checks its checkpoint against the CPUs it discovers: a kubelet that
		// came back without the synthetic topology would refuse to start.
		k.Restart(t)
		var after []int64
		WaitFor(t, waitTimeout, "four-cpus in pod-resources after the restart", func() (bool, error) {
			resp, err := pr.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
			if err != nil {
				return false, nil //nolint:nilerr // polling: the new socket may not answer yet
			}
			for _, p := range resp.PodResources {
				if p.Name == "four-cpus" && len(p.Containers) == 1 {
					after = slices.Sorted(slices.Values(p.Containers[0].CpuIds))
					return len(after) > 0, nil
				}
			}
			return false, nil
		})
		if !slices.Equal(before, after) {
			t.Errorf("four-cpus holds CPUs %v after the restart, %v before", after, before)
		}
	})
}

// TestKubeletNUMAMemoryManager runs a real kubelet on a synthetic 2 NUMA × 4 CPU machine with
// 512 MiB per NUMA node, the static CPU and memory managers and single-numa-node.
func TestKubeletNUMAMemoryManager(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{SchedulerConfig: []byte(defaultSchedulerConfig)})
	k := c.AddKubelet(t, KubeletSpec{
		Name:                  "numa-2x4-mem",
		Machine:               &Machine{NUMANodes: 2, CPUsPerNUMA: 4, MemoryMiBPerNUMA: 512},
		TopologyManagerPolicy: "single-numa-node",
		CPUManagerPolicy:      "static",
		ReservedCPUs:          "0",
		MemoryManagerPolicy:   "Static", // the harness reserves 64Mi of NUMA node 0
	})
	m := k.Machine
	pr := k.PodResources(t)

	memPod := func(name string, cpus int, mem string) *corev1.Pod {
		pod := guaranteedPod(name, k.Name, containerAsk{cpus: cpus})
		pod.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse(mem)
		pod.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse(mem)
		return pod
	}

	t.Run("memory larger than any NUMA node is refused", func(t *testing.T) {
		// 768Mi: the node has GiBs (the host's), but NUMA node 0 offers 448Mi (512 - 64 reserved)
		// and NUMA node 1 512Mi. The memory manager's only hint spans both; single-numa-node
		// drops it. (A pod refused this soon after the kubelet started shows Failed only at the
		// kubelet's next 10s status sync: the refusal is immediate, its status write is not.)
		createPod(t, c, memPod("too-much-mem", 1, "768Mi"))
		waitPodRejected(t, c, "too-much-mem", "TopologyAffinityError")
	})

	t.Run("CPUs and memory from one NUMA node", func(t *testing.T) {
		createPod(t, c, memPod("cpu-and-mem", 2, "256Mi"))
		waitPodRunning(t, c, "cpu-and-mem")
		cpus := exclusiveCPUs(t, k, pr, "cpu-and-mem", "c0", 2)
		nodes := numaNodesOf(m, cpus)
		if len(nodes) != 1 {
			t.Fatalf("cpu-and-mem holds CPUs %v on NUMA nodes %v, want one", cpus, nodes)
		}
		var memNUMA []int64
		for _, mem := range containerResources(t, pr, "cpu-and-mem", "c0").Memory {
			if mem.MemoryType == string(corev1.ResourceMemory) {
				for _, n := range mem.GetTopology().GetNodes() {
					memNUMA = append(memNUMA, n.ID)
				}
			}
		}
		if want := []int64{int64(nodes[0])}; !slices.Equal(memNUMA, want) {
			t.Errorf("cpu-and-mem memory on NUMA nodes %v, want %v (its CPUs' node)", memNUMA, want)
		}
		rs := k.Runtime.RuntimeService
		rs.Lock()
		var mems string
		for _, ctr := range rs.Containers {
			if ctr.Labels["io.kubernetes.pod.name"] == "cpu-and-mem" {
				mems = ctr.LinuxResources.GetCpusetMems()
			}
		}
		rs.Unlock()
		if want := strconv.Itoa(nodes[0]); mems != want {
			t.Errorf("runtime got cpuset.mems %q, want %q", mems, want)
		}
	})

	t.Run("with a NUMA node in single-NUMA use, too much memory fails in Allocate instead", func(t *testing.T) {
		// Kubelet 1.34's memory manager never spans a NUMA node that already holds a
		// single-NUMA allocation, so it now offers no hint at all (an empty map, read as "no
		// preference"); the CPU hint wins, and the memory manager's Allocate then fails: the pod is
		// refused with UnexpectedAdmissionError, not TopologyAffinityError.
		createPod(t, c, memPod("too-much-mem-2", 1, "768Mi"))
		pod := waitPodRejected(t, c, "too-much-mem-2", "UnexpectedAdmissionError")
		if !strings.Contains(pod.Status.Message, "memorymanager") {
			t.Errorf("too-much-mem-2 refused with %q, want the memory manager's Allocate error", pod.Status.Message)
		}
	})
}

// TestKubeletNUMAPodScope runs a real kubelet on a synthetic 4 NUMA × 4 CPU machine with two
// threads per core and two NUMA nodes per socket, the static CPU manager (one full core
// reserved) and the restricted topology manager in pod scope.
func TestKubeletNUMAPodScope(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{SchedulerConfig: []byte(defaultSchedulerConfig)})
	k := c.AddKubelet(t, KubeletSpec{
		Name:                  "numa-4x4-smt",
		Machine:               &Machine{NUMANodes: 4, CPUsPerNUMA: 4, ThreadsPerCore: 2, NUMAPerSocket: 2},
		TopologyManagerPolicy: "restricted",
		TopologyManagerScope:  "pod",
		CPUManagerPolicy:      "static",
		ReservedCPUs:          "0-1", // core 0
	})
	m := k.Machine
	pr := k.PodResources(t)

	t.Run("pod scope puts all containers on one NUMA node, full cores each", func(t *testing.T) {
		// 2 + 2 CPUs. NUMA 0 has 2 free (2-3), NUMA 1-3 have 4. In container scope c0 would take
		// NUMA 0's 2-3 and c1 go to NUMA 1; in pod scope the pod's 4 go together to NUMA 1.
		createPod(t, c, guaranteedPod("pair", k.Name, containerAsk{cpus: 2}, containerAsk{cpus: 2}))
		waitPodRunning(t, c, "pair")
		var all []int64
		for _, container := range []string{"c0", "c1"} {
			cpus := exclusiveCPUs(t, k, pr, "pair", container, 2)
			if m.CoreOf(int(cpus[0])) != m.CoreOf(int(cpus[1])) {
				t.Errorf("pair/%s holds CPUs %v of two cores, want the two threads of one core", container, cpus)
			}
			all = append(all, cpus...)
		}
		if nodes := numaNodesOf(m, all); !slices.Equal(nodes, []int{1}) {
			t.Errorf("pair holds CPUs %v on NUMA nodes %v, want all on NUMA node 1", all, nodes)
		}
	})

	t.Run("restricted admits a pod on the fewest NUMA nodes it needs", func(t *testing.T) {
		// 6 CPUs need two NUMA nodes of 4; restricted (unlike single-numa-node) admits it there.
		createPod(t, c, guaranteedPod("six", k.Name, containerAsk{cpus: 6}))
		waitPodRunning(t, c, "six")
		cpus := exclusiveCPUs(t, k, pr, "six", "c0", 6)
		if nodes := numaNodesOf(m, cpus); len(nodes) != 2 || slices.Contains(nodes, 1) {
			t.Errorf("six holds CPUs %v on NUMA nodes %v, want two NUMA nodes other than the full NUMA node 1", cpus, nodes)
		}
	})
}
