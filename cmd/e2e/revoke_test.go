package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// TestRevokeWorkerMidRun runs a batch on 3 replicas and 2 real workers over
// mutual TLS. SIGHUP reloads (and no longer kills) the replicas and a
// worker. Part-way, `rollout certs revoke w1` (admin) revokes worker w1's
// certificate: w1's RPCs are refused from then on, w2 takes its items, and
// the run finishes with every input line exactly once; `rollout certs
// revoked` lists the entry.
func TestRevokeWorkerMidRun(t *testing.T) {
	const n = 300
	c := startCluster(t)

	// SIGHUP reloads the TLS files of every replica, which keeps running.
	for _, r := range c.Replicas {
		require.NoError(t, r.Signal(syscall.SIGHUP))
	}
	for _, r := range c.Replicas {
		require.Eventually(t, func() bool { return strings.Contains(r.Tail(20000), "reloading the TLS files") }, 30*time.Second, 50*time.Millisecond,
			"replica %s did not log the reload", r.ID)
		require.True(t, r.Running(), "SIGHUP stopped replica %s", r.ID)
	}

	input, lines := writeInput(t, n)
	w1, err := c.StartWorker("w1", "--backend", "mock", "--concurrency", "4", "--mock-latency", "40ms", "--heartbeat", "200ms")
	require.NoError(t, err)
	_, err = c.StartWorker("w2", "--backend", "mock", "--concurrency", "4", "--mock-latency", "40ms", "--heartbeat", "200ms")
	require.NoError(t, err)
	out, err := cli(t, c, "submit", "--input", input, "--run", "revoke")
	require.NoError(t, err, out)

	revoked := false
	var revokedAt time.Time
	waitDone(t, c, "revoke", n, 2*time.Minute, func(rc *rolloutv1.RunCounters) {
		if revoked || rc.GetDone() < n/5 {
			return
		}
		require.Less(t, rc.GetDone(), uint64(n), "the run finished before w1 could be revoked mid-run")
		// The worker reloads on SIGHUP too, and keeps running.
		require.NoError(t, w1.Signal(syscall.SIGHUP))
		require.Eventually(t, func() bool { return strings.Contains(w1.Tail(20000), "reloading the TLS files") }, 30*time.Second, 50*time.Millisecond)
		require.True(t, w1.Running(), "SIGHUP stopped the worker")

		out, err := cliFlagsLast(t, c, "admin", "certs", "revoke", "w1", "--reason", "e2e")
		require.NoError(t, err, out)
		require.Contains(t, out, "revoked certificates named w1")
		require.Contains(t, out, "worker evicted")
		revoked, revokedAt = true, time.Now()
		t.Logf("revoked w1 at %d/%d done: %s", rc.GetDone(), n, strings.TrimSpace(out))
	})
	require.True(t, revoked)
	t.Logf("the run finished %v after the revocation", time.Since(revokedAt))

	// w1's certificate is refused by the cluster.
	// (The client retries a refused handshake until its context ends.)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	w1c := clientAs(t, c, "w1")
	_, err = w1c.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: "w1"})
	require.Error(t, err, "the revoked worker's RPC succeeded")
	require.Eventually(t, func() bool {
		return strings.Contains(w1.Tail(200000), "revoked") || strings.Contains(w1.Tail(200000), "certificate")
	},
		30*time.Second, 100*time.Millisecond, "w1's log does not show its refusal")
	t.Logf("w1 refused; %v after the revocation", time.Since(revokedAt))

	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	rc, err := runStatus(sctx, c, "revoke")
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetDone(), "every item done, none dead")
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	out, err = cli(t, c, "results", "--run", "revoke", "-o", outPath)
	require.NoError(t, err, out)
	checkOutput(t, outPath, lines)

	out, err = cliFlagsLast(t, c, "admin", "certs", "revoked")
	require.NoError(t, err, out)
	require.Contains(t, out, "w1")
	require.Contains(t, out, "worker")
	require.Contains(t, out, "e2e")
	for _, r := range c.Replicas {
		require.True(t, r.Running(), fmt.Sprintf("replica %s stopped", r.ID))
	}
}
