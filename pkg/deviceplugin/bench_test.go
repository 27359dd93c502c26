package deviceplugin

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// BenchmarkAllocate measures Allocate (S5 in BENCHMARKS.md) for 1-8 devices on a node of 64 cards ×
// 4 shares with 60 pods in flight, reporting p50 and p99. Each iteration allocates the oldest
// in-flight pod of the size, then forgets that allocation so the next iteration sees the same state.
func BenchmarkAllocate(b *testing.B) {
	for _, n := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("devices=%d", n), func(b *testing.B) {
			p := testPlugin(b, testCards(64, nil), 4)
			// 60 pods of sizes 1, 2, 4, 8 in turn, on disjoint slots: 15×(1+2+4+8) = 225 of 256.
			next := 0
			var target []string
			var targetUID uidT
			for i := 0; i < 60; i++ {
				size := []int{1, 2, 4, 8}[i%4]
				var ids []string
				for j := 0; j < size; j++ {
					ids = append(ids, annotations.SlotID(uuidOf(next%64), next/64))
					next++
				}
				// Slots of one card share it: 10000 MiB and 20 % each (at most 4 × 10000 MiB of 81920).
				pod := newPod(fmt.Sprintf("p%02d", i), ctr{name: "main", ids: ids, memMiB: 10000, cores: 20}).obj(b)
				p.UpsertPod(pod)
				if size == n && target == nil {
					target, targetUID = ids, pod.UID
				}
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
			sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
			b.ReportMetric(float64(durations[len(durations)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(durations[len(durations)*99/100].Microseconds()), "p99-µs")
		})
	}
}
