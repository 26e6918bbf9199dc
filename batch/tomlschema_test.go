package batch

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTOMLSchemaErrorsMatchItsKind: another front door's schema (as
// batch/train's) gets its own sentinel on every path, syntax, unknown
// key, type and value, and never the run config's.
func TestTOMLSchemaErrorsMatchItsKind(t *testing.T) {
	errOther := errors.New("other front door")
	s := TOMLSchema{
		Kind: errOther,
		KeyType: func(key string) string {
			return map[string]string{"t": "a table", "t.n": "an integer", "name": "a string"}[key]
		},
		UnknownKey:   "unknown key (the keys are [t] n)",
		UnknownTable: "unknown table or key (the tables are [t])",
	}
	var into struct {
		Name *string `toml:"name"`
		T    *struct {
			N *int64 `toml:"n"`
		} `toml:"t"`
	}
	for name, tc := range map[string]struct{ text, want string }{
		"syntax":        {"[t\n", "o.toml:1: TOML syntax"},
		"unknown key":   {"[t]\nn = 1\nm = 2\n", "o.toml:3: t.m: unknown key (the keys are [t] n)"},
		"unknown table": {"name = \"x\"\n[u]\n", "o.toml:2: u: unknown table or key (the tables are [t])"},
		"case":          {"[T]\nn = 1\n", `o.toml:1: T: unknown key (keys are case-sensitive: did you mean "t"?)`},
		"type":          {"[t]\nn = \"1\"\n", "o.toml:2: t.n: must be an integer, got a TOML string"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.Decode([]byte(tc.text), "o.toml", &into)
			require.ErrorIs(t, err, errOther)
			require.NotErrorIs(t, err, ErrInvalidRunConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}

	lines, err := s.Decode([]byte("name = \"x\"\n[t]\nn = 5\n"), "o.toml", &into)
	require.NoError(t, err)
	require.Equal(t, int64(5), *into.T.N)
	p := s.Problems("o.toml", lines)
	require.NoError(t, p.Err(), "no problem recorded")
	p.Bad("t.n", "%d is too many", 5)
	p.Missing("t", "m")
	p.Missing("v", "w")
	err = p.Err()
	require.ErrorIs(t, err, errOther)
	require.NotErrorIs(t, err, ErrInvalidRunConfig)
	require.EqualError(t, err, "o.toml:3: t.n: 5 is too many\n"+
		"o.toml:2: t.m: [t] has no m (required)\n"+
		"o.toml: v.w: [v] w is required")
}
