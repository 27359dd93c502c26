package scenario

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a Prometheus text endpoint, by family name.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics decodes the Prometheus text format. A panic of the parser is an error: the text
// parser of prometheus/common v0.66.1 dereferences nil on a sample line that starts with '{' after a
// comment (found by FuzzParseMetrics; its corpus keeps the input).
func ParseMetrics(text []byte) (ms Metrics, err error) {
	defer func() {
		if r := recover(); r != nil {
			ms, err = nil, fmt.Errorf("parse metrics: the parser panicked: %v", r)
		}
	}()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return families, nil
}

// matches reports whether m carries every label of want with its value.
func matches(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k {
				found = l.GetValue() == v
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Sum adds the counters, gauges, untyped values or histogram sample counts of family name whose
// labels match want.
func (ms Metrics) Sum(name string, want map[string]string) float64 {
	f := ms[name]
	if f == nil {
		return 0
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		if !matches(m, want) {
			continue
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return sum
}

// bucket is one cumulative histogram bucket.
type bucket struct {
	upper float64
	count float64
}

// Histogram merges the histograms of family name whose labels match want; nil when none does.
func (ms Metrics) Histogram(name string, want map[string]string) []bucket {
	f := ms[name]
	if f == nil {
		return nil
	}
	byUpper := map[float64]float64{}
	for _, m := range f.GetMetric() {
		if m.GetHistogram() == nil || !matches(m, want) {
			continue
		}
		hasInf := false
		for _, b := range m.GetHistogram().GetBucket() {
			byUpper[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			hasInf = hasInf || math.IsInf(b.GetUpperBound(), 1)
		}
		if !hasInf { // the text format lists +Inf; other sources may leave it implicit
			byUpper[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	if len(byUpper) == 0 {
		return nil
	}
	out := make([]bucket, 0, len(byUpper))
	for u, c := range byUpper {
		out = append(out, bucket{upper: u, count: c})
	}
	slices.SortFunc(out, func(a, b bucket) int { return cmpFloat(a.upper, b.upper) })
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Quantile estimates the q-quantile of a cumulative histogram as Prometheus's histogram_quantile
// does: linear interpolation inside the bucket that holds it (from 0 for the first bucket). A
// quantile in the +Inf bucket is the largest finite bound. NaN when the histogram is empty.
func Quantile(q float64, buckets []bucket) float64 {
	if len(buckets) == 0 {
		return math.NaN()
	}
	total := buckets[len(buckets)-1].count
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	lowerBound, lowerCount := 0.0, 0.0
	for i, b := range buckets {
		if b.count >= rank {
			if math.IsInf(b.upper, 1) {
				if i == 0 {
					return math.NaN()
				}
				return buckets[i-1].upper
			}
			if b.count == lowerCount {
				return b.upper
			}
			return lowerBound + (b.upper-lowerBound)*(rank-lowerCount)/(b.count-lowerCount)
		}
		lowerBound, lowerCount = b.upper, b.count
	}
	return buckets[len(buckets)-1].upper
}

// percentile is the p-th percentile (0 < p ≤ 100) of sorted durations by nearest rank; 0 when
// there are none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// ms is a duration in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
