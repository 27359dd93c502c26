package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// createAll submits pods at once, one goroutine each, as a controller scaling up would.
func (e *env) createAll(t *testing.T, pods ...*corev1.Pod) {
	t.Helper()
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, cancel := context.WithTimeout(context.Background(), apiTimeout)
			defer cancel()
			if _, err := e.client.CoreV1().Pods(namespace).Create(c, p, metav1.CreateOptions{}); err != nil {
				errs[i] = fmt.Errorf("create pod %s: %w", p.Name, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%v", err)
	}
}

// describe says where a pod stands and why: phase, node, and the reason the scheduler or the
// kubelet gave.
func describe(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
	if p.Status.Reason != "" || p.Status.Message != "" {
		fmt.Fprintf(&b, " (%s: %s)", p.Status.Reason, p.Status.Message)
	}
	b.WriteString(lastSchedulingMessage(p))
	return b.String()
}

// settle waits until every named pod is Running; it stops early when one has Failed (a broken
// invariant that no wait mends) and fails at once when a component has exited. Every named pod
// that is not Running at the end is an error naming its phase and reason. It returns the names of
// the Running pods.
func (e *env) settle(t *testing.T, timeout time.Duration, names ...string) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var byName map[string]*corev1.Pod
	var outcome string
	for {
		if err := e.componentsAlive(); err != nil {
			t.Fatalf("%v", err)
		}
		list, err := e.client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list pods: %v", err)
		}
		byName = map[string]*corev1.Pod{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		running, failed := 0, false
		for _, n := range names {
			p, ok := byName[n]
			switch {
			case !ok:
			case p.Status.Phase == corev1.PodRunning:
				running++
			case p.Status.Phase == corev1.PodFailed:
				failed = true
			}
		}
		if running == len(names) {
			break
		}
		if failed {
			outcome = "a pod of the group failed"
			break
		}
		if time.Now().After(deadline) {
			outcome = "timed out after " + timeout.String()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var running []string
	for _, n := range names {
		p, ok := byName[n]
		switch {
		case !ok:
			t.Errorf("pod %s is gone", n)
		case p.Status.Phase == corev1.PodRunning:
			running = append(running, n)
		case p.Status.Phase == corev1.PodFailed:
			t.Errorf("pod failed: %s", describe(p))
		default:
			t.Errorf("pod not Running (%s): %s", outcome, describe(p))
		}
	}
	return running
}

// settleAdmitted waits until every named pod is Running or Failed (the kubelet has admitted or
// refused it); every named pod that is neither at the end is an error. It returns the names of the
// Running pods and the Failed pods.
func (e *env) settleAdmitted(t *testing.T, timeout time.Duration, names ...string) (running []string, failed []*corev1.Pod) {
	t.Helper()
	var byName map[string]*corev1.Pod
	stack.Wait(t, timeout, fmt.Sprintf("%d pods Running or Failed", len(names)), func() (bool, string, error) {
		if err := e.componentsAlive(); err != nil {
			return false, "", err
		}
		list, err := e.client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		byName = map[string]*corev1.Pod{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		for _, n := range names {
			p, ok := byName[n]
			if !ok {
				return false, "", fmt.Errorf("pod %s is gone", n)
			}
			if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodFailed {
				return false, describe(p), nil
			}
		}
		return true, "", nil
	})
	for _, n := range names {
		if p := byName[n]; p.Status.Phase == corev1.PodRunning {
			running = append(running, n)
		} else {
			failed = append(failed, p)
		}
	}
	return running, failed
}

// failureWatch records when each pod of the namespace was first seen Failed.
type failureWatch struct {
	mu    sync.Mutex
	first map[string]time.Time
}

// watchFailures watches the namespace's pods until the test ends.
func (e *env) watchFailures(t *testing.T) *failureWatch {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	w, err := e.client.CoreV1().Pods(namespace).Watch(c, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatalf("watch pods: %v", err)
	}
	f := &failureWatch{first: map[string]time.Time{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Status.Phase != corev1.PodFailed {
				continue
			}
			now := time.Now()
			f.mu.Lock()
			if _, seen := f.first[p.Name]; !seen {
				f.first[p.Name] = now
			}
			f.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		cancel()
		<-done
	})
	return f
}

// rejectedAt is when node's kubelet rejected pod name at admission by the kubelet's own clock: the
// earliest time of its UnexpectedAdmissionError Events, which the kubelet stamps when it decides (in
// whole seconds, as core/v1 Events keep them); zero if it recorded none. The pod's Failed phase can
// reach the API server much later: kubelets from 1.36 on, restarted, first report a pod they reject
// as Pending and write Failed only at a later status sync (seen 8.4 s after the rejection).
func (e *env) rejectedAt(t *testing.T, name string) time.Time {
	t.Helper()
	list, err := e.client.CoreV1().Events(namespace).List(ctx(t), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + name + ",reason=UnexpectedAdmissionError",
	})
	if err != nil {
		t.Fatalf("events of %s: %v", name, err)
	}
	var first time.Time
	for _, ev := range list.Items {
		at := ev.FirstTimestamp.Time
		if at.IsZero() {
			at = ev.EventTime.Time
		}
		if !at.IsZero() && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// at is when the pod was first seen Failed; zero if never.
func (f *failureWatch) at(name string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first[name]
}

// checkInvariants checks what the issue asks of every fault, on the kubelet's view (DESIGN.md: the
// PodResources API is the ground truth of who holds what): each Running pod's containers hold what
// the plugin's allocation record says, and what their assignment names unless the kubelet swapped
// interchangeable containers (holdings); on every node no device is held twice and no card's memory
// or cores are overbooked by what the holders asked for (noOverbooking), and no card is held whole
// by one container and by slot by another (noMixedHolders); no pod of the namespace has Failed.
func (e *env) checkInvariants(t *testing.T, running []string) map[string]held {
	t.Helper()
	h := e.checkHoldings(t, running)
	e.noFailedPods(t)
	return h
}

// checkHoldings is checkInvariants without the check for Failed pods.
func (e *env) checkHoldings(t *testing.T, running []string) map[string]held {
	t.Helper()
	var h map[string]held
	if len(running) > 0 {
		h = e.holdings(t, running...)
	}
	for _, n := range e.Nodes {
		e.noOverbooking(t, n.Name)
		e.noMixedHolders(t, n.Name)
	}
	return h
}

// gpuContainer is one GPU container of a pod of the namespace, as the checks see it.
type gpuContainer struct {
	key  string // pod/container
	node string
	req  annotations.ContainerRequest
	sel  annotations.Selector
	// assigned are the device IDs of the extender's assignment, sorted; nil without one.
	assigned []string
}

// interchangeable reports whether the kubelet may swap a and b harmlessly (DESIGN.md, "How Allocate
// knows the pod"): same node, same requests, same selectors.
func (a gpuContainer) interchangeable(b gpuContainer) bool {
	return a.node == b.node && a.req.Interchangeable(&b.req) && cmp.Equal(a.sel, b.sel)
}

// gpuContainers reads every bound, unfinished GPU container of the namespace, keyed pod/container.
func (e *env) gpuContainers(t *testing.T) map[string]gpuContainer {
	t.Helper()
	list, err := e.client.CoreV1().Pods(namespace).List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	out := map[string]gpuContainer{}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		req, err := annotations.ParsePodRequest(p, e.Names)
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		sel, err := annotations.ParseSelector(p.Annotations)
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		var asg *annotations.Assignment
		if raw, ok := p.Annotations[annotations.GPUAssignment]; ok {
			a, err := annotations.DecodeAssignment(raw)
			if err != nil {
				t.Fatalf("pod %s: %v", p.Name, err)
			}
			asg = &a
		}
		for _, r := range req.Containers {
			c := gpuContainer{key: p.Name + "/" + r.Name, node: p.Spec.NodeName, req: r, sel: sel}
			if asg != nil && asg.Node == p.Spec.NodeName {
				if ca := asg.Container(r.Name); ca != nil {
					c.assigned = slices.Sorted(slices.Values(ca.IDs()))
				}
			}
			out[c.key] = c
		}
	}
	return out
}

// holdings checks each named pod, container by container, against the kubelet's PodResources (the
// ground truth of what a container holds): the device plugin's allocation record must name the
// same devices (waited for: the plugin reconciles against PodResources). The extender's assignment
// names them too, except where the kubelet admitted interchangeable containers in another order
// than the one they were bound in and so swapped their cards: DESIGN.md calls that harmless and the
// reconciliation corrects the records. Such a container is accepted only when every other
// container that was assigned a device it holds, or holds a device it was assigned, is
// interchangeable with it; each swap is logged. It returns what each container holds (PodResources),
// keyed "pod/container".
func (e *env) holdings(t *testing.T, names ...string) map[string]held {
	t.Helper()
	all := e.gpuContainers(t)
	records := map[string]map[stack.ContainerRef][]string{} // node -> PodResources
	devicesOf := func(node string) map[stack.ContainerRef][]string {
		if records[node] == nil {
			devs, err := e.Devices(ctx(t), node)
			if err != nil {
				t.Fatalf("%v", err)
			}
			records[node] = devs
		}
		return records[node]
	}
	out := map[string]held{}
	var swapped []string
	for _, name := range names {
		p, a := e.assignment(t, name)
		for _, c := range p.Spec.Containers {
			ref := stack.ContainerRef{Namespace: namespace, Pod: name, Container: c.Name}
			got := devicesOf(a.Node)[ref]
			ca := a.Container(c.Name)
			if ca == nil {
				if len(got) > 0 {
					t.Errorf("%s on %s holds %v without an assignment", ref, a.Node, got)
				}
				continue
			}
			h := held{Node: a.Node, IDs: got, Devices: ca.Devices}
			h.Cards = e.cardsOf(t, ref, a.Node, got)
			key := name + "/" + c.Name
			out[key] = h
			if !slices.Equal(slices.Sorted(slices.Values(ca.IDs())), got) {
				swapped = append(swapped, key)
			}
		}
	}
	// The allocation record names what PodResources names, for every container (swapped or not).
	e.waitAllocationRecords(t, out)
	for _, key := range swapped {
		c, ok := all[key]
		if !ok {
			t.Errorf("%s: not found among the bound pods", key)
			continue
		}
		got := out[key].IDs
		// Who was assigned what c holds, and who holds what c was assigned.
		partners := map[string]bool{}
		for _, o := range all {
			if o.key == key || o.node != c.node {
				continue
			}
			for _, id := range got {
				if slices.Contains(o.assigned, id) && !slices.Contains(c.assigned, id) {
					partners[o.key] = true
				}
			}
		}
		for ref, ids := range devicesOf(c.node) {
			k := ref.Pod + "/" + ref.Container
			for _, id := range c.assigned {
				if k != key && slices.Contains(ids, id) && !slices.Contains(got, id) {
					if ref.Namespace != namespace {
						t.Errorf("%s was assigned %s, which %s holds", key, id, ref)
						continue
					}
					partners[k] = true
				}
			}
		}
		for _, k := range slices.Sorted(maps.Keys(partners)) {
			if o, ok := all[k]; !ok || !c.interchangeable(o) {
				t.Errorf("%s on %s holds %v, assigned %v: swapped with %s, which is not interchangeable (%+v %+v vs %+v %+v)",
					key, c.node, got, c.assigned, k, c.req, c.sel, o.req, o.sel)
			}
		}
		t.Logf("kubelet swap (interchangeable, allocation record corrected): %s on %s holds %v, assigned %v; with %v",
			key, c.node, got, c.assigned, slices.Sorted(maps.Keys(partners)))
	}
	return out
}

// noOverbooking checks one node's PodResources: no device ID is held by two containers, and on
// every card the memory and cores its holders asked for fit the card. What a holder reserves comes
// from its request (a whole card: all of it), not from its assignment, which names other cards
// after a swap.
func (e *env) noOverbooking(t *testing.T, node string) {
	t.Helper()
	devs, err := e.Devices(ctx(t), node)
	if err != nil {
		t.Fatalf("%v", err)
	}
	all := e.gpuContainers(t)
	type use struct {
		mem     int64
		cores   int
		holders []string
	}
	holder := map[string]stack.ContainerRef{}
	used := map[string]*use{}
	for _, ref := range slices.SortedFunc(maps.Keys(devs), func(a, b stack.ContainerRef) int { return strings.Compare(a.String(), b.String()) }) {
		c, known := all[ref.Pod+"/"+ref.Container]
		if ref.Namespace != namespace || !known {
			t.Logf("%s on %s holds %v (not a pod of the test)", ref, node, devs[ref])
		}
		for _, id := range devs[ref] {
			if other, dup := holder[id]; dup {
				t.Errorf("device %s on %s is held by %s and %s", id, node, other, ref)
			}
			holder[id] = ref
			uuid, _, err := annotations.ParseDeviceID(id)
			if err != nil {
				t.Errorf("%s on %s holds device %q: %v", ref, node, id, err)
				continue
			}
			card, ok := e.Card(uuid)
			if !ok {
				t.Errorf("%s on %s holds %s, no card of the stack", ref, node, id)
				continue
			}
			u := used[uuid]
			if u == nil {
				u = &use{}
				used[uuid] = u
			}
			u.holders = append(u.holders, ref.String())
			if known {
				u.mem += c.req.MemoryOn(card.MemoryMiB)
				u.cores += c.req.CoresOn()
			}
		}
	}
	for _, uuid := range slices.Sorted(maps.Keys(used)) {
		card, _ := e.Card(uuid)
		if u := used[uuid]; u.mem > card.MemoryMiB || u.cores > 100 {
			t.Errorf("card %s on %s is overbooked: %d MiB of %d, %d%% cores, held by %v", uuid, node, u.mem, card.MemoryMiB, u.cores, u.holders)
		}
	}
}

// noMixedHolders checks one node's PodResources: a card held as a whole card (device ID = UUID)
// is held by no one else, by whole card or by slot (`<UUID>::<k>`). After a change of shares the
// kubelet advertises other IDs for the same card, so this is where a double booking would show.
// It logs cards with more slot holders than the node's shares now (pods that outlived a lower
// shares setting): legitimate, as long as nobody new joined them.
func (e *env) noMixedHolders(t *testing.T, node string) {
	t.Helper()
	devs, err := e.Devices(ctx(t), node)
	if err != nil {
		t.Fatalf("%v", err)
	}
	type holders struct{ whole, slots []string }
	byCard := map[string]*holders{}
	for ref, ids := range devs {
		for _, id := range ids {
			uuid, slot, err := annotations.ParseDeviceID(id)
			if err != nil {
				t.Errorf("%s on %s holds device %q: %v", ref, node, id, err)
				continue
			}
			h := byCard[uuid]
			if h == nil {
				h = &holders{}
				byCard[uuid] = h
			}
			if slot < 0 {
				h.whole = append(h.whole, ref.String())
			} else {
				h.slots = append(h.slots, ref.String()+"@"+id)
			}
		}
	}
	for _, uuid := range slices.Sorted(maps.Keys(byCard)) {
		h := byCard[uuid]
		if len(h.whole) > 0 && len(h.whole)+len(h.slots) > 1 {
			t.Errorf("card %s on %s is held whole by %v and also by %v", uuid, node, h.whole, append(slices.Clone(h.whole[1:]), h.slots...))
		}
		if shares := e.Shares(node); len(h.slots) > shares {
			t.Logf("card %s on %s has %d slot holders, above shares %d now (pods from before a shares change): %v", uuid, node, len(h.slots), shares, h.slots)
		}
	}
}

// noFailedPods fails for every pod of the namespace in phase Failed (UnexpectedAdmissionError is
// how the kubelet fails a pod whose devices it could not allocate).
func (e *env) noFailedPods(t *testing.T) {
	t.Helper()
	list, err := e.client.CoreV1().Pods(namespace).List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.Status.Phase == corev1.PodFailed {
			t.Errorf("pod failed: %s", describe(p))
		}
	}
}

// waitBound waits until every named pod has a node, failing t at the timeout with those still
// unbound, and returns how long that took from start.
func (e *env) waitBound(t *testing.T, start time.Time, timeout time.Duration, names ...string) time.Duration {
	t.Helper()
	var took time.Duration
	stack.Wait(t, timeout, fmt.Sprintf("%d pods bound", len(names)), func() (bool, string, error) {
		list, err := e.client.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		now := time.Now()
		bound := map[string]bool{}
		var pending []string
		for i := range list.Items {
			p := &list.Items[i]
			if p.Spec.NodeName != "" {
				bound[p.Name] = true
			} else {
				pending = append(pending, describe(p))
			}
		}
		for _, n := range names {
			if !bound[n] {
				slices.Sort(pending)
				if len(pending) > 5 {
					pending = append(pending[:5], fmt.Sprintf("and %d more", len(pending)-5))
				}
				return false, "unbound: " + strings.Join(pending, "; "), nil
			}
		}
		took = now.Sub(start)
		return true, "", nil
	})
	return took
}

// waitChannel waits for one value from ch, failing t with what after timeout.
func waitChannel[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("waiting for %s: timed out after %s", what, timeout)
	}
	var zero T
	return zero
}

// logWatcher reports the first line containing a string that a log file gains after the watcher
// was made.
type logWatcher struct {
	path   string
	offset int64
}

func newLogWatcher(t *testing.T, path string) *logWatcher {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("log %s: %v", path, err)
	}
	return &logWatcher{path: path, offset: fi.Size()}
}

// wait polls the log every 5ms until a new line contains substr, and returns that line.
func (w *logWatcher) wait(t *testing.T, timeout time.Duration, substr string) string {
	t.Helper()
	f, err := os.Open(w.path)
	if err != nil {
		t.Fatalf("log %s: %v", w.path, err)
	}
	defer f.Close()
	deadline := time.Now().Add(timeout)
	var partial []byte // a line not yet complete
	buf := make([]byte, 64<<10)
	for {
		n, err := f.ReadAt(buf, w.offset)
		if n > 0 {
			w.offset += int64(n)
			partial = append(partial, buf[:n]...)
			for {
				i := bytes.IndexByte(partial, '\n')
				if i < 0 {
					break
				}
				line := string(partial[:i])
				partial = partial[i+1:]
				if strings.Contains(line, substr) {
					return strings.TrimSpace(line)
				}
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("log %s: %v", w.path, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %q in %s: timed out after %s", substr, w.path, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
