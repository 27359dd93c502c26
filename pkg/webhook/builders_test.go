package webhook

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Builders for the pods and nodes the tests use.

// tenant creates the pods of the tests; kubelet is node gpu-1's kubelet, as NodeRestriction knows it.
var (
	tenant  = authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}
	kubelet = authenticationv1.UserInfo{Username: "system:node:gpu-1", Groups: []string{"system:nodes", "system:authenticated"}}
)

func testRules() *Rules {
	return &Rules{
		SchedulerName:       "cardinal-scheduler",
		Resources:           annotations.DefaultResourceNames(),
		TrustedUsers:        []string{"system:serviceaccount:cardinal-system:extender"},
		DeviceEnvNamespaces: []string{"gpu-operator"},
	}
}

// res builds a resource list from name/quantity pairs: res("nvidia.com/gpu", "1").
func res(kv ...string) corev1.ResourceList {
	if len(kv) == 0 {
		return nil
	}
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// ctr is a container whose limits are the pairs given.
func ctr(name string, limits ...string) corev1.Container {
	return corev1.Container{Name: name, Image: "busybox", Resources: corev1.ResourceRequirements{Limits: res(limits...)}}
}

type podOpt func(*corev1.Pod)

// newPod is a pod in namespace ns with the default scheduler (as the apiserver defaults it) and the
// given containers.
func newPod(opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec:       corev1.PodSpec{SchedulerName: corev1.DefaultSchedulerName},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func containers(cs ...corev1.Container) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, cs...) }
}

func initContainers(cs ...corev1.Container) podOpt {
	return func(p *corev1.Pod) { p.Spec.InitContainers = append(p.Spec.InitContainers, cs...) }
}

func annotated(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		for i := 0; i < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func scheduler(name string) podOpt { return func(p *corev1.Pod) { p.Spec.SchedulerName = name } }

func nodeName(name string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = name } }

func privileged(p *corev1.Pod) {
	yes := true
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
}

// oneGPU is the most common GPU pod: one container asking for one whole card.
func oneGPU(opts ...podOpt) *corev1.Pod {
	return newPod(append([]podOpt{containers(ctr("main", "nvidia.com/gpu", "1"))}, opts...)...)
}

// cards returns n cards of one model on a node, UUIDs GPU-<node>-<k>.
func cardsOf(node, model string, memMiB int64, n int) []annotations.GPU {
	out := make([]annotations.GPU, n)
	for k := range out {
		out[k] = annotations.GPU{UUID: "GPU-" + node + "-" + string(rune('0'+k)), Index: k, Model: model, MemoryMiB: memMiB, Healthy: true, Shares: 1}
	}
	return out
}

// testCards: node-a has 8 A100-80GB, node-c has 3 T4 (16 GB).
func testCards() *Cards {
	return NewCards(map[string]annotations.Inventory{
		"node-a": {V: 1, GPUs: cardsOf("a", "NVIDIA A100-SXM4-80GB", 81920, 8)},
		"node-c": {V: 1, GPUs: cardsOf("c", "Tesla T4", 15360, 3)},
	})
}
