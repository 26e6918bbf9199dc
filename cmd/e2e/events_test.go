package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/testbin"
)

// eventRow is one row of `rollout events`' table.
type eventRow struct {
	seq, term           uint64
	kind, subject, line string
}

// parseEvents reads the table `rollout events` prints (fixed-width columns:
// SEQ, TIME (date and time), TERM, KIND, SUBJECT, DETAIL).
func parseEvents(t *testing.T, out string) []eventRow {
	t.Helper()
	var rows []eventRow
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] == "SEQ" {
			continue
		}
		seq, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue // a note, not a row
		}
		term, err := strconv.ParseUint(f[3], 10, 64)
		require.NoError(t, err, "row %q", line)
		rows = append(rows, eventRow{seq: seq, term: term, kind: f[4], subject: strings.Join(f[5:min(7, len(f))], " "), line: line})
	}
	return rows
}

// find returns the index of the first row at or after from with kind whose
// subject starts with subject, or -1.
func find(rows []eventRow, from int, kind, subject string) int {
	for i := max(from, 0); i < len(rows); i++ {
		if rows[i].kind == kind && strings.HasPrefix(rows[i].subject, subject) {
			return i
		}
	}
	return -1
}

// TestEventsShowRunLeaderAndEviction runs real replicas, a real worker and
// the real CLI: a run finishes, the leader is SIGKILLed and a worker is
// evicted, and `rollout events` shows, in order and with consecutive seqs,
// the first leader's election, the worker registered, the run created and
// finished, the second leader's election at a higher term, and the
// eviction; the worker, stopped with SIGTERM, drains and deregisters with
// its reason. A `rollout events --follow` started before any of it prints
// the events that happen after it started (across the leader's death) and
// exits 0 on SIGINT.
func TestEventsShowRunLeaderAndEviction(t *testing.T) {
	const n = 20
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// --follow, from the start.
	var follow testbin.Output
	fargs := append([]string{"events", "--coord", c.CoordFlag()}, c.TLSArgs("cli")...)
	fcmd := exec.CommandContext(ctx, filepath.Join(binDir, "rollout"), append(fargs, "--follow")...)
	fcmd.Stdout, fcmd.Stderr = &follow, &follow
	require.NoError(t, fcmd.Start())
	fdone := make(chan error, 1)
	go func() { fdone <- fcmd.Wait() }()
	t.Cleanup(func() {
		if fcmd.ProcessState == nil {
			_ = fcmd.Process.Kill()
			<-fdone
		}
	})
	require.Eventually(t, func() bool { return strings.Contains(follow.String(), "leader-elected") }, time.Minute, 20*time.Millisecond,
		"--follow did not print the history: %s", follow.String())
	started := len(parseEvents(t, follow.String()))

	_, err := c.StartWorker("w1", "--backend", "mock", "--concurrency", "2", "--mock-latency", "5ms", "--heartbeat", "200ms")
	require.NoError(t, err)
	input, _ := writeInput(t, n)
	out, err := cli(t, c, "submit", "--input", input, "--run", "evrun")
	require.NoError(t, err, out)
	waitDone(t, c, "evrun", n, 2*time.Minute, nil)

	old, oldTerm, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	require.NoError(t, old.Kill())
	leader, term, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	require.Greater(t, term, oldTerm)

	out, err = cliFlagsLast(t, c, "admin", "worker", "evict", "w1")
	require.NoError(t, err, out)

	out, err = cli(t, c, "events")
	require.NoError(t, err, out)
	t.Logf("rollout events:\n%s", out)
	rows := parseEvents(t, out)
	for i := 1; i < len(rows); i++ {
		require.Equal(t, rows[i-1].seq+1, rows[i].seq, "seqs are consecutive:\n%s", out)
	}
	elected1 := find(rows, 0, "leader-elected", "member "+old.ID)
	registered := find(rows, elected1, "worker-registered", "worker w1")
	created := find(rows, elected1, "run-created", "run evrun")
	finished := find(rows, created, "run-finished", "run evrun")
	elected2 := find(rows, finished, "leader-elected", "member "+leader.ID)
	evicted := find(rows, elected2, "worker-evicted", "worker w1")
	for name, i := range map[string]int{"first election": elected1, "registration": registered, "run created": created,
		"run finished": finished, "second election": elected2, "eviction": evicted} {
		require.GreaterOrEqual(t, i, 0, "no %s in order in:\n%s", name, out)
	}
	require.Less(t, registered, finished, out)
	require.Equal(t, oldTerm, rows[elected1].term, out)
	require.Equal(t, term, rows[elected2].term, out)
	require.Contains(t, rows[evicted].line, "evicted by admin", out)
	require.Contains(t, rows[finished].line, "20 items", out)

	// --run keeps that run's events only.
	out, err = cli(t, c, "events", "--run", "evrun")
	require.NoError(t, err, out)
	for _, r := range parseEvents(t, out) {
		require.Contains(t, r.subject, "run evrun", out)
	}

	// The evicted worker registers again; SIGTERM makes it drain and
	// deregister with its reason.
	var w1 interface{ Signal(syscall.Signal) error }
	for _, w := range c.Workers() {
		if w.ID == "w1" {
			w1 = w
		}
	}
	require.Eventually(t, func() bool {
		out, err := cli(t, c, "events", "--after", strconv.FormatUint(rows[evicted].seq, 10))
		return err == nil && find(parseEvents(t, out), 0, "worker-registered", "worker w1") >= 0
	}, time.Minute, 200*time.Millisecond, "the evicted worker did not register again")
	require.NoError(t, w1.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		out, err := cli(t, c, "events", "--after", strconv.FormatUint(rows[evicted].seq, 10))
		if err != nil {
			return false
		}
		i := find(parseEvents(t, out), 0, "worker-deregistered", "worker w1")
		return i >= 0 && strings.Contains(parseEvents(t, out)[i].line, "drain: signal: received SIGTERM")
	}, time.Minute, 200*time.Millisecond, "no deregistration with the drain's reason")

	// --follow printed what happened after it started, the second
	// election and the eviction included, and ends with status 0 on SIGINT.
	require.Eventually(t, func() bool {
		return find(parseEvents(t, follow.String()), 0, "worker-deregistered", "worker w1") >= 0
	}, time.Minute, 50*time.Millisecond, "--follow did not print the new events:\n%s", follow.String())
	frows := parseEvents(t, follow.String())
	require.Greater(t, len(frows), started)
	require.GreaterOrEqual(t, find(frows, started, "leader-elected", "member "+leader.ID), 0, follow.String())
	require.GreaterOrEqual(t, find(frows, started, "worker-evicted", "worker w1"), 0, follow.String())
	for i := 1; i < len(frows); i++ {
		require.Equal(t, frows[i-1].seq+1, frows[i].seq, "--follow printed each event once, in order:\n%s", follow.String())
	}
	require.NoError(t, fcmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-fdone:
		require.NoError(t, err, "rollout events --follow exits 0 when interrupted:\n%s", follow.String())
	case <-ctx.Done():
		t.Fatal("--follow did not exit on SIGINT")
	}
}
