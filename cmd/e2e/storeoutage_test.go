package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/s3test"
)

// TestStoreOutageIsolatesRun: two runs on two real S3-compatible servers
// (versitygw on loopback), a 3-replica mutual-TLS cluster and two mock
// workers, all real processes. One server is stopped (connection refused)
// before the workers start: its run is isolated - `rollout status` says
// its store is unreachable, an event says so - while the other run
// finishes; no item of the isolated run fails. The server comes back:
// the run resumes by itself and finishes, every result exactly its input's.
func TestStoreOutageIsolatesRun(t *testing.T) {
	up, down := s3test.Start(t), s3test.Start(t)
	up.Setenv(t) // both servers take the same credentials
	c := startCluster(t)
	const nDown, nUp = 300, 1200

	inDown, linesDown := writeMarkedInput(t, nDown, "outage-down")
	out, err := cli(t, c, "submit", "--input", inDown, "--run", "dark", "--store", down.URL)
	require.NoError(t, err, out)
	down.Stop() // a real outage: connections refused
	inUp, linesUp := writeMarkedInput(t, nUp, "outage-up")
	out, err = cli(t, c, "submit", "--input", inUp, "--run", "lit", "--store", up.URL)
	require.NoError(t, err, out)
	for i := 1; i <= 2; i++ {
		_, err := c.StartWorker(fmt.Sprintf("w%d", i), "--backend", "mock", "--concurrency", "8", "--mock-latency", "2ms")
		require.NoError(t, err)
	}

	began := time.Now()
	// The other run finishes while the store of the first is down.
	rc := waitDone(t, c, "lit", nUp, 45*time.Second, nil)
	require.Zero(t, rc.GetDead())
	t.Logf("run lit finished %v after the workers started, while the store of run dark was down", time.Since(began).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var status string
	for {
		status, err = cli(t, c, "status")
		require.NoError(t, err, status)
		if strings.Contains(status, "store unreachable since") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("rollout status never said the run's store is unreachable:\n%s", status)
		case <-time.After(200 * time.Millisecond):
		}
	}
	var darkLine string
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "dark ") {
			darkLine = l
		}
	}
	t.Logf("rollout status after %v: %s", time.Since(began).Round(time.Millisecond), strings.TrimSpace(darkLine))
	require.Contains(t, darkLine, "store unreachable since", status)
	require.Contains(t, darkLine, "object store unavailable", status)
	rcDark, err := runStatus(ctx, c, "dark")
	require.NoError(t, err)
	require.True(t, rcDark.GetStall().GetStoreUnreachable())
	require.Zero(t, rcDark.GetDone())
	require.Zero(t, rcDark.GetFailures(), "an unreachable store fails no item")
	require.Zero(t, rcDark.GetDead())
	out, err = cli(t, c, "events", "--run", "dark")
	require.NoError(t, err, out)
	require.Contains(t, out, "store unreachable (isolated)")

	// The store comes back: the run resumes by itself and finishes exactly.
	require.NoError(t, down.Restart())
	back := time.Now()
	rcDark = waitDone(t, c, "dark", nDown, 50*time.Second, nil)
	t.Logf("run dark finished %v after its store came back", time.Since(back).Round(time.Millisecond))
	require.Zero(t, rcDark.GetDead())
	require.Zero(t, rcDark.GetFailures(), "an unreachable store fails no item")
	require.Nil(t, rcDark.GetStall())
	out, err = cli(t, c, "events", "--run", "dark")
	require.NoError(t, err, out)
	require.Contains(t, out, "store reachable again")
	for _, r := range []struct {
		run   string
		lines []map[string]any
	}{{"dark", linesDown}, {"lit", linesUp}} {
		path := filepath.Join(t.TempDir(), r.run+".jsonl")
		out, err = cli(t, c, "results", "--run", r.run, "-o", path)
		require.NoError(t, err, out)
		checkOutput(t, path, r.lines)
	}
}

// TestStoreRefusalFailsItems: a store that answers, but refuses the
// workers (here their secret key is wrong: S3 answers 403
// SignatureDoesNotMatch), is not an outage: the run is not isolated, its
// items fail at once and go Dead after max_failures naming the refusal,
// and `rollout status` shows the run finished, not its store unreachable.
func TestStoreRefusalFailsItems(t *testing.T) {
	s3 := s3test.Start(t)
	s3.Setenv(t)
	c := startCluster(t)
	const n = 50
	in, _ := writeMarkedInput(t, n, "refused")
	out, err := cli(t, c, "submit", "--input", in, "--run", "denied", "--store", s3.URL, "--max-failures", "2")
	require.NoError(t, err, out)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret") // the workers' only
	for i := 1; i <= 2; i++ {
		_, err := c.StartWorker(fmt.Sprintf("w%d", i), "--backend", "mock", "--concurrency", "4")
		require.NoError(t, err)
	}
	rc := waitDone(t, c, "denied", n, 45*time.Second, nil)
	require.EqualValues(t, n, rc.GetDead())
	require.EqualValues(t, 2*n, rc.GetFailures())
	require.Nil(t, rc.GetStall(), "a refusal does not isolate the run")
	out, err = cli(t, c, "events", "--run", "denied", "--json")
	require.NoError(t, err, out)
	require.Contains(t, out, "SignatureDoesNotMatch") // the store's answer, as the items' reason
	require.NotContains(t, out, "store unreachable")
	require.NotContains(t, out, "run-stalled")
	out, err = cli(t, c, "status")
	require.NoError(t, err, out)
	require.Regexp(t, `denied .* finished in`, out)
}

// TestStoreOutageMidRun: the store of a run under way goes down (its
// workers hold finished results they cannot write, and read nothing): the
// run is isolated, a run submitted during the outage finishes, and when
// the store is back the first run finishes with no failure, every result
// exactly its input's (none lost, none twice).
func TestStoreOutageMidRun(t *testing.T) {
	up, down := s3test.Start(t), s3test.Start(t)
	up.Setenv(t)
	c := startCluster(t)
	const nDown, nUp = 2000, 1500
	inDown, linesDown := writeMarkedInput(t, nDown, "mid-down")
	out, err := cli(t, c, "submit", "--input", inDown, "--run", "dark", "--store", down.URL)
	require.NoError(t, err, out)
	inUp, linesUp := writeMarkedInput(t, nUp, "mid-up")
	for i := 1; i <= 3; i++ {
		_, err := c.StartWorker(fmt.Sprintf("w%d", i), "--backend", "mock", "--concurrency", "8", "--mock-latency", "10ms")
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Wait on a condition: some of the run done, not all of it.
	for {
		rc, err := runStatus(ctx, c, "dark")
		require.NoError(t, err)
		if rc.GetDone() >= 200 {
			require.Less(t, rc.GetDone(), uint64(nDown), "the run finished before its store could go down")
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run dark made no progress: %v", rc)
		case <-time.After(20 * time.Millisecond):
		}
	}
	down.Stop()
	out, err = cli(t, c, "submit", "--input", inUp, "--run", "lit", "--store", up.URL)
	require.NoError(t, err, out)
	waitDone(t, c, "lit", nUp, 60*time.Second, nil)
	for {
		rc, err := runStatus(ctx, c, "dark")
		require.NoError(t, err)
		if rc.GetStall().GetStoreUnreachable() {
			require.Zero(t, rc.GetFailures())
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run dark was never isolated: %v", rc)
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.NoError(t, down.Restart())
	rc := waitDone(t, c, "dark", nDown, 60*time.Second, func(*rolloutv1.RunCounters) {})
	require.Zero(t, rc.GetFailures(), "the outage failed no item")
	require.Zero(t, rc.GetDead())
	for _, r := range []struct {
		run   string
		lines []map[string]any
	}{{"dark", linesDown}, {"lit", linesUp}} {
		path := filepath.Join(t.TempDir(), r.run+".jsonl")
		out, err = cli(t, c, "results", "--run", r.run, "-o", path)
		require.NoError(t, err, out)
		checkOutput(t, path, r.lines)
	}
}
