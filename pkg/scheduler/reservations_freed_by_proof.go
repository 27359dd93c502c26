package scheduler

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// A reservation is freed only by proof that no Binding of its pod can still land. Bind reserves the
// cards before it posts the Binding; when the post fails, settle reads the pod back:
//
//   - the pod is gone or was created again, or it is bound (elsewhere, or with other cards): no
//     write of this reservation can land; the reservation goes (a bound pod's record replaces it);
//   - the pod is unbound and the API server refused this write outright (a definitive error such as
//     429 from API priority and fairness or a webhook's Forbidden): this write did not land, but an
//     earlier Binding of the same reservation whose outcome was unknown may still commit, so the
//     reservation goes only if there was none (Release);
//   - otherwise (a timeout, a lost reply, an unreadable pod) the outcome is unknown: the reservation
//     stays and is marked unsettled (MarkUnsettled).
//
// A Binding counts from the moment it may have been sent (StartBinding, before the POST), not from
// its read-back: kube-scheduler retries a bind after its extender timeout while the first attempt
// may still be waiting on the API server, and a refusal of the retry must not free cards the first
// attempt's Binding may still take. A retry on the same node writes the same
//     assignment; no other node may take the pod (ErrBindPending).
//
// An unsettled reservation is freed by the informer showing the pod bound or deleted, by a later
// read-back that proves it (above), or by the TTL read-back (settleReservations): after
// DefaultReservationTTL every earlier Binding has been answered or abandoned.

// DefaultReservationTTL is how long a reservation may wait for the informer to show its pod bound
// before the extender reads the pod back and, if it is still unbound or gone, frees its cards. It is
// longer than the API server's default request timeout (60 s), so a Binding still being processed
// when the reservation is read back has long been answered or abandoned.
const DefaultReservationTTL = 90 * time.Second

// settleReservations settles every reservation older than ttl by reading its pod back from the API
// server: a pod that is gone, was created again, or is still unbound loses its reservation; a bound
// pod's record replaces it (as the informer would have done).
func (s *Server) settleReservations(ctx context.Context, ttl time.Duration) {
	for _, key := range s.cache.ExpireGroups(s.cache.clock.Now().Add(-ttl)) {
		s.metrics.groupsExpired.Inc()
		s.log.Info("pod group plan expired: its pods were not all bound in time; its cards are free", "group", key, "ttl", ttl.String())
	}
	for _, r := range s.cache.Reservations(s.cache.clock.Now().Add(-ttl)) {
		ns, name, err := toolscache.SplitMetaNamespaceKey(r.Key)
		if err != nil {
			continue // keys are Reserve's namespace/name: never here
		}
		rctx, cancel := context.WithTimeout(ctx, settleTimeout)
		pod, err := s.client.CoreV1().Pods(ns).Get(rctx, name, metav1.GetOptions{})
		cancel()
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			continue // try again next round; never free cards on a failed read
		case pod.UID == r.UID && pod.Spec.NodeName != "":
			s.cache.UpsertPod(pod)
			continue
		}
		if s.cache.ExpireReservation(r) {
			s.metrics.expired.Inc()
			s.log.Info("reservation expired: pod still unbound", logging.KeyPod, r.Key, logging.KeyNode, r.Node, "age", s.cache.clock.Since(r.Since).Round(time.Second).String())
		}
	}
}

// runReservationSweeper settles old reservations every ttl/4 until ctx is done.
func (s *Server) runReservationSweeper(ctx context.Context, ttl time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) { s.settleReservations(ctx, ttl) }, max(ttl/4, time.Second))
}

// Reservation is a reservation Reserve made that the informer has not yet shown bound.
type Reservation struct {
	UID   types.UID
	Key   string // namespace/name
	Node  string
	Since time.Time
}

// Reservations returns the reservations made or last confirmed before cutoff, oldest first is not
// promised. The caller reads each pod back and settles it (ExpireReservation or UpsertPod).
func (c *Cache) Reservations(cutoff time.Time) []Reservation {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []Reservation
	for _, p := range c.pods {
		if p.reserved && p.group == "" && p.since.Before(cutoff) {
			out = append(out, Reservation{UID: p.uid, Key: p.key, Node: p.node, Since: p.since})
		}
	}
	return out
}

// ExpireReservation drops the reservation r when it is still the pod's record and unchanged since
// Reservations returned it (the pod was read back unbound or gone).
func (c *Cache) ExpireReservation(r Reservation) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.pods[r.UID]
	if old == nil || !old.reserved || old.node != r.Node || !old.since.Equal(r.Since) {
		return false
	}
	c.replace(r.UID, old, nil)
	c.releaseCPUs(r.UID)
	if h, ok := c.hosts[r.UID]; ok && h.reserved {
		c.setHost(r.UID, hostRecord{}, false)
	}
	return true
}

// reservedNode returns the node of the pod's live reservation, if it has one. Callers hold mu.
func (c *Cache) reservedNode(uid types.UID) (string, bool) {
	if p := c.pods[uid]; p != nil && p.reserved {
		return p.node, true
	}
	return "", false
}

// Release drops a reservation made by Reserve after a Binding the API server refused (this write
// did not land) and ends that attempt (StartBinding), unless another Binding of the reservation may
// still commit: one whose outcome was unknown (unsettled), or one still being posted or read back
// by a concurrent bind (kube-scheduler retries after its extender timeout while the first attempt
// may still be waiting on the API server), or the reservation is a pod group's (it stays the
// group's until the member is bound, gone, or the plan expires: groups.go). It reports whether the
// reservation is gone. Records seen by the informer stay.
func (c *Cache) Release(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.pods[uid]; old != nil && old.reserved {
		old.posting = max(old.posting-1, 0)
		if old.unsettled || old.posting > 0 || old.group != "" {
			// A group's reservation stays the group's until its plan expires (groups.go).
			return false
		}
	}
	c.drop(uid)
	return true
}

// ReleaseProven drops a reservation made by Reserve whatever earlier Bindings did: the caller has
// proof that none of them can land (the pod is gone or was created again). Records seen by the
// informer stay.
func (c *Cache) ReleaseProven(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.vacate(uid) // a group member's cards stay its group's (groups.go)
	c.drop(uid)
}

// drop removes the pod's reservation and its reserved CPU and memory. Callers hold mu.
func (c *Cache) drop(uid types.UID) {
	if old := c.pods[uid]; old != nil && old.reserved {
		c.replace(uid, old, nil)
		c.releaseCPUs(uid)
	}
	if h, ok := c.hosts[uid]; ok && h.reserved {
		c.setHost(uid, hostRecord{}, false)
	}
}

// StartBinding records that a Binding of the pod's reservation may be sent from now on: until the
// bind that sends it settles it (BindingAnswered, Release, MarkUnsettled, or proof such as
// ReleaseProven), no other attempt's refusal frees the reservation. Callers call it before the
// POST, never after: the write may commit the moment it leaves.
func (c *Cache) StartBinding(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.pods[uid]; old != nil && old.reserved {
		old.posting++
	}
}

// BindingAnswered ends an attempt (StartBinding) whose Binding committed: the reservation stays
// until the informer shows the pod bound.
func (c *Cache) BindingAnswered(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.pods[uid]; old != nil && old.reserved {
		old.posting = max(old.posting-1, 0)
	}
}

// MarkUnsettled ends an attempt (StartBinding) whose Binding had an unknown outcome: until proof
// that it cannot land, Release keeps the reservation.
func (c *Cache) MarkUnsettled(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.pods[uid]; old != nil && old.reserved {
		old.posting = max(old.posting-1, 0)
		old.unsettled = true
	}
}
