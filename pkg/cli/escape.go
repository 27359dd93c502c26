package cli

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// cell is s as a table shows it: unchanged when every character prints as itself, else quoted as Go
// quotes a string (\x1b, \a, \r, \u202e, invalid bytes as \xff). Table cells come from annotations,
// node inventories and pod manifests that another account wrote: a control character there (ESC
// starting an escape sequence, an OSC 8 link, a CR that rewrites the line), a bidirectional override
// or a tab (the tables' column separator) must reach the terminal as text, not act on it.
func cell(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return s
	}
	return strconv.Quote(s)
}
