package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/runs/runstest"
)

// finishedAt is a cluster whose runs say they finished at a time of its
// own (a finished run's finished_unix_ms, as the coordinator's clock has
// it).
type finishedAt struct {
	*runstest.Coordinator
	ms int64
}

func (f *finishedAt) RunStatus(ctx context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	resp, err := f.Coordinator.RunStatus(ctx, req)
	if err == nil {
		for _, rc := range resp.GetRuns() {
			if rc.GetPending()+rc.GetRunning() == 0 {
				rc.FinishedUnixMs = f.ms
			}
		}
	}
	return resp, err
}

// TestFinalizingBeforeCompleted: finalizing_at <= completed_at, whether the
// run finished long before the gateway finalized it or the cluster's clock
// is ahead of the gateway's.
func TestFinalizingBeforeCompleted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delta time.Duration // the run's end, from the gateway's clock at finalize
	}{
		{"run finished an hour before", -time.Hour},
		{"cluster clock ahead", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fa *finishedAt
			e := newEnv(t, func(c *Config) {
				fa = &finishedAt{Coordinator: c.Cluster.(*runstest.Coordinator)}
				c.Cluster = fa
			})
			code, f := e.upload("alice", "in.jsonl", chatLines(3, "m1"), "batch")
			require.Equal(t, 200, code, "%v", f)
			code, b := e.createBatch("alice", f["id"].(string), "/v1/chat/completions")
			require.Equal(t, 200, code, "%v", b)
			id := b["id"].(string)
			fa.ms = e.clock.Now().Add(tc.delta).UnixMilli()
			e.finish(id, 0, 3, "")
			done := e.waitStatus("alice", id, "completed")
			fin, comp := done["finalizing_at"].(float64), done["completed_at"].(float64)
			require.LessOrEqual(t, fin, comp, "finalizing_at %v after completed_at %v", fin, comp)
			require.LessOrEqual(t, comp, float64(e.clock.Now().Unix()), "completed no later than now")
		})
	}
}
