package migplace

import (
	"math"
	"slices"
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
	// The card alone: room for 7 1g.10gb, 3 2g.20gb, 1 4g.40gb.
	placeable := ch.Placeable([]Card{NewCard(m)})
	if want := []int{7, 3, 1}; !slices.Equal(placeable, want) {
		t.Fatalf("Placeable = %v, want %v", placeable, want)
	}
	tests := []struct {
		start int
		want  float64
	}{
		// 1g: 1 of 7; 2g: 1 of 3 (the card holds 2 more, not 3); 4g: its only one.
		{0, (1.0/7 + 1.0/3 + 1) / 3},
		{1, (1.0/7 + 1.0/3 + 1) / 3},
		// 1g: 1 of 7; 4g keeps 0:4; 2g loses 4:2.
		{4, (1.0/7 + 1.0/3) / 3},
		{5, (1.0/7 + 1.0/3) / 3},
		// 1g: 1 of 7; 4g and all three 2g stay (2g×3 = 6 compute slices + this 1 = 7).
		{6, 1.0 / 7 / 3},
	}
	for _, tt := range tests {
		if got := ch.Loss(NewCard(m), i, pl(tt.start, 1), placeable); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Loss of 1g.10gb at %d = %v, want %v", tt.start, got, tt.want)
		}
	}
	best, ok := ch.Choose([]Card{NewCard(m)}, "1g.10gb")
	if !ok || best.Placement != pl(6, 1) {
		t.Errorf("Choose = %+v, %v; want 1g.10gb at 6:1", best, ok)
	}
}

// TestChooseKeepsTheLargeProfilePlaceable: mix 1g.10gb and 7g.80gb (1/2 each). Card 0 is empty,
// card 1 holds a 3g.40gb at 0: room for 7 + 3 = 10 1g and 1 + 0 = 1 7g. A 1g.10gb on card 0 costs
// the cluster's only 7g (1/1 × 1/2) and a 1g (1/10 × 1/2): 0.55; on card 1 only a 1g: 0.05.
// Frag-aware takes card 1 (its first free start, 4); first-fit card 0.
func TestChooseKeepsTheLargeProfilePlaceable(t *testing.T) {
	m := A100_80GB
	cards := []Card{NewCard(m), card(t, m, "3g.40gb@0")}
	mix := []Demand{{"1g.10gb", 1}, {"7g.80gb", 1}}
	fa, _ := NewChooser(PolicyFragAware, mix)
	ff, _ := NewChooser(PolicyFirstFit, mix)
	if got, ok := fa.Choose(cards, "1g.10gb"); !ok || got.Card != 1 || got.Placement != pl(4, 1) || math.Abs(got.Loss-0.05) > 1e-12 {
		t.Errorf("frag-aware: %+v, want card 1 at 4:1, loss 0.05", got)
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

// TestLossWeighsScarceRoomMore: the same 1g.10gb costs the 7g share more when fewer cards can still
// hold a 7g: with two empty cards it uses up half the room for 7g, with one all of it.
func TestLossWeighsScarceRoomMore(t *testing.T) {
	m := A100_80GB
	ch, _ := NewChooser(PolicyFragAware, []Demand{{"7g.80gb", 1}})
	one := ch.Loss(NewCard(m), 0, pl(0, 1), ch.Placeable([]Card{NewCard(m)}))
	two := ch.Loss(NewCard(m), 0, pl(0, 1), ch.Placeable([]Card{NewCard(m), NewCard(m)}))
	if one != 1 || two != 0.5 {
		t.Errorf("loss with one empty card %v, with two %v: want 1 and 0.5", one, two)
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
