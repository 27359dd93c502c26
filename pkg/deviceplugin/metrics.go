package deviceplugin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the plugin's Prometheus metrics, on a registry of its own.
type metrics struct {
	registry        *prometheus.Registry
	allocateTotal   *prometheus.CounterVec
	allocateSeconds prometheus.Histogram
	preferredTotal  *prometheus.CounterVec
	devices         *prometheus.GaugeVec
	writes          *prometheus.CounterVec
	reconcileTotal  prometheus.Counter
	registrations   *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		allocateTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cardinal_device_plugin_allocate_total",
			Help: "Allocate calls by result: exact (the assignment), corrected (other IDs, served), unmanaged (a pod Cardinal did not schedule), or the refusal reason.",
		}, []string{"result"}),
		allocateSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cardinal_device_plugin_allocate_duration_seconds",
			Help:    "Time to answer Allocate.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
		}),
		preferredTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cardinal_device_plugin_preferred_allocation_total",
			Help: "GetPreferredAllocation answers by source: assignment or numa-compact fallback.",
		}, []string{"source"}),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cardinal_device_plugin_cards",
			Help: "Cards on this node by health.",
		}, []string{"health"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cardinal_device_plugin_api_writes_total",
			Help: "Writes to the API server by object (node inventory, pod allocation record) and result.",
		}, []string{"object", "result"}),
		reconcileTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cardinal_device_plugin_podresources_corrections_total",
			Help: "Containers whose allocation record was corrected or added from the kubelet's PodResources.",
		}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cardinal_device_plugin_registrations_total",
			Help: "Registrations with the kubelet by result.",
		}, []string{"result"}),
	}
	m.registry.MustRegister(m.allocateTotal, m.allocateSeconds, m.preferredTotal, m.devices, m.writes, m.reconcileTotal, m.registrations,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) allocated(result string, d time.Duration) {
	m.allocateTotal.WithLabelValues(result).Inc()
	m.allocateSeconds.Observe(d.Seconds())
}

func (m *metrics) preferred(fromAssignment bool) {
	src := "numa-compact"
	if fromAssignment {
		src = "assignment"
	}
	m.preferredTotal.WithLabelValues(src).Inc()
}

func (m *metrics) setDevices(t *deviceTable) {
	healthy := 0
	for _, c := range t.cards {
		if c.Healthy {
			healthy++
		}
	}
	m.devices.WithLabelValues("healthy").Set(float64(healthy))
	m.devices.WithLabelValues("unhealthy").Set(float64(len(t.cards) - healthy))
}

func (m *metrics) wrote(object string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.writes.WithLabelValues(object, result).Inc()
}

func (m *metrics) reconciled() { m.reconcileTotal.Inc() }

func (m *metrics) registered(err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.registrations.WithLabelValues(result).Inc()
}
