package scheduler

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// One preemption per preemptor at a time (issue 33 item 6). kube-scheduler calls the preempt verb
// again for a preemptor whose first victims are still terminating (each scheduling cycle that finds
// no node runs PostFilter; its own "not eligible due to a terminating pod on the nominated node"
// rule sees only victims it has marked with a DisruptionTarget condition, and with async
// preemption the nomination and the deletions land after the cycle). ChooseVictims releases pods
// being deleted and drops a node where they alone make room, so that call used to offer another
// node's pods as a fresh preemption, and kube-scheduler evicted twice what the pod needed.
//
// So the cache remembers, per preemptor, the victims of its last non-empty answer and when it was
// given (preemptAnswer). While an earlier preemption may still be under way the answer is empty
// (kube-scheduler then keeps the pod's nomination and waits for the next cluster event):
//
//   - a victim of the remembered answer, on any node it named, is being deleted: kube-scheduler
//     acted on that answer, and the pod waits for the room those victims leave;
//   - the answer is younger than preemptSettle and all its victims are still there, none being
//     deleted: kube-scheduler may still be deleting them (async preemption) although the informer
//     shows none going yet;
//   - the pod is nominated to a node where lower-priority pods holding devices are being deleted
//     (kube-scheduler's own rule, whatever marked them; it also covers an extender restarted since
//     the answer).
//
//   - its victims are gone and it fits, in the extender's model, on a node the answer named: the
//     room is there, kube-scheduler's view is behind (for preemptRoomHeld at most).
//
// Once the victims are gone (and the window has passed) a pod that still does not fit may preempt
// again. The memory goes when the pod is bound or deleted.

// preemptRoomHeld bounds how long after an answer a preemptor whose victims are gone, and which
// fits where they were, is told to wait rather than preempt again: kube-scheduler calls the preempt
// verb when its own view has no room, and its informer can be behind the extender's (the victims
// gone here, still counted there); its next cycle places the pod. Past it, the two views disagree
// for some other reason, and the pod may preempt again.
const preemptRoomHeld = 30 * time.Second

// preemptSettle is how long after an answer the preemptor waits for its victims to show as being
// deleted before it may preempt again: kube-scheduler's async preemption patches and deletes them
// within a second or two of the answer.
const preemptSettle = 5 * time.Second

// preemptAnswer is the last non-empty answer given for a preemptor.
type preemptAnswer struct {
	at      time.Time
	victims []types.UID
	// nodes are the nodes the answer named victims on.
	nodes []string
}

// PreemptionUnderWay reports whether an earlier preemption for pod p (uid) may still be under way
// (see the top of this file), and why, for the log; ChooseVictims answers no node then.
func (c *Cache) PreemptionUnderWay(uid types.UID, p *core.Pod) (why string, waiting bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.preemptionUnderWay(uid, p)
}

// preemptionUnderWay is PreemptionUnderWay. Called with c.mu held (read).
func (c *Cache) preemptionUnderWay(uid types.UID, p *core.Pod) (why string, waiting bool) {
	if a := c.preempt.answers[uid]; a != nil {
		anyGone := false
		for _, v := range a.victims {
			m, ok := c.preempt.meta[v]
			if ok && m.terminating {
				return "victims of its earlier preemption are being deleted", true
			}
			anyGone = anyGone || !ok
		}
		if !anyGone && c.clock.Since(a.at) < preemptSettle {
			return "its earlier preemption was answered moments ago", true
		}
		if anyGone && c.clock.Since(a.at) < preemptRoomHeld {
			for _, name := range a.nodes {
				n := c.nodes[name]
				if n == nil || n.state == nil {
					continue
				}
				st := c.nominatedState(n, p, uid)
				if st == nil {
					st = n.state
				}
				if plan, _, _ := c.fitOn(name, st, p, nil); plan != nil {
					return "the room its earlier victims left on " + name + " is free", true
				}
			}
		}
	}
	if nm := c.preempt.byUID[uid]; nm != nil {
		if n := c.nodes[nm.node]; n != nil {
			for _, rec := range n.pods {
				if m, ok := c.preempt.meta[rec.uid]; ok && m.terminating && m.priority < p.Priority && len(rec.applied) > 0 {
					return "lower-priority pods are being deleted on its nominated node " + nm.node, true
				}
			}
		}
	}
	return "", false
}

// rememberPreemption records a non-empty answer for preemptor uid.
func (c *Cache) rememberPreemption(uid types.UID, out map[string]Victims) {
	if len(out) == 0 {
		return
	}
	a := &preemptAnswer{}
	for node, v := range out {
		a.victims = append(a.victims, v.Pods...)
		a.nodes = append(a.nodes, node)
	}
	slices.Sort(a.nodes)
	c.mu.Lock()
	defer c.mu.Unlock()
	a.at = c.clock.Now()
	if c.preempt.answers == nil {
		c.preempt.answers = map[types.UID]*preemptAnswer{}
	}
	c.preempt.answers[uid] = a
}
