package core

import "slices"

// Rank turns the policy's scores of the candidate nodes of one prioritize call into the
// extender's 0..MaxScore integers without losing the policy's order to rounding: the best score
// gets MaxScore, the next lower score MaxScore-1, and so on (0 from the MaxScore-th level down);
// equal scores share a level. Scores are compared exactly: frag-aware breaks its ties with terms
// of 1e-10, which any tolerance would erase (and with them 6.8 points of the default trace's
// allocation under live scoring). ok[i] false leaves out[i] 0 (a node the pod does not fit).
// out must be as long as scores.
func Rank(scores []float64, ok []bool, out []int64) {
	idx := make([]int, 0, len(scores))
	for i := range scores {
		out[i] = 0
		if ok[i] {
			idx = append(idx, i)
		}
	}
	// Best first; ties by position, so equal inputs give equal outputs.
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case scores[a] > scores[b]:
			return -1
		case scores[a] < scores[b]:
			return 1
		}
		return 0
	})
	level, top := int64(MaxScore), 0.0
	for k, i := range idx {
		if k == 0 {
			top = scores[i]
		} else if scores[i] < top {
			level, top = max(level-1, 0), scores[i]
		}
		out[i] = level
	}
}
