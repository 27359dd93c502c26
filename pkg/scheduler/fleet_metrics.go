package scheduler

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// Allocation metrics: what the extender's cache holds on every card, read at scrape time. Series
// are per card (bounded by the cluster's cards) and per model; none is per pod.
var (
	cardLabels    = []string{"node", "uuid", "model", "numa"}
	cardMemDesc   = prometheus.NewDesc("cardinal_extender_card_reserved_memory_mib", "Memory (MiB) reserved on a card or MIG instance by the pods the extender knows (bound, reserved or in flight).", cardLabels, nil)
	cardCoresDesc = prometheus.NewDesc("cardinal_extender_card_reserved_cores", "Percentage of a card's compute reserved (100: held whole).", cardLabels, nil)
	cardSlotsDesc = prometheus.NewDesc("cardinal_extender_card_slots_held", "Device IDs of a card taken (share slots, or 1 for a card or instance held whole).", cardLabels, nil)
	cardStateDesc = prometheus.NewDesc("cardinal_extender_card_state", "1 for the card's state: free, shared (some slots held), whole (held alone or every slot taken), unhealthy, or mig (a parent in MIG mode: see its instances).",
		append(append([]string{}, cardLabels...), "state"), nil)
	modelLabels        = []string{"model"}
	modelCardsDesc     = prometheus.NewDesc("cardinal_extender_model_cards", "Cards of a model in the cluster (MIG parents included, instances not).", modelLabels, nil)
	modelFreeDesc      = prometheus.NewDesc("cardinal_extender_model_free_cards", "Healthy cards of a model with nothing held: what a whole-card pod can get.", modelLabels, nil)
	modelMemDesc       = prometheus.NewDesc("cardinal_extender_model_memory_mib", "Memory (MiB) of a model's healthy cards and instances.", modelLabels, nil)
	modelReservedDesc  = prometheus.NewDesc("cardinal_extender_model_reserved_memory_mib", "Memory (MiB) reserved on a model's cards and instances.", modelLabels, nil)
	nodesUnusableDesc  = prometheus.NewDesc("cardinal_extender_nodes_without_inventory", "Nodes the extender knows whose inventory is missing or refused (they take no GPU pod).", nil, nil)
	allocationCollectD = []*prometheus.Desc{cardMemDesc, cardCoresDesc, cardSlotsDesc, cardStateDesc, modelCardsDesc, modelFreeDesc, modelMemDesc, modelReservedDesc, nodesUnusableDesc}
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
	cards, free   int
	mem, reserved int64
}

func (a allocation) Collect(ch chan<- prometheus.Metric) {
	a.c.mu.RLock()
	defer a.c.mu.RUnlock()
	models := map[string]*modelSums{}
	unusable := 0
	for _, n := range a.c.nodes {
		if n.state == nil {
			unusable++
			continue
		}
		for i := range n.state.Cards {
			card := &n.state.Cards[i]
			labels := []string{n.name, card.UUID, card.Model, strconv.Itoa(card.NUMA)}
			m := models[card.Model]
			if m == nil {
				m = &modelSums{}
				models[card.Model] = m
			}
			state := cardState(card)
			// A card held whole is reserved whole, whatever the holder's record says of its memory.
			mem, cores := card.MemMiB, min(card.Cores, 100)
			if card.Whole > 0 {
				mem, cores = card.MemoryMiB, 100
			}
			if !card.Instance() {
				m.cards++
				if state == "free" {
					m.free++
				}
			}
			if card.Healthy && !card.InMIGMode() {
				m.mem += card.MemoryMiB
				m.reserved += min(mem, card.MemoryMiB)
			}
			ch <- prometheus.MustNewConstMetric(cardMemDesc, prometheus.GaugeValue, float64(mem), labels...)
			ch <- prometheus.MustNewConstMetric(cardCoresDesc, prometheus.GaugeValue, float64(cores), labels...)
			ch <- prometheus.MustNewConstMetric(cardSlotsDesc, prometheus.GaugeValue, float64(card.Held), labels...)
			ch <- prometheus.MustNewConstMetric(cardStateDesc, prometheus.GaugeValue, 1, append(labels, state)...)
		}
	}
	for model, m := range models {
		ch <- prometheus.MustNewConstMetric(modelCardsDesc, prometheus.GaugeValue, float64(m.cards), model)
		ch <- prometheus.MustNewConstMetric(modelFreeDesc, prometheus.GaugeValue, float64(m.free), model)
		ch <- prometheus.MustNewConstMetric(modelMemDesc, prometheus.GaugeValue, float64(m.mem), model)
		ch <- prometheus.MustNewConstMetric(modelReservedDesc, prometheus.GaugeValue, float64(m.reserved), model)
	}
	ch <- prometheus.MustNewConstMetric(nodesUnusableDesc, prometheus.GaugeValue, float64(unusable))
}

// cardState is the card's state label.
func cardState(c *core.Card) string {
	switch {
	case c.InMIGMode():
		return "mig"
	case !c.Healthy:
		return "unhealthy"
	case c.Held == 0:
		return "free"
	case c.Whole > 0 || c.Held >= c.Slots():
		return "whole"
	}
	return "shared"
}
