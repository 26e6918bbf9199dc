package coordclient_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/coordtest"
)

// TestOnRetrySeesEveryRetriedAttempt: OnRetry is told of each failed
// attempt with its address, error and running count, the client rotating
// through the addresses; a non-nil return ends the call at once with it.
func TestOnRetrySeesEveryRetriedAttempt(t *testing.T) {
	a, b := deadAddr(t), deadAddr(t)
	stop := errors.New("enough")
	var mu sync.Mutex
	var seen []coordclient.RetryEvent
	cfg := testConfig(a, b)
	cfg.OnRetry = func(ev coordclient.RetryEvent) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, ev)
		if ev.Failures == 3 {
			return stop
		}
		return nil
	}
	c, err := coordclient.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	_, err = c.Heartbeat(ctxFor(t, 20*time.Second), hb())
	require.ErrorIs(t, err, stop)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 3)
	for i, ev := range seen {
		require.Equal(t, "Heartbeat", ev.Method)
		require.Equal(t, i+1, ev.Failures)
		require.Equal(t, []string{a, b}[i%2], ev.Addr, "the client rotates through the addresses")
		require.ErrorContains(t, ev.Err, "connection refused")
	}
}

// TestClusterAnyWaitsForAReplica: Cluster(ctx, "") retries until a replica
// listens, where Cluster(ctx, addr) makes one attempt.
func TestClusterAnyWaitsForAReplica(t *testing.T) {
	addr := deadAddr(t)
	retried := make(chan struct{}, 1)
	cfg := testConfig(addr)
	cfg.OnRetry = func(coordclient.RetryEvent) error {
		select {
		case retried <- struct{}{}:
		default:
		}
		return nil
	}
	c, err := coordclient.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	_, err = c.Cluster(ctxFor(t, 20*time.Second), addr)
	require.ErrorContains(t, err, "connection refused", "one attempt at a named replica")

	type answer struct {
		id  string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := c.Cluster(ctxFor(t, 30*time.Second), "")
		done <- answer{resp.GetHeader().GetReplicaId(), err}
	}()
	<-retried
	coordtest.StartAt(t, "late", addr)
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, "late", got.id)
}
