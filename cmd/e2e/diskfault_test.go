package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/localcluster"
)

// TestCorruptLogEntryStopsReplica changes bytes inside a command in one
// follower's raft.db (the prompt of a submitted item and its completion)
// while it is stopped. Started again, that replica finds the entry fails its
// checksum before applying it: it exits non-zero naming the entry's index
// and its raft.db, rather than applying different bytes than the cluster
// did. The other two go on serving the original results.
func TestCorruptLogEntryStopsReplica(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Prompts and completions live in the store, not the log: the run's
	// name is what the log holds (in its submit and its completions).
	marker := newMarker(t)
	input := filepath.Join(t.TempDir(), "input.jsonl")
	require.NoError(t, os.WriteFile(input, []byte(`{"prompt": "one"}`+"\n"+`{"prompt": "plain"}`+"\n"), 0o644))
	_, err := c.StartWorker("w1", "--backend", "mock", "--concurrency", "2")
	require.NoError(t, err)
	out, err := cli(t, c, "submit", "--input", input, "--run", marker)
	require.NoError(t, err, out)
	waitDone(t, c, marker, 2, time.Minute, nil)

	// A follower has the entries in its log (and applied them).
	leader, _, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	var victim *localcluster.Replica
	for _, r := range c.Replicas {
		if r != leader {
			victim = r
		}
	}
	waitApplied(t, ctx, c, leader, victim)
	require.NoError(t, victim.Stop(10*time.Second))

	// Flip one byte of every copy of the marker in the stopped replica's
	// raft.db: the submitted prompt and the mock completion.
	dbPath := filepath.Join(victim.DataDir, "raft.db")
	require.GreaterOrEqual(t, flipMarker(t, dbPath, marker), 2, "the run's name in its submit and its completion")

	// Started again it stops by itself, non-zero, naming the entry and file.
	require.NoError(t, victim.Restart())
	requireStopsOnChecksum(t, victim, dbPath)

	// The others serve the results as they were written.
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	out, err = cli(t, c, "results", "--run", marker, "-o", outPath)
	require.NoError(t, err, out)
	res, err := os.ReadFile(outPath)
	require.NoError(t, err)
	require.Contains(t, string(res), `"MOCK:one"`)
}

// TestCorruptLeaderLogStopsFollowers damages an entry in the log of the
// replica that will lead, and gives it a follower that lacks the entry, so
// the leader replicates its damaged copy: the checksum travels with the
// bytes, and both the leader and that follower stop at the entry (exiting
// non-zero, each naming its own raft.db) instead of applying it. The third
// replica, whose copy is sound, never applies different bytes either: it is
// left running, without a quorum, its ledger as written.
func TestCorruptLeaderLogStopsFollowers(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader, _, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	var sound, lagging *localcluster.Replica
	for _, r := range c.Replicas {
		switch {
		case r == leader:
		case lagging == nil:
			lagging = r
		default:
			sound = r
		}
	}
	require.NoError(t, lagging.Stop(10*time.Second))

	marker := newMarker(t)
	input := filepath.Join(t.TempDir(), "input.jsonl")
	require.NoError(t, os.WriteFile(input, []byte(`{"prompt": "one"}`+"\n"), 0o644))
	out, err := cli(t, c, "submit", "--input", input, "--run", marker)
	require.NoError(t, err, out)
	waitApplied(t, ctx, c, leader, sound)
	require.NoError(t, sound.Kill())
	require.NoError(t, leader.Kill())
	leaderDB := filepath.Join(leader.DataDir, "raft.db")
	require.Positive(t, flipMarker(t, leaderDB, marker))

	// Only the damaged replica can win (the lagging one's log is behind).
	// It replicates its copy to the lagging one, then applies it: it stops.
	require.NoError(t, leader.Restart())
	require.NoError(t, lagging.Restart())
	requireStopsOnChecksum(t, leader, leaderDB)
	// The lagging replica now holds the damaged copy too; it stops at it
	// once it learns the entry is committed (from the sound one, if the
	// damaged leader stopped before telling it).
	require.NoError(t, sound.Restart())
	requireStopsOnChecksum(t, lagging, filepath.Join(lagging.DataDir, "raft.db"))
	require.True(t, sound.Running())
	require.NotContains(t, sound.Tail(64<<10), "fails its checksum")
}

// newMarker returns a run name no other byte string in raft.db can contain.
func newMarker(t *testing.T) string {
	var r [12]byte
	_, err := rand.Read(r[:])
	require.NoError(t, err)
	return "disk-fault-" + hex.EncodeToString(r[:])
}

// waitApplied waits until every given running replica has applied as far as
// the first (the leader), so the entries are in every one's log.
func waitApplied(t *testing.T, ctx context.Context, c *localcluster.Cluster, leader *localcluster.Replica, others ...*localcluster.Replica) {
	t.Helper()
	require.Eventually(t, func() bool {
		applied := map[*localcluster.Replica]uint64{}
		for _, v := range c.Views(ctx) {
			applied[v.Replica] = v.Resp.GetAppliedIndex()
		}
		for _, r := range others {
			if applied[leader] == 0 || applied[r] < applied[leader] {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond)
}

// flipMarker changes one byte of every copy of marker in the stopped
// replica's raft.db (the live entry and any stale copy in pages bolt has
// freed) and returns how many there were. The changed entry still decodes.
func flipMarker(t *testing.T, dbPath, marker string) int {
	t.Helper()
	db, err := os.ReadFile(dbPath)
	require.NoError(t, err)
	n := bytes.Count(db, []byte(marker))
	changed := bytes.ReplaceAll(db, []byte(marker), []byte(marker[:len(marker)-1]+flip(marker[len(marker)-1])))
	require.Equal(t, len(db), len(changed))
	require.NoError(t, os.WriteFile(dbPath, changed, 0o600))
	return n
}

// requireStopsOnChecksum waits for r to exit non-zero having logged that an
// entry of dbPath fails its checksum.
func requireStopsOnChecksum(t *testing.T, r *localcluster.Replica, dbPath string) {
	t.Helper()
	err := r.Wait(60 * time.Second)
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%s, with a damaged log entry, did not exit: %v", r.ID, err)
	require.NotZero(t, exit.ExitCode())
	logTail := r.Tail(16 << 10)
	require.Contains(t, logTail, "raft.db ("+dbPath+"), log entry ")
	require.Contains(t, logTail, "fails its checksum")
	require.NotContains(t, logTail, "panic")
}

// flip returns a different lowercase hex digit than b.
func flip(b byte) string {
	if b == '0' {
		return "1"
	}
	return "0"
}
