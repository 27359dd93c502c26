package scheduler

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// Allocation metrics: what the extender's cache holds on every card, read at scrape time. Series
// are per card (bounded by the cluster's cards) and per model; none is per pod.
var (
	cardLabels    = []string{"node", "uuid", "model", "numa"}
	cardMemDesc   = prometheus.NewDesc("cardinal_extender_card_reserved_memory_mib", "Memory (MiB) reserved on a card or MIG instance by the pods the extender knows (bound, reserved or in flight).", cardLabels, nil)
	cardCoresDesc = prometheus.NewDesc("cardinal_extender_card_reserved_cores", "Percentage of a card's compute reserved (100: held whole).", cardLabels, nil)
	cardSlotsDesc = prometheus.NewDesc("cardinal_extender_card_slots_held", "Device IDs of a card taken (share slots, or 1 for a card or instance held whole).", cardLabels, nil)
	cardStateDesc = prometheus.NewDesc("cardinal_extender_card_state", "1 for the card's state: free, shared (some slots held), whole (held alone or every slot taken), unhealthy, cordoned (out of service: nothing new goes there; its holders stay), or mig (a parent in MIG mode: see its instances).",
		append(append([]string{}, cardLabels...), "state"), nil)
	modelLabels        = []string{"model"}
	modelCardsDesc     = prometheus.NewDesc("cardinal_extender_model_cards", "Cards of a model in the cluster (MIG parents included, instances not).", modelLabels, nil)
	modelFreeDesc      = prometheus.NewDesc("cardinal_extender_model_free_cards", "Healthy cards of a model in service with nothing held: what a whole-card pod can get.", modelLabels, nil)
	modelCordonedDesc  = prometheus.NewDesc("cardinal_extender_model_cordoned_cards", "Cards of a model an operator cordoned (cordon.cardinal.io/<UUID> on the Node): out of service for new pods.", modelLabels, nil)
	modelMemDesc       = prometheus.NewDesc("cardinal_extender_model_memory_mib", "Memory (MiB) of a model's healthy cards and instances.", modelLabels, nil)
	modelReservedDesc  = prometheus.NewDesc("cardinal_extender_model_reserved_memory_mib", "Memory (MiB) reserved on a model's cards and instances.", modelLabels, nil)
	nodesUnusableDesc  = prometheus.NewDesc("cardinal_extender_nodes_without_inventory", "Nodes the extender knows whose inventory is missing or refused (they take no GPU pod).", nil, nil)
	modelAllocDesc     = prometheus.NewDesc("cardinal_extender_model_allocation_ratio", "Share of a model's healthy cards allocated, in cards (1 − free capacity; MIG parents and instances left out), 0..1.", modelLabels, nil)
	modelFreeCapDesc   = prometheus.NewDesc("cardinal_extender_model_free_capacity_cards", "Free GPU capacity of a model's healthy cards, in cards (a card 30% used counts 0.7).", modelLabels, nil)
	modelFragDesc      = prometheus.NewDesc("cardinal_extender_model_fragmented_cards", "Free GPU capacity of a model, in cards, that the cluster's recent mix of requests cannot use (the frag-aware policy's measure, node by node).", modelLabels, nil)
	modelFragRatioDesc = prometheus.NewDesc("cardinal_extender_model_fragmentation_ratio", "Share of a model's free GPU capacity that the cluster's recent mix of requests cannot use, 0..1 (0 when nothing is free).", modelLabels, nil)
	pendingDesc        = prometheus.NewDesc("cardinal_extender_pending_pods", "GPU pods that no node passed at their last filter, by the class of the reason of the node nearest to fitting (no_model, unhealthy, memory, host, numa_kubelet, in_flight, other).", []string{"class"}, nil)
	allocationCollectD = []*prometheus.Desc{cardMemDesc, cardCoresDesc, cardSlotsDesc, cardStateDesc, modelCardsDesc, modelFreeDesc, modelCordonedDesc, modelMemDesc, modelReservedDesc, nodesUnusableDesc,
		modelAllocDesc, modelFreeCapDesc, modelFragDesc, modelFragRatioDesc, pendingDesc}
)

// allocation is the Prometheus collector of the cache's cards.
type allocation struct{ c *Cache }

func (a allocation) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allocationCollectD {
		ch <- d
	}
}

// modelSums are one model's cluster sums.
type modelSums struct {
	cards, free, cordoned int
	mem, reserved         int64
	// measured counts the healthy cards the frag-aware measure sees (not MIG parents or
	// instances); freeCap and frag are their free and fragmented capacity, in cards.
	measured      int
	freeCap, frag float64
}

// cardRow is one card's series values, copied out of the cache.
type cardRow struct {
	node, uuid, model, state string
	numa, cores, held        int
	mem                      int64
}

func (a allocation) Collect(ch chan<- prometheus.Metric) {
	// The cache's lock is held only to copy the numbers out; the metrics are made after.
	rows, models, unusable := a.snapshot()
	for i := range rows {
		r := &rows[i]
		labels := []string{r.node, r.uuid, r.model, strconv.Itoa(r.numa)}
		ch <- prometheus.MustNewConstMetric(cardMemDesc, prometheus.GaugeValue, float64(r.mem), labels...)
		ch <- prometheus.MustNewConstMetric(cardCoresDesc, prometheus.GaugeValue, float64(r.cores), labels...)
		ch <- prometheus.MustNewConstMetric(cardSlotsDesc, prometheus.GaugeValue, float64(r.held), labels...)
		ch <- prometheus.MustNewConstMetric(cardStateDesc, prometheus.GaugeValue, 1, append(labels, r.state)...)
	}
	for model, m := range models {
		ch <- prometheus.MustNewConstMetric(modelCardsDesc, prometheus.GaugeValue, float64(m.cards), model)
		ch <- prometheus.MustNewConstMetric(modelFreeDesc, prometheus.GaugeValue, float64(m.free), model)
		ch <- prometheus.MustNewConstMetric(modelCordonedDesc, prometheus.GaugeValue, float64(m.cordoned), model)
		ch <- prometheus.MustNewConstMetric(modelMemDesc, prometheus.GaugeValue, float64(m.mem), model)
		ch <- prometheus.MustNewConstMetric(modelReservedDesc, prometheus.GaugeValue, float64(m.reserved), model)
		alloc, fragRatio := 0.0, 0.0
		if m.measured > 0 {
			alloc = 1 - m.freeCap/float64(m.measured)
		}
		if m.freeCap > 0 {
			fragRatio = m.frag / m.freeCap
		}
		ch <- prometheus.MustNewConstMetric(modelAllocDesc, prometheus.GaugeValue, alloc, model)
		ch <- prometheus.MustNewConstMetric(modelFreeCapDesc, prometheus.GaugeValue, m.freeCap, model)
		ch <- prometheus.MustNewConstMetric(modelFragDesc, prometheus.GaugeValue, m.frag, model)
		ch <- prometheus.MustNewConstMetric(modelFragRatioDesc, prometheus.GaugeValue, fragRatio, model)
	}
	ch <- prometheus.MustNewConstMetric(nodesUnusableDesc, prometheus.GaugeValue, float64(unusable))
	for class, n := range a.c.pending.counts(a.c.clock.Now()) {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(n), pendingClasses[class])
	}
}

// snapshot copies each card's numbers and the models' sums (with the frag-aware measure of each
// node under the cache's task mix) out of the cache, and counts the nodes without an inventory.
func (a allocation) snapshot() (rows []cardRow, models map[string]*modelSums, unusable int) {
	a.c.mu.RLock()
	defer a.c.mu.RUnlock()
	models = map[string]*modelSums{}
	nodeFree := map[string]float64{}
	for _, n := range a.c.nodes {
		if n.state == nil {
			unusable++
			continue
		}
		clear(nodeFree)
		for i := range n.state.Cards {
			card := &n.state.Cards[i]
			m := models[card.Model]
			if m == nil {
				m = &modelSums{}
				models[card.Model] = m
			}
			r := cardRow{node: n.name, uuid: card.UUID, model: card.Model, numa: card.NUMA, state: cardState(card), held: card.Held,
				// A card held whole is reserved whole, whatever the holder's record says of its memory.
				mem: card.MemMiB, cores: min(card.Cores, 100)}
			if card.Whole > 0 {
				r.mem, r.cores = card.MemoryMiB, 100
			}
			rows = append(rows, r)
			if !card.Instance() {
				m.cards++
				switch r.state {
				case "free":
					m.free++
				case "cordoned":
					m.cordoned++
				}
			}
			if card.Healthy && !card.InMIGMode() {
				m.mem += card.MemoryMiB
				m.reserved += min(r.mem, card.MemoryMiB)
			}
			if card.Healthy && !card.InMIGMode() && !card.Instance() {
				f := card.FreeCapacity()
				m.measured++
				m.freeCap += f
				nodeFree[card.Model] += f
			}
		}
		// The node's fragmented capacity goes to its models in proportion to their free capacity
		// on it (exact for the usual node of one model).
		frag, free := a.c.mix.Fragmentation(n.state)
		if free > 0 {
			for model, f := range nodeFree {
				models[model].frag += frag * f / free
			}
		}
	}
	return rows, models, unusable
}

// cardState is the card's state label.
func cardState(c *core.Card) string {
	switch {
	case c.InMIGMode():
		return "mig"
	case !c.Healthy:
		return "unhealthy"
	case c.Cordoned != "":
		return "cordoned"
	case c.Held == 0:
		return "free"
	case c.Whole > 0 || c.Held >= c.Slots():
		return "whole"
	}
	return "shared"
}

// Pending GPU pods by reason class. The extender sees a pod at filter: when no node passes, the pod
// is Pending for the reason of the node nearest to fitting, whose class the gauge counts. A pod is
// forgotten when a later filter passes a node, when it is bound, finishes or is deleted (the
// cache's pod events), or when no filter has seen it for pendingTTL (a pod deleted while the
// extender missed it). The series are the classes, never the pods.

// pendingClass is a class of reasons, in the order of nearness to fitting: a pod refused on
// several nodes for reasons of several classes counts in the lowest.
type pendingClass int

const (
	// pendingInFlight: the pod waits for something already under way (a container in flight, an
	// earlier bind, the kubelet's report of exclusive CPUs).
	pendingInFlight pendingClass = iota
	// pendingNUMAKubelet: the cards have room but not where the pod needs them (NUMA, the kubelet's
	// TopologyManager, init containers' cards, NVLink).
	pendingNUMAKubelet
	// pendingHost: the node's CPU or memory cannot hold the pod.
	pendingHost
	// pendingMemory: matching cards have no room (free card, memory, cores, slot).
	pendingMemory
	// pendingUnhealthy: matching cards are unhealthy and too few healthy ones remain.
	pendingUnhealthy
	// pendingOther: sharing cannot be enforced, another tenant's MPS daemon, a panic.
	pendingOther
	// pendingNoModel: no node has (enough) cards the pod's selectors accept, or any inventory.
	pendingNoModel
	pendingClassCount
)

// pendingClasses are the label values, by class.
var pendingClasses = [pendingClassCount]string{"in_flight", "numa_kubelet", "host", "memory", "unhealthy", "other", "no_model"}

// classOf is the class of a reason.
func classOf(r *core.Reason) pendingClass {
	switch r.Kind {
	case core.ReasonInFlight, core.ReasonBindPending, core.ReasonKubeletCPUs:
		return pendingInFlight
	case core.ReasonNUMA, core.ReasonReuse, core.ReasonKubeletRefuses, core.ReasonKubeletChoice, core.ReasonKubeletMIG, core.ReasonNVLink:
		return pendingNUMAKubelet
	case core.ReasonHost:
		return pendingHost
	case core.ReasonNoCapacity, core.ReasonMPSSlot:
		return pendingMemory
	case core.ReasonUnhealthy, core.ReasonCordoned:
		return pendingUnhealthy
	case core.ReasonUnknownNode, core.ReasonNoInventory, core.ReasonBadInventory, core.ReasonNoMatch, core.ReasonTooFewCards:
		return pendingNoModel
	}
	return pendingOther
}

// pendingTTL is how long a pod stays counted after its last filter without news of it.
// kube-scheduler retries an unschedulable pod at least every 5 minutes.
const pendingTTL = 15 * time.Minute

// maxPending bounds the pods remembered; beyond it new pods are not counted until some leave.
const maxPending = 100000

// pendingPods are the pods no node passed at their last filter. The zero value is ready; it has
// its own lock (never held while taking the cache's).
type pendingPods struct {
	mu   sync.Mutex
	pods map[types.UID]pendingPod
}

type pendingPod struct {
	class pendingClass
	seen  time.Time
}

// note records a filter's verdicts for pod uid at now: the pod is pending when no verdict passes.
func (p *pendingPods) note(uid types.UID, verdicts []Verdict, now time.Time) {
	class, pending := pendingClassCount, len(verdicts) > 0
	for i := range verdicts {
		if verdicts[i].Reason == nil {
			pending = false
			break
		}
		class = min(class, classOf(verdicts[i].Reason))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !pending {
		delete(p.pods, uid)
		return
	}
	if p.pods == nil {
		p.pods = map[types.UID]pendingPod{}
	}
	if _, known := p.pods[uid]; !known && len(p.pods) >= maxPending {
		return
	}
	p.pods[uid] = pendingPod{class: class, seen: now}
}

// forget drops pod uid (bound, finished or deleted).
func (p *pendingPods) forget(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pods, uid)
}

// counts returns the pods per class at now, every class present, dropping pods past pendingTTL.
func (p *pendingPods) counts(now time.Time) [pendingClassCount]int {
	var out [pendingClassCount]int
	p.mu.Lock()
	defer p.mu.Unlock()
	for uid, e := range p.pods {
		if now.Sub(e.seen) > pendingTTL {
			delete(p.pods, uid)
			continue
		}
		out[e.class]++
	}
	return out
}
