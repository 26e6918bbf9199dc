package fsm

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

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
		require.NoError(t, checkText("reason", got, 100))
	}
	// Cut on a character boundary.
	require.Equal(t, "ab", CleanText("abé", 3))
}

// TestCleanTextAlwaysAccepted: whatever the input, the ledger accepts the
// cleaned text.
func TestCleanTextAlwaysAccepted(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	alphabet := []string{"a", " ", "\n", "\t", "\x00", "\xff", "é", "😀", "\u200b", "\r\n", "\x7f"}
	for range 2000 {
		var b strings.Builder
		for range rng.Intn(40) {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		max := 1 + rng.Intn(20)
		got := CleanText(b.String(), max)
		require.NoError(t, checkText("reason", got, max), "input %q", b.String())
	}
}

// TestCleanTextIdempotent: text cleaned once is left alone by a second
// cleaning (a client's cleaned reason passes the server's unchanged), also
// when the cut falls on the space between two words.
func TestCleanTextIdempotent(t *testing.T) {
	require.Equal(t, "ab", CleanText("ab cd", 3))
	for _, s := range []string{"", "ok", " lead", "a\n\tb", "\xff\x01", strings.Repeat("é ", 3000), strings.Repeat("ab ", 2000)} {
		c := CleanReason(s)
		require.Equal(t, c, CleanReason(c), "%q", s)
		require.NoError(t, checkText("reason", c, MaxReasonBytes))
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
	}
}
