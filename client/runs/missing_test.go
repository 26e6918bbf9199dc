package runs_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/store"
)

// killedSubmit submits a 10-line input as run "r" in chunks of 4 items and
// has the cluster fail from the second chunk on, as a submit killed after
// its first chunk leaves a run: 4 items, a spec total of 10.
func killedSubmit(t *testing.T, fake *runstest.Coordinator, st *store.Store) {
	t.Helper()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store, cfg.ChunkItems = "r", []string{writeInput(t, 10)}, st, 4
	fake.SubmitErr, fake.SubmitErrAt = status.Error(codes.Unavailable, "killed"), 1
	_, err := runs.Submit(context.Background(), fake, cfg)
	require.Error(t, err)
	fake.SubmitErr = nil
	require.Len(t, fake.Runs["r"].Items, 4)
	require.EqualValues(t, 10, fake.Runs["r"].Spec.GetTotal())
}

// TestWriteFileCountsWhatIsMissing: an interrupted submit's lines, pending
// and running items are counted as missing by reason; the file has what
// the run has. Before, the summary said "(2 done, 0 dead)" and nothing of
// the 6 lines never submitted.
func TestWriteFileCountsWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	fake := runstest.New()
	killedSubmit(t, fake, st)
	fake.Finish("r", 0, 2, "")
	fake.Runs["r"].Items[3].State = rolloutv1.ItemState_ITEM_STATE_RUNNING
	_, rc, err := runs.Status(ctx, fake, "r", 0)
	require.NoError(t, err)

	out := filepath.Join(t.TempDir(), "out.jsonl")
	sum, err := runs.WriteFile(ctx, fake, "r", out, runs.ResultsConfig{Store: st, Expected: runs.Target(rc)})
	require.NoError(t, err, "an incomplete output is written, not an error")
	require.Equal(t, runs.Missing{Unsubmitted: 6, Pending: 1, Running: 1}, sum.Missing)
	require.False(t, sum.Complete())
	require.EqualValues(t, 2, sum.Lines)
	require.EqualValues(t, 2, sum.Skipped)
	require.Equal(t, "2 lines (2 done, 0 dead); 8 lines missing: 6 not yet submitted, 1 pending, 1 running", sum.String())
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(b), "\n"))

	dsum, err := runs.WriteDir(ctx, fake, "r", t.TempDir(), runs.ResultsConfig{Store: st, Expected: runs.Target(rc)})
	require.NoError(t, err)
	require.Equal(t, sum.Missing, dsum.Missing)
	require.False(t, dsum.Complete())
	require.Contains(t, dsum.String(), "; 8 lines missing: 6 not yet submitted, 1 pending, 1 running")

	// Finished and fully submitted: complete.
	fake.Finish("r", 2, 4, "")
	sum, err = runs.WriteFile(ctx, fake, "r", out, runs.ResultsConfig{Store: st, Expected: 4})
	require.NoError(t, err)
	require.True(t, sum.Complete(), sum.String())
	require.Equal(t, "4 lines (4 done, 0 dead)", sum.String())
}

// TestUnreadableResultIsMissingNotDead: a result object deleted from the
// store is an error line naming it, counted as unreadable (missing), not
// as a dead item.
func TestUnreadableResultIsMissingNotDead(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store = "r", []string{writeInput(t, 3)}, st
	_, err := runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	fake.Finish("r", 0, 3, "")
	ref := fake.Runs["r"].Items[1].GetResultRef()
	require.NoError(t, st.Delete(ctx, ref.GetObject()))

	out := filepath.Join(t.TempDir(), "out.jsonl")
	sum, err := runs.WriteFile(ctx, fake, "r", out, runs.ResultsConfig{Store: st, Expected: 3})
	require.NoError(t, err)
	require.Equal(t, runs.Missing{Unreadable: 1}, sum.Missing)
	require.Zero(t, sum.Dead, "an unreadable result is not a dead item")
	require.EqualValues(t, 2, sum.Done)
	require.EqualValues(t, 3, sum.Lines, "its error line is written")
	require.Contains(t, sum.String(), "(2 done, 0 dead, 1 unreadable)")
	require.Contains(t, sum.String(), "1 line missing: 1 unreadable")
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(b), ref.GetObject())

	dsum, err := runs.WriteDir(ctx, fake, "r", t.TempDir(), runs.ResultsConfig{Store: st, Expected: 3})
	require.NoError(t, err)
	require.Equal(t, runs.Missing{Unreadable: 1}, dsum.Missing)
	require.Zero(t, dsum.Dead)
	require.EqualValues(t, 2, dsum.Done)
}

// listStore returns every key in st.
func listStore(t *testing.T, st *store.Store) []string {
	t.Helper()
	var keys []string
	require.NoError(t, st.List(context.Background(), "", func(o store.Object) error { keys = append(keys, o.Key); return nil }))
	sort.Strings(keys)
	return keys
}

// TestSubmitRefusedBeforeUpload: what the cluster would refuse (a
// certificate that may not submit, a cancelled run, another store, another
// input under the run's name) is refused before a byte goes into the
// store. Before, the input chunk was uploaded and then the submit refused.
func TestSubmitRefusedBeforeUpload(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, fake *runstest.Coordinator, st *store.Store)
		want  string
	}{
		{"role", func(t *testing.T, fake *runstest.Coordinator, _ *store.Store) {
			fake.ResultsErr = status.Error(codes.PermissionDenied, "permission denied for /rollout.v1.Coordinator/Results: needs role client or admin, has worker")
		}, "does not let this certificate submit"},
		{"cancelled", func(t *testing.T, fake *runstest.Coordinator, st *store.Store) {
			fake.Runs["r"] = &runstest.Run{Spec: &rolloutv1.RunSpec{Store: st.URL()}, Items: map[uint64]*rolloutv1.ResultItem{}, Cancelled: true}
		}, `run "r" was cancelled`},
		{"other store", func(t *testing.T, fake *runstest.Coordinator, _ *store.Store) {
			fake.Runs["r"] = &runstest.Run{Spec: &rolloutv1.RunSpec{Store: "file:///elsewhere"}, Items: map[uint64]*rolloutv1.ResultItem{}}
		}, `keeps its data in store "file:///elsewhere"`},
		{"other input", func(t *testing.T, fake *runstest.Coordinator, st *store.Store) {
			fake.Runs["r"] = &runstest.Run{Spec: &rolloutv1.RunSpec{Store: st.URL()}, Items: map[uint64]*rolloutv1.ResultItem{
				0: {Index: 0, Id: make([]byte, 32), State: rolloutv1.ItemState_ITEM_STATE_DONE},
			}}
		}, `holds another item at index 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openFileStore(t)
			fake := runstest.New()
			tc.setup(t, fake, st)
			before := listStore(t, st)
			cfg := runs.DefaultSubmitConfig()
			cfg.Run, cfg.Files, cfg.Store = "r", []string{writeInput(t, 5)}, st
			_, err := runs.Submit(ctx, fake, cfg)
			require.ErrorIs(t, err, runs.ErrSubmitRefused)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, before, listStore(t, st), "nothing was uploaded")
			require.Empty(t, fake.Submits)
		})
	}
}

// TestResubmitChecksEachChunkBeforeUpload: a resubmit of the run's own
// input is taken (nothing new uploaded); an input that agrees with the run
// on its first chunk and differs later is refused before that chunk is
// uploaded.
func TestResubmitChecksEachChunkBeforeUpload(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	fake := runstest.New()
	dir := t.TempDir()
	var a, b strings.Builder
	for i := range 8 {
		line := `{"prompt":"p` + string(rune('0'+i)) + `"}` + "\n"
		a.WriteString(line)
		if i >= 4 {
			line = `{"prompt":"other ` + string(rune('0'+i)) + `"}` + "\n"
		}
		b.WriteString(line)
	}
	inA, inB := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	require.NoError(t, os.WriteFile(inA, []byte(a.String()), 0o644))
	require.NoError(t, os.WriteFile(inB, []byte(b.String()), 0o644))
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store, cfg.ChunkObjectBytes = "r", []string{inA}, st, 40 // a few lines a chunk
	_, err := runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	before := listStore(t, st)

	res, err := runs.Submit(ctx, fake, cfg)
	require.NoError(t, err, "the same input resumes")
	require.EqualValues(t, 8, res.AlreadyPending)
	require.Equal(t, before, listStore(t, st))

	cfg.Files = []string{inB}
	_, err = runs.Submit(ctx, fake, cfg)
	require.ErrorIs(t, err, runs.ErrSubmitRefused)
	require.ErrorContains(t, err, "holds another item at index 4")
	require.Equal(t, before, listStore(t, st), "the differing chunk was not uploaded")
}

// TestCountRecordsMatchesSubmit: the lines CountRecords counts are the
// items a submit of the input creates.
func TestCountRecordsMatchesSubmit(t *testing.T) {
	in := writeInput(t, 7) // with a blank line
	n, err := batch.CountRecords(context.Background(), []string{in}, batch.DefaultConfig())
	require.NoError(t, err)
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files = "r", []string{in}
	res, err := runs.Submit(context.Background(), fake, cfg)
	require.NoError(t, err)
	require.Equal(t, res.Items, n)
}

// TestCancelledLinesAreCalledCancelled: the items a cancelled run never ran
// are counted and named as cancelled, apart from the dead (failed) ones, in
// WriteFile's and WriteDir's summaries. Before, the 2 cancelled lines were
// counted as dead: "4 lines (1 done, 3 dead)".
func TestCancelledLinesAreCalledCancelled(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store = "r", []string{writeInput(t, 4)}, st
	_, err := runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	fake.Finish("r", 0, 1, "")
	fake.Finish("r", 1, 2, "the model refused")
	for i := uint64(2); i < 4; i++ {
		fake.Runs["r"].Items[i].State = rolloutv1.ItemState_ITEM_STATE_CANCELLED
	}

	out := filepath.Join(t.TempDir(), "out.jsonl")
	sum, err := runs.WriteFile(ctx, fake, "r", out, runs.ResultsConfig{Store: st, Expected: 4})
	require.NoError(t, err)
	require.Equal(t, "4 lines (1 done, 1 dead, 2 cancelled)", sum.String())
	require.EqualValues(t, 1, sum.Dead)
	require.EqualValues(t, 2, sum.Cancelled)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(b), "the run was cancelled before this item ran"))

	dsum, err := runs.WriteDir(ctx, fake, "r", t.TempDir(), runs.ResultsConfig{Store: st, Expected: 4})
	require.NoError(t, err)
	require.EqualValues(t, 1, dsum.Dead)
	require.EqualValues(t, 2, dsum.Cancelled)
	require.Contains(t, dsum.String(), "(1 done, 1 failed, 2 cancelled)")
}

// TestCancelledRangeLinesAreCalledCancelled: the lines of a range run's
// cancelled records are counted as cancelled too (the range walk keeps
// the record's state for each of its lines).
func TestCancelledRangeLinesAreCalledCancelled(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	fake := rangeFake()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store, cfg.Layout = "r", []string{writeInput(t, 6)}, st, runs.LayoutRanges
	_, err := runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	require.NotEmpty(t, fake.Runs["r"].Items)
	for _, it := range fake.Runs["r"].Items {
		require.NotZero(t, it.GetCount(), "a range record")
		it.State = rolloutv1.ItemState_ITEM_STATE_CANCELLED
	}
	sum, err := runs.WriteFile(ctx, fake, "r", filepath.Join(t.TempDir(), "out.jsonl"), runs.ResultsConfig{Store: st, Expected: 6})
	require.NoError(t, err)
	require.Equal(t, "6 lines (0 done, 0 dead, 6 cancelled)", sum.String())
	dsum, err := runs.WriteDir(ctx, fake, "r", t.TempDir(), runs.ResultsConfig{Store: st, Expected: 6})
	require.NoError(t, err)
	require.Contains(t, dsum.String(), "(0 done, 0 failed, 6 cancelled)")
}
