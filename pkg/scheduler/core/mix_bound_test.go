package core

import (
	"math"
	"testing"
)

// A stream of ever-different requests keeps the mix at MaxClasses classes, the heavy classes stay,
// and Total stays the sum of the weights (issue: the task mix never shrinks).
func TestTaskMixIsBounded(t *testing.T) {
	var m TaskMix
	heavy := TaskClass{Cards: 8, Whole: true, Cores: 100}
	m.Add(heavy, 1000)
	for i := 0; i < 10*MaxClasses; i++ {
		m.Add(TaskClass{Cards: 1, MemMiB: int64(1000 + i), Cores: 10}, 1)
	}
	if len(m.Classes) != MaxClasses {
		t.Fatalf("%d classes, want the cap %d", len(m.Classes), MaxClasses)
	}
	sum, found := 0.0, false
	for i := range m.Classes {
		sum += m.Classes[i].Weight
		if m.Classes[i].Cards == 8 {
			found = m.Classes[i].Weight == 1000
		}
	}
	if !found {
		t.Error("the heaviest class was evicted")
	}
	if math.Abs(sum-m.Total) > 1e-6*m.Total {
		t.Errorf("Total %g, sum of weights %g", m.Total, sum)
	}
	// A class seen again is found, not added twice.
	n := len(m.Classes)
	m.Add(heavy, 1)
	if len(m.Classes) != n || m.Classes[0].Weight != 1001 {
		t.Errorf("re-adding a known class: %d classes, weight %g", len(m.Classes), m.Classes[0].Weight)
	}
}

// With a half-life of 100 containers, 100 of class A then 100 of class B weigh 1:2 — each B
// counted exactly one half-life after an A.
func TestTaskMixAges(t *testing.T) {
	m := TaskMix{HalfLife: 100}
	a, b := TaskClass{Cards: 1, Whole: true, Cores: 100}, TaskClass{Cards: 2, Whole: true, Cores: 100}
	for i := 0; i < 100; i++ {
		m.Add(a, 1)
	}
	for i := 0; i < 100; i++ {
		m.Add(b, 1)
	}
	if r := m.Classes[0].Weight / m.Classes[1].Weight; math.Abs(r-0.5) > 1e-9 {
		t.Fatalf("A/B = %g, want 0.5", r)
	}
	// Aging for a long time rescales the weights instead of letting them overflow.
	for i := 0; i < 100000; i++ {
		m.Add(b, 1)
	}
	if math.IsInf(m.Total, 0) || math.IsNaN(m.Total) || m.Total > 1e12 {
		t.Fatalf("Total %g after long aging", m.Total)
	}
	if share := m.Classes[0].Weight / m.Total; share > 1e-6 {
		t.Errorf("A still weighs %g of the mix after 1000 half-lives", share)
	}
	// A clone ages on as the original does.
	c := m.Clone()
	c.Add(a, 1)
	m.Add(a, 1)
	if c.Classes[0].Weight != m.Classes[0].Weight || c.Total != m.Total {
		t.Errorf("clone %v/%g, original %v/%g", c.Classes[0].Weight, c.Total, m.Classes[0].Weight, m.Total)
	}
}
