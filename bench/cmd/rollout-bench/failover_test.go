package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFailoverMultipliers: --failover-multipliers defaults to 1 and 5 and
// refuses values out of 1..10 or listed twice; a multiplied run has rows
// and summary rows of its own; a merge keeps it with the failover stage.
func TestFailoverMultipliers(t *testing.T) {
	c, err := parseFlags(nil)
	require.NoError(t, err)
	require.Equal(t, []int{1, 5}, c.foMults)
	c, err = parseFlags([]string{"--failover-multipliers", "3"})
	require.NoError(t, err)
	require.Equal(t, []int{3}, c.foMults)
	for _, bad := range []string{"0", "11", "1,1", "x", ""} {
		_, err := parseFlags([]string{"--failover-multipliers", bad})
		require.ErrorContains(t, err, "--failover-multipliers", bad)
	}

	res := &Results{
		Failover: &Failover{RaftMultiplier: 1, KillMS: []float64{500}, KillMedianMS: 500, KillMaxMS: 500},
		FailoverMultiplied: []*Failover{{RaftMultiplier: 5, Layout: "ranges", KillMS: []float64{2400, 2600, 3100}, KillMedianMS: 2600, KillMaxMS: 3100,
			TransferMS: []float64{300}, TransferMedMS: 300, TransferMaxMS: 300, Terms: 5, Spurious: 1}},
	}
	got := map[string]Row{}
	for _, r := range rows(res) {
		got[r.Metric] = r
	}
	require.Equal(t, "yes", got["5. leader SIGKILL → next item done, median (1 kills)"].Met, "the run at 1 keeps its targets")
	r := got["5. --raft-multiplier 5: leader SIGKILL → next item done, median (3 kills, ranges)"]
	require.Equal(t, "2600 ms (max 3100)", r.Value)
	require.Equal(t, "report", r.Target)
	require.Equal(t, "failover", r.Stage)
	require.Equal(t, "leader SIGKILL → next item done, median, --raft-multiplier 5", r.Summary)
	require.Equal(t, "300 ms (max 300)", got["5. --raft-multiplier 5: graceful transfer (SIGTERM) → next item done, median (1)"].Value)
	require.Equal(t, "1 (5 terms)", got["5. --raft-multiplier 5: elections beyond one per failover"].Value)

	path := filepath.Join(t.TempDir(), "results.json")
	res.Stages = []string{"failover"}
	require.NoError(t, writeJSON(path, res))
	other := &Results{Stages: []string{"steal"}, Steal: &Steal{IdleP50MS: 1}}
	require.NoError(t, mergeInto(other, path))
	require.Len(t, other.FailoverMultiplied, 1)
	require.Equal(t, 5, other.FailoverMultiplied[0].RaftMultiplier)
}
