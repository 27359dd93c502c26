package main

import (
	"container/heap"
	"fmt"
	"math/rand/v2"

	"github.com/cardinal-gpu/cardinal/pkg/migplace"
)

// Request is one kind of MIG request in the offered mix.
type Request struct {
	Profile string
	// Share is how often it is asked for (relative).
	Share float64
}

// DefaultMix is the offered mix: inference-heavy, with some training-sized instances — counts of
// requests, not of slices: 1g.10gb 35 %, 1g.20gb 10 %, 2g.20gb 20 %, 3g.40gb 20 %, 4g.40gb 5 %,
// 7g.80gb 10 %. Mean 2.35 compute slices per request.
var DefaultMix = []Request{
	{"1g.10gb", 35}, {"1g.20gb", 10}, {"2g.20gb", 20}, {"3g.40gb", 20}, {"4g.40gb", 5}, {"7g.80gb", 10},
}

// Config is one run.
type Config struct {
	Model *migplace.Model
	Cards int
	Mix   []Request
	// Requests is how many arrive; Load the offered load: arrivals × mean slices × mean lifetime
	// over the cards' compute slices (1 = the cluster's whole compute, were it perfectly packable).
	// Load 0: no departures, a burst (every instance stays).
	Requests int
	Load     float64
	Seed     uint64
	Policy   migplace.Policy
}

// Result counts what a run served.
type Result struct {
	Offered, Served map[string]int
	// SlicesOffered and SlicesServed are compute slices asked and given (sum over requests).
	SlicesOffered, SlicesServed int
}

// ServedAll is how many requests were served.
func (r Result) ServedAll() (served, offered int) {
	for p, n := range r.Offered {
		offered += n
		served += r.Served[p]
	}
	return served, offered
}

// departure is an instance leaving at time at.
type departure struct {
	at      float64
	card, i int
	where   migplace.Placement
}

type departures []departure

func (d departures) Len() int           { return len(d) }
func (d departures) Less(a, b int) bool { return d[a].at < d[b].at }
func (d departures) Swap(a, b int)      { d[a], d[b] = d[b], d[a] }
func (d *departures) Push(x any)        { *d = append(*d, x.(departure)) }
func (d *departures) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

// Run plays one seeded stream of requests: arrivals one at a time (Poisson), each placed by the
// policy or refused when no card has a free placement of its profile, each leaving after an
// exponential lifetime of mean 1. The same seed gives the same stream to every policy. The chooser
// sees the mix of the requests arrived so far (as the extender would, from the pods it has seen),
// not the configured shares.
func Run(cfg Config) (Result, error) {
	res := Result{Offered: map[string]int{}, Served: map[string]int{}}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x6d6967))
	total, meanSlices := 0.0, 0.0
	for _, q := range cfg.Mix {
		i, ok := cfg.Model.Profile(q.Profile)
		if !ok {
			return res, fmt.Errorf("%s has no profile %s", cfg.Model.Name, q.Profile)
		}
		total += q.Share
		meanSlices += q.Share * float64(cfg.Model.Profiles[i].Compute)
	}
	meanSlices /= total
	// Arrival rate so that rate × meanSlices × 1 (mean lifetime) = Load × capacity.
	rate := cfg.Load * float64(cfg.Cards*migplace.ComputeSlices) / meanSlices
	cards := make([]migplace.Card, cfg.Cards)
	for k := range cards {
		cards[k] = migplace.NewCard(cfg.Model)
	}
	seen := map[string]float64{}
	var gone departures
	now := 0.0
	for range cfg.Requests {
		if cfg.Load > 0 {
			now += r.ExpFloat64() / rate
		}
		for len(gone) > 0 && gone[0].at <= now {
			d := heap.Pop(&gone).(departure)
			var err error
			if cards[d.card], err = cards[d.card].Remove(d.i, d.where); err != nil {
				return res, err
			}
		}
		// Draw the profile.
		x, q := r.Float64()*total, cfg.Mix[len(cfg.Mix)-1]
		for _, c := range cfg.Mix {
			if x < c.Share {
				q = c
				break
			}
			x -= c.Share
		}
		lifetime := r.ExpFloat64()
		i, _ := cfg.Model.Profile(q.Profile)
		g := cfg.Model.Profiles[i].Compute
		res.Offered[q.Profile]++
		res.SlicesOffered += g
		seen[q.Profile]++
		mix := make([]migplace.Demand, 0, len(seen))
		for _, c := range cfg.Mix {
			if seen[c.Profile] > 0 {
				mix = append(mix, migplace.Demand{Profile: c.Profile, Weight: seen[c.Profile]})
			}
		}
		ch, err := migplace.NewChooser(cfg.Policy, mix)
		if err != nil {
			return res, err
		}
		opt, ok := ch.Choose(cards, q.Profile)
		if !ok {
			continue
		}
		if cards[opt.Card], err = cards[opt.Card].Place(i, opt.Placement); err != nil {
			return res, fmt.Errorf("policy %s chose %s at %s on card %d: %w", cfg.Policy, q.Profile, opt.Placement, opt.Card, err)
		}
		res.Served[q.Profile]++
		res.SlicesServed += g
		if cfg.Load > 0 {
			heap.Push(&gone, departure{at: now + lifetime, card: opt.Card, i: i, where: opt.Placement})
		}
	}
	return res, nil
}
