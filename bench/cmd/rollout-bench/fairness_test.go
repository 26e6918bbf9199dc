package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFairnessSmallRun runs the fairness stage small against real
// binaries: tenant B's run is done beside tenant A's, A's run ends with
// every item accounted for, the weighted runs both progress over the
// window, the priority-5 run starts and finishes, and the rows say so.
// (The figures' targets are judged in make bench, not here: a loaded
// machine may miss them.)
func TestFairnessSmallRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("environment: GOOS=%s; rollout-bench runs on Linux only (it reads /proc)", runtime.GOOS)
	}
	if testing.Short() {
		t.Skip("environment: short mode (-short): this test starts real clusters")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	cfg, err := parseFlags([]string{
		"--bin", binDir, "--dir", filepath.Join(dir, "work"), "--out", out, "--only", "fairness",
		"--fairness-big-items", "20000", "--fairness-small-items", "50", "--fairness-weight-items", "20000",
		"--fairness-warmup", "1s", "--fairness-window", "4s",
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, cfg))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	var res Results
	require.NoError(t, json.Unmarshal(data, &res))
	f := res.Fairness
	require.NotNil(t, f)
	require.Greater(t, f.SmallDoneS, 0.0)
	require.Equal(t, uint64(20000), f.BigTotal)
	require.Equal(t, uint64(20000), f.BigDone, "A's run finished whole")
	require.Zero(t, f.BigLost)
	require.Greater(t, f.LowDone, uint64(0))
	require.Greater(t, f.HighDone, f.LowDone, "weight 3 finished more than weight 1")
	require.True(t, f.PriorityStarted)
	require.Greater(t, f.BehindPending, uint64(0))
	var rows []string
	for _, r := range res.Rows {
		if strings.HasPrefix(r.Metric, "11. fairness") {
			rows = append(rows, r.Metric)
		}
	}
	require.Len(t, rows, 4, "%v", rows)
}
