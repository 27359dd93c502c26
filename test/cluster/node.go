package cluster

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// apiTimeout bounds each API call the harness makes.
const apiTimeout = 30 * time.Second

// NodeSpec describes an API-only node: a Node object no kubelet runs, whose status the harness
// writes once. Capacity's cpu, memory and pods default to 32, 256Gi and 110.
type NodeSpec struct {
	Name     string
	Capacity corev1.ResourceList
	// Allocatable defaults to Capacity (with the same defaults filled in).
	Allocatable corev1.ResourceList
	Labels      map[string]string
	Annotations map[string]string
	// Taints are set after the harness removed the not-ready taint the apiserver adds.
	Taints []corev1.Taint
}

// defaultNodeResources fills cpu, memory and pods where rl lacks them.
func defaultNodeResources(rl corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	maps.Copy(out, rl)
	return out
}

// AddNode creates an API-only node, Ready and untainted (but for spec.Taints), and returns it as
// stored. Nothing in the test bed ever marks it NotReady: there is no node lifecycle controller.
func (c *Cluster) AddNode(t TB, spec NodeSpec) *corev1.Node {
	t.Helper()
	if spec.Name == "" {
		t.Fatalf("AddNode: empty name")
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()
	labels := map[string]string{corev1.LabelHostname: spec.Name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"}
	maps.Copy(labels, spec.Labels)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: labels, Annotations: spec.Annotations}}
	node, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", spec.Name, err)
	}
	capacity := defaultNodeResources(spec.Capacity)
	allocatable := capacity
	if spec.Allocatable != nil {
		allocatable = defaultNodeResources(spec.Allocatable)
	}
	now := metav1.Now()
	node.Status.Capacity = capacity
	node.Status.Allocatable = allocatable
	node.Status.Conditions = readyConditions(now)
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: spec.Name}}
	node.Status.NodeInfo = corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "v0.0.0-api-only"}
	if _, err := c.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set status of node %s: %v", spec.Name, err)
	}
	if err := c.setTaints(ctx, spec.Name, spec.Taints); err != nil {
		t.Fatalf("untaint node %s: %v", spec.Name, err)
	}
	node, err = c.Client.CoreV1().Nodes().Get(ctx, spec.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", spec.Name, err)
	}
	return node
}

func readyConditions(now metav1.Time) []corev1.NodeCondition {
	cond := func(typ corev1.NodeConditionType, status corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: status, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return []corev1.NodeCondition{
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
	}
}

// setTaints replaces the node's taints with taints. The TaintNodesByCondition admission plugin
// gives every new node node.kubernetes.io/not-ready:NoSchedule, and without
// kube-controller-manager nothing else removes it.
func (c *Cluster) setTaints(ctx context.Context, name string, taints []corev1.Taint) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = taints
		_, err = c.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// nodeReady reports whether the node's Ready condition is True.
func nodeReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
