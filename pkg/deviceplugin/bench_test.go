package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/deviceplugin/kubeletrecord"
)

// BenchmarkAllocate measures Allocate (S5 in BENCHMARKS.md) for 1-8 devices on a node of 64 cards ×
// 4 shares with 60 pods in flight, reporting p50 and p99. Each iteration allocates the oldest
// in-flight pod of the size, then forgets that allocation so the next iteration sees the same state.
// podresources=on asks a PodResources server on a unix socket (real gRPC, the 60 pods listed, the
// target without devices) which pod is being admitted, as the plugin does on a node; off is the
// plugin without it (the order rules alone), side by side.
func BenchmarkAllocate(b *testing.B) {
	for _, pr := range []bool{false, true} {
		for _, n := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("podresources=%s/devices=%d", onOff(pr), n), func(b *testing.B) { benchAllocate(b, n, pr) })
		}
	}
}

func onOff(v bool) string {
	if v {
		return "on"
	}
	return "off"
}

func benchAllocate(b *testing.B, n int, withPodResources bool) {
	p := testPlugin(b, testCards(64, nil), 4)
	pods, ids := benchPods(b, p)
	list := &podresourcesapi.ListPodResourcesResponse{}
	var target []string
	var targetUID uidT
	for i, pod := range pods {
		pr := &podresourcesapi.PodResources{Name: pod.Name, Namespace: pod.Namespace, Containers: []*podresourcesapi.ContainerResources{{Name: "main"}}}
		if len(ids[i]) == n && target == nil {
			target, targetUID = ids[i], pod.UID
		} else {
			pr.Containers[0].Devices = []*podresourcesapi.ContainerDevices{{ResourceName: string(annotations.ResourceGPU), DeviceIds: ids[i]}}
		}
		list.PodResources = append(list.PodResources, pr)
	}
	if withPodResources {
		p.podResources = servePodResources(b, list)
	}
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: target}}}
	durations := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := p.Allocate(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(start))
		p.mu.Lock()
		delete(p.local, targetUID)
		delete(p.seen, targetUID)
		p.mu.Unlock()
	}
	b.StopTimer()
	reportPercentiles(b, durations)
}

// benchPods puts the benchmarks' node state into p: 60 pods of sizes 1, 2, 4, 8 in turn, on
// disjoint slots (15×(1+2+4+8) = 225 of 256), each slot 10000 MiB and 20 % (at most 4 × 10000 MiB
// of 81920 per card). It returns the pods and their slots.
func benchPods(b *testing.B, p *Plugin) ([]*corev1.Pod, [][]string) {
	var pods []*corev1.Pod
	var all [][]string
	next := 0
	for i := 0; i < 60; i++ {
		var ids []string
		for range []int{1, 2, 4, 8}[i%4] {
			ids = append(ids, annotations.SlotID(uuidOf(next%64), next/64))
			next++
		}
		pod := newPod(fmt.Sprintf("p%02d", i), ctr{name: "main", ids: ids, memMiB: 10000, cores: 20}).obj(b)
		p.UpsertPod(pod)
		pods, all = append(pods, pod), append(all, ids)
	}
	return pods, all
}

// fixedLister is a PodResources server answering one fixed List.
type fixedLister struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	resp *podresourcesapi.ListPodResourcesResponse
}

func (f *fixedLister) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return f.resp, nil
}

// servePodResources serves list on a unix socket and returns a client of it, as the plugin dials
// the kubelet's.
func servePodResources(b *testing.B, list *podresourcesapi.ListPodResourcesResponse) podResourcesLister {
	b.Helper()
	sock := filepath.Join(b.TempDir(), "pr.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, &fixedLister{resp: list})
	go func() { _ = srv.Serve(l) }()
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return podresourcesapi.NewPodResourcesListerClient(conn)
}

// BenchmarkPreStart measures PreStartContainer (S5's companion: every container start is verified)
// on the same node: 60 pods admitted, the kubelet's checkpoint on disk listing them all with their
// responses (written by kubeletrecord.Encode in the kubelet's format), read and decoded at every
// call as on a node; reporting p50 and p99.
func BenchmarkPreStart(b *testing.B) {
	p := testPlugin(b, testCards(64, nil), 4)
	pods, all := benchPods(b, p)
	var rec kubeletrecord.Record
	var target []string
	for i, pod := range pods {
		resp, err := allocateIDs(p, all[i]...)
		if err != nil {
			b.Fatal(err)
		}
		rec.Entries = append(rec.Entries, kubeletrecord.Entry{PodUID: pod.UID, Container: "main", Resource: string(annotations.ResourceGPU),
			IDs: slices.Sorted(slices.Values(all[i])), Response: resp.ContainerResponses[0]})
		if len(all[i]) == 4 && target == nil {
			target = all[i]
		}
	}
	data, err := kubeletrecord.Encode(rec)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), kubeletrecord.CheckpointFile)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
	p.kubeletRecord = func() (kubeletrecord.Record, error) { return kubeletrecord.Read(path) }
	req := &pluginapi.PreStartContainerRequest{DevicesIds: target}
	durations := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := p.PreStartContainer(context.Background(), req); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(start))
	}
	b.StopTimer()
	reportPercentiles(b, durations)
	b.ReportMetric(float64(len(data)), "checkpoint-bytes")
}

// reportPercentiles reports the p50 and p99 of the calls' durations.
func reportPercentiles(b *testing.B, durations []time.Duration) {
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	b.ReportMetric(float64(durations[len(durations)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(durations[len(durations)*99/100].Microseconds()), "p99-µs")
}
