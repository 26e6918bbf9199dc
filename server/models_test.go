package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// TestUnservedModels: a run waits on its model only while it names one, is
// neither finished nor cancelled, and no live worker of its kind serves
// every model or names it.
func TestUnservedModels(t *testing.T) {
	run := func(name, model string, mut ...func(*fsm.RunStatus)) fsm.RunStatus {
		r := fsm.RunStatus{Name: name, Spec: &fsmpb.RunSpec{Model: model}}
		for _, m := range mut {
			m(&r)
		}
		return r
	}
	finished := func(r *fsm.RunStatus) { r.FinishedAt = time.Unix(1, 0) }
	cancelled := func(r *fsm.RunStatus) { r.IsCancelled = true }
	runs := []fsm.RunStatus{run("a", "A"), run("b", "B"), run("none", ""), run("done", "D", finished),
		run("off", "O", cancelled), run("nospec", "")}
	runs[len(runs)-1].Spec = nil
	tests := []struct {
		name    string
		workers []fsm.WorkerStatus
		want    []string
	}{
		{"no worker", nil, []string{"a", "b"}},
		{"A served", []fsm.WorkerStatus{{ID: "w", Models: []string{"A", "C"}}}, []string{"b"}},
		{"both served", []fsm.WorkerStatus{{ID: "w", Models: []string{"A"}}, {ID: "v", Models: []string{"B"}}}, nil},
		{"a worker serving every model", []fsm.WorkerStatus{{ID: "w", Models: []string{"A"}}, {ID: "any"}}, nil},
		{"the server of B is lost", []fsm.WorkerStatus{{ID: "w", Models: []string{"A"}}, {ID: "v", Models: []string{"B"}, Lost: true}}, []string{"b"}},
		{"a lost worker serving every model", []fsm.WorkerStatus{{ID: "any", Lost: true}}, []string{"a", "b"}},
		{"a worker of another kind", []fsm.WorkerStatus{{ID: "t", Kinds: []string{"train"}}, {ID: "w", Kinds: []string{"batch", "train"}, Models: []string{"A"}}}, []string{"b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := unservedModels(runs, tc.workers)
			var names []string
			for _, r := range runs {
				if got[r.Name] {
					names = append(names, r.Name)
				}
			}
			require.Equal(t, tc.want, names)
		})
	}
}

// TestClaimByModel: over gRPC against a real three-replica cluster, a
// worker registered for model A long-polls through pending items of model
// B without receiving one, gets A's items, and RunStatus shows each
// worker's models and B's run as unserved until a worker for B registers.
// A bad model is InvalidArgument and registers nothing.
func TestClaimByModel(t *testing.T) {
	c := newTestCluster(t, 3, clusterOpts{})
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, models := range [][]string{{""}, {strings.Repeat("m", limits.MaxModelBytes+1)}, {"a\x01"}} {
		_, err := cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "bad", Models: models})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "register model 0")
	}
	require.NotContains(t, workerIDs(t, cl), "bad")

	_, err := cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "wa", Models: []string{"A"}})
	require.NoError(t, err)
	require.Equal(t, []string{"A"}, workerIDs(t, cl)["wa"].GetModels())

	submit := func(run, model string, n int) {
		items := make([]*rolloutv1.SubmitItem, n)
		for i := range items {
			items[i] = &rolloutv1.SubmitItem{Id: testID(run + string(rune('0'+i))), Index: uint64(i), Payload: []byte(`{"prompt":"p"}`)}
		}
		_, err := cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: run, Spec: &rolloutv1.RunSpec{Model: model, Total: uint64(n)}, Items: items})
		require.NoError(t, err)
	}
	submit("run-b", "B", 3)
	leader := c.leader()
	before := leader.node.Stats().AppliedIndex
	claim, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "wa", MaxItems: 8, WaitMs: 600})
	require.NoError(t, err)
	require.Empty(t, claim.GetItems(), "a worker of model A received items of model B")
	require.LessOrEqual(t, leader.node.Stats().AppliedIndex-before, uint64(3), "the long poll proposed a claim per wake-up")

	submit("run-a", "A", 2)
	claim, err = cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "wa", MaxItems: 8, WaitMs: 1000})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), 2)
	for _, it := range claim.GetItems() {
		require.Equal(t, "run-a", it.GetRun())
		require.Equal(t, "A", it.GetModel())
	}

	counters := func() map[string]*rolloutv1.RunCounters {
		resp, err := cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{})
		require.NoError(t, err)
		out := map[string]*rolloutv1.RunCounters{}
		for _, rc := range resp.GetRuns() {
			out[rc.GetName()] = rc
		}
		return out
	}
	rcs := counters()
	require.True(t, rcs["run-b"].GetUnservedModel(), "no worker serves B")
	require.Equal(t, "B", rcs["run-b"].GetModel())
	require.False(t, rcs["run-a"].GetUnservedModel())
	require.Zero(t, rcs["run-b"].GetFinishedUnixMs(), "an unserved run stays active")

	_, err = cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "wb", Models: []string{"B"}})
	require.NoError(t, err)
	require.False(t, counters()["run-b"].GetUnservedModel())
	claim, err = cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "wb", MaxItems: 8, WaitMs: 1000})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), 3)
	for _, it := range claim.GetItems() {
		require.Equal(t, "run-b", it.GetRun())
	}
}
