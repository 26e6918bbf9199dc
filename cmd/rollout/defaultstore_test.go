package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUnwritableDefaultStoreNamesStoreFlag: with neither --store nor
// $ROLLOUT_STORE, and a cache directory that cannot be written (as in a
// container with a read-only root), submit fails naming --store and
// $ROLLOUT_STORE and the directory it tried, and sends nothing.
func TestUnwritableDefaultStoreNamesStoreFlag(t *testing.T) {
	// A cache directory below a plain file cannot be made, even by root.
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	t.Setenv("XDG_CACHE_HOME", filepath.Join(blocker, "cache"))
	t.Setenv("HOME", blocker)
	t.Setenv(storeEnv, "")

	path := writeRun(t, 3, 2, "")
	fake := newFakeCoord()
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path)
	require.NotEqual(t, exitOK, r.code)
	require.Contains(t, r.stderr, "no --store given (nor $ROLLOUT_STORE) and the default store cannot be written")
	require.Contains(t, r.stderr, filepath.Join(blocker, "cache", "rollout", "store"))
	require.Contains(t, r.stderr, "give --store")
	require.Empty(t, fake.Submits, "nothing was submitted")

	// The same with --store given works.
	r = runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path, "--store", "file://"+filepath.ToSlash(t.TempDir()))
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NotEmpty(t, fake.Submits)
}

// TestCheckDefaultStore: a writable directory passes and is left without
// the probe file; one that cannot be made fails with errNoDefaultStore.
func TestCheckDefaultStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rollout", "store")
	require.NoError(t, checkDefaultStore(dir))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	require.ErrorIs(t, checkDefaultStore(filepath.Join(blocker, "store")), errNoDefaultStore)
}
