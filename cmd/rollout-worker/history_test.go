package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/internal/testbin"
	"github.com/rollout/rollout/jepsen-lite/history"
)

func TestHistoryFlag(t *testing.T) {
	srv := coordtest.Start(t, "a")
	srv.SetTerm(4)
	addItems(srv, 10)
	path := filepath.Join(t.TempDir(), "w1.jsonl")
	code, _, stderr := runUntilDone(t, srv, 10, "--insecure", "--id", "w1", "--coord", srv.Addr(), "--mock-latency", "1ms",
		"--heartbeat", "50ms", "--claim-wait", "200ms", "--log-level", "warn", "--history", path)
	require.Equal(t, exitOK, code, stderr)
	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	require.Equal(t, history.TypeInfo, evs[0].Type)
	require.Equal(t, "start", evs[0].Op)
	applied := map[string]bool{}
	guards := 0
	for _, e := range evs {
		require.Equal(t, "w1", e.Worker)
		require.Regexp(t, `^w1/\d+$`, e.Process)
		switch {
		case e.Type == history.TypeGuard:
			guards++
			require.Equal(t, uint64(4), e.Term)
			require.False(t, e.Rejected)
		case e.Type == history.TypeOK && e.Op == "Report":
			require.Equal(t, uint64(4), e.Term)
			for _, it := range e.Items {
				if it.Status == "APPLIED" && it.Outcome == "DONE" {
					applied[it.ID] = true
				}
			}
		}
	}
	require.Len(t, applied, 10)
	require.Positive(t, guards)

	var stdout, stderr2 testbin.Output
	code = execute(context.Background(), []string{"--insecure", "--id", "w1", "--coord", srv.Addr(), "--history", filepath.Join(t.TempDir(), "no", "such", "dir", "h.jsonl")}, &stdout, &stderr2)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr2.String(), "--history")
}
