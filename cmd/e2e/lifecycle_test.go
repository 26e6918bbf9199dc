package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/localcluster"
)

// ledgerWorker returns the ledger's view of worker id (nil when unknown).
func ledgerWorker(ctx context.Context, c *localcluster.Cluster, run, id string) *rolloutv1.WorkerStatus {
	client, err := c.Client()
	if err != nil {
		return nil
	}
	defer client.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := client.RunStatus(cctx, &rolloutv1.RunStatusRequest{Run: run})
	if err != nil {
		return nil
	}
	for _, w := range resp.GetWorkers() {
		if w.GetId() == id {
			return w
		}
	}
	return nil
}

// resultItems reads every item of run through the API, in index order.
func resultItems(t *testing.T, c *localcluster.Cluster, run string, n int) []*rolloutv1.ResultItem {
	t.Helper()
	client, err := c.Client()
	require.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := allResults(t, ctx, client, run)
	require.Len(t, out, n)
	return out
}

var (
	workerStatsLine = regexp.MustCompile(`rollout-worker (\S+): stopped after \S+: completed=(\d+) failed=\d+ nacked=(\d+)`)
	nackedRange     = regexp.MustCompile(`^(.*)#(\d+)\+(\d+)$`)
	workerDrainLine = regexp.MustCompile(`rollout-worker (\S+): drain: provider=(\S+) took=(\S+) deadline_in=\S+ within_deadline=(\w+) forced=(\w+) .* deregistered=(\w+) nacked=(\d+) nacked_items=\[([^\]]*)\]`)
)

// workerSummary is what a stopped rollout-worker printed.
type workerSummary struct {
	completed, nacked int
	// drain fields
	provider                             string
	took                                 time.Duration
	withinDeadline, forced, deregistered bool
	nackedItems                          []string // run#index (a nacked range: one per index)
}

// parseWorkerLog parses the last stats and drain lines of a worker's log.
func parseWorkerLog(t *testing.T, w *localcluster.Worker) workerSummary {
	t.Helper()
	log := w.Tail(1 << 20)
	var s workerSummary
	m := workerStatsLine.FindAllStringSubmatch(log, -1)
	require.NotEmpty(t, m, "no stats line in %s's log:\n%s", w.Name, w.Tail(3000))
	last := m[len(m)-1]
	s.completed, _ = strconv.Atoi(last[2])
	s.nacked, _ = strconv.Atoi(last[3])
	d := workerDrainLine.FindAllStringSubmatch(log, -1)
	require.NotEmpty(t, d, "no drain line in %s's log:\n%s", w.Name, w.Tail(3000))
	ld := d[len(d)-1]
	s.provider = ld[2]
	var err error
	s.took, err = time.ParseDuration(ld[3])
	require.NoError(t, err)
	s.withinDeadline, s.forced, s.deregistered = ld[4] == "true", ld[5] == "true", ld[6] == "true"
	refs := strings.Fields(ld[8])
	n, _ := strconv.Atoi(ld[7])
	require.Len(t, refs, n)
	// A range's nack is run#lo+count: one entry per index here.
	for _, ref := range refs {
		m := nackedRange.FindStringSubmatch(ref)
		if m == nil {
			s.nackedItems = append(s.nackedItems, ref)
			continue
		}
		lo, err := strconv.ParseUint(m[2], 10, 64)
		require.NoError(t, err, ref)
		count, err := strconv.ParseUint(m[3], 10, 64)
		require.NoError(t, err, ref)
		for i := lo; i < lo+count; i++ {
			s.nackedItems = append(s.nackedItems, fmt.Sprintf("%s#%d", m[1], i))
		}
	}
	return s
}

// sigtermAndWait sends SIGTERM and requires a clean exit within d.
func sigtermAndWait(t *testing.T, w *localcluster.Worker, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	require.NoError(t, w.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(d), "%s did not exit cleanly within %v:\n%s", w.Name, d, w.Tail(3000))
	return time.Since(start)
}

// TestSigtermDrain sends SIGTERM to a busy rollout-worker process (it runs
// slow items and holds a backlog) while other workers share the run. It must
// exit 0 within its --drain-timeout, having nacked its unstarted items,
// finished its in-flight ones and deregistered; the nacked items are
// completed by the other workers and the run's output holds every input
// exactly once. Then a second worker with items far longer than its drain
// timeout gets SIGTERM twice: the second signal forces the exit at once,
// nacking its in-flight items too, and that run still completes exactly
// once.
func TestSigtermDrain(t *testing.T) {
	const n = 240
	const drainTimeout = 3 * time.Second
	c := startCluster(t)
	input, lines := writeInput(t, n)
	busy, err := c.StartWorker("w1", "--backend", "mock", "--concurrency", "2", "--backlog", "8",
		"--mock-latency", "400ms", "--drain-timeout", drainTimeout.String(), "--heartbeat", "200ms")
	require.NoError(t, err)
	out, err := cli(t, c, "submit", "--input", input, "--run", "sigterm")
	require.NoError(t, err, out)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.Eventually(t, func() bool {
		ws := ledgerWorker(ctx, c, "sigterm", "w1")
		return ws != nil && ws.GetCompleted() >= 2 && ws.GetRunning() > 2
	}, time.Minute, 50*time.Millisecond, "w1 measured and holding a backlog")
	var helpers []*localcluster.Worker
	for _, id := range []string{"w2", "w3"} {
		w, err := c.StartWorker(id, "--backend", "mock", "--concurrency", "4", "--mock-latency", "20ms", "--heartbeat", "200ms")
		require.NoError(t, err)
		helpers = append(helpers, w)
	}

	took := sigtermAndWait(t, busy, drainTimeout)
	t.Logf("w1 exited %v after SIGTERM (drain timeout %v)", took.Round(time.Millisecond), drainTimeout)
	require.Less(t, took, drainTimeout)
	s := parseWorkerLog(t, busy)
	require.Equal(t, "signal", s.provider)
	require.True(t, s.withinDeadline)
	require.True(t, s.deregistered)
	require.False(t, s.forced)
	require.NotEmpty(t, s.nackedItems, "w1 held unstarted items when it was stopped")
	require.Equal(t, len(s.nackedItems), s.nacked)

	waitDone(t, c, "sigterm", n, 2*time.Minute, nil)
	completed := s.completed
	for _, w := range helpers {
		sigtermAndWait(t, w, 30*time.Second)
		completed += parseWorkerLog(t, w).completed
	}
	require.Equal(t, n, completed, "accepted completions over all workers")
	items := resultItems(t, c, "sigterm", n)
	for _, ref := range s.nackedItems {
		i, err := strconv.Atoi(strings.TrimPrefix(ref, "sigterm#"))
		require.NoError(t, err, ref)
		require.Equal(t, rolloutv1.ItemState_ITEM_STATE_DONE, items[i].GetState(), "nacked item %d", i)
		require.NotEqual(t, "w1", items[i].GetOwner(), "nacked item %d completed by the stopped worker", i)
	}
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	out, err = cli(t, c, "results", "--run", "sigterm", "-o", outPath)
	require.NoError(t, err, out)
	checkOutput(t, outPath, lines)

	// A second SIGTERM forces the exit.
	const m = 6
	input2, lines2 := writeInput(t, m)
	slow, err := c.StartWorker("w4", "--backend", "mock", "--concurrency", "2", "--backlog", "4",
		"--mock-latency", "5m", "--drain-timeout", "10m", "--heartbeat", "200ms")
	require.NoError(t, err)
	out, err = cli(t, c, "submit", "--input", input2, "--run", "forced")
	require.NoError(t, err, out)
	require.Eventually(t, func() bool {
		rc, err := runStatus(ctx, c, "forced")
		return err == nil && rc.GetRunning() == 4
	}, time.Minute, 50*time.Millisecond, "w4 holds 4 items, 2 of them running")
	require.NoError(t, slow.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		rc, err := runStatus(ctx, c, "forced")
		return err == nil && rc.GetRunning() == 2 && rc.GetPending() == 4
	}, time.Minute, 50*time.Millisecond, "first SIGTERM: the unstarted items are nacked, the in-flight ones keep running")
	took = sigtermAndWait(t, slow, 10*time.Second)
	t.Logf("w4 exited %v after its second SIGTERM", took.Round(time.Millisecond))
	s4 := parseWorkerLog(t, slow)
	require.True(t, s4.forced)
	require.True(t, s4.deregistered)
	require.Len(t, s4.nackedItems, 4, "the forced exit nacks the in-flight items too")
	require.Zero(t, s4.completed)

	finisher, err := c.StartWorker("w5", "--backend", "mock", "--concurrency", "4", "--mock-latency", "10ms")
	require.NoError(t, err)
	waitDone(t, c, "forced", m, time.Minute, nil)
	sigtermAndWait(t, finisher, 30*time.Second)
	require.Equal(t, m, parseWorkerLog(t, finisher).completed)
	outPath2 := filepath.Join(t.TempDir(), "out2.jsonl")
	out, err = cli(t, c, "results", "--run", "forced", "-o", outPath2)
	require.NoError(t, err, out)
	checkOutput(t, outPath2, lines2)
}

// TestClusterRemoveLeaderCLI removes the leader replica with the real
// `rollout cluster remove` while workers run: leadership moves first, the
// removal completes at the new leader, the removed process is stopped, and
// the run completes exactly once on the two replicas left.
func TestClusterRemoveLeaderCLI(t *testing.T) {
	const n = 400
	c := startCluster(t)
	input, lines := writeInput(t, n)
	var workers []*localcluster.Worker
	for _, id := range []string{"w1", "w2"} {
		w, err := c.StartWorker(id, "--backend", "mock", "--concurrency", "2", "--mock-latency", "30ms", "--heartbeat", "200ms")
		require.NoError(t, err)
		workers = append(workers, w)
	}
	out, err := cli(t, c, "submit", "--input", input, "--run", "shrink")
	require.NoError(t, err, out)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader, term, err := c.WaitLeader(ctx)
	require.NoError(t, err)

	removed := false
	waitDone(t, c, "shrink", n, 2*time.Minute, func(rc *rolloutv1.RunCounters) {
		if removed || rc.GetDone() < n/4 {
			return
		}
		require.Less(t, rc.GetDone(), uint64(n), "the run finished before the leader could be removed")
		out, err := cliAs(t, c, "admin", "cluster", "remove", leader.ID)
		require.NoError(t, err, out)
		require.Contains(t, out, "removed replica "+leader.ID)
		require.NoError(t, leader.Stop(10*time.Second))
		removed = true
		t.Logf("removed leader %s (term %d) at %d/%d done: %s", leader.ID, term, rc.GetDone(), n, strings.TrimSpace(out))
	})
	require.True(t, removed)
	newLeader, newTerm, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	require.NotEqual(t, leader.ID, newLeader.ID)
	require.Greater(t, newTerm, term)

	completed := 0
	for _, w := range workers {
		sigtermAndWait(t, w, 30*time.Second)
		completed += parseWorkerLog(t, w).completed
	}
	require.Equal(t, n, completed)
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	out, err = cli(t, c, "results", "--run", "shrink", "-o", outPath)
	require.NoError(t, err, out)
	checkOutput(t, outPath, lines)

	out, err = cli(t, c, "cluster")
	require.NoError(t, err, out)
	section := out[strings.Index(out, "members (as seen by"):]
	require.NotContains(t, section, leader.ID+" ", "the removed replica is still a member:\n%s", out)
	require.Equal(t, 2, strings.Count(section, "Voter"), out)
}
