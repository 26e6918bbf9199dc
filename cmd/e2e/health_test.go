package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/internal/freeport"
)

// healthGet GETs a replica's plaintext health endpoint with a client that
// has no certificate at all.
func healthGet(addr, path string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// runProbe runs rollout-coord probe and returns its output and exit status.
func runProbe(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "rollout-coord"), append([]string{"probe"}, args...)...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err, string(out))
	return string(out), 0
}

// TestHealthEndpointsFromRealBinaries runs a 3-replica mutual-TLS cluster
// with --health-addr and --raft-multiplier 2: every replica, followers
// included, is ready over plaintext HTTP without a certificate and names
// the same leader; rollout-coord probe exits 0. With two replicas killed
// the last one stays live but is not ready (no quorum, no leader), and
// probe exits 1 for --ready, 0 for --live, and 1 with a clear message for
// a replica that is gone.
func TestHealthEndpointsFromRealBinaries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startClusterWith(t, localcluster.Config{Replicas: 3, TLS: true, Health: true,
		CoordArgs: []string{"--raft-multiplier", "2"}})
	leader, _, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	require.True(t, c.TLSEnabled())

	for _, r := range c.Replicas {
		require.NotEmpty(t, r.HealthAddr)
		require.Contains(t, r.Tail(1<<20), "raft timings: multiplier=2 heartbeat_timeout=400ms election_timeout=400ms leader_lease_timeout=200ms commit_timeout=100ms", r.ID)
		var body string
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			code, b, err := healthGet(r.HealthAddr, "/readyz")
			require.NoError(ct, err)
			require.Equal(ct, http.StatusOK, code, "%s /readyz: %q", r.ID, b)
			body = b
		}, 30*time.Second, 50*time.Millisecond)
		require.True(t, strings.HasPrefix(body, "ready: voter "+r.ID+", leader "+leader.ID+", applied "), "%s: %q", r.ID, body)
		code, body, err := healthGet(r.HealthAddr, "/livez")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code, body)
		require.True(t, strings.HasPrefix(body, "live: "+r.ID+", raft "), body)
		if r != leader {
			require.Contains(t, body, "raft follower", "a follower is ready and live: %s", r.ID)
		}
		code, _, err = healthGet(r.HealthAddr, "/")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, code)

		out, rc := runProbe(t, "--health-addr", r.HealthAddr)
		require.Zero(t, rc, out)
		require.True(t, strings.HasPrefix(out, "ready: voter "+r.ID), out)
	}
	// The gRPC port of the same replica still refuses a client without a
	// certificate: the health port is the only plaintext one.
	_, _, err = healthGet(leader.GRPCAddr, "/readyz")
	require.Error(t, err)

	// Kill the leader and one follower: the last one has no quorum.
	killed := []*localcluster.Replica{leader}
	var last *localcluster.Replica
	for _, r := range c.Replicas {
		switch {
		case r == leader:
		case last == nil:
			last = r
		default:
			killed = append(killed, r)
		}
	}
	require.Len(t, killed, 2)
	for _, r := range killed {
		require.NoError(t, r.Kill())
	}
	var body string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		code, b, err := healthGet(last.HealthAddr, "/readyz")
		require.NoError(ct, err)
		require.Equal(ct, http.StatusServiceUnavailable, code, "%s is still ready without a quorum: %q", last.ID, b)
		body = b
	}, 30*time.Second, 50*time.Millisecond)
	require.True(t, strings.HasPrefix(body, "not ready: no known leader ("+last.ID+" is "), body)
	code, lbody, err := healthGet(last.HealthAddr, "/livez")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "a replica waiting for a quorum is alive: %q", lbody)

	out, rc := runProbe(t, "--health-addr", last.HealthAddr, "--ready")
	require.Equal(t, 1, rc, out)
	require.Contains(t, out, "not ready: no known leader")
	require.Contains(t, out, "answered 503 Service Unavailable")
	out, rc = runProbe(t, "--live", "--health-addr", last.HealthAddr)
	require.Zero(t, rc, out)
	require.Contains(t, out, "live: "+last.ID)
	out, rc = runProbe(t, "--health-addr", killed[0].HealthAddr, "--timeout", "5s")
	require.Equal(t, 1, rc, out)
	require.Contains(t, out, "cannot reach the health endpoint http://"+killed[0].HealthAddr+"/readyz")
	require.True(t, last.Running(), "the last replica still runs")
}

// TestHealthOfAReplicaWaitingToJoin starts a real replica whose --join
// target does not answer: while it keeps trying it is live but not ready,
// and says it is no member yet; the probe exits 1 for --ready and 0 for
// --live.
func TestHealthOfAReplicaWaitingToJoin(t *testing.T) {
	ports, err := freeport.Ports(4)
	require.NoError(t, err)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	health := addr(2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var logs strings.Builder
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "rollout-coord"), "--id", "c9", "--data", t.TempDir(),
		"--raft-addr", addr(0), "--grpc-addr", addr(1), "--join", addr(3), "--join-timeout", "50s", "--insecure",
		"--health-addr", health)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("---- c9 log ----\n%s", logs.String())
		}
	})

	var body string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		code, b, err := healthGet(health, "/livez")
		require.NoError(ct, err)
		require.Equal(ct, http.StatusOK, code, b)
	}, 30*time.Second, 50*time.Millisecond)
	code, body, err := healthGet(health, "/readyz")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Equal(t, "not ready: c9 is no member of a cluster yet (joining, or waiting to be bootstrapped)\n", body)
	out, rc := runProbe(t, "--health-addr", health)
	require.Equal(t, 1, rc, out)
	require.Contains(t, out, "no member of a cluster yet")
	out, rc = runProbe(t, "--live", "--health-addr", health)
	require.Zero(t, rc, out)
	select {
	case err := <-exited:
		t.Fatalf("the replica exited while it should still be trying to join: %v", err)
	default:
	}
}
