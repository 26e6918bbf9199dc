package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/localcluster"
)

// recoverCoord runs `rollout-coord recover` and returns its combined output.
func recoverCoord(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "rollout-coord"), append([]string{"recover"}, args...)...).CombinedOutput()
	return string(out), err
}

// TestRecoverAfterQuorumLoss loses two of three replica processes for good
// mid-run: the survivor alone cannot elect a leader. `rollout-coord
// recover` on its data directory (refused while it runs) with a peers file
// naming only itself rewrites its configuration; restarted with its data
// directory and no flags, it leads alone with its ledger intact, and the
// run finishes with every line exactly once.
func TestRecoverAfterQuorumLoss(t *testing.T) {
	const n = 120
	c := startCluster(t)
	input, lines := writeInput(t, n)
	out, err := cli(t, c, "submit", "--input", input, "--run", "lost")
	require.NoError(t, err, out)
	w1, err := c.StartWorker("w1", "--backend", "mock", "--concurrency", "2", "--mock-latency", "20ms")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var doneBefore uint64
	require.Eventually(t, func() bool {
		rc, err := runStatus(ctx, c, "lost")
		if err == nil {
			doneBefore = rc.GetDone()
		}
		return err == nil && rc.GetDone() >= n/4
	}, time.Minute, 50*time.Millisecond)
	require.NoError(t, w1.Kill())
	require.Less(t, doneBefore, uint64(n), "the run finished before quorum was lost")

	// Lose the leader and one follower for good.
	leader, _, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	var survivor *localcluster.Replica
	for _, r := range c.Replicas {
		if r != leader && survivor == nil {
			survivor = r
			continue
		}
		require.NoError(t, r.Kill())
	}
	t.Logf("killed all but %s", survivor.ID)
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	_, _, err = c.WaitLeader(wctx)
	wcancel()
	require.ErrorIs(t, err, localcluster.ErrNoLeader, "one replica of three cannot lead")

	peers := filepath.Join(t.TempDir(), "peers.json")
	require.NoError(t, os.WriteFile(peers, []byte(fmt.Sprintf(`[{"id":%q,"raft_addr":%q}]`, survivor.ID, survivor.RaftAddr)), 0o600))
	out, err = recoverCoord(t, "--id", survivor.ID, "--data", survivor.DataDir, "--peers", peers)
	require.Error(t, err, "recover must refuse a data directory in use:\n%s", out)
	require.Contains(t, out, "locked by another process")

	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`[{"id":"c9","raft_addr":"127.0.0.1:1"}]`), 0o600))
	require.NoError(t, survivor.Stop(10*time.Second))
	out, err = recoverCoord(t, "--id", survivor.ID, "--data", survivor.DataDir, "--peers", bad)
	require.Error(t, err, out)
	require.Contains(t, out, "does not name this replica")

	out, err = recoverCoord(t, "--data", survivor.DataDir, "--peers", peers) // the data directory names its replica
	require.NoError(t, err, out)
	require.Contains(t, out, "recovered "+survivor.DataDir)

	require.NoError(t, survivor.Restart())
	newLeader, _, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	require.Equal(t, survivor.ID, newLeader.ID)
	rc, err := runStatus(ctx, c, "lost")
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetTotal(), "the ledger kept the run")
	require.GreaterOrEqual(t, rc.GetDone(), doneBefore, "the ledger kept the completions")

	w2, err := c.StartWorker("w2", "--backend", "mock", "--concurrency", "4", "--mock-latency", "5ms")
	require.NoError(t, err)
	waitDone(t, c, "lost", n, 2*time.Minute, nil)
	sigtermAndWait(t, w2, 30*time.Second)
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	out, err = cli(t, c, "results", "--run", "lost", "-o", outPath)
	require.NoError(t, err, out)
	checkOutput(t, outPath, lines)

	out, err = cli(t, c, "cluster")
	require.NoError(t, err, out)
	section := out[strings.Index(out, "members (as seen by"):]
	require.Equal(t, 1, strings.Count(section, "Voter"), out)
	require.Contains(t, section, survivor.ID)
}
