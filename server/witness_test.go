package server

// The distribution contract's witness tests. Each runs a real multi-replica
// cluster in this process (hashicorp/raft over TCP on loopback, bolt files on
// disk, the gRPC service, real workers) and asserts zero duplicate accepted
// results and zero lost items.

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/worker"
)

// TestCoordRestartNoDuplicates restarts coordinators from their data dirs
// mid-run (the leader, then a follower): a restarted replica rebuilds the
// ledger from its log and snapshots, Running items stay with their workers,
// and the run completes with zero duplicate accepted results.
func TestCoordRestartNoDuplicates(t *testing.T) {
	const n = 400
	c := newTestCluster(t, 3, clusterOpts{})
	c.submit("restart", n)
	w1 := c.startWorker("w1", mockBackend(t, 15*time.Millisecond), nil)
	w2 := c.startWorker("w2", mockBackend(t, 15*time.Millisecond), nil)

	waitDone := func(atLeast uint64) {
		require.Eventually(t, func() bool {
			rc, err := c.runStatus("restart")
			return err == nil && rc.GetDone() >= atLeast
		}, time.Minute, 10*time.Millisecond)
	}
	waitDone(n / 4)
	leader, term := c.waitLeader()
	leader.stop()
	c.start(leader) // same data dir, no bootstrap, no join
	_, term2 := c.waitLeader()
	require.Greater(t, term2, term)

	waitDone(n / 2)
	for _, r := range c.replicas() {
		if l := c.leader(); r != l {
			r.stop()
			c.start(r)
			break
		}
	}
	c.waitFinished("restart", n, 90*time.Second)
	w1.stop()
	w2.stop()
	l, _ := c.waitLeader()
	checkExactlyOnce(t, l.ledger, "restart", n, w1, w2)
	// The restarted replicas hold the same ledger as the leader.
	want, _, _, err := l.ledger.Results("restart", 0, n)
	require.NoError(t, err)
	for _, r := range c.replicas() {
		require.Eventually(t, func() bool { return r.node.Stats().AppliedIndex >= l.node.Stats().CommitIndex }, 10*time.Second, 10*time.Millisecond)
		got, _, _, err := r.ledger.Results("restart", 0, n)
		require.NoError(t, err)
		require.Equal(t, want, got, "replica %s", r.id)
	}
}

// TestConcurrentAckAndStealNoDoubleExecute races a victim's completions
// against a thief's steal of the same Running(victim, a) items, many times
// with randomized sizes, executing sets and timings. Exactly one of the two
// wins each item: an item the victim completed is never stolen, an item
// stolen is never accepted from the victim, items the victim reported as
// executing are never taken, and every item ends with one accepted result.
func TestConcurrentAckAndStealNoDoubleExecute(t *testing.T) {
	iterations := 40
	if testing.Short() {
		iterations = 10
	}
	c := newTestCluster(t, 3, clusterOpts{})
	cl := c.client()
	rng := rand.New(rand.NewSource(20261121))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	raced := 0
	for iter := range iterations {
		run := fmt.Sprintf("race-%d", iter)
		k := 2 + rng.Intn(14)
		c.submit(run, k)
		victim, thief := fmt.Sprintf("v%d", iter), fmt.Sprintf("t%d", iter)
		registerWorkers(t, cl, victim, thief)
		claim, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: victim, MaxItems: uint32(k), WaitMs: 1000})
		require.NoError(t, err)
		require.Len(t, claim.GetItems(), k)
		items := claim.GetItems()

		// The victim reports some items as executing (never stealable).
		executing := map[string]bool{}
		var hb rolloutv1.HeartbeatRequest
		hb.WorkerId, hb.Backlog = victim, uint32(k)
		for _, it := range items {
			if rng.Intn(4) == 0 {
				executing[string(it.GetId())] = true
				hb.Executing = append(hb.Executing, &rolloutv1.ItemKey{Run: run, Id: it.GetId(), Attempt: it.GetAttempt()})
			}
		}
		_, err = cl.Heartbeat(ctx, &hb)
		require.NoError(t, err)

		// The victim acks a random subset while the thief steals.
		var acks []*rolloutv1.ItemReport
		for _, it := range items {
			if rng.Intn(2) == 0 {
				acks = append(acks, &rolloutv1.ItemReport{Run: run, Id: it.GetId(), Attempt: it.GetAttempt(),
					Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{"by":"victim"}`)})
			}
		}
		ackDelay := time.Duration(rng.Intn(3000)) * time.Microsecond
		stealDelay := time.Duration(rng.Intn(3000)) * time.Microsecond
		var wg sync.WaitGroup
		var ackResp *rolloutv1.ReportResponse
		var stealResp *rolloutv1.StealResponse
		var ackErr, stealErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			time.Sleep(ackDelay)
			if len(acks) > 0 {
				ackResp, ackErr = cl.Report(ctx, &rolloutv1.ReportRequest{WorkerId: victim, Reports: acks})
			}
		}()
		go func() {
			defer wg.Done()
			time.Sleep(stealDelay)
			stealResp, stealErr = cl.Steal(ctx, &rolloutv1.StealRequest{WorkerId: thief, Backlog: 0})
		}()
		wg.Wait()
		require.NoError(t, ackErr)
		require.NoError(t, stealErr)

		accepted := map[string]int{}
		ackApplied := map[string]bool{}
		for _, r := range ackResp.GetResults() {
			switch r.GetStatus() {
			case rolloutv1.ReportStatus_REPORT_STATUS_APPLIED:
				ackApplied[string(r.GetId())] = true
				accepted[string(r.GetId())]++
			case rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS:
			default:
				t.Fatalf("iteration %d: unexpected ack status %v", iter, r)
			}
		}
		stolen := map[string]bool{}
		for _, it := range stealResp.GetItems() {
			id := string(it.GetId())
			stolen[id] = true
			require.False(t, executing[id], "iteration %d: stole an item the victim reported executing", iter)
			require.False(t, ackApplied[id], "iteration %d: item %s both acked by the victim and stolen", iter, id)
			require.Equal(t, uint64(2), it.GetAttempt(), "a steal is Running(v,a) -> Running(t,a+1)")
		}
		require.LessOrEqual(t, len(stolen), (k+1)/2, "steal takes at most ceil(backlog/2)")
		for _, a := range acks {
			if !ackApplied[string(a.GetId())] {
				require.True(t, stolen[string(a.GetId())], "iteration %d: an ack missed although the item was not stolen", iter)
			}
		}
		if len(stolen) > 0 && len(acks) > 0 {
			raced++
		}

		// Both sides finish what they still own; the losers' reports miss.
		var rest []*rolloutv1.ItemReport
		for _, it := range items {
			id := string(it.GetId())
			if !ackApplied[id] && !stolen[id] {
				rest = append(rest, &rolloutv1.ItemReport{Run: run, Id: it.GetId(), Attempt: it.GetAttempt(),
					Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{"by":"victim"}`)})
			}
		}
		var thiefReports, lateVictim []*rolloutv1.ItemReport
		for _, it := range stealResp.GetItems() {
			thiefReports = append(thiefReports, &rolloutv1.ItemReport{Run: run, Id: it.GetId(), Attempt: it.GetAttempt(),
				Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{"by":"thief"}`)})
			lateVictim = append(lateVictim, &rolloutv1.ItemReport{Run: run, Id: it.GetId(), Attempt: it.GetAttempt() - 1,
				Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{"by":"thief"}`)})
		}
		for _, batch := range []struct {
			worker  string
			reports []*rolloutv1.ItemReport
			want    rolloutv1.ReportStatus
		}{
			{victim, rest, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED},
			{thief, thiefReports, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED},
			// The victim learns late that it lost the stolen items; even the
			// very same result bytes are not accepted from it.
			{victim, lateVictim, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS},
		} {
			if len(batch.reports) == 0 {
				continue
			}
			resp, err := cl.Report(ctx, &rolloutv1.ReportRequest{WorkerId: batch.worker, Reports: batch.reports})
			require.NoError(t, err)
			for _, r := range resp.GetResults() {
				require.Equal(t, batch.want, r.GetStatus(), "iteration %d, %s: %s", iter, batch.worker, r.GetMessage())
				if r.GetStatus() == rolloutv1.ReportStatus_REPORT_STATUS_APPLIED {
					accepted[string(r.GetId())]++
				}
			}
		}
		rc, err := c.runStatus(run)
		require.NoError(t, err)
		require.Equal(t, uint64(k), rc.GetDone(), "iteration %d", iter)
		for _, it := range items {
			require.Equal(t, 1, accepted[string(it.GetId())], "iteration %d: accepted results for %s", iter, it.GetId())
		}
	}
	t.Logf("%d iterations, %d with acks and a steal racing", iterations, raced)
	require.Positive(t, raced, "no iteration raced an ack against a steal")
}

// TestDeposedLeaderRepliesRejected delays a leader's long-poll answer (it
// hands out work) until leadership has moved to another replica and the
// worker has seen the newer term. The late answer from the old term is
// refused by the worker's epoch guard, its items are never run from it, and
// the worker adopts them from the new leader instead: every item runs once.
func TestDeposedLeaderRepliesRejected(t *testing.T) {
	const n = 12
	c := newTestCluster(t, 3, clusterOpts{})
	old, oldTerm := c.waitLeader()
	hold := make(chan struct{})
	old.hold.Store(&hold)
	c.submit("deposed", n)

	backend := newCounting(mockBackend(t, 5*time.Millisecond))
	w := c.startWorker("w1", backend, func(wc *worker.Config) {
		wc.Concurrency = 2
		wc.Backlog = n
		wc.ClaimWait = time.Second
	})
	// The old leader has committed the claim; its answer is held back.
	require.Eventually(t, func() bool { return len(old.ledger.Owned("w1")) > 0 }, 20*time.Second, 5*time.Millisecond)
	stuck := old.ledger.Owned("w1")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, old.node.TransferLeadership(ctx))
	newLeader, newTerm := c.waitLeader()
	require.NotEqual(t, old.id, newLeader.id)
	require.Greater(t, newTerm, oldTerm)
	// The worker's heartbeats follow the hint and see the new term.
	require.Eventually(t, func() bool { return w.w.Stats().Term >= newTerm }, 20*time.Second, 5*time.Millisecond)
	for _, it := range stuck {
		require.Zero(t, backend.count(string(it.ID)), "item %s ran before its claim reply arrived", it.ID)
	}

	// Now the deposed leader's answer (decided in oldTerm) arrives.
	old.hold.Store(nil)
	close(hold)
	require.Eventually(t, func() bool { return w.w.Stats().StaleRepliesRejected >= 1 }, 20*time.Second, 5*time.Millisecond,
		"the worker accepted a reply from term %d after seeing term %d", oldTerm, newTerm)

	c.waitFinished("deposed", n, 60*time.Second)
	w.stop()
	l, _ := c.waitLeader()
	checkExactlyOnce(t, l.ledger, "deposed", n, w)
	for i := range n {
		require.Equal(t, 1, backend.count(string(testID(fmt.Sprintf("deposed-%05d", i)))), "executions of item %d", i)
	}
}

// TestSlowWorkerKeepsItems gives a worker items that take longer than the
// failure timeout. Because it keeps heartbeating, the failure scan never
// re-pends them: no other worker gets them, they stay at attempt 1, the
// worker is never marked lost, and it completes them all.
func TestSlowWorkerKeepsItems(t *testing.T) {
	const n = 4
	const failureTimeout = 800 * time.Millisecond
	c := newTestCluster(t, 3, clusterOpts{server: func(sc *Config) {
		sc.FailureTimeout = failureTimeout
		sc.ScanInterval = 50 * time.Millisecond
	}})
	c.submit("slow", n)
	slow := c.startWorker("slow", mockBackend(t, 3*failureTimeout), func(wc *worker.Config) {
		wc.Concurrency, wc.Backlog, wc.Steal = n, n, false
		wc.HeartbeatInterval = 100 * time.Millisecond
	})
	l, _ := c.waitLeader()
	require.Eventually(t, func() bool { return len(l.ledger.Owned("slow")) == n }, 20*time.Second, 5*time.Millisecond)
	idle := c.startWorker("idle", mockBackend(t, time.Millisecond), func(wc *worker.Config) { wc.Steal = false })

	// Across more than two failure timeouts nothing moves.
	deadline := time.Now().Add(2*failureTimeout + 200*time.Millisecond)
	for time.Now().Before(deadline) {
		rc, err := c.runStatus("slow")
		require.NoError(t, err)
		if rc.GetDone() == n {
			break
		}
		require.Zero(t, rc.GetOwnerLost(), "a heartbeating worker's items shown as owner lost")
		for _, ws := range l.ledger.Workers() {
			require.False(t, ws.Lost, "worker %s marked lost", ws.ID)
		}
		require.Empty(t, l.ledger.Owned("idle"))
		time.Sleep(50 * time.Millisecond)
	}
	c.waitFinished("slow", n, 30*time.Second)
	slow.stop()
	idle.stop()
	checkExactlyOnce(t, l.ledger, "slow", n, slow, idle)
	items, _, _, err := l.ledger.Results("slow", 0, n)
	require.NoError(t, err)
	for _, it := range items {
		require.Equal(t, "slow", it.Owner)
		require.Equal(t, uint64(1), it.Attempt, "item %d was re-claimed", it.Index)
	}
	require.Zero(t, idle.w.Stats().Completed)
}

// TestDeadWorkerItemsRepended claims items for a worker that then goes
// silent (as if it crashed). Status shows its items as "owner lost"; after
// the failure timeout the scan re-pends them, another worker completes them,
// and the dead worker's late completions are refused.
func TestDeadWorkerItemsRepended(t *testing.T) {
	const n = 6
	const failureTimeout = 2 * time.Second
	c := newTestCluster(t, 3, clusterOpts{server: func(sc *Config) {
		sc.FailureTimeout = failureTimeout
		sc.ScanInterval = 50 * time.Millisecond
	}})
	c.submit("dead", n)
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	registerWorkers(t, cl, "dead")
	claim, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "dead", MaxItems: n, WaitMs: 1000})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), n)
	deadAt := time.Now()

	// Silent for more than half the failure timeout: owner lost, not yet expired.
	require.Eventually(t, func() bool {
		rc, err := c.runStatus("dead")
		return err == nil && rc.GetOwnerLost() == n
	}, failureTimeout+5*time.Second, 20*time.Millisecond)

	alive := c.startWorker("alive", mockBackend(t, time.Millisecond), func(wc *worker.Config) { wc.Steal = false })
	c.waitFinished("dead", n, 30*time.Second)
	require.GreaterOrEqual(t, time.Since(deadAt), failureTimeout, "items re-pended before the failure timeout")
	alive.stop()

	l, _ := c.waitLeader()
	var deadLost bool
	for _, ws := range l.ledger.Workers() {
		if ws.ID == "dead" {
			deadLost = ws.Lost
		}
	}
	require.True(t, deadLost, "the silent worker is marked lost")
	checkExactlyOnce(t, l.ledger, "dead", n, alive)

	var late []*rolloutv1.ItemReport
	for _, it := range claim.GetItems() {
		late = append(late, &rolloutv1.ItemReport{Run: "dead", Id: it.GetId(), Attempt: it.GetAttempt(),
			Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{"late":true}`)})
	}
	resp, err := cl.Report(ctx, &rolloutv1.ReportRequest{WorkerId: "dead", Reports: late})
	require.NoError(t, err)
	for _, r := range resp.GetResults() {
		require.NotEqual(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, r.GetStatus())
	}
	checkExactlyOnce(t, l.ledger, "dead", n, alive)
}

// TestAllReplicasRestartResume stops all three replicas mid-run and starts
// them again from their data dirs alone: the run resumes where it was and
// completes with every item exactly once.
func TestAllReplicasRestartResume(t *testing.T) {
	const n = 400
	c := newTestCluster(t, 3, clusterOpts{})
	c.submit("all", n)
	w1 := c.startWorker("w1", mockBackend(t, 10*time.Millisecond), nil)
	w2 := c.startWorker("w2", mockBackend(t, 10*time.Millisecond), nil)
	var before *rolloutv1.RunCounters
	require.Eventually(t, func() bool {
		rc, err := c.runStatus("all")
		before = rc
		return err == nil && rc.GetDone() >= n/3
	}, time.Minute, 10*time.Millisecond)
	for _, r := range c.replicas() {
		r.stop()
	}
	for _, r := range c.replicas() {
		c.start(r)
	}
	l, _ := c.waitLeader()
	run, err := l.ledger.Run("all")
	require.NoError(t, err)
	require.Equal(t, uint64(n), run.Total)
	require.GreaterOrEqual(t, run.Done, before.GetDone(), "done items survived the restart")

	c.waitFinished("all", n, 90*time.Second)
	w1.stop()
	w2.stop()
	l, _ = c.waitLeader()
	checkExactlyOnce(t, l.ledger, "all", n, w1, w2)
}

// TestNewReplicaCatchesUpFromSnapshot compacts the leader's log into a
// snapshot, then joins a fourth replica: it catches up by installing the
// snapshot (not by replaying the log) and holds the same ledger.
func TestNewReplicaCatchesUpFromSnapshot(t *testing.T) {
	const n = 200
	c := newTestCluster(t, 3, clusterOpts{raft: func(id string, rc *raftnode.Config) {
		rc.TrailingLogs = 4
		if id == "c4" {
			// The new replica never snapshots by itself: a snapshot it
			// holds came from the leader.
			rc.SnapshotThreshold = 1 << 40
			rc.SnapshotInterval = time.Hour
		}
	}})
	c.submit("snap", n)
	w := c.startWorker("w1", mockBackend(t, time.Millisecond), nil)
	c.waitFinished("snap", n, 60*time.Second)
	w.stop()
	l, _ := c.waitLeader()
	require.NoError(t, l.node.Snapshot())
	require.Positive(t, l.node.Stats().LastSnapshotIndex)

	r4 := c.add("c4")
	require.Eventually(t, func() bool {
		return r4.node.Stats().AppliedIndex >= l.node.Stats().CommitIndex
	}, 30*time.Second, 10*time.Millisecond)
	require.Positive(t, r4.node.Stats().LastSnapshotIndex, "c4 did not install a snapshot")
	want, _, _, err := l.ledger.Results("snap", 0, n)
	require.NoError(t, err)
	got, _, _, err := r4.ledger.Results("snap", 0, n)
	require.NoError(t, err)
	require.Equal(t, want, got)
	checkExactlyOnce(t, r4.ledger, "snap", n, w)
	require.Equal(t, fsm.StateDone, got[n-1].State)
}
