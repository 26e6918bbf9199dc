package limits

import (
	"go/build"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDefaultValid(t *testing.T) {
	l := Default()
	require.NoError(t, l.Validate())
	require.Equal(t, DefaultMaxPayloadBytes, l.MaxPayloadBytes)
	require.Equal(t, MaxRunNameBytes, l.MaxRunNameBytes)
}

func TestLimitsValidateRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Limits)
		want string
	}{
		{"negative field", func(l *Limits) { l.MaxResultBytes = -1 }, "MaxResultBytes is -1"},
		{"id over the ledger's", func(l *Limits) { l.IDBytes = MaxIDBytes + 1 }, "IDBytes"},
		{"name over the ledger's", func(l *Limits) { l.MaxRunNameBytes = MaxRunNameBytes + 1 }, "MaxRunNameBytes"},
		{"message smaller than payload and result", func(l *Limits) { l.MaxResultBytes = l.MaxMessageBytes }, "one item's payload and result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Default()
			tc.edit(&l)
			err := l.Validate()
			require.ErrorIs(t, err, ErrInvalidLimits)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestStandardLibraryOnly: the package's contract is that every client can
// link it without the ledger, Raft or gRPC: it imports the standard library
// only.
func TestStandardLibraryOnly(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	require.NoError(t, err)
	for _, imp := range pkg.Imports {
		require.False(t, strings.Contains(strings.SplitN(imp, "/", 2)[0], "."), "internal/limits imports %s", imp)
	}
}
