package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	fooResource corev1.ResourceName = "example.com/foo"
	barResource corev1.ResourceName = "example.com/bar"
	// waitTimeout bounds every wait of these tests; a healthy run takes a few seconds each.
	waitTimeout = 60 * time.Second
)

// testPod is a one-container pod pinned to node by label, requesting requests.
func testPod(name, node string, requests corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Containers: []corev1.Container{{
				Name:      "main",
				Image:     "registry.invalid/testbed/pause:1",
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: requests},
			}},
		},
	}
}

func createPod(t *testing.T, c *Cluster, pod *corev1.Pod) {
	t.Helper()
	if _, err := c.Client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
}

func getPod(c *Cluster, name string) (*corev1.Pod, error) {
	return c.Client.CoreV1().Pods(metav1.NamespaceDefault).Get(context.Background(), name, metav1.GetOptions{})
}

func waitPodRunning(t *testing.T, c *Cluster, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	WaitFor(t, waitTimeout, "pod "+name+" Running", func() (bool, error) {
		var err error
		pod, err = getPod(c, name)
		if err != nil {
			return false, err
		}
		if pod.Status.Phase == corev1.PodFailed {
			t.Fatalf("pod %s failed: %s", name, pod.Status.Message)
		}
		return pod.Status.Phase == corev1.PodRunning, nil
	})
	return pod
}

func waitAllocatable(t *testing.T, c *Cluster, node string, name corev1.ResourceName, want int64) {
	t.Helper()
	WaitFor(t, waitTimeout, "node "+node+" allocatable "+string(name)+"="+strconv.FormatInt(want, 10), func() (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		q, ok := n.Status.Allocatable[name]
		return ok && q.Value() == want, nil
	})
}

func TestSchedulerBindsPodsToAPIOnlyNode(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{SchedulerConfig: []byte(defaultSchedulerConfig)})
	if c.Scheduler == nil {
		t.Fatalf("Start with a SchedulerConfig did not start kube-scheduler")
	}
	node := c.AddNode(t, NodeSpec{
		Name:        "api-node-1",
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), fooResource: resource.MustParse("2")},
		Annotations: map[string]string{"example.com/inventory": "two foos"},
	})

	if !nodeReady(node) {
		t.Errorf("node conditions = %+v, want Ready=True", node.Status.Conditions)
	}
	if len(node.Spec.Taints) != 0 {
		t.Errorf("node taints = %+v, want none", node.Spec.Taints)
	}
	// cpu given (8), memory and pods defaulted (256Gi, 110), foo given (2); allocatable = capacity.
	want := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
		fooResource:           resource.MustParse("2"),
	}
	if diff := cmp.Diff(want, node.Status.Allocatable); diff != "" {
		t.Errorf("allocatable (-want +got):\n%s", diff)
	}
	if got := node.Annotations["example.com/inventory"]; got != "two foos" {
		t.Errorf("annotation example.com/inventory = %q, want %q", got, "two foos")
	}

	createPod(t, c, testPod("fits", node.Name, corev1.ResourceList{fooResource: resource.MustParse("2")}))
	// 3 foos on a node with 2: the scheduler must say so rather than bind.
	createPod(t, c, testPod("too-big", node.Name, corev1.ResourceList{fooResource: resource.MustParse("3")}))

	WaitFor(t, waitTimeout, "pod fits bound to "+node.Name, func() (bool, error) {
		pod, err := getPod(c, "fits")
		return err == nil && pod.Spec.NodeName == node.Name, err
	})
	WaitFor(t, waitTimeout, "pod too-big reported Unschedulable", func() (bool, error) {
		pod, err := getPod(c, "too-big")
		if err != nil {
			return false, err
		}
		if pod.Spec.NodeName != "" {
			t.Fatalf("pod too-big bound to %s, want unschedulable", pod.Spec.NodeName)
		}
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestValidatingAdmissionPolicyIsEnforced checks that the admission chain other tests rely on
// (policies and webhooks) is on: a policy refusing pods with a label refuses them.
func TestValidatingAdmissionPolicyIsEnforced(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{})
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-forbidden-pods"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.metadata.labels) || !('forbidden' in object.metadata.labels)",
				Message:    "forbidden pod",
			}},
		},
	}
	if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "no-forbidden-pods"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	if _, err := c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The policy takes effect once the apiserver's informer has it; until then creations succeed.
	attempt := 0
	WaitFor(t, waitTimeout, "a pod labeled forbidden to be refused", func() (bool, error) {
		attempt++
		pod := testPod("forbidden-"+strconv.Itoa(attempt), "nowhere", nil)
		pod.Labels = map[string]string{"forbidden": "yes"}
		_, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil && strings.Contains(err.Error(), "forbidden pod") {
			return true, nil
		}
		return false, err
	})
	createPod(t, c, testPod("allowed", "nowhere", nil))
}

func TestKubelet(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{SchedulerConfig: []byte(defaultSchedulerConfig)})
	k := c.AddKubelet(t, KubeletSpec{Name: "kubelet-1", Labels: map[string]string{"example.com/pool": "a"}})

	t.Run("node is registered Ready and untainted", func(t *testing.T) {
		node, err := c.Client.CoreV1().Nodes().Get(context.Background(), k.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !nodeReady(node) || len(node.Spec.Taints) != 0 || node.Labels["example.com/pool"] != "a" {
			t.Errorf("node ready=%v taints=%+v labels=%v, want ready, no taints, example.com/pool=a", nodeReady(node), node.Spec.Taints, node.Labels)
		}
	})

	t.Run("scheduled pod reaches Running", func(t *testing.T) {
		createPod(t, c, testPod("plain", k.Name, nil))
		pod := waitPodRunning(t, c, "plain")
		if pod.Spec.NodeName != k.Name {
			t.Errorf("pod ran on %q, want %q", pod.Spec.NodeName, k.Name)
		}
	})

	t.Run("namespace has the kubelet's own var lib and tunables", func(t *testing.T) {
		p := k.StartInNamespace(t, "inspect", "sh", "-c",
			"stat -c %i /var/lib/kubelet; cat /proc/sys/vm/overcommit_memory /proc/sys/kernel/panic; test -S /var/lib/kubelet/device-plugins/kubelet.sock && echo socket")
		WaitFor(t, waitTimeout, "inspect to exit", func() (bool, error) {
			exited, err := p.Exited()
			return exited, err
		})
		var st syscall.Stat_t
		if err := syscall.Stat(k.Root, &st); err != nil {
			t.Fatal(err)
		}
		// The log holds a "=== <time>: <command>" line, then the command's output.
		lines := strings.Split(strings.TrimSpace(p.Tail(4)), "\n")
		want := []string{strconv.FormatUint(st.Ino, 10), "1", "10", "socket"}
		if diff := cmp.Diff(want, lines[len(lines)-len(want):]); diff != "" {
			t.Errorf("inside the namespace (-want +got):\n%s", diff)
		}
		if err := syscall.Stat("/var/lib/kubelet", &st); err == nil && strconv.FormatUint(st.Ino, 10) == want[0] {
			t.Errorf("the host's /var/lib/kubelet is the kubelet's root")
		}
	})

	t.Run("device plugin on the host registers", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		plugin := &fakeDevicePlugin{resource: string(fooResource)}
		if err := plugin.serve(ctx, k.DevicePluginDir); err != nil {
			t.Fatal(err)
		}
		waitAllocatable(t, c, k.Name, fooResource, pluginDevices)
		createPod(t, c, testPod("uses-foo", k.Name, corev1.ResourceList{fooResource: resource.MustParse("1")}))
		waitPodRunning(t, c, "uses-foo")
		if got := plugin.allocated.Load(); got != 1 {
			t.Errorf("plugin answered %d container allocations, want 1", got)
		}
	})

	t.Run("device plugin in the namespace registers", func(t *testing.T) {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		p := k.StartInNamespace(t, "plugin-bar", "env", pluginEnv+"="+string(barResource), exe)
		waitAllocatable(t, c, k.Name, barResource, pluginDevices)
		if exited, err := p.Exited(); exited {
			t.Errorf("plugin exited: %v", err)
		}
	})

	t.Run("second kubelet runs beside the first", func(t *testing.T) {
		k2 := c.AddKubelet(t, KubeletSpec{Name: "kubelet-2"})
		if k2.Root == k.Root || k2.MountNamespace() == k.MountNamespace() {
			t.Errorf("kubelets share root %q or namespace %q", k2.Root, k2.MountNamespace())
		}
		createPod(t, c, testPod("on-second", k2.Name, nil))
		waitPodRunning(t, c, "on-second")
	})

	t.Run("restart", func(t *testing.T) {
		before := k.Process.Pid()
		k.Restart(t)
		if k.Process.Pid() == before {
			t.Errorf("kubelet pid %d unchanged by Restart", before)
		}
		createPod(t, c, testPod("after-restart", k.Name, nil))
		waitPodRunning(t, c, "after-restart")
		pod, err := getPod(c, "plain")
		if err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase != corev1.PodRunning {
			t.Errorf("pod plain after restart: phase %s, want Running", pod.Status.Phase)
		}
	})
}

// TestTeardownLeavesNothing starts a second cluster with a kubelet and processes inside and
// outside its namespace, lets its test end, and looks for anything left.
func TestTeardownLeavesNothing(t *testing.T) {
	t.Parallel()
	mountsBefore := hostMountPoints(t)
	var (
		dir, logDir, ns string
		pids            []int
	)
	t.Run("nested cluster", func(t *testing.T) {
		c := Start(t, Options{})
		k := c.AddKubelet(t, KubeletSpec{Name: "teardown-1"})
		k.StartInNamespace(t, "sleeper-in-namespace", "sleep", "600")
		host := c.StartProcess(t, "sleeper-on-host", "sh", "-c", "sleep 600 & sleep 600")
		// Both sleeps must exist before teardown, or a fast Stop could kill sh before it forks.
		WaitFor(t, waitTimeout, "two sleeps in the host sleeper's process group", func() (bool, error) {
			return len(groupMembers(t, host.Pid(), "sleep\x00600")) == 2, nil
		})
		dir, logDir, ns = c.Dir, c.LogDir, k.MountNamespace()
		for _, p := range c.Processes() {
			pids = append(pids, p.Pid())
		}
		if ns == "" || len(pids) < 5 { // etcd, kube-apiserver, kubelet, two sleepers
			t.Fatalf("namespace %q, pids %v: want a namespace and at least 5 processes", ns, pids)
		}
	})

	stoppedAt := bootTicks(t)
	for _, pid := range pids {
		// A child of a stopped process (the sleeps of sh) would still be in its group.
		for _, member := range groupMembers(t, pid, "") {
			t.Errorf("process %d survived in the group of stopped process %d", member, pid)
		}
		if cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil {
			t.Errorf("pid %d still exists: %q", pid, cmdline)
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(cmdline), dir) || strings.Contains(string(cmdline), logDir) {
			t.Errorf("process %s refers to the stopped cluster: %q", e.Name(), cmdline)
		}
		// A namespace's inode is reused once the namespace is gone: a process that started after
		// the teardown (a kubelet of a test running beside this one) can show the same link, and
		// is no survivor of it.
		if link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "mnt")); err == nil && link == ns && startedBefore(e.Name(), stoppedAt) {
			t.Errorf("process %s is still in the stopped kubelet's mount namespace %s", e.Name(), ns)
		}
	}
	if diff := cmp.Diff(mountsBefore, hostMountPoints(t)); diff != "" {
		t.Errorf("host mounts changed (-before +after):\n%s", diff)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mountinfo), dir) {
		t.Errorf("/proc/self/mountinfo still mentions %s:\n%s", dir, mountinfo)
	}
	for _, d := range []string{dir, logDir} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s still exists (stat: %v)", d, err)
		}
	}
}

// hostMountPoints lists the mount points in /proc/self/mountinfo (field 5).
func hostMountPoints(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var points []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			points = append(points, f[4])
		}
	}
	return points
}

// groupMembers lists the live (not zombie) processes in process group pgid whose command line
// contains cmdline. Orphans killed at teardown stay zombies until init reaps them; they are dead.
func groupMembers(t *testing.T, pgid int, cmdline string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var members []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after "(comm)": state, ppid, pgrp.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 3 || f[0] == "Z" || f[2] != strconv.Itoa(pgid) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), cmdline) {
			members = append(members, pid)
		}
	}
	return members
}

// bootTicks is the time since boot in clock ticks (USER_HZ, 100 on Linux), the unit of a process's
// start time in /proc/<pid>/stat.
func bootTicks(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	up, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(up*100) + 1
}

// startedBefore reports whether process pid started before ticks (bootTicks); true when its start
// time cannot be read, so that a doubt is reported.
func startedBefore(pid string, ticks uint64) bool {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return true
	}
	// The command name (field 2) is in parentheses and may hold spaces: fields count from after it.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return true
	}
	f := strings.Fields(string(b)[i+1:])
	if len(f) < 20 {
		return true
	}
	start, err := strconv.ParseUint(f[19], 10, 64) // field 22: starttime
	if err != nil {
		return true
	}
	return start <= ticks
}
