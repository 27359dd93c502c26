package scheduler

import (
	"context"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The extender's view catches up with kube-scheduler's before it decides. Both follow the API
// server through informers of their own, and kube-scheduler's may be ahead: it filters a pod it
// has just seen created, while the extender's informer has not yet delivered the events before
// that creation (a pod deleted just before, whose cards the new pod needs). The extender would then
// refuse the new pod for cards its cache still shows held; kube-scheduler parks a refused pod until
// the next cluster event, and in a quiet cluster the deletion that freed the cards was that event:
// the pod waits for kube-scheduler's unschedulable flush, five minutes.
//
// A pod informer delivers events in resourceVersion order, so once the extender's cache has
// processed the pod at the resourceVersion kube-scheduler sent, it has processed every pod event
// kube-scheduler had when it read that version. Filter therefore waits, at most catchUpWait, until
// the cache has seen the pod as sent (Caught); in the usual case it already has, and the check is
// one map read. Waiting longer is bounded because the pod may never show at that version (the
// informer relisted past it, or it changed again); the filter then decides on what it has.

// catchUpWait bounds Filter's wait for the extender's informer (well under the chart's extender
// httpTimeout of 3 s); catchUpPoll is how often it looks.
const (
	catchUpWait = 500 * time.Millisecond
	catchUpPoll = time.Millisecond
)

// A pod the cache has seen bound, finished or deleted is past any version kube-scheduler can still
// filter: it is remembered as done (settled), so that a filter of such a pod, whose copy in
// kube-scheduler is older, answers at once instead of waiting catchUpWait for a version that will
// never come (a tenant creating and deleting pods could otherwise hold kube-scheduler's scheduling
// cycle half a second per pod). The last settledKeep to settle are remembered, in two generations.
const settledKeep = 4096

// noteUnbound records the resourceVersion of a pod not yet bound, and settles a bound or finished
// one; c.mu is held.
func (c *Cache) noteUnbound(pod *corev1.Pod) {
	if pod.Spec.NodeName != "" || finished(pod) {
		c.settle(pod.UID)
		return
	}
	if c.unbound == nil {
		c.unbound = map[types.UID]string{}
	}
	c.unbound[pod.UID] = pod.ResourceVersion
}

// settle forgets a pod's unbound version and remembers the pod as settled; c.mu is held.
func (c *Cache) settle(uid types.UID) {
	if _, was := c.unbound[uid]; !was {
		return // never seen unbound: no filter of it can be waiting
	}
	delete(c.unbound, uid)
	if len(c.settled) >= settledKeep || c.settled == nil {
		c.settledOld, c.settled = c.settled, make(map[types.UID]struct{}, settledKeep)
	}
	c.settled[uid] = struct{}{}
}

// Caught reports whether the cache has processed the pod at resourceVersion rv, or at a later one
// (resourceVersions compared as numbers when both are: the API server's are etcd revisions, and an
// opaque one is only ever equal or not), or has seen it bound, finished or deleted.
func (c *Cache) Caught(uid types.UID, rv string) bool {
	c.mu.RLock()
	seen, ok := c.unbound[uid]
	_, settled := c.settled[uid]
	_, settledOld := c.settledOld[uid]
	c.mu.RUnlock()
	if settled || settledOld {
		return true
	}
	if !ok {
		return false
	}
	if seen == rv {
		return true
	}
	a, err1 := strconv.ParseUint(seen, 10, 64)
	b, err2 := strconv.ParseUint(rv, 10, 64)
	return err1 == nil && err2 == nil && a > b
}

// catchUp waits until the cache has seen pod as kube-scheduler sent it, at most catchUpWait (or
// until ctx ends); it reports whether it had to wait and whether the cache caught up.
func (s *Server) catchUp(ctx context.Context, pod *corev1.Pod) (waited, caught bool) {
	if !s.awaitInformer || pod.ResourceVersion == "" || s.cache.Caught(pod.UID, pod.ResourceVersion) {
		return false, true
	}
	deadline := time.NewTimer(catchUpWait)
	defer deadline.Stop()
	tick := time.NewTicker(catchUpPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, false
		case <-deadline.C:
			return true, s.cache.Caught(pod.UID, pod.ResourceVersion)
		case <-tick.C:
			if s.cache.Caught(pod.UID, pod.ResourceVersion) {
				return true, true
			}
		}
	}
}
