package deviceplugin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxXid bounds the XIDs the lists accept (NVIDIA's catalogue ends well below it).
const MaxXid = 1 << 16

// XidList is a flag value holding a comma-separated list of XIDs, e.g. "48,63,64". An empty value is
// an empty list.
type XidList []uint64

// String implements pflag.Value.
func (l *XidList) String() string {
	parts := make([]string, len(*l))
	for i, x := range *l {
		parts[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(parts, ",")
}

// Set implements pflag.Value.
func (l *XidList) Set(s string) error {
	v, err := ParseXidList(s)
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Type implements pflag.Value.
func (l *XidList) Type() string { return "xids" }

// ParseXidList parses a comma-separated list of XIDs (1..MaxXid), sorted and without repeats.
func ParseXidList(s string) (XidList, error) {
	var out XidList
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		x, err := strconv.ParseUint(part, 10, 64)
		if err != nil || x == 0 || x > MaxXid {
			return nil, fmt.Errorf("XID %q is not an integer in 1..%d", part, MaxXid)
		}
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out, nil
}

// set returns the list as the map nvidia.HealthConfig takes; never nil, so an empty list stays empty.
func (l XidList) set() map[uint64]bool {
	m := make(map[uint64]bool, len(l))
	for _, x := range l {
		m[x] = true
	}
	return m
}

func xidListOf(m map[uint64]bool) XidList {
	out := make(XidList, 0, len(m))
	for x := range m {
		out = append(out, x)
	}
	slices.Sort(out)
	return out
}
