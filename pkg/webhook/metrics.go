package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
)

// Outcome is what the webhook did with one admission request.
type Outcome string

const (
	// OutcomeAllowed: admitted unchanged.
	OutcomeAllowed Outcome = "allowed"
	// OutcomeMutated: admitted with a patch.
	OutcomeMutated Outcome = "mutated"
	// OutcomeDenied: refused by a rule.
	OutcomeDenied Outcome = "denied"
	// OutcomeError: the request could not be decided (e.g. it did not decode).
	OutcomeError Outcome = "error"
)

// Metrics are the webhook's own Prometheus metrics.
type Metrics struct {
	latency   *prometheus.HistogramVec
	decisions *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "cardinal", Subsystem: "webhook", Name: "admission_duration_seconds",
			Help: "Time to decide one admission request, from decoding to the response, by operation.",
			// 50µs … ~1.6s: the decision takes well under a millisecond; the tail shows stalls.
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"operation"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cardinal", Subsystem: "webhook", Name: "admission_decisions_total",
			Help: "Admission requests by operation, outcome (allowed, mutated, denied, error) and reason of a denial.",
		}, []string{"operation", "outcome", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.latency, m.decisions} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(op admissionv1.Operation, outcome Outcome, reason Reason, took time.Duration) {
	m.latency.WithLabelValues(string(op)).Observe(took.Seconds())
	m.decisions.WithLabelValues(string(op), string(outcome), string(reason)).Inc()
}
