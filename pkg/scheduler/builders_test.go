package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/clock"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// nodeSpec describes a node's cards: count cards of one model, all on NUMA 0 unless numa is set.
type nodeSpec struct {
	name   string
	model  string
	memMiB int64
	count  int
	shares int
	numa   []int // per card; nil means all 0
	sick   []int // indexes of unhealthy cards
}

func uuidOf(node string, i int) string { return fmt.Sprintf("GPU-%s-%d", node, i) }

func gpuNode(s nodeSpec) *corev1.Node {
	inv := annotations.Inventory{}
	for i := 0; i < s.count; i++ {
		g := annotations.GPU{UUID: uuidOf(s.name, i), Index: i, Model: s.model, MemoryMiB: s.memMiB, Healthy: true, Shares: max(s.shares, 1)}
		if s.numa != nil {
			g.NUMA = s.numa[i]
		}
		for _, k := range s.sick {
			if k == i {
				g.Healthy = false
			}
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	enc, err := annotations.EncodeInventory(inv)
	if err != nil {
		panic(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.name, Annotations: map[string]string{annotations.GPUInventory: enc}}}
}

func plainNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// ctr is a container asking gpu cards and optionally memory (MiB) and cores.
type ctr struct {
	name          string
	gpu, mem, pct int64
	cores         int64
	init, sidecar bool
	coresGiven    bool
}

func gpuPod(name string, ann map[string]string, cs ...ctr) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Annotations: ann},
		Spec:       corev1.PodSpec{SchedulerName: "cardinal-scheduler"},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	names := annotations.DefaultResourceNames()
	for _, c := range cs {
		lim := corev1.ResourceList{}
		if c.gpu > 0 {
			lim[names.GPU] = *resource.NewQuantity(c.gpu, resource.DecimalSI)
		}
		if c.mem > 0 {
			lim[names.Mem] = *resource.NewQuantity(c.mem, resource.DecimalSI)
		}
		if c.pct > 0 {
			lim[names.MemPercentage] = *resource.NewQuantity(c.pct, resource.DecimalSI)
		}
		if c.cores > 0 || c.coresGiven {
			lim[names.Cores] = *resource.NewQuantity(c.cores, resource.DecimalSI)
		}
		k := corev1.Container{Name: c.name, Image: "x", Resources: corev1.ResourceRequirements{Limits: lim}}
		if c.sidecar {
			always := corev1.ContainerRestartPolicyAlways
			k.RestartPolicy = &always
		}
		if c.init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, k)
		} else {
			p.Spec.Containers = append(p.Spec.Containers, k)
		}
	}
	return p
}

// harness is a Server over a fake clientset, its cache fed directly (as the informers would).
type harness struct {
	t        testing.TB
	srv      *Server
	cache    *Cache
	client   *fake.Clientset
	recorder *record.FakeRecorder
	handler  http.Handler
	// pods are the pods a test refers to by name (optional).
	pods map[string]*corev1.Pod
}

type harnessOptions struct {
	nodePolicy, gpuPolicy annotations.Policy
	// informer, when true, feeds the cache every pod the fake API server changes (as an informer).
	informer bool
	// ready is the server's cache-synced check (nil: always synced).
	ready func() bool
	// clock dates reservations (nil: the real clock).
	clock clock.PassiveClock
	// bindWait is ServerOptions.BindWait.
	bindWait time.Duration
	// shortlist and services are ServerOptions.FilterShortlist and Services.
	shortlist int
	services  ServiceSelects
	// exactProfile is the cache's exact profile (NewCache's exact; empty: one profile).
	exactProfile string
	// awaitInformer is ServerOptions.AwaitInformer.
	awaitInformer bool
}

func newHarness(t testing.TB, o harnessOptions, objs ...runtime.Object) *harness {
	t.Helper()
	if o.nodePolicy == "" {
		o.nodePolicy = annotations.PolicyBinpack
	}
	if o.gpuPolicy == "" {
		o.gpuPolicy = annotations.PolicyBinpack
	}
	d, err := core.New(core.Options{NodePolicy: o.nodePolicy, GPUPolicy: o.gpuPolicy})
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(objs...)
	cache := NewCache(annotations.DefaultResourceNames(), "cardinal-scheduler", o.exactProfile)
	if o.clock != nil {
		cache.WithClock(o.clock)
	}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.Node:
			cache.UpsertNode(o)
		case *corev1.Pod:
			cache.UpsertPod(o)
		}
	}
	h := &harness{t: t, cache: cache, client: client, recorder: record.NewFakeRecorder(1000)}
	// The fake tracker cannot apply a pods/binding create: do what the API server does (node name
	// and the Binding's annotations, in one update).
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := ca.GetObject().(*corev1.Binding)
		if err := h.commitBinding(b, o.informer); err != nil {
			return true, nil, err
		}
		return true, b, nil
	})
	h.srv = NewServer(cache, ServerOptions{Client: client, Decider: d, Names: annotations.DefaultResourceNames(),
		Pods: &clientPods{client: client}, Recorder: h.recorder, Ready: o.ready, BindWait: o.bindWait,
		FilterShortlist: o.shortlist, Services: o.services, AwaitInformer: o.awaitInformer})
	h.handler = h.srv.Handler()
	return h
}

// commitBinding does what the API server does for a pods/binding create: node name and the
// Binding's annotations, in one update. With feed, the cache sees the pod (as an informer would).
func (h *harness) commitBinding(b *corev1.Binding, feed bool) error {
	obj, err := h.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
	if err != nil {
		return err
	}
	pod := obj.(*corev1.Pod).DeepCopy()
	if pod.Spec.NodeName != "" {
		return apierrors.NewConflict(corev1.Resource("pods/binding"), pod.Name, fmt.Errorf("pod %s is already assigned to node %q", pod.Name, pod.Spec.NodeName))
	}
	pod.Spec.NodeName = b.Target.Name
	for k, v := range b.Annotations { // the API server copies a Binding's annotations onto the pod
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[k] = v
	}
	if err := h.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), pod, pod.Namespace); err != nil {
		return err
	}
	if feed {
		h.cache.UpsertPod(pod)
	}
	return nil
}

func (h *harness) post(path string, body any) *httptest.ResponseRecorder {
	h.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.postRaw(path, b)
}

func (h *harness) postRaw(path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	w := httptest.NewRecorder()
	h.handler.ServeHTTP(w, req)
	return w
}

func decodeInto[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body.String())
	}
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %T: %v (%s)", v, err, w.Body.String())
	}
	return v
}

// assignmentOf reads the assignment the extender wrote on a pod in the fake API server.
func (h *harness) assignmentOf(ns, name string) (*annotations.Assignment, string) {
	h.t.Helper()
	p, err := h.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	raw, ok := p.Annotations[annotations.GPUAssignment]
	if !ok {
		return nil, p.Spec.NodeName
	}
	a, err := annotations.DecodeAssignment(raw)
	if err != nil {
		h.t.Fatal(err)
	}
	return &a, p.Spec.NodeName
}

func names(ns ...string) *[]string { return &ns }

func itoa(i int) string { return strconv.Itoa(i) }

type bindArgs = extenderv1.ExtenderBindingArgs

// createPods adds pods to the fake API server (the cache sees them through the informer path only
// once they are bound).
func (h *harness) createPods(pods ...*corev1.Pod) {
	h.t.Helper()
	for _, p := range pods {
		if _, err := h.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *harness) bind(name, node string) string {
	h.t.Helper()
	return h.srv.Bind(context.Background(), &bindArgs{PodName: name, PodNamespace: "default", Node: node}).Error
}

// allocate does what the device plugin does after Allocate: it records the assigned IDs on the pod.
func (h *harness) allocate(name string) {
	h.t.Helper()
	p, err := h.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	a, err := annotations.DecodeAssignment(p.Annotations[annotations.GPUAssignment])
	if err != nil {
		h.t.Fatal(err)
	}
	alloc := annotations.Allocation{Node: a.Node}
	for _, c := range a.Containers {
		alloc.Containers = append(alloc.Containers, annotations.ContainerAllocation{Name: c.Name, IDs: c.IDs(), Source: annotations.SourceAllocate})
	}
	enc, err := annotations.EncodeAllocation(alloc)
	if err != nil {
		h.t.Fatal(err)
	}
	p = p.DeepCopy()
	p.Annotations[annotations.GPUAllocated] = enc
	if p, err = h.client.CoreV1().Pods("default").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.cache.UpsertPod(p)
}
