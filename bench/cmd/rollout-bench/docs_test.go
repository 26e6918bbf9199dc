package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/bench/summary"
	"github.com/rollout/rollout/internal/testbin"
)

// TestBenchmarksSummaryMatchesResults is make test's check that no figure
// in docs/BENCHMARKS.md's summary disagrees with the committed results:
// the generated block must be exactly the table that bench/results.json
// and bench/results-scale.json give (make bench-docs writes it).
func TestBenchmarksSummaryMatchesResults(t *testing.T) {
	root, err := testbin.ModuleRoot()
	require.NoError(t, err)
	main, err := readResults(filepath.Join(root, "bench", "results.json"))
	require.NoError(t, err)
	table, err := summaryTable("bench/results.json", main, []string{filepath.Join(root, "bench", "results-scale.json")})
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "BENCHMARKS.md"))
	require.NoError(t, err)
	require.NoError(t, summary.Check(doc, table), "docs/BENCHMARKS.md's summary disagrees with bench/results.json")
}

// TestDocsFlag: --render with --docs rewrites only the generated block
// from the results file and --docs-also's; a document without the block,
// or a missing --docs-also file, is an error that leaves the document as
// it was.
func TestDocsFlag(t *testing.T) {
	dir := t.TempDir()
	in, scale, md := filepath.Join(dir, "r.json"), filepath.Join(dir, "s.json"), filepath.Join(dir, "B.md")
	res := &Results{Started: t0(), Stages: []string{"throughput"},
		Throughput: []ThroughputRun{{Workers: 4, GroupCommit: true, ItemsPerS: 1234, ItemsPerEntry: 10}},
		StageRuns:  map[string]summary.Run{"throughput": {Started: t0(), Commit: "0123456789abcdef"}}}
	require.NoError(t, writeJSON(in, res))
	require.NoError(t, writeJSON(scale, &Results{Started: t0(), Stages: []string{"scale-e2e"}}))
	before := "# B\n\nprose 24,230\n\n" + summary.Begin + "\n| stale |\n" + summary.End + "\n\nhistory\n"
	require.NoError(t, os.WriteFile(md, []byte(before), 0o644))

	cfg, err := parseFlags([]string{"--render", in, "--docs", md, "--docs-also", scale})
	require.NoError(t, err)
	require.NoError(t, run(t.Context(), cfg))
	got, err := os.ReadFile(md)
	require.NoError(t, err)
	require.Contains(t, string(got), "| items/s end to end, 4 mock workers, group commit | 1,234 (10.0 items/entry) | ≥ 50,000 | no | 2026-11-25 10:09 UTC, 0123456 |\n")
	require.NotContains(t, string(got), "| stale |")
	require.True(t, strings.HasPrefix(string(got), "# B\n\nprose 24,230\n\n"+summary.Begin+"\n"), "text outside the block is kept")
	require.True(t, strings.HasSuffix(string(got), summary.End+"\n\nhistory\n"), "text outside the block is kept")

	// No block: an error naming the file; the file is unchanged.
	require.NoError(t, os.WriteFile(md, []byte("# B\n"), 0o644))
	cfg, err = parseFlags([]string{"--render", in, "--docs", md})
	require.NoError(t, err)
	err = run(t.Context(), cfg)
	require.ErrorIs(t, err, summary.ErrNoBlock)
	require.ErrorContains(t, err, md)
	got, err = os.ReadFile(md)
	require.NoError(t, err)
	require.Equal(t, "# B\n", string(got))

	// A missing --docs-also file: an error naming it; the file is unchanged.
	require.NoError(t, os.WriteFile(md, []byte(before), 0o644))
	cfg, err = parseFlags([]string{"--render", in, "--docs", md, "--docs-also", filepath.Join(dir, "none.json")})
	require.NoError(t, err)
	require.ErrorContains(t, run(t.Context(), cfg), "none.json")
	got, err = os.ReadFile(md)
	require.NoError(t, err)
	require.Equal(t, before, string(got))

	// --docs-also without --docs, or with an empty name, is refused.
	_, err = parseFlags([]string{"--docs-also", scale})
	require.ErrorContains(t, err, "--docs-also needs --docs")
	_, err = parseFlags([]string{"--docs", md, "--docs-also", scale + ",,"})
	require.ErrorContains(t, err, "--docs-also: empty file name")
}

// TestStageRunsFallBack: a results file written before per-stage runs
// shows each stage with its stage_started time (or the file's start) and
// no commit; a failed stage's row names its run too.
func TestStageRunsFallBack(t *testing.T) {
	t1 := t0().Add(48 * time.Hour)
	res := &Results{Started: t1, Stages: []string{"throughput", "steal"},
		StageStarted: map[string]time.Time{"throughput": t0()},
		Errors:       map[string]string{"steal": "boom"}}
	runs := stageRuns(res)
	require.Equal(t, summary.Run{Started: t0()}, runs["throughput"])
	require.Equal(t, summary.Run{Started: t1}, runs["steal"])
	table, err := summaryTable("r.json", res, nil)
	require.NoError(t, err)
	require.Contains(t, table, "| FAILED stage steal | boom |  |  | 2026-11-27 10:09 UTC, commit unknown |\n")
}

func t0() time.Time { return time.Date(2026, 11, 25, 10, 9, 0, 0, time.UTC) }
