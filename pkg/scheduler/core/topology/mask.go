package topology

import (
	"math/bits"
	"strconv"
	"strings"
)

// Mask is a set of NUMA node IDs (0-63), bit i for node i, as the kubelet's bitmask.BitMask.
// The zero Mask stands for the kubelet's nil affinity: no preference, or none chosen.
type Mask uint64

// MaskOf returns the mask of the given NUMA node IDs; IDs outside 0-63 are ignored.
func MaskOf(ids ...int) Mask {
	var m Mask
	for _, id := range ids {
		if id >= 0 && id < 64 {
			m |= 1 << uint(id)
		}
	}
	return m
}

// Count is the number of NUMA nodes in the mask.
func (m Mask) Count() int { return bits.OnesCount64(uint64(m)) }

// Has reports whether NUMA node id is in the mask.
func (m Mask) Has(id int) bool { return id >= 0 && id < 64 && m&(1<<uint(id)) != 0 }

// IDs lists the mask's NUMA node IDs in ascending order.
func (m Mask) IDs() []int {
	ids := make([]int, 0, m.Count())
	for v := uint64(m); v != 0; v &= v - 1 {
		ids = append(ids, bits.TrailingZeros64(v))
	}
	return ids
}

// String writes the mask as "{0,1}", or "{}" for the zero mask.
func (m Mask) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, id := range m.IDs() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(id))
	}
	b.WriteByte('}')
	return b.String()
}

// narrowerThan is bitmask.IsNarrowerThan: fewer NUMA nodes, or as many and the lower value (the
// lower-numbered nodes win).
func (m Mask) narrowerThan(o Mask) bool {
	if c, d := m.Count(), o.Count(); c != d {
		return c < d
	}
	return m < o
}

// appendMasks appends every non-empty subset of ids in the order of bitmask.IterateBitMasks: by
// size, then the combinations of ids in lexicographic order of their positions.
func appendMasks(dst []Mask, ids []int) []Mask {
	var rec func(from int, acc Mask, left int)
	rec = func(from int, acc Mask, left int) {
		if left == 0 {
			dst = append(dst, acc)
			return
		}
		for i := from; i <= len(ids)-left; i++ {
			rec(i+1, acc|1<<uint(ids[i]), left-1)
		}
	}
	for size := 1; size <= len(ids); size++ {
		rec(0, 0, size)
	}
	return dst
}
