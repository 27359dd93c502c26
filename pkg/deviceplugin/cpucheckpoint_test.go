package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/cpuset"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// A checkpoint as the kubelet v1.34 writes it (CPUManagerCheckpointV2: policyName, defaultCpuSet,
// entries by pod UID and container name, checksum): pod a's init container kept CPUs 1-6 (its app
// container reused 1-2), pod b holds 7 and 12.
const kubeletCheckpoint = `{"policyName":"static","defaultCpuSet":"0,8-11,13-15","entries":{` +
	`"aaaaaaaa-0000-0000-0000-000000000001":{"init":"1-6","main":"1-2"},` +
	`"bbbbbbbb-0000-0000-0000-000000000002":{"main":"7,12"}},"checksum":1645391043}`

func TestParseCPUCheckpoint(t *testing.T) {
	got, err := parseCPUCheckpoint([]byte(kubeletCheckpoint))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]cpuset.CPUSet{
		"aaaaaaaa-0000-0000-0000-000000000001": cpuset.New(1, 2, 3, 4, 5, 6),
		"bbbbbbbb-0000-0000-0000-000000000002": cpuset.New(7, 12),
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b cpuset.CPUSet) bool { return a.Equals(b) })); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Policy none writes no entries.
	got, err = parseCPUCheckpoint([]byte(`{"policyName":"none","defaultCpuSet":"","checksum":1353318690}`))
	if err != nil || len(got) != 0 {
		t.Errorf("policy none: %v, %v; want no pods", got, err)
	}
}

// The checkpoint formats of later kubelets keep v2's fields at the top level, so the same reader
// serves them: 1.36 writes v3 (v2 plus podEntries, the pod-level assignments of the alpha gate
// PodLevelResourceManagers), 1.37 writes v4 (v2's fields, with a checksum of them alone, beside "data",
// the full record as a string, and its own checksum; pkg/kubelet/cm/cpumanager/state/checkpoint.go).
// Both describe the same pods as kubeletCheckpoint.
func TestParseCPUCheckpointOfLaterKubelets(t *testing.T) {
	entries := `"entries":{"aaaaaaaa-0000-0000-0000-000000000001":{"init":"1-6","main":"1-2"},` +
		`"bbbbbbbb-0000-0000-0000-000000000002":{"main":"7,12"}}`
	want, err := parseCPUCheckpoint([]byte(kubeletCheckpoint))
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]string{
		"v3 (1.36)": `{"policyName":"static","defaultCpuSet":"0,8-11,13-15",` + entries + `,"checksum":1645391043}`,
		"v4 (1.37)": `{"policyName":"static","defaultCpuSet":"0,8-11,13-15",` + entries + `,"checksum":1645391043,` +
			`"data":"{\"policyName\":\"static\",\"defaultCpuSet\":\"0,8-11,13-15\",` +
			`\"entries\":{\"aaaaaaaa-0000-0000-0000-000000000001\":{\"init\":\"1-6\",\"main\":\"1-2\"},` +
			`\"bbbbbbbb-0000-0000-0000-000000000002\":{\"main\":\"7,12\"}},` +
			`\"baselines\":{\"bbbbbbbb-0000-0000-0000-000000000002\":{\"main\":{\"baseline\":\"7\"}}}}",` +
			`"dataChecksum":2753921024}`,
	} {
		got, err := parseCPUCheckpoint([]byte(in))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b cpuset.CPUSet) bool { return a.Equals(b) })); diff != "" {
			t.Errorf("%s: (-want +got):\n%s", name, diff)
		}
	}
}

func TestParseCPUCheckpointErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{`, "not a CPU manager checkpoint"},
		{`{"policyName":"dynamic","defaultCpuSet":""}`, `policyName: "dynamic" is not one of none, static`},
		{`{"policyName":"static","defaultCpuSet":"0-"}`, `defaultCpuSet: "0-"`},
		{`{"policyName":"static","defaultCpuSet":"","entries":{"c0ffee":"1-2"}}`, "a v1 checkpoint"},
		{`{"policyName":"static","defaultCpuSet":"","entries":{"u":{"m":"x"}}}`, `entries["u"]["m"]: "x"`},
		{`{"policyName":"static","defaultCpuSet":"","entries":{"u":{"m":"0-99999"}}}`, `is above 65535`},
		{`{"policyName":"static","defaultCpuSet":"","entries":{"":{"m":"1"}}}`, `pod UID "" is empty`},
		{`{"policyName":"static","defaultCpuSet":"","entries":{"u":7}}`, `entries["u"]: not a map`},
	} {
		if _, err := parseCPUCheckpoint([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.in, err, tc.want)
		}
	}
}

func FuzzParseCPUCheckpoint(f *testing.F) {
	f.Add([]byte(kubeletCheckpoint))
	f.Add([]byte(`{"policyName":"none","defaultCpuSet":""}`))
	f.Add([]byte(`{"policyName":"static","defaultCpuSet":"","entries":{"c0ffee":"1-2"}}`))
	f.Add([]byte(`{"policyName":"static","defaultCpuSet":"0-3","entries":{"u":{"a":"0-65535","b":"3"}}}`))
	nodes := []numaNode{{ID: 0, CPUs: cpuset.New(0, 1, 2, 3)}, {ID: 1, CPUs: cpuset.New(4, 5, 6, 7)}}
	f.Fuzz(func(t *testing.T, data []byte) {
		pods, err := parseCPUCheckpoint(data)
		if err != nil {
			return
		}
		// Whatever it holds, the inventory built from it is valid.
		k := kubeletTopology(kubeletSettings{TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "container", CPUManagerPolicy: "static"},
			nodes, kubeletCPUs{Allocatable: cpuset.New(1, 2, 3, 4, 5, 6, 7), Exclusive: cpuset.New(), Pods: pods}, true)
		if _, err := annotations.EncodeInventory(annotations.Inventory{GPUs: []annotations.GPU{}, Kubelet: k}); err != nil {
			t.Fatalf("inventory from %q: %v", data, err)
		}
	})
}

// The inventory lists each pod's exclusive CPUs per NUMA node from the checkpoint, the init
// container's retained CPUs included (PodResources would show only the app container's), and the
// NUMA nodes' exclusive counts include them.
func TestKubeletTopologyListsPodsFromTheCheckpoint(t *testing.T) {
	nodes := []numaNode{{ID: 0, CPUs: mustCPUs("0-7")}, {ID: 1, CPUs: mustCPUs("8-15")}}
	pods, err := parseCPUCheckpoint([]byte(kubeletCheckpoint))
	if err != nil {
		t.Fatal(err)
	}
	s := kubeletSettings{TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "container", CPUManagerPolicy: "static"}
	// PodResources lists pod a's app container (1-2) and pod b (7, 12).
	k := kubeletTopology(s, nodes, kubeletCPUs{Allocatable: mustCPUs("1-15"), Exclusive: cpuset.New(1, 2, 7, 12), Pods: pods}, true)
	want := []annotations.PodCPUs{
		{UID: "aaaaaaaa-0000-0000-0000-000000000001", CPUs: []int{6, 0}},
		{UID: "bbbbbbbb-0000-0000-0000-000000000002", CPUs: []int{1, 1}},
	}
	if diff := cmp.Diff(want, k.Pods); diff != "" || k.PodsV != annotations.PodCPUsVersion {
		t.Errorf("pods (podsV %d) (-want +got):\n%s", k.PodsV, diff)
	}
	if k.NUMA[0].ExclusiveCPUs != 7 || k.NUMA[1].ExclusiveCPUs != 1 {
		t.Errorf("exclusive CPUs %d and %d, want 7 (the init container's 6 and pod b's 1) and 1", k.NUMA[0].ExclusiveCPUs, k.NUMA[1].ExclusiveCPUs)
	}
	// Without the checkpoint: no list, the counts from PodResources alone (as before).
	k = kubeletTopology(s, nodes, kubeletCPUs{Allocatable: mustCPUs("1-15"), Exclusive: cpuset.New(1, 2, 7, 12)}, true)
	if k.PodsV != 0 || k.Pods != nil || k.NUMA[0].ExclusiveCPUs != 3 {
		t.Errorf("without the checkpoint: podsV %d, pods %v, NUMA 0 exclusive %d; want 0, none, 3", k.PodsV, k.Pods, k.NUMA[0].ExclusiveCPUs)
	}
}

// The source follows the checkpoint: a pod admitted or freed changes kubelet.pods and the Node is
// written once; an unchanged checkpoint (rewritten with the same content) writes nothing.
func TestKubeletTopologyFollowsTheCheckpoint(t *testing.T) {
	b := newTopologyBed(t, "topologyManagerPolicy: single-numa-node\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n")
	state := filepath.Join(t.TempDir(), "cpu_manager_state")
	b.src.withCPUState(state)
	writeState := func(body string) {
		t.Helper()
		if err := os.WriteFile(state+".tmp", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(state+".tmp", state); err != nil { // as the kubelet writes it
			t.Fatal(err)
		}
	}
	// No checkpoint yet: no list, and the refresh says why.
	if err := b.step(t); err == nil || !strings.Contains(err.Error(), "CPU manager checkpoint") {
		t.Fatalf("refresh without a checkpoint: %v, want its error", err)
	}
	if k := b.published(t); k.PodsV != 0 {
		t.Fatalf("published podsV %d without a checkpoint", k.PodsV)
	}
	writeState(`{"policyName":"static","defaultCpuSet":"0-7","checksum":1}`)
	if err := b.step(t); err != nil {
		t.Fatal(err)
	}
	if k := b.published(t); k.PodsV != 1 || len(k.Pods) != 0 {
		t.Fatalf("empty checkpoint: podsV %d, pods %v; want 1 and none", k.PodsV, k.Pods)
	}
	// An init container took 1-3 and ended; PodResources does not list them.
	writeState(`{"policyName":"static","defaultCpuSet":"0,4-7","entries":{"u1":{"init":"1-3"}},"checksum":2}`)
	if err := b.step(t); err != nil {
		t.Fatal(err)
	}
	k := b.published(t)
	if diff := cmp.Diff([]annotations.PodCPUs{{UID: "u1", CPUs: []int{3, 0}}}, k.Pods); diff != "" || k.NUMA[0].ExclusiveCPUs != 3 {
		t.Fatalf("after the init container (exclusive %d) (-want +got):\n%s", k.NUMA[0].ExclusiveCPUs, diff)
	}
	patches := b.patches()
	writeState(`{"policyName":"static","defaultCpuSet":"0,4-7","entries":{"u1":{"init":"1-3"}},"checksum":2}`)
	if err := b.step(t); err != nil {
		t.Fatal(err)
	}
	if b.patches() != patches {
		t.Fatalf("the same checkpoint rewritten: %d patches, want %d", b.patches(), patches)
	}
	// The kubelet frees the pod's CPUs.
	writeState(`{"policyName":"static","defaultCpuSet":"0-7","checksum":3}`)
	if err := b.step(t); err != nil {
		t.Fatal(err)
	}
	if k := b.published(t); len(k.Pods) != 0 || k.NUMA[0].ExclusiveCPUs != 0 || b.patches() != patches+1 {
		t.Fatalf("after the kubelet freed the CPUs: pods %v, exclusive %d, %d patches; want none, 0, %d", k.Pods, k.NUMA[0].ExclusiveCPUs, b.patches(), patches+1)
	}
}

// run polls the checkpoint's stamp: a change is published within a few polls, without a kick and
// long before the poll interval.
func TestKubeletTopologyPollsTheCheckpoint(t *testing.T) {
	b := newTopologyBed(t, "topologyManagerPolicy: single-numa-node\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n")
	state := filepath.Join(t.TempDir(), "cpu_manager_state")
	if err := os.WriteFile(state, []byte(`{"policyName":"static","defaultCpuSet":"0-7"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	b.src.withCPUState(state)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { b.src.run(ctx, time.Hour); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, ok func(*annotations.KubeletTopology) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if k := b.src.Current(); k != nil && ok(k) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: not seen within 10s", what)
	}
	waitFor("the first read", func(k *annotations.KubeletTopology) bool { return k.PodsV == 1 })
	later := time.Now().Add(time.Minute)
	if err := os.WriteFile(state, []byte(`{"policyName":"static","defaultCpuSet":"0,3-7","entries":{"u":{"m":"1-2"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(state, later, later); err != nil {
		t.Fatal(err)
	}
	waitFor("the pod's CPUs", func(k *annotations.KubeletTopology) bool { return len(k.Pods) == 1 && k.Pods[0].CPUs[0] == 2 })
}

func mustCPUs(s string) cpuset.CPUSet {
	set, err := cpuset.Parse(s)
	if err != nil {
		panic(err)
	}
	return set
}
