package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/store"
)

// TestLoadRangeChunk: a loaded chunk serves every line it checked,
// refuses a line past its last, and fails as CheckRangeChunk does.
func TestLoadRangeChunk(t *testing.T) {
	ctx := context.Background()
	b, dataLen := chunkOf(`{"p":"a"}`, ``, `{"p":"ccc"}`)
	sum := store.Hash(b)
	c, err := store.LoadRangeChunk(ctx, &memReader{obj: b}, "in/k", dataLen, &sum)
	require.NoError(t, err)
	require.Equal(t, 3, c.Lines())
	require.Equal(t, len(b), c.Size())
	for k, want := range []string{`{"p":"a"}`, ``, `{"p":"ccc"}`} {
		got, err := c.Line(uint64(k))
		require.NoError(t, err)
		require.Equal(t, want, string(got))
	}
	_, err = c.Line(3)
	require.ErrorIs(t, err, store.ErrBadRangeObject)
	require.ErrorContains(t, err, "line 3")

	other, _ := chunkOf(`{"p":"b"}`, ``, `{"p":"ccc"}`)
	_, err = store.LoadRangeChunk(ctx, &memReader{obj: other}, "in/k", dataLen, &sum)
	require.ErrorIs(t, err, store.ErrHashMismatch)
	require.ErrorContains(t, err, "in/k")
}
