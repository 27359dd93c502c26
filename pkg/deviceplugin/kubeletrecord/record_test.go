package kubeletrecord

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// kubelet134 is a checkpoint as kubelet 1.34 writes it (two NUMA nodes, one entry without a
// response), with the response bytes of {Envs: {NVIDIA_VISIBLE_DEVICES: GPU-1}}.
const kubelet134 = `{"Data":{"PodDeviceEntries":[` +
	`{"PodUID":"u1","ContainerName":"main","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-1"],"1":["GPU-0"]},"AllocResp":"ChsKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSAUc="},` +
	`{"PodUID":"u2","ContainerName":"side","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["GPU-2"]}}],` +
	`"RegisteredDevices":{"nvidia.com/gpu":["GPU-0","GPU-1","GPU-2"]}},"Checksum":1234}`

func TestDecodeReadsTheKubeletsFormat(t *testing.T) {
	r, err := Decode([]byte(kubelet134))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{PodUID: "u1", Container: "main", Resource: "nvidia.com/gpu", IDs: []string{"GPU-0", "GPU-1"},
			Response: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "G"}}},
		{PodUID: "u2", Container: "side", Resource: "nvidia.com/gpu", IDs: []string{"GPU-2"}},
	}
	if diff := cmp.Diff(want, r.Entries, protocmp.Transform()); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	if got := r.Holding("nvidia.com/gpu", []string{"GPU-1", "GPU-0"}); len(got) != 1 || got[0].PodUID != "u1" {
		t.Errorf("Holding(GPU-1,GPU-0) = %+v, want pod u1's entry", got)
	}
	if got := r.Holding("nvidia.com/gpu", []string{"GPU-1"}); len(got) != 0 {
		t.Errorf("Holding(GPU-1) = %+v, want none: u1 holds GPU-0 too", got)
	}
}

func TestEncodeRoundTrips(t *testing.T) {
	in := Record{Entries: []Entry{{PodUID: "u", Container: "c", Resource: "r", IDs: []string{"a", "b"},
		Response: &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"X": "1"}, Annotations: map[string]string{"k": "v"}}}}}
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), CheckpointFile)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out, protocmp.Transform()); diff != "" {
		t.Errorf("round trip (-in +out):\n%s", diff)
	}
}

func TestDecodeNamesTheBadField(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{`, "unexpected end"},
		{`{"Checksum":1}`, "no Data object"},
		{`{"Data":{"PodDeviceEntries":[{"ContainerName":"c","ResourceName":"r"}]}}`, "PodDeviceEntries[0]: PodUID is empty"},
		{`{"Data":{"PodDeviceEntries":[{"PodUID":"u","ResourceName":"r"}]}}`, "(pod u): ContainerName is empty"},
		{`{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c"}]}}`, `(pod u container "c"): ResourceName is empty`},
		{`{"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r","AllocResp":"/w=="}]}}`, `(pod u container "c"): AllocResp`},
	} {
		_, err := Decode([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%s) = %v, want an error containing %q", c.in, err, c.want)
		}
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Read(missing) = %v, want not found", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(kubelet134))
	f.Add([]byte(`{"Data":{"PodDeviceEntries":[]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		// What decodes re-encodes and decodes to the same entries.
		b2, err := Encode(r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		r2, err := Decode(b2)
		if err != nil {
			t.Fatalf("decode of re-encoded: %v", err)
		}
		if diff := cmp.Diff(r, r2, protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
