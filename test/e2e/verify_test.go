package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/deviceplugin"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// TestKubeletRecordDecides (issue 32): whatever order the kubelet admits, rejects or restarts pods
// in, no container runs with cards or limits other than its own. The device plugin asks the kubelet's
// PodResources which pod it is admitting, and verifies every container start against the kubelet's
// device checkpoint; both are the real kubelet's here.
func TestKubeletRecordDecides(t *testing.T) {
	e := startEnv(t, stack.Options{Verbosity: 1})
	if !t.Run("a pod the kubelet rejects before any device call hands nothing on", func(t *testing.T) { testRejectedFirst(t, e) }) {
		return
	}
	t.Run("a restarted kubelet admits replicas with init containers in its own order", func(t *testing.T) { testRestartBatchWithInit(t, e) })
}

// createBound creates pods one at a time, each bound before the next is created, in distinct
// seconds: the plugin then takes each as certainly admitted before the next.
func (e *env) createBound(t *testing.T, gap time.Duration, pods ...*corev1.Pod) {
	t.Helper()
	for i, p := range pods {
		if i > 0 {
			time.Sleep(gap)
		}
		e.create(t, p)
		e.waitBound(t, time.Now(), runTimeout, p.Name)
	}
}

// testRejectedFirst: node-a's kubelet is stopped; "rj-a" (its first pod: created and bound first,
// with a sysctl the kubelet forbids) and "rj-b" (whole A100 each) are bound to it; the kubelet
// starts again and handles both in one batch, by creation time: it rejects rj-a at admission
// (SysctlForbidden, before any device call), then admits rj-b. The plugin's order rules name rj-a
// certainly first, and used to steer rj-b onto rj-a's card and write the record onto rj-a. Now rj-b
// runs on exactly its own assignment, and rj-a carries no record.
func testRejectedFirst(t *testing.T, e *env) {
	ann := map[string]string{annotations.UseGPUType: "A100"}
	a := pod("rj-a", ann)
	a.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "kernel.msgmax", Value: "65536"}}}
	b := pod("rj-b", ann)
	e.Kubelets[nodeA].Stop(t)
	e.createBound(t, 1100*time.Millisecond, a, b)
	if got := e.get(t, "rj-a").Spec.NodeName; got != nodeA {
		t.Fatalf("rj-a bound to %s, want %s (the only A100 node)", got, nodeA)
	}
	e.RestartKubelet(t, nodeA)
	stack.Wait(t, runTimeout, "rj-a rejected by the kubelet", func() (bool, string, error) {
		p, err := e.client.CoreV1().Pods(namespace).Get(context.Background(), "rj-a", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return p.Status.Phase == corev1.PodFailed, describe(p), nil
	})
	if r := e.get(t, "rj-a").Status.Reason; r != "SysctlForbidden" {
		t.Fatalf("rj-a failed with %q, want SysctlForbidden (a rejection before any device call)", r)
	}
	e.waitRunning(t, "rj-b")
	// PodResources = assignment for rj-b, and its record agrees.
	hs := e.truth(t, "rj-b")
	e.waitAllocationRecords(t, hs)
	if rec, ok := e.get(t, "rj-a").Annotations[annotations.GPUAllocated]; ok {
		t.Errorf("rj-a, rejected before any device call, carries an allocation record: %s", rec)
	}
	_, asg := e.assignment(t, "rj-b")
	cfg := e.Kubelets[nodeA].ContainerConfig(namespace, "rj-b", "main")
	if cfg == nil {
		t.Fatal("the runtime has no container rj-b/main")
	}
	want := strings.Join(asg.Container("main").IDs(), ",")
	for _, kv := range cfg.GetEnvs() {
		if kv.GetKey() == deviceplugin.EnvVisibleDevices && string(kv.GetValue()) != want {
			t.Errorf("rj-b/main started with %s=%s, want its own %s", deviceplugin.EnvVisibleDevices, kv.GetValue(), want)
		}
	}
	e.deleteAll(t)
}

// testRestartBatchWithInit: node-b's kubelet (shared H100s) is stopped; four replicas, each an init
// container (one card, 10000 MiB, 20 %) and an app container (two cards, 30000 MiB, 50 %, one of them
// the init container's), are created in the same second and bound (all in flight at once: the
// extender lets interchangeable replicas go together); the kubelet starts again and admits them in
// one batch, in an order the plugin cannot know from the pods. Every container that runs has
// exactly its own limits, as the runtime recorded them; PodResources equals the assignment for every
// pod (the order rules alone swap replicas here); every pod Runs.
func testRestartBatchWithInit(t *testing.T, e *env) {
	const n = 4
	var pods []*corev1.Pod
	for i := range n {
		init := ctr("warm", gpu{cards: 1, memMiB: 10000, cores: 20})
		p := pod(fmt.Sprintf("ri-%d", i), map[string]string{annotations.UseGPUType: "H100"}, ctr("main", gpu{cards: 2, memMiB: 30000, cores: 50}))
		p.Spec.InitContainers = []corev1.Container{init}
		pods = append(pods, p)
	}
	e.Kubelets[nodeB].Stop(t)
	e.createAll(t, pods...)
	names := podNames(pods)
	e.waitBound(t, time.Now(), runTimeout, names...)
	e.RestartKubelet(t, nodeB)
	stack.Wait(t, 2*runTimeout, fmt.Sprintf("%d pods Running (init containers completed in the fake runtime)", n), func() (bool, string, error) {
		running := 0
		var state []string
		for _, name := range names {
			p, err := e.client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if p.Status.Phase == corev1.PodFailed {
				return false, "", fmt.Errorf("pod %s failed: %s", name, describe(p))
			}
			if p.Status.Phase == corev1.PodRunning {
				running++
			} else {
				completeInit(e, nodeB, p)
			}
			state = append(state, describe(p))
		}
		return running == n, strings.Join(state, "; "), nil
	})
	wantEnv := map[string][2]string{"warm": {"10000m", "20"}, "main": {"30000m", "50"}}
	for _, name := range names {
		for c, want := range wantEnv {
			cfg := e.Kubelets[nodeB].ContainerConfig(namespace, name, c)
			if cfg == nil {
				t.Errorf("the runtime has no container %s/%s", name, c)
				continue
			}
			env := map[string]string{}
			for _, kv := range cfg.GetEnvs() {
				env[kv.GetKey()] = string(kv.GetValue())
			}
			if got := [2]string{env[deviceplugin.EnvMemoryLimitPrefix+"0"], env[deviceplugin.EnvSMLimit]}; got != want ||
				(c == "main" && env[deviceplugin.EnvMemoryLimitPrefix+"1"] != want[0]) {
				t.Errorf("%s/%s started with memory %s and SM %s, want its own %s and %s", name, c, got[0], got[1], want[0], want[1])
			}
		}
	}
	hs := e.truth(t, names...)
	e.waitAllocationRecords(t, hs)
	e.deleteAll(t)
}

// completeInit ends pod's running init containers in node's fake runtime with exit code 0.
func completeInit(e *env, node string, pod *corev1.Pod) {
	init := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		init[c.Name] = true
	}
	rs := e.Kubelets[node].Runtime.RuntimeService
	rs.Lock()
	defer rs.Unlock()
	for _, c := range rs.Containers {
		if c.Labels["io.kubernetes.pod.uid"] != string(pod.UID) || !init[c.GetMetadata().GetName()] {
			continue
		}
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			c.State = runtimeapi.ContainerState_CONTAINER_EXITED
			c.ExitCode = 0
			c.Reason = "Completed"
			c.FinishedAt = time.Now().UnixNano()
		}
	}
}
