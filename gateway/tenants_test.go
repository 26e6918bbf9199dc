package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKeyPriorities: a key's line may carry priority=N after its hash; a
// line without one (every file written before priorities) reads at
// DefaultPriority; a bad priority or an unknown field refuses the file,
// naming the line, the key and what is wrong.
func TestKeyPriorities(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys")
	plain, err := AddKey(path, "plain")
	require.NoError(t, err)
	urgent, err := AddKeyWith(path, "urgent", KeyOptions{Priority: 5})
	require.NoError(t, err)
	low, err := AddKeyWith(path, "low", KeyOptions{Priority: 1})
	require.NoError(t, err)
	for _, p := range []int{-1, 6, 100} {
		_, err = AddKeyWith(path, "nope", KeyOptions{Priority: p})
		require.ErrorIs(t, err, ErrKeyPriority, "priority %d", p)
	}
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "nope")
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 3)
	require.NotContains(t, lines[0], "priority", "a key at the default priority is written as before")
	require.True(t, strings.HasSuffix(lines[1], " priority=5"), lines[1])

	k, err := LoadKeys(path)
	require.NoError(t, err)
	for key, want := range map[string]Key{plain: {"plain", DefaultPriority}, urgent: {"urgent", 5}, low: {"low", 1}} {
		got, ok := k.Key(key)
		require.True(t, ok)
		require.Equal(t, want, got)
	}

	h := strings.Repeat("0", 64)
	for _, tc := range []struct {
		content string
		is      error
		want    string
	}{
		{"a:" + h + " priority=0\n", ErrKeyPriority, `:1: key "a": gateway: bad key priority: 0`},
		{"a:" + h + " priority=6\n", ErrKeyPriority, "1 (lowest) to 5 (highest)"},
		{"a:" + h + " priority=high\n", ErrKeyPriority, `"high" is not a whole number`},
		{"a:" + h + " weight=2\n", ErrKeyFile, `unknown field "weight"`},
		{"a:" + h + " priority\n", ErrKeyFile, `"priority" is not a FIELD=VALUE setting`},
		{"a:" + h + " priority=2 priority=3\n", ErrKeyFile, "priority is set twice"},
		{"a: \n", ErrKeyFile, `the hash of "a" is missing`},
	} {
		p := filepath.Join(dir, "bad")
		require.NoError(t, writeFile(p, tc.content))
		err := k.Load(p)
		require.ErrorIs(t, err, ErrKeyFile, tc.content)
		require.ErrorIs(t, err, tc.is, tc.content)
		require.Contains(t, err.Error(), tc.want)
		_, ok := k.Key(urgent)
		require.True(t, ok, "a bad file leaves the loaded keys as they were")
	}
	// Blank space around the settings is the file's, not an error.
	p := filepath.Join(dir, "spaced")
	require.NoError(t, writeFile(p, "a:"+h+"\t priority=4  \r\n"))
	require.NoError(t, k.Load(p))
}
