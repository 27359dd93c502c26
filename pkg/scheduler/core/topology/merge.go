package topology

// The TopologyManager's merge of the providers' hints (topologymanager/policy.go and the three
// policy files). Cardinal's pod has two providers that can hold a preference: the device manager
// (one resource, Cardinal's) and the static CPU manager. The memory manager with policy None
// answers "no preference", which changes no merged hint, so it is left out.

var (
	noPreference = []Hint{{Preferred: true}} // a provider with no NUMA preference: {nil, true}
	impossible   = []Hint{{}}                // a provider that cannot be satisfied: {nil, false}
)

// merge returns the best hint for one container (or the pod) and whether the policy admits it.
// dev and cpu are the providers' hints, already in the form filterProvidersHints gives them
// (noPreference / impossible for the special cases), in the order the kubelet iterates them:
// device manager first (it is added first in container_manager_linux.go), then the CPU manager.
func (s *sim) merge(dev, cpu []Hint) (Hint, bool) {
	if s.n.Policy == PolicySingleNUMANode {
		dev, cpu = singleNUMAOnly(dev), singleNUMAOnly(cpu)
	}
	m := merger{s: s, closest: s.n.PreferClosestNUMA && s.n.Policy != PolicySingleNUMANode,
		bestNonPreferred: max(narrowestCount(dev), narrowestCount(cpu))}
	var best Hint
	have := false
	for _, d := range dev {
		for _, c := range cpu {
			best, have = m.compare(best, have, mergePermutation(s.def, d, c))
		}
	}
	if !have {
		best = Hint{Affinity: s.def}
	}
	if s.n.Policy == PolicySingleNUMANode && best.Affinity == s.def {
		// policy_single_numa_node.go: the default affinity means "no single NUMA node": nil.
		best.Affinity = 0
	}
	if s.n.Policy == PolicyBestEffort {
		return best, true
	}
	return best, best.Preferred // restricted and single-numa-node admit only a preferred hint
}

// singleNUMAOnly is filterSingleNumaHints: only preferred hints of no preference or one NUMA node.
func singleNUMAOnly(hints []Hint) []Hint {
	out := make([]Hint, 0, len(hints))
	for _, h := range hints {
		if h.Preferred && h.Affinity.Count() <= 1 {
			out = append(out, h)
		}
	}
	return out
}

// mergePermutation ANDs the affinities that are set; the result is preferred only if every hint is
// and every set affinity is the same.
func mergePermutation(def Mask, a, b Hint) Hint {
	preferred := a.Preferred && b.Preferred
	if a.Affinity != 0 && b.Affinity != 0 && a.Affinity != b.Affinity {
		preferred = false
	}
	m := def
	if a.Affinity != 0 {
		m &= a.Affinity
	}
	if b.Affinity != 0 {
		m &= b.Affinity
	}
	return Hint{Affinity: m, Preferred: preferred}
}

// narrowestCount is the size of a provider's narrowest hint with an affinity (0 if none):
// narrowestHint in policy.go; maxOfMinAffinityCounts takes the largest over the providers.
func narrowestCount(hints []Hint) int {
	n := 0
	for _, h := range hints {
		if c := h.Affinity.Count(); c > 0 && (n == 0 || c < n) {
			n = c
		}
	}
	return n
}

type merger struct {
	s                *sim
	closest          bool
	bestNonPreferred int
}

// compare is HintMerger.compare: a preferred hint beats a non-preferred one; two preferred ones
// go to the narrower (or closer) mask; among non-preferred ones the mask whose width is nearest the
// widest of the providers' narrowest hints wins, then the narrower mask.
func (m *merger) compare(cur Hint, have bool, cand Hint) (Hint, bool) {
	kc := cand.Affinity.Count()
	switch {
	case kc == 0:
		return cur, have
	case !have:
		return cand, true
	case !cur.Preferred && cand.Preferred:
		return cand, true
	case cur.Preferred && !cand.Preferred:
		return cur, true
	case cur.Preferred && cand.Preferred:
		return m.compareMasks(cur, cand), true
	}
	cc, b := cur.Affinity.Count(), m.bestNonPreferred
	switch {
	case cc > b:
		return m.compareMasks(cur, cand), true
	case cc == b:
		if kc != b {
			return cur, true
		}
		return m.compareMasks(cur, cand), true
	case kc > b:
		return cur, true
	case kc == b:
		return cand, true
	case kc > cc:
		return cand, true
	case kc < cc:
		return cur, true
	}
	return m.compareMasks(cur, cand), true
}

// compareMasks is the merger's CompareNUMAAffinityMasks: the current hint stays unless the
// candidate's mask is narrower (numa_info.go Narrowest) or, with prefer-closest-numa-nodes,
// closer (Closest).
func (m *merger) compareMasks(cur, cand Hint) Hint {
	if cur.Affinity == cand.Affinity {
		return cur
	}
	var best Mask
	if m.closest {
		best = m.s.closestOf(cur.Affinity, cand.Affinity)
	} else {
		best = narrowestOf(cur.Affinity, cand.Affinity)
	}
	if best == cur.Affinity {
		return cur
	}
	return cand
}

func narrowestOf(a, b Mask) Mask {
	if a.narrowerThan(b) {
		return a
	}
	return b
}

// closestOf is NUMAInfo.Closest: the narrower mask, or at equal width the smaller average distance
// between its NUMA nodes, or at equal distance the lower mask.
func (s *sim) closestOf(a, b Mask) Mask {
	if a.Count() != b.Count() {
		return narrowestOf(a, b)
	}
	da, db := s.averageDistance(a), s.averageDistance(b)
	switch {
	case da == db:
		if a < b {
			return a
		}
		return b
	case da < db:
		return a
	}
	return b
}

// averageDistance is NUMADistances.CalculateAverageFor, summed in the same order.
func (s *sim) averageDistance(m Mask) float64 {
	var sum, count float64
	for v := uint64(m); v != 0; v &= v - 1 {
		from := trailing(v)
		var row []int
		if p := s.pos[from]; p >= 0 {
			row = s.n.NUMA[p].Distances
		}
		for w := uint64(m); w != 0; w &= w - 1 {
			to := trailing(w)
			if to < len(row) {
				sum += float64(row[to])
			}
			count++
		}
	}
	if count == 0 {
		return 0
	}
	return sum / count
}
