package core

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRank(t *testing.T) {
	cases := []struct {
		name   string
		scores []float64
		ok     []bool
		want   []int64
	}{
		{"rounding would merge 5.02 and 5.38; rank keeps them apart", []float64{5.02, 5.38, 5.03, 4.6}, []bool{true, true, true, true}, []int64{8, 10, 9, 7}},
		// frag-aware's tie-breaks are this small; they must survive.
		{"a difference of 1e-10 is a level", []float64{5, 5 - 1e-10, 5}, nil, []int64{10, 9, 10}},
		{"unfit nodes get 0 and take no level", []float64{9, 1, 8}, []bool{false, true, true}, []int64{0, 9, 10}},
		// 12 distinct levels: the 11th and 12th are 0.
		{"levels below the tenth are 0", []float64{12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, nil, []int64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok := c.ok
			if ok == nil {
				ok = make([]bool, len(c.scores))
				for i := range ok {
					ok[i] = true
				}
			}
			got := make([]int64, len(c.scores))
			Rank(c.scores, ok, got)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
