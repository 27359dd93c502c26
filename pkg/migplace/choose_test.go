package migplace

import (
	"math"
	"testing"
)

// TestLossCountsWhatEachProfileCanNoLongerPlace: A100-80GB, empty card, a mix of 1g.10gb, 2g.20gb
// and 4g.40gb in equal shares (1/3 each); Loss of a 1g.10gb at each start.
func TestLossCountsWhatEachProfileCanNoLongerPlace(t *testing.T) {
	m := A100_80GB
	ch, err := NewChooser(PolicyFragAware, []Demand{{"1g.10gb", 1}, {"2g.20gb", 1}, {"4g.40gb", 1}})
	if err != nil {
		t.Fatal(err)
	}
	i, _ := m.Profile("1g.10gb")
	tests := []struct {
		start int
		want  float64
	}{
		// 1g: 7 → 6 (1 × 1 slice); 4g: 1 → 0 (1 × 4); 2g: 3 → 2 (1 × 2): (1 + 4 + 2) / 3.
		{0, 7.0 / 3},
		{1, 7.0 / 3},
		// 1g: 1; 4g keeps 0:4; 2g loses 4:2 (2): (1 + 0 + 2) / 3.
		{4, 3.0 / 3},
		{5, 3.0 / 3},
		// 1g: 1; 4g and all three 2g stay (2g×3 = 6 compute slices + this 1 = 7): 1 / 3.
		{6, 1.0 / 3},
	}
	for _, tt := range tests {
		if got := ch.Loss(NewCard(m), i, pl(tt.start, 1)); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Loss of 1g.10gb at %d = %v, want %v", tt.start, got, tt.want)
		}
	}
	best, ok := ch.Choose([]Card{NewCard(m)}, "1g.10gb")
	if !ok || best.Placement != pl(6, 1) {
		t.Errorf("Choose = %+v, %v; want 1g.10gb at 6:1", best, ok)
	}
}

// TestChooseKeepsTheLargeProfilePlaceable: mix 1g.10gb and 7g.80gb (1/2 each). Card 0 is empty,
// card 1 holds a 3g.40gb at 0. A 1g.10gb on card 0 costs its 7g (7 × 1/2) and a 1g (1/2): 4; on
// card 1 only a 1g (1/2). Frag-aware takes card 1 (its first free start, 4); first-fit card 0.
func TestChooseKeepsTheLargeProfilePlaceable(t *testing.T) {
	m := A100_80GB
	cards := []Card{NewCard(m), card(t, m, "3g.40gb@0")}
	mix := []Demand{{"1g.10gb", 1}, {"7g.80gb", 1}}
	fa, _ := NewChooser(PolicyFragAware, mix)
	ff, _ := NewChooser(PolicyFirstFit, mix)
	if got, ok := fa.Choose(cards, "1g.10gb"); !ok || got.Card != 1 || got.Placement != pl(4, 1) || got.Loss != 0.5 {
		t.Errorf("frag-aware: %+v, want card 1 at 4:1, loss 0.5", got)
	}
	if got, ok := ff.Choose(cards, "1g.10gb"); !ok || got.Card != 0 || got.Placement != pl(0, 1) {
		t.Errorf("first-fit: %+v, want card 0 at 0:1", got)
	}
}

// TestEqualLossGoesToTheFullerCard: without a mix every loss is 0; frag-aware packs the card with
// more slices held, first-fit the first card.
func TestEqualLossGoesToTheFullerCard(t *testing.T) {
	m := H100_80GB
	cards := []Card{card(t, m, "1g.10gb@0"), card(t, m, "2g.20gb@0", "2g.20gb@2")}
	fa, _ := NewChooser(PolicyFragAware, nil)
	if got, _ := fa.Choose(cards, "1g.20gb"); got.Card != 1 || got.Placement != pl(4, 2) {
		t.Errorf("frag-aware without a mix: %+v, want card 1 at 4:2", got)
	}
}

func TestChooseWithoutRoom(t *testing.T) {
	m := A100_40GB
	fa, _ := NewChooser(PolicyFragAware, []Demand{{"7g.40gb", 1}})
	if got, ok := fa.Choose([]Card{card(t, m, "1g.5gb@6")}, "7g.40gb"); ok {
		t.Errorf("7g on a card holding a 1g: %+v", got)
	}
	if _, ok := fa.Choose([]Card{NewCard(m)}, "7g.80gb"); ok {
		t.Error("an 80GB profile placed on a 40GB card")
	}
	if _, ok := fa.Choose([]Card{{}}, "1g.5gb"); ok {
		t.Error("a card without a model offered a placement")
	}
}

func TestNewChooserRefuses(t *testing.T) {
	if _, err := NewChooser("best-fit", nil); err == nil {
		t.Error("unknown policy accepted")
	}
	for _, w := range []float64{-1, math.NaN(), math.Inf(1)} {
		if _, err := NewChooser(PolicyFragAware, []Demand{{"1g.10gb", w}}); err == nil {
			t.Errorf("weight %v accepted", w)
		}
	}
}
