package report_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/nemesis"
	"github.com/rollout/rollout/jepsen-lite/report"
)

func TestStats(t *testing.T) {
	s := report.Stats([]nemesis.Failover{
		{Kind: nemesis.Kill, Took: 3 * time.Second},
		{Kind: nemesis.Pause, Took: time.Second},
		{Kind: nemesis.Kill, Took: time.Second},
		{Kind: nemesis.Kill, Took: 2 * time.Second},
		{Kind: nemesis.Pause, Took: 2 * time.Second},
		{Kind: nemesis.Pause, TimedOut: true},
		{Kind: nemesis.PartitionLeader, TimedOut: true},
	})
	require.Equal(t, []report.FailoverStats{
		{Kind: nemesis.PartitionLeader, TimedOut: 1},
		{Kind: nemesis.Kill, N: 3, Median: 2 * time.Second, Max: 3 * time.Second},
		{Kind: nemesis.Pause, N: 2, Median: 1500 * time.Millisecond, Max: 2 * time.Second, TimedOut: 1},
	}, s)
	require.Empty(t, report.Stats(nil))
}

func TestWriteAndRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	s := report.Summary{
		Outcome: report.Fail, Scenario: "chaos", Seed: 3, Network: "netns", NetworkNote: "root", TLS: true, Start: 1e9,
		Settings:      [][2]string{{"replicas", "c1 c2 c3"}},
		Ops:           []checker.OpCounts{{Op: "Claim", Invoked: 3, OK: 2, Unknown: 1}},
		Faults:        []nemesis.Applied{{Step: nemesis.Step{Kind: nemesis.Kill, Target: "leader"}, Nodes: []string{"c1"}, At: 2e9, Healed: 3e9}},
		FaultCount:    map[string]int{"kill": 1},
		Leaders:       []report.Leader{{Term: 2, ID: "c1"}, {Term: 3, ID: "c2", At: 1.5}},
		LeaderChanges: 1,
		Failovers:     []nemesis.Failover{{Kind: nemesis.Kill, OldLeader: "c1", OldTerm: 2, NewLeader: "c2", NewTerm: 3, At: 2e9, Took: 900 * time.Millisecond}},
		Verdicts: []checker.Verdict{
			{Name: checker.Lost, OK: true, Detail: "fine"},
			{Name: checker.Duplicates, Count: 1, Detail: "bad | pipe", Examples: []string{"r/1: two results"}},
		},
		Notes:   []string{"a note"},
		Hostile: []checker.AttackCount{{Attack: "forge-report-owner", Expect: "PermissionDenied", Sent: 3, Refused: 2, Inconclusive: 1}},
	}
	s.FailoverStats = report.Stats(s.Failovers)
	require.NoError(t, report.Write(dir, s))
	got, err := report.Read(dir)
	require.NoError(t, err)
	require.Equal(t, s, got)
	md, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	require.NoError(t, err)
	for _, want := range []string{
		"# jepsen-lite report: FAIL", "**Violations:** duplicate-results", "| network | netns (root) |", "| mutual TLS | on (",
		"| duplicate-results | **FAIL** | 1 | bad \\| pipe |", "- r/1: two results",
		"| Claim | 3 | 2 | 0 | 1 | 0 |", "| kill | 1 |", "| 1.00s | 2.00s | kill at 0s for 0s on leader | c1 |",
		"1 leader changes seen", "| kill | 1 | 900ms | 900ms | 0 |", "- a note",
		"## Hostile client", "| forge-report-owner | PermissionDenied | 3 | 2 | 1 | 0 | 0 |",
	} {
		require.Contains(t, string(md), want)
	}
	_, err = report.Read(t.TempDir())
	require.Error(t, err)

	s.TLS = false
	require.NoError(t, report.Write(dir, s))
	got, err = report.Read(dir)
	require.NoError(t, err)
	require.False(t, got.TLS)
	md, err = os.ReadFile(filepath.Join(dir, "summary.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "| mutual TLS | off (plaintext) |")
}
