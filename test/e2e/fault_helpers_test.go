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

// checkInvariants checks what the issue asks of every fault: each Running pod holds exactly the
// devices its assignment names, in the kubelet's PodResources and in the plugin's allocation
// record (truth); on every node no device is held twice, no card's memory or cores are
// overbooked (noDoubleBooking), and no card is held whole by one container and by slot by
// another (noMixedHolders); no pod of the namespace has Failed.
func (e *env) checkInvariants(t *testing.T, running []string) map[string]held {
	t.Helper()
	var h map[string]held
	if len(running) > 0 {
		h = e.truth(t, running...)
	}
	for _, n := range e.Nodes {
		e.noDoubleBooking(t, n.Name)
		e.noMixedHolders(t, n.Name)
	}
	e.noFailedPods(t)
	return h
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
