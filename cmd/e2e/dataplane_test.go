package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
)

// writeMarkedInput writes n prompt lines, each carrying marker, and returns
// the path and the lines.
func writeMarkedInput(t *testing.T, n int, marker string) (string, []map[string]any) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "input.jsonl")
	var buf bytes.Buffer
	var lines []map[string]any
	for i := range n {
		p := fmt.Sprintf("%s prompt %d", marker, i)
		lines = append(lines, map[string]any{"prompt": p, "row": float64(i)})
		fmt.Fprintf(&buf, "{\"prompt\":%q,\"row\":%d}\n", p, i)
	}
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	return path, lines
}

// grepDir reports the files under dir that contain needle.
func grepDir(t *testing.T, dir, needle string) []string {
	t.Helper()
	var hits []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(needle)) {
			hits = append(hits, p)
		}
		return nil
	}))
	return hits
}

// TestDataPlaneRunLifecycle runs batches through 3 TLS replicas with a
// file:// store and checks the data plane's contract end to end: no prompt
// or completion byte reaches a replica's data directory (log, stable store,
// snapshots); the results come back exact from the store; a result object
// whose bytes were changed in the store is an error line naming it, never a
// silent wrong answer; the ledger's capacity refuses a run whole before
// anything is created; an active run cannot be deleted; a cancelled run
// stops handing out items; delete removes the run from the ledger and its
// objects from the store, and the event history says who did it.
func TestDataPlaneRunLifecycle(t *testing.T) {
	const n = 240
	c := startCluster(t, "--capacity-items", "700", "--snapshot-threshold", "64", "--snapshot-interval", "1s", "--trailing-logs", "16")
	storeDir := t.TempDir()
	storeURL := "file://" + storeDir
	for i := 1; i <= 2; i++ {
		_, err := c.StartWorker(fmt.Sprintf("w%d", i), "--backend", "mock", "--concurrency", "8", "--mock-latency", "40ms")
		require.NoError(t, err)
	}
	const marker = "ZEBRA-QUARTZ-7731"
	input, lines := writeMarkedInput(t, n, marker)
	out, err := cli(t, c, "submit", "--input", input, "--run", "a", "--store", storeURL)
	require.NoError(t, err, out)
	require.Contains(t, out, "uploaded")
	rcA := waitDone(t, c, "a", n, 2*time.Minute, nil)

	outPath := filepath.Join(t.TempDir(), "a.jsonl")
	out, err = cli(t, c, "results", "--run", "a", "-o", outPath)
	require.NoError(t, err, out)
	checkOutput(t, outPath, lines)

	// Resubmitting uploads nothing again and creates nothing.
	out, err = cli(t, c, "submit", "--input", input, "--run", "a", "--store", storeURL)
	require.NoError(t, err, out)
	require.Contains(t, out, "0 uploaded")
	require.Contains(t, out, fmt.Sprintf("%d already done", n))

	// No replica holds a byte of the prompts or the completions.
	for _, r := range c.Replicas {
		require.Empty(t, grepDir(t, r.DataDir, marker), "replica %s holds payload or result bytes", r.ID)
	}
	require.NotEmpty(t, grepDir(t, storeDir, marker), "the store holds the run's bytes")

	// Flip a byte of one result object: the results name it.
	var objects []string
	require.NoError(t, filepath.WalkDir(filepath.Join(storeDir, filepath.FromSlash(rcA.GetDataPrefix()+"results/")), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			objects = append(objects, p)
		}
		return err
	}))
	require.NotEmpty(t, objects)
	victim := objects[0]
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	i := bytes.Index(b, []byte("MOCK:"))
	require.GreaterOrEqual(t, i, 0)
	b[i] = 'm'
	require.NoError(t, os.WriteFile(victim, b, 0o644))
	out, err = cli(t, c, "results", "--run", "a", "-o", outPath)
	// Written, but incomplete: exit 3, the unreadable lines counted as such.
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, out)
	require.Equal(t, 3, exit.ExitCode(), out)
	require.Contains(t, out, "unreadable")
	require.Contains(t, out, "0 dead")
	got, err := os.ReadFile(outPath)
	require.NoError(t, err)
	key := strings.TrimPrefix(filepath.ToSlash(victim), filepath.ToSlash(storeDir)+"/")
	require.Contains(t, string(got), key, "the error line names the changed object")
	require.Contains(t, string(got), "do not match their recorded hash")
	require.NotContains(t, string(got), "mOCK:", "no silent wrong result")

	// Capacity: run a (a range run: a few records) held, 700 allowed: a
	// run of 700 items is refused whole.
	big, _ := writeMarkedInput(t, 700, "big")
	out, err = cli(t, c, "submit", "--input", big, "--run", "big", "--store", storeURL, "--items")
	require.Error(t, err, out)
	require.Contains(t, out, "capacity is 700 items")
	require.Regexp(t, `[1-9][0-9]* are in use and this would add 700`, out)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = runStatus(ctx, c, "big")
	require.ErrorIs(t, err, runs.ErrRunNotFound, "nothing was created")

	// Cancel a run part-way; an active run cannot be deleted first.
	slow, _ := writeMarkedInput(t, 400, "slow")
	// Items: a range worker claims worker.DefaultClaimHorizon (2s) of work at its
	// measured rate, all of this short run, so a cancel would find nothing
	// unclaimed to cancel; items are claimed a backlog at a time.
	out, err = cli(t, c, "submit", "--input", slow, "--run", "c", "--store", storeURL, "--items")
	require.NoError(t, err, out)
	require.Eventually(t, func() bool {
		rc, err := runStatus(ctx, c, "c")
		return err == nil && rc.GetDone() >= 20
	}, time.Minute, 50*time.Millisecond)
	out, err = cli(t, c, "delete", "--run", "c")
	require.Error(t, err, out)
	require.Contains(t, out, "cancel it first")
	out, err = cli(t, c, "cancel", "--run", "c")
	require.NoError(t, err, out)
	require.Contains(t, out, `cancelled run "c"`)
	var rc *rolloutv1.RunCounters
	require.Eventually(t, func() bool {
		rc, err = runStatus(ctx, c, "c")
		return err == nil && rc.GetRunning() == 0
	}, time.Minute, 50*time.Millisecond, "the cancelled run's running items end")
	require.True(t, rc.GetCancelled())
	require.Positive(t, rc.GetCancelledItems())
	require.Zero(t, rc.GetPending())
	require.Equal(t, uint64(400), rc.GetDone()+rc.GetCancelledItems()+rc.GetDead())
	out, err = cli(t, c, "status", "--run", "c")
	require.NoError(t, err, out)
	require.Contains(t, out, "cancelled")

	// Delete: the ledger forgets the run, the store loses its objects.
	rcC, err := runStatus(ctx, c, "c")
	require.NoError(t, err)
	prefixC := rcC.GetDataPrefix()
	require.True(t, strings.HasPrefix(prefixC, "clusters/"), prefixC)
	out, err = cli(t, c, "delete", "--run", "c")
	require.NoError(t, err, out)
	require.Contains(t, out, `deleted run "c" from the ledger: 400 item(s)`)
	require.Contains(t, out, "removed")
	_, err = runStatus(ctx, c, "c")
	require.ErrorIs(t, err, runs.ErrRunNotFound)
	_, err = os.Stat(filepath.Join(storeDir, filepath.FromSlash(prefixC)))
	require.ErrorIs(t, err, os.ErrNotExist, "the deleted run's prefix, directories included, is gone")
	out, err = cli(t, c, "delete", "--run", "a", "--keep-data")
	require.NoError(t, err, out)
	require.Contains(t, out, "kept its objects")
	require.NotEmpty(t, grepDir(t, filepath.Join(storeDir, filepath.FromSlash(rcA.GetDataPrefix())), marker))
	out, err = cli(t, c, "events", "--run", "c")
	require.NoError(t, err, out)
	require.Contains(t, out, "run-cancelled")
	require.Contains(t, out, "run-deleted")
	require.Contains(t, out, "deleted by cli")

	// With both deleted, the capacity has room again.
	out, err = cli(t, c, "submit", "--input", big, "--run", "big", "--store", storeURL)
	require.NoError(t, err, out)
}

// itemPayload reads a claimed item's payload as a worker does: inline, or
// from the run's store through its payload_ref.
func itemPayload(t *testing.T, ctx context.Context, it *rolloutv1.Item) []byte {
	t.Helper()
	ref := it.GetPayloadRef()
	if ref == nil {
		return it.GetPayload()
	}
	st, err := store.Open(ctx, it.GetStore(), store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()
	b, err := st.ReadRange(ctx, ref.GetObject(), int64(ref.GetOffset()), int64(ref.GetLength()))
	require.NoError(t, err)
	return b
}

// doneReport is the report of a claimed item done with result, as a worker
// sends it: for a run with a store, the result written durably to the
// run's store first and reported by reference.
func doneReport(t *testing.T, ctx context.Context, it *rolloutv1.Item, result []byte) *rolloutv1.ItemReport {
	t.Helper()
	r := &rolloutv1.ItemReport{Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt(), Outcome: rolloutv1.Outcome_OUTCOME_DONE}
	if it.GetStore() == "" {
		r.Result = result
		return r
	}
	st, err := store.Open(ctx, it.GetStore(), store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()
	key, sum, _, err := st.PutContent(ctx, store.RunResults(it.GetRun(), it.GetDataPrefix()), result)
	require.NoError(t, err)
	r.ResultRef = &rolloutv1.DataRef{Object: key, Length: uint64(len(result)), Blake3: sum[:]}
	return r
}
