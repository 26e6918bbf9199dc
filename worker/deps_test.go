package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/worker"
)

// seen records the items a backend was given.
type seen struct {
	mu    sync.Mutex
	items []worker.Item
}

func (s *seen) add(it worker.Item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items = append(s.items, it)
}

func (s *seen) get(id string) []worker.Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []worker.Item
	for _, it := range s.items {
		if string(it.ID) == id {
			out = append(out, it)
		}
	}
	return out
}

func TestItemCarriesDepsKindAndTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.SetTerm(3)
		srv.SetKind(run, "train")
		var got seen
		r := startInMemory(t, testConfig(), newRecorder(func(_ context.Context, it worker.Item) ([]byte, error) {
			got.add(it)
			return []byte(fmt.Sprintf(`{"from":%q}`, it.ID)), nil
		}), srv)

		reduce := sub("reduce", 2)
		reduce.DependsOn = [][]byte{[]byte("s1"), []byte("s0")}
		srv.Add(run, sub("s0", 0), sub("s1", 1), reduce)
		eventually(t, func() bool { return srv.Count(coordtest.Done) == 3 }, "all items done")
		r.stop(t)

		red := got.get("reduce")
		require.Len(t, red, 1)
		require.Equal(t, []worker.Dependency{
			{ID: []byte("s1"), Result: []byte(`{"from":"s1"}`)},
			{ID: []byte("s0"), Result: []byte(`{"from":"s0"}`)},
		}, red[0].Deps, "dependencies in depends_on order, with their results")
		require.Equal(t, "train", red[0].Kind)
		require.Equal(t, uint64(3), red[0].Term)
		s0 := got.get("s0")
		require.Len(t, s0, 1)
		require.Nil(t, s0[0].Deps)
		require.Equal(t, uint64(3), s0[0].Term)
	})
}

func TestStaleItemDroppedUnreported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.SetTerm(2)
		var got seen
		r := startInMemory(t, testConfig(), newRecorder(func(_ context.Context, it worker.Item) ([]byte, error) {
			got.add(it)
			if it.Term < 3 {
				// A new leader was elected meanwhile: the epoch guard
				// refuses to launch an item from the old term.
				srv.SetTerm(3)
				return nil, fmt.Errorf("launch refused: %w", worker.ErrStaleItem)
			}
			return []byte(`{"ok":true}`), nil
		}), srv)

		srv.Add(run, sub("x", 0))
		eventually(t, func() bool { return srv.Count(coordtest.Done) == 1 }, "item done under the new term")
		r.stop(t)

		runs := got.get("x")
		require.Len(t, runs, 2)
		require.Equal(t, uint64(2), runs[0].Term)
		require.Equal(t, uint64(3), runs[1].Term, "re-adopted from the new term's OwnedItems")
		require.Equal(t, runs[0].Attempt, runs[1].Attempt, "the same ownership, never re-claimed")
		st := r.w.Stats()
		require.Equal(t, uint64(1), st.StaleDropped)
		require.Zero(t, st.Failed)
		require.Equal(t, uint64(1), st.Completed)
		for _, rep := range srv.Reports() {
			require.Equal(t, rolloutv1.Outcome_OUTCOME_DONE, rep.GetOutcome(), "the stale run reported nothing")
		}
		require.Len(t, srv.Reports(), 1)
	})
}

// TestTruncatedOwnedItemsDropsNothing: an OwnedItems answer that lists only
// a prefix (the items with their dependencies did not fit in one reply)
// proves nothing about the items it leaves out, so queued items stay.
func TestTruncatedOwnedItemsDropsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		release := make(chan struct{})
		rec := newRecorder(func(ctx context.Context, it worker.Item) ([]byte, error) {
			if string(it.ID) == "first" {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return []byte(`{"ok":true}`), nil
		})
		srv.Add(run, sub("first", 0), sub("a", 1), sub("b", 2))
		cfg := testConfig()
		cfg.Concurrency, cfg.Backlog = 1, 3
		r := startInMemory(t, cfg, rec, srv)
		eventually(t, func() bool { return rec.Started("first") == 1 && r.w.Stats().Queued == 2 }, "first executing, two queued")

		var truncated atomic.Int32
		srv.Intercept("OwnedItems", func(context.Context, any) (any, error) {
			truncated.Add(1)
			return &rolloutv1.OwnedItemsResponse{Header: srv.Header(), Truncated: true}, nil
		})
		srv.SetTerm(2) // a term change makes the worker reconcile
		eventually(t, func() bool { return truncated.Load() > 0 }, "reconciled")
		close(release)
		eventually(t, func() bool { return srv.Count(coordtest.Done) == 3 }, "all done")
		r.stop(t)
		require.Zero(t, r.w.Stats().Dropped)
		require.Equal(t, 1, rec.Started("a"))
		require.Equal(t, 1, rec.Started("b"))
	})
}
