package deviceplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// topologyBed is a node whose kubelet has a configuration file, a sysfs of two NUMA nodes (CPUs
// 0-3 and 4-7) and a PodResources API, with the plugin's inventory writer and a fake API server.
type topologyBed struct {
	config   string
	pr       *fakePodResources
	client   *fake.Clientset
	src      *kubeletTopologySource
	writer   *inventoryWriter
	enqueued int
	writes   int
}

func newTopologyBed(t *testing.T, config string) *topologyBed {
	t.Helper()
	dir := t.TempDir()
	b := &topologyBed{config: filepath.Join(dir, "config.yaml"), pr: &fakePodResources{},
		client: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}})}
	b.writeConfig(t, config)
	sysfs := filepath.Join(dir, "sys")
	writeTree(t, sysfs, map[string]string{
		"devices/system/node/node0/cpulist": "0-3\n", "devices/system/node/node0/distance": "10 20\n",
		"devices/system/node/node1/cpulist": "4-7\n", "devices/system/node/node1/distance": "20 10\n",
	})
	// Static CPU manager with CPU 0 reserved: allocatable 1-7.
	b.pr.set([]int64{1, 2, 3, 4, 5, 6, 7}, nil)
	p := testPlugin(t, testCards(2, nil), 1)
	b.writer = newInventoryWriter(p, b.client, testNode, func() (string, bool) {
		n, err := b.client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
		if err != nil {
			return "", false
		}
		return n.Annotations[annotations.GPUInventory], true
	}, logr.Discard())
	b.src = newKubeletTopologySource(b.config, sysfs, true, b.pr, func() { b.enqueued++ }, logr.Discard())
	b.writer.kubelet = b.src.Current
	return b
}

func (b *topologyBed) writeConfig(t *testing.T, body string) {
	t.Helper()
	if err := os.WriteFile(b.config, []byte(kubeletConfigHeader+body), 0o600); err != nil {
		t.Fatal(err)
	}
	// A distinct modification time, whatever the file system's clock granularity.
	b.writes++
	mt := time.Now().Add(time.Duration(b.writes) * time.Minute)
	if err := os.Chtimes(b.config, mt, mt); err != nil {
		t.Fatal(err)
	}
}

// step is one refresh of the source and, when it asked for one, one inventory sync (as the writer's
// queue would run it); it returns the refresh's error.
func (b *topologyBed) step(t *testing.T) error {
	t.Helper()
	before := b.enqueued
	err := b.src.refresh(context.Background())
	if b.enqueued != before {
		if err := b.writer.sync(context.Background()); err != nil {
			t.Fatalf("inventory sync: %v", err)
		}
	}
	return err
}

func (b *topologyBed) patches() int {
	n := 0
	for _, a := range b.client.Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

// published is the kubelet field of the Node's inventory.
func (b *topologyBed) published(t *testing.T) *annotations.KubeletTopology {
	t.Helper()
	n, err := b.client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := annotations.DecodeInventory(n.Annotations[annotations.GPUInventory])
	if err != nil {
		t.Fatalf("published inventory: %v", err)
	}
	return inv.Kubelet
}

func TestKubeletTopologyIsWrittenOnlyWhenItChanges(t *testing.T) {
	b := newTopologyBed(t, "topologyManagerPolicy: single-numa-node\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n")
	if err := b.step(t); err != nil {
		t.Fatal(err)
	}
	want := &annotations.KubeletTopology{TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "container", CPUManagerPolicy: "static",
		DeviceTopology: true, NUMA: []annotations.NUMACPUs{
			{ID: 0, CPUs: 4, ReservedCPUs: 1, Distances: []int{10, 20}},
			{ID: 1, CPUs: 4, Distances: []int{20, 10}},
		}}
	if diff := cmp.Diff(want, b.published(t)); diff != "" {
		t.Fatalf("published (-want +got):\n%s", diff)
	}
	if b.patches() != 1 {
		t.Fatalf("%d patches after the first refresh, want 1", b.patches())
	}

	// Steady state: refreshes find nothing new and ask for no sync; a sync the informer triggers
	// finds the Node up to date. The configuration file rewritten with the same content is re-read
	// and changes nothing either.
	for range 3 {
		if err := b.step(t); err != nil {
			t.Fatal(err)
		}
	}
	b.writeConfig(t, "topologyManagerPolicy: single-numa-node\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n")
	if err := b.step(t); err != nil {
		t.Fatal(err)
	}
	if err := b.writer.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b.enqueued != 1 || b.patches() != 1 {
		t.Fatalf("steady state: %d syncs asked for and %d patches, want 1 and 1", b.enqueued, b.patches())
	}

	// A Guaranteed container takes CPUs 1-2 (node 0) and 5 (node 1).
	b.pr.set([]int64{1, 2, 3, 4, 5, 6, 7}, map[string][][]int64{"a": {{1, 2, 5}}})
	if err := b.step(t); err != nil {
		t.Fatal(err)
	}
	want.NUMA[0].ExclusiveCPUs, want.NUMA[1].ExclusiveCPUs = 2, 1
	if diff := cmp.Diff(want, b.published(t)); diff != "" {
		t.Fatalf("after a container took CPUs (-want +got):\n%s", diff)
	}

	// The kubelet's configuration changes (it restarts with it).
	b.writeConfig(t, "topologyManagerPolicy: restricted\ntopologyManagerScope: pod\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n")
	if err := b.step(t); err != nil {
		t.Fatal(err)
	}
	want.TopologyManagerPolicy, want.TopologyManagerScope = "restricted", "pod"
	if diff := cmp.Diff(want, b.published(t)); diff != "" {
		t.Fatalf("after the configuration changed (-want +got):\n%s", diff)
	}
	if b.enqueued != 3 || b.patches() != 3 {
		t.Fatalf("%d syncs asked for and %d patches, want 3 and 3", b.enqueued, b.patches())
	}

	// A broken file keeps the last good settings (the running kubelet does too) and says why;
	// the CPUs are still followed.
	b.writeConfig(t, "topologyManagerPolicy: [\n")
	b.pr.set([]int64{1, 2, 3, 4, 5, 6, 7}, nil)
	if err := b.step(t); err == nil {
		t.Error("a broken configuration file gave no error")
	}
	want.NUMA[0].ExclusiveCPUs, want.NUMA[1].ExclusiveCPUs = 0, 0
	if diff := cmp.Diff(want, b.published(t)); diff != "" {
		t.Fatalf("with a broken configuration file (-want +got):\n%s", diff)
	}

	// PodResources down: nothing changes, nothing is written.
	b.pr.err = errors.New("connection refused")
	if err := b.step(t); err == nil {
		t.Error("PodResources down gave no error")
	}
	if b.enqueued != 4 || b.patches() != 4 {
		t.Fatalf("%d syncs asked for and %d patches, want 4 and 4", b.enqueued, b.patches())
	}
}

func TestKubeletTopologyNotPublishedUntilTheConfigurationIsRead(t *testing.T) {
	b := newTopologyBed(t, "topologyManagerPolicy: single-numa\n")
	if err := b.step(t); err == nil {
		t.Fatal("a bad configuration file gave no error")
	}
	if b.src.Current() != nil || b.enqueued != 0 {
		t.Fatalf("published %+v (%d syncs) from a bad file, want nothing", b.src.Current(), b.enqueued)
	}
	// The inventory without the kubelet field is still the cards'.
	if err := b.writer.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if k := b.published(t); k != nil {
		t.Fatalf("published %+v, want no kubelet field", k)
	}
	b.writeConfig(t, "topologyManagerPolicy: single-numa-node\n")
	if err := b.step(t); err != nil {
		t.Fatal(err)
	}
	if k := b.published(t); k == nil || k.TopologyManagerPolicy != "single-numa-node" {
		t.Fatalf("published %+v, want single-numa-node", k)
	}
}

func TestKubeletTopologyKickRefreshesSoon(t *testing.T) {
	b := newTopologyBed(t, "cpuManagerPolicy: static\n")
	var changes atomic.Int32
	b.src.changed = func() { changes.Add(1) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.src.run(ctx, time.Hour); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the first refresh", func() bool { return changes.Load() == 1 })
	b.pr.set([]int64{1, 2, 3, 4, 5, 6, 7}, map[string][][]int64{"a": {{4}}})
	b.src.Kick()
	b.src.Kick() // a second kick while one is pending does not block
	waitFor(t, "the refresh after a kick", func() bool { return changes.Load() == 2 })
	if got := b.src.Current().NUMA[1].ExclusiveCPUs; got != 1 {
		t.Errorf("NUMA node 1 has %d exclusive CPUs after the kick, want 1", got)
	}
}
