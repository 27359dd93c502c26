// Package deviceplugin_test runs Cardinal's device plugin against a real kubelet (test/cluster):
// registration, the Node's resource and inventory, pods bound with assignments reaching Running with
// exactly their assigned devices (the kubelet's PodResources agrees), kubelet restarts, and a card
// turning unhealthy and back.
package deviceplugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
	"github.com/cardinal-gpu/cardinal/pkg/deviceplugin"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

const (
	node    = "gpu-node-1"
	timeout = 60 * time.Second
)

// simFile describes 5 T4s on node; card 4's health is a parameter.
func simFile(card4Healthy bool) string {
	return fmt.Sprintf(`nodes:
  %s:
    - {model: "Tesla T4", memoryMiB: 15360, numa: 0, count: 4}
    - {model: "Tesla T4", memoryMiB: 15360, numa: 0, healthy: %t}
`, node, card4Healthy)
}

// writeFile replaces path atomically, as an editor does.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestDevicePluginWithRealKubelet(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	// The kubelet inherits the working directory; give it a scratch one so nothing it does with a
	// relative path can touch the package's files.
	t.Chdir(t.TempDir())
	k := c.AddKubelet(t, cluster.KubeletSpec{Name: node})
	simPath := filepath.Join(t.TempDir(), "gpus.yaml")
	writeFile(t, simPath, simFile(true))
	uuids := make([]string, 5)
	for i := range uuids {
		uuids[i] = sim.DerivedUUID(node, i)
	}

	cfg := deviceplugin.DefaultConfig()
	cfg.NodeName = node
	cfg.Client = c.Client
	cfg.DevicePluginDir = k.DevicePluginDir
	cfg.PodResourcesSocket = k.PodResourcesSocket
	cfg.Simulate = simPath
	cfg.Listen = ""
	cfg.ReconcileInterval = time.Second
	cfg.HealthRecoveryInterval = time.Second
	cfg.Log = testr.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- deviceplugin.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("device plugin: %v", err)
		}
	})

	// Registration: the Node shows 5 GPUs and the inventory lists them, healthy.
	healthy := []bool{true, true, true, true, true}
	waitGPUs(t, c.Client, 5, healthy)

	// Pods bound with assignments reach Running and hold exactly their devices. Pods "one" and
	// "three" both want one card and are not interchangeable ("three" pins its card), so, as the
	// extender would, "three" is bound only after "one" is allocated.
	one := bindPod(t, c.Client, "one", uuids[2])
	two := bindPod(t, c.Client, "two", uuids[0], uuids[3])
	waitRunning(t, c.Client, one, two)
	three := bindPod(t, c.Client, "three", uuids[1])
	waitRunning(t, c.Client, three)
	want := map[string][]string{"one": {uuids[2]}, "two": {uuids[0], uuids[3]}, "three": {uuids[1]}}
	checkPodResources(t, k.PodResourcesSocket, want)
	waitRecords(t, c.Client, want)

	// A kubelet restart wipes the plugin folder; the plugin registers again, and a new pod gets its
	// card (Allocate needs a registered plugin), while the others keep theirs.
	k.Restart(t)
	waitGPUs(t, c.Client, 5, healthy)
	four := bindPod(t, c.Client, "four", uuids[4])
	waitRunning(t, c.Client, four)
	want["four"] = []string{uuids[4]}
	checkPodResources(t, k.PodResourcesSocket, want)
	waitRecords(t, c.Client, want)

	// Card 4 turns unhealthy: allocatable and inventory drop it; then it recovers.
	writeFile(t, simPath, simFile(false))
	waitGPUs(t, c.Client, 4, []bool{true, true, true, true, false})
	writeFile(t, simPath, simFile(true))
	waitGPUs(t, c.Client, 5, healthy)
}

// waitGPUs waits until the Node's allocatable GPUs and its inventory's health match.
func waitGPUs(t *testing.T, client kubernetes.Interface, allocatable int64, healthy []bool) {
	t.Helper()
	var last string
	cluster.WaitFor(t, timeout, fmt.Sprintf("node with %d allocatable GPUs and health %v", allocatable, healthy), func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // polling: an error means not ready yet
		}
		q := n.Status.Allocatable[annotations.ResourceGPU]
		inv, err := annotations.DecodeInventory(n.Annotations[annotations.GPUInventory])
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // polling: an error means not ready yet
		}
		var got []bool
		for _, g := range inv.GPUs {
			got = append(got, g.Healthy)
		}
		last = fmt.Sprintf("allocatable %s, inventory health %v", q.String(), got)
		return q.Value() == allocatable && slices.Equal(got, healthy), nil
	})
	t.Logf("node: %s", last)
}

// bindPod creates a pod whose one container wants len(ids) GPUs, carrying the assignment the
// extender would write, and binds it to the node.
func bindPod(t *testing.T, client kubernetes.Interface, name string, ids ...string) *corev1.Pod {
	t.Helper()
	a := annotations.Assignment{Node: node, Containers: []annotations.ContainerAssignment{{Name: "main"}}}
	for _, id := range ids {
		a.Containers[0].Devices = append(a.Containers[0].Devices, annotations.DeviceAssignment{UUID: id, ID: id, MemoryMiB: 15360, Cores: 100})
	}
	v, err := annotations.EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{annotations.GPUAssignment: v}},
		Spec: corev1.PodSpec{
			SchedulerName: "cardinal-scheduler", // nobody schedules it: the test binds it
			Containers: []corev1.Container{{Name: "main", Image: "example.com/cuda:1", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{annotations.ResourceGPU: *resource.NewQuantity(int64(len(ids)), resource.DecimalSI)}}}},
		},
	}
	if name == "three" {
		pod.Annotations[annotations.UseGPUUUID] = ids[0]
	}
	ctx := context.Background()
	created, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: created.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := client.CoreV1().Pods("default").Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return created
}

func waitRunning(t *testing.T, client kubernetes.Interface, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		cluster.WaitFor(t, timeout, "pod "+p.Name+" Running", func() (bool, error) {
			got, err := client.CoreV1().Pods("default").Get(context.Background(), p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got.Status.Phase == corev1.PodFailed {
				return false, fmt.Errorf("pod %s failed: %s %s", p.Name, got.Status.Reason, got.Status.Message)
			}
			return got.Status.Phase == corev1.PodRunning, nil
		})
	}
}

// checkPodResources compares the kubelet's own record with the assignments.
func checkPodResources(t *testing.T, socket string, want map[string][]string) {
	t.Helper()
	got, err := podResources(socket)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sorted(want), sorted(got)); diff != "" {
		t.Errorf("PodResources (-assigned +kubelet):\n%s", diff)
	}
}

// podResources lists the GPU device IDs the kubelet holds for each pod.
func podResources(socket string) (map[string][]string, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, err
	}
	got := map[string][]string{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == string(annotations.ResourceGPU) {
					got[p.GetName()] = append(got[p.GetName()], d.GetDeviceIds()...)
				}
			}
		}
	}
	return got, nil
}

// waitRecords waits until every pod's allocation record names its assigned devices.
func waitRecords(t *testing.T, client kubernetes.Interface, want map[string][]string) {
	t.Helper()
	for name, ids := range want {
		cluster.WaitFor(t, timeout, "allocation record of "+name, func() (bool, error) {
			p, err := client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			v, ok := p.Annotations[annotations.GPUAllocated]
			if !ok {
				return false, nil
			}
			rec, err := annotations.DecodeAllocation(v)
			if err != nil {
				return false, err
			}
			return len(rec.Containers) == 1 && rec.Containers[0].Name == "main" && rec.Node == node &&
				cmp.Equal(sorted(map[string][]string{"x": ids}), sorted(map[string][]string{"x": rec.Containers[0].IDs})), nil
		})
	}
}

func sorted(m map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range m {
		s := slices.Clone(v)
		sort.Strings(s)
		out[k] = s
	}
	return out
}
