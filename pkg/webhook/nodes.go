package webhook

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// CardSource gives the current view of the cluster's cards. Cards must be cheap: it is on the
// admission path.
type CardSource interface {
	Cards() *Cards
}

// StaticCards is a CardSource that never changes (tests, benchmarks).
type StaticCards struct{ C *Cards }

// Cards returns the fixed view.
func (s StaticCards) Cards() *Cards { return s.C }

var (
	_ CardSource = StaticCards{}
	_ CardSource = (*NodeWatcher)(nil)
)

// NodeWatcher keeps a Cards view from an informer over Nodes. It holds only each node's name and
// inventory annotation, and rebuilds the view lazily: the first Cards call after a change pays for
// the rebuild, later calls load a pointer.
type NodeWatcher struct {
	log      logr.Logger
	informer cache.SharedIndexInformer

	mu    sync.Mutex
	raw   map[string]string                // node → inventory annotation as last seen
	inv   map[string]annotations.Inventory // node → decoded inventory, valid ones only
	dirty atomic.Bool
	view  atomic.Pointer[Cards]
}

// NewNodeWatcher builds the watcher; Run starts it.
func NewNodeWatcher(client kubernetes.Interface, log logr.Logger) (*NodeWatcher, error) {
	w := &NodeWatcher{
		log: log,
		raw: map[string]string{},
		inv: map[string]annotations.Inventory{},
	}
	w.view.Store(NewCards(nil))
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0)
	w.informer = factory.Core().V1().Nodes().Informer()
	// Keep nothing of a node but its name and its inventory: nodes are large, and many.
	if err := w.informer.SetTransform(slimNode); err != nil {
		return nil, fmt.Errorf("node informer transform: %w", err)
	}
	_, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.update(obj) },
		UpdateFunc: func(_, obj any) { w.update(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				w.set(n.Name, "", false)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("node informer handler: %w", err)
	}
	return w, nil
}

func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}}
	if v, ok := n.Annotations[annotations.GPUInventory]; ok {
		slim.Annotations = map[string]string{annotations.GPUInventory: v}
	}
	return slim, nil
}

// Run runs the informer until ctx ends.
func (w *NodeWatcher) Run(ctx context.Context) { w.informer.RunWithContext(ctx) }

// HasSynced reports whether the first list of nodes has been seen.
func (w *NodeWatcher) HasSynced() bool { return w.informer.HasSynced() }

func (w *NodeWatcher) update(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	v, has := n.Annotations[annotations.GPUInventory]
	w.set(n.Name, v, has)
}

// set records a node's inventory annotation; has is false when the node has none or is gone.
func (w *NodeWatcher) set(node, value string, has bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old, had := w.raw[node]
	if had == has && old == value {
		return // heartbeats and other changes that do not touch the inventory
	}
	delete(w.raw, node)
	delete(w.inv, node)
	if has {
		w.raw[node] = value
		inv, err := annotations.DecodeInventory(value)
		if err != nil {
			w.log.Error(err, "Ignoring a node's card inventory", logging.KeyNode, node)
		} else {
			w.inv[node] = inv
		}
	}
	w.dirty.Store(true)
}

// Cards returns the current view, rebuilding it first if a node's inventory changed since.
func (w *NodeWatcher) Cards() *Cards {
	if !w.dirty.Load() {
		return w.view.Load()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dirty.Load() {
		w.view.Store(NewCards(w.inv))
		w.dirty.Store(false)
	}
	return w.view.Load()
}
