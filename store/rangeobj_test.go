package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/store"
)

// memReader serves ReadRange from one object, counting reads.
type memReader struct {
	obj   []byte
	reads int
}

func (m *memReader) ReadRange(_ context.Context, _ string, off, n int64) ([]byte, error) {
	m.reads++
	if off < 0 || n < 0 || off+n > int64(len(m.obj)) {
		return nil, store.ErrShortObject
	}
	return m.obj[off : off+n], nil
}

func TestRangeChunkLines(t *testing.T) {
	var c store.RangeChunk
	lines := []string{`{"prompt":"a"}`, ``, `{"prompt":"ccc"}`, `{"prompt":"dd"}`}
	for _, l := range lines {
		c.Add([]byte(l))
	}
	b := c.Bytes()
	require.Equal(t, c.Size(), len(b))
	r := &memReader{obj: b}
	for first := range len(lines) {
		for n := 1; first+n <= len(lines); n++ {
			r.reads = 0
			got, err := store.ReadChunkLines(context.Background(), r, "k", uint64(c.DataLen()), uint64(first), uint64(n))
			require.NoError(t, err)
			require.Equal(t, 2, r.reads, "two ranged reads")
			for k := range got {
				require.Equal(t, lines[first+k], string(got[k]))
			}
		}
	}
	// Past the end: the store says short; a corrupt table is refused.
	_, err := store.ReadChunkLines(context.Background(), r, "k", uint64(c.DataLen()), 3, 2)
	require.ErrorIs(t, err, store.ErrShortObject)
	bad := bytes.Clone(b)
	bad[c.DataLen()+8+7] = 0xff
	_, err = store.ReadChunkLines(context.Background(), &memReader{obj: bad}, "k", uint64(c.DataLen()), 0, 3)
	require.ErrorIs(t, err, store.ErrBadRangeObject)
}

func TestRangeResultsRoundTrip(t *testing.T) {
	var rs []store.RangeResult
	for i := range 50 {
		r := store.RangeResult{Index: uint64(1000 + 2*i), Result: []byte(fmt.Sprintf(`{"completion":"%d"}`, i))}
		r.SampleID[0] = byte(i)
		rs = append(rs, r)
	}
	b, err := store.EncodeRangeResults(rs)
	require.NoError(t, err)
	got, err := store.DecodeRangeResults(b)
	require.NoError(t, err)
	require.Equal(t, rs, got)
	empty, err := store.EncodeRangeResults(nil)
	require.NoError(t, err)
	got, err = store.DecodeRangeResults(empty)
	require.NoError(t, err)
	require.Empty(t, got)

	_, err = store.EncodeRangeResults([]store.RangeResult{{Index: 2}, {Index: 2}})
	require.ErrorIs(t, err, store.ErrBadRangeObject)
	for name, bad := range map[string][]byte{
		"truncated":   b[:len(b)-1],
		"flipped":     append([]byte{b[0] ^ 1}, b[1:]...),
		"short table": b[len(b)-12:],
	} {
		_, err := store.DecodeRangeResults(bad)
		require.True(t, errors.Is(err, store.ErrBadRangeObject), "%s: %v", name, err)
	}
}

// FuzzDecodeRangeResults: any bytes decode without a panic; what decodes
// re-encodes to the same bytes.
func FuzzDecodeRangeResults(f *testing.F) {
	b, _ := store.EncodeRangeResults([]store.RangeResult{{Index: 1, Result: []byte("x")}, {Index: 9, Result: []byte("yz")}})
	f.Add(b)
	f.Add([]byte(store.RangeResultsMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := store.DecodeRangeResults(data)
		if err != nil {
			require.ErrorIs(t, err, store.ErrBadRangeObject)
			return
		}
		again, err := store.EncodeRangeResults(rs)
		require.NoError(t, err)
		require.Equal(t, data, again)
	})
}
