package deviceplugin_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/deviceplugin"
	"github.com/cardinal-gpu/cardinal/test/cluster"
)

var names = annotations.DefaultResourceNames()

// migSimFile is the node of issue #23: an A100 split 7× 1g.10gb (MIG-a0-0 … MIG-a0-6), an A100
// split 3g.40gb (MIG-a1-0) + 2g.20gb (MIG-a1-1) + 1g.10gb (MIG-a1-2), and a T4 served whole.
func migSimFile(a11Healthy bool) string {
	var a0 []string
	for k := range 7 {
		a0 = append(a0, fmt.Sprintf("{profile: 1g.10gb, uuid: MIG-a0-%d}", k))
	}
	return fmt.Sprintf(`nodes:
  %s:
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled, instances: [%s]}}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled, instances: [{profile: 3g.40gb, uuid: MIG-a1-0}, {profile: 2g.20gb, uuid: MIG-a1-1, healthy: %t}, {profile: 1g.10gb, uuid: MIG-a1-2}]}}
    - {model: "Tesla T4", memoryMiB: 15360, numa: 0}
`, node, strings.Join(a0, ", "), a11Healthy)
}

func TestMIGWithRealKubelet(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	t.Chdir(t.TempDir())
	k := c.AddKubelet(t, cluster.KubeletSpec{Name: node})
	simPath := filepath.Join(t.TempDir(), "gpus.yaml")
	writeFile(t, simPath, migSimFile(true))

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

	all := map[corev1.ResourceName]int64{names.GPU: 1, names.MIGResource("1g.10gb"): 8, names.MIGResource("3g.40gb"): 1, names.MIGResource("2g.20gb"): 1}
	waitAllocatable(t, c.Client, all)

	pods := []*corev1.Pod{
		bindDevices(t, c.Client, "mig-one", "1g.10gb", "MIG-a0-3"),
		bindDevices(t, c.Client, "mig-two", "1g.10gb", "MIG-a0-5", "MIG-a1-2"),
		bindDevices(t, c.Client, "mig-big", "3g.40gb", "MIG-a1-0"),
		bindDevices(t, c.Client, "whole", "", sim0UUID(t, c.Client)),
	}
	waitRunning(t, c.Client, pods...)
	want := map[string][]string{"mig-one": {"MIG-a0-3"}, "mig-two": {"MIG-a0-5", "MIG-a1-2"}, "mig-big": {"MIG-a1-0"}, "whole": {sim0UUID(t, c.Client)}}
	got, err := allDevices(k.PodResourcesSocket)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sorted(want)) != fmt.Sprint(sorted(got)) {
		t.Errorf("PodResources %v, want %v", sorted(got), sorted(want))
	}
	waitRecords(t, c.Client, want)

	// The 2g.20gb instance turns unhealthy: only its resource drops it.
	writeFile(t, simPath, migSimFile(false))
	all[names.MIGResource("2g.20gb")] = 0
	waitAllocatable(t, c.Client, all)

	// A kubelet restart: every resource registers again.
	k.Restart(t)
	waitAllocatable(t, c.Client, all)
	writeFile(t, simPath, migSimFile(true))
	all[names.MIGResource("2g.20gb")] = 1
	waitAllocatable(t, c.Client, all)
}

// sim0UUID is the T4's UUID, from the Node's inventory.
func sim0UUID(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := annotations.DecodeInventory(n.Annotations[annotations.GPUInventory])
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range inv.GPUs {
		if g.MIG == nil {
			return g.UUID
		}
	}
	t.Fatal("no whole card in the inventory")
	return ""
}

func waitAllocatable(t *testing.T, client kubernetes.Interface, want map[corev1.ResourceName]int64) {
	t.Helper()
	var last string
	cluster.WaitFor(t, timeout, fmt.Sprintf("node allocatable %v", want), func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // polling
		}
		ok := true
		var parts []string
		for r, v := range want {
			q := n.Status.Allocatable[r]
			parts = append(parts, fmt.Sprintf("%s=%d", r, q.Value()))
			ok = ok && q.Value() == v
		}
		last = strings.Join(parts, " ")
		return ok, nil
	})
	t.Logf("node: %s", last)
}

// bindDevices creates a pod whose one container wants the given devices (MIG instances of profile,
// or cards when profile is empty), with the assignment the extender would write, and binds it.
func bindDevices(t *testing.T, client kubernetes.Interface, name, profile string, ids ...string) *corev1.Pod {
	t.Helper()
	a := annotations.Assignment{Node: node, Containers: []annotations.ContainerAssignment{{Name: "main"}}}
	res := names.GPU
	for _, id := range ids {
		d := annotations.DeviceAssignment{UUID: id, ID: id, MemoryMiB: 15360, Cores: 100}
		if profile != "" {
			parent := "GPU-x" // the plugin does not read it
			d = annotations.DeviceAssignment{UUID: id, ID: id, Parent: parent, Profile: profile}
			res = names.MIGResource(profile)
		}
		a.Containers[0].Devices = append(a.Containers[0].Devices, d)
	}
	v, err := annotations.EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{annotations.GPUAssignment: v}},
		Spec: corev1.PodSpec{
			SchedulerName: "cardinal-scheduler",
			Containers: []corev1.Container{{Name: "main", Image: "example.com/cuda:1", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{res: *resource.NewQuantity(int64(len(ids)), resource.DecimalSI)}}}},
		},
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

// allDevices lists the device IDs of every managed resource the kubelet holds for each pod.
func allDevices(socket string) (map[string][]string, error) {
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
				if r := corev1.ResourceName(d.GetResourceName()); r == names.GPU || names.IsMIGResource(r) {
					got[p.GetName()] = append(got[p.GetName()], d.GetDeviceIds()...)
				}
			}
		}
	}
	return got, nil
}
