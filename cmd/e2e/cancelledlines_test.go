package e2e

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestResultsNameCancelledLines: on a real cluster, a run cancelled before
// any worker ran it has every line written as an error line, and
// rollout results counts them as cancelled, not as dead (before: "(0
// done, 12 dead)").
func TestResultsNameCancelledLines(t *testing.T) {
	c := startCluster(t)
	input, _ := writeInput(t, 12)
	out, err := cli(t, c, "submit", "--input", input, "--run", "called-off")
	require.NoError(t, err, out)
	out, err = cli(t, c, "cancel", "--run", "called-off")
	require.NoError(t, err, out)
	res := filepath.Join(t.TempDir(), "out.jsonl")
	out, err = cli(t, c, "results", "--run", "called-off", "-o", res)
	require.NoError(t, err, out)
	require.Contains(t, out, "12 lines (0 done, 0 dead, 12 cancelled)")
}
