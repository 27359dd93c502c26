package deviceplugin

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// FuzzAllocate feeds Allocate arbitrary device IDs (the kubelet's input) while a pod on the node
// carries arbitrary assignment, record and selector annotations (the API's input), beside a second
// pending pod of Cardinal's (assigned GPU-02::0), created in the same second or later, with the plugin
// just restarted (listing) or not. Allocate must never panic; a refusal is a gRPC status whose message
// starts with "cardinal: ".
func FuzzAllocate(f *testing.F) {
	good := `{"v":1,"node":"node-a","containers":[{"name":"main","devices":[{"uuid":"GPU-01","id":"GPU-01::1"}]}]}`
	f.Add("GPU-01::1", good, "", "", false, false)
	f.Add("GPU-01::1,GPU-01::1", good, `{"v":1,"node":"node-a","containers":[{"name":"main","ids":["GPU-01::1"]}]}`, "a100", false, false)
	f.Add("GPU-00::0,GPU-02::3", `{"v":1}`, `{"v":2}`, ",", false, false)
	f.Add("", "null", "[]", "", false, false)
	f.Add("::,GPU-9::-1,GPU-01::01", `{"v":1,"node":"node-a","containers":[{"name":"","devices":[]}]}`, "x", "t4,", false, false)
	f.Add("GPU-03::0", `{"v":1,"node":`, "", "", true, true)
	f.Add("GPU-03::0", `{"v":1,"node":"node-b","containers":[{"name":"main","devices":[{"uuid":"GPU-01","id":"GPU-01::1"}]}]}`, "", "", false, false)
	f.Fuzz(func(t *testing.T, ids, assignment, record, useType string, sameSecond, listing bool) {
		p := testPlugin(t, testCards(4, nil), 2)
		if listing {
			p = testPluginListing(t, testCards(4, nil), 2)
		}
		b := newPod("fuzz", ctr{name: "main", count: 1}).rawAssignment(assignment)
		if record != "" {
			b.annotate(annotations.GPUAllocated, record)
		}
		if useType != "" {
			b.annotate(annotations.UseGPUType, useType)
		}
		p.UpsertPod(b.obj(t))
		other := newPod("other", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(2), 0)}})
		if sameSecond {
			other.createdWith(b)
		}
		p.UpsertPod(other.obj(t))
		var list []string
		if ids != "" {
			list = strings.Split(ids, ",")
		}
		resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: list}}})
		if err != nil {
			st, ok := status.FromError(err)
			if !ok || !strings.HasPrefix(st.Message(), "cardinal: ") {
				t.Fatalf("error %v is not a cardinal gRPC status", err)
			}
			return
		}
		if len(resp.ContainerResponses) != 1 || resp.ContainerResponses[0].Envs[EnvVisibleDevices] == "" {
			t.Fatalf("served without visible devices: %v", resp)
		}
		// What was served must be recordable.
		p.mu.Lock()
		uid := p.byKey["default/fuzz"]
		p.mu.Unlock()
		if _, rec, _, ok := p.pendingRecord(uid); ok {
			if _, err := annotations.EncodeAllocation(rec); err != nil {
				t.Fatalf("record of a served allocation does not encode: %v", err)
			}
		}
	})
}
