package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// The nodes of TestMIG: two A100-80GB in MIG mode, split by their operator (static MIG), beside two
// whole H100s.
const (
	nodeMIG  = "mig-a"
	nodeH100 = "h100-a"
)

// migSim is TestMIG's simulated-NVML file. On mig-a, card 0 (NUMA 0) is 7× 1g.10gb and card 1
// (NUMA 1) is 3g.40gb + 2g.20gb + 1g.10gb: 8 instances of 1g.10gb on the node.
const migSim = `nodes:
  mig-a:
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 0, mig: {current: enabled, instances: [{profile: 1g.10gb, count: 7}]}}
    - {model: "NVIDIA A100-SXM4-80GB", memoryMiB: 81920, numa: 1, mig: {current: enabled, instances: [{profile: 3g.40gb}, {profile: 2g.20gb}, {profile: 1g.10gb}]}}
  h100-a:
    - {model: "NVIDIA H100 80GB HBM3", memoryMiB: 81559, numa: 0, count: 2}
`

// migInstance is one instance of the MIG node as its inventory lists it, with its parent.
type migInstance struct {
	annotations.MIGInstance
	Parent      string
	ParentIndex int
	NUMA        int
}

// migNode is what TestMIG reads of the MIG node's inventory at run time: the UUIDs are the
// simulation's, never written in the test.
type migNode struct {
	parents   []annotations.GPU
	instances []migInstance // in parent order, then NVML's
}

// byProfile returns the instances of one profile, in order.
func (m *migNode) byProfile(profile string) []migInstance {
	var out []migInstance
	for _, in := range m.instances {
		if in.Profile == profile {
			out = append(out, in)
		}
	}
	return out
}

// instance returns the instance with the given MIG UUID.
func (m *migNode) instance(uuid string) (migInstance, bool) {
	for _, in := range m.instances {
		if in.UUID == uuid {
			return in, true
		}
	}
	return migInstance{}, false
}

// migCtr is a container asking for n instances of a MIG profile.
func migCtr(name, profile string, n int64) corev1.Container {
	c := ctr(name, gpu{})
	c.Resources.Limits[annotations.DefaultResourceNames().MIGResource(profile)] = *resource.NewQuantity(n, resource.DecimalSI)
	return c
}

// TestMIG places pods on the exact MIG instances of a node with two A100s in MIG mode (static
// MIG, simulated NVML) beside a node of whole H100s: by profile, by the parent's model, by the
// parent's UUID, by an instance's MIG UUID, with exclusions, a burst filling exactly the free
// 1g.10gb instances, and profiles no node can serve. Every Running container's PodResources
// devices equal its assignment, and no instance is held twice.
//
// It needs the whole of issue #23 merged: discovery and the simulated file's instances
// (pkg/device/nvidia, pkg/device/sim), the plugin's MIG resources and Allocate (pkg/deviceplugin),
// and placement by instance (pkg/scheduler).
func TestMIG(t *testing.T) {
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	path := filepath.Join(t.TempDir(), "mig-gpus.yaml")
	if err := os.WriteFile(path, []byte(migSim), 0o644); err != nil {
		t.Fatalf("simulation file: %v", err)
	}
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries, SimFile: path,
		Nodes: []stack.NodeSpec{{Name: nodeMIG, Shares: 1}, {Name: nodeH100, Shares: 1}}})
	e := &env{Stack: s, client: s.Cluster.Client}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	m := e.waitMIGAdvertised(t)
	report := &migReport{}

	scenarios := []struct {
		name string
		run  func(*testing.T, *env, *migNode, *migReport)
	}{
		{"by profile", testMIGByProfile},
		{"by the parent's model", testMIGByModel},
		{"by the parent's UUID", testMIGByParentUUID},
		{"by an instance's MIG UUID", testMIGByInstanceUUID},
		{"exclusions", testMIGExclusions},
		{"whole cards only on cards out of MIG mode", testMIGWholeCards},
		{"burst of 1g.10gb fills exactly the free instances", testMIGBurst},
		{"profiles no node can serve stay Pending", testMIGImpossible},
		{"an instance turning unhealthy serves nobody until it recovers", testMIGUnhealthy},
	}
	for _, sc := range scenarios {
		if !t.Run(sc.name, func(t *testing.T) {
			t.Cleanup(func() { e.deleteAll(t) })
			sc.run(t, e, m, report)
		}) {
			if err := e.componentsAlive(); err != nil {
				t.Fatalf("stopping after %q: %v", sc.name, err)
			}
		}
	}
	report.log(t)
}

// waitMIGAdvertised waits until the MIG node's inventory lists both parents in MIG mode with their
// 10 instances, unhealthy as whole cards, and its kubelet has every instance allocatable under its
// profile's resource; it returns the node as the inventory describes it.
func (e *env) waitMIGAdvertised(t *testing.T) *migNode {
	t.Helper()
	want := map[string]int{"1g.10gb": 8, "2g.20gb": 1, "3g.40gb": 1}
	var m *migNode
	stack.Wait(t, runTimeout, "node "+nodeMIG+" advertising its MIG instances", func() (bool, string, error) {
		inv, err := e.Inventory(context.Background(), nodeMIG)
		if err != nil {
			return false, err.Error(), nil //nolint:nilerr // polling: not published yet
		}
		got := &migNode{}
		count := map[string]int{}
		for _, g := range inv.GPUs {
			if g.MIG == nil || g.MIG.Mode != annotations.MIGEnabled {
				return false, fmt.Sprintf("card %s is not in MIG mode enabled: %+v", g.UUID, g.MIG), nil
			}
			if g.Healthy {
				return false, "", fmt.Errorf("card %s in MIG mode is listed healthy", g.UUID)
			}
			got.parents = append(got.parents, g)
			for _, in := range g.MIG.Instances {
				got.instances = append(got.instances, migInstance{MIGInstance: in, Parent: g.UUID, ParentIndex: g.Index, NUMA: g.NUMA})
				count[in.Profile]++
			}
		}
		if len(got.parents) != 2 || !maps.Equal(count, want) {
			return false, fmt.Sprintf("%d cards, instances %v; want 2 cards, %v", len(got.parents), count, want), nil
		}
		alloc, err := e.MIGAllocatable(context.Background(), nodeMIG)
		if err != nil {
			return false, err.Error(), nil //nolint:nilerr // polling: the kubelet may not answer yet
		}
		for profile, n := range want {
			r := string(e.Names.MIGResource(profile))
			if len(alloc[r]) != n {
				return false, fmt.Sprintf("kubelet has %d allocatable %s, want %d", len(alloc[r]), r, n), nil
			}
		}
		gpus, err := e.Allocatable(context.Background(), nodeMIG)
		if err != nil {
			return false, err.Error(), nil //nolint:nilerr // polling: the kubelet may not answer yet
		}
		if len(gpus) != 0 {
			return false, "", fmt.Errorf("a node whose cards are all in MIG mode has %d allocatable %s", len(gpus), e.Names.GPU)
		}
		m = got
		return true, "", nil
	})
	return m
}

// migHeld is what one container holds of MIG instances, from the kubelet's record.
type migHeld struct {
	Node      string
	IDs       []string // PodResources' MIG devices, sorted
	Instances []migInstance
}

// migTruth checks each named pod, container by container: the kubelet's PodResources MIG devices
// equal the assignment, every assigned device is an instance of the node with the parent and
// profile the assignment names, and the plugin's allocation record agrees. It returns what each
// container holds, keyed "pod/container".
func (e *env) migTruth(t *testing.T, m *migNode, names ...string) map[string]migHeld {
	t.Helper()
	out := map[string]migHeld{}
	records := map[string]map[stack.ContainerRef][]string{}
	for _, name := range names {
		p, a := e.assignment(t, name)
		if records[a.Node] == nil {
			devs, err := e.MIGDevices(ctx(t), a.Node)
			if err != nil {
				t.Fatalf("%v", err)
			}
			records[a.Node] = devs
		}
		for _, c := range p.Spec.Containers {
			ref := stack.ContainerRef{Namespace: namespace, Pod: name, Container: c.Name}
			ca := a.Container(c.Name)
			if ca == nil {
				continue
			}
			got := records[a.Node][ref]
			if diff := cmp.Diff(slices.Sorted(slices.Values(ca.IDs())), got); diff != "" {
				t.Errorf("%s on %s: PodResources MIG devices differ from the assignment (-assigned +kubelet):\n%s", ref, a.Node, diff)
			}
			h := migHeld{Node: a.Node, IDs: got}
			for _, d := range ca.Devices {
				in, ok := m.instance(d.UUID)
				switch {
				case a.Node != nodeMIG || !ok:
					t.Errorf("%s: device %s on %s is no MIG instance of %s", ref, d.UUID, a.Node, nodeMIG)
					continue
				case d.Parent != in.Parent || d.Profile != in.Profile || d.ID != d.UUID:
					t.Errorf("%s: assigned %+v, but the inventory has instance %s of profile %s on %s", ref, d, in.UUID, in.Profile, in.Parent)
				}
				h.Instances = append(h.Instances, in)
			}
			out[name+"/"+c.Name] = h
		}
	}
	forRecords := map[string]held{}
	for k, h := range out {
		forRecords[k] = held{Node: h.Node, IDs: h.IDs}
	}
	e.waitAllocationRecords(t, forRecords)
	return out
}

// noMIGDoubleBooking checks the MIG node's PodResources: no MIG UUID is held by two containers.
func (e *env) noMIGDoubleBooking(t *testing.T) {
	t.Helper()
	devs, err := e.MIGDevices(ctx(t), nodeMIG)
	if err != nil {
		t.Fatalf("%v", err)
	}
	holder := map[string]stack.ContainerRef{}
	for ref, ids := range devs {
		for _, id := range ids {
			if other, dup := holder[id]; dup {
				t.Errorf("instance %s is held by %s and %s", id, other, ref)
			}
			holder[id] = ref
		}
	}
}

// runMIG creates pods, waits until they run, checks the truth and the absence of double booking,
// records each container in the report and returns what each holds.
func (e *env) runMIG(t *testing.T, m *migNode, report *migReport, pods ...*corev1.Pod) map[string]migHeld {
	t.Helper()
	e.create(t, pods...)
	e.waitRunning(t, podNames(pods)...)
	hs := e.migTruth(t, m, podNames(pods)...)
	e.noMIGDoubleBooking(t)
	for _, p := range pods {
		report.add(p, hs)
	}
	return hs
}

func testMIGByProfile(t *testing.T, e *env, m *migNode, report *migReport) {
	hs := e.runMIG(t, m, report,
		pod("prof-3g", nil, migCtr("main", "3g.40gb", 1)),
		pod("prof-2g", nil, migCtr("main", "2g.20gb", 1)),
		pod("prof-1g-pair", nil, migCtr("main", "1g.10gb", 2)),
	)
	for key, profile := range map[string]string{"prof-3g/main": "3g.40gb", "prof-2g/main": "2g.20gb", "prof-1g-pair/main": "1g.10gb"} {
		for _, in := range hs[key].Instances {
			if in.Profile != profile {
				t.Errorf("%s got instance %s of profile %s, want %s", key, in.UUID, in.Profile, profile)
			}
		}
	}
	if n := len(hs["prof-1g-pair/main"].Instances); n != 2 {
		t.Errorf("prof-1g-pair holds %d instances, want 2", n)
	}
}

func testMIGByModel(t *testing.T, e *env, m *migNode, report *migReport) {
	hs := e.runMIG(t, m, report, pod("model-a100", map[string]string{annotations.UseGPUType: "A100"}, migCtr("main", "1g.10gb", 1)))
	if in := hs["model-a100/main"].Instances; len(in) != 1 {
		t.Errorf("model-a100 holds %v", in)
	}
	// The instances' parents are A100s: no H100 has a 1g.10gb instance.
	e.create(t, pod("model-h100", map[string]string{annotations.UseGPUType: "H100"}, migCtr("main", "1g.10gb", 1)))
	msg := e.waitUnschedulable(t, "model-h100")
	report.addPending("model-h100", "1× 1g.10gb, use-gputype=H100", msg)
	if !strings.Contains(msg, "1g.10gb") {
		t.Errorf("the reason does not name the profile 1g.10gb: %s", msg)
	}
}

func testMIGByParentUUID(t *testing.T, e *env, m *migNode, report *migReport) {
	// Card 1 has one 1g.10gb instance; asked by its parent's UUID, the pod gets exactly that one.
	parent := m.parents[1].UUID
	want := m.byProfile("1g.10gb")
	want = slices.DeleteFunc(want, func(in migInstance) bool { return in.Parent != parent })
	hs := e.runMIG(t, m, report, pod("parent-uuid", map[string]string{annotations.UseGPUUUID: parent}, migCtr("main", "1g.10gb", 1)))
	got := hs["parent-uuid/main"].Instances
	if len(got) != 1 || len(want) != 1 || got[0].UUID != want[0].UUID {
		t.Errorf("parent-uuid holds %v, want card %s's only 1g.10gb instance %v", got, parent, want)
	}
}

func testMIGByInstanceUUID(t *testing.T, e *env, m *migNode, report *migReport) {
	// The 5th 1g.10gb instance of card 0: binpack alone would take another first.
	target := m.byProfile("1g.10gb")[4]
	hs := e.runMIG(t, m, report, pod("mig-uuid", map[string]string{annotations.UseGPUUUID: target.UUID}, migCtr("main", "1g.10gb", 1)))
	if got := hs["mig-uuid/main"].Instances; len(got) != 1 || got[0].UUID != target.UUID {
		t.Errorf("mig-uuid holds %v, want %s", got, target.UUID)
	}
	// A MIG UUID of another profile accepts no 1g.10gb instance.
	other := m.byProfile("3g.40gb")[0]
	e.create(t, pod("mig-uuid-other-profile", map[string]string{annotations.UseGPUUUID: other.UUID}, migCtr("main", "1g.10gb", 1)))
	msg := e.waitUnschedulable(t, "mig-uuid-other-profile")
	report.addPending("mig-uuid-other-profile", "1× 1g.10gb, use-gpuuuid=<the 3g.40gb>", msg)
}

func testMIGExclusions(t *testing.T, e *env, m *migNode, report *migReport) {
	card0 := m.parents[0].UUID
	// Excluding card 0 leaves card 1's one 1g.10gb instance.
	hs := e.runMIG(t, m, report, pod("not-card0", map[string]string{annotations.NoUseGPUUUID: card0}, migCtr("main", "1g.10gb", 1)))
	for _, in := range hs["not-card0/main"].Instances {
		if in.Parent == card0 {
			t.Errorf("not-card0 got instance %s of the excluded card %s", in.UUID, card0)
		}
	}
	// Excluding that one instance by its MIG UUID as well leaves none.
	last := hs["not-card0/main"].Instances
	e.delete(t, "not-card0")
	if len(last) == 1 {
		ann := map[string]string{annotations.NoUseGPUUUID: card0 + "," + last[0].UUID}
		e.create(t, pod("not-card0-nor-it", ann, migCtr("main", "1g.10gb", 1)))
		msg := e.waitUnschedulable(t, "not-card0-nor-it")
		report.addPending("not-card0-nor-it", "1× 1g.10gb, nouse-gpuuuid=<card 0>,<its one 1g.10gb>", msg)
	}
	// Excluding the model excludes every instance.
	e.create(t, pod("not-a100", map[string]string{annotations.NoUseGPUType: "A100"}, migCtr("main", "3g.40gb", 1)))
	msg := e.waitUnschedulable(t, "not-a100")
	report.addPending("not-a100", "1× 3g.40gb, nouse-gputype=A100", msg)
}

func testMIGWholeCards(t *testing.T, e *env, m *migNode, report *migReport) {
	// Three whole cards: the node of H100s has two, the A100s in MIG mode serve none.
	e.create(t, pod("whole-1", nil), pod("whole-2", nil))
	e.waitRunning(t, "whole-1", "whole-2")
	for name, h := range e.truth(t, "whole-1", "whole-2") {
		if h.Node != nodeH100 {
			t.Errorf("%s runs on %s, want %s (cards in MIG mode serve no %s)", name, h.Node, nodeH100, e.Names.GPU)
		}
	}
	e.create(t, pod("whole-3", map[string]string{annotations.UseGPUType: "A100"}))
	msg := e.waitUnschedulable(t, "whole-3")
	report.addPending("whole-3", "1 whole card, use-gputype=A100", msg)
}

func testMIGBurst(t *testing.T, e *env, m *migNode, report *migReport) {
	free := len(m.byProfile("1g.10gb")) // 7 on card 0, 1 on card 1
	ns := names("burst-1g", free)
	var pods []*corev1.Pod
	for _, n := range ns {
		pods = append(pods, pod(n, nil, migCtr("main", "1g.10gb", 1)))
	}
	hs := e.runMIG(t, m, report, pods...)
	var got []string
	for _, h := range hs {
		got = append(got, h.IDs...)
	}
	var want []string
	for _, in := range m.byProfile("1g.10gb") {
		want = append(want, in.UUID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the burst holds other instances than every 1g.10gb of the node (-node +held):\n%s", diff)
	}
	// One more finds none free, and the reason names the profile.
	e.create(t, pod("burst-1g-extra", nil, migCtr("main", "1g.10gb", 1)))
	msg := e.waitUnschedulable(t, "burst-1g-extra")
	report.addPending("burst-1g-extra", "1× 1g.10gb, none free", msg)
	if !strings.Contains(msg, "1g.10gb") {
		t.Errorf("the reason does not name the profile 1g.10gb: %s", msg)
	}
	e.noMIGDoubleBooking(t)
}

func testMIGImpossible(t *testing.T, e *env, m *migNode, report *migReport) {
	// No card of either node is split into 7g.80gb, and card 1's one 3g.40gb cannot serve two.
	for _, p := range []struct {
		name, asked string
		pod         *corev1.Pod
		profile     string
	}{
		{"no-7g", "1× 7g.80gb", pod("no-7g", nil, migCtr("main", "7g.80gb", 1)), "7g.80gb"},
		{"two-3g", "2× 3g.40gb", pod("two-3g", nil, migCtr("main", "3g.40gb", 2)), "3g.40gb"},
	} {
		e.create(t, p.pod)
		msg := e.waitUnschedulable(t, p.name)
		report.addPending(p.name, p.asked, msg)
		if !strings.Contains(msg, p.profile) {
			t.Errorf("%s: the reason does not name the profile %s: %s", p.name, p.profile, msg)
		}
		if !strings.HasPrefix(msg, "0/2 nodes are available") {
			t.Errorf("%s: want the scheduler's summary of 2 nodes, got %q", p.name, msg)
		}
	}
}

// migReport is the table the closing note asks for: pod, asked, instance, parent,
// PodResources.
type migReport struct {
	rows [][5]string
}

func (r *migReport) add(p *corev1.Pod, hs map[string]migHeld) {
	for _, c := range p.Spec.Containers {
		h, ok := hs[p.Name+"/"+c.Name]
		if !ok {
			continue
		}
		var asked []string
		for name, q := range c.Resources.Limits {
			if annotations.DefaultResourceNames().IsMIGResource(name) {
				asked = append(asked, q.String()+"× "+strings.TrimPrefix(string(name), annotations.DefaultResourceNames().MIGResourcePrefix()))
			}
		}
		for k, v := range p.Annotations {
			asked = append(asked, k+"="+v)
		}
		slices.Sort(asked)
		var instances, parents []string
		for _, in := range h.Instances {
			instances = append(instances, in.UUID+" ("+in.Profile+")")
			parents = append(parents, fmt.Sprintf("%s (card %d, NUMA %d)", in.Parent, in.ParentIndex, in.NUMA))
		}
		r.rows = append(r.rows, [5]string{p.Name, strings.Join(asked, ", "), strings.Join(instances, ", "), strings.Join(parents, ", "), strings.Join(h.IDs, ",")})
	}
}

func (r *migReport) addPending(name, asked, reason string) {
	r.rows = append(r.rows, [5]string{name, asked, "Pending", "", reason})
}

func (r *migReport) log(t *testing.T) {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "pod\tasked\tinstance\tparent\tPodResources")
	for _, row := range r.rows {
		fmt.Fprintln(w, strings.Join(row[:], "\t"))
	}
	_ = w.Flush()
	t.Logf("MIG placements:\n%s", b.String())
}

// testMIGUnhealthy: an XID on the node's one 2g.20gb instance takes it out of the inventory's
// healthy instances and the kubelet's allocatable; a 2g.20gb pod stays Pending with a reason naming
// the profile until the instance recovers, then runs on it.
func testMIGUnhealthy(t *testing.T, e *env, m *migNode, report *migReport) {
	twos := m.byProfile("2g.20gb")
	if len(twos) != 1 {
		t.Fatalf("the MIG node has %d 2g.20gb instances, want 1", len(twos))
	}
	in := twos[0]
	e.SetMIGHealth(t, nodeMIG, in.UUID, false)
	recovered := false
	t.Cleanup(func() {
		if !recovered {
			e.SetMIGHealth(t, nodeMIG, in.UUID, true)
		}
	})
	p := pod("sick-2g", nil, migCtr("main", "2g.20gb", 1))
	e.create(t, p)
	msg := e.waitUnschedulable(t, p.Name)
	report.addPending(p.Name, "1× 2g.20gb, its one instance unhealthy", msg)
	if !strings.Contains(msg, "2g.20gb") {
		t.Errorf("the reason does not name the profile 2g.20gb: %s", msg)
	}
	e.SetMIGHealth(t, nodeMIG, in.UUID, true)
	recovered = true
	e.waitRunning(t, p.Name)
	hs := e.migTruth(t, m, p.Name)
	e.noMIGDoubleBooking(t)
	report.add(p, hs)
	if got := hs["sick-2g/main"].Instances; len(got) != 1 || got[0].UUID != in.UUID {
		t.Errorf("after recovery sick-2g holds %v, want %s", got, in.UUID)
	}
}
