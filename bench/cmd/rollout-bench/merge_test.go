package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/bench/summary"
)

// TestMergeKeepsOtherStages: a run of a subset of the stages, merged into
// an earlier results file, replaces the stages it ran and keeps every
// other stage's figures (and errors) with the time they were measured.
func TestMergeKeepsOtherStages(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "results.json")
	t0 := time.Date(2026, 11, 25, 10, 9, 0, 0, time.UTC)
	old := &Results{Started: t0, Stages: []string{"throughput", "etcd", "steal"}, Machine: Machine{Etcd: "3.4.23"},
		Throughput: []ThroughputRun{{Workers: 4, GroupCommit: true, ItemsPerS: 8664}},
		Etcd:       &EtcdRun{ItemsPerS: 2170},
		Steal:      &Steal{IdleP50MS: 17},
		Errors:     map[string]string{"etcd": "etcd went away", "steal": "old steal error"}}
	require.NoError(t, writeJSON(path, old))

	t1 := t0.Add(48 * time.Hour)
	lo, hi := 0.5, 1.54
	stealRun := summary.Run{Started: t1, Commit: "abcdef0123456789abcdef0123456789abcdef01", Load1Start: &lo, Load1End: &hi}
	res := &Results{Started: t1, Stages: []string{"steal", "fairness"}, Steal: &Steal{IdleP50MS: 12},
		Fairness: &Fairness{}, Errors: map[string]string{}, StageRuns: map[string]summary.Run{"steal": stealRun}}
	require.NoError(t, mergeInto(res, path))
	require.Equal(t, []string{"throughput", "etcd", "steal", "fairness"}, res.Stages, "every stage, in the harness's order")
	require.Equal(t, 8664.0, res.Throughput[0].ItemsPerS)
	require.Equal(t, 2170.0, res.Etcd.ItemsPerS)
	require.Equal(t, "3.4.23", res.Machine.Etcd)
	require.Equal(t, 12.0, res.Steal.IdleP50MS, "a stage run now replaces the file's")
	require.Equal(t, map[string]string{"etcd": "etcd went away"}, res.Errors, "a kept stage keeps its error; a rerun one drops the old")
	require.Equal(t, map[string]time.Time{"throughput": t0, "etcd": t0, "steal": t1, "fairness": t1}, res.StageStarted)
	res.Rows = rows(res)
	require.NoError(t, writeJSON(path, res))

	// Merged again, a kept stage keeps the time it was measured, not the
	// start of the file it was kept in.
	t2 := t1.Add(time.Hour)
	again := &Results{Started: t2, Stages: []string{"fairness"}, Fairness: &Fairness{}}
	require.NoError(t, mergeInto(again, path))
	require.Equal(t, t0, again.StageStarted["throughput"])
	require.Equal(t, t1, again.StageStarted["steal"])
	require.Equal(t, t2, again.StageStarted["fairness"])
	var md strings.Builder
	writeMarkdown(&md, again)
	require.Equal(t, stealRun.Commit, again.StageRuns["steal"].Commit, "a kept stage keeps its own commit and load")
	require.Contains(t, md.String(), "Each stage's run (date, commit, 1-min load at the stage's start→end): "+
		"throughput (2026-11-25 10:09 UTC, commit unknown); etcd (2026-11-25 10:09 UTC, commit unknown); "+
		"steal (2026-11-27 10:09 UTC, abcdef0, load 0.5→1.5); fairness (2026-11-27 11:09 UTC, commit unknown).")

	// No file: nothing to merge. A damaged one: an error naming it.
	fresh := &Results{Started: t2, Stages: []string{"steal"}}
	require.NoError(t, mergeInto(fresh, filepath.Join(dir, "none.json")))
	require.Equal(t, []string{"steal"}, fresh.Stages)
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("{not json"), 0o644))
	err := mergeInto(&Results{Stages: []string{"steal"}}, bad)
	require.ErrorContains(t, err, bad)
	var back Results
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Len(t, back.StageStarted, 4)
}

func TestCount(t *testing.T) {
	for n, want := range map[uint64]string{0: "0", 50: "50", 999: "999", 1000: "1,000", 1234567: "1,234,567"} {
		require.Equal(t, want, count(n))
	}
}
