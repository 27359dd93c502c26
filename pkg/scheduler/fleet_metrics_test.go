package scheduler

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// gatherFleet reads the allocation gauges as "name{labels} value", sorted; want filters by prefix.
func gatherFleet(t *testing.T, s *Server, prefix string) []string {
	t.Helper()
	families, err := s.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, strings.TrimPrefix(f.GetName(), "cardinal_extender_")+"{"+strings.Join(labels, ",")+"} "+
				strconv.FormatFloat(m.GetGauge().GetValue(), 'f', -1, 64))
		}
	}
	sort.Strings(out)
	return out
}

// The extender exports every card's reservation and state and each model's sums from its cache: a
// card held whole, a free one, a MIG parent and its instances.
func TestAllocationMetrics(t *testing.T) {
	a0 := uuidOf("mix", 0)
	h := newHarness(t, harnessOptions{}, mixedNode("mix", 81920, 1, a100, a100), holder(t, "lo-a0", 0, "mix", 0, 0, a0), migNodeObj("mig"))
	state := gatherFleet(t, h.srv, "cardinal_extender_card_state")
	for _, want := range []string{
		"card_state{model=" + a100 + ",node=mix,numa=0,state=whole,uuid=" + a0 + "} 1",
		"card_state{model=" + a100 + ",node=mix,numa=0,state=free,uuid=" + uuidOf("mix", 1) + "} 1",
		"card_state{model=" + a100 + ",node=mig,numa=0,state=mig,uuid=GPU-mig-am} 1",
		"card_state{model=" + a100 + ",node=mig,numa=0,state=free,uuid=MIG-mig-3g} 1",
	} {
		if !containsLine(state, want) {
			t.Errorf("no %s in\n%s", want, strings.Join(state, "\n"))
		}
	}
	models := gatherFleet(t, h.srv, "cardinal_extender_model_")
	want := []string{
		// mix's two cards and mig's two parents; mig's two whole H100s are another model.
		"model_cards{model=" + a100 + "} 4",
		"model_cards{model=NVIDIA H100 80GB HBM3} 2",
		"model_free_cards{model=" + a100 + "} 1",
		"model_free_cards{model=NVIDIA H100 80GB HBM3} 2",
		// mix: 2 × 81920; mig: 7 × 9728 + 40192 + 19968 + 9728 of instances.
		"model_memory_mib{model=" + a100 + "} " + strconv.Itoa(2*81920+7*9728+40192+19968+9728),
		"model_memory_mib{model=NVIDIA H100 80GB HBM3} " + strconv.Itoa(2*81559),
		"model_reserved_memory_mib{model=" + a100 + "} 81920",
		"model_reserved_memory_mib{model=NVIDIA H100 80GB HBM3} 0",
	}
	if diff := cmp.Diff(want, models); diff != "" {
		t.Errorf("model sums (-want +got):\n%s", diff)
	}
}

func containsLine(l []string, s string) bool { return slices.Contains(l, s) }
