package deviceplugin

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"

	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// evictor evicts pods whose container the kubelet's record shows was given another container's
// devices or limits (verify.go), through the Eviction API: PodDisruptionBudgets are respected (a 429
// is retried with back-off), and the eviction names the pod's UID, so a pod re-created under the
// same name is never hit. The pod's controller then creates a new pod, which is placed afresh.
type evictor struct {
	client kubernetes.Interface
	log    logr.Logger
	queue  workqueue.TypedRateLimitingInterface[evictee]
}

type evictee struct {
	Namespace, Name string
	UID             types.UID
	Why             string
}

// evictRetryMax bounds the back-off between tries; an eviction is given up after evictTries.
const (
	evictRetryMax = 30 * time.Second
	evictTries    = 40
)

func newEvictor(client kubernetes.Interface, log logr.Logger) *evictor {
	return &evictor{client: client, log: log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[evictee](retryBase, evictRetryMax),
			workqueue.TypedRateLimitingQueueConfig[evictee]{Name: "evictions"})}
}

func (e *evictor) enqueue(pod *podEntry, why string) {
	e.queue.Add(evictee{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Why: why})
}

func (e *evictor) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		e.queue.ShutDown()
	}()
	for {
		x, quit := e.queue.Get()
		if quit {
			return
		}
		err := e.evict(ctx, x)
		switch {
		case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			e.queue.Forget(x)
		case e.queue.NumRequeues(x) >= evictTries:
			e.log.Error(err, "eviction given up", logging.KeyPod, x.Namespace+"/"+x.Name)
			e.queue.Forget(x)
		default:
			e.log.Info("eviction failed; will retry", logging.KeyPod, x.Namespace+"/"+x.Name, "error", err.Error())
			e.queue.AddRateLimited(x)
		}
		e.queue.Done(x)
	}
}

func (e *evictor) evict(ctx context.Context, x evictee) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	uid := x.UID
	err := e.client.PolicyV1().Evictions(x.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: x.Name, Namespace: x.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
	if err != nil {
		return fmt.Errorf("evict %s/%s: %w", x.Namespace, x.Name, err)
	}
	e.log.Info("evicted a pod started with another container's devices; its controller re-creates it", logging.KeyPod, x.Namespace+"/"+x.Name, logging.KeyReason, x.Why)
	return nil
}
