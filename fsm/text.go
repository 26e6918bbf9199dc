package fsm

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// CleanText returns s as text the ledger accepts (see checkText): invalid
// UTF-8 and non-printable characters become U+FFFD, runs of whitespace
// (newlines and tabs included) become one space, and the result is cut to at
// most max bytes on a character boundary. API edges apply it to free text
// such as failure reasons, so a backend's multi-line error fails its item
// instead of being refused.
func CleanText(s string, max int) string {
	s = strings.ToValidUTF8(s, string(utf8.RuneError))
	s = strings.Map(func(r rune) rune {
		switch {
		case unicode.IsSpace(r):
			return ' '
		case !unicode.IsPrint(r):
			return utf8.RuneError
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
