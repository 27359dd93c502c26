package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// A DeviceClass mapping nvidia.com/gpu (or a MIG resource) to DRA is found and counted; one mapping
// another vendor's resource, or none, is not (issue 35).
func TestDRAMappingsFound(t *testing.T) {
	class := func(name string, res *string) *resourcev1.DeviceClass {
		return &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.DeviceClassSpec{ExtendedResourceName: res}}
	}
	client := fake.NewClientset(
		class("gpu.example.com", ptr.To("nvidia.com/gpu")),
		class("mig-small", ptr.To("nvidia.com/mig-1g.10gb")),
		class("fpga", ptr.To("example.com/fpga")),
		class("plain", nil),
	)
	got, err := draMappings(context.Background(), client, annotations.DefaultResourceNames())
	if err != nil {
		t.Fatal(err)
	}
	want := []draMapping{{class: "gpu.example.com", resource: "nvidia.com/gpu"}, {class: "mig-small", resource: "nvidia.com/mig-1g.10gb"}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(draMapping{})); diff != "" {
		t.Errorf("mappings (-want +got):\n%s", diff)
	}

	m := newMetrics(prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		watchDRAMappings(ctx, logr.Discard(), client, annotations.DefaultResourceNames(), m.draMapped)
		close(done)
	}()
	deadline := 0
	for testutil.ToFloat64(m.draMapped) != 2 && deadline < 500 {
		deadline++
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if v := testutil.ToFloat64(m.draMapped); v != 2 {
		t.Errorf("cardinal_extender_dra_mapped_resources = %v, want 2", v)
	}
}
