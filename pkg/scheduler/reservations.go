package scheduler

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// DefaultReservationTTL is how long a reservation may wait for the informer to show its pod bound
// before the extender reads the pod back and, if it is still unbound or gone, frees its cards. It is
// longer than the API server's default request timeout (60 s), so a Binding still being processed
// when the reservation is read back has long been answered or abandoned.
const DefaultReservationTTL = 90 * time.Second

// settleReservations settles every reservation older than ttl by reading its pod back from the API
// server: a pod that is gone, was created again, or is still unbound loses its reservation; a bound
// pod's record replaces it (as the informer would have done).
func (s *Server) settleReservations(ctx context.Context, ttl time.Duration) {
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
