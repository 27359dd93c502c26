package migplace

import (
	"fmt"
	"math"
	"slices"
)

// Demand is one profile of the cluster's mix of requests, with how often it is asked for (any
// unit: counts or shares; only the ratios matter).
type Demand struct {
	Profile string
	Weight  float64
}

// Option is one way to place an instance: a card (its index in the caller's list) and a placement
// on it.
type Option struct {
	Card      int
	Placement Placement
	// Loss is what the option costs the mix (see Loss); Used the memory slices the card held before.
	Loss float64
	Used int
}

// Policy names a way to choose among options.
type Policy string

// The policies.
const (
	// PolicyFragAware keeps the mix placeable: the option of least Loss (the demand-weighted share
	// of the cluster's room for each profile it uses up); among equal losses the fuller card (it
	// keeps emptier cards whole for large profiles), then the lower card index and start.
	PolicyFragAware Policy = "frag-aware"
	// PolicyFirstFit is the baseline: the first card, in the caller's order, with a free placement,
	// and on it the lowest free start (what placing in order without a choice gives).
	PolicyFirstFit Policy = "first-fit"
)

// better reports whether option a is to be chosen over b.
type better func(a, b *Option) bool

// lossEpsilon: losses closer than this are equal (sums of float weights).
const lossEpsilon = 1e-9

func fragAwareBetter(a, b *Option) bool {
	if d := a.Loss - b.Loss; math.Abs(d) > lossEpsilon {
		return d < 0
	}
	if a.Used != b.Used {
		return a.Used > b.Used
	}
	return firstFitBetter(a, b)
}

func firstFitBetter(a, b *Option) bool {
	if a.Card != b.Card {
		return a.Card < b.Card
	}
	return a.Placement.Start < b.Placement.Start
}

// Chooser chooses placements for one profile request at a time under a policy and a mix.
type Chooser struct {
	better better
	mix    []Demand
	total  float64
}

// NewChooser is a chooser for policy p over the mix (a mix with no positive weight, or nil, makes
// every option's Loss 0: frag-aware then packs the fullest card). An unknown policy or a negative
// weight is an error.
func NewChooser(p Policy, mix []Demand) (*Chooser, error) {
	byPolicy := map[Policy]better{PolicyFragAware: fragAwareBetter, PolicyFirstFit: firstFitBetter}
	b, ok := byPolicy[p]
	if !ok {
		return nil, fmt.Errorf("migplace: unknown policy %q (%s or %s)", p, PolicyFragAware, PolicyFirstFit)
	}
	ch := &Chooser{better: b}
	for _, d := range mix {
		if d.Weight < 0 || math.IsNaN(d.Weight) || math.IsInf(d.Weight, 0) {
			return nil, fmt.Errorf("migplace: weight %v of %s is not a finite non-negative number", d.Weight, d.Profile)
		}
		if d.Weight > 0 {
			ch.mix = append(ch.mix, d)
			ch.total += d.Weight
		}
	}
	return ch, nil
}

// Loss is what placing profile i at pl on c costs the mix, given the cluster's placeable count of
// each profile (placeable[q]: Σ over the cards of Card.Fits for the mix's q-th profile, before the
// placement; see Options): for each profile q of the mix, the instances of q that no longer fit on
// the card (Card.Fits before minus after) over placeable[q], times q's share of the mix. It is the
// share of the cluster's room for each profile the choice uses up, weighted by demand: 0 when the
// placement leaves every profile of the mix as placeable as before; share(7g) when it takes the
// only card left that holds a 7g; share(1g)/50 when it takes one of 50 places for a 1g. A profile
// no card can hold any more (placeable 0) counts for nothing. pl must be free (Check nil).
//
// Why a share of the cluster's room and not a count of instances: counted in instances (or in
// compute slices), a half-used card's free half holds 4 1g, 2 2g, a 3g and a 4g, all lost to a 3g
// placed there, while an empty card "loses" fewer of them and only one 7g; that count sent the
// second 3g to an empty card and served fewer 7g than first-fit (bench/results/mig-placement-*.md).
// As a share, the last card that holds a 7g weighs as much as all the places for a 1g.
func (ch *Chooser) Loss(c Card, i int, pl Placement, placeable []int) float64 {
	if ch.total == 0 {
		return 0
	}
	after, err := c.Place(i, pl)
	if err != nil {
		return math.Inf(1)
	}
	loss := 0.0
	for k, d := range ch.mix {
		q, ok := c.Model.Profile(d.Profile)
		if !ok || k >= len(placeable) || placeable[k] == 0 {
			continue
		}
		lost := c.Fits(q) - after.Fits(q)
		loss += float64(lost) / float64(placeable[k]) * d.Weight / ch.total
	}
	return loss
}

// Placeable is, for each profile of the mix (in the chooser's order), how many instances of it the
// cards hold room for: Σ over cards of Card.Fits (each card's count alone: the profiles compete for
// the same slices).
func (ch *Chooser) Placeable(cards []Card) []int {
	out := make([]int, len(ch.mix))
	for k := range cards {
		if cards[k].Model == nil {
			continue
		}
		for j, d := range ch.mix {
			if q, ok := cards[k].Model.Profile(d.Profile); ok {
				out[j] += cards[k].Fits(q)
			}
		}
	}
	return out
}

// Options lists every free placement of the named profile on cards, with its Loss, in card and
// start order. A card whose model lacks the profile offers none.
func (ch *Chooser) Options(cards []Card, profile string) []Option {
	var out []Option
	placeable := ch.Placeable(cards)
	for k := range cards {
		c := cards[k]
		if c.Model == nil {
			continue
		}
		i, ok := c.Model.Profile(profile)
		if !ok {
			continue
		}
		for _, pl := range c.Free(i) {
			out = append(out, Option{Card: k, Placement: pl, Loss: ch.Loss(c, i, pl, placeable), Used: c.Used.Count()})
		}
	}
	return out
}

// Choose picks the best option for an instance of profile on cards, or false when none is free.
func (ch *Chooser) Choose(cards []Card, profile string) (Option, bool) {
	opts := ch.Options(cards, profile)
	if len(opts) == 0 {
		return Option{}, false
	}
	return slices.MinFunc(opts, func(a, b Option) int {
		switch {
		case ch.better(&a, &b):
			return -1
		case ch.better(&b, &a):
			return 1
		}
		return 0
	}), true
}
