package coordclient_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/coordtest"
)

func testConfig(addrs ...string) coordclient.Config {
	cfg := coordclient.DefaultConfig()
	cfg.Addrs = addrs
	cfg.CallTimeout = 2 * time.Second
	cfg.RetryMin = 5 * time.Millisecond
	cfg.RetryMax = 50 * time.Millisecond
	return cfg
}

func newClient(t *testing.T, addrs ...string) *coordclient.Client {
	t.Helper()
	c, err := coordclient.New(testConfig(addrs...))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// deadAddr returns a 127.0.0.1 address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func hb() *rolloutv1.HeartbeatRequest { return &rolloutv1.HeartbeatRequest{WorkerId: "w1"} }

// startFake starts a fake coordinator with worker w1 registered.
func startFake(t *testing.T, id string) *coordtest.Server {
	t.Helper()
	s := coordtest.Start(t, id)
	s.AddWorker("w1")
	return s
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*coordclient.Config)
		wantErr error
		wantMsg string
	}{
		{"ok", func(*coordclient.Config) {}, nil, ""},
		{"zero durations take defaults", func(c *coordclient.Config) { c.CallTimeout, c.RetryMin, c.RetryMax = 0, 0, 0 }, nil, ""},
		{"no addrs", func(c *coordclient.Config) { c.Addrs = nil }, coordclient.ErrNoAddrs, ""},
		{"no port", func(c *coordclient.Config) { c.Addrs = []string{"127.0.0.1"} }, coordclient.ErrInvalidConfig, "Addrs[0]"},
		{"empty host", func(c *coordclient.Config) { c.Addrs = []string{":9000"} }, coordclient.ErrInvalidConfig, "empty host"},
		{"bad port", func(c *coordclient.Config) { c.Addrs = []string{"a:1", "b:http"} }, coordclient.ErrInvalidConfig, "Addrs[1]"},
		{"duplicate", func(c *coordclient.Config) { c.Addrs = []string{"a:1", "a:1"} }, coordclient.ErrInvalidConfig, "twice"},
		{"negative timeout", func(c *coordclient.Config) { c.CallTimeout = -1 }, coordclient.ErrInvalidConfig, "CallTimeout"},
		{"negative retry", func(c *coordclient.Config) { c.RetryMin = -1 }, coordclient.ErrInvalidConfig, "RetryMin"},
		{"max below min", func(c *coordclient.Config) { c.RetryMin, c.RetryMax = time.Second, time.Millisecond }, coordclient.ErrInvalidConfig, "RetryMax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig("127.0.0.1:7000")
			tt.mutate(&cfg)
			err := cfg.Validate()
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.Contains(t, err.Error(), tt.wantMsg)
			_, nerr := coordclient.New(cfg)
			require.ErrorIs(t, nerr, tt.wantErr)
		})
	}
}

func TestEpochGuard(t *testing.T) {
	g := coordclient.NewEpochGuard()
	steps := []struct {
		term     uint64
		stale    bool
		highest  uint64
		rejected uint64
	}{
		{0, true, 0, 1},
		{3, false, 3, 1},
		{3, false, 3, 1},
		{2, true, 3, 2},
		{7, false, 7, 2},
		{0, true, 7, 3},
		{6, true, 7, 4},
		{8, false, 8, 4},
	}
	for i, s := range steps {
		err := g.Observe(s.term)
		if s.stale {
			require.ErrorIs(t, err, coordclient.ErrStaleTerm, "step %d", i)
		} else {
			require.NoError(t, err, "step %d", i)
		}
		require.Equal(t, s.highest, g.Highest(), "step %d", i)
		require.Equal(t, s.rejected, g.Rejected(), "step %d", i)
	}
	err := g.Observe(5)
	require.ErrorContains(t, err, "5")
	require.ErrorContains(t, err, "8")
}

func TestEpochGuardConcurrent(t *testing.T) {
	g := coordclient.NewEpochGuard()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for term := uint64(1); term <= 500; term++ {
				_ = g.Observe(term)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, uint64(500), g.Highest())
	// Every observation was either accepted or counted.
	require.Less(t, g.Rejected(), uint64(8*500))
}

func TestFollowsLeaderHint(t *testing.T) {
	a := startFake(t, "a")
	b := startFake(t, "b")
	a.SetFollower(b.Addr())
	// Only a is configured: reaching b proves the hint was followed.
	c := newClient(t, a.Addr())

	_, err := c.Heartbeat(ctxFor(t, 10*time.Second), hb())
	require.NoError(t, err)
	require.Equal(t, b.Addr(), c.Leader())
	require.Equal(t, 1, a.Calls("Heartbeat"))
	require.Equal(t, 1, b.Calls("Heartbeat"))

	// The next call goes straight to the leader.
	_, err = c.Heartbeat(ctxFor(t, 10*time.Second), hb())
	require.NoError(t, err)
	require.Equal(t, 1, a.Calls("Heartbeat"))
	require.Equal(t, 2, b.Calls("Heartbeat"))
}

func TestRotatesPastUnreachableAndHintless(t *testing.T) {
	tests := []struct {
		name  string
		first func(t *testing.T) string
	}{
		{"connection refused", deadAddr},
		{"unavailable without leader", func(t *testing.T) string {
			s := startFake(t, "a")
			s.SetFollower("")
			return s.Addr()
		}},
		{"unavailable without details", func(t *testing.T) string {
			s := startFake(t, "a")
			s.Intercept("Heartbeat", func(context.Context, any) (any, error) {
				return nil, status.Error(codes.Unavailable, "shutting down")
			})
			return s.Addr()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := tt.first(t)
			b := startFake(t, "b")
			c := newClient(t, first, b.Addr())
			_, err := c.Heartbeat(ctxFor(t, 10*time.Second), hb())
			require.NoError(t, err)
			require.Equal(t, b.Addr(), c.Leader())
			require.Equal(t, 1, b.Calls("Heartbeat"))
		})
	}
}

func TestStaleClaimReplyRejected(t *testing.T) {
	a := startFake(t, "a")
	b := startFake(t, "b")
	a.SetTerm(7)
	b.SetTerm(8)
	c := newClient(t, a.Addr(), b.Addr())

	_, err := c.Heartbeat(ctxFor(t, 10*time.Second), hb())
	require.NoError(t, err)
	require.Equal(t, uint64(7), c.Guard().Highest())

	// a is deposed: its late answer (term 5) hands out an item.
	a.SetTerm(5)
	a.Add("run", &rolloutv1.SubmitItem{Id: []byte("stale"), Index: 0, Payload: []byte(`{}`)})
	b.Add("run", &rolloutv1.SubmitItem{Id: []byte("fresh"), Index: 1, Payload: []byte(`{}`)})

	resp, err := c.Claim(ctxFor(t, 10*time.Second), &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 4, WaitMs: 100})
	require.NoError(t, err)
	require.Len(t, resp.GetItems(), 1)
	require.Equal(t, []byte("fresh"), resp.GetItems()[0].GetId())
	require.Equal(t, uint64(1), c.Guard().Rejected())
	require.Equal(t, uint64(8), c.Guard().Highest())
	require.Equal(t, uint64(1), c.ClaimsInDoubt())
	require.Equal(t, b.Addr(), c.Leader())
}

func TestReplyWithoutTermRejected(t *testing.T) {
	a := startFake(t, "a")
	a.Intercept("Heartbeat", func(context.Context, any) (any, error) {
		return &rolloutv1.HeartbeatResponse{}, nil // no header
	})
	c := newClient(t, a.Addr())
	_, err := c.Heartbeat(ctxFor(t, time.Second), hb())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "stale term")
	require.GreaterOrEqual(t, c.Guard().Rejected(), uint64(1))
	require.Equal(t, uint64(0), c.Guard().Highest())
}

func TestStaleHintNotFollowed(t *testing.T) {
	a := startFake(t, "a")
	b := startFake(t, "b")
	decoy := startFake(t, "decoy")
	a.SetTerm(3)
	a.SetFollower(decoy.Addr())
	b.SetTerm(5)
	c := newClient(t, a.Addr(), b.Addr())
	require.NoError(t, c.Guard().Observe(5))

	_, err := c.Heartbeat(ctxFor(t, 10*time.Second), hb())
	require.NoError(t, err)
	require.Equal(t, 0, decoy.Calls("Heartbeat"))
	require.Equal(t, 1, b.Calls("Heartbeat"))
	require.Equal(t, uint64(1), c.Guard().Rejected())
}

func TestErrorsReturnedAtOnce(t *testing.T) {
	for _, code := range []codes.Code{codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.PermissionDenied, codes.Internal} {
		t.Run(code.String(), func(t *testing.T) {
			a := startFake(t, "a")
			b := startFake(t, "b")
			a.Intercept("Steal", func(context.Context, any) (any, error) {
				return nil, status.Error(code, "nope")
			})
			c := newClient(t, a.Addr(), b.Addr())
			_, err := c.Steal(ctxFor(t, 10*time.Second), &rolloutv1.StealRequest{WorkerId: "w1"})
			require.Error(t, err)
			require.Equal(t, code, status.Code(err))
			require.ErrorContains(t, err, "Steal")
			require.Equal(t, 1, a.Calls("Steal"))
			require.Equal(t, 0, b.Calls("Steal"))
		})
	}
}

func TestRetriesUntilContextEnds(t *testing.T) {
	a := startFake(t, "a")
	a.SetFollower("")
	c := newClient(t, a.Addr(), deadAddr(t))
	start := time.Now()
	_, err := c.Report(ctxFor(t, 1500*time.Millisecond), &rolloutv1.ReportRequest{WorkerId: "w1"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "last attempt")
	require.Less(t, time.Since(start), 10*time.Second)
	require.GreaterOrEqual(t, a.Calls("Report"), 2)
}

func TestOnTermChange(t *testing.T) {
	a := startFake(t, "a")
	c := newClient(t, a.Addr())
	var mu sync.Mutex
	var got [][2]uint64
	c.OnTermChange(func(old, cur uint64) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, [2]uint64{old, cur})
	})
	for _, term := range []uint64{4, 4, 9, 9} {
		a.SetTerm(term)
		_, err := c.Heartbeat(ctxFor(t, 10*time.Second), hb())
		require.NoError(t, err)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, [][2]uint64{{0, 4}, {4, 9}}, got)
}

func TestClaimDeadlineIncludesWait(t *testing.T) {
	a := startFake(t, "a")
	cfg := testConfig(a.Addr())
	cfg.CallTimeout = 200 * time.Millisecond
	c, err := coordclient.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	// Nothing is pending: the fake long-polls the whole wait, longer than
	// CallTimeout alone.
	resp, err := c.Claim(ctxFor(t, 10*time.Second), &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 1, WaitMs: 600})
	require.NoError(t, err)
	require.Empty(t, resp.GetItems())
	require.Equal(t, 1, a.Calls("Claim"))
	require.Equal(t, uint64(0), c.ClaimsInDoubt())
}

func TestCluster(t *testing.T) {
	a := startFake(t, "a")
	b := startFake(t, "b")
	a.SetFollower(b.Addr())
	a.SetTerm(4)
	c := newClient(t, b.Addr())

	resp, err := c.Cluster(ctxFor(t, 10*time.Second), a.Addr())
	require.NoError(t, err)
	require.Equal(t, rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER, resp.GetState())
	require.Equal(t, 0, b.Calls("Cluster"))

	b.SetTerm(4)
	resp, err = c.Cluster(ctxFor(t, 10*time.Second), "")
	require.NoError(t, err)
	require.Equal(t, rolloutv1.ReplicaState_REPLICA_STATE_LEADER, resp.GetState())
	require.Equal(t, 1, b.Calls("Cluster"))

	_, err = c.Cluster(ctxFor(t, 10*time.Second), "nonsense")
	require.ErrorIs(t, err, coordclient.ErrBadAddr)

	// A lagging replica's view (term 2 < 4) is still shown: Cluster is a
	// local view that decides nothing, so it neither passes nor moves the
	// epoch guard.
	b.SetTerm(2)
	resp, err = c.Cluster(ctxFor(t, 10*time.Second), b.Addr())
	require.NoError(t, err)
	require.Equal(t, uint64(2), resp.GetHeader().GetTerm())
	require.Zero(t, c.Guard().Highest())
	require.Zero(t, c.Guard().Rejected())
}

func TestNilRequestAndClosed(t *testing.T) {
	a := startFake(t, "a")
	c, err := coordclient.New(testConfig(a.Addr()))
	require.NoError(t, err)
	_, err = c.Report(ctxFor(t, time.Second), nil)
	require.ErrorIs(t, err, coordclient.ErrNilRequest)
	require.Equal(t, 0, a.Calls("Report"))

	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	_, err = c.Heartbeat(ctxFor(t, time.Second), hb())
	require.ErrorIs(t, err, coordclient.ErrClosed)
	_, err = c.Cluster(ctxFor(t, time.Second), "")
	require.True(t, errors.Is(err, coordclient.ErrClosed))
}

func TestConcurrentCallsDuringFailover(t *testing.T) {
	a := startFake(t, "a")
	b := startFake(t, "b")
	b.SetFollower(a.Addr())
	// After 40 calls, a holds every call until the failover is done, so
	// that all eight callers are in flight across it.
	failover := make(chan struct{})
	var arrived atomic.Int32
	a.Intercept("Heartbeat", func(ctx context.Context, _ any) (any, error) {
		if arrived.Add(1) > 40 {
			select {
			case <-failover:
			case <-ctx.Done():
			}
		}
		return nil, nil
	})
	// A call timeout longer than the wait below: a held call that timed out
	// would be retried and counted again, so the count could pass 48
	// before the wait saw it on a busy machine.
	cfg := testConfig(a.Addr(), b.Addr())
	cfg.CallTimeout = 30 * time.Second
	c, err := coordclient.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	var wg sync.WaitGroup
	errs := make(chan error, 8*20)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				_, err := c.Heartbeat(ctxFor(t, 60*time.Second), hb())
				errs <- err
			}
		}()
	}
	// Fail over half-way: a points at b, b leads at a higher term.
	require.Eventually(t, func() bool { return arrived.Load() >= 48 }, 30*time.Second, time.Millisecond)
	require.Equal(t, int32(48), arrived.Load(), "a held call was retried before the failover")
	b.SetTerm(2)
	b.SetLeader()
	a.SetFollower(b.Addr())
	close(failover)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, b.Addr(), c.Leader())
	require.Equal(t, uint64(2), c.Guard().Highest())
}

// TestNotRegistered: a Claim, Steal or Heartbeat from an unregistered worker
// fails at once with ErrNotRegistered (the FAILED_PRECONDITION status kept);
// after Register they pass; EvictWorker of an unknown worker is NOT_FOUND,
// and an evicted worker is not registered again until it registers.
func TestNotRegistered(t *testing.T) {
	a := coordtest.Start(t, "a")
	c := newClient(t, a.Addr())
	ctx := ctxFor(t, 10*time.Second)
	calls := map[string]func() error{
		"Claim": func() error {
			_, err := c.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 1, WaitMs: 10})
			return err
		},
		"Steal": func() error {
			_, err := c.Steal(ctx, &rolloutv1.StealRequest{WorkerId: "w1"})
			return err
		},
		"Heartbeat": func() error { _, err := c.Heartbeat(ctx, hb()); return err },
	}
	for name, call := range calls {
		err := call()
		require.ErrorIs(t, err, coordclient.ErrNotRegistered, name)
		require.Equal(t, codes.FailedPrecondition, status.Code(err), name)
		require.Contains(t, err.Error(), "Register", name)
		require.Equal(t, 1, a.Calls(name), "%s is not retried", name)
	}
	_, err := c.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "w1"})
	require.NoError(t, err)
	require.True(t, a.Registered("w1"))
	for name, call := range calls {
		require.NoError(t, call(), name)
	}

	// A steal refused for a busy thief is FAILED_PRECONDITION too, but not
	// "not registered".
	_, err = c.Steal(ctx, &rolloutv1.StealRequest{WorkerId: "w1", Backlog: 3})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	require.NotErrorIs(t, err, coordclient.ErrNotRegistered)

	_, err = c.EvictWorker(ctx, &rolloutv1.EvictWorkerRequest{WorkerId: "nobody"})
	require.Equal(t, codes.NotFound, status.Code(err))
	a.Assign("w1", 1, "r", &rolloutv1.SubmitItem{Id: []byte("i1")})
	ev, err := c.EvictWorker(ctx, &rolloutv1.EvictWorkerRequest{WorkerId: "w1"})
	require.NoError(t, err)
	require.Equal(t, uint64(1), ev.GetRepended())
	require.ErrorIs(t, calls["Heartbeat"](), coordclient.ErrNotRegistered)
}
