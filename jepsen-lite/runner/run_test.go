package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/testbin"
	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/report"
	"github.com/rollout/rollout/jepsen-lite/runner"
)

// TestStaleLeaderScenario runs the epoch-guard scenario in this process, over
// the proxy network, against correct binaries: the deposed leader's late
// answer must reach the worker and be rejected, and every check must pass.
// (cmd/jepsen-lite's TestChaosCatchesBugs runs it against the bug build.)
func TestStaleLeaderScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("environment: -short mode: runs real processes for about 20s")
	}
	root, err := testbin.ModuleRoot()
	require.NoError(t, err)
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	require.NoError(t, testbin.Build(ctx, root, bin))
	cfg := runner.DefaultConfig()
	cfg.BinDir, cfg.OutDir = bin, filepath.Join(t.TempDir(), "report")
	cfg.Scenario, cfg.Net = runner.ScenarioStaleLeader, runner.NetProxy
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr})
	res, err := runner.Run(ctx, cfg)
	require.NoError(t, err)
	require.True(t, res.Passed(), "%+v", res.Check.Verdicts)
	s, err := report.Read(cfg.OutDir)
	require.NoError(t, err)
	require.Equal(t, report.Pass, s.Outcome)
	require.Equal(t, "proxy", s.Network)
	require.True(t, s.TLS, "mutual TLS is the default")
	for _, p := range []string{"c1", "w1"} {
		b, err := os.ReadFile(filepath.Join(cfg.OutDir, "logs", p+".log"))
		require.NoError(t, err)
		require.Contains(t, string(b), "tls=true", "%s ran over mutual TLS", p)
	}
	require.Contains(t, strings.Join(s.Notes, "\n"), "rejected the", "the late answer was judged")
	v, ok := res.Check.Verdict(checker.StaleReplies)
	require.True(t, ok)
	require.NotContains(t, v.Detail, " 0 stale replies rejected")
	require.Len(t, s.Failovers, 1, "the paused leader's failover is measured")
	require.False(t, s.Failovers[0].TimedOut)
	for _, f := range []string{"history.jsonl", "summary.md", filepath.Join("logs", "c1.log")} {
		_, err := os.Stat(filepath.Join(cfg.OutDir, f))
		require.NoError(t, err, f)
	}
}
