package worker

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store"
)

// spanStore serves objects of a given size whose byte at offset o is
// byte(o), recording the ranges read.
type spanStore struct {
	size  map[string]int64
	reads []string
}

func (s *spanStore) ReadRange(_ context.Context, key string, off, n int64) ([]byte, error) {
	s.reads = append(s.reads, fmt.Sprintf("%s:%d+%d", key, off, n))
	if off+n > s.size[key] {
		return nil, fmt.Errorf("%w: %q", store.ErrShortObject, key)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(off + int64(i))
	}
	return b, nil
}

func (s *spanStore) PutContent(context.Context, string, []byte) (string, store.Sum, bool, error) {
	panic("not used")
}

// TestReadRefsCoalesces: references into one object are read as one span
// while it is at most twice the bytes referenced and 16 MiB; the rest as
// separate ranges; every reference gets exactly its bytes; a failed span
// fails only its references, naming the object.
func TestReadRefsCoalesces(t *testing.T) {
	ref := func(obj string, off, n uint64) *rolloutv1.DataRef {
		return &rolloutv1.DataRef{Object: obj, Offset: off, Length: n}
	}
	tests := []struct {
		name  string
		refs  []*rolloutv1.DataRef
		reads []string
	}{
		{"adjacent, out of order", []*rolloutv1.DataRef{ref("a", 20, 10), ref("a", 0, 10), ref("a", 10, 10)}, []string{"a:0+30"}},
		{"small gaps", []*rolloutv1.DataRef{ref("a", 0, 10), ref("a", 15, 10), ref("a", 30, 10)}, []string{"a:0+40"}},
		{"far apart", []*rolloutv1.DataRef{ref("a", 0, 10), ref("a", 1000, 10)}, []string{"a:0+10", "a:1000+10"}},
		{"two objects", []*rolloutv1.DataRef{ref("b", 0, 10), ref("a", 0, 10), ref("b", 10, 5)}, []string{"a:0+10", "b:0+15"}},
		{"over 16 MiB", []*rolloutv1.DataRef{ref("big", 0, 10<<20), ref("big", 10<<20, 10<<20)}, []string{"big:0+10485760", "big:10485760+10485760"}},
		{"overlapping", []*rolloutv1.DataRef{ref("a", 0, 10), ref("a", 5, 10)}, []string{"a:0+15"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &spanStore{size: map[string]int64{"a": 2000, "b": 100, "big": 32 << 20}}
			out, errs, n := readRefs(context.Background(), st, tt.refs)
			require.Equal(t, tt.reads, st.reads)
			require.Len(t, tt.reads, n)
			for i, r := range tt.refs {
				require.NoError(t, errs[i])
				require.Len(t, out[i], int(r.GetLength()))
				require.Equal(t, byte(r.GetOffset()), out[i][0])
				require.Equal(t, byte(r.GetOffset()+r.GetLength()-1), out[i][len(out[i])-1])
			}
		})
	}
	st := &spanStore{size: map[string]int64{"a": 15}}
	_, errs, _ := readRefs(context.Background(), st, []*rolloutv1.DataRef{ref("a", 0, 10), ref("a", 1000, 10)})
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], store.ErrShortObject)
	require.ErrorIs(t, errs[1], ErrData)
	require.ErrorContains(t, errs[1], `object "a"`)
}

func TestReadRefsRefusesHugeReferences(t *testing.T) {
	st := &spanStore{size: map[string]int64{"a": 100}}
	_, errs, _ := readRefs(context.Background(), st, []*rolloutv1.DataRef{{Object: "a", Length: MaxRefBytes + 1}, {Object: "a", Offset: 1 << 63, Length: 1}, {Object: "a", Length: 5}})
	require.ErrorIs(t, errs[0], ErrData)
	require.ErrorContains(t, errs[0], "over the limit")
	require.ErrorIs(t, errs[1], ErrData)
	require.NoError(t, errs[2])
	require.Equal(t, []string{"a:0+5"}, st.reads)
}

// FuzzReadRefs: for any references into objects of known sizes, every
// reference inside its object gets exactly its bytes (even when it shares
// a span with one that is not), every other one an error naming its object,
// and a span cut short costs at most one more read per reference.
func FuzzReadRefs(f *testing.F) {
	f.Add([]byte{0, 0, 10, 0, 10, 10, 1, 0, 5, 0, 200, 3})
	f.Add([]byte{0, 250, 5, 0, 0, 5, 0, 100, 100})
	f.Fuzz(func(t *testing.T, b []byte) {
		sizes := map[string]int64{"a": 256, "b": 64}
		var refs []*rolloutv1.DataRef
		for i := 0; i+2 < len(b) && len(refs) < 64; i += 3 {
			obj := "a"
			if b[i]&1 == 1 {
				obj = "b"
			}
			refs = append(refs, &rolloutv1.DataRef{Object: obj, Offset: uint64(b[i+1]), Length: uint64(b[i+2])})
		}
		st := &spanStore{size: sizes}
		out, errs, n := readRefs(context.Background(), st, refs)
		require.LessOrEqual(t, n, 2*len(refs), "a span cut short is read again reference by reference, at most")
		require.Len(t, st.reads, n)
		for i, r := range refs {
			end := int64(r.GetOffset() + r.GetLength())
			if end > sizes[r.GetObject()] {
				require.ErrorIs(t, errs[i], store.ErrShortObject)
				require.ErrorContains(t, errs[i], r.GetObject())
				continue
			}
			require.NoError(t, errs[i])
			require.Len(t, out[i], int(r.GetLength()))
			for j, c := range out[i] {
				require.Equal(t, byte(int(r.GetOffset())+j), c)
			}
		}
	})
}
