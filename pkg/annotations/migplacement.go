package annotations

import (
	"fmt"
	"strconv"
	"strings"
)

// Dynamic MIG device IDs (issue 40). In a dynamic pool the instance a pod gets does not exist when
// the kubelet must be offered device IDs, so a dynamic profile's devices are its placements: under
// the profile's resource (nvidia.com/mig-3g.40gb) each card offers one device ID per legal start,
// <parent UUID>/<profile>@<start> ("GPU-…/3g.40gb@4"). The extender assigns one such ID per
// instance, never two overlapping placements of a card at once; the device plugin creates the GPU
// instance at that placement when the kubelet allocates the ID, and serves its MIG UUID. The format
// belongs to mig.dynamicV 1: a reader that does not know the inventory's dynamicV reads no dynamic
// card and so meets no such ID.

// migPlacementSeparator separates a placement ID's parent UUID from its profile, and
// migPlacementStart its profile from its start.
const (
	migPlacementSeparator = '/'
	migPlacementStart     = '@'
	// placementMarks are both, for a cheap test of a placement ID's shape.
	placementMarks = string(migPlacementSeparator) + string(migPlacementStart)
)

// MIGPlacementID is the device ID of profile's placement at start on card parent.
func MIGPlacementID(parent, profile string, start int) string {
	return parent + string(migPlacementSeparator) + profile + string(migPlacementStart) + strconv.Itoa(start)
}

// MIGPlacement is a placement of a GPU instance on its parent, in memory slices.
type MIGPlacement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// PlacementRef is what a placement ID names.
type PlacementRef struct {
	Parent, Profile string
	Start           int
}

// IsMIGPlacementID reports whether id has a placement ID's shape (ParseMIGPlacementID decides
// whether it is one).
func IsMIGPlacementID(id string) bool {
	return strings.ContainsRune(id, migPlacementSeparator) && strings.ContainsRune(id, migPlacementStart)
}

// ParseMIGPlacementID reads a placement ID: a card UUID, "/", a GPU instance profile (no <c>c.
// prefix), "@", a start slot (0..63, no sign or leading zero). Errors name the part that is wrong.
func ParseMIGPlacementID(id string) (PlacementRef, error) {
	head, start, ok := cutLast(id, migPlacementStart)
	if !ok {
		return PlacementRef{}, fmt.Errorf("placement ID %q: no %q before the start slot", id, string(migPlacementStart))
	}
	parent, profile, ok := cutLast(head, migPlacementSeparator)
	if !ok {
		return PlacementRef{}, fmt.Errorf("placement ID %q: no %q between the card UUID and the profile", id, string(migPlacementSeparator))
	}
	if err := checkUUID(parent); err != nil || strings.ContainsAny(parent, placementMarks) {
		return PlacementRef{}, fmt.Errorf("placement ID %q: parent %q is not a card UUID", id, parent)
	}
	if !ValidMIGProfile(profile) || migComputePrefix.MatchString(profile) {
		return PlacementRef{}, fmt.Errorf("placement ID %q: profile %q is not a GPU instance profile (like 1g.10gb, 3g.40gb, 1g.10gb+me)", id, profile)
	}
	k, err := strconv.Atoi(start)
	if err != nil || k < 0 || k >= maxMIGSlices || strconv.Itoa(k) != start {
		return PlacementRef{}, fmt.Errorf("placement ID %q: start %q is not a slot in 0..%d", id, start, maxMIGSlices-1)
	}
	return PlacementRef{Parent: parent, Profile: profile, Start: k}, nil
}

func cutLast(s string, sep rune) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, byte(sep))
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// String is the placement ID.
func (r PlacementRef) String() string { return MIGPlacementID(r.Parent, r.Profile, r.Start) }
