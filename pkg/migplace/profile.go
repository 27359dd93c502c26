package migplace

import (
	"fmt"
	"strconv"
	"strings"
)

// ProfileName is a MIG profile name taken apart: [<C>c.]<G>g.<GB>gb<Attr>, as nvidia-smi names
// MIG devices (MIG user guide, "MIG Device Names": 3g.40gb; 1c.3g.40gb for a compute instance of
// one slice in a 3g.40gb GPU instance; 1g.10gb+me with media extensions).
type ProfileName struct {
	// C is the compute instance's slices; equal to G when the name has no <c>c. prefix.
	C int
	// G is the GPU instance's compute slices, GB its memory in GB as the name says it.
	G, GB int
	// Attr is what follows "gb" ("+me", "+me.all", "-me", "+gfx"), "" when nothing.
	Attr string
}

// GPUInstance is the GPU instance profile's name (no compute instance prefix): 3g.40gb for
// 1c.3g.40gb.
func (p ProfileName) GPUInstance() string { return fmt.Sprintf("%dg.%dgb%s", p.G, p.GB, p.Attr) }

// String is the name ParseProfile read.
func (p ProfileName) String() string {
	if p.C != p.G {
		return fmt.Sprintf("%dc.%s", p.C, p.GPUInstance())
	}
	return p.GPUInstance()
}

// ParseProfile reads a MIG profile name. Numbers are 1 to 99 (GB up to 9999) without leading
// zeros; C is below G when given; the attribute is up to four parts, each '+' or '-' then a lower
// case word of up to 8 letters and digits, optionally '.' and another (+me, +me.all, -me, +gfx).
func ParseProfile(s string) (ProfileName, error) {
	bad := func(why string) (ProfileName, error) {
		return ProfileName{}, fmt.Errorf("%q is not a MIG profile ([<c>c.]<g>g.<mem>gb, as 3g.40gb, 1c.3g.40gb, 1g.10gb+me): %s", s, why)
	}
	if len(s) > 64 {
		return bad("too long")
	}
	rest := s
	var out ProfileName
	// number reads digits up to the unit suffix.
	number := func(unit string, maxDigits int) (int, bool) {
		i := strings.Index(rest, unit)
		if i < 1 || i > maxDigits || rest[0] == '0' {
			return 0, false
		}
		n, err := strconv.Atoi(rest[:i])
		if err != nil || n < 1 || strconv.Itoa(n) != rest[:i] {
			return 0, false
		}
		rest = rest[i+len(unit):]
		return n, true
	}
	// The optional <c>c. prefix: digits then "c.".
	if i := strings.IndexByte(rest, 'c'); i > 0 && i <= 2 && strings.HasPrefix(rest[i:], "c.") && allDigits(rest[:i]) {
		c, ok := number("c.", 2)
		if !ok {
			return bad("the compute instance prefix is not <1-99>c.")
		}
		out.C = c
	}
	g, ok := number("g.", 2)
	if !ok {
		return bad("no <1-99>g. for the GPU instance's compute slices")
	}
	out.G = g
	gb, ok := number("gb", 4)
	if !ok {
		return bad("no <1-9999>gb for the memory")
	}
	out.GB = gb
	switch {
	case out.C == 0:
		out.C = out.G
	case out.C >= out.G:
		return bad(fmt.Sprintf("a compute instance of %d slices in a GPU instance of %d", out.C, out.G))
	}
	if err := checkAttr(rest); err != nil {
		return bad(err.Error())
	}
	out.Attr = rest
	return out, nil
}

func allDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// checkAttr checks the attribute part: up to four of [+-]word[.word].
func checkAttr(a string) error {
	for n := 0; a != ""; n++ {
		if n == 4 {
			return fmt.Errorf("more than 4 attributes")
		}
		if a[0] != '+' && a[0] != '-' {
			return fmt.Errorf("attribute %q does not start with + or -", a)
		}
		a = a[1:]
		end := strings.IndexAny(a, "+-")
		if end < 0 {
			end = len(a)
		}
		word, more := a[:end], a[end:]
		first, second, dotted := strings.Cut(word, ".")
		if !attrWord(first) || (dotted && !attrWord(second)) {
			return fmt.Errorf("attribute %q is not a lower case word (and .word)", word)
		}
		a = more
	}
	return nil
}

func attrWord(w string) bool {
	if w == "" || len(w) > 8 || w[0] < 'a' || w[0] > 'z' {
		return false
	}
	for i := 1; i < len(w); i++ {
		if (w[i] < 'a' || w[i] > 'z') && (w[i] < '0' || w[i] > '9') {
			return false
		}
	}
	return true
}
