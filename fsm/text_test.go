package fsm

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/limits"
)

// TestCleanTextAlwaysAccepted: whatever the input, the ledger accepts the
// cleaned text (limits.CleanText, whose own cases are in internal/limits).
func TestCleanTextAlwaysAccepted(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	alphabet := []string{"a", " ", "\n", "\t", "\x00", "\xff", "é", "😀", "\u200b", "\r\n", "\x7f"}
	for range 2000 {
		var b strings.Builder
		for range rng.Intn(40) {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		max := 1 + rng.Intn(20)
		got := limits.CleanText(b.String(), max)
		require.NoError(t, checkText("reason", got, max), "input %q", b.String())
	}
	for _, s := range []string{"", "ok", " lead", "a\n\tb", "\xff\x01", strings.Repeat("é ", 3000), strings.Repeat("ab ", 2000)} {
		require.NoError(t, checkText("reason", limits.CleanReason(s), limits.MaxReasonBytes), "%q", s)
	}
}
