package worker_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/worker"
)

// TestIdleReporterSleeps: a registered worker with nothing to do does not
// wake its reporter. Over a minute of the fake clock idle (12,000 report
// intervals of 5 ms) it wakes at most twice; items that arrive are run and
// reported all the same, and once they are the reporter sleeps again.
func TestIdleReporterSleeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		r := startInMemory(t, testConfig(), newRecorder(func(_ context.Context, it worker.Item) ([]byte, error) {
			return []byte(`{"ok":true}`), nil
		}), srv)
		quiet := func(what string) {
			t.Helper()
			eventually(t, func() bool { return worker.ReporterIdle(r.w) }, "the reporter goes idle "+what)
			before := worker.ReporterWakeups(r.w)
			time.Sleep(time.Minute)
			synctest.Wait()
			woke := worker.ReporterWakeups(r.w) - before
			require.LessOrEqual(t, woke, uint64(2), "an idle worker's reporter woke %d times in a minute %s", woke, what)
			require.True(t, worker.ReporterIdle(r.w))
		}
		quiet("before any work")

		srv.Add(run, subs(20)...)
		eventually(t, func() bool { return srv.Count(coordtest.Done) == 20 }, "all items done")
		require.EqualValues(t, 20, r.w.Stats().Completed)
		quiet("after its work")

		srv.Add(run, sub("late", 20))
		eventually(t, func() bool { return srv.Count(coordtest.Done) == 21 }, "an item after the idle minute is reported")
		r.stop(t)
	})
}

// TestIdleReporterSleepsAfterRanges: a range run is run to the end (its
// results reported through the reporter's ticks), and then the worker's
// reporter sleeps and its checked chunks are let go.
func TestIdleReporterSleepsAfterRanges(t *testing.T) {
	rr := startRangeReplica(t)
	e := newStoreEnv(t)
	in := submitRanges(t, rr, e, "rr", 3, 120, 100)
	cfg := rangeConfig("w1")
	cfg.OpenStore = e.rangeOpener()
	w := start(t, cfg, &rangeBackend{t: t, delay: time.Millisecond}, rr.addr)
	c := rr.waitRun(t, "rr", in.total, 60*time.Second)
	require.EqualValues(t, in.total, c.GetDone())
	done, failed := checkRangeResults(t, rr, e, in)
	require.Len(t, done, int(in.total))
	require.Empty(t, failed)
	eventually(t, func() bool { return w.w.Stats().Held == 0 && worker.ReporterIdle(w.w) }, "the reporter sleeps once the ranges are reported")
	require.Zero(t, worker.ChunksCached(w.w), "an idle worker keeps no chunk")
}
