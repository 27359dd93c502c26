package core

import (
	"errors"
	"fmt"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// MaxScore is the best node score (the extender API's MaxExtenderPriority).
const MaxScore = 10

// ErrUnknownPolicy is wrapped when a policy name has no strategy.
var ErrUnknownPolicy = errors.New("unknown policy")

// ErrPolicyNotImplemented is wrapped when a policy is part of the contract but this build has no
// strategy for it yet.
var ErrPolicyNotImplemented = errors.New("policy not implemented in this build")

// NodeInput is what a node strategy sees: the node before the placement, the plan (which gives the
// node after it, card by card), and the mix of requests the cluster has seen (may be nil).
type NodeInput struct {
	Node *NodeState
	Plan *Plan
	Mix  *TaskMix

	frag *fragKeep // where a Scratch keeps the frag-aware policy's work on the node (nil: nowhere)
}

// Before returns the usage of card i before the placement.
func (in *NodeInput) Before(i int) Usage { return in.Node.Cards[i].Usage }

// After returns the usage of card i after the placement.
func (in *NodeInput) After(i int) Usage { return in.Plan.After(in.Node, i) }

// NodeScoreFunc scores placing a pod on a node: 0 (worst) to MaxScore (best).
type NodeScoreFunc func(in *NodeInput) float64

// CardInput is what a card strategy sees when it ranks one card for one device of a container:
// the card, its usage before the device (this pod's earlier containers included) and after it.
type CardInput struct {
	Node    *NodeState
	Card    *Card
	Before  Usage
	After   Usage
	Request *annotations.ContainerRequest
	Mix     *TaskMix
	// Host is the pod's CPU and memory request (Pod.Host); Node.Host is the node before the pod.
	Host HostRequest
	// ParentBefore and ParentAfter are, for a MIG instance (Card.Instance), the share of its parent
	// held before and after the device, by instance memory (this pod's earlier devices included).
	ParentBefore, ParentAfter float64

	frag *fragKeep // where a Scratch keeps the frag-aware policy's work on the node (nil: nowhere)
}

// CardStrategy ranks cards inside a node: Score higher is better (ties go to the lower card index).
// When a multi-card container can be placed on several NUMA nodes, the NUMA node whose best cards
// score highest wins; on a tie, Tight prefers the NUMA node with fewer usable cards (keeping larger
// groups whole for larger requests), otherwise the one with more; then the lower NUMA index.
type CardStrategy struct {
	Score func(in *CardInput) float64
	Tight bool
}

// nodeStrategies and cardStrategies hold every implemented policy. They are never written after
// package initialisation (fragaware.go adds annotations.PolicyFragAware from its init). A policy
// listed in annotations.Policies but missing here fails with ErrPolicyNotImplemented.
var (
	nodeStrategies = map[annotations.Policy]NodeScoreFunc{
		annotations.PolicyBinpack: binpackNode,
		annotations.PolicySpread:  spreadNode,
	}
	cardStrategies = map[annotations.Policy]CardStrategy{
		annotations.PolicyBinpack: {Score: binpackCard, Tight: true},
		annotations.PolicySpread:  {Score: spreadCard},
	}
)

func lookup[T any](m map[annotations.Policy]T, p annotations.Policy, what string) (T, error) {
	if s, ok := m[p]; ok {
		return s, nil
	}
	var zero T
	for _, known := range annotations.Policies {
		if known == p {
			return zero, fmt.Errorf("%s policy %q: %w", what, p, ErrPolicyNotImplemented)
		}
	}
	return zero, fmt.Errorf("%s policy %q: %w (known: %v)", what, p, ErrUnknownPolicy, annotations.Policies)
}

// binpackNode prefers the node that is fullest after the placement: 10 × mean card utilization.
// E.g. 8 cards, 3 in use and the pod takes 1 more: 10 × 4/8 = 5.
func binpackNode(in *NodeInput) float64 { return MaxScore * utilizationAfter(in) }

// spreadNode prefers the emptiest node after the placement: 10 × (1 − mean card utilization).
func spreadNode(in *NodeInput) float64 { return MaxScore * (1 - utilizationAfter(in)) }

// utilizationAfter is NodeState.Utilization after the plan: a MIG instance counts as its share
// of its parent (NodeState.cardWeight).
func utilizationAfter(in *NodeInput) float64 {
	sum, healthy := 0.0, 0.0
	for i := range in.Node.Cards {
		c := &in.Node.Cards[i]
		if c.dynEnd > 0 {
			sum += in.Node.dynamicUse(i, in.After)
			healthy++
			continue
		}
		if !c.Healthy || c.place != nil {
			continue
		}
		w := in.Node.cardWeight(c)
		healthy += w
		sum += w * c.Utilization(in.After(i))
	}
	if healthy == 0 {
		return 1
	}
	return sum / healthy
}

// binpackCard prefers the card that is fullest after the device (by memory and cores), so small
// shares stack on cards already in use; a device that takes a card's last ID while memory or cores
// stay free strands them, and that waste is subtracted.
//
// A MIG instance is held whole, so its own load says nothing: binpack fills partly used parents
// first (1 when the parent already has held instances), then the parent fullest after the device
// (keeping the larger parents' instances free together).
func binpackCard(in *CardInput) float64 {
	if in.Card.Instance() {
		return used(in.ParentBefore) + in.ParentAfter
	}
	load := in.Card.load(in.After)
	return load - in.Card.stranded(in.After, load)
}

// spreadCard prefers the emptiest card after the device, with the same penalty for stranding.
// A MIG instance goes to a parent with nothing held first, then to the emptiest parent after it.
func spreadCard(in *CardInput) float64 {
	if in.Card.Instance() {
		return 2 - used(in.ParentBefore) - in.ParentAfter
	}
	load := in.Card.load(in.After)
	return 1 - load - in.Card.stranded(in.After, load)
}

// used is 1 when share is positive, else 0.
func used(share float64) float64 {
	if share > 0 {
		return 1
	}
	return 0
}

// Candidate is a node with its score, for choosing among nodes.
type Candidate struct {
	Name  string
	Score float64
}

// Better reports whether a should be chosen over b: the higher score, and on equal scores the
// smaller node name, so that every run picks the same node.
func (a Candidate) Better(b Candidate) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	return a.Name < b.Name
}

// ExtenderScore converts a score to the extender API's integer 0..10, rounding to nearest.
func ExtenderScore(s float64) int64 {
	switch {
	case s <= 0:
		return 0
	case s >= MaxScore:
		return MaxScore
	}
	return int64(s + 0.5)
}
