package hint_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/hint"
	"github.com/rollout/rollout/worker/hint/hinttest"
)

const waitFor = 10 * time.Second

func watch(t *testing.T, h worker.ComputeHint) <-chan worker.Notice {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := h.Watch(ctx)
	require.NoError(t, err)
	return ch
}

func receive(t *testing.T, ch <-chan worker.Notice) worker.Notice {
	t.Helper()
	select {
	case n, ok := <-ch:
		require.True(t, ok, "channel closed without a notice")
		return n
	case <-time.After(waitFor):
		t.Fatal("no notice")
	}
	return worker.Notice{}
}

func requireClosed(t *testing.T, ch <-chan worker.Notice) {
	t.Helper()
	select {
	case n, ok := <-ch:
		require.False(t, ok, "unexpected notice %+v", n)
	case <-time.After(waitFor):
		t.Fatal("channel not closed")
	}
}

func requireNone(t *testing.T, ch <-chan worker.Notice) {
	t.Helper()
	select {
	case n := <-ch:
		t.Fatalf("unexpected notice %+v", n)
	default:
	}
}

func awsConfig(url string) hint.AWSConfig {
	cfg := hint.DefaultAWSConfig()
	cfg.BaseURL = url
	cfg.PollInterval = 5 * time.Millisecond
	return cfg
}

func TestAWSSpotInterruption(t *testing.T) {
	fake := hinttest.NewAWS(t)
	a, err := hint.NewAWS(awsConfig(fake.URL()))
	require.NoError(t, err)
	ch := watch(t, a)

	// 404 (no notice) polls deliver nothing.
	require.Eventually(t, func() bool { _, gets, _ := fake.Stats(); return gets >= 3 }, waitFor, time.Millisecond)
	requireNone(t, ch)

	at := time.Now().Add(hint.AWSNoticeLead).Truncate(time.Second)
	fake.Interrupt("terminate", at)
	n := receive(t, ch)
	require.Equal(t, worker.ProviderAWS, n.Provider)
	require.Contains(t, n.Reason, "terminate")
	require.True(t, n.Terminate.Equal(at), "terminate %v, want %v", n.Terminate, at)
	// 120s notice read (almost) whole: the drain budget is 60s, leaving
	// the other 60s as margin.
	require.InDelta(t, hint.AWSDrainBudget.Seconds(), n.Deadline.Sub(n.Received).Seconds(), 1)
	require.True(t, n.Deadline.Before(n.Terminate))
	require.False(t, n.Force)
	requireClosed(t, ch)
	puts, _, refused := fake.Stats()
	require.Equal(t, 1, puts, "one session token for all polls")
	require.Zero(t, refused)
}

func TestAWSTokenRenewedAfter401(t *testing.T) {
	fake := hinttest.NewAWS(t)
	a, err := hint.NewAWS(awsConfig(fake.URL()))
	require.NoError(t, err)
	ch := watch(t, a)
	require.Eventually(t, func() bool { _, gets, _ := fake.Stats(); return gets >= 2 }, waitFor, time.Millisecond)
	fake.RevokeTokens()
	require.Eventually(t, func() bool { puts, _, refused := fake.Stats(); return puts >= 2 && refused >= 1 }, waitFor, time.Millisecond)
	fake.Interrupt("stop", time.Now().Add(time.Minute))
	n := receive(t, ch)
	require.Equal(t, worker.ProviderAWS, n.Provider)
}

func TestAWSScaledBudget(t *testing.T) {
	fake := hinttest.NewAWS(t)
	cfg := awsConfig(fake.URL())
	cfg.Budget = 2 * time.Second // a test scales the budget, not the notice
	a, err := hint.NewAWS(cfg)
	require.NoError(t, err)
	ch := watch(t, a)
	fake.Interrupt("terminate", time.Now().Add(hint.AWSNoticeLead))
	n := receive(t, ch)
	require.InDelta(t, 2, n.Deadline.Sub(n.Received).Seconds(), 0.1)
}

func TestAWSUnreachableRetries(t *testing.T) {
	// A server that is not a metadata service: polls fail and are retried,
	// nothing is delivered, and the channel closes when ctx ends.
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "teapot", http.StatusTeapot)
	}))
	defer srv.Close()
	a, err := hint.NewAWS(awsConfig(srv.URL))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := a.Watch(ctx)
	require.NoError(t, err)
	_, err = a.Watch(ctx)
	require.ErrorIs(t, err, hint.ErrWatching)
	require.Eventually(t, func() bool { return calls.Load() >= 3 }, waitFor, time.Millisecond, "polls retried")
	requireNone(t, ch)
	cancel()
	requireClosed(t, ch)
}

func gcpConfig(url string) hint.GCPConfig {
	cfg := hint.DefaultGCPConfig()
	cfg.BaseURL = url
	cfg.RetryInterval = 5 * time.Millisecond
	return cfg
}

func TestGCPPreemptionWakesLongPoll(t *testing.T) {
	fake := hinttest.NewGCP(t)
	g, err := hint.NewGCP(gcpConfig(fake.URL()))
	require.NoError(t, err)
	ch := watch(t, g)
	// The hint hangs in wait_for_change (a 60s timeout_sec).
	require.Eventually(t, func() bool { _, waiting, _ := fake.Stats(); return waiting == 1 }, waitFor, time.Millisecond)
	requireNone(t, ch)

	preempted := time.Now()
	fake.Preempt()
	n := receive(t, ch)
	require.Less(t, time.Since(preempted), 5*time.Second, "the long poll did not return on the change")
	require.Equal(t, worker.ProviderGCP, n.Provider)
	require.InDelta(t, hint.GCPDrainBudget.Seconds(), n.Deadline.Sub(n.Received).Seconds(), 0.001)
	require.InDelta(t, hint.GCPNoticeLead.Seconds(), n.Terminate.Sub(n.Received).Seconds(), 0.001)
	requireClosed(t, ch)
	requests, _, forbidden := fake.Stats()
	require.Equal(t, 2, requests, "one read, one wait_for_change")
	require.Zero(t, forbidden, "every request carried Metadata-Flavor: Google")
}

func TestGCPAlreadyPreempted(t *testing.T) {
	fake := hinttest.NewGCP(t)
	fake.Preempt()
	g, err := hint.NewGCP(gcpConfig(fake.URL()))
	require.NoError(t, err)
	n := receive(t, watch(t, g))
	require.Equal(t, worker.ProviderGCP, n.Provider)
}

func TestGCPRejectsNonMetadataServer(t *testing.T) {
	// "TRUE" from a server that does not answer Metadata-Flavor: Google
	// (a proxy, a captive portal) is not a notice.
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte("TRUE"))
	}))
	defer srv.Close()
	g, err := hint.NewGCP(gcpConfig(srv.URL))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := g.Watch(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return calls.Load() >= 3 }, waitFor, time.Millisecond, "reads retried")
	requireNone(t, ch)
	cancel()
	requireClosed(t, ch)
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"aws base url", func() error { c := hint.DefaultAWSConfig(); c.BaseURL = "169.254.169.254"; return c.Validate() }(), "BaseURL"},
		{"aws query", func() error { c := hint.DefaultAWSConfig(); c.BaseURL = "http://x/?a=b"; return c.Validate() }(), "BaseURL"},
		{"aws poll", func() error { c := hint.DefaultAWSConfig(); c.PollInterval = 0; return c.Validate() }(), "PollInterval"},
		{"aws ttl", func() error { c := hint.DefaultAWSConfig(); c.TokenTTL = 7 * time.Hour; return c.Validate() }(), "TokenTTL"},
		{"aws budget over lead", func() error { c := hint.DefaultAWSConfig(); c.Budget = 3 * time.Minute; return c.Validate() }(), "Budget"},
		{"gcp wait", func() error { c := hint.DefaultGCPConfig(); c.WaitTimeout = time.Millisecond; return c.Validate() }(), "WaitTimeout"},
		{"gcp lead", func() error { c := hint.DefaultGCPConfig(); c.Lead = 0; return c.Validate() }(), "Lead"},
		{"signal nil", hint.SignalConfig{Signals: []os.Signal{nil}}.Validate(), "Signals[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.err, hint.ErrInvalidConfig)
			require.ErrorContains(t, tc.err, tc.want)
		})
	}
	require.NoError(t, hint.DefaultAWSConfig().Validate())
	require.NoError(t, hint.DefaultGCPConfig().Validate())
	_, err := hint.NewAWS(hint.AWSConfig{})
	require.ErrorIs(t, err, hint.ErrInvalidConfig)
	_, err = hint.NewGCP(hint.GCPConfig{})
	require.ErrorIs(t, err, hint.ErrInvalidConfig)
}

func TestSignal(t *testing.T) {
	s, err := hint.NewSignal(hint.SignalConfig{})
	require.NoError(t, err)
	defer s.Close()
	ch := watch(t, s)
	_, err = s.Watch(context.Background())
	require.ErrorIs(t, err, hint.ErrWatching)

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	n := receive(t, ch)
	require.Equal(t, worker.ProviderSignal, n.Provider)
	require.Equal(t, "received SIGTERM", n.Reason)
	require.True(t, n.Deadline.IsZero(), "the worker's DrainTimeout applies")
	require.False(t, n.Force)

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	n = receive(t, ch)
	require.True(t, n.Force, "a second signal forces the exit")
	requireClosed(t, ch)
}

func TestSignalClosed(t *testing.T) {
	s, err := hint.NewSignal(hint.SignalConfig{Signals: []os.Signal{syscall.SIGUSR1}})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = s.Watch(context.Background())
	require.ErrorIs(t, err, hint.ErrClosed)
}
