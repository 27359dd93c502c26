package migplace

import (
	"testing"
)

func TestParseProfile(t *testing.T) {
	tests := []struct {
		in   string
		want ProfileName
		gi   string
	}{
		{"3g.40gb", ProfileName{C: 3, G: 3, GB: 40}, "3g.40gb"},
		{"1c.3g.40gb", ProfileName{C: 1, G: 3, GB: 40}, "3g.40gb"},
		{"1g.10gb+me", ProfileName{C: 1, G: 1, GB: 10, Attr: "+me"}, "1g.10gb+me"},
		{"1g.10gb+me.all", ProfileName{C: 1, G: 1, GB: 10, Attr: "+me.all"}, "1g.10gb+me.all"},
		{"2g.20gb-me", ProfileName{C: 2, G: 2, GB: 20, Attr: "-me"}, "2g.20gb-me"},
		{"7g.141gb", ProfileName{C: 7, G: 7, GB: 141}, "7g.141gb"},
		{"1g.5gb+gfx+me", ProfileName{C: 1, G: 1, GB: 5, Attr: "+gfx+me"}, "1g.5gb+gfx+me"},
	}
	for _, tt := range tests {
		got, err := ParseProfile(tt.in)
		if err != nil || got != tt.want || got.GPUInstance() != tt.gi || got.String() != tt.in {
			t.Errorf("ParseProfile(%q) = %+v (%s, %s), %v; want %+v (%s)", tt.in, got, got.GPUInstance(), got, err, tt.want, tt.gi)
		}
	}
	for _, bad := range []string{"", "3g", "3g.40", "03g.40gb", "3g.040gb", "0g.10gb", "3c.3g.40gb", "4c.3g.40gb",
		"1c3g.40gb", "3g.40gb+", "3g.40gb+ME", "3g.40gb me", "3g.40gb+a+b+c+d+e", "100g.10gb", "1g.10000gb",
		"1g.10gb+me.", "1g.10gb+toolongword", "x1g.10gb", "1g.10gbx"} {
		if got, err := ParseProfile(bad); err == nil {
			t.Errorf("ParseProfile(%q) = %+v, want an error", bad, got)
		}
	}
}

// FuzzParseProfile: ParseProfile never panics, and what it accepts prints back as it was read and
// reads again the same.
func FuzzParseProfile(f *testing.F) {
	for _, s := range []string{"3g.40gb", "1c.3g.40gb", "1g.10gb+me", "1g.10gb+me.all", "2g.20gb-me", "", "1c.", "9c.99g.9999gb+a.b-c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseProfile(s)
		if err != nil {
			return
		}
		if p.String() != s {
			t.Fatalf("ParseProfile(%q) prints back as %q", s, p.String())
		}
		again, err := ParseProfile(p.GPUInstance())
		if err != nil || again.G != p.G || again.GB != p.GB || again.C != p.G || again.Attr != p.Attr {
			t.Fatalf("GPU instance %q of %q reads as %+v, %v", p.GPUInstance(), s, again, err)
		}
		if p.C < 1 || p.C > p.G || p.G > 99 || p.GB > 9999 {
			t.Fatalf("ParseProfile(%q) = %+v out of range", s, p)
		}
	})
}
