package webhook

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Cards is an immutable view of every card Cardinal knows, from the nodes' inventory annotations. The
// webhook only uses it for advice (warnings) and for one hard rule (memory no card can hold), so it
// keeps what those need: cards grouped by model, and an index by UUID. A nil *Cards knows nothing.
type Cards struct {
	nodes      int
	total      int
	maxMem     int64
	maxMemOf   string
	maxPerNode int
	models     []modelCards
	byUUID     map[string]cardRef
	// profiles are the MIG instances, by profile key (annotations.MIGProfileKey), sorted by key.
	profiles []profileInstances
}

// profileInstances are the known MIG instances of one profile.
type profileInstances struct {
	key        string
	maxPerNode int
	instances  []migRef
}

// migRef is one MIG instance: its UUID, and its parent's UUID and model (selectors match the
// parent's model, and the parent's or the instance's UUID).
type migRef struct {
	uuid, parent, model string
}

type modelCards struct {
	model  string
	maxMem int64
	cards  []cardRef
}

type cardRef struct {
	uuid   string
	model  string
	memMiB int64
}

// NewCards builds the view from each node's inventory (node name → inventory). Unhealthy cards are
// counted: a card that is down now may recover, and the webhook only advises. So are cards in MIG
// mode (their operator may turn it off), and their instances, healthy or not, under their profile.
func NewCards(nodes map[string]annotations.Inventory) *Cards {
	c := &Cards{byUUID: map[string]cardRef{}}
	byModel := map[string]int{}
	byProfile := map[string]int{}
	for _, inv := range nodes {
		if len(inv.GPUs) == 0 {
			continue
		}
		c.nodes++
		c.maxPerNode = max(c.maxPerNode, len(inv.GPUs))
		onNode := map[string]int{}
		for i := range inv.GPUs {
			g := &inv.GPUs[i]
			add := func(profile, uuid string) {
				key := annotations.MIGProfileKey(profile)
				k, ok := byProfile[key]
				if !ok {
					k = len(c.profiles)
					byProfile[key] = k
					c.profiles = append(c.profiles, profileInstances{key: key})
				}
				p := &c.profiles[k]
				p.instances = append(p.instances, migRef{uuid: uuid, parent: g.UUID, model: g.Model})
				onNode[key]++
				p.maxPerNode = max(p.maxPerNode, onNode[key])
			}
			switch {
			case g.MIG != nil && g.MIG.DynamicV == annotations.MIGDynamicVersion && len(g.MIG.Dynamic) > 0:
				// A dynamic MIG card serves its allowed profiles' placements (its instances are
				// only what is occupied): each placement counts as an instance of its profile.
				for _, d := range g.MIG.Dynamic {
					for _, s := range d.Starts {
						add(d.Profile, annotations.MIGPlacementID(g.UUID, d.Profile, s))
					}
				}
			case g.MIG != nil:
				for _, in := range g.MIG.Instances {
					add(in.Profile, in.UUID)
				}
			}
			ref := cardRef{uuid: g.UUID, model: g.Model, memMiB: g.MemoryMiB}
			c.total++
			c.byUUID[g.UUID] = ref
			if g.MemoryMiB > c.maxMem || (g.MemoryMiB == c.maxMem && g.Model < c.maxMemOf) {
				c.maxMem, c.maxMemOf = g.MemoryMiB, g.Model
			}
			k, ok := byModel[g.Model]
			if !ok {
				k = len(c.models)
				byModel[g.Model] = k
				c.models = append(c.models, modelCards{model: g.Model})
			}
			m := &c.models[k]
			m.cards = append(m.cards, ref)
			m.maxMem = max(m.maxMem, g.MemoryMiB)
		}
	}
	slices.SortFunc(c.models, func(a, b modelCards) int { return strings.Compare(a.model, b.model) })
	slices.SortFunc(c.profiles, func(a, b profileInstances) int { return strings.Compare(a.key, b.key) })
	return c
}

// Known reports whether Cardinal knows at least one card.
func (c *Cards) Known() bool { return c != nil && c.total > 0 }

// Nodes is the number of nodes with at least one card.
func (c *Cards) Nodes() int {
	if c == nil {
		return 0
	}
	return c.nodes
}

// Total is the number of cards.
func (c *Cards) Total() int {
	if c == nil {
		return 0
	}
	return c.total
}

// MaxMemoryMiB is the memory of the largest card.
func (c *Cards) MaxMemoryMiB() int64 { return c.maxMem }

// MaxMemoryModel is the model of the largest card (the first by name among equals).
func (c *Cards) MaxMemoryModel() string { return c.maxMemOf }

// MaxPerNode is the largest number of cards on one node.
func (c *Cards) MaxPerNode() int { return c.maxPerNode }

// Fits reports whether some card is accepted by sel and has at least memMiB of memory.
func (c *Cards) Fits(sel *annotations.Selector, memMiB int64) bool {
	if !c.Known() {
		return false
	}
	if len(sel.UseUUIDs) > 0 {
		// Few names to look up beats a walk over every card.
		for _, u := range sel.UseUUIDs {
			if ref, ok := c.byUUID[u]; ok && ref.memMiB >= memMiB && sel.Check(ref.model, ref.uuid) == annotations.MatchOK {
				return true
			}
		}
		return false
	}
	for i := range c.models {
		m := &c.models[i]
		if m.maxMem < memMiB || sel.Check(m.model, "") != annotations.MatchOK {
			continue
		}
		if len(sel.NoUseUUIDs) == 0 {
			return true
		}
		for _, ref := range m.cards {
			if ref.memMiB >= memMiB && !slices.Contains(sel.NoUseUUIDs, ref.uuid) {
				return true
			}
		}
	}
	return false
}

// Summary names the known models with their counts, e.g. `8× NVIDIA A100-SXM4-80GB, 3× Tesla T4`,
// at most five of them, so a warning stays short.
func (c *Cards) Summary() string {
	if !c.Known() {
		return "no cards"
	}
	return counted(len(c.models), "models", func(i int) (int, string) { return len(c.models[i].cards), c.models[i].model })
}

// counted lists n entries as `<count>× <name>`, at most five of them, then how many more <what>.
func counted(n int, what string, entry func(i int) (int, string)) string {
	const most = 5
	parts := make([]string, 0, min(n, most)+1)
	for i := range n {
		if i == most {
			parts = append(parts, fmt.Sprintf("%d more %s", n-most, what))
			break
		}
		k, name := entry(i)
		parts = append(parts, fmt.Sprintf("%d× %s", k, name))
	}
	return strings.Join(parts, ", ")
}

// profile returns the instances of a profile key, or nil.
func (c *Cards) profile(key string) *profileInstances {
	if c == nil {
		return nil
	}
	i, ok := slices.BinarySearchFunc(c.profiles, key, func(p profileInstances, k string) int { return strings.Compare(p.key, k) })
	if !ok {
		return nil
	}
	return &c.profiles[i]
}

// FitsMIG reports whether some MIG instance of the profile key is accepted by sel: its parent's
// model by the type lists, its parent's UUID or its own by the UUID lists.
func (c *Cards) FitsMIG(sel *annotations.Selector, key string) bool {
	p := c.profile(key)
	if p == nil {
		return false
	}
	for _, in := range p.instances {
		if sel.CheckDevice(in.model, in.uuid, in.parent) == annotations.MatchOK {
			return true
		}
	}
	return false
}

// MaxInstancesPerNode is the largest number of MIG instances of the profile key on one node.
func (c *Cards) MaxInstancesPerNode(key string) int {
	if p := c.profile(key); p != nil {
		return p.maxPerNode
	}
	return 0
}

// MIGSummary names the known MIG profiles with their instance counts, e.g. `7× 1g.10gb, 1× 3g.40gb`,
// at most five of them.
func (c *Cards) MIGSummary() string {
	if c == nil || len(c.profiles) == 0 {
		return "no MIG instances"
	}
	return counted(len(c.profiles), "profiles", func(i int) (int, string) { return len(c.profiles[i].instances), c.profiles[i].key })
}
