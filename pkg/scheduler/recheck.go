package scheduler

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/logging"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// Cordons read at the last moment. kube-scheduler retries a pod the extender refused on any
// cluster event, the Node update that uncordons a card among them, and its informer may deliver
// that update before the extender's does. The retry is then refused on a mark already gone, and
// the pod is parked until the next cluster event: in a quiet cluster, kube-scheduler's
// unschedulable flush, five minutes later. So when no node fits a pod and some were refused for
// cordoned cards, the mark that decides is read from the API server (a quorum read) and, where
// it changed, applied before the pod is evaluated again.
//
// The informer may also deliver the change while the node is read, after the pod was decided on
// the old mark: the read then agrees with the cache, and the filter decides the pod again because
// the node's state changed since its verdict (Cache.Stale; TestCordonAndDrain under load, where the
// retry kube-scheduler made on the uncordon was refused on the mark its own read had found gone).
//
// Every such call reads: a read skipped because the node was read a moment ago could be the one
// that follows the uncordon (a rate limit of one read a second per node let a pod woken by a drain
// just before the uncordon wait five minutes). kube-scheduler filters one pod at a time, so the
// cost is at most maxCordonRechecks GETs per scheduling attempt of a pod that fits nowhere and was
// refused somewhere for a cordon.
const (
	// maxCordonRechecks bounds the nodes one filter call reads.
	maxCordonRechecks = 4
	// cordonRecheckTimeout bounds one read.
	cordonRecheckTimeout = 2 * time.Second
)

// cordonRefused lists the nodes whose verdict is a refusal for cordoned cards.
func cordonRefused(names []string, verdicts []Verdict) []string {
	var out []string
	for i, v := range verdicts {
		if v.Reason != nil && v.Reason.Kind == core.ReasonCordoned {
			out = append(out, names[i])
		}
	}
	return out
}

// recheckCordons reads the nodes (at most maxCordonRechecks) and applies those whose cordon marks
// differ from the cache's; it reports whether one did, and the first read that failed. A failed
// read leaves the cache's mark unverified: the filter then answers an error rather than a refusal
// resting on it, since kube-scheduler retries an error after its backoff but parks a refused pod
// until the next cluster event — and the uncordon that woke it was that event (seen in CI under
// load, where the read could outlast its timeout).
func (s *Server) recheckCordons(ctx context.Context, nodes []string) (bool, error) {
	changed := false
	var failed error
	for _, name := range nodes[:min(len(nodes), maxCordonRechecks)] {
		rctx, cancel := context.WithTimeout(ctx, cordonRecheckTimeout)
		node, err := s.client.CoreV1().Nodes().Get(rctx, name, metav1.GetOptions{})
		cancel()
		if err != nil {
			s.log.V(2).Info("cordon recheck: cannot read the node", logging.KeyNode, name, "err", err)
			if failed == nil {
				failed = fmt.Errorf("reading node %s to check its cordoned cards at the last moment: %w", name, err)
			}
			continue
		}
		if log := s.log.V(4); log.Enabled() {
			log.Info("cordon recheck: read the node", logging.KeyNode, name, "resourceVersion", node.ResourceVersion, "cordons", len(annotations.CordonsOf(node.Annotations).ByUUID))
		}
		if s.cache.CordonsDiffer(node) {
			s.log.V(2).Info("cordon recheck: the node's marks changed before the informer said so", logging.KeyNode, name)
			s.cache.UpsertNode(node)
			changed = true
		}
	}
	return changed, failed
}

// anyFits reports whether a verdict admits its node.
func anyFits(verdicts []Verdict) bool {
	for _, v := range verdicts {
		if v.Reason == nil {
			return true
		}
	}
	return false
}
