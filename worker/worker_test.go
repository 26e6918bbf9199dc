package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/mock"
)

const (
	wid     = "w1"
	run     = "run"
	waitFor = 15 * time.Second
	tick    = 5 * time.Millisecond
)

// recorder wraps a backend function and records which items started.
type recorder struct {
	fn func(ctx context.Context, it worker.Item) ([]byte, error)

	mu      sync.Mutex
	started map[string]int
}

func newRecorder(fn func(ctx context.Context, it worker.Item) ([]byte, error)) *recorder {
	return &recorder{fn: fn, started: make(map[string]int)}
}

func (r *recorder) Run(ctx context.Context, it worker.Item) ([]byte, error) {
	r.mu.Lock()
	r.started[string(it.ID)]++
	r.mu.Unlock()
	return r.fn(ctx, it)
}

func (r *recorder) Started(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started[id]
}

var _ worker.Backend = (*recorder)(nil)

func mockFn(t *testing.T) func(context.Context, worker.Item) ([]byte, error) {
	b, err := mock.New(mock.DefaultConfig())
	require.NoError(t, err)
	return b.Run
}

func sub(id string, i int) *rolloutv1.SubmitItem {
	return &rolloutv1.SubmitItem{Id: []byte(id), Index: uint64(i), Payload: []byte(fmt.Sprintf(`{"prompt":%q}`, id))}
}

func subs(n int) []*rolloutv1.SubmitItem {
	out := make([]*rolloutv1.SubmitItem, n)
	for i := range out {
		out[i] = sub(fmt.Sprintf("item-%03d", i), i)
	}
	return out
}

func testConfig() worker.Config {
	cfg := worker.DefaultConfig()
	cfg.ID = wid
	cfg.Concurrency = 4
	cfg.ClaimWait = 100 * time.Millisecond
	cfg.HeartbeatInterval = 20 * time.Millisecond
	cfg.ReportInterval = 5 * time.Millisecond
	cfg.DrainTimeout = 5 * time.Second
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.DataFaultBackoff = 10 * time.Millisecond
	cfg.DataFaultMaxBackoff = 40 * time.Millisecond
	return cfg
}

type running struct {
	w      *worker.Worker
	client *coordclient.Client
	cancel context.CancelFunc
	done   chan error
}

// start runs a worker against addrs until the test ends (or stop).
func start(t *testing.T, cfg worker.Config, b worker.Backend, addrs ...string) *running {
	t.Helper()
	return startWith(t, cfg, b, nil, addrs...)
}

// startInMemory runs a worker against srv, a coordtest.StartInMemory
// server, until the test ends (or stop). Started inside a synctest bubble,
// the worker, its client and the server all run on the bubble's fake clock.
func startInMemory(t *testing.T, cfg worker.Config, b worker.Backend, srv *coordtest.Server) *running {
	t.Helper()
	return startWith(t, cfg, b, srv.Dial, srv.Addr())
}

func startWith(t *testing.T, cfg worker.Config, b worker.Backend, dial func(context.Context, string) (net.Conn, error), addrs ...string) *running {
	t.Helper()
	ccfg := coordclient.DefaultConfig()
	ccfg.Addrs = addrs
	ccfg.RetryMin, ccfg.RetryMax = 5*time.Millisecond, 50*time.Millisecond
	ccfg.CallTimeout = 5 * time.Second
	ccfg.Dial = dial
	client, err := coordclient.New(ccfg)
	require.NoError(t, err)
	w, err := worker.New(cfg, client, b)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{w: w, client: client, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(waitFor):
			t.Error("worker did not stop")
		}
		_ = client.Close()
	})
	return r
}

// stop cancels the worker and requires Run to return nil.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		require.NoError(t, err)
		r.done <- nil // for the cleanup
	case <-time.After(waitFor):
		t.Fatal("Run did not return after cancel")
	}
}

func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, waitFor, tick, append([]any{msg}, args...)...)
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*worker.Config)
		msg    string
	}{
		{"ok", func(*worker.Config) {}, ""},
		{"zeros take defaults", func(c *worker.Config) { *c = worker.Config{ID: "x"} }, ""},
		{"no id", func(c *worker.Config) { c.ID = "" }, "ID is required"},
		{"space in id", func(c *worker.Config) { c.ID = "a b" }, "space or control"},
		{"negative concurrency", func(c *worker.Config) { c.Concurrency = -1 }, "Concurrency"},
		{"backlog below concurrency", func(c *worker.Config) { c.Concurrency, c.Backlog = 8, 4 }, "Backlog (4) must be >= Concurrency (8)"},
		{"negative heartbeat", func(c *worker.Config) { c.HeartbeatInterval = -time.Second }, "HeartbeatInterval"},
		{"tiny claim wait", func(c *worker.Config) { c.ClaimWait = time.Microsecond }, "ClaimWait"},
		{"tiny report interval", func(c *worker.Config) { c.ReportInterval = time.Nanosecond }, "ReportInterval must be at least 1ms"},
		{"long id", func(c *worker.Config) { c.ID = strings.Repeat("w", 129) }, "at most 128 bytes"},
		{"invalid utf8 id", func(c *worker.Config) { c.ID = "w\xff" }, "UTF-8"},
		{"negative batch", func(c *worker.Config) { c.MaxReportBatch = -1 }, "MaxReportBatch"},
		{"negative unreported bound", func(c *worker.Config) { c.MaxUnreportedBytes = -1 }, "MaxUnreportedBytes must be >= 0"},
		{"models", func(c *worker.Config) { c.Models = []string{"Qwen/Qwen2.5-0.5B-Instruct", "llama"} }, ""},
		{"empty model", func(c *worker.Config) { c.Models = []string{"a", ""} }, "Models[1] is empty"},
		{"long model", func(c *worker.Config) { c.Models = []string{strings.Repeat("m", 1025)} }, "Models[0] is 1025 bytes, limit 1024"},
		{"non-printable model", func(c *worker.Config) { c.Models = []string{"a\tb"} }, "Models[0] \"a\\tb\" is not printable"},
		{"too many models", func(c *worker.Config) { c.Models = make([]string, 257) }, "Models names 257 models, limit 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			if tt.msg == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, worker.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.msg)
		})
	}

	client, err := coordclient.New(coordclient.Config{Addrs: []string{"127.0.0.1:1"}})
	require.NoError(t, err)
	defer client.Close()
	_, err = worker.New(testConfig(), nil, newRecorder(nil))
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
	_, err = worker.New(testConfig(), client, nil)
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
}

func TestProcessesAllItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		var mu sync.Mutex
		maxRate := 0.0
		srv.Intercept("Heartbeat", func(_ context.Context, req any) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			maxRate = max(maxRate, req.(*rolloutv1.HeartbeatRequest).GetItemsPerSec())
			return nil, nil
		})
		srv.Add(run, subs(60)...)
		b, err := mock.New(mock.Config{Latency: time.Millisecond})
		require.NoError(t, err)
		r := startInMemory(t, testConfig(), b, srv)

		eventually(t, func() bool { return srv.Count(coordtest.Done) == 60 }, "all items done")
		for _, it := range srv.Items() {
			want, err := b.Run(context.Background(), worker.Item{Payload: it.Payload})
			require.NoError(t, err)
			require.Equal(t, string(want), string(it.Result))
		}
		eventually(t, func() bool { return r.w.Stats().Completed == 60 }, "completions counted")
		eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return maxRate > 0
		}, "heartbeat carries a measured rate")
		st := r.w.Stats()
		require.Equal(t, uint64(60), st.Claimed)
		require.Positive(t, st.ItemsPerSec)
		require.Zero(t, st.Dropped)

		r.stop(t)
		require.Equal(t, 1, srv.Calls("Deregister"))
		require.Equal(t, "shutdown; finished 0, nacked 0", deregisterReason(t, srv, wid))
		st = r.w.Stats()
		require.Zero(t, st.Held)
		require.Zero(t, st.Nacked)
	})
}

func TestStaleClaimReplyNeverReachesBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.SetTerm(5)
		var once sync.Once
		srv.Intercept("Claim", func(context.Context, any) (any, error) {
			var resp any
			once.Do(func() {
				// A deposed leader's late long-poll answer handing out work.
				resp = &rolloutv1.ClaimResponse{
					Header: &rolloutv1.ReplyHeader{Term: 4},
					Items:  []*rolloutv1.Item{{Run: run, Id: []byte("stale"), Payload: []byte(`{"prompt":"x"}`), Attempt: 1}},
				}
			})
			return resp, nil
		})
		srv.Add(run, sub("good", 0))
		rec := newRecorder(mockFn(t))
		r := startInMemory(t, testConfig(), rec, srv)

		eventually(t, func() bool { return srv.Count(coordtest.Done) == 1 }, "good item done")
		st := r.w.Stats()
		require.GreaterOrEqual(t, st.StaleRepliesRejected, uint64(1))
		require.Equal(t, 0, rec.Started("stale"))
		require.Equal(t, 1, rec.Started("good"))
		// The rejected claim's outcome is unknown: the worker reconciled.
		eventually(t, func() bool { return srv.Calls("OwnedItems") >= 2 }, "reconciled after the rejected claim")
		r.stop(t)
		require.Equal(t, 0, rec.Started("stale"))
	})
}

func TestReportRetriedAfterError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		var mu sync.Mutex
		failures := 2
		srv.Intercept("Report", func(context.Context, any) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			if failures > 0 {
				failures--
				return nil, status.Error(codes.Internal, "disk on fire")
			}
			return nil, nil
		})
		srv.Add(run, subs(5)...)
		r := startInMemory(t, testConfig(), newRecorder(mockFn(t)), srv)

		eventually(t, func() bool { return srv.Count(coordtest.Done) == 5 }, "all items done")
		eventually(t, func() bool { return r.w.Stats().Completed == 5 }, "completions counted")
		st := r.w.Stats()
		require.Equal(t, uint64(2), st.ReportErrors)
		require.Zero(t, st.Held)
	})
}

func TestCASMissDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		var mu sync.Mutex
		missReports := 0
		srv.Intercept("Report", func(ctx context.Context, req any) (any, error) {
			in := req.(*rolloutv1.ReportRequest)
			rest := &rolloutv1.ReportRequest{WorkerId: in.GetWorkerId()}
			resp := &rolloutv1.ReportResponse{Header: srv.Header()}
			for _, rep := range in.GetReports() {
				if string(rep.GetId()) != "item-001" {
					rest.Reports = append(rest.Reports, rep)
					continue
				}
				// Someone else took it first (as a steal would).
				mu.Lock()
				missReports++
				mu.Unlock()
				srv.Assign("other", rep.GetAttempt()+1, run, sub("item-001", 1))
				resp.Results = append(resp.Results, &rolloutv1.ReportResult{Id: rep.GetId(), Status: rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS})
			}
			if len(rest.GetReports()) > 0 {
				applied, err := srv.Report(ctx, rest)
				if err != nil {
					return nil, err
				}
				resp.Results = append(resp.Results, applied.GetResults()...)
			}
			return resp, nil
		})
		srv.Add(run, subs(3)...)
		rec := newRecorder(mockFn(t))
		r := startInMemory(t, testConfig(), rec, srv)

		eventually(t, func() bool { return srv.Count(coordtest.Done) == 2 }, "other items done")
		eventually(t, func() bool { return r.w.Stats().Dropped == 1 }, "cas miss dropped")
		eventually(t, func() bool { return r.w.Stats().Held == 0 }, "nothing held")
		r.stop(t)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 1, missReports, "a dropped item is not reported again")
		require.Equal(t, 1, rec.Started("item-001"))
		it, ok := srv.Item(run, []byte("item-001"))
		require.True(t, ok)
		require.Equal(t, "other", it.Owner)
	})
}

func TestLostQueuedItemsNeverStart(t *testing.T) {
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
		srv.Add(run, sub("first", 0), sub("a", 1), sub("b", 2), sub("c", 3))
		cfg := testConfig()
		cfg.Concurrency, cfg.Backlog = 1, 4
		r := startInMemory(t, cfg, rec, srv)

		eventually(t, func() bool { return rec.Started("first") == 1 && r.w.Stats().Queued == 3 }, "first executing, three queued")
		// The ledger gives a and b to another worker.
		for _, id := range []string{"a", "b"} {
			it, ok := srv.Item(run, []byte(id))
			require.True(t, ok)
			srv.Assign("thief", it.Attempt+1, run, sub(id, int(it.Index)))
		}
		eventually(t, func() bool { return r.w.Stats().Dropped == 2 }, "lost items dropped")
		close(release)
		eventually(t, func() bool { return srv.Count(coordtest.Done) == 2 }, "first and c done")
		r.stop(t)
		require.Equal(t, 0, rec.Started("a"))
		require.Equal(t, 0, rec.Started("b"))
		require.Equal(t, 1, rec.Started("c"))
		for _, rep := range srv.Reports() {
			require.NotContains(t, []string{"a", "b"}, string(rep.GetId()))
		}
	})
}

func TestLostExecutingItemCancelledNotReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		cancelled := make(chan struct{})
		rec := newRecorder(func(ctx context.Context, it worker.Item) ([]byte, error) {
			<-ctx.Done()
			close(cancelled)
			return nil, ctx.Err()
		})
		srv.Add(run, sub("slow", 0))
		r := startInMemory(t, testConfig(), rec, srv)

		eventually(t, func() bool { return srv.Executing(wid) == 1 }, "heartbeat lists the executing item")
		it, _ := srv.Item(run, []byte("slow"))
		srv.Assign("thief", it.Attempt+1, run, sub("slow", 0))
		select {
		case <-cancelled:
		case <-time.After(waitFor):
			t.Fatal("lost executing item was not cancelled")
		}
		eventually(t, func() bool { return r.w.Stats().Dropped == 1 && r.w.Stats().Held == 0 }, "dropped")
		r.stop(t)
		require.Empty(t, srv.Reports())
		it, _ = srv.Item(run, []byte("slow"))
		require.Equal(t, coordtest.Running, it.State)
		require.Equal(t, "thief", it.Owner)
	})
}

func TestAdoptsOwnedItemsAfterTermChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		rec := newRecorder(mockFn(t))
		r := startInMemory(t, testConfig(), rec, srv)
		eventually(t, func() bool { return srv.Calls("Claim") >= 1 }, "worker claiming")
		owned := srv.Calls("OwnedItems")

		// A failover: the new leader's ledger says w1 owns an item it never saw.
		srv.Assign(wid, 3, run, sub("orphan", 0))
		srv.SetTerm(2)

		eventually(t, func() bool { return srv.Count(coordtest.Done) == 1 }, "adopted item done")
		st := r.w.Stats()
		require.Equal(t, uint64(1), st.Adopted)
		require.Equal(t, uint64(2), st.Term)
		require.Greater(t, srv.Calls("OwnedItems"), owned)
		reps := srv.Reports()
		require.Len(t, reps, 1)
		require.Equal(t, uint64(3), reps[0].GetAttempt())
		r.stop(t)
	})
}

func TestAdoptsOwnedItemsAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.Assign(wid, 2, run, sub("mine", 0))
		srv.Assign("other", 1, run, sub("theirs", 1))
		rec := newRecorder(mockFn(t))
		cfg := testConfig()
		cfg.Steal = false
		r := startInMemory(t, cfg, rec, srv)
		eventually(t, func() bool { return r.w.Stats().Completed == 1 }, "restarted worker finished its item")
		require.Equal(t, 0, rec.Started("theirs"))
		require.Equal(t, uint64(1), r.w.Stats().Adopted)
	})
}

func TestStealsWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.Assign("victim", 1, run, subs(6)...)
		rec := newRecorder(mockFn(t))
		r := startInMemory(t, testConfig(), rec, srv)

		eventually(t, func() bool { return srv.Count(coordtest.Done) == 6 }, "stolen items done")
		eventually(t, func() bool { return r.w.Stats().Completed == 6 }, "completions counted")
		st := r.w.Stats()
		require.Equal(t, uint64(6), st.Stolen)
		require.Zero(t, st.Claimed)
		for _, rep := range srv.Reports() {
			require.Equal(t, uint64(2), rep.GetAttempt(), "steal bumps the attempt")
		}
	})
}

// TestIdleWorkerStealsBeforeLongPolling: an idle worker with nothing
// pending steals at once (a claim that does not wait, then Steal) instead
// of after a whole claim long poll: with ClaimWait a minute, the straggler's
// items are in hand within a second of the bubble's virtual time (the
// test server caps a long poll at 10 s).
func TestIdleWorkerStealsBeforeLongPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.Assign("victim", 1, run, subs(6)...)
		cfg := testConfig()
		cfg.ClaimWait = time.Minute
		start := time.Now()
		r := startInMemory(t, cfg, newRecorder(mockFn(t)), srv)
		eventually(t, func() bool { return r.w.Stats().Stolen > 0 }, "items stolen")
		require.Less(t, time.Since(start), time.Second, "the worker long-polled before it stole")
	})
}

func TestNoStealWhenDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.Assign("victim", 1, run, subs(2)...)
		cfg := testConfig()
		cfg.Steal = false
		startInMemory(t, cfg, newRecorder(mockFn(t)), srv)
		eventually(t, func() bool { return srv.Calls("Claim") >= 3 }, "several empty claims")
		require.Zero(t, srv.Calls("Steal"))
	})
}

func TestGracefulStopNacksUnstarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		rec := newRecorder(func(ctx context.Context, it worker.Item) ([]byte, error) {
			<-ctx.Done() // never finishes on its own
			return nil, ctx.Err()
		})
		srv.Add(run, subs(4)...)
		cfg := testConfig()
		cfg.Concurrency, cfg.Backlog = 1, 4
		cfg.DrainTimeout = 100 * time.Millisecond
		r := startInMemory(t, cfg, rec, srv)
		eventually(t, func() bool { st := r.w.Stats(); return st.Executing == 1 && st.Queued == 3 }, "one running, three queued")

		r.stop(t)
		require.Equal(t, 4, srv.Count(coordtest.Pending), "everything handed back")
		reps := srv.Reports()
		require.Len(t, reps, 4)
		for _, rep := range reps {
			require.Equal(t, rolloutv1.Outcome_OUTCOME_NACK, rep.GetOutcome())
		}
		require.Equal(t, 1, rec.Started("item-000"))
		for _, id := range []string{"item-001", "item-002", "item-003"} {
			require.Equal(t, 0, rec.Started(id), id)
		}
		st := r.w.Stats()
		require.Equal(t, uint64(4), st.Nacked)
		require.Equal(t, 1, srv.Calls("Deregister"))
	})
}

func TestGracefulStopFinishesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		release := make(chan struct{})
		rec := newRecorder(func(ctx context.Context, it worker.Item) ([]byte, error) {
			select {
			case <-release:
				return []byte(`{"done":true}`), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		srv.Add(run, subs(3)...)
		cfg := testConfig()
		cfg.Concurrency, cfg.Backlog = 1, 3
		cfg.DrainTimeout = waitFor
		r := startInMemory(t, cfg, rec, srv)
		eventually(t, func() bool { st := r.w.Stats(); return st.Executing == 1 && st.Queued == 2 }, "one running, two queued")

		r.cancel()
		eventually(t, func() bool { return srv.Count(coordtest.Pending) == 2 }, "queued items nacked while the in-flight one drains")
		close(release)
		r.stop(t)
		require.Equal(t, 1, srv.Count(coordtest.Done))
		require.Equal(t, uint64(1), r.w.Stats().Completed)
		require.Equal(t, uint64(2), r.w.Stats().Nacked)
	})
}

func TestBackendFailuresReported(t *testing.T) {
	tests := []struct {
		name   string
		fn     func(context.Context, worker.Item) ([]byte, error)
		reason string
	}{
		{"error", func(context.Context, worker.Item) ([]byte, error) { return nil, errors.New("boom") }, "boom"},
		{"not an object", func(context.Context, worker.Item) ([]byte, error) { return []byte(`[1]`), nil }, "not a JSON object"},
		{"panic", func(context.Context, worker.Item) ([]byte, error) { panic("kaput") }, "backend panicked: kaput"},
		{"bad payload", nil, `no "prompt"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
				fn := tt.fn
				if fn == nil {
					fn = mockFn(t)
				}
				srv.Add(run, &rolloutv1.SubmitItem{Id: []byte("x"), Payload: []byte(`{"text":"no prompt"}`)})
				r := startInMemory(t, testConfig(), newRecorder(fn), srv)
				eventually(t, func() bool { return srv.Count(coordtest.Dead) == 1 }, "item dead after retries")
				it, _ := srv.Item(run, []byte("x"))
				require.Contains(t, it.Reason, tt.reason)
				eventually(t, func() bool { return r.w.Stats().Failed == coordtest.MaxFailures }, "failures counted")
			})
		})
	}
}

func TestRegistrationRefused(t *testing.T) {
	srv := coordtest.Start(t, "a")
	srv.Intercept("Register", func(context.Context, any) (any, error) {
		return nil, status.Error(codes.PermissionDenied, "certificate names w2")
	})
	client, err := coordclient.New(coordclient.Config{Addrs: []string{srv.Addr()}})
	require.NoError(t, err)
	defer client.Close()
	w, err := worker.New(testConfig(), client, newRecorder(mockFn(t)))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	err = w.Run(ctx)
	require.Error(t, err)
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.ErrorContains(t, err, "register")
	require.Zero(t, srv.Calls("Claim"))
	require.ErrorIs(t, w.Run(ctx), worker.ErrAlreadyRun)
}

func TestFollowsLeaderAcrossFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		b := coordtest.StartInMemory(t, "b", "127.0.0.1:2")
		b.SetFollower(a.Addr())
		a.Add(run, subs(3)...)
		dial := func(ctx context.Context, addr string) (net.Conn, error) {
			if addr == a.Addr() {
				return a.Dial(ctx, addr)
			}
			return b.Dial(ctx, addr)
		}
		r := startWith(t, testConfig(), newRecorder(mockFn(t)), dial, b.Addr(), a.Addr())
		eventually(t, func() bool { return a.Count(coordtest.Done) == 3 }, "done at a")

		// Fail over to b (with the same ledger content for what matters here).
		b.Add(run, sub("after", 10))
		b.SetTerm(2)
		b.SetLeader()
		a.SetFollower(b.Addr())
		eventually(t, func() bool { return b.Count(coordtest.Done) == 1 }, "done at b")
		require.Equal(t, b.Addr(), r.client.Leader())
		require.Equal(t, uint64(2), r.w.Stats().Term)
	})
}

func TestPeriodicReconcileAdopts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		cfg := testConfig()
		cfg.ReconcileInterval = 100 * time.Millisecond
		cfg.Steal = false
		r := startInMemory(t, cfg, newRecorder(mockFn(t)), srv)
		eventually(t, func() bool { return srv.Calls("Claim") >= 1 }, "worker claiming")

		// A claim committed after its caller gave up: no term change, no error.
		srv.Assign(wid, 1, run, sub("late", 0))
		eventually(t, func() bool { return srv.Count(coordtest.Done) == 1 }, "periodic reconciliation adopted it")
		require.Equal(t, uint64(1), r.w.Stats().Adopted)
	})
}

func TestReconcileDoesNotResurrectReportedItems(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		release := make(chan struct{})
		rec := newRecorder(func(ctx context.Context, it worker.Item) ([]byte, error) {
			select {
			case <-release:
				return []byte(`{"ok":true}`), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		ready := make(chan *running, 1)
		var once sync.Once
		srv.Intercept("OwnedItems", func(ctx context.Context, req any) (any, error) {
			if rec.Started("x") != 1 {
				return nil, nil
			}
			var resp any
			var err error
			once.Do(func() {
				// Read the ledger while x is still Running(w1), then let x
				// finish and be reported before the answer arrives.
				resp, err = srv.OwnedItems(ctx, req.(*rolloutv1.OwnedItemsRequest))
				close(release)
				r := <-ready
				deadline := time.Now().Add(waitFor)
				for r.w.Stats().Completed != 1 && time.Now().Before(deadline) {
					time.Sleep(tick)
				}
			})
			return resp, err
		})
		srv.Add(run, sub("x", 0))
		cfg := testConfig()
		cfg.ReconcileInterval = 50 * time.Millisecond
		cfg.Steal = false
		r := startInMemory(t, cfg, rec, srv)
		ready <- r
		eventually(t, func() bool { return r.w.Stats().Completed == 1 }, "x reported")
		calls := srv.Calls("OwnedItems")
		eventually(t, func() bool { return srv.Calls("OwnedItems") >= calls+2 }, "more reconciliations")
		require.Equal(t, 1, rec.Started("x"), "a reported item is not run again")
		require.Zero(t, r.w.Stats().Adopted)
	})
}

func TestClaimErrorTriggersReconcile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		var once sync.Once
		srv.Intercept("Claim", func(context.Context, any) (any, error) {
			var err error
			once.Do(func() {
				// The claim went through but its answer was lost.
				srv.Assign(wid, 1, run, sub("unseen", 0))
				err = status.Error(codes.Internal, "connection reset after commit")
			})
			return nil, err
		})
		cfg := testConfig()
		cfg.ReconcileInterval = time.Hour // only the error may trigger it
		r := startInMemory(t, cfg, newRecorder(mockFn(t)), srv)
		eventually(t, func() bool { return srv.Count(coordtest.Done) == 1 }, "unseen item adopted and done")
		require.Equal(t, uint64(1), r.w.Stats().Adopted)
	})
}

func TestReconcileFailureDoesNotStopClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.Intercept("OwnedItems", func(context.Context, any) (any, error) {
			return nil, status.Error(codes.Unimplemented, "old coordinator")
		})
		srv.Add(run, subs(3)...)
		r := startInMemory(t, testConfig(), newRecorder(mockFn(t)), srv)
		eventually(t, func() bool { return srv.Count(coordtest.Done) == 3 }, "items done without reconciliation")
		eventually(t, func() bool { return r.w.Stats().Completed == 3 }, "completions counted")
	})
}

// TestReregistersAfterEviction: the coordinator evicts the worker while it
// executes one item and holds three more; the worker learns it is not
// registered (heartbeat or claim), registers again, drops what it no longer
// owns (its in-flight item is cancelled, never reported under the old
// attempt), claims the re-pended items anew and completes every item once.
func TestReregistersAfterEviction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := coordtest.StartInMemory(t, "a", "127.0.0.1:1")
		srv.Add(run, subs(4)...)
		release := make(chan struct{})
		b := newRecorder(func(ctx context.Context, it worker.Item) ([]byte, error) {
			select {
			case <-release:
				return []byte(`{"ok":true}`), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		cfg := testConfig()
		cfg.Concurrency = 1
		cfg.Backlog = 4
		r := startInMemory(t, cfg, b, srv)
		eventually(t, func() bool { return srv.Count(coordtest.Running) == 4 && r.w.Stats().Executing == 1 }, "4 held, 1 executing")

		require.Equal(t, 4, srv.Evict(wid))
		eventually(t, func() bool { return r.w.Stats().Reregistered >= 1 && srv.Registered(wid) }, "registered again")
		close(release)
		eventually(t, func() bool { return srv.Count(coordtest.Done) == 4 }, "every item done")
		for _, it := range srv.Items() {
			require.Equal(t, uint64(2), it.Attempt, "item %s claimed again after the eviction", it.ID)
		}
		require.Positive(t, r.w.Stats().Dropped, "the evicted ownerships were dropped")
		// The ledger records Done before the worker has read the reply to its
		// report: wait for the worker's own count.
		eventually(t, func() bool { return r.w.Stats().Completed == 4 }, "the worker counted 4 completions")
		require.Equal(t, uint64(4), r.w.Stats().Completed, "no completion counted twice")
		r.stop(t)
	})
}
