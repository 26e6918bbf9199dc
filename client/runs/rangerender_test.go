package runs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
)

// manyRangeRecords stores one chunk of n lines and one result object per
// segment of seg indexes, and records them all done but every 97th index,
// dead: many render batches.
func manyRangeRecords(t *testing.T, st *store.Store, n, seg int) (*rangeRecords, []byte) {
	t.Helper()
	ctx := context.Background()
	const model = "org/m"
	var ch store.RangeChunk
	var lines [][]byte
	for i := range n {
		l := []byte(fmt.Sprintf(`{"prompt":"p%d","k":%d}`, i, i))
		lines = append(lines, l)
		ch.Add(l)
	}
	key, _, _, err := st.PutContent(ctx, store.InputPrefix("r"), ch.Bytes())
	require.NoError(t, err)
	pr := &rolloutv1.DataRef{Object: key, Length: uint64(ch.DataLen())}
	f := &rangeRecords{model: model, sampling: batch.DefaultSamplingParams().JSON()}
	var want bytes.Buffer
	for lo := 0; lo < n; lo += seg {
		hi := min(lo+seg, n)
		var rs []store.RangeResult
		for i := lo; i < hi; i++ {
			sid := batch.SampleIDOfLine(model, lines[i], batch.DefaultSamplingParams(), uint64(i))
			if i%97 == 0 {
				rec := &rolloutv1.ResultItem{Id: []byte(fmt.Sprintf("R%08d", i)), Index: uint64(i), Count: 1, State: rolloutv1.ItemState_ITEM_STATE_DEAD,
					PayloadRef: pr, Attempt: 1, Reason: "boom"}
				f.records = append(f.records, rec)
				line, _, _ := batch.RenderLine(batch.FinishedItem{Index: uint64(i), ID: sid[:], SampleID: sid, Payload: lines[i], Reason: "boom"})
				want.Write(append(line, '\n'))
				continue
			}
			res := batch.EncodeCompletionResult(fmt.Sprintf("a%d", i), "stop")
			rs = append(rs, store.RangeResult{Index: uint64(i), SampleID: sid, Result: res})
			line, _, _ := batch.RenderLine(batch.FinishedItem{Index: uint64(i), ID: sid[:], SampleID: sid, Payload: lines[i], Done: true, Result: res})
			want.Write(append(line, '\n'))
			if i+1 == hi || (i+1)%97 == 0 {
				obj, err := store.EncodeRangeResults(rs)
				require.NoError(t, err)
				rkey, sum, _, err := st.PutContent(ctx, store.ResultPrefix("r"), obj)
				require.NoError(t, err)
				first := int(rs[0].Index)
				f.records = append(f.records, &rolloutv1.ResultItem{Id: []byte(fmt.Sprintf("R%08d", first)), Index: uint64(first), Count: uint64(len(rs)),
					State: rolloutv1.ItemState_ITEM_STATE_DONE, PayloadRef: pr, Attempt: 1,
					ResultRef: &rolloutv1.DataRef{Object: rkey, Length: uint64(len(obj)), Blake3: sum[:]}})
				rs = nil
			}
		}
	}
	return f, want.Bytes()
}

// TestResultsRenderInOrderAcrossBatches: the lines of thousands of
// indexes, rendered in parallel batches, come out byte for byte as one
// renderer in index order would write them, with the counts.
func TestResultsRenderInOrderAcrossBatches(t *testing.T) {
	st := openFileStore(t)
	f, want := manyRangeRecords(t, st, 5000, 300)
	var got bytes.Buffer
	sum, err := runs.WriteTo(context.Background(), f, "r", &got, runs.ResultsConfig{Store: st})
	require.NoError(t, err)
	require.Equal(t, string(want), got.String())
	require.EqualValues(t, 5000, sum.Lines)
	require.EqualValues(t, 52, sum.Dead) // 0, 97, ..., 4947
	require.EqualValues(t, 5000-52, sum.Done)
}

// failingWriter takes ok bytes, then fails.
type failingWriter struct{ ok int }

var errDiskFull = errors.New("disk full")

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.ok < len(p) {
		return 0, errDiskFull
	}
	w.ok -= len(p)
	return len(p), nil
}

// TestResultsWriteErrorStops: a write that fails is the walk's error, and
// nothing after it counts as written.
func TestResultsWriteErrorStops(t *testing.T) {
	st := openFileStore(t)
	f, _ := manyRangeRecords(t, st, 5000, 300)
	sum, err := runs.WriteTo(context.Background(), f, "r", &failingWriter{ok: 1 << 10}, runs.ResultsConfig{Store: st})
	require.ErrorIs(t, err, errDiskFull)
	require.Zero(t, sum.Lines, "the first batch's write failed: no line counts")
}
