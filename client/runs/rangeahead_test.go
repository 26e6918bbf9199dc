package runs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
)

// gatedWriter blocks its first Write until open is closed, then counts
// what it is given into buf.
type gatedWriter struct {
	open chan struct{}
	buf  bytes.Buffer
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	<-w.open
	return w.buf.Write(p)
}

// TestReadAheadHoldsAtMostItsBound: while the output cannot be written,
// the walk reads objects ahead of it up to its bound of objects held and
// no further; once the output drains, every object has been read once and
// the lines come out byte for byte in index order.
func TestReadAheadHoldsAtMostItsBound(t *testing.T) {
	st := openFileStore(t)
	// The walk renders up to GOMAXPROCS+2 batches of 512 lines before a
	// stuck output stops it: the run has more than that, and then more
	// than 16 objects (chunks of 400 lines, result objects of 100).
	chunks := ((runtime.GOMAXPROCS(0)+3)*512+2000)/400 + 1
	run := newPayloadRun(t, st, chunks, 400, 100, 300)
	objects := chunks + 4*chunks
	require.Greater(t, objects, runs.AheadObjects)
	var stats runs.AheadStats
	w := &gatedWriter{open: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		_, err := runs.WriteTo(context.Background(), run.f, "r", w, runs.WithAheadStats(runs.ResultsConfig{Store: st}, &stats))
		errc <- err
	}()
	// The writer is stuck: the walk stops when its bound is reached (a
	// record that needs two new objects may stop it one short).
	require.Eventually(t, func() bool {
		_, held, _ := stats.Snapshot()
		return held >= runs.AheadObjects-1
	}, time.Minute, 5*time.Millisecond, "the read-ahead never filled its bound")
	reads, held, _ := stats.Snapshot()
	require.LessOrEqual(t, held, runs.AheadObjects)
	require.Less(t, reads, objects, "the walk read everything while the output was stuck")
	close(w.open)
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the walk did not finish once the output drained")
	}
	require.Equal(t, string(run.want), w.buf.String())
	reads, held, _ = stats.Snapshot()
	require.Equal(t, objects, reads, "each object is read once")
	require.LessOrEqual(t, held, runs.AheadObjects)
}

// TestReadAheadByteBudget: the bytes held ahead stay within CacheBytes
// when it holds a few objects, and a budget smaller than one object still
// renders the whole run, one record's objects (and the previous record's)
// at a time.
func TestReadAheadByteBudget(t *testing.T) {
	st := openFileStore(t)
	run := newPayloadRun(t, st, 6, 400, 100, 600) // chunks of 240 KB, result objects of about 70 KB
	for _, tc := range []struct {
		budget     int64
		maxObjects int
	}{
		{budget: 1 << 20, maxObjects: runs.AheadObjects},
		{budget: 1, maxObjects: 4},
	} {
		t.Run(fmt.Sprint(tc.budget), func(t *testing.T) {
			var stats runs.AheadStats
			var got bytes.Buffer
			sum, err := runs.WriteTo(context.Background(), run.f, "r", &got,
				runs.WithAheadStats(runs.ResultsConfig{Store: st, CacheBytes: tc.budget}, &stats))
			require.NoError(t, err)
			require.Equal(t, string(run.want), got.String())
			require.EqualValues(t, 2400, sum.Done)
			reads, held, bytesHeld := stats.Snapshot()
			require.Equal(t, 6+24, reads, "each object is read once")
			require.LessOrEqual(t, held, tc.maxObjects)
			if tc.budget > 1 {
				require.LessOrEqual(t, bytesHeld, tc.budget)
			}
		})
	}
}

// TestReadAheadDamagedObjectsMidRun: in the middle of a run read ahead, a
// result object is deleted and an input chunk changed: each index of
// theirs is an error line naming the object, counted unreadable, exactly
// as without read-ahead, and every other line is its own.
func TestReadAheadDamagedObjectsMidRun(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	run := newPayloadRun(t, st, 5, 300, 100, 400)
	deleted := run.results[4] // indexes 400..499, in chunk 1
	require.NoError(t, st.Delete(ctx, deleted))
	changed := run.f.records[9].GetPayloadRef().GetObject() // chunk 3: indexes 900..1199
	b, err := st.ReadAll(ctx, changed)
	require.NoError(t, err)
	b[100] ^= 1
	require.NoError(t, st.Put(ctx, changed, b))

	out := filepath.Join(t.TempDir(), "out.jsonl")
	sum, err := runs.WriteFile(ctx, run.f, "r", out, runs.ResultsConfig{Store: st, CacheBytes: 256 << 10})
	require.NoError(t, err, "damaged objects are lines, not the end of the walk")
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	gotLines := bytes.Split(bytes.TrimSuffix(got, []byte("\n")), []byte("\n"))
	wantLines := bytes.Split(bytes.TrimSuffix(run.want, []byte("\n")), []byte("\n"))
	require.Len(t, gotLines, len(wantLines))
	for i, l := range gotLines {
		switch {
		case i >= 400 && i < 500:
			require.Contains(t, string(l), "result bytes unreadable", "index %d", i)
			require.Contains(t, string(l), deleted, "index %d names the object", i)
			require.Contains(t, string(l), "not found")
		case i >= 900 && i < 1200:
			require.Contains(t, string(l), "input bytes unreadable", "index %d", i)
			require.Contains(t, string(l), changed, "index %d names the chunk", i)
			require.Contains(t, string(l), "is not the chunk recorded")
		default:
			require.Equal(t, string(wantLines[i]), string(l), "index %d", i)
		}
	}
	require.EqualValues(t, 400, sum.Missing.Unreadable)
	require.EqualValues(t, 1100, sum.Done)
}

// failingPages is a rangeRecords whose Results fails from the page that
// starts at index from on.
type failingPages struct {
	*rangeRecords
	from uint64
}

func (f failingPages) Results(ctx context.Context, req *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error) {
	if req.GetFromIndex() >= f.from {
		return nil, errors.New("the ledger is gone")
	}
	return f.rangeRecords.Results(ctx, req)
}

// TestReadAheadStopsOnErrors: a ledger that fails mid-run, and a sampling
// that is not the run's (the first line's sample id does not match), end
// the walk with their error while reads are queued ahead, and leave no
// file.
func TestReadAheadStopsOnErrors(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	run := newPayloadRun(t, st, 8, 300, 100, 300)
	out := filepath.Join(t.TempDir(), "out.jsonl")

	_, err := runs.WriteFile(ctx, failingPages{run.f, 1500}, "r", out, runs.ResultsConfig{Store: st, PageSize: 4})
	require.ErrorContains(t, err, "the ledger is gone")
	require.NoFileExists(t, out)

	other := batch.DefaultSamplingParams()
	other.Seed = 9
	_, err = runs.WriteFile(ctx, run.f, "r", out, runs.ResultsConfig{Store: st, Model: run.f.model, Sampling: &other})
	require.ErrorIs(t, err, runs.ErrSampleIDMismatch)
	require.NoFileExists(t, out)

	// A walk whose context ends mid-run stops with it.
	cctx, cancel := context.WithCancel(ctx)
	w := &cancelAfterWrite{cancel: cancel}
	_, err = runs.WriteTo(cctx, run.f, "r", w, runs.ResultsConfig{Store: st, CacheBytes: 64 << 10})
	require.ErrorIs(t, err, context.Canceled)
}

// cancelAfterWrite cancels its context on the first Write.
type cancelAfterWrite struct{ cancel context.CancelFunc }

func (w *cancelAfterWrite) Write(p []byte) (int, error) {
	w.cancel()
	return len(p), nil
}
