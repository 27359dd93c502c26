package core

import (
	"fmt"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/migplace"
)

// Dynamic MIG (issue 40). A card of a dynamic pool (its inventory's mig.dynamic, dynamicV 1)
// offers, instead of instances that exist, the placements where the device plugin can create one:
// NewNodeState lists each allow-listed profile's legal placement as a MIG instance card whose UUID
// is its placement ID (annotations.MIGPlacementID), so selection, selectors, NUMA, holdings and
// reasons treat it as they treat an instance. What is particular to placements:
//
//   - Overlap: a placement is blocked while an instance listed on the card, or another placement
//     held (an assignment in flight or a pod's record), takes one of its memory slices; a blocked
//     placement is never chosen (Card.blocked, kept by Hold and Unhold). Within one pod, a
//     placement is chosen only if the pod's plan so far leaves it free on its card (the
//     geometry of pkg/migplace when the card's model is known: slices, compute and per-profile
//     counts; else slices alone).
//   - Choice: among a container's free placements, the fragmentation-aware rule of pkg/migplace
//     (migplace.Chooser.Loss): the placement that uses up the least of the node's room for the mix
//     of profiles requested (TaskMix.MIGDemand; every allow-listed profile alike while the mix has
//     none), then the fuller card, then the lower card and start. This holds under every card
//     policy: binpack and spread choose among whole cards and static instances.
//   - Utilization: a dynamic card counts as one card, held by the share of its memory slices its
//     instances and held placements take.

// dynamicPlacement is what a placement card knows of its placement; nil on other cards.
type dynamicPlacement struct {
	start, size int
	// mask is the memory slices the placement takes (at most 64).
	mask uint64
}

// sliceMask is the set of memory slices start..start+size-1.
func sliceMask(start, size int) uint64 {
	if size >= 64 {
		return ^uint64(0) << uint(start)
	}
	return (uint64(1)<<uint(size) - 1) << uint(start)
}

// Dynamic reports whether the card is a dynamic MIG placement (its UUID a placement ID).
func (c *Card) Dynamic() bool { return c.place != nil }

// Placement is where a dynamic MIG placement card sits on its parent; zero on other cards.
func (c *Card) Placement() (start, size int) {
	if c.place == nil {
		return 0, 0
	}
	return c.place.start, c.place.size
}

// Blocked reports whether a dynamic placement overlaps an instance or a held placement now.
func (c *Card) Blocked() bool { return c.blocked > 0 }

// dynamicCard reports whether inventory card g is in a dynamic pool this reader knows.
func dynamicCard(g *annotations.GPU) bool {
	m := g.MIG
	return m != nil && m.Mode == annotations.MIGEnabled && m.DynamicV == annotations.MIGDynamicVersion && len(m.Dynamic) > 0
}

// addPlacements appends the placements of dynamic card p as MIG instance cards. The card's
// instances are not served (the plugin owns the card's layout): they block the placements they
// overlap. The parent's MIG weight is its memory slices; held ones start at the instances'.
func (n *NodeState) addPlacements(p int, m *annotations.MIG) {
	var occupied []uint64
	seen := map[[2]int]bool{}
	total := 8
	for _, in := range m.Instances {
		if k := [2]int{in.Start, in.Size}; !seen[k] {
			seen[k] = true
			occupied = append(occupied, sliceMask(in.Start, in.Size))
			total = max(total, in.Start+in.Size)
		}
	}
	for _, d := range m.Dynamic {
		for _, s := range d.Starts {
			total = max(total, s+d.Size)
		}
	}
	var used uint64
	for _, o := range occupied {
		used |= o
	}
	// A copy: appending to n.Cards moves it.
	parent := n.Cards[p]
	first := len(n.Cards)
	for _, d := range m.Dynamic {
		mem := profileMemMiB(d.Profile)
		for _, s := range d.Starts {
			id := annotations.MIGPlacementID(parent.UUID, d.Profile, s)
			if _, dup := n.byUUID[id]; dup {
				continue
			}
			pl := &dynamicPlacement{start: s, size: d.Size, mask: sliceMask(s, d.Size)}
			var blocked int32
			for _, o := range occupied {
				if o&pl.mask != 0 {
					blocked++
				}
			}
			g := annotations.GPU{UUID: id, Index: parent.Index, Model: parent.Model, MemoryMiB: mem, NUMA: parent.NUMA, Healthy: true, Shares: 1}
			n.byUUID[id] = len(n.Cards)
			n.Cards = append(n.Cards, Card{GPU: g, Parent: parent.UUID, Profile: d.Profile, ProfileKey: annotations.MIGProfileKey(d.Profile),
				modelLower: parent.modelLower, refs: make([]int32, 1), parent: p, weight: int64(d.Size), place: pl, blocked: blocked})
			n.MIG++
		}
	}
	pc := &n.Cards[p]
	pc.migWeight, pc.migHeld = int64(total), int64(popcount(used))
	pc.dynFirst, pc.dynEnd = first, len(n.Cards)
}

func popcount(m uint64) int {
	k := 0
	for ; m != 0; m &= m - 1 {
		k++
	}
	return k
}

// profileMemMiB is a profile's memory from its name (3g.40gb: 40 GiB), 0 when unreadable.
func profileMemMiB(profile string) int64 {
	p, err := migplace.ParseProfile(profile)
	if err != nil {
		return 0
	}
	return int64(p.GB) * 1024
}

// holdPlacement updates, when placement card i becomes held (sign 1) or free (-1), the block
// counts of the placements of its parent it overlaps.
func (n *NodeState) holdPlacement(i int, sign int32) {
	c := &n.Cards[i]
	p := &n.Cards[c.parent]
	for j := p.dynFirst; j < p.dynEnd; j++ {
		if o := &n.Cards[j]; j != i && o.place != nil && o.place.mask&c.place.mask != 0 {
			o.blocked += sign
		}
	}
}

// migplaceCard is the geometry of dynamic parent p for pkg/migplace: its instances and held
// placements, plus the placements of plan (may be nil) on it; false when its model is not
// modelled or its state is not one migplace accepts.
func (n *NodeState) migplaceCard(p int, inv []annotations.MIGInstance, plan []Device) (migplace.Card, bool) {
	parent := &n.Cards[p]
	model, ok := migplace.ModelFor(parent.Model, parent.MemoryMiB)
	if !ok {
		return migplace.Card{}, false
	}
	held := make([]migplace.Held, 0, len(inv)+4)
	var used uint64
	for _, in := range inv {
		held = append(held, migplace.Held{Profile: in.Profile, Placement: migplace.Placement{Start: in.Start, Size: in.Size}})
		used |= sliceMask(in.Start, in.Size)
	}
	// A held placement whose instance exists is listed already (its slices are used).
	add := func(c *Card) {
		if used&c.place.mask == 0 {
			held = append(held, migplace.Held{Profile: c.Profile, Placement: migplace.Placement{Start: c.place.start, Size: c.place.size}})
			used |= c.place.mask
		}
	}
	for j := parent.dynFirst; j < parent.dynEnd; j++ {
		if c := &n.Cards[j]; c.Held > 0 {
			add(c)
		}
	}
	for _, d := range plan {
		if c := &n.Cards[d.Card]; c.place != nil && c.parent == p {
			add(c)
		}
	}
	mc, err := migplace.CardWith(model, held)
	return mc, err == nil
}

// dynamicFits reports whether placement card i is free for one more device of this plan: not
// blocked, and free beside the plan's placements on its card (migplace's rules when the card's
// model is known: slices, compute, per-profile counts).
func (f *fit) dynamicFits(i int) bool {
	card := &f.node.Cards[i]
	if card.blocked > 0 {
		return false
	}
	for _, d := range f.plan.Devices {
		o := &f.node.Cards[d.Card]
		if o.place != nil && o.parent == card.parent && (d.Card == i || o.place.mask&card.place.mask != 0) {
			return false
		}
	}
	mc, ok := f.node.migplaceCard(card.parent, f.node.instancesOf(card.parent), f.plan.Devices)
	if !ok {
		return true
	}
	q, ok := mc.Model.Profile(card.Profile)
	if !ok {
		return true
	}
	return mc.Check(q, migplace.Placement{Start: card.place.start, Size: card.place.size}) == nil
}

// instancesOf is the inventory's instances of dynamic parent p (kept for the geometry).
func (n *NodeState) instancesOf(p int) []annotations.MIGInstance {
	if m := n.Cards[p].MIG; m != nil {
		return m.Instances
	}
	return nil
}

// dynamicScore ranks placement card i for this plan by migplace's frag-aware rule: the lower the
// loss the higher the score, then the fuller card. Losses are shares in [0, 1]; the fullness term
// (used slices / 1024) only breaks ties closer than 1/128.
func (f *fit) dynamicScore(i int) float64 {
	card := &f.node.Cards[i]
	ch := f.node.chooser(f.mix)
	// The node's dynamic cards as migplace sees them, with this plan's placements so far.
	var cards []migplace.Card
	at := -1
	for p := range f.node.Cards {
		pc := &f.node.Cards[p]
		if pc.dynEnd == 0 {
			continue
		}
		mc, ok := f.node.migplaceCard(p, f.node.instancesOf(p), f.plan.Devices)
		if !ok {
			continue
		}
		if p == card.parent {
			at = len(cards)
		}
		cards = append(cards, mc)
	}
	if at < 0 || ch == nil {
		return 0
	}
	mc := cards[at]
	q, ok := mc.Model.Profile(card.Profile)
	if !ok {
		return 0
	}
	loss := ch.Loss(mc, q, migplace.Placement{Start: card.place.start, Size: card.place.size}, ch.Placeable(cards))
	return -loss + float64(mc.Used.Count())/1024
}

// chooser is the frag-aware migplace chooser for the mix's MIG demand, or, while the mix has
// none, every profile the node's dynamic cards allow alike.
func (n *NodeState) chooser(mix *TaskMix) *migplace.Chooser {
	demand := mix.MIGDemand()
	if len(demand) == 0 {
		seen := map[string]bool{}
		for i := range n.Cards {
			if c := &n.Cards[i]; c.place != nil && !seen[c.ProfileKey] {
				seen[c.ProfileKey] = true
				demand = append(demand, migplace.Demand{Profile: c.Profile, Weight: 1})
			}
		}
	}
	ch, err := migplace.NewChooser(migplace.PolicyFragAware, demand)
	if err != nil {
		return nil
	}
	return ch
}

// validDynamicPlan reports why the plan's placements on one card cannot all be created together
// ("" when they can, or the plan has none): two containers' choices are checked one by one, and
// this is the last word before an assignment names them.
func (n *NodeState) validDynamicPlan(p *Plan) string {
	parents := map[int][]Device{}
	for _, d := range p.Devices {
		if c := &n.Cards[d.Card]; c.place != nil {
			parents[c.parent] = append(parents[c.parent], d)
		}
	}
	for parent, ds := range parents {
		var used uint64
		for _, d := range ds {
			c := &n.Cards[d.Card]
			if used&c.place.mask != 0 || c.blocked > 0 {
				return fmt.Sprintf("placement %s overlaps another of the pod's or an instance on %s", c.UUID, n.Cards[parent].UUID)
			}
			used |= c.place.mask
		}
		if model, ok := migplace.ModelFor(n.Cards[parent].Model, n.Cards[parent].MemoryMiB); ok {
			mc, ok := n.migplaceCard(parent, n.instancesOf(parent), nil)
			if !ok {
				continue
			}
			for _, d := range ds {
				c := &n.Cards[d.Card]
				q, ok := model.Profile(c.Profile)
				if !ok {
					continue
				}
				var err error
				if mc, err = mc.Place(q, migplace.Placement{Start: c.place.start, Size: c.place.size}); err != nil {
					return fmt.Sprintf("placement %s: %v", c.UUID, err)
				}
			}
		}
	}
	return ""
}

// dynamicUse is the share of dynamic parent p's memory slices its instances and held placements
// take, with after (nil: now) giving each placement's usage after a plan. A held placement whose
// instance exists counts once.
func (n *NodeState) dynamicUse(p int, after func(int) Usage) float64 {
	c := &n.Cards[p]
	var used uint64
	for _, in := range n.instancesOf(p) {
		if in.Size > 0 && in.Start >= 0 && in.Start+in.Size <= 64 {
			used |= sliceMask(in.Start, in.Size)
		}
	}
	for j := c.dynFirst; j < c.dynEnd; j++ {
		if o := &n.Cards[j]; o.Held > 0 || (after != nil && after(j).Held > 0) {
			used |= o.place.mask
		}
	}
	if c.migWeight <= 0 {
		return 1
	}
	return min(float64(popcount(used))/float64(c.migWeight), 1)
}
