package scheduler

import "github.com/cardinal-gpu/cardinal/pkg/scheduler/core"

// A CPU-only pod routed through Cardinal (the webhook's marker annotations.ResourceHostRoute) is
// prepared with an empty request (Server.prepare): Fit checks the node's CPU and memory, and the
// policy scores what the pod leaves of the node's cards. It holds no card, so bind writes no
// assignment and the device plugin never hears of it. Nodes without GPUs have no inventory and so
// no state; the cache keeps a state without cards for them (nodeEntry.plain), decided here, so such
// a pod may go to a node without GPUs, which is where it strands nothing.

//
// A node whose inventory Cardinal cannot read (a newer version, more NUMA nodes than the model
// handles) has cards it does not know: such a pod fits there too (it needs no card), decided on the
// node's CPU and memory, but ranks last (score 0): Cardinal cannot tell what it would strand there,
// and the policy's preference for nodes without cards must not send pods to cards it cannot see.

// decidePlain is decideNode on a node's cardless state (nodeEntry.plain), for a pod asking no GPU;
// a panic fails the node with ReasonInternal. Callers hold c.mu.
func (c *Cache) decidePlain(n *nodeEntry, p *core.Pod, s *core.Scratch) (score float64, r *core.Reason) {
	defer func() {
		if v := recover(); v != nil {
			*s = core.Scratch{}
			score, r = 0, c.recovered(n.name, v)
		}
	}()
	plan, r := p.FitWith(n.plain, &c.mix, s)
	if plan != nil && (n.reason == nil || n.reason.Kind != core.ReasonBadInventory) {
		score = p.ScoreWith(n.plain, plan, &c.mix, s)
	}
	return score, r
}
