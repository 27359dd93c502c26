package scheduler

import (
	"fmt"
	"runtime/debug"

	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// One node fails alone. Whatever one node's state does to the decision core (issue 21: an
// inventory the kubelet model could not enumerate panicked it), a panic while deciding a pod on a
// node fails that node with core.ReasonInternal, is reported through the cache's panic handler
// (the server logs it with its stack and counts it), and every other node of the call is decided
// as usual. A panic that escapes elsewhere in a parallel Evaluate is raised again on the caller's
// goroutine, where the HTTP layer's recovery answers 500, instead of ending the process.

// PanicHandler is told of a panic while deciding a pod on a node: the node, the panic's value and
// the stack where it happened.
type PanicHandler func(node string, value any, stack []byte)

// OnPanic sets the handler told of recovered panics (nil: none); it returns c.
func (c *Cache) OnPanic(h PanicHandler) *Cache {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onPanic = h
	return c
}

// recovered turns a panic's value into the node's reason and tells the handler.
func (c *Cache) recovered(node string, v any) *core.Reason {
	if c.onPanic != nil {
		c.onPanic(node, v, debug.Stack())
	}
	return &core.Reason{Kind: core.ReasonInternal, Detail: fmt.Sprint(v)}
}

// decideNode is FitWith, then ScoreWith when the pod fits, for one node; a panic in either fails
// the node with ReasonInternal and leaves s ready for the next node. Callers hold c.mu.
func (c *Cache) decideNode(n *nodeEntry, p *core.Pod, s *core.Scratch) (plan *core.Plan, score float64, r *core.Reason) {
	defer func() {
		if v := recover(); v != nil {
			*s = core.Scratch{}
			plan, score, r = nil, 0, c.recovered(n.name, v)
		}
	}()
	plan, r = p.FitWith(n.state, &c.mix, s)
	if plan != nil {
		score = p.ScoreWith(n.state, plan, &c.mix, s)
	}
	return plan, score, r
}

// fitNode is Fit for one node (Reserve), failing the node with ReasonInternal on a panic. Callers
// hold c.mu.
func (c *Cache) fitNode(n *nodeEntry, p *core.Pod) (plan *core.Plan, r *core.Reason) {
	defer func() {
		if v := recover(); v != nil {
			plan, r = nil, c.recovered(n.name, v)
		}
	}()
	return p.Fit(n.state, &c.mix)
}

// escaped is a panic caught in one part of a parallel Evaluate, raised again by the caller.
type escaped struct {
	value any
	stack []byte
}

func (e *escaped) String() string { return fmt.Sprintf("%v\n%s", e.value, e.stack) }
