package runs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
)

// TestRangeWalkCorruptResults: the result object of a done range record
// is missing, changed in the store, or was recorded by a worker as bytes
// that are no range result object, or one that lacks an index: `rollout
// results` writes every other line, an error line naming the object for
// each done index it cannot render, counts them unreadable and never
// panics.
func TestRangeWalkCorruptResults(t *testing.T) {
	ctx := context.Background()
	sp := batch.DefaultSamplingParams()
	for _, tc := range []struct {
		name string
		// damage changes the store or the done record's result_ref; it
		// returns what each unreadable line must say.
		damage func(t *testing.T, st *store.Store, dir string, ref *rolloutv1.DataRef) string
	}{
		{"deleted", func(t *testing.T, st *store.Store, dir string, ref *rolloutv1.DataRef) string {
			require.NoError(t, st.Delete(ctx, ref.GetObject()))
			return "not found"
		}},
		{"bytes changed", func(t *testing.T, st *store.Store, dir string, ref *rolloutv1.DataRef) string {
			b, err := st.ReadAll(ctx, ref.GetObject())
			require.NoError(t, err)
			b[3] ^= 1
			require.NoError(t, st.Put(ctx, ref.GetObject(), b))
			return "does not match the blake3"
		}},
		{"truncated", func(t *testing.T, st *store.Store, dir string, ref *rolloutv1.DataRef) string {
			b, err := st.ReadAll(ctx, ref.GetObject())
			require.NoError(t, err)
			require.NoError(t, st.Put(ctx, ref.GetObject(), b[:len(b)/2]))
			return "shorter than the range read"
		}},
		{"recorded garbage", func(t *testing.T, st *store.Store, dir string, ref *rolloutv1.DataRef) string {
			junk := []byte(`{"not":"a range result object"}`)
			key, sum, _, err := st.PutContent(ctx, store.ResultPrefix("r"), junk)
			require.NoError(t, err)
			ref.Object, ref.Length, ref.Blake3 = key, uint64(len(junk)), sum[:]
			return "invalid range object"
		}},
		{"recorded table of a billion records", func(t *testing.T, st *store.Store, dir string, ref *rolloutv1.DataRef) string {
			junk := binary.BigEndian.AppendUint64(bytes.Repeat([]byte{0}, 100), 1<<30)
			junk = append(junk, store.RangeResultsMagic...)
			key, sum, _, err := st.PutContent(ctx, store.ResultPrefix("r"), junk)
			require.NoError(t, err)
			ref.Object, ref.Length, ref.Blake3 = key, uint64(len(junk)), sum[:]
			return "do not fit"
		}},
		{"recorded without index 13", func(t *testing.T, st *store.Store, dir string, ref *rolloutv1.DataRef) string {
			b, err := st.ReadAll(ctx, ref.GetObject())
			require.NoError(t, err)
			rs, err := store.DecodeRangeResults(b)
			require.NoError(t, err)
			obj, err := store.EncodeRangeResults(rs[:3])
			require.NoError(t, err)
			key, sum, _, err := st.PutContent(ctx, store.ResultPrefix("r"), obj)
			require.NoError(t, err)
			ref.Object, ref.Length, ref.Blake3 = key, uint64(len(obj)), sum[:]
			return "holds no result for index 13"
		}},
		{"reference past the end", func(t *testing.T, st *store.Store, dir string, ref *rolloutv1.DataRef) string {
			ref.Offset, ref.Length = 1<<62, 1<<62
			return "shorter than the range read"
		}},
		{"no hash recorded", func(t *testing.T, st *store.Store, dir string, ref *rolloutv1.DataRef) string {
			ref.Blake3 = nil
			return "the ledger recorded no blake3"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st, err := store.Open(ctx, "file://"+dir, store.DefaultOptions())
			require.NoError(t, err)
			t.Cleanup(func() { st.Close() })
			f, _ := newRangeRecords(t, st, sp)
			done := f.records[0]
			ref := done.GetResultRef()
			says := tc.damage(t, st, dir, ref)
			out := filepath.Join(t.TempDir(), "out.jsonl")
			var sum runs.FileSummary
			require.NotPanics(t, func() {
				sum, err = runs.WriteFile(ctx, f, "r", out, runs.ResultsConfig{Store: st, Expected: 18})
			})
			require.NoError(t, err, "a damaged result object is a line per index, not the end of the walk")
			got, err := os.ReadFile(out)
			require.NoError(t, err)
			lines := bytes.Split(bytes.TrimSuffix(got, []byte("\n")), []byte("\n"))
			require.Len(t, lines, 5, "%s", got)
			unreadable := 0
			for _, l := range lines {
				if bytes.Contains(l, []byte("result bytes unreadable")) {
					unreadable++
					require.Contains(t, string(l), says)
					require.Contains(t, string(l), ref.GetObject(), "the line names the object")
				}
			}
			want := 4
			if tc.name == "recorded without index 13" {
				want = 1
			}
			require.Equal(t, want, unreadable, "%s", got)
			require.EqualValues(t, want, sum.Missing.Unreadable)
			require.Contains(t, string(lines[4]), "backend said no", "the dead index is written as it is")
		})
	}
}

// TestRangeWalkChangedChunk: the input chunk of a range run is rewritten
// after submit with other lines of the same length, or deleted. `rollout
// results` renders none of its lines as an item's input: each index of it
// is an error line naming the chunk and saying what is wrong, counted
// unreadable: a changed chunk's lines cannot be trusted, not even those
// that look the same (before, the dead index was written with the other
// line, and a done index whose line changed ended the walk with a sample
// id mismatch).
func TestRangeWalkChangedChunk(t *testing.T) {
	ctx := context.Background()
	sp := batch.DefaultSamplingParams()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, st *store.Store, key string)
		says   string
	}{
		{"same length, other lines", func(t *testing.T, st *store.Store, key string) {
			b, err := st.ReadAll(ctx, key)
			require.NoError(t, err)
			i := bytes.Index(b, []byte("p14"))
			b[i+2] = '9' // the dead index's line
			require.NoError(t, st.Put(ctx, key, b))
		}, "is not the chunk recorded"},
		{"deleted", func(t *testing.T, st *store.Store, key string) {
			require.NoError(t, st.Delete(ctx, key))
		}, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openFileStore(t)
			f, _ := newRangeRecords(t, st, sp)
			key := f.records[0].GetPayloadRef().GetObject()
			tc.damage(t, st, key)
			out := filepath.Join(t.TempDir(), "out.jsonl")
			sum, err := runs.WriteFile(ctx, f, "r", out, runs.ResultsConfig{Store: st, Expected: 18})
			require.NoError(t, err)
			got, err := os.ReadFile(out)
			require.NoError(t, err)
			lines := bytes.Split(bytes.TrimSuffix(got, []byte("\n")), []byte("\n"))
			require.Len(t, lines, 5, "%s", got)
			for _, l := range lines {
				require.Contains(t, string(l), "input bytes unreadable")
				require.Contains(t, string(l), tc.says)
				require.Contains(t, string(l), key, "the line names the chunk")
				require.NotContains(t, string(l), "p19", "no line of the changed chunk is rendered")
			}
			require.EqualValues(t, 5, sum.Missing.Unreadable)
		})
	}
}
