package worker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store"
)

// chunkStore serves range chunks from memory, counting reads by key.
type chunkStore struct {
	mu    sync.Mutex
	objs  map[string][]byte
	reads map[string]int
}

func (s *chunkStore) ReadRange(_ context.Context, key string, off, n int64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads[key]++
	b, ok := s.objs[key]
	if !ok {
		return nil, fmt.Errorf("%w: %q", store.ErrNotFound, key)
	}
	if off+n > int64(len(b)) {
		return nil, fmt.Errorf("%w: %q", store.ErrShortObject, key)
	}
	return append([]byte(nil), b[off:off+n]...), nil
}

func (s *chunkStore) PutContent(context.Context, string, []byte) (string, store.Sum, bool, error) {
	panic("not used")
}

// TestChunkCacheBound: checked chunks are loaded once and served from
// memory; past the byte budget the least recently used leave (and are read
// again when asked for), the one just loaded never; a changed chunk fails
// as missing (ErrInputMissing) and does not stay cached; a line past the
// chunk's last fails the same way.
func TestChunkCacheBound(t *testing.T) {
	ctx := context.Background()
	cs := &chunkStore{objs: map[string][]byte{}, reads: map[string]int{}}
	refs := make([]*rolloutv1.DataRef, 3)
	for i := range refs {
		var c store.RangeChunk
		for k := range 10 {
			c.Add(fmt.Appendf(nil, `{"prompt":"chunk %d line %d %s"}`, i, k, strings.Repeat("x", 80)))
		}
		b := c.Bytes()
		sum := store.Hash(b)
		key := fmt.Sprintf("in/%x", sum)
		cs.objs[key] = b
		refs[i] = &rolloutv1.DataRef{Object: key, Length: uint64(c.DataLen())}
	}
	size := len(cs.objs[refs[0].Object])
	s := &stores{open: func(context.Context, string) (ObjectStore, error) { return cs, nil }}
	s.chunks.budget = 2*size + size/2 // two chunks fit, not three
	line := func(i int, k uint64) string {
		t.Helper()
		l := s.chunk(ctx, "mem://", refs[i], nil)
		<-l.done
		require.NoError(t, l.err)
		b, err := l.chunk.Line(k)
		require.NoError(t, err)
		return string(b)
	}
	require.Contains(t, line(0, 3), "chunk 0 line 3")
	require.Contains(t, line(0, 9), "chunk 0 line 9")
	require.Contains(t, line(1, 0), "chunk 1 line 0")
	require.Equal(t, 2, cs.reads[refs[0].Object], "chunk 0 read once (lines, index)")
	require.Contains(t, line(0, 1), "chunk 0 line 1") // chunk 0 is now the most recently used
	require.Contains(t, line(2, 0), "chunk 2 line 0") // chunk 1 leaves
	require.Equal(t, 2, s.chunks.cached())
	require.Contains(t, line(0, 2), "chunk 0 line 2")
	require.Equal(t, 2, cs.reads[refs[0].Object], "chunk 0 stayed")
	require.Contains(t, line(1, 2), "chunk 1 line 2")
	require.Equal(t, 4, cs.reads[refs[1].Object], "chunk 1 was read again")

	cs.mu.Lock()
	bad := append([]byte(nil), cs.objs[refs[2].Object]...)
	bad[0] ^= 1
	cs.objs["in/changed"] = bad
	cs.mu.Unlock()
	good := store.Hash(cs.objs[refs[2].Object])
	changed := &rolloutv1.DataRef{Object: "in/changed", Length: refs[2].Length, Blake3: good[:]}
	l := s.chunk(ctx, "mem://", changed, nil)
	<-l.done
	require.ErrorIs(t, l.err, ErrInputMissing)
	require.ErrorIs(t, l.err, store.ErrHashMismatch)
	require.NotSame(t, l, s.chunk(ctx, "mem://", changed, nil), "a failed load is not kept")

	l = s.chunk(ctx, "mem://", refs[2], nil)
	<-l.done
	_, err := l.chunk.Line(10)
	require.ErrorIs(t, err, store.ErrBadRangeObject)
}
