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

	// A prompt no other byte string in raft.db can contain.
	var r [12]byte
	_, err := rand.Read(r[:])
	require.NoError(t, err)
	marker := "disk-fault-" + hex.EncodeToString(r[:])
	input := filepath.Join(t.TempDir(), "input.jsonl")
	require.NoError(t, os.WriteFile(input, []byte(`{"prompt": "`+marker+`"}`+"\n"+`{"prompt": "plain"}`+"\n"), 0o644))
	_, err = c.StartWorker("w1", "--backend", "mock", "--concurrency", "2")
	require.NoError(t, err)
	out, err := cli(t, c, "submit", "--input", input, "--run", "df")
	require.NoError(t, err, out)
	waitDone(t, c, "df", 2, time.Minute, nil)

	// Every replica has the entries in its log (and applied them).
	leader, _, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	var victimID string
	require.Eventually(t, func() bool {
		var lead uint64
		applied := map[string]uint64{}
		for _, v := range c.Views(ctx) {
			applied[v.Replica.ID] = v.Resp.GetAppliedIndex()
			if v.Replica == leader {
				lead = v.Resp.GetAppliedIndex()
			}
		}
		for _, rep := range c.Replicas {
			if rep != leader && applied[rep.ID] >= lead && lead > 0 {
				victimID = rep.ID
				return len(applied) == len(c.Replicas)
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond)
	victim := c.Replica(victimID)
	require.NoError(t, victim.Stop(10*time.Second))

	// Flip one byte of every copy of the marker in the stopped replica's
	// raft.db: the submitted prompt, the mock completion, and any stale copy
	// in pages bolt has freed. The changed entry still decodes.
	dbPath := filepath.Join(victim.DataDir, "raft.db")
	db, err := os.ReadFile(dbPath)
	require.NoError(t, err)
	changed := bytes.ReplaceAll(db, []byte(marker), []byte(marker[:len(marker)-1]+flip(marker[len(marker)-1])))
	require.GreaterOrEqual(t, bytes.Count(db, []byte(marker)), 1, "the marker is not in %s", dbPath)
	require.Equal(t, len(db), len(changed))
	require.NoError(t, os.WriteFile(dbPath, changed, 0o600))

	// Started again it stops by itself, non-zero, naming the entry and file.
	require.NoError(t, victim.Restart())
	err = victim.Wait(60 * time.Second)
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the replica with a damaged raft.db did not exit: %v", err)
	require.NotZero(t, exit.ExitCode())
	logTail := victim.Tail(16 << 10)
	require.Contains(t, logTail, "raft.db ("+dbPath+"), log entry ")
	require.Contains(t, logTail, "fails its checksum")
	require.NotContains(t, logTail, "panic")

	// The others serve the results as they were written.
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	out, err = cli(t, c, "results", "--run", "df", "-o", outPath)
	require.NoError(t, err, out)
	res, err := os.ReadFile(outPath)
	require.NoError(t, err)
	require.Contains(t, string(res), `"MOCK:`+marker+`"`)
}

// flip returns a different lowercase hex digit than b.
func flip(b byte) string {
	if b == '0' {
		return "1"
	}
	return "0"
}
