package limits

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// CleanText returns s as text the ledger accepts (valid, printable UTF-8 of
// at most max bytes): invalid UTF-8 and non-printable characters become
// U+FFFD, runs of whitespace (newlines and tabs included) become one space,
// and the result is cut to at most max bytes on a character boundary,
// without leading or trailing space. It is idempotent:
// CleanText(CleanText(s, max), max) == CleanText(s, max), so a text cleaned
// by a client passes unchanged through a server that cleans it again. It is
// the one cleaner of free text such as failure and dead reasons (workers,
// the CLI and the API edges all call it), so a backend's multi-line error
// fails its item instead of being refused.
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
	// A cut may end on the space between two words.
	return strings.TrimRight(s[:cut], " ")
}

// CleanReason is CleanText bounded by MaxReasonBytes: a failure or dead
// reason as the ledger accepts it.
func CleanReason(s string) string { return CleanText(s, MaxReasonBytes) }
