package deviceplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// Retry timing of API writes: exponential from base to max per failing item.
const (
	retryBase = 200 * time.Millisecond
	retryMax  = 2 * time.Minute
)

// annotationPatch is a merge patch setting one annotation; with uid set it only applies to that
// object (the API server refuses it if the name now belongs to another).
func annotationPatch(uid types.UID, key, value string) ([]byte, error) {
	meta := map[string]any{"annotations": map[string]string{key: value}}
	if uid != "" {
		meta["uid"] = uid
	}
	return json.Marshal(map[string]any{"metadata": meta})
}

// recordWriter writes allocation records on pods, one patch per pod however many containers changed,
// retrying with backoff. It runs off the Allocate path.
type recordWriter struct {
	plugin *Plugin
	client kubernetes.Interface
	log    logr.Logger
	queue  workqueue.TypedRateLimitingInterface[types.UID]
	// written is the last value this writer wrote per pod, so an informer that lags behind a write
	// does not cause the same write again.
	written map[types.UID]string
}

func newRecordWriter(p *Plugin, client kubernetes.Interface, log logr.Logger) *recordWriter {
	return &recordWriter{plugin: p, client: client, log: log, written: map[types.UID]string{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](retryBase, retryMax),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "allocation-records"})}
}

func (w *recordWriter) enqueue(uid types.UID) { w.queue.Add(uid) }

// run processes the queue until ctx ends. Only one worker runs, so written needs no lock.
func (w *recordWriter) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	for {
		uid, quit := w.queue.Get()
		if quit {
			return
		}
		err := w.sync(ctx, uid)
		switch {
		case err == nil:
			w.queue.Forget(uid)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err) && ctx.Err() == nil && !w.exists(uid):
			w.queue.Forget(uid)
		default:
			w.log.Error(err, "writing allocation record failed; will retry", "uid", uid)
			w.queue.AddRateLimited(uid)
		}
		w.queue.Done(uid)
	}
}

func (w *recordWriter) exists(uid types.UID) bool {
	_, _, _, ok := w.plugin.pendingRecord(uid)
	return ok
}

func (w *recordWriter) sync(ctx context.Context, uid types.UID) error {
	pod, rec, changed, ok := w.plugin.pendingRecord(uid)
	if !ok {
		delete(w.written, uid)
		return nil
	}
	if !changed {
		return nil
	}
	value, err := annotations.EncodeAllocation(rec)
	if err != nil {
		return fmt.Errorf("encode allocation record of %s: %w", pod.key(), err)
	}
	if w.written[uid] == value {
		return nil
	}
	patch, err := annotationPatch(uid, annotations.GPUAllocated, value)
	if err != nil {
		return err
	}
	_, err = w.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	w.plugin.metrics.wrote("pod", err)
	if err != nil {
		return fmt.Errorf("patch %s: %w", pod.key(), err)
	}
	w.written[uid] = value
	w.log.V(1).Info("allocation record written", logging.KeyPod, pod.key(), "record", value)
	return nil
}

// inventoryWriter keeps the Node's inventory annotation equal to the plugin's cards. It writes only
// when the value differs from what the Node carries, and retries with backoff.
type inventoryWriter struct {
	plugin *Plugin
	client kubernetes.Interface
	node   string
	// current returns the Node's annotation value as the informer last saw it (found false when the
	// Node is not known yet).
	current func() (value string, found bool)
	log     logr.Logger
	queue   workqueue.TypedRateLimitingInterface[string]
	written string
	// kubelet, when set, gives the inventory's kubelet field (kubelettopology.go).
	kubelet func() *annotations.KubeletTopology
}

func newInventoryWriter(p *Plugin, client kubernetes.Interface, node string, current func() (string, bool), log logr.Logger) *inventoryWriter {
	return &inventoryWriter{plugin: p, client: client, node: node, current: current, log: log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBase, retryMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "inventory"})}
}

func (w *inventoryWriter) enqueue() { w.queue.Add(w.node) }

func (w *inventoryWriter) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	for {
		key, quit := w.queue.Get()
		if quit {
			return
		}
		if err := w.sync(ctx); err != nil {
			w.log.Error(err, "publishing the inventory failed; will retry", logging.KeyNode, w.node)
			w.queue.AddRateLimited(key)
		} else {
			w.queue.Forget(key)
		}
		w.queue.Done(key)
	}
}

func (w *inventoryWriter) sync(ctx context.Context) error {
	want, err := annotations.EncodeInventory(w.inventory())
	if err != nil {
		return fmt.Errorf("encode inventory: %w", err)
	}
	have, found := w.current()
	if !found {
		return fmt.Errorf("node %s is not registered yet", w.node)
	}
	if have == want {
		// The Node shows the value: nothing of ours is in flight any more, so the next difference is
		// drift (someone removed or edited the annotation) and is rewritten at once.
		w.written = ""
		return nil
	}
	if w.written == want {
		// Written already; the informer has not caught up (it will enqueue again when it does, and a
		// value changed by someone else is then rewritten).
		w.written = ""
		return nil
	}
	patch, err := annotationPatch("", annotations.GPUInventory, want)
	if err != nil {
		return err
	}
	_, err = w.client.CoreV1().Nodes().Patch(ctx, w.node, types.MergePatchType, patch, metav1.PatchOptions{})
	w.plugin.metrics.wrote("node", err)
	if err != nil {
		return fmt.Errorf("patch node %s: %w", w.node, err)
	}
	w.written = want
	w.log.Info("inventory published", logging.KeyNode, w.node, "cards", len(w.plugin.Inventory().GPUs))
	return nil
}
