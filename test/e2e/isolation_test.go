package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cardinal-gpu/cardinal/test/cluster"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// isolationNS is where TestIsolation's objects live.
const isolationNS = "isolation"

// jobController is the identity kube-controller-manager's Job controller acts as (its RBAC role is
// one of the apiserver's bootstrap roles).
const jobController = "system:serviceaccount:kube-system:job-controller"

// TestIsolation checks the webhook's refusals and its availability guarantees end to end, on one
// stack with one node: a pod that would see every card is refused at create, a Deployment with a bad
// selector is refused when kubectl applies it, and a GPU Job whose pod finishes while the webhook is
// down still completes (the kubelet's status update and the removal of the Job's tracking finalizer
// never wait on the webhook).
func TestIsolation(t *testing.T) {
	started := time.Now()
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries, Nodes: []stack.NodeSpec{{Name: nodeA, Shares: 1}}})
	client := s.Cluster.Client
	if _, err := client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: isolationNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { t.Logf("TestIsolation took %s", time.Since(started).Round(time.Millisecond)) })

	t.Run("a pod setting a device variable without a GPU is refused at create", func(t *testing.T) {
		for _, v := range []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}, {Name: "CUDA_DEVICE_ORDER", Value: "FASTEST_FIRST"}} {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "sees-everything", Namespace: isolationNS},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "sidecar", Image: "busybox"},
					{Name: "main", Image: "cuda", Env: []corev1.EnvVar{v}},
				}},
			}
			_, err := client.CoreV1().Pods(isolationNS).Create(ctx(t), p, metav1.CreateOptions{})
			const want = `admission webhook "pods.webhook.cardinal.io" denied the request`
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `container "main": env `+v.Name+":") {
				t.Errorf("%s=%s: create: %v; want a refusal naming container \"main\" and %s", v.Name, v.Value, err, v.Name)
			}
		}
	})

	t.Run("a Deployment with a bad selector is refused at create", func(t *testing.T) {
		manifest := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
  namespace: ` + isolationNS + `
spec:
  replicas: 2
  selector:
    matchLabels: {app: trainer}
  template:
    metadata:
      labels: {app: trainer}
      annotations:
        nvidia.com/use-gputype: "A100,"
    spec:
      containers:
        - name: main
          image: cuda
          resources:
            limits: {nvidia.com/gpu: 1}
`
		cmd := exec.Command(filepath.Join(cluster.BinDir(t), "kubectl"), "--kubeconfig", s.Kubeconfig(), "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		for _, want := range []string{`admission webhook "workloads.webhook.cardinal.io" denied the request`, `nvidia.com/use-gputype: empty entry at position 2 in "A100,"`} {
			if err == nil || !strings.Contains(out.String(), want) {
				t.Errorf("kubectl apply: %v\n%s\nwant the refusal %q", err, out.String(), want)
			}
		}
		if _, err := client.AppsV1().Deployments(isolationNS).Get(ctx(t), "trainer", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the Deployment exists after the refusal (get: %v)", err)
		}
	})

	t.Run("a GPU Job completes while the webhook is down", func(t *testing.T) {
		testJobWithoutWebhook(t, s)
	})
}

// testJobWithoutWebhook: the test bed runs no kube-controller-manager, so the test plays the Job
// controller's part, with its identity and in its order: it creates the Job's pod (with the
// job-tracking finalizer), and once the pod has Succeeded records it in the Job's status, removes
// the finalizer and marks the Job Complete. Everything after the pod started happens with the
// webhook stopped: the kubelet reporting the pod Succeeded and the finalizer removal (pod UPDATEs)
// must not be sent to it, or failurePolicy Fail would keep the Job from ever completing.
func testJobWithoutWebhook(t *testing.T, s *stack.Stack) {
	admin := s.Cluster.Client
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: isolationNS},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "main", Image: "cuda", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{s.Names.GPU: resource.MustParse("1")}}}},
		}}},
	}
	job, err := admin.BatchV1().Jobs(isolationNS).Create(ctx(t), job, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the Job: %v", err)
	}
	controller := impersonate(t, s, jobController)
	tmpl := job.Spec.Template
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: job.Name + "-0", Namespace: isolationNS, Labels: tmpl.Labels,
			Finalizers:      []string{batchv1.JobTrackingFinalizer},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: tmpl.Spec,
	}
	pod, err = controller.CoreV1().Pods(isolationNS).Create(ctx(t), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the Job's pod: %v", err)
	}
	if pod.Spec.SchedulerName != "cardinal-scheduler" {
		t.Fatalf("the Job's pod has schedulerName %q; the webhook did not see it", pod.Spec.SchedulerName)
	}
	waitPhase(t, admin, pod.Name, corev1.PodRunning)

	// The webhook goes away; failurePolicy Fail now refuses every pod request sent to it.
	s.Webhook.Stop()
	probe := pod.DeepCopy()
	probe.ObjectMeta = metav1.ObjectMeta{Name: "probe", Namespace: isolationNS}
	probe.Spec.NodeName = ""
	if _, err := admin.CoreV1().Pods(isolationNS).Create(ctx(t), probe, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("a GPU pod created with the webhook stopped: %v; want failed calling webhook", err)
	}

	// The container exits 0; the kubelet reports the pod Succeeded.
	finish(t, s.Kubelets[nodeA], pod.Name)
	pod = waitPhase(t, admin, pod.Name, corev1.PodSucceeded)

	// The Job controller's bookkeeping: count the pod, let it go, complete the Job.
	now := metav1.Now()
	job.Status.StartTime = &job.CreationTimestamp
	job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{pod.UID}}
	job, err = controller.BatchV1().Jobs(isolationNS).UpdateStatus(ctx(t), job, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("record the finished pod in the Job's status: %v", err)
	}
	patch := []byte(`[{"op":"test","path":"/metadata/finalizers/0","value":"` + batchv1.JobTrackingFinalizer + `"},{"op":"remove","path":"/metadata/finalizers/0"}]`)
	if _, err := controller.CoreV1().Pods(isolationNS).Patch(ctx(t), pod.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("remove the job-tracking finalizer with the webhook down: %v", err)
	}
	job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	job.Status.Succeeded = 1
	job.Status.CompletionTime = &now
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: batchv1.JobReasonCompletionsReached},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: batchv1.JobReasonCompletionsReached},
	}
	if _, err := controller.BatchV1().Jobs(isolationNS).UpdateStatus(ctx(t), job, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("complete the Job: %v", err)
	}
	got, err := admin.BatchV1().Jobs(isolationNS).Get(ctx(t), job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	complete := false
	for _, c := range got.Status.Conditions {
		complete = complete || (c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue)
	}
	finished, err := admin.CoreV1().Pods(isolationNS).Get(ctx(t), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !complete || got.Status.Succeeded != 1 || len(finished.Finalizers) != 0 {
		t.Errorf("Job complete=%v succeeded=%d, pod finalizers %v; want a complete Job and no finalizer left", complete, got.Status.Succeeded, finished.Finalizers)
	}
}

// impersonate returns a client acting as user.
func impersonate(t *testing.T, s *stack.Stack, user string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(s.Cluster.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitPhase waits until the pod reaches phase and returns it.
func waitPhase(t *testing.T, client kubernetes.Interface, name string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	stack.Wait(t, runTimeout, "pod "+name+" "+string(phase), func() (bool, string, error) {
		c, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		var err error
		if p, err = client.CoreV1().Pods(isolationNS).Get(c, name, metav1.GetOptions{}); err != nil {
			return false, err.Error(), nil
		}
		if p.Status.Phase == corev1.PodFailed && phase != corev1.PodFailed {
			return false, "", fmt.Errorf("pod %s failed: %s %s", name, p.Status.Reason, p.Status.Message)
		}
		return p.Status.Phase == phase, "phase " + string(p.Status.Phase), nil
	})
	return p
}

// finish makes every container of the pod exit 0 in the kubelet's fake runtime, as a process that
// ends would; the kubelet's next relist sees it.
func finish(t *testing.T, k *cluster.Kubelet, pod string) {
	t.Helper()
	rs := k.Runtime.RuntimeService
	rs.Lock()
	defer rs.Unlock()
	n := 0
	for _, c := range rs.Containers {
		if c.Labels["io.kubernetes.pod.name"] != pod || c.Labels["io.kubernetes.pod.namespace"] != isolationNS {
			continue
		}
		c.State = runtimeapi.ContainerState_CONTAINER_EXITED
		c.ExitCode = 0
		c.Reason = "Completed"
		c.FinishedAt = time.Now().UnixNano()
		n++
	}
	if n == 0 {
		t.Fatalf("the fake runtime of %s runs no container of pod %s", k.Name, pod)
	}
}
