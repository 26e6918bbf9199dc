package worker_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/worker"
)

// inputReads counts the ranged reads of run's input chunks by key.
func inputReads(c interface{ Reads() map[string]int }, run string) map[string]int {
	out := map[string]int{}
	for k, n := range c.Reads() {
		if strings.HasPrefix(k, store.InputPrefix(run)) {
			out[k] = n
		}
	}
	return out
}

// TestRangeChunkReadOnceAhead: every chunk of a range run is read once,
// with two ranged reads (its lines, its index), however many ranges and
// indexes of it run; and the chunks of the queued ranges are read while the
// first range executes: its indexes wait until every chunk was read, which
// no executor would do before the first range's indexes finish.
func TestRangeChunkReadOnceAhead(t *testing.T) {
	rr := startRangeReplica(t)
	e := newStoreEnv(t)
	in := submitRanges(t, rr, e, "ra", 3, 120, 100, 80)
	cfg := rangeConfig("w1")
	cfg.Backlog = 400 // one claim takes every range
	cfg.OpenStore = func(context.Context, string) (worker.ObjectStore, error) { return e.counting, nil }
	var waited atomic.Bool
	b := &rangeBackend{t: t, fail: func(it worker.Item, _ int) error {
		if it.Index >= 120 || waited.Load() {
			return nil
		}
		deadline := time.Now().Add(waitFor)
		for len(inputReads(e.counting, "ra")) < 3 {
			if time.Now().After(deadline) {
				t.Errorf("index %d of the first chunk: the other chunks were not read ahead (reads %v)", it.Index, inputReads(e.counting, "ra"))
				waited.Store(true)
				return nil
			}
			time.Sleep(time.Millisecond) // a poll of a condition, not a timing assumption
		}
		waited.Store(true)
		return nil
	}}
	w := start(t, cfg, b, rr.addr)
	c := rr.waitRun(t, "ra", in.total, 60*time.Second)
	require.EqualValues(t, in.total, c.GetDone())
	done, failed := checkRangeResults(t, rr, e, in)
	require.Len(t, done, int(in.total))
	require.Empty(t, failed)
	reads := inputReads(e.counting, "ra")
	require.Len(t, reads, 3)
	for k, n := range reads {
		require.Equal(t, 2, n, "chunk %s: read whole once (lines, index)", k)
	}
	require.True(t, waited.Load())
	eventually(t, func() bool { return w.w.Stats().Held == 0 }, "the worker holds nothing at the end")
}

// gatedStore holds every PutContent until open is closed.
type gatedStore struct {
	worker.ObjectStore
	open chan struct{}
	puts atomic.Int64
}

func (g *gatedStore) PutContent(ctx context.Context, prefix string, data []byte) (string, store.Sum, bool, error) {
	g.puts.Add(1)
	select {
	case <-g.open:
	case <-ctx.Done():
		return "", store.Sum{}, false, ctx.Err()
	}
	return g.ObjectStore.PutContent(ctx, prefix, data)
}

// TestRangeUnreportedBound: while result objects cannot be written, a
// worker whose finished results passed MaxUnreportedBytes claims nothing
// more: it finishes what it holds and stops, far short of the run; once the
// store takes the writes, the run ends with every index done exactly once.
func TestRangeUnreportedBound(t *testing.T) {
	rr := startRangeReplica(t)
	e := newStoreEnv(t)
	in := submitRanges(t, rr, e, "rb", 3, 120, 100, 80)
	g := &gatedStore{ObjectStore: e.st, open: make(chan struct{})}
	cfg := rangeConfig("w1")
	cfg.MaxRangeIndexes = 8
	cfg.Backlog = 8
	cfg.MaxUnreportedBytes = 1
	cfg.OpenStore = func(context.Context, string) (worker.ObjectStore, error) { return g, nil }
	b := &rangeBackend{t: t}
	w := start(t, cfg, b, rr.addr)
	eventually(t, func() bool {
		st := w.w.Stats()
		return worker.ClaimPaused(w.w) && st.Queued == 0 && st.Executing == 0
	}, "the worker stops claiming, its results unwritten, and finishes what it holds")
	b.mu.Lock()
	ran := len(b.runs)
	b.mu.Unlock()
	require.Less(t, ran, int(in.total)/2, "a worker past its bound claims nothing more")
	close(g.open)
	c := rr.waitRun(t, "rb", in.total, 60*time.Second)
	require.EqualValues(t, in.total, c.GetDone())
	done, failed := checkRangeResults(t, rr, e, in)
	require.Len(t, done, int(in.total))
	require.Empty(t, failed)
}
