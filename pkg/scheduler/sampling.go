package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// Two profiles (issue 39; docs/extender.md, "Two profiles"). kube-scheduler filters a sample of the
// nodes its own filters find feasible (percentageOfNodesToScore) before it asks the extender, which is
// most of what keeps it fast on a large cluster, and unsafe when the nodes that can take a pod are few
// among those. The webhook therefore sends a GPU pod with card rules, shares, MIG instances or a pod
// group to the exact profile, which scores every node, and any other GPU pod — whole cards of any
// model, which kube-scheduler's NodeResourcesFit counts as the device plugin advertises them — to the
// sampling one. For those, what kube-scheduler cannot see is the cards' state: free cards on one NUMA
// node for the TopologyManager, cordoned cards, share slots held on a card, containers in flight. So
// when no node of a sample fits a pod and nodes outside it do, the filter answers a miss, in two
// phases (missedSample):
//
//   - fast: every refusal notes the miss and its number. kube-scheduler writes the refusals into the
//     pod's condition, requeues the pod on that update (at once when its queue is idle), and starts
//     its next attempt where the last one stopped (nextStartNodeIndex), so a few attempts cover every
//     node. A plain refusal would park the pod until the cluster changes.
//   - paced: the filter answers an error. kube-scheduler retries an error after its error backoff
//     (1 s doubling to 10 s) without waiting for any event, and never early. Fast misses can all be
//     spent in well under a second without kube-scheduler sampling the node that fits: its view may
//     be behind the extender's (its assigned-pod cache and its queue are fed by separate informer
//     handlers, so it can try a new pod before it has removed the pod just deleted from the node that
//     would take it), and its filters run on 16 goroutines that stop at the sample's size, so a node
//     a slow goroutine had not reached is skipped until the samples come round again. The paced
//     misses sample every node once more (at most maxPacedMisses samples), seconds apart.
//
// Then plain refusals: the outside nodes may be refused by a filter of kube-scheduler's that the
// extender does not replay (pod affinity, volumes, ports), and such a pod must end as an ordinary
// refusal, which lets preemption run.

// minSample is kube-scheduler's minFeasibleNodesToFind: below it every node is filtered, so a list of
// fewer nodes is never a sample.
const minSample = 100

// maxSampleMisses is the fast misses answered per pod beyond the attempts that cover every node once.
const maxSampleMisses = 2

// maxPacedMisses caps the paced misses after them, which are as many as cover every node once: at
// kube-scheduler's error backoff (1, 2, 4, 8, 10 s) five take 25 s, and the plain refusals that let
// preemption run for a pod the nodes outside refuse come no later.
const maxPacedMisses = 5

// missBudget returns how many of a pod's misses are fast and how many in all, for samples of sampled
// nodes out of known: attempts that start where the last stopped cover every node in
// ceil(known/sampled).
func missBudget(known, sampled int) (fast, total int) {
	cover := (known + sampled - 1) / sampled
	fast = cover + maxSampleMisses
	return fast, fast + min(cover, maxPacedMisses)
}

// missTTL forgets a pod's misses once it has not missed for this long.
const missTTL = 10 * time.Minute

// missHold is how long after a miss the pod's preemption frees nothing: kube-scheduler calls the
// preempt verb right after the filter that refused the sample.
const missHold = 30 * time.Second

// ours reports whether name is one of Cardinal's profiles.
func (c *Cache) ours(name string) bool {
	for _, n := range c.schedulerNames {
		if n == name {
			return true
		}
	}
	return false
}

// samples reports whether pod's profile is the one that samples nodes: there is an exact profile
// and the pod does not name it.
func (c *Cache) samples(pod *corev1.Pod) bool {
	return c.exactProfile != "" && pod.Spec.SchedulerName == c.schedulerNames[0]
}

// hardTaintsOf returns the node's NoSchedule and NoExecute taints, with spec.unschedulable as the
// taint kube-scheduler's NodeUnschedulable filter reads it as.
func hardTaintsOf(node *corev1.Node) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			out = append(out, t)
		}
	}
	if node.Spec.Unschedulable {
		out = append(out, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	}
	return out
}

// outsideCandidates lists the nodes with cards that are not in given and that kube-scheduler's own
// filters would not refuse the pod for by its required node affinity, node selector or untolerated
// NoSchedule/NoExecute taints (the filters the extender can replay), and the number of nodes known.
func (c *Cache) outsideCandidates(pod *corev1.Pod, given []string) (out []string, known int) {
	in := make(map[string]struct{}, len(given))
	for _, n := range given {
		in[n] = struct{}{}
	}
	req := nodeaffinity.GetRequiredNodeAffinity(pod)
	logger := klog.Background()
	c.mu.RLock()
	defer c.mu.RUnlock()
	for name, n := range c.nodes {
		if n.state == nil {
			continue
		}
		known++
		if _, ok := in[name]; ok {
			continue
		}
		if ok, err := req.Match(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: n.labels}}); err != nil || !ok {
			continue
		}
		if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(logger, n.hard, pod.Spec.Tolerations, nil, false); untolerated {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out, known
}

// sampleMiss is what a filter learned when no node of a sample fits the pod.
type sampleMiss struct {
	// fits are the nodes outside the sample that fit (at most a few named), of total.
	fits  []string
	total int
	// attempt is this miss's number for the pod, of budget.
	attempt, budget int
	// paced: the fast misses are spent; the filter answers an error, which kube-scheduler retries
	// after its backoff.
	paced bool
}

// missedSample reports, for a pod of the sampling profile that no node of names fits, whether nodes
// outside names fit it and the pod has misses left: the filter then notes the miss in every refusal
// (fast) or answers an error (paced), so that kube-scheduler tries another sample. nil: answer the
// refusals as usual.
func (s *Server) missedSample(pod *corev1.Pod, p *core.Pod, names []string) *sampleMiss {
	if len(names) < minSample || !s.cache.samples(pod) || p.Request.Empty() {
		return nil
	}
	outside, known := s.cache.outsideCandidates(pod, names)
	if len(outside) == 0 || len(names) >= known {
		return nil
	}
	verdicts := s.cache.Evaluate(pod.UID, p, outside, make([]Verdict, 0, len(outside)))
	var fits []string
	for i, v := range verdicts {
		if v.Reason == nil {
			fits = append(fits, outside[i])
		}
	}
	if len(fits) == 0 {
		return nil
	}
	fast, budget := missBudget(known, len(names))
	attempt := s.misses.next(pod.UID, s.cache.clock.Now())
	if attempt > budget {
		s.metrics.sampleMisses.WithLabelValues("refused").Inc()
		return nil
	}
	paced := attempt > fast
	if paced {
		s.metrics.sampleMisses.WithLabelValues("paced").Inc()
	} else {
		s.metrics.sampleMisses.WithLabelValues("retried").Inc()
	}
	s.misses.setRetry(pod.UID)
	return &sampleMiss{fits: fits, total: len(fits), attempt: attempt, budget: budget, paced: paced}
}

// note is what the filter appends to every refusal of the miss. kube-scheduler writes the refusals
// into the pod's PodScheduled condition; the miss number makes that message differ from the last
// attempt's, and kube-scheduler requeues a pod whose own update changes it (at once when its queue
// is idle, else after the pod's backoff), so the next attempt, which samples where this one
// stopped, comes without waiting for another cluster event.
func (m *sampleMiss) note(sampled int) string {
	return fmt.Sprintf(" (kube-scheduler sampled %d nodes; %s outside the sample fit: trying another sample, miss %d of at most %d)",
		sampled, m.fitting(), m.attempt, m.budget)
}

// fitting names the first few nodes outside the sample that fit, and how many more.
func (m *sampleMiss) fitting() string {
	names := m.fits
	if len(names) > 3 {
		names = names[:3]
	}
	more := ""
	if m.total > len(names) {
		more = fmt.Sprintf(" and %d more", m.total-len(names))
	}
	return strings.Join(names, ", ") + more
}

// paceError is the filter's answer to a paced miss: kube-scheduler writes it into the pod's
// PodScheduled condition (reason SchedulerError) and retries after its backoff. reason is the
// refusal of the sample's first node.
func (m *sampleMiss) paceError(pod *corev1.Pod, sampled int, first, reason string) string {
	return fmt.Sprintf("pod %s/%s: no node of kube-scheduler's sample of %d fits (%s: %s); %s outside the sample fit: trying another sample after kube-scheduler's backoff, miss %d of at most %d",
		pod.Namespace, pod.Name, sampled, first, reason, m.fitting(), m.attempt, m.budget)
}

// missed reports whether uid's last filter missed its sample while nodes outside it fit, within
// missHold: preemption then frees nothing for it (a node needs no eviction to take it).
func (m *missCounts) missed(uid types.UID, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.m[uid]
	return ok && c.retry && now.Sub(c.last) < missHold
}

// missCounts counts each pod's consecutive sample misses.
type missCounts struct {
	mu sync.Mutex
	m  map[types.UID]missCount
}

type missCount struct {
	n    int
	last time.Time
	// retry: the last miss was answered as one (within the pod's budget).
	retry bool
}

// next counts a miss of uid at now and returns its number; retry records whether it is answered
// as a miss (setRetry).
func (m *missCounts) next(uid types.UID, now time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[types.UID]missCount{}
	}
	if len(m.m) > 1024 {
		for k, v := range m.m {
			if now.Sub(v.last) > missTTL {
				delete(m.m, k)
			}
		}
	}
	c := m.m[uid]
	if now.Sub(c.last) > missTTL {
		c.n = 0
	}
	c.n++
	c.last = now
	c.retry = false
	m.m[uid] = c
	return c.n
}

// setRetry marks uid's last miss as answered as one.
func (m *missCounts) setRetry(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.m[uid]; ok {
		c.retry = true
		m.m[uid] = c
	}
}

// forget drops uid's misses (a filter found a node for it).
func (m *missCounts) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, uid)
}
