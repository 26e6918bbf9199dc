package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
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

// shortReader returns at most max bytes of any range (a reader that does
// not keep ReadRange's exact-length contract).
type shortReader struct {
	memReader
	max int64
}

func (s *shortReader) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	b, err := s.memReader.ReadRange(ctx, key, off, min(n, s.max))
	if err != nil && n > s.max {
		return s.memReader.obj[min(off, int64(len(s.memReader.obj))):min(off+s.max, int64(len(s.memReader.obj)))], nil
	}
	return b, err
}

// chunkOf returns a range chunk of lines and its lines part's length.
func chunkOf(lines ...string) ([]byte, uint64) {
	var c store.RangeChunk
	for _, l := range lines {
		c.Add([]byte(l))
	}
	return c.Bytes(), uint64(c.DataLen())
}

// TestReadChunkLinesShortReader: a reader that returns fewer bytes than
// asked for (an object that changed under a lax store) is ErrShortObject
// naming the chunk, never a panic.
func TestReadChunkLinesShortReader(t *testing.T) {
	b, dataLen := chunkOf(`{"p":"a"}`, `{"p":"bb"}`, `{"p":"ccc"}`)
	for _, max := range []int64{0, 3, 8, 16, 20} {
		_, err := store.ReadChunkLines(context.Background(), &shortReader{memReader{obj: b}, max}, "in/k", dataLen, 0, 3)
		require.ErrorIs(t, err, store.ErrShortObject, "max %d", max)
		require.ErrorContains(t, err, "in/k")
	}
}

// TestCheckRangeChunk: the chunk as written passes (with and without its
// hash) and counts its lines; a chunk whose bytes changed is refused with
// the error that says how, naming the chunk: other lines of the same
// length (hash), a line index that does not match the lines (index), a
// truncated object (short), a wrong lines length (index or short).
func TestCheckRangeChunk(t *testing.T) {
	ctx := context.Background()
	b, dataLen := chunkOf(`{"p":"a"}`, ``, `{"p":"ccc"}`)
	sum := store.Hash(b)
	n, err := store.CheckRangeChunk(ctx, &memReader{obj: b}, "in/k", dataLen, &sum)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	n, err = store.CheckRangeChunk(ctx, &memReader{obj: b}, "in/k", dataLen, nil)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)

	sameLen, _ := chunkOf(`{"p":"b"}`, ``, `{"p":"ccc"}`)
	longer, _ := chunkOf(`{"p":"a"}`, ``, `{"p":"cccc"}`)
	badIndex := bytes.Clone(b)
	badIndex[len(b)-9] ^= 1 // off[2]
	for name, tc := range map[string]struct {
		obj     []byte
		dataLen uint64
		want    error
		says    string
	}{
		"same length, other content": {sameLen, dataLen, store.ErrHashMismatch, "not the chunk recorded"},
		"longer line":                {longer, dataLen, store.ErrBadRangeObject, "does not end in a newline"},
		"bad index":                  {badIndex, dataLen, store.ErrBadRangeObject, "line 2 starts"},
		"truncated":                  {b[:len(b)-1], dataLen, store.ErrShortObject, ""},
		"lines only":                 {b[:dataLen], dataLen, store.ErrShortObject, ""},
		"wrong dataLen":              {b, dataLen - 1, store.ErrBadRangeObject, ""},
		"zero dataLen":               {b, 0, store.ErrBadRangeObject, ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := store.CheckRangeChunk(ctx, &memReader{obj: tc.obj}, "in/k", tc.dataLen, &sum)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, "in/k")
			require.ErrorContains(t, err, tc.says)
		})
	}
}

func TestKeySum(t *testing.T) {
	sum := store.Hash([]byte("x"))
	key := store.InputPrefix("r") + fmt.Sprintf("%x", sum)
	got, ok := store.KeySum(key)
	require.True(t, ok)
	require.Equal(t, sum, got)
	for _, k := range []string{"", "in/abc", key[:len(key)-1], strings.ToUpper(key), key + "/x", key[:len(key)-1] + "g"} {
		_, ok := store.KeySum(k)
		require.False(t, ok, k)
	}
}

// FuzzReadChunkLines: any object, any reader behaviour (exact or short)
// and any lines asked for give lines or an error of the range-object or
// short-object kind, never a panic; a chunk built by RangeChunk reads back.
func FuzzReadChunkLines(f *testing.F) {
	b, dataLen := chunkOf(`{"p":"a"}`, ``, `{"p":"ccc"}`)
	f.Add(b, dataLen, uint64(0), uint64(3), int64(1<<20))
	f.Add(b, dataLen, uint64(1), uint64(2), int64(5))
	f.Add([]byte("\n\x00"), uint64(1), uint64(0), uint64(1), int64(1<<20))
	f.Fuzz(func(t *testing.T, obj []byte, dataLen, first, n uint64, max int64) {
		if max <= 0 {
			max = 1
		}
		lines, err := store.ReadChunkLines(context.Background(), &shortReader{memReader{obj: obj}, max}, "k", dataLen, first, n)
		if err != nil {
			require.True(t, errors.Is(err, store.ErrBadRangeObject) || errors.Is(err, store.ErrShortObject), "%v", err)
			return
		}
		require.Len(t, lines, int(n))
		for _, l := range lines {
			require.NotContains(t, string(l), "\n")
		}
	})
}

// FuzzCheckRangeChunk: any object passes or fails with a range-object,
// short-object or hash error, never a panic; one that passes with its own
// hash reads back every line it counts.
func FuzzCheckRangeChunk(f *testing.F) {
	b, dataLen := chunkOf(`{"p":"a"}`, ``, `{"p":"ccc"}`)
	f.Add(b, dataLen)
	f.Add(b[:len(b)-3], dataLen)
	f.Add([]byte("\n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"), uint64(1))
	f.Fuzz(func(t *testing.T, obj []byte, dataLen uint64) {
		ctx := context.Background()
		sum := store.Hash(obj)
		n, err := store.CheckRangeChunk(ctx, &memReader{obj: obj}, "k", dataLen, &sum)
		if err != nil {
			require.True(t, errors.Is(err, store.ErrBadRangeObject) || errors.Is(err, store.ErrShortObject) || errors.Is(err, store.ErrHashMismatch), "%v", err)
			return
		}
		lines, err := store.ReadChunkLines(ctx, &memReader{obj: obj}, "k", dataLen, 0, n)
		require.NoError(t, err)
		var c store.RangeChunk
		for _, l := range lines {
			c.Add(l)
		}
		require.Equal(t, obj, c.Bytes(), "a chunk that passes is one RangeChunk builds")
		loaded, err := store.LoadRangeChunk(ctx, &memReader{obj: obj}, "k", dataLen, &sum)
		require.NoError(t, err)
		require.EqualValues(t, n, loaded.Lines())
		for k, l := range lines {
			got, err := loaded.Line(uint64(k))
			require.NoError(t, err)
			require.Equal(t, l, got, "line %d", k)
		}
		_, err = loaded.Line(n)
		require.ErrorIs(t, err, store.ErrBadRangeObject)
	})
}

// TestDecodeRangeResultsHashed: an object whose whole blake3 was checked
// decodes to the same results without hashing each one, and the table's
// checks still hold; only a result whose own blake3 is wrong (bytes the
// whole hash covers) tells the two decoders apart.
func TestDecodeRangeResultsHashed(t *testing.T) {
	rs := []store.RangeResult{{Index: 1, SampleID: [32]byte{7}, Result: []byte(`{"completion":"x"}`)}, {Index: 9, Result: []byte("yz")}}
	b, err := store.EncodeRangeResults(rs)
	require.NoError(t, err)
	got, err := store.DecodeRangeResultsHashed(b)
	require.NoError(t, err)
	require.Equal(t, rs, got)

	bad := bytes.Clone(b)
	bad[len(bad)-12-1] ^= 1 // the last record's result blake3
	_, err = store.DecodeRangeResults(bad)
	require.ErrorIs(t, err, store.ErrBadRangeObject)
	got, err = store.DecodeRangeResultsHashed(bad)
	require.NoError(t, err)
	require.Equal(t, rs, got)

	for _, junk := range [][]byte{[]byte("RRS1"), b[:len(b)-1], append(bytes.Repeat([]byte{0}, 20), b[len(b)-12:]...)} {
		_, err := store.DecodeRangeResultsHashed(junk)
		require.ErrorIs(t, err, store.ErrBadRangeObject, "%q", junk)
	}
}

// TestRangeChunkTake: Take gives Bytes' bytes and empties the chunk; the
// next chunk built in it is whole and does not touch the bytes taken.
func TestRangeChunkTake(t *testing.T) {
	var a, b store.RangeChunk
	for i := range 50 {
		l := []byte(fmt.Sprintf(`{"prompt":"line %d"}`, i))
		a.Add(l)
		b.Add(l)
	}
	want := a.Bytes()
	got := b.Take()
	require.Equal(t, want, got)
	require.Zero(t, b.Lines())
	require.Zero(t, b.DataLen())
	kept := bytes.Clone(got)
	b.Add([]byte(`{"prompt":"next"}`))
	var c store.RangeChunk
	c.Add([]byte(`{"prompt":"next"}`))
	require.Equal(t, c.Bytes(), b.Take())
	require.Equal(t, kept, got, "the bytes taken are the caller's")
}
