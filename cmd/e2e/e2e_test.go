// Package e2e holds the end-to-end tests of the real binaries: three
// rollout-coord processes over mutual TLS on loopback, rollout-worker
// processes, and the rollout CLI, with the leader killed part-way.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/internal/testbin"
	"github.com/rollout/rollout/store"
)

// binDir is where TestMain built the binaries.
var binDir string

func TestMain(m *testing.M) {
	maybeFlooder() // a child process of the flood test exits here
	// The CLI's default store is $ROLLOUT_STORE: a directory of the test
	// run's own, never the user's cache directory.
	dir, err := os.MkdirTemp("", "rollout-e2e-store-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("ROLLOUT_STORE", "file://"+dir)
	code := testbin.RunTestsWithBinaries(m, &binDir)
	os.RemoveAll(dir)
	os.Exit(code)
}

// startCluster starts a 3-replica TLS cluster and stops it at cleanup,
// printing the logs of a failed test.
func startCluster(t *testing.T, coordArgs ...string) *localcluster.Cluster {
	t.Helper()
	return startClusterWith(t, localcluster.Config{Replicas: 3, TLS: true, CoordArgs: coordArgs})
}

// startClusterWith starts the cluster cfg describes (BinDir and Dir are
// filled in) within 90 s and stops it at cleanup, printing the log tails of
// its replicas and workers when the test failed.
func startClusterWith(t *testing.T, cfg localcluster.Config) *localcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg.BinDir, cfg.Dir = binDir, t.TempDir()
	c, err := localcluster.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range c.Replicas {
				t.Logf("---- %s log tail ----\n%s", r.Name, r.Tail(4000))
			}
			for _, w := range c.Workers() {
				t.Logf("---- %s log tail ----\n%s", w.Name, w.Tail(3000))
			}
		}
		c.Stop()
	})
	return c
}

// cli runs the rollout CLI with the cluster's address and the client
// identity "cli" (--insecure on a plaintext cluster).
func cli(t *testing.T, c *localcluster.Cluster, args ...string) (string, error) {
	t.Helper()
	return cliAs(t, c, "cli", args...)
}

// cliAs runs the rollout CLI as identity (for example "admin" for
// membership changes).
func cliAs(t *testing.T, c *localcluster.Cluster, identity string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append([]string{args[0], "--coord", c.CoordFlag()}, c.TLSArgs(identity)...)
	full = append(full, args[1:]...)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "rollout"), full...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func writeInput(t *testing.T, n int) (string, []map[string]any) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "input.jsonl")
	var buf bytes.Buffer
	var lines []map[string]any
	for i := range n {
		line := map[string]any{"prompt": fmt.Sprintf("prompt number %d", i), "row": float64(i), "meta": map[string]any{"tag": "e2e"}}
		lines = append(lines, line)
		b, err := json.Marshal(line)
		require.NoError(t, err)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	return path, lines
}

// runStatus reads the counters of run (runs.Status) through a fresh client.
func runStatus(ctx context.Context, c *localcluster.Cluster, run string) (*rolloutv1.RunCounters, error) {
	client, err := c.Client()
	if err != nil {
		return nil, err
	}
	defer client.Close()
	_, rc, err := runs.Status(ctx, client, run, 5*time.Second)
	return rc, err
}

// waitDone waits until the run of n items is finished (runs.Wait, through
// one client that follows the leader), calling onProgress with each status
// seen.
func waitDone(t *testing.T, c *localcluster.Cluster, run string, n uint64, timeout time.Duration, onProgress func(*rolloutv1.RunCounters)) *rolloutv1.RunCounters {
	t.Helper()
	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last *rolloutv1.RunCounters
	rc, err := runs.Wait(ctx, client, run, runs.WaitConfig{Interval: 100 * time.Millisecond, Timeout: timeout,
		Progress: func(_ *rolloutv1.RunStatusResponse, rc *rolloutv1.RunCounters) error {
			last = rc
			if onProgress != nil {
				onProgress(rc)
			}
			return nil
		}})
	require.NoError(t, err, "run %s did not finish in %v (last status %v)", run, timeout, last)
	require.Equal(t, n, rc.GetDone()+rc.GetDead(), "run %s: %v", run, rc)
	return rc
}

// withRunStore returns client reading run's payloads and results through
// the run's store when it has one (runs.WithStore): the tests compare bytes.
func withRunStore(t *testing.T, ctx context.Context, client runs.Coordinator, run string) runs.Coordinator {
	t.Helper()
	_, rc, err := runs.Status(ctx, client, run, 30*time.Second)
	require.NoError(t, err)
	if rc.GetStore() == "" {
		return client
	}
	st, err := store.Open(ctx, rc.GetStore(), store.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return runs.WithStore(client, st, 0)
}

// allResults reads every item of run through the API, in index order
// (runs.Results).
func allResults(t *testing.T, ctx context.Context, client runs.Coordinator, run string) []*rolloutv1.ResultItem {
	t.Helper()
	client = withRunStore(t, ctx, client, run)
	var out []*rolloutv1.ResultItem
	require.NoError(t, runs.Results(ctx, client, run, runs.ResultsConfig{Timeout: 30 * time.Second}, func(it *rolloutv1.ResultItem) error {
		out = append(out, it)
		return nil
	}))
	return out
}

// TestLeaderKilledMidRunExactlyOnce is the walking skeleton end to end: a
// batch runs through 3 replicas and 3 workers over mutual TLS, the leader is
// SIGKILLed part-way, and the output holds every input line exactly once, in
// order, with the mock completion. The killed replica then restarts from its
// data directory alone and catches up.
func TestLeaderKilledMidRunExactlyOnce(t *testing.T) {
	const n = 600
	c := startCluster(t)
	input, lines := writeInput(t, n)
	for i := 1; i <= 3; i++ {
		_, err := c.StartWorker(fmt.Sprintf("w%d", i), "--backend", "mock", "--concurrency", "4", "--mock-latency", "40ms")
		require.NoError(t, err)
	}
	out, err := cli(t, c, "submit", "--input", input, "--run", "e2e")
	require.NoError(t, err, out)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	oldLeader, oldTerm, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	killed := false
	waitDone(t, c, "e2e", n, 3*time.Minute, func(rc *rolloutv1.RunCounters) {
		if !killed && rc.GetDone() >= n/4 {
			require.Less(t, rc.GetDone(), uint64(n), "the run finished before the leader could be killed mid-run")
			require.NoError(t, oldLeader.Kill())
			killed = true
			t.Logf("killed leader %s (term %d) at %d/%d done", oldLeader.ID, oldTerm, rc.GetDone(), n)
		}
	})
	require.True(t, killed)
	newLeader, newTerm, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	require.NotEqual(t, oldLeader.ID, newLeader.ID)
	require.Greater(t, newTerm, oldTerm)

	rc, err := runStatus(ctx, c, "e2e")
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetTotal())
	require.Equal(t, uint64(n), rc.GetDone(), "every item done, none dead")
	require.Zero(t, rc.GetPending()+rc.GetRunning())

	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	out, err = cli(t, c, "results", "--run", "e2e", "-o", outPath)
	require.NoError(t, err, out)
	checkOutput(t, outPath, lines)

	// The killed replica restarts with only its data directory and catches up.
	require.NoError(t, oldLeader.Restart())
	require.Eventually(t, func() bool {
		for _, v := range c.Views(ctx) {
			if v.Replica == oldLeader {
				return v.Resp.GetState() == rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER && v.Resp.GetAppliedIndex() > 0 &&
					v.Resp.GetHeader().GetTerm() >= newTerm && v.Resp.GetLedgerEpoch() >= newTerm
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "restarted replica did not rejoin")

	out, err = cli(t, c, "status", "--run", "e2e")
	require.NoError(t, err, out)
	require.Contains(t, out, "e2e")
	out, err = cli(t, c, "cluster")
	require.NoError(t, err, out)
	for _, r := range c.Replicas {
		require.Contains(t, out, r.ID)
	}
}

// checkOutput asserts one output line per input line, in input order, with
// the input's fields kept and the mock completion and a unique sample id.
func checkOutput(t *testing.T, path string, inputs []map[string]any) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	seen := map[string]bool{}
	i := 0
	for sc.Scan() {
		require.Less(t, i, len(inputs), "more output lines than inputs")
		var got map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &got), "line %d", i+1)
		want := inputs[i]
		for k, v := range want {
			require.Equal(t, v, got[k], "line %d field %s", i+1, k)
		}
		require.Equal(t, "MOCK:"+want["prompt"].(string), got["completion"], "line %d", i+1)
		id, _ := got["sample_id"].(string)
		require.Len(t, id, 64, "line %d sample_id", i+1)
		require.False(t, seen[id], "duplicate sample_id %s", id)
		seen[id] = true
		i++
	}
	require.NoError(t, sc.Err())
	require.Equal(t, len(inputs), i, "output lines")
}

// TestSubmitInvalidInputCreatesNoRun checks that a bad line is reported with
// its file and line number and that the run is not created.
func TestSubmitInvalidInputCreatesNoRun(t *testing.T) {
	c := startCluster(t)
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	content := strings.Join([]string{
		`{"prompt": "fine"}`,
		`{"prompt": "also fine", "x": 1}`,
		`{"prompt": 42}`,
		`not json at all`,
		`["an", "array"]`,
		`{"prompt": "ok again"}`,
	}, "\n") + "\n"
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	out, err := cli(t, c, "submit", "--input", path, "--run", "bad")
	require.Error(t, err, out)
	require.Contains(t, out, "bad.jsonl:3")
	require.Contains(t, out, "bad.jsonl:4")
	require.Contains(t, out, "bad.jsonl:5")
	require.NotContains(t, out, "bad.jsonl:1:")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = runStatus(ctx, c, "bad")
	require.Error(t, err)
	require.Equal(t, codes.NotFound, status.Code(err), "run must not exist: %v", err)
}

// TestCoordSigtermTransfersLeadership sends SIGTERM to the leader: it hands
// leadership to another replica before it exits (status 0), so the cluster
// has a serving leader at a higher term without waiting out an election
// timeout, and the stopped replica then restarts from its data dir alone.
func TestCoordSigtermTransfersLeadership(t *testing.T) {
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	old, oldTerm, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	require.NoError(t, old.Signal(syscall.SIGTERM))
	require.NoError(t, old.Wait(20*time.Second), "a gracefully stopped replica exits 0")
	require.Contains(t, old.Tail(4000), "transferr", "the leader transferred leadership on SIGTERM")

	leader, term, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	require.NotEqual(t, old.ID, leader.ID)
	require.Greater(t, term, oldTerm)

	require.NoError(t, old.Restart())
	require.Eventually(t, func() bool {
		for _, v := range c.Views(ctx) {
			if v.Replica == old {
				return v.Resp.GetState() == rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER && v.Resp.GetLedgerEpoch() >= term
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "the replica did not rejoin after its graceful stop")
}
