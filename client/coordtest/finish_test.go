package coordtest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordtest"
)

// TestLedgerFinish: a NewLedger fake answers in-process calls; Finish
// ends items from the test (a Done one unblocks its dependent, a Dead one
// counts dead), refuses an unknown index, and a run with nothing pending
// or running can be deleted.
func TestLedgerFinish(t *testing.T) {
	ctx := context.Background()
	s := coordtest.NewLedger("c1", "127.0.0.1:7001")
	items := []*rolloutv1.SubmitItem{
		{Id: []byte("a"), Index: 0, Payload: []byte(`{}`)},
		{Id: []byte("b"), Index: 1, Payload: []byte(`{}`), DependsOn: [][]byte{[]byte("a")}},
		{Id: []byte("c"), Index: 2, Payload: []byte(`{}`)},
	}
	_, err := s.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r", Items: items})
	require.NoError(t, err)
	counters := func() *rolloutv1.RunCounters {
		resp, err := s.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "r"})
		require.NoError(t, err)
		return resp.GetRuns()[0]
	}
	require.EqualValues(t, 1, counters().GetBlocked(), "b waits on a")
	_, err = s.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: "r"})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "delete of an active run: %v", err)

	require.Error(t, s.Finish("r", 9, nil, nil, ""), "no item at index 9")
	require.NoError(t, s.Finish("r", 0, []byte("ra"), nil, ""))
	require.Zero(t, counters().GetBlocked(), "a is done: b is unblocked")
	require.NoError(t, s.Finish("r", 1, []byte("rb"), nil, ""))
	require.NoError(t, s.Finish("r", 2, nil, nil, "bad input"))
	c := counters()
	require.Equal(t, [3]uint64{2, 1, 0}, [3]uint64{c.GetDone(), c.GetDead(), c.GetPending()})
	got, ok := s.Item("r", []byte("c"))
	require.True(t, ok)
	require.Equal(t, "bad input", got.Reason)

	resp, err := s.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: "r"})
	require.NoError(t, err, "a finished run is deleted")
	require.EqualValues(t, 3, resp.GetItems())
	_, err = s.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "r"})
	require.Equal(t, codes.NotFound, status.Code(err), "status of a deleted run: %v", err)
}
