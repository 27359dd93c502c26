package scenario

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// bindings watches the scenario namespace and records when each pod was first seen created and
// first seen bound (spec.nodeName set).
type bindings struct {
	mu      sync.Mutex
	created map[types.UID]time.Time
	bound   map[types.UID]time.Time
	changed chan struct{} // closed and replaced at every new binding
	stop    context.CancelFunc
}

// watchBindings starts the watch and returns once it has listed the namespace.
func watchBindings(client kubernetes.Interface) (*bindings, error) {
	w := &bindings{created: map[types.UID]time.Time{}, bound: map[types.UID]time.Time{}, changed: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(Namespace))
	inf := factory.Core().V1().Pods().Informer()
	see := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.created[p.UID]; !ok {
			w.created[p.UID] = now
		}
		if _, ok := w.bound[p.UID]; !ok && p.Spec.NodeName != "" {
			w.bound[p.UID] = now
			close(w.changed)
			w.changed = make(chan struct{})
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = func() { cancel(); factory.Shutdown() }
	factory.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		w.stop()
		return nil, fmt.Errorf("pod watch did not sync")
	}
	return w, nil
}

// waitBound waits until n pods are bound, or until nothing new has bound for idle.
func (w *bindings) waitBound(n int, idle time.Duration) int {
	for {
		w.mu.Lock()
		got, changed := len(w.bound), w.changed
		w.mu.Unlock()
		if got >= n {
			return got
		}
		select {
		case <-changed:
		case <-time.After(idle):
			return got
		}
	}
}

// boundTimes returns the binding times, sorted.
func (w *bindings) boundTimes() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]time.Time, 0, len(w.bound))
	for _, t := range w.bound {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// reset forgets everything seen so far.
func (w *bindings) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.created, w.bound = map[types.UID]time.Time{}, map[types.UID]time.Time{}
}
