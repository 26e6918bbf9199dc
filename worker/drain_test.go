package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/worker"
)

// chanHint is a ComputeHint fed by the test.
type chanHint chan worker.Notice

func (h chanHint) Watch(context.Context) (<-chan worker.Notice, error) { return h, nil }

var _ worker.ComputeHint = chanHint(nil)

// failingHint cannot start.
type failingHint struct{}

var errNoMetadata = errors.New("no metadata service")

func (failingHint) Watch(context.Context) (<-chan worker.Notice, error) { return nil, errNoMetadata }

// drainBackend runs "warm-*" items for warm (simulated work), and blocks
// "long-*" items until they are cancelled, recording when.
type drainBackend struct {
	warm time.Duration

	mu        sync.Mutex
	started   map[string]time.Time
	cancelled map[string]time.Time
}

func newDrainBackend(warm time.Duration) *drainBackend {
	return &drainBackend{warm: warm, started: map[string]time.Time{}, cancelled: map[string]time.Time{}}
}

func (b *drainBackend) Run(ctx context.Context, it worker.Item) ([]byte, error) {
	id := string(it.ID)
	b.mu.Lock()
	b.started[id] = time.Now()
	b.mu.Unlock()
	if strings.HasPrefix(id, "long-") {
		<-ctx.Done()
		b.mu.Lock()
		b.cancelled[id] = time.Now()
		b.mu.Unlock()
		return nil, ctx.Err()
	}
	t := time.NewTimer(b.warm)
	defer t.Stop()
	select {
	case <-t.C:
		return []byte(`{"ok":true}`), nil
	case <-ctx.Done():
		b.mu.Lock()
		b.cancelled[id] = time.Now()
		b.mu.Unlock()
		return nil, ctx.Err()
	}
}

func (b *drainBackend) startedAt(id string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.started[id]
	return t, ok
}

func (b *drainBackend) cancelledAt(id string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.cancelled[id]
	return t, ok
}

// waitRun waits for Run to return and requires nil.
func (r *running) waitRun(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.done:
		require.NoError(t, err)
		r.done <- nil // for the cleanup
	case <-time.After(waitFor):
		t.Fatal("Run did not return after the notice")
	}
}

func drainConfig(h worker.ComputeHint) worker.Config {
	cfg := testConfig()
	cfg.Steal = false
	cfg.Hints = []worker.ComputeHint{h}
	return cfg
}

func nackReports(srv *coordtest.Server) map[string]bool {
	out := map[string]bool{}
	for _, rep := range srv.Reports() {
		if rep.GetOutcome() == rolloutv1.Outcome_OUTCOME_NACK {
			out[string(rep.GetId())] = true
		}
	}
	return out
}

// TestDrainFinishesInFlightThatFits: items measured at ~150ms each, a 5s
// budget: the in-flight items finish and are reported Done, the unstarted
// ones are nacked, the worker deregisters inside the deadline.
func TestDrainFinishesInFlightThatFits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		for i := range 12 {
			srv.Add(run, sub(fmtID("warm", i), i))
		}
		b := newDrainBackend(150 * time.Millisecond)
		h := make(chanHint, 1)
		cfg := drainConfig(h)
		cfg.Concurrency, cfg.Backlog = 2, 4
		r := startInMemory(t, cfg, b, srv)
		eventually(t, func() bool { st := r.w.Stats(); return st.Completed >= 2 && st.Executing == 2 }, "measured and busy")

		h <- worker.Notice{Provider: "test", Reason: "fits", Deadline: time.Now().Add(5 * time.Second)}
		r.waitRun(t)
		rep, ok := r.w.Drained()
		require.True(t, ok)
		require.True(t, rep.WithinDeadline(), "drain ended %v after its deadline", rep.Ended.Sub(rep.Deadline))
		require.Equal(t, 2, rep.InFlight)
		require.Zero(t, rep.Cancelled, "items that fit the budget were cancelled")
		require.True(t, rep.Deregistered)
		require.Zero(t, rep.Unreported)
		require.Equal(t, 1, srv.Calls("Deregister"))
		// The deregistration names the notice and the drain's outcome.
		require.Equal(t, fmt.Sprintf("drain: test: fits; finished 2, nacked %d", len(rep.Nacked)), deregisterReason(t, srv, wid))

		nacks := nackReports(srv)
		require.Len(t, rep.Nacked, len(nacks))
		require.Equal(t, rep.Unstarted, len(nacks), "only unstarted items are nacked")
		for _, n := range rep.Nacked {
			_, started := b.startedAt(string(n.ID))
			require.False(t, started, "nacked item %s had started", n.ID)
			it, ok := srv.Item(run, n.ID)
			require.True(t, ok)
			require.Equal(t, coordtest.Pending, it.State)
		}
		st := r.w.Stats()
		require.Equal(t, int(st.Completed), srv.Count(coordtest.Done))
		require.Equal(t, 12, srv.Count(coordtest.Done)+srv.Count(coordtest.Pending), "every item done or pending again")
	})
}

func fmtID(prefix string, i int) string { return prefix + "-" + string(rune('a'+i)) }

// TestDrainCancelsInFlightThatCannotFit: items measured at ~600ms, a 400ms
// budget: the in-flight items cannot finish in time, so they are cancelled
// and nacked at once - before the cut-off - not left to run to it.
func TestDrainCancelsInFlightThatCannotFit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.Add(run, sub("warm-0", 0), sub("warm-1", 1), sub("long-0", 2), sub("long-1", 3), sub("long-2", 4))
		b := newDrainBackend(600 * time.Millisecond)
		h := make(chanHint, 1)
		cfg := drainConfig(h)
		cfg.Concurrency, cfg.Backlog = 2, 2
		r := startInMemory(t, cfg, b, srv)
		eventually(t, func() bool {
			_, a := b.startedAt("long-0")
			_, c := b.startedAt("long-1")
			return a && c && r.w.Stats().Completed == 2
		}, "warm items measured, long items running")

		noticed := time.Now()
		budget := 400 * time.Millisecond
		h <- worker.Notice{Provider: "test", Reason: "does not fit", Deadline: noticed.Add(budget)}
		r.waitRun(t)
		rep, ok := r.w.Drained()
		require.True(t, ok)
		require.True(t, rep.WithinDeadline(), "drain ended %v after its deadline", rep.Ended.Sub(rep.Deadline))
		require.Equal(t, 2, rep.InFlight)
		require.Equal(t, 2, rep.Cancelled)
		cutoff := noticed.Add(budget * 3 / 4)
		for _, id := range []string{"long-0", "long-1"} {
			at, ok := b.cancelledAt(id)
			require.True(t, ok, id)
			require.True(t, at.Before(cutoff), "%s cancelled %v after the notice, not before the cut-off", id, at.Sub(noticed))
			require.True(t, nackReports(srv)[id], "%s not nacked", id)
			it, _ := srv.Item(run, []byte(id))
			require.Equal(t, coordtest.Pending, it.State)
		}
		require.Len(t, rep.Nacked, 2)
		require.Equal(t, 2, srv.Count(coordtest.Done))
	})
}

// TestDrainWithoutMeasurementRunsToCutoff: with no completion measured the
// worker does not guess: the in-flight item runs until the cut-off (a
// quarter of the budget before the deadline), then is cancelled and nacked.
func TestDrainWithoutMeasurementRunsToCutoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.Add(run, sub("long-0", 0))
		b := newDrainBackend(0)
		h := make(chanHint, 1)
		cfg := drainConfig(h)
		cfg.Concurrency, cfg.Backlog = 1, 1
		r := startInMemory(t, cfg, b, srv)
		eventually(t, func() bool { _, ok := b.startedAt("long-0"); return ok }, "long item running")

		noticed := time.Now()
		budget := 800 * time.Millisecond
		h <- worker.Notice{Provider: "test", Deadline: noticed.Add(budget)}
		r.waitRun(t)
		rep, ok := r.w.Drained()
		require.True(t, ok)
		at, ok := b.cancelledAt("long-0")
		require.True(t, ok)
		require.False(t, at.Before(noticed.Add(budget*3/4)), "cancelled %v after the notice, before the cut-off", at.Sub(noticed))
		require.True(t, rep.WithinDeadline(), "drain ended %v after its deadline", rep.Ended.Sub(rep.Deadline))
		require.Equal(t, 1, rep.Cancelled)
		require.True(t, nackReports(srv)["long-0"])
	})
}

// TestDrainForcedBySecondNotice: a second, forcing notice (a second
// SIGTERM) ends a long drain at once, still nacking the in-flight item.
func TestDrainForcedBySecondNotice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.Add(run, sub("long-0", 0), sub("long-1", 1))
		b := newDrainBackend(0)
		h := make(chanHint, 2)
		cfg := drainConfig(h)
		cfg.Concurrency, cfg.Backlog = 1, 2
		r := startInMemory(t, cfg, b, srv)
		eventually(t, func() bool { _, ok := b.startedAt("long-0"); return ok && r.w.Stats().Queued == 1 }, "one running, one queued")

		h <- worker.Notice{Provider: worker.ProviderSignal, Reason: "SIGTERM", Deadline: time.Now().Add(time.Minute)}
		eventually(t, func() bool { return nackReports(srv)["long-1"] }, "drain started: the queued item is nacked")
		forced := time.Now()
		h <- worker.Notice{Provider: worker.ProviderSignal, Reason: "second SIGTERM", Force: true}
		r.waitRun(t)
		rep, ok := r.w.Drained()
		require.True(t, ok)
		require.True(t, rep.Forced)
		require.Less(t, rep.Ended.Sub(forced), 10*time.Second, "a forced drain must not wait for the first deadline")
		require.Equal(t, 1, rep.Cancelled)
		require.True(t, nackReports(srv)["long-0"], "the forced exit still nacks the in-flight item")
		require.Len(t, rep.Nacked, 2)
		require.True(t, rep.Deregistered)
	})
}

// TestNoticeBeforeRegistration: a notice while the coordinator cannot be
// reached ends Run without claiming anything.
func TestNoticeBeforeRegistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.Intercept("Register", func(context.Context, any) (any, error) {
			return nil, status.Error(codes.Unavailable, "no leader yet")
		})
		srv.Add(run, sub("x", 0))
		h := make(chanHint, 1)
		r := startInMemory(t, drainConfig(h), newDrainBackend(0), srv)
		eventually(t, func() bool { return srv.Calls("Register") >= 2 }, "registration retrying")
		h <- worker.Notice{Provider: "test", Deadline: time.Now().Add(5 * time.Second)}
		r.waitRun(t)
		rep, ok := r.w.Drained()
		require.True(t, ok)
		require.True(t, rep.Deregistered)
		require.Zero(t, srv.Calls("Claim"))
	})
}

// TestHintThatCannotStart: Run refuses to start with a hint that fails.
func TestHintThatCannotStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		cfg := testConfig()
		cfg.Hints = []worker.ComputeHint{failingHint{}}
		r := startInMemory(t, cfg, newDrainBackend(0), srv)
		select {
		case err := <-r.done:
			require.ErrorIs(t, err, errNoMetadata)
			r.done <- nil
		case <-time.After(waitFor):
			t.Fatal("Run did not fail")
		}
		require.Zero(t, srv.Heartbeats(wid))
	})
}

// TestClaimsSizedFromThroughput: before anything completed the worker
// claims up to Backlog; once it has measured ~10 items/s it holds only
// ClaimHorizon's worth (at least Concurrency), and its heartbeats carry the
// measured rate.
func TestClaimsSizedFromThroughput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		var mu sync.Mutex
		var sizes []uint32
		var rates []float64
		srv.Intercept("Claim", func(_ context.Context, req any) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			sizes = append(sizes, req.(*rolloutv1.ClaimRequest).GetMaxItems())
			return nil, nil
		})
		srv.Intercept("Heartbeat", func(_ context.Context, req any) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			if r := req.(*rolloutv1.HeartbeatRequest).GetItemsPerSec(); r > 0 {
				rates = append(rates, r)
			}
			return nil, nil
		})
		const n = 24
		for i := range n {
			srv.Add(run, sub(fmtID("warm", i), i))
		}
		cfg := testConfig()
		cfg.Steal = false
		cfg.Concurrency, cfg.Backlog = 2, 8
		cfg.ClaimHorizon = 100 * time.Millisecond
		r := startInMemory(t, cfg, newDrainBackend(200*time.Millisecond), srv)
		eventually(t, func() bool { return srv.Count(coordtest.Done) == n }, "all done")

		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, uint32(8), sizes[0], "first claim: nothing measured, up to Backlog")
		// 2 executors x 200ms = at most 10 items/s; 100ms of it is one item,
		// so the target is Concurrency: later claims ask for at most 2.
		later := 0
		for _, s := range sizes[1:] {
			if s > 2 {
				continue
			}
			later++
		}
		require.Positive(t, later)
		for i, s := range sizes {
			if i > 0 && sizes[i-1] <= 2 {
				require.LessOrEqual(t, s, uint32(2), "claim %d asked for %d after sizing from throughput", i, s)
			}
		}
		require.NotEmpty(t, rates, "heartbeats carry the measured rate")
		for _, rt := range rates {
			require.Less(t, rt, 15.0, "reported %v items/s; 2 executors at 200ms cannot exceed 10", rt)
		}
		require.Equal(t, 2, r.w.Stats().HoldTarget)
	})
}

func TestConfigValidateLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*worker.Config)
		want string
	}{
		{"nil hint", func(c *worker.Config) { c.Hints = []worker.ComputeHint{nil} }, "Hints[0] is nil"},
		{"negative claim horizon", func(c *worker.Config) { c.ClaimHorizon = -time.Second }, "ClaimHorizon must be >= 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.mod(&cfg)
			err := cfg.Validate()
			require.ErrorIs(t, err, worker.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.Equal(t, 25*time.Second, worker.DefaultConfig().DrainTimeout, "SIGTERM drain budget")
}

func TestFormatItemRefs(t *testing.T) {
	refs := []worker.ItemRef{{Run: "r", Index: 1}, {Run: "r", Index: 7}, {Run: "s", Index: 0}}
	require.Equal(t, "r#1 r#7 s#0", worker.FormatItemRefs(refs, 10))
	require.Equal(t, "r#1 r#7 +1 more", worker.FormatItemRefs(refs, 2))
	require.Empty(t, worker.FormatItemRefs(nil, 2))
}

// deregisterReason returns the reason of worker's (only) deregistration
// event in srv's event history.
func deregisterReason(t *testing.T, srv *coordtest.Server, worker string) string {
	t.Helper()
	var reasons []string
	for _, e := range srv.EventLog() {
		if e.GetKind() == rolloutv1.EventKind_EVENT_KIND_WORKER_DEREGISTERED && e.GetWorker() == worker {
			reasons = append(reasons, e.GetDetail())
		}
	}
	require.Len(t, reasons, 1, "deregistrations of %s", worker)
	return reasons[0]
}
