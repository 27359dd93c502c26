package cli

import (
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzDecodePod: a pod manifest from -f never panics the decoder; an error names the file, and a
// decoded pod always has a namespace (the flag's, else default).
func FuzzDecodePod(f *testing.F) {
	for _, s := range []string{
		"", "kind: Pod", "kind: Pod\nmetadata: {name: a}\n", "{\"kind\":\"Pod\",\"metadata\":{\"generateName\":\"g-\"}}",
		"kind: Deployment", "kind: [Pod]", "kind: Pod\nspec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: 1}}}]}",
		"kind: Pod\nspec: {containers: 3}", "- a\n- b", "kind: Pod\nbogus: 1",
	} {
		f.Add(s)
	}
	o := &Options{Namespace: "ml"}
	f.Fuzz(func(t *testing.T, s string) {
		pod, err := o.decodePod("pod.yaml", []byte(s))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "-f pod.yaml: ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if pod == nil || pod.Namespace == "" {
			t.Fatalf("decoded %v without a namespace", pod)
		}
	})
}

// FuzzCell: whatever a table cell is given, it prints no character a terminal acts on (nor a tab,
// the column separator); printable text is shown as it is, anything else quoted so that it reads back.
func FuzzCell(f *testing.F) {
	for _, s := range []string{"", "NVIDIA A40", "A40\x1b]8;;https://x\x07y", "a\rb", "\t", "\x7f", "\u009b2J", "\u202e", "\xff", "Ä™"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := cell(s)
		if !utf8.ValidString(got) || strings.ContainsFunc(got, func(r rune) bool { return !unicode.IsPrint(r) }) {
			t.Fatalf("cell(%q) = %q holds an unprintable character", s, got)
		}
		if got == s {
			return
		}
		if back, err := strconv.Unquote(got); err != nil || (utf8.ValidString(s) && back != s) {
			t.Fatalf("cell(%q) = %q, which does not read back (%q, %v)", s, got, back, err)
		}
	})
}
