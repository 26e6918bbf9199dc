package limits

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// accepted is the ledger's rule for free text (fsm's checkText, whose own
// test checks CleanText against it): at most max bytes of valid, printable
// UTF-8.
func accepted(s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%d bytes, limit %d", len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("not valid UTF-8")
	}
	for i, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("non-printable %U at byte %d", r, i)
		}
	}
	return nil
}

func TestCleanText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain reason", "plain reason"},
		{"Traceback (most recent call last):\n  File \"x\"\n\tValueError", `Traceback (most recent call last): File "x" ValueError`},
		{"bad \xff byte", "bad \uFFFD byte"},
		{"bell\a", "bell\uFFFD"},
		{"  trimmed  ", "trimmed"},
	} {
		got := CleanText(tc.in, 100)
		require.Equal(t, tc.want, got)
		require.NoError(t, accepted(got, 100))
	}
	// Cut on a character boundary.
	require.Equal(t, "ab", CleanText("abé", 3))
}

// TestCleanTextIdempotent: text cleaned once is left alone by a second
// cleaning (a client's cleaned reason passes the server's unchanged), also
// when the cut falls on the space between two words.
func TestCleanTextIdempotent(t *testing.T) {
	require.Equal(t, "ab", CleanText("ab cd", 3))
	for _, s := range []string{"", "ok", " lead", "a\n\tb", "\xff\x01", strings.Repeat("é ", 3000), strings.Repeat("ab ", 2000)} {
		c := CleanReason(s)
		require.Equal(t, c, CleanReason(c), "%q", s)
		require.NoError(t, accepted(c, MaxReasonBytes))
	}
	rng := rand.New(rand.NewSource(11))
	for range 2000 {
		var b strings.Builder
		for range rng.Intn(40) {
			b.WriteString([]string{"a", " ", "\n", "é", "\xff", "\x00"}[rng.Intn(6)])
		}
		max := 1 + rng.Intn(20)
		c := CleanText(b.String(), max)
		require.Equal(t, c, CleanText(c, max), "input %q max %d", b.String(), max)
		require.NoError(t, accepted(c, max), "input %q max %d", b.String(), max)
	}
}
