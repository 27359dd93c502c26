// Package bench_test checks that the speed scenarios of bench/scenario still run, at the tiny size,
// as part of the tests CI runs (make test runs ./test/...). Speed itself is for make bench.
package bench_test

import (
	"testing"

	"github.com/cardinal-gpu/cardinal/bench/scenario"
)

// TestScenariosRunTiny runs every scenario at the tiny size on a real test bed: they still start,
// schedule and count. No figure is checked against a target (speed is for the benchmarks); what
// is checked is that each scenario measured something whole.
func TestScenariosRunTiny(t *testing.T) {
	p, err := scenario.ParamsFor(scenario.SizeTiny)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("S3", func(t *testing.T) {
		r := scenario.S3(t, p.S3)
		// 2 nodes × ⌊8/2⌋ = 8 of the 10 two-card pods fit.
		if r.Fitting != 8 || r.Bound != 8 || r.DoubleBooked != 0 {
			t.Errorf("S3: fitting %d, bound %d, double-booked %d; want 8, 8, 0", r.Fitting, r.Bound, r.DoubleBooked)
		}
	})
	t.Run("S2", func(t *testing.T) {
		r := scenario.S2(t, p.S2)
		for _, ph := range []scenario.S2Phase{r.Plain, r.Cardinal} {
			if ph.Bound != p.S2.Pods || ph.PodsPerSecond <= 0 || ph.AttemptP99 <= 0 {
				t.Errorf("S2 %s: %+v is not whole", ph.Scheduler, ph)
			}
		}
	})
	t.Run("S6", func(t *testing.T) {
		r := scenario.S6(t, p.S6)
		// Each plugin's node starts without an inventory: one start-up write per plugin, 2.
		if r.Plugins != p.S6.Plugins || r.Window != p.S6.Window || r.StartupNodeWrites != p.S6.Plugins {
			t.Errorf("S6: %+v does not describe the run (want %d plugins, window %s, %d start-up node writes)", r, p.S6.Plugins, p.S6.Window, p.S6.Plugins)
		}
	})
}
