package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// apiCounts is the apiserver's request and watch-event counters at one moment, by
// "VERB resource[/subresource]" and "watch resource"; phaseCounts logs what a phase added, so a
// change in what Cardinal asks of the apiserver shows beside its CPU.
type apiCounts map[string]float64

// apiServerMetrics scrapes kube-apiserver's /metrics with the admin client.
func (b *bed) apiServerMetrics(t cluster.TB) Metrics {
	t.Helper()
	raw, err := b.fast.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("apiserver metrics: %v", err)
	}
	ms, err := ParseMetrics(raw)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return ms
}

// apiServerCounts scrapes kube-apiserver's apiserver_request_total and apiserver_watch_events_total.
func (b *bed) apiServerCounts(t cluster.TB) apiCounts {
	t.Helper()
	ms := b.apiServerMetrics(t)
	out := apiCounts{}
	if f := ms["apiserver_request_total"]; f != nil {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			k := l["verb"] + " " + l["resource"]
			if l["subresource"] != "" {
				k += "/" + l["subresource"]
			}
			out[k] += m.GetCounter().GetValue()
		}
	}
	if f := ms["apiserver_watch_events_total"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, p := range m.GetLabel() {
				if p.GetName() == "resource" {
					out["watch-events "+p.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// since is what happened between before and c, largest first, as one line.
func (c apiCounts) since(before apiCounts) string {
	type kv struct {
		k string
		v float64
	}
	var d []kv
	for k, v := range c {
		if n := v - before[k]; n >= 1 {
			d = append(d, kv{k, n})
		}
	}
	slices.SortFunc(d, func(a, b kv) int {
		if a.v != b.v {
			if a.v > b.v {
				return -1
			}
			return 1
		}
		return strings.Compare(a.k, b.k)
	})
	var b strings.Builder
	for i, e := range d {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.0f", e.k, e.v)
	}
	return b.String()
}
