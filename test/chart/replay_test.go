package chart

import (
	"testing"

	"github.com/cardinal-gpu/cardinal/bench/replay/sim"
)

// The replay's --scoring=kube models the configuration the chart renders: the extender's weight
// and a profile without kube-scheduler's CPU and memory scores. A chart change that breaks the
// model must change the replay too, or the replay's live-quality figures describe another setup.
func TestReplayModelsTheChartsScheduler(t *testing.T) {
	cfg := schedulerConfig(t, render(t, nil))
	if got := cfg.Extenders[0].Weight; got != sim.DefaultKubeWeight {
		t.Errorf("chart extender weight %d, replay models %d (sim.DefaultKubeWeight)", got, sim.DefaultKubeWeight)
	}
	disabled := map[string]bool{}
	if p := cfg.Profiles[0].Plugins; p != nil {
		for _, pl := range p.Score.Disabled {
			disabled[pl.Name] = true
		}
	}
	for _, name := range []string{"NodeResourcesFit", "NodeResourcesBalancedAllocation"} {
		if !disabled[name] {
			t.Errorf("the chart's profile scores with %s; the replay's kube model (KubeResourceScores false) does not", name)
		}
	}
}
