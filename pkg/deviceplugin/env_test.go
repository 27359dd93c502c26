package deviceplugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func TestOneCoreLimitIsTheContainersOwn(t *testing.T) {
	// An init container (40000 MiB, 80 %) holds a slot of card 1 and hands it on to the app container
	// (10000 MiB, 20 %), which also has a new slot on card 0. The assignment reserves card 1 at the
	// larger of the two requests and card 0 at the app's. The one SM limit used to come from the last
	// card in CUDA's order (card 1: 80 %) though card 0 reserves 20 %.
	p := testPlugin(t, testCards(4, nil), 4)
	s0, s1 := annotations.SlotID(uuidOf(0), 0), annotations.SlotID(uuidOf(1), 0)
	pod := newPod("pod",
		ctr{name: "init", init: true, ids: []string{s1}, memMiB: 40000, cores: 80},
		ctr{name: "app", ids: []string{s1, s0}, memMiB: 10000, cores: 20}).obj(t)
	a, err := annotations.DecodeAssignment(pod.Annotations[annotations.GPUAssignment])
	if err != nil {
		t.Fatal(err)
	}
	app := a.Container("app")
	app.Devices[0].MemoryMiB, app.Devices[0].Cores = 40000, 80 // the reused slot of card 1
	if pod.Annotations[annotations.GPUAssignment], err = annotations.EncodeAssignment(a); err != nil {
		t.Fatal(err)
	}
	p.UpsertPod(pod)
	if _, err := allocateIDs(p, s1); err != nil {
		t.Fatal(err)
	}
	resp, err := allocateIDs(p, s1, s0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		EnvVisibleDevices: uuidOf(0) + "," + uuidOf(1), EnvCUDADeviceOrder: "PCI_BUS_ID",
		EnvMemoryLimitPrefix + "0": "10000m", EnvMemoryLimitPrefix + "1": "10000m", EnvMPSMemoryLimit: "0=10000M,1=10000M",
		EnvSMLimit: "20", EnvMPSThreadPercentage: "20",
	}
	if diff := cmp.Diff(want, resp.ContainerResponses[0].Envs); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}
