package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

const (
	a40  = "NVIDIA A40"
	t4   = "Tesla T4"
	a100 = "NVIDIA A100-SXM4-80GB"
)

func node(t *testing.T, name string, inv *annotations.Inventory) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if inv != nil {
		enc, err := annotations.EncodeInventory(*inv)
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations = map[string]string{annotations.GPUInventory: enc}
	}
	return n
}

// holder is a running pod bound to node whose container c holds devs by its assignment.
func holder(t *testing.T, ns, name, nodeName, c string, devs ...annotations.DeviceAssignment) *corev1.Pod {
	t.Helper()
	enc, err := annotations.EncodeAssignment(annotations.Assignment{Node: nodeName,
		Containers: []annotations.ContainerAssignment{{Name: c, Devices: devs}}})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name),
			Annotations: map[string]string{annotations.GPUAssignment: enc}},
		Spec:   corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: c}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// fixture is a cluster of four nodes:
//   - gpu-a: two A40s on NUMA 0 and 1, a best-effort TopologyManager; card 0 held whole by ml/train;
//   - gpu-b: a T4 shared four ways (mode mps, kernel memory limits), slot 0 held by ml/infer (4 GiB, 25%),
//     and an unhealthy T4;
//   - gpu-c: a whole A100 and one in MIG mode with two 1g.10gb instances, one held by ml/tiny;
//   - cpu-d: no inventory.
func fixture(t *testing.T) []runtime.Object {
	t.Helper()
	a := &annotations.Inventory{GPUs: []annotations.GPU{
		{UUID: "GPU-a0", Index: 0, Model: a40, MemoryMiB: 46068, NUMA: 0, Healthy: true, Shares: 1},
		{UUID: "GPU-a1", Index: 1, Model: a40, MemoryMiB: 46068, NUMA: 1, Healthy: true, Shares: 1},
	}, Kubelet: &annotations.KubeletTopology{TopologyManagerPolicy: annotations.TopologyPolicyBestEffort,
		TopologyManagerScope: annotations.TopologyScopeContainer, CPUManagerPolicy: annotations.CPUManagerPolicyNone,
		DeviceTopology: true, NUMA: []annotations.NUMACPUs{{ID: 0, CPUs: 16}, {ID: 1, CPUs: 16}}}}
	b := &annotations.Inventory{GPUs: []annotations.GPU{
		{UUID: "GPU-b0", Index: 0, Model: t4, MemoryMiB: 15360, Healthy: true, Shares: 4},
		{UUID: "GPU-b1", Index: 1, Model: t4, MemoryMiB: 15360, Healthy: false, Shares: 1},
	}, Sharing: &annotations.Sharing{Mode: annotations.SharingMPS, Ready: true, EnforcementV: 1,
		Memory: annotations.EnforcementKernel, Compute: annotations.EnforcementMPSDaemon}}
	c := &annotations.Inventory{GPUs: []annotations.GPU{
		{UUID: "GPU-c0", Index: 0, Model: a100, MemoryMiB: 81920, Healthy: true, Shares: 1},
		{UUID: "GPU-c1", Index: 1, Model: a100, MemoryMiB: 81920, Healthy: false, Shares: 1,
			MIG: &annotations.MIG{Mode: annotations.MIGEnabled, Instances: []annotations.MIGInstance{
				{UUID: "MIG-c1-0", Profile: "1g.10gb", Size: 1, MemoryMiB: 9728, Healthy: true},
				{UUID: "MIG-c1-1", Profile: "1g.10gb", Start: 1, Size: 1, MemoryMiB: 9728, Healthy: true},
			}}},
	}}
	return []runtime.Object{
		node(t, "gpu-a", a), node(t, "gpu-b", b), node(t, "gpu-c", c), node(t, "cpu-d", nil),
		holder(t, "ml", "train", "gpu-a", "main", annotations.DeviceAssignment{UUID: "GPU-a0", ID: "GPU-a0", MemoryMiB: 46068, Cores: 100}),
		holder(t, "ml", "infer", "gpu-b", "srv", annotations.DeviceAssignment{UUID: "GPU-b0", ID: "GPU-b0::0", MemoryMiB: 4096, Cores: 25}),
		holder(t, "ml", "tiny", "gpu-c", "m", annotations.DeviceAssignment{UUID: "MIG-c1-0", ID: "MIG-c1-0", Parent: "GPU-c1", Profile: "1g.10gb"}),
	}
}

// gpuPod is a pending pod in ns "ml" asking one whole card of a model containing gpuType.
func gpuPod(name, gpuType string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("ml-" + name),
			Annotations: map[string]string{annotations.UseGPUType: gpuType}},
		Spec: corev1.PodSpec{SchedulerName: "cardinal-scheduler", Containers: []corev1.Container{{Name: "main", Image: "x",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{annotations.ResourceGPU: resource.MustParse("1")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// runCmd runs kubectl cardinal args against a fake clientset of objs.
func runCmd(t *testing.T, objs []runtime.Object, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cs := fake.NewClientset(objs...)
	client := func(kubeconfig, kubeContext string) (kubernetes.Interface, string, error) { return cs, "default", nil }
	var out, errOut bytes.Buffer
	code = Main(context.Background(), args, &out, &errOut, client)
	return out.String(), errOut.String(), code
}

func TestNodesJSON(t *testing.T) {
	out, errOut, code := runCmd(t, fixture(t), "nodes", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []NodeSummary
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	byName := map[string]NodeSummary{}
	for _, r := range rows {
		byName[r.Name] = r
	}
	if _, ok := byName["cpu-d"]; ok || len(rows) != 3 {
		t.Fatalf("rows %v, want gpu-a, gpu-b, gpu-c (no node without an inventory)", rows)
	}
	a := byName["gpu-a"]
	if a.Cards != 2 || a.FreeWhole != 1 || a.FreeSlots != 1 || a.Slots != 2 || a.FreeMemoryMiB != 46068 ||
		a.Healthy != 2 || a.Unhealthy != 0 || len(a.NUMA) != 2 || a.TopologyPolicy != "best-effort" || a.MIGTotal != 0 {
		t.Errorf("gpu-a: %+v, want 2 cards, 1 free (1 slot, 46068 MiB), NUMA 0,1, best-effort", a)
	}
	b := byName["gpu-b"]
	if b.Cards != 2 || b.FreeWhole != 0 || b.FreeSlots != 3 || b.Slots != 4 || b.FreeMemoryMiB != 15360-4096 ||
		b.Healthy != 1 || b.Unhealthy != 1 || b.TopologyPolicy != "none" || b.Sharing != "mps" || b.Memory != "kernel" || b.Compute != "mps-daemon" {
		t.Errorf("gpu-b: %+v, want 1 healthy shared card with 3 of 4 slots and 11264 MiB free, 1 unhealthy, policy none", b)
	}
	c := byName["gpu-c"]
	if c.Cards != 2 || c.FreeWhole != 1 || c.Healthy != 1 || c.Unhealthy != 0 || c.MIGFree != 1 || c.MIGTotal != 2 ||
		!strings.Contains(c.Models, "in MIG mode") {
		t.Errorf("gpu-c: %+v, want 1 free whole card, the MIG parent in neither health count, 1/2 instances free", c)
	}
}

func TestNodesTable(t *testing.T) {
	out, errOut, code := runCmd(t, fixture(t), "nodes")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "NODE") {
		t.Fatalf("table:\n%s\nwant a header and 3 nodes", out)
	}
	for _, want := range [][]string{
		{"gpu-a", "2x NVIDIA A40", "1/2", "45.0Gi/90.0Gi", "0,1", "best-effort"},
		{"gpu-b", "3/4", "11Gi/15Gi", "1/2", "none", "mps (memory kernel, compute mps-daemon)"},
		{"gpu-c", "1/2", "in MIG mode"},
	} {
		found := false
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, want[0]+" ") {
				found = true
				for _, w := range want[1:] {
					if !strings.Contains(l, w) {
						t.Errorf("row %q lacks %q", l, w)
					}
				}
			}
		}
		if !found {
			t.Errorf("no row for %s in\n%s", want[0], out)
		}
	}
	t.Logf("\n%s", out)
}

func TestCardsHolders(t *testing.T) {
	out, errOut, code := runCmd(t, fixture(t), "cards", "gpu-c", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []CardInfo
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	states := map[string]string{}
	for _, r := range rows {
		states[r.UUID] = r.State
	}
	want := map[string]string{"GPU-c0": "free", "GPU-c1": "mig", "MIG-c1-0": "held", "MIG-c1-1": "free"}
	for u, s := range want {
		if states[u] != s {
			t.Errorf("%s: state %q, want %q (all: %v)", u, states[u], s, states)
		}
	}
	for _, r := range rows {
		if r.UUID == "MIG-c1-0" && (len(r.Holders) != 1 || r.Holders[0].Pod != "ml/tiny" || r.Holders[0].Container != "m" || r.Parent != "GPU-c1") {
			t.Errorf("MIG-c1-0: %+v, want held by ml/tiny container m, parent GPU-c1", r)
		}
	}

	out, errOut, code = runCmd(t, fixture(t), "cards", "gpu-b")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var shared string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "0 ") {
			shared = l
		}
	}
	for _, w := range []string{"GPU-b0", "shared", "ml/infer", "srv", "GPU-b0::0", "4Gi", "25%"} {
		if !strings.Contains(shared, w) {
			t.Errorf("card 0 row %q lacks %q", shared, w)
		}
	}
	if !strings.Contains(out, "unhealthy") {
		t.Errorf("cards gpu-b:\n%s\nwant card 1 unhealthy", out)
	}
	t.Logf("\n%s", out)
}

func TestExplainFitsOneNode(t *testing.T) {
	objs := append(fixture(t), gpuPod("want-a40", "A40"))
	out, errOut, code := runCmd(t, objs, "explain", "want-a40", "-n", "ml", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var x Explanation
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if x.Pod != "ml/want-a40" || x.Node != "gpu-a" || x.NodePolicy != "binpack" || x.GPUPolicy != "binpack" {
		t.Errorf("explanation %+v, want ml/want-a40 on gpu-a under binpack", x)
	}
	if len(x.Devices) != 1 || len(x.Devices[0].Devices) != 1 || x.Devices[0].Devices[0].UUID != "GPU-a1" {
		t.Errorf("devices %+v, want GPU-a1, the free A40", x.Devices)
	}
	if len(x.Nodes) != 4 {
		t.Fatalf("nodes %+v, want a verdict for each of the 4 nodes", x.Nodes)
	}
	for _, n := range x.Nodes {
		switch {
		case n.Name == "gpu-a":
			if !n.Fits || n.Reason != "" {
				t.Errorf("gpu-a: %+v, want it fits", n)
			}
		case n.Fits || n.Reason == "":
			t.Errorf("%s: %+v, want a reason", n.Name, n)
		case n.Name == "cpu-d" && !strings.Contains(n.Reason, "inventory"):
			t.Errorf("cpu-d: reason %q, want it to say there is no inventory", n.Reason)
		case (n.Name == "gpu-b" || n.Name == "gpu-c") && !strings.Contains(strings.ToLower(n.Reason), "a40"):
			t.Errorf("%s: reason %q, want it to name the selector A40", n.Name, n.Reason)
		}
	}

	// The pod's own holdings are not counted against it, and the table names the node.
	out, errOut, code = runCmd(t, objs, "explain", "want-a40", "-n", "ml")
	if code != 0 || !strings.Contains(out, "would go to gpu-a") || !strings.Contains(out, "GPU-a1") {
		t.Errorf("exit %d %s, table:\n%s\nwant gpu-a and GPU-a1", code, errOut, out)
	}
	t.Logf("\n%s", out)
}

// A bound pod is explained as if it were not there: the cards it holds count as free.
func TestExplainLeavesThePodOut(t *testing.T) {
	objs := fixture(t)
	train := objs[4].(*corev1.Pod)
	train.Annotations[annotations.UseGPUType] = "A40"
	train.Spec.Containers[0].Resources.Limits = corev1.ResourceList{annotations.ResourceGPU: resource.MustParse("2")}
	out, errOut, code := runCmd(t, objs, "explain", "train", "-n", "ml", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var x Explanation
	if err := json.Unmarshal([]byte(out), &x); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if x.Node != "gpu-a" {
		t.Errorf("explanation %+v, want gpu-a: the card train holds is its own", x)
	}
}

func TestExplainFileAndNoFit(t *testing.T) {
	pod := gpuPod("want-h100", "H100")
	pod.UID, pod.Namespace = "", ""
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pod.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCmd(t, fixture(t), "explain", "-f", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "Pod default/want-h100 fits on no node") || strings.Contains(out, "\tyes") {
		t.Errorf("output:\n%s\nwant default/want-h100 to fit nowhere", out)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	deploy := filepath.Join(dir, "deploy.yaml")
	if err := os.WriteFile(deploy, []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: Pod\nspec: {containers: [{name: a, resorces: {}}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noGPU := filepath.Join(dir, "nogpu.yaml")
	if err := os.WriteFile(noGPU, []byte("kind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: a, image: x}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cards", "nope"}, `node "nope" not found`},
		{[]string{"cards", "cpu-d"}, `node "cpu-d" has no cardinal.io/gpu-inventory`},
		{[]string{"cards"}, "give a node name"},
		{[]string{"explain", "ghost", "-n", "ml"}, `pod "ghost" not found in namespace "ml"`},
		{[]string{"explain", "-f", filepath.Join(dir, "missing.yaml")}, "-f " + filepath.Join(dir, "missing.yaml")},
		{[]string{"explain", "-f", deploy}, `kind "Deployment", want Pod`},
		{[]string{"explain", "-f", bad}, `unknown field "resorces"`},
		{[]string{"explain", "-f", noGPU}, "pod default/web requests no GPUs"},
		{[]string{"explain", "x", "-f", noGPU}, "not both"},
		{[]string{"explain", "x", "--node-policy", "tightest"}, "--node-policy"},
		{[]string{"nodes", "-o", "yaml"}, `-o "yaml"`},
		{[]string{"frob"}, `unknown command "frob"`},
		{[]string{"nodes", "extra"}, `unexpected argument "extra"`},
	} {
		_, errOut, code := runCmd(t, fixture(t), tc.args...)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 1 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// A pod the device plugin allocated without the extender (no assignment) holds its card whole,
// and so does an assignment of cores 100 that names no memory: none of the card's memory counts
// as free, and cards names the holder from the allocation record.
func TestAllocationOnlyHolder(t *testing.T) {
	enc, err := annotations.EncodeAllocation(annotations.Allocation{Node: "gpu-a",
		Containers: []annotations.ContainerAllocation{{Name: "old", IDs: []string{"GPU-a1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	legacy := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "legacy", UID: "ml-legacy",
			Annotations: map[string]string{annotations.GPUAllocated: enc}},
		Spec:   corev1.PodSpec{NodeName: "gpu-a", Containers: []corev1.Container{{Name: "old"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	// An assignment that reserves the card alone (cores 100) without naming its memory.
	whole := holder(t, "ml", "alone", "gpu-c", "main", annotations.DeviceAssignment{UUID: "GPU-c0", ID: "GPU-c0", Cores: 100})
	objs := append(fixture(t), legacy, whole)
	out, errOut, code := runCmd(t, objs, "nodes", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []NodeSummary
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	for _, r := range rows {
		if r.Name == "gpu-a" && (r.FreeWhole != 0 || r.FreeSlots != 0 || r.FreeMemoryMiB != 0) {
			t.Errorf("gpu-a: %+v, want nothing free: both A40s are held whole", r)
		}
		if r.Name == "gpu-c" && (r.FreeWhole != 0 || r.FreeSlots != 0 || r.FreeMemoryMiB != 0) {
			t.Errorf("gpu-c: %+v, want nothing free on the whole A100: ml/alone holds it alone", r)
		}
	}
	out, errOut, code = runCmd(t, objs, "cards", "gpu-a")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "ml/legacy") || !strings.Contains(out, "old") {
		t.Errorf("cards gpu-a:\n%s\nwant ml/legacy's container old on GPU-a1", out)
	}
}

func TestKubeconfigErrorsNameTheFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	if _, _, err := Kubeconfig(missing, ""); err == nil || !strings.Contains(err.Error(), "--kubeconfig "+missing) {
		t.Errorf("missing file: error %v, want it to name --kubeconfig and the path", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: secret}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: ml}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ns, err := Kubeconfig(path, ""); err != nil || ns != "ml" {
		t.Errorf("namespace %q, error %v; want the context's namespace ml", ns, err)
	}
	if _, _, err := Kubeconfig(path, "y"); err == nil || !strings.Contains(err.Error(), "--context y") {
		t.Errorf("unknown context: error %v, want it to name --context y", err)
	}
}

// A node whose inventory cannot be read is listed with the decoder's error, and cards names it.
func TestBadInventory(t *testing.T) {
	bad := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-x",
		Annotations: map[string]string{annotations.GPUInventory: `{"v":1,"gpus":[{"uuid":""}]}`}}}
	objs := append(fixture(t), bad)
	out, errOut, code := runCmd(t, objs, "nodes")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "gpu-x ") {
			row = l
		}
	}
	if !strings.Contains(row, "<bad inventory: "+annotations.GPUInventory) {
		t.Errorf("gpu-x row %q, want the inventory's decode error", row)
	}
	_, errOut, code = runCmd(t, objs, "cards", "gpu-x")
	if code != 1 || !strings.Contains(errOut, `node "gpu-x": `+annotations.GPUInventory) {
		t.Errorf("cards gpu-x: exit %d, stderr %q, want 1 and the node and key named", code, errOut)
	}
}

// TestTablesEscapeControlCharacters: what other accounts wrote (a node's inventory, a pod's records,
// a manifest given to -f) reaches every table quoted when it holds a control character: an OSC 8
// link, a line erase and a carriage return print as \x1b, \r, never act on the terminal. A selector
// holding one is refused with the value quoted.
func TestTablesEscapeControlCharacters(t *testing.T) {
	const (
		model = "NVIDIA A40\x1b]8;;https://evil.example\x07click\x1b]8;;\x07"
		ctr   = "main\r\x1b[2K"
	)
	e := &annotations.Inventory{GPUs: []annotations.GPU{
		{UUID: "GPU-e0", Index: 0, Model: model, MemoryMiB: 46068, Healthy: true, Shares: 1},
		{UUID: "GPU-e1", Index: 1, Model: model, MemoryMiB: 46068, Healthy: true, Shares: 1},
	}}
	objs := append(fixture(t), node(t, "gpu-e", e),
		holder(t, "ml", "held", "gpu-e", ctr, annotations.DeviceAssignment{UUID: "GPU-e0", ID: "GPU-e0", MemoryMiB: 46068, Cores: 100}))
	pod := gpuPod("escape\x1b[31m", "A40")
	pod.UID, pod.Namespace = "", ""
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pod.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	// raw reports a character a terminal would act on: C0 but the newline, DEL, C1.
	raw2 := func(s string) bool {
		return strings.ContainsFunc(s, func(r rune) bool { return r != '\n' && annotations.IsControl(r) })
	}
	for _, tc := range []struct {
		args []string
		want []string // quoted as Go quotes
	}{
		{[]string{"nodes"}, []string{`2x NVIDIA A40\x1b]8;;https://evil.example\aclick\x1b]8;;\a"`}},
		{[]string{"cards", "gpu-e"}, []string{`"NVIDIA A40\x1b]8;;https://evil.example\aclick\x1b]8;;\a"`, `"main\r\x1b[2K"`}},
		{[]string{"explain", "-f", path}, []string{`Pod "default/escape\x1b[31m" would go to`}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := runCmd(t, objs, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if raw2(out) {
				t.Errorf("the output holds a raw control character:\n%q", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %s:\n%s", w, out)
				}
			}
		})
	}
	t.Run("a selector holding one is refused, quoted", func(t *testing.T) {
		_, errOut, code := runCmd(t, append(objs, gpuPod("bell", "A40\a")), "explain", "bell", "-n", "ml")
		if code == 0 || raw2(errOut) || !strings.Contains(errOut, `nvidia.com/use-gputype: control character U+0007 at position 4 in "A40\a"`) {
			t.Errorf("exit %d, stderr %q; want a refusal quoting the value", code, errOut)
		}
	})
}
