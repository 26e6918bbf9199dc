package runs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
)

// rangeRecords is a coordinator whose one run "r" holds fixed range
// records (Results pages them by first index, as the ledger does) and
// whose RunStatus gives the run's model and sampling.
type rangeRecords struct {
	runs.Coordinator
	model    string
	sampling []byte
	records  []*rolloutv1.ResultItem
	statuses int
}

func (f *rangeRecords) Results(_ context.Context, req *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error) {
	resp := &rolloutv1.ResultsResponse{NextIndex: req.GetFromIndex(), Done: true}
	for _, r := range f.records {
		if r.GetIndex() < req.GetFromIndex() {
			continue
		}
		if len(resp.Items) == int(req.GetLimit()) {
			resp.Done = false
			break
		}
		resp.Items = append(resp.Items, r)
		resp.NextIndex = r.GetIndex() + 1
	}
	return resp, nil
}

func (f *rangeRecords) RunStatus(context.Context, *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	f.statuses++
	return &rolloutv1.RunStatusResponse{Runs: []*rolloutv1.RunCounters{{Name: "r", Model: f.model, Sampling: f.sampling}}}, nil
}

// newRangeRecords stores a chunk of 8 lines at indexes 10..17 (the run's
// second chunk: base 10) and the results of 10..13 in one object, and
// records [10,14) done, 14 dead, [15,17) running, 17 pending.
func newRangeRecords(t *testing.T, st *store.Store, sp batch.SamplingParams) (*rangeRecords, []string) {
	t.Helper()
	ctx := context.Background()
	const model = "org/m"
	var ch store.RangeChunk
	var lines []string
	for i := range 8 {
		l := fmt.Sprintf(`{"prompt":"p%d"}`, 10+i)
		lines = append(lines, l)
		ch.Add([]byte(l))
	}
	key, _, _, err := st.PutContent(ctx, store.InputPrefix("r"), ch.Bytes())
	require.NoError(t, err)
	var rs []store.RangeResult
	for i := uint64(10); i < 14; i++ {
		rs = append(rs, store.RangeResult{Index: i, SampleID: batch.SampleIDOfLine(model, []byte(lines[i-10]), sp, i),
			Result: batch.EncodeCompletionResult(fmt.Sprintf("answer %d", i), "stop")})
	}
	obj, err := store.EncodeRangeResults(rs)
	require.NoError(t, err)
	rkey, sum, _, err := st.PutContent(ctx, store.ResultPrefix("r"), obj)
	require.NoError(t, err)
	pr := &rolloutv1.DataRef{Object: key, Length: uint64(ch.DataLen())}
	rr := &rolloutv1.DataRef{Object: rkey, Length: uint64(len(obj)), Blake3: sum[:]}
	rec := func(idx, n uint64, state rolloutv1.ItemState) *rolloutv1.ResultItem {
		return &rolloutv1.ResultItem{Id: []byte(fmt.Sprintf("R%08d", idx)), Index: idx, Count: n, Base: 10, State: state, PayloadRef: pr, Attempt: 1}
	}
	done := rec(10, 4, rolloutv1.ItemState_ITEM_STATE_DONE)
	done.ResultRef = rr
	dead := rec(14, 1, rolloutv1.ItemState_ITEM_STATE_DEAD)
	dead.Reason = "backend said no"
	return &rangeRecords{model: model, sampling: sp.JSON(), records: []*rolloutv1.ResultItem{
		done, dead, rec(15, 2, rolloutv1.ItemState_ITEM_STATE_RUNNING), rec(17, 1, rolloutv1.ItemState_ITEM_STATE_PENDING)}}, lines
}

// TestRangeWalkCountAndBase: the results walk renders each range record
// over [index, index+count) of the chunk starting at base, with the run's
// model and sampling from RunStatus when the config gives none; another
// sampling is refused (ErrSampleIDMismatch).
func TestRangeWalkCountAndBase(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	sp := batch.SamplingParams{Temperature: 0.5, TopP: 0.9, MaxTokens: 16, Seed: 3}
	f, lines := newRangeRecords(t, st, sp)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sum, err := runs.WriteFile(ctx, f, "r", out, runs.ResultsConfig{Store: st, Expected: 18})
	require.NoError(t, err)
	require.Equal(t, 1, f.statuses, "the run's sampling is read once")
	require.EqualValues(t, 5, sum.Lines)
	require.EqualValues(t, 4, sum.Done)
	require.EqualValues(t, 1, sum.Dead)
	require.EqualValues(t, runs.Missing{Unsubmitted: 10, Running: 2, Pending: 1}, sum.Missing)
	var want []byte
	for i := uint64(10); i < 15; i++ {
		sid := batch.SampleIDOfLine(f.model, []byte(lines[i-10]), sp, i)
		fi := batch.FinishedItem{Index: i, ID: sid[:], SampleID: sid, Payload: []byte(lines[i-10]), Reason: "backend said no"}
		if i < 14 {
			fi.Done, fi.Result, fi.Reason = true, batch.EncodeCompletionResult(fmt.Sprintf("answer %d", i), "stop"), ""
		}
		line, _, _ := batch.RenderLine(fi)
		want = append(append(want, line...), '\n')
	}
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))

	// The config's sampling, when given, is the one checked.
	other := sp
	other.Seed = 4
	_, err = runs.WriteFile(ctx, f, "r", filepath.Join(t.TempDir(), "w.jsonl"), runs.ResultsConfig{Store: st, Model: f.model, Sampling: &other})
	require.ErrorIs(t, err, runs.ErrSampleIDMismatch)
}

// TestWithStoreExpandsRanges: through WithStore a range run's records come
// back as items, one per index, with the line as payload, the computed
// sample id, the result, and the record's state; a page ends after the
// record that reaches the limit.
func TestWithStoreExpandsRanges(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	sp := batch.DefaultSamplingParams()
	f, lines := newRangeRecords(t, st, sp)
	c := runs.WithStore(f, st, 0)
	resp, err := c.Results(ctx, &rolloutv1.ResultsRequest{Run: "r", Limit: 2})
	require.NoError(t, err)
	require.Len(t, resp.GetItems(), 4, "the first record whole")
	require.False(t, resp.GetDone())
	require.EqualValues(t, 14, resp.GetNextIndex())

	var items []*rolloutv1.ResultItem
	require.NoError(t, runs.Results(ctx, c, "r", runs.ResultsConfig{PageSize: 2}, func(it *rolloutv1.ResultItem) error {
		items = append(items, it)
		return nil
	}))
	require.Len(t, items, 8)
	for k, it := range items {
		i := uint64(10 + k)
		sid := batch.SampleIDOfLine(f.model, []byte(lines[k]), sp, i)
		require.Equal(t, i, it.GetIndex())
		require.Equal(t, sid[:], it.GetId())
		require.Equal(t, lines[k], string(it.GetPayload()))
		require.Zero(t, it.GetCount())
		require.Nil(t, it.GetPayloadRef())
		require.Nil(t, it.GetResultRef())
		switch {
		case i < 14:
			require.Equal(t, rolloutv1.ItemState_ITEM_STATE_DONE, it.GetState())
			require.Equal(t, batch.EncodeCompletionResult(fmt.Sprintf("answer %d", i), "stop"), it.GetResult())
		case i == 14:
			require.Equal(t, rolloutv1.ItemState_ITEM_STATE_DEAD, it.GetState())
			require.Equal(t, "backend said no", it.GetReason())
		case i < 17:
			require.Equal(t, rolloutv1.ItemState_ITEM_STATE_RUNNING, it.GetState())
		default:
			require.Equal(t, rolloutv1.ItemState_ITEM_STATE_PENDING, it.GetState())
		}
	}
	require.Equal(t, 1, f.statuses, "the run's sampling is read once per wrapper")
}
