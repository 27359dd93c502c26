package extender_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// TestExtenderFindsDRAMappings (issue 35): on a real API server of the test bed's Kubernetes, a
// DeviceClass that maps nvidia.com/gpu to DRA (KEP-5004) keeps its extendedResourceName from 1.36
// (the DRAExtendedResource gate: alpha and off in 1.34-1.35, beta and on in 1.36, GA in 1.37; off,
// the API server drops the field), and the extender counts such classes in
// cardinal_extender_dra_mapped_resources: 1 here from 1.36 (a class mapping another vendor's
// resource is not counted), 0 before.
func TestExtenderFindsDRAMappings(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	v, err := c.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	minor, err := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	if err != nil {
		t.Fatalf("server minor %q: %v", v.Minor, err)
	}
	mapped := minor >= 36
	for name, res := range map[string]string{"gpu.example.com": "nvidia.com/gpu", "fpga.example.com": "example.com/fpga"} {
		dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.DeviceClassSpec{ExtendedResourceName: ptr.To(res)}}
		got, err := c.Client.ResourceV1().DeviceClasses().Create(context.Background(), dc, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create DeviceClass %s: %v", name, err)
		}
		if kept := got.Spec.ExtendedResourceName != nil; kept != mapped {
			t.Fatalf("Kubernetes 1.%d: DeviceClass %s kept extendedResourceName: %v, want %v", minor, name, kept, mapped)
		}
	}
	want := "\ncardinal_extender_dra_mapped_resources 0\n"
	if mapped {
		want = "\ncardinal_extender_dra_mapped_resources 1\n"
	}
	ext := startExtender(t, c, "127.0.0.1:0")
	var last string
	cluster.WaitFor(t, timeout, strings.TrimSpace(want), func() (bool, error) {
		resp, err := http.Get("http://" + ext.addr + "/metrics")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, err
		}
		last = string(b)
		return strings.Contains(last, want), nil
	})
	// The first poll runs in the background right after the caches sync (readyz): the gauge starts
	// at 0, so a second look a second later, when a local API server has long answered the poll,
	// must agree.
	time.Sleep(time.Second)
	resp, err := http.Get("http://" + ext.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), want) {
		t.Errorf("cardinal_extender_dra_mapped_resources changed: want %q", strings.TrimSpace(want))
	}
}
