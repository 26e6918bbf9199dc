package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// TestLivenessSmallRun runs the liveness stage tiny (50 simulated workers,
// 1 s windows, a 2 s failure timeout) against real binaries and checks
// what it measured, including the two contracts it watches: a stopped
// worker is declared lost within the failure timeout plus one second, and
// a leader's SIGKILL expires nobody who keeps heartbeating.
func TestLivenessSmallRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("environment: GOOS=%s; rollout-bench runs on Linux only (it reads /proc)", runtime.GOOS)
	}
	if testing.Short() {
		t.Skip("environment: short mode (-short): this test starts a real cluster")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	cfg, err := parseFlags([]string{
		"--bin", binDir, "--dir", filepath.Join(dir, "work"), "--out", out, "--only", "liveness",
		"--liveness-workers", "20,50", "--liveness-busy-workers", "50", "--liveness-busy-real", "1",
		"--liveness-window", "1s", "--liveness-settle", "0s", "--liveness-failure-timeout", "2s",
		"--liveness-expiry-wait", "20s",
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, cfg))

	data, err := os.ReadFile(out)
	require.NoError(t, err)
	var res Results
	require.NoError(t, json.Unmarshal(data, &res))
	require.Empty(t, res.Errors)
	l := res.Liveness
	require.NotNil(t, l)
	require.NotNil(t, l.NoWorkers)
	require.Zero(t, l.NoWorkers.Workers)
	require.Zero(t, l.NoWorkers.HeartbeatsPerS)
	require.Len(t, l.Idle, 2)
	for i, r := range l.Idle {
		require.Equal(t, []int{20, 50}[i], r.Workers)
		require.Greater(t, r.LeaderCPUPct, 0.0)
		require.Greater(t, r.HeartbeatsPerS, 0.0, "the leader handled the fleet's heartbeats")
		require.Greater(t, r.SimHeartbeatsPerS, 0.0)
		require.Greater(t, r.LeaderRSS, int64(0))
		require.Zero(t, r.HeartbeatErrors)
	}
	require.NotNil(t, l.Busy)
	require.Greater(t, l.Busy.ItemsPerS, 0.0)
	require.Greater(t, l.Busy.WorkRPCsPerS, 0.0)
	require.Greater(t, l.Busy.EntriesPerS, 0.0)
	require.NotNil(t, l.WorkerKill)
	require.True(t, l.WorkerKill.Declared, "the stopped worker was declared lost")
	require.Greater(t, l.WorkerKill.DeclaredMS, 0.0)
	if l.WorkerKill.Elections == 0 {
		require.LessOrEqual(t, l.WorkerKill.DeclaredMS, l.WorkerKill.LimitMS, "a stopped worker is declared lost within the failure timeout plus one second")
	} else {
		// A new leader gives every worker a full failure timeout from its
		// election: the limit does not hold across elections.
		t.Logf("%d elections between the worker's stop and its expiry (%.0f ms): the limit is not checked", l.WorkerKill.Elections, l.WorkerKill.DeclaredMS)
	}
	require.NotNil(t, l.LeaderKill)
	require.Equal(t, 50, l.LeaderKill.Workers)
	require.Greater(t, l.LeaderKill.ServingMS, 0.0)
	require.Zero(t, l.LeaderKill.Expired, "no worker that keeps heartbeating expires after a leader's death")
	require.False(t, l.LeaderKill.Lower)
	require.NotEmpty(t, res.Rows)
	require.Empty(t, procsOf(t, binDir), "processes left running")
}

// TestMergeKeepsLiveness checks that a run of another stage keeps the
// liveness figures of the file it merges into (--merge), and that a
// liveness run replaces them.
func TestMergeKeepsLiveness(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	before := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	old := &Results{Started: before, Stages: []string{"steal", "liveness"},
		Steal:    &Steal{Steals: 7},
		Liveness: &Liveness{Idle: []LivenessIdle{{Workers: 1}}},
		Errors:   map[string]string{"liveness": "old liveness failure"}}
	require.NoError(t, writeJSON(path, old))

	now := before.Add(24 * time.Hour)
	res := &Results{Started: now, Stages: []string{"steal"}, Steal: &Steal{Steals: 9}, Errors: map[string]string{}}
	require.NoError(t, mergeInto(res, path))
	require.Equal(t, []string{"steal", "liveness"}, res.Stages)
	require.Equal(t, old.Liveness, res.Liveness)
	require.Equal(t, map[string]string{"liveness": "old liveness failure"}, res.Errors)
	require.Equal(t, before, res.StageStarted["liveness"])

	again := &Results{Started: now, Stages: []string{"liveness"}, Liveness: &Liveness{Idle: []LivenessIdle{{Workers: 2}}}, Errors: map[string]string{}}
	require.NoError(t, mergeInto(again, path))
	require.Equal(t, 2, again.Liveness.Idle[0].Workers, "the stage run now replaces its earlier figures")
	require.Empty(t, again.Errors, "an earlier failure of a stage run now is dropped")
}

// TestAskedInterval checks the interval the fleet reads from a heartbeat
// reply: none when the reply asks none, the asked one, and rollout-worker's
// cap on it; and that the fleet waits the longer of its own and the asked
// one, jitter only shortening it.
func TestAskedInterval(t *testing.T) {
	_, ok := askedInterval(&rolloutv1.HeartbeatResponse{})
	require.False(t, ok)
	d, ok := askedInterval(&rolloutv1.HeartbeatResponse{NextHeartbeatMs: 2500})
	require.True(t, ok)
	require.Equal(t, 2500*time.Millisecond, d)
	d, _ = askedInterval(&rolloutv1.HeartbeatResponse{NextHeartbeatMs: 1 << 40})
	require.Equal(t, maxAskedHeartbeat, d)

	f := newFleet(fleetConfig{Addrs: []string{"127.0.0.1:1"}, Interval: time.Second, Jitter: 0.2})
	w := &simWorker{}
	require.Equal(t, time.Second, f.workerInterval(w))
	w.askedMS.Store(500)
	require.Equal(t, time.Second, f.workerInterval(w), "an asked interval shorter than the own one does not shorten it")
	w.askedMS.Store(100_000)
	require.Equal(t, 100*time.Second, f.workerInterval(w))
	for range 1000 {
		j := shortened(100*time.Second, 0.2)
		require.True(t, j > 80*time.Second && j <= 100*time.Second, j)
	}
}
