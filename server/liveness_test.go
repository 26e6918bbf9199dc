package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
)

// beatAll heartbeats (and claim-polls, with nothing pending) every worker
// every interval until ctx ends, counting the heartbeats answered.
func beatAll(ctx context.Context, t *testing.T, c *testCluster, interval time.Duration, ids ...string) (stop func() int) {
	t.Helper()
	cl := c.client()
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := 0
	ctx, cancel := context.WithCancel(ctx)
	for _, id := range ids {
		wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if _, err := cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: id}); err == nil {
					mu.Lock()
					answered++
					mu.Unlock()
				}
				_, _ = cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: id, MaxItems: 1, WaitMs: 5})
			}
		})
	}
	return func() int {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return answered
	}
}

// TestHeartbeatsStayOutOfTheLog: an idle fleet that heartbeats and
// claim-polls writes nothing to the Raft log; the leader's memory counts the
// heartbeats and every worker as live.
func TestHeartbeatsStayOutOfTheLog(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{})
	var ids []string
	for i := range 40 {
		ids = append(ids, fmt.Sprintf("idle-%02d", i))
	}
	registerWorkers(t, c.client(), ids...)
	l, _ := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := l.node.Stats().LastLogIndex
	beatsBefore := l.srv.Liveness().Heartbeats
	stop := beatAll(ctx, t, c, 50*time.Millisecond, ids...)
	// Each worker has at most one heartbeat in flight, whose answer the stop
	// may cut off: 400 answered once the leader counted 400 + len(ids).
	require.Eventually(t, func() bool { return l.srv.Liveness().Heartbeats-beatsBefore >= uint64(400+len(ids)) }, 30*time.Second, 10*time.Millisecond)
	answered := stop()
	require.GreaterOrEqual(t, answered, 400)
	require.Equal(t, before, l.node.Stats().LastLogIndex, "heartbeats and idle claims are not log entries")
	lv := l.srv.Liveness()
	require.True(t, lv.Serving)
	require.Equal(t, len(ids), lv.Live)
	for _, r := range c.replicas() {
		if r != l {
			require.False(t, r.srv.Liveness().Serving, "a follower keeps no liveness")
			_, err := r.srv.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: ids[0]})
			require.Equal(t, codes.Unavailable, status.Code(err), "a follower sends the worker to the leader: %v", err)
			require.Contains(t, err.Error(), l.id, "with a leader hint")
		}
	}
}

// TestLeaderChangeKeepsBeatingWorkers: after the leader is killed, a
// worker that keeps heartbeating is never declared lost (the new leader
// gives every worker a full TTL from its election), while one that went
// silent is declared lost and its work re-pended within the TTL of the new
// leader's election.
func TestLeaderChangeKeepsBeatingWorkers(t *testing.T) {
	const failureTimeout = time.Second
	c := newTestCluster(t, 3, clusterOpts{server: func(sc *Config) {
		sc.FailureTimeout = failureTimeout
		sc.ScanInterval = 50 * time.Millisecond
	}})
	c.submit("lc", 4)
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	registerWorkers(t, cl, "beater", "silent")
	claim, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "silent", MaxItems: 2, WaitMs: 1000})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), 2)
	stop := beatAll(ctx, t, c, 100*time.Millisecond, "beater")
	defer stop()

	old, oldTerm := c.waitLeader()
	old.stop()
	var nl *replica
	require.Eventually(t, func() bool {
		nl = c.leader()
		if nl == nil {
			return false
		}
		term, _ := nl.node.ServingTerm()
		return term > oldTerm
	}, 30*time.Second, 10*time.Millisecond, "a new leader")
	elected := time.Now()
	require.Eventually(t, func() bool { return nl.ledger.Worker("silent") == fsm.WorkerLost }, 30*time.Second, 10*time.Millisecond,
		"the silent worker declared lost by the new leader")
	// Its grace period was a full TTL from the election, then at most a
	// scan and a commit (generous: a loaded CI machine).
	require.Greater(t, time.Since(elected), failureTimeout-200*time.Millisecond, "no grace period")
	require.Empty(t, nl.ledger.Owned("silent"), "its items pending again (the beater's claim-polls may take them)")
	rc, err := c.runStatus("lc")
	require.NoError(t, err)
	require.Equal(t, uint64(4), rc.GetPending()+rc.GetRunning())
	// The beater stays live over several TTLs.
	deadline := time.Now().Add(3 * failureTimeout)
	for time.Now().Before(deadline) {
		require.Equal(t, fsm.WorkerLive, nl.ledger.Worker("beater"), "a heartbeating worker was expired")
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHeartbeatReplyAsksLongerIntervalForLargeFleet: with a budget of 10
// heartbeats a second, 40 workers are asked for one every 4 s and the TTL
// grows to 8 s (past the 1 s failure timeout); a worker the leader has not
// heard from for 2 s is not expired.
func TestHeartbeatReplyAsksLongerIntervalForLargeFleet(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{server: func(sc *Config) {
		sc.FailureTimeout = time.Second
		sc.ScanInterval = 50 * time.Millisecond
		sc.HeartbeatBudget = 10
	}})
	var ids []string
	for i := range 40 {
		ids = append(ids, fmt.Sprintf("w-%02d", i))
	}
	cl := c.client()
	registerWorkers(t, cl, ids...)
	l, _ := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.Eventually(t, func() bool {
		resp, err := cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: ids[0]})
		require.NoError(t, err)
		return resp.GetNextHeartbeatMs() == 4000 && resp.GetTtlMs() == 8000
	}, 10*time.Second, 60*time.Millisecond, "the interval and TTL a fleet of 40 sets")
	require.Equal(t, 8*time.Second, l.srv.TTL())
	time.Sleep(2 * time.Second)
	for _, id := range ids {
		require.Equal(t, fsm.WorkerLive, l.ledger.Worker(id), id)
	}
}

// TestHeartbeatEdges: bad heartbeats are refused with the field named and
// change nothing; a Lost worker is told to register again.
func TestHeartbeatEdges(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{server: func(sc *Config) {
		sc.FailureTimeout = 300 * time.Millisecond
		sc.ScanInterval = 20 * time.Millisecond
	}})
	cl := c.client()
	registerWorkers(t, cl, "w")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, req := range map[string]*rolloutv1.HeartbeatRequest{
		"items_per_sec": {WorkerId: "w", ItemsPerSec: -1},
		"held[0]":       {WorkerId: "w", Held: []*rolloutv1.ItemKey{{Run: "r"}}},
		"executing[0]":  {WorkerId: "w", Executing: []*rolloutv1.ItemKey{{Run: "", Id: []byte("x")}}},
	} {
		_, err := cl.Heartbeat(ctx, req)
		require.ErrorContains(t, err, name)
	}
	l, _ := c.waitLeader()
	require.Eventually(t, func() bool { return l.ledger.Worker("w") == fsm.WorkerLost }, 10*time.Second, 10*time.Millisecond)
	_, err := cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: "w"})
	requireNotRegistered(t, err, "heartbeat of a Lost worker")
	_, err = cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w", MaxItems: 1, WaitMs: 5})
	requireNotRegistered(t, err, "claim of a Lost worker")
	registerWorkers(t, cl, "w")
	_, err = cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: "w"})
	require.NoError(t, err)
}

// BenchmarkHeartbeat measures one heartbeat through the service (no gRPC):
// the leader's check of the worker, its memory and the held records' state.
func BenchmarkHeartbeat(b *testing.B) {
	c := newTestCluster(b, 1, clusterOpts{})
	var ids []string
	for i := range 1000 {
		ids = append(ids, fmt.Sprintf("w-%04d", i))
	}
	registerWorkers(b, c.client(), ids...)
	l, _ := c.waitLeader()
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if _, err := l.srv.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: ids[i%len(ids)], ItemsPerSec: 3}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeartbeatGRPC measures one heartbeat over gRPC on loopback
// (client and server in this process: the CPU of both).
func BenchmarkHeartbeatGRPC(b *testing.B) {
	c := newTestCluster(b, 1, clusterOpts{})
	cl := c.client()
	var ids []string
	for i := range 100 {
		ids = append(ids, fmt.Sprintf("w-%04d", i))
	}
	registerWorkers(b, cl, ids...)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if _, err := cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: ids[i%len(ids)], ItemsPerSec: 3}); err != nil {
			b.Fatal(err)
		}
	}
}
