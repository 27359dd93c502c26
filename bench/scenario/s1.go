package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/sim"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// S1Case is one size of S1: a cluster of ClusterNodes nodes × GPUsPerNode cards, half of every
// node's cards held by a running pod, and requests naming Names of the nodes.
type S1Case struct {
	ClusterNodes int
	GPUsPerNode  int
	Names        int
}

// S1Result is one case's figures for a filter call followed by the prioritize call for the same
// pod and names, as kube-scheduler sends them, through the extender's HTTP handler on loopback.
type S1Result struct {
	S1Case
	Calls int
	// P50 and P99 are of one filter+prioritize pair, client side (encode, HTTP, decide, decode).
	P50, P99 time.Duration
	// FilterP99 is the filter call alone.
	FilterP99 time.Duration
	// AllocsPerCall are heap allocations per filter+prioritize pair in the whole process (client
	// and server).
	AllocsPerCall float64
}

// S1Server builds the extender's real HTTP handler over a cache of c.ClusterNodes nodes, half of
// each node's cards used, and serves it on loopback. It returns the server and the names.
func S1Server(c S1Case) (*httptest.Server, []string, error) {
	names := annotations.DefaultResourceNames()
	cache := scheduler.NewCache(names, CardinalScheduler)
	all := make([]string, c.ClusterNodes)
	for i := range all {
		name := nodeName(i)
		all[i] = name
		cards := simCards(name, c.GPUsPerNode)
		inv, err := annotations.EncodeInventory(inventoryOf(cards))
		if err != nil {
			return nil, nil, err
		}
		cache.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotations.GPUInventory: inv}}})
		pod, err := holdingPod(name, cards[:c.GPUsPerNode/2])
		if err != nil {
			return nil, nil, err
		}
		cache.UpsertPod(pod)
	}
	decider, err := core.New(core.Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack})
	if err != nil {
		return nil, nil, err
	}
	srv := scheduler.NewServer(cache, scheduler.ServerOptions{Decider: decider, Names: names})
	return httptest.NewServer(srv.Handler()), all, nil
}

// holdingPod is a running pod on node that was assigned, and allocated, cards.
func holdingPod(node string, cards []sim.Card) (*corev1.Pod, error) {
	pod := gpuPod("hold-"+node, CardinalScheduler, len(cards))
	pod.UID = types.UID("uid-hold-" + node)
	pod.Spec.NodeName = node
	pod.Status.Phase = corev1.PodRunning
	ca := annotations.ContainerAssignment{Name: "main"}
	ids := make([]string, 0, len(cards))
	for _, c := range cards {
		ca.Devices = append(ca.Devices, annotations.DeviceAssignment{UUID: c.UUID, ID: c.UUID, MemoryMiB: c.MemoryMiB, Cores: 100})
		ids = append(ids, c.UUID)
	}
	asg, err := annotations.EncodeAssignment(annotations.Assignment{V: annotations.Version, Node: node, Containers: []annotations.ContainerAssignment{ca}})
	if err != nil {
		return nil, err
	}
	alloc, err := annotations.EncodeAllocation(annotations.Allocation{V: annotations.Version, Node: node,
		Containers: []annotations.ContainerAllocation{{Name: "main", IDs: ids, Source: annotations.SourceAllocate}}})
	if err != nil {
		return nil, err
	}
	pod.Annotations = map[string]string{annotations.GPUAssignment: asg, annotations.GPUAllocated: alloc}
	return pod, nil
}

// S1Request is the body kube-scheduler sends (nodeCacheCapable): a one-GPU pod and n of the names,
// spread over the cluster.
func S1Request(all []string, n int) ([]byte, error) {
	step := max(1, len(all)/n)
	picked := make([]string, 0, n)
	for i := 0; i < len(all) && len(picked) < n; i += step {
		picked = append(picked, all[i])
	}
	pod := gpuPod("s1", CardinalScheduler, 1)
	pod.UID = "uid-s1"
	return json.Marshal(extenderv1.ExtenderArgs{Pod: pod, NodeNames: &picked})
}

// post sends body to url and checks the answer is 200.
func post(client *http.Client, url string, body []byte) error {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}

// S1 runs calls filter+prioritize pairs of case c (after a warm-up of calls/10) and returns their
// latency percentiles and allocations.
func S1(c S1Case, calls int) (S1Result, error) {
	srv, all, err := S1Server(c)
	if err != nil {
		return S1Result{}, err
	}
	defer srv.Close()
	body, err := S1Request(all, c.Names)
	if err != nil {
		return S1Result{}, err
	}
	client := srv.Client()
	pair := func() (time.Duration, time.Duration, error) {
		start := time.Now()
		if err := post(client, srv.URL+"/filter", body); err != nil {
			return 0, 0, err
		}
		filtered := time.Since(start)
		if err := post(client, srv.URL+"/prioritize", body); err != nil {
			return 0, 0, err
		}
		return time.Since(start), filtered, nil
	}
	for range max(1, calls/10) {
		if _, _, err := pair(); err != nil {
			return S1Result{}, err
		}
	}
	took := make([]time.Duration, 0, calls)
	filters := make([]time.Duration, 0, calls)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		d, f, err := pair()
		if err != nil {
			return S1Result{}, err
		}
		took, filters = append(took, d), append(filters, f)
	}
	runtime.ReadMemStats(&after)
	slices.Sort(took)
	slices.Sort(filters)
	return S1Result{S1Case: c, Calls: calls, P50: percentile(took, 50), P99: percentile(took, 99), FilterP99: percentile(filters, 99),
		AllocsPerCall: float64(after.Mallocs-before.Mallocs) / float64(calls)}, nil
}
