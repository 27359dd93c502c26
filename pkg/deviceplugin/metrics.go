package deviceplugin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// metrics are the plugin's Prometheus metrics, on a registry of its own.
type metrics struct {
	registry        *prometheus.Registry
	allocateTotal   *prometheus.CounterVec
	allocateSeconds prometheus.Histogram
	verifyTotal     *prometheus.CounterVec
	verifySeconds   prometheus.Histogram
	preferredTotal  *prometheus.CounterVec
	devices         *prometheus.GaugeVec
	resourceDevices *prometheus.GaugeVec
	writes          *prometheus.CounterVec
	reconcileTotal  prometheus.Counter
	registrations   *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		allocateTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cardinal_device_plugin_allocate_total",
			Help: "Allocate calls by resource and result: exact (the assignment), corrected (other IDs, served), guessed (the likeliest of several containers; verified at start), unmanaged (a pod Cardinal did not schedule), or the refusal reason.",
		}, []string{"resource", "result"}),
		allocateSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cardinal_device_plugin_allocate_duration_seconds",
			Help:    "Time to answer Allocate.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
		}),
		verifyTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cardinal_device_plugin_prestart_total",
			Help: "PreStartContainer calls (every container start verified against the kubelet's record) by resource and result: started, or the refusal reason.",
		}, []string{"resource", "result"}),
		verifySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cardinal_device_plugin_prestart_duration_seconds",
			Help:    "Time to answer PreStartContainer (reading the kubelet's record included).",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10),
		}),
		preferredTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cardinal_device_plugin_preferred_allocation_total",
			Help: "GetPreferredAllocation answers by resource and source: assignment or numa-compact fallback.",
		}, []string{"resource", "source"}),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cardinal_device_plugin_cards",
			Help: "Cards on this node by health.",
		}, []string{"health"}),
		resourceDevices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cardinal_device_plugin_devices",
			Help: "Devices advertised to the kubelet by resource (the GPU resource, one per MIG profile) and health.",
		}, []string{"resource", "health"}),
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
			Help: "Registrations with the kubelet by resource and result.",
		}, []string{"resource", "result"}),
	}
	m.registry.MustRegister(m.allocateTotal, m.allocateSeconds, m.verifyTotal, m.verifySeconds, m.preferredTotal, m.devices, m.resourceDevices, m.writes, m.reconcileTotal, m.registrations,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) allocated(res corev1.ResourceName, result string, d time.Duration) {
	m.allocateTotal.WithLabelValues(string(res), result).Inc()
	m.allocateSeconds.Observe(d.Seconds())
}

func (m *metrics) verified(res corev1.ResourceName, result string, d time.Duration) {
	m.verifyTotal.WithLabelValues(string(res), result).Inc()
	m.verifySeconds.Observe(d.Seconds())
}

func (m *metrics) preferred(res corev1.ResourceName, fromAssignment bool) {
	src := "numa-compact"
	if fromAssignment {
		src = "assignment"
	}
	m.preferredTotal.WithLabelValues(string(res), src).Inc()
}

// setDevices sets the card gauge and, per resource, the advertised devices by health.
func (m *metrics) setDevices(t *deviceTable) {
	for _, res := range t.resources() {
		healthy := 0
		devs := t.devicesOf(res, false)
		for _, d := range devs {
			if d.Health == pluginapi.Healthy {
				healthy++
			}
		}
		m.resourceDevices.WithLabelValues(string(res), "healthy").Set(float64(healthy))
		m.resourceDevices.WithLabelValues(string(res), "unhealthy").Set(float64(len(devs) - healthy))
	}
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

func (m *metrics) registered(res corev1.ResourceName, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.registrations.WithLabelValues(string(res), result).Inc()
}
