package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Deleting a run's objects (DeletePrefix, Delete) leaves no directory it
// emptied, up to and not including the store's root; a directory that
// still holds another object stays, and so does the root.
func TestDeleteLeavesNoEmptyDirectories(t *testing.T) {
	ctx := context.Background()
	st, dir := openFile(t)
	a := "clusters/0123456789abcdef0123456789abcdef/runs/r/00000000000000000000000000000001/"
	b := "clusters/0123456789abcdef0123456789abcdef/runs/r/00000000000000000000000000000002/"
	for _, k := range []string{a + "inputs/c1", a + "results/x", b + "inputs/c1", "runs/old/results/y"} {
		require.NoError(t, st.Put(ctx, k, []byte("x")))
	}
	n, err := st.DeletePrefix(ctx, a)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = os.Stat(filepath.Join(dir, filepath.FromSlash(a)))
	require.ErrorIs(t, err, os.ErrNotExist, "the incarnation's directory is gone")
	fi, err := os.Stat(filepath.Join(dir, "clusters/0123456789abcdef0123456789abcdef/runs/r"))
	require.NoError(t, err, "the run name's directory still holds the other incarnation")
	require.True(t, fi.IsDir())

	require.NoError(t, st.Delete(ctx, b+"inputs/c1"))
	require.NoError(t, st.Delete(ctx, "runs/old/results/y"))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "every emptied directory is removed")
	_, err = os.Stat(dir)
	require.NoError(t, err, "the root stays")

	// A write into a directory a delete removed makes it again.
	require.NoError(t, st.Put(ctx, a+"results/z", []byte("z")))
	b2, err := st.ReadRange(ctx, a+"results/z", 0, 1)
	require.NoError(t, err)
	require.Equal(t, "z", string(b2))
}
