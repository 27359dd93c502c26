package annotations

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Selector is what a pod's annotations say about the cards it may get and how to place it.
// The zero value accepts every card and uses the scheduler's default policies.
type Selector struct {
	// UseTypes: a card's model must contain one of these (lower-cased) substrings, when not empty.
	UseTypes []string
	// NoUseTypes: a card's model must contain none of these (lower-cased) substrings.
	NoUseTypes []string
	// UseUUIDs: a card's UUID must equal one of these, when not empty.
	UseUUIDs []string
	// NoUseUUIDs: a card's UUID must equal none of these.
	NoUseUUIDs []string
	// NUMABind requires all cards of one container on one NUMA node.
	NUMABind bool
	// Link is the GPULink requirement: LinkNVLink, or "" for none.
	Link string
	// NodePolicy and GPUPolicy override the scheduler's defaults when not empty.
	NodePolicy Policy
	GPUPolicy  Policy
}

// Mismatch is why a Selector refuses a card. MatchOK means it accepts it.
type Mismatch int

const (
	// MatchOK: the selector accepts the card.
	MatchOK Mismatch = iota
	// MismatchUseType: the model contains no entry of use-gputype.
	MismatchUseType
	// MismatchNoUseType: the model contains an entry of nouse-gputype.
	MismatchNoUseType
	// MismatchUseUUID: the UUID is not in use-gpuuuid.
	MismatchUseUUID
	// MismatchNoUseUUID: the UUID is in nouse-gpuuuid.
	MismatchNoUseUUID
)

// Key returns the annotation key behind a mismatch ("" for MatchOK).
func (m Mismatch) Key() string {
	switch m {
	case MismatchUseType:
		return UseGPUType
	case MismatchNoUseType:
		return NoUseGPUType
	case MismatchUseUUID:
		return UseGPUUUID
	case MismatchNoUseUUID:
		return NoUseGPUUUID
	}
	return ""
}

// ParseSelector reads a pod's selector annotations. Missing keys mean "no constraint". Every problem
// found is reported, each naming its key and value.
func ParseSelector(ann map[string]string) (Selector, error) {
	var s Selector
	var errs []error
	// A value holding a control character or invalid UTF-8 is refused whole, before anything parses
	// it: selectors name card models, UUIDs and policies, printable text every tool can show.
	unprintable := map[string]bool{}
	for _, key := range UserKeys {
		if v, ok := ann[key]; ok {
			if err := checkPrintable(key, v); err != nil {
				errs = append(errs, err)
				unprintable[key] = true
			}
		}
	}
	present := func(key string) (string, bool) {
		v, ok := ann[key]
		return v, ok && !unprintable[key]
	}
	list := func(key string, lower bool) []string {
		v, ok := present(key)
		if !ok {
			return nil
		}
		entries, err := parseList(key, v, lower)
		if err != nil {
			errs = append(errs, err)
		}
		return entries
	}
	s.UseTypes = list(UseGPUType, true)
	s.NoUseTypes = list(NoUseGPUType, true)
	s.UseUUIDs = list(UseGPUUUID, false)
	s.NoUseUUIDs = list(NoUseGPUUUID, false)
	errs = append(errs, overlap(NoUseGPUUUID, s.NoUseUUIDs, UseGPUUUID, s.UseUUIDs)...)
	errs = append(errs, overlap(NoUseGPUType, s.NoUseTypes, UseGPUType, s.UseTypes)...)
	if v, ok := present(NUMABind); ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true":
			s.NUMABind = true
		case "false", "":
		default:
			errs = append(errs, errorf(NUMABind, "%q is not true or false", v))
		}
	}
	if v, ok := present(GPULink); ok {
		l, err := parseLink(v)
		if err != nil {
			errs = append(errs, err)
		}
		s.Link = l
	}
	if v, ok := present(NodePolicy); ok {
		p, err := ParsePolicy(NodePolicy, v)
		errs = append(errs, err)
		s.NodePolicy = p
	}
	if v, ok := present(GPUPolicy); ok {
		p, err := ParsePolicy(GPUPolicy, v)
		errs = append(errs, err)
		s.GPUPolicy = p
	}
	return s, errors.Join(errs...)
}

// IsControl reports whether r is a control character: C0 (U+0000 to U+001F: ESC starts a terminal's
// escape sequences, BEL rings, CR and LF rewrite lines), DEL (U+007F) or C1 (U+0080 to U+009F, CSI
// and OSC among them).
func IsControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }

// checkPrintable refuses a value of key that is not valid UTF-8 or holds a control character, naming
// the first one and its 1-based position (in characters).
func checkPrintable(key, value string) error {
	if !utf8.ValidString(value) {
		return errorf(key, "%s is not valid UTF-8 text", clip(value))
	}
	pos := 0
	for _, r := range value {
		pos++
		if IsControl(r) {
			return errorf(key, "control character %U at position %d in %s: a selector holds printable text only", r, pos, clip(value))
		}
	}
	return nil
}

// MaxListEntries bounds the comma lists of use/nouse-gputype and use/nouse-gpuuuid: the scheduler
// checks every card against them, and no sensible selector names more cards than this.
const MaxListEntries = 4096

// parseList splits a comma list, trimming spaces around entries. An empty entry is an error that
// gives its 1-based position; repeated entries are kept once.
func parseList(key, value string, lower bool) ([]string, error) {
	parts := strings.Split(value, ",")
	if len(parts) > MaxListEntries {
		return nil, errorf(key, "%d entries, more than %d", len(parts), MaxListEntries)
	}
	out := make([]string, 0, len(parts))
	// A map, not a scan of out, so that admission stays linear in the length of the value.
	seen := make(map[string]bool, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, errorf(key, "empty entry at position %d in %s", i+1, clip(value))
		}
		if lower {
			p = strings.ToLower(p)
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// overlap reports each entry of the nouse list that is also in the use list, naming nouseKey.
func overlap(nouseKey string, nouse []string, useKey string, use []string) []error {
	if len(nouse) == 0 || len(use) == 0 {
		return nil
	}
	inUse := make(map[string]bool, len(use))
	for _, u := range use {
		inUse[u] = true
	}
	// Name the first few; a pasted list of thousands must not become thousands of lines.
	const shown = 5
	var errs []error
	more := 0
	for _, n := range nouse {
		switch {
		case !inUse[n]:
		case len(errs) < shown:
			errs = append(errs, errorf(nouseKey, "%s is also in %s", n, useKey))
		default:
			more++
		}
	}
	if more > 0 {
		errs = append(errs, errorf(nouseKey, "%d more entries are also in %s", more, useKey))
	}
	return errs
}

// Check says whether the selector accepts a card of this model and UUID, and if not, which rule
// refuses it. Rules are checked in the order use-gputype, nouse-gputype, use-gpuuuid, nouse-gpuuuid.
func (s *Selector) Check(model, uuid string) Mismatch {
	if len(s.UseTypes) == 0 && len(s.NoUseTypes) == 0 {
		return s.CheckLower("", uuid)
	}
	return s.CheckLower(strings.ToLower(model), uuid)
}

// CheckLower is Check for a model already lower-cased (strings.ToLower), so a caller that checks
// the same cards many times folds each model once instead of on every check.
func (s *Selector) CheckLower(modelLower, uuid string) Mismatch {
	if len(s.UseTypes) > 0 || len(s.NoUseTypes) > 0 {
		m := modelLower
		if len(s.UseTypes) > 0 && !containsAny(m, s.UseTypes) {
			return MismatchUseType
		}
		if containsAny(m, s.NoUseTypes) {
			return MismatchNoUseType
		}
	}
	if len(s.UseUUIDs) > 0 && !slices.Contains(s.UseUUIDs, uuid) {
		return MismatchUseUUID
	}
	if slices.Contains(s.NoUseUUIDs, uuid) {
		return MismatchNoUseUUID
	}
	return MatchOK
}

// Accepts reports whether the selector accepts the card.
func (s *Selector) Accepts(g *GPU) bool { return s.Check(g.Model, g.UUID) == MatchOK }

// CheckDeviceLower is CheckLower for a device that may be a MIG instance: parent is the UUID of the
// card it is on ("" for a whole card), modelLower the parent's model. The type rules read the
// parent's model; use-gpuuuid accepts the device when it names the device or its parent (naming a
// parent allows all its instances), and nouse-gpuuuid refuses it when it names either (naming a
// parent excludes all its instances).
func (s *Selector) CheckDeviceLower(modelLower, uuid, parent string) Mismatch {
	if parent == "" {
		return s.CheckLower(modelLower, uuid)
	}
	if m := s.CheckLower(modelLower, uuid); m != MismatchUseUUID && m != MatchOK {
		return m
	}
	if len(s.UseUUIDs) > 0 && !slices.Contains(s.UseUUIDs, uuid) && !slices.Contains(s.UseUUIDs, parent) {
		return MismatchUseUUID
	}
	if slices.Contains(s.NoUseUUIDs, uuid) || slices.Contains(s.NoUseUUIDs, parent) {
		return MismatchNoUseUUID
	}
	return MatchOK
}

// CheckDevice is CheckDeviceLower for a model in any case.
func (s *Selector) CheckDevice(model, uuid, parent string) Mismatch {
	if len(s.UseTypes) == 0 && len(s.NoUseTypes) == 0 {
		return s.CheckDeviceLower("", uuid, parent)
	}
	return s.CheckDeviceLower(strings.ToLower(model), uuid, parent)
}

// HasCardConstraint reports whether any type or UUID rule is set.
func (s *Selector) HasCardConstraint() bool {
	return len(s.UseTypes)+len(s.NoUseTypes)+len(s.UseUUIDs)+len(s.NoUseUUIDs) > 0
}

// String renders the card rules as a person would write them, e.g. `use-gputype=a100`.
func (s *Selector) String() string { return s.StringN(0) }

// StringN is String with each list cut to its first n entries and a count of the rest, e.g.
// `nouse-gpuuuid=GPU-a,GPU-b,GPU-c (+4093 more)`; n <= 0 shows every entry. Reasons repeated for
// thousands of nodes use it so that a long UUID list is not copied into each.
func (s *Selector) StringN(n int) string {
	var parts []string
	add := func(name string, v []string) {
		switch {
		case len(v) == 0:
		case n > 0 && len(v) > n:
			parts = append(parts, fmt.Sprintf("%s=%s (+%d more)", name, strings.Join(v[:n], ","), len(v)-n))
		default:
			parts = append(parts, fmt.Sprintf("%s=%s", name, strings.Join(v, ",")))
		}
	}
	add("use-gputype", s.UseTypes)
	add("nouse-gputype", s.NoUseTypes)
	add("use-gpuuuid", s.UseUUIDs)
	add("nouse-gpuuuid", s.NoUseUUIDs)
	if s.NUMABind {
		parts = append(parts, "numa-bind=true")
	}
	return strings.Join(parts, " ")
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
