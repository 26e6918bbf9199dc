package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/storeurl"
)

// TestReportByReference drives the data-plane RPCs on one real replica: a
// store run's items carry payload references (the object said once per
// chunk in the log), completions by reference share one CompleteMany per
// result object, the first hash wins, a result outside the run's result
// prefix is refused per item, and CancelRun, DeleteRun and the capacity
// answer as documented.
func TestReportByReference(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{})
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := &rolloutv1.RunSpec{Store: "file:///srv/store", Total: 4}
	req := &rolloutv1.SubmitItemsRequest{Run: "s", Spec: spec}
	for i := range 4 {
		req.Items = append(req.Items, &rolloutv1.SubmitItem{Id: testID(fmt.Sprintf("s-%d", i)), Index: uint64(i),
			PayloadRef: &rolloutv1.DataRef{Object: storeurl.InputPrefix("s") + "chunk", Offset: uint64(i) * 10, Length: 9}})
	}
	_, err := cl.SubmitItems(ctx, req)
	require.NoError(t, err)
	_, err = cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "w1"})
	require.NoError(t, err)
	claim, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 3})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), 3)
	for i, it := range claim.GetItems() {
		require.Equal(t, "file:///srv/store", it.GetStore())
		require.Equal(t, storeurl.InputPrefix("s")+"chunk", it.GetPayloadRef().GetObject())
		require.Equal(t, uint64(i)*10, it.GetPayloadRef().GetOffset())
	}
	obj := storeurl.ResultPrefix("s") + "r1"
	ref := func(i int, h byte) *rolloutv1.DataRef {
		sum := make([]byte, 32)
		sum[0] = h
		return &rolloutv1.DataRef{Object: obj, Offset: uint64(i) * 5, Length: 5, Blake3: sum}
	}
	reports := []*rolloutv1.ItemReport{
		{Run: "s", Id: claim.GetItems()[0].GetId(), Attempt: 1, Outcome: rolloutv1.Outcome_OUTCOME_DONE, ResultRef: ref(0, 1)},
		{Run: "s", Id: claim.GetItems()[1].GetId(), Attempt: 1, Outcome: rolloutv1.Outcome_OUTCOME_DONE, ResultRef: ref(1, 2)},
		{Run: "s", Id: claim.GetItems()[2].GetId(), Attempt: 1, Outcome: rolloutv1.Outcome_OUTCOME_DONE,
			ResultRef: &rolloutv1.DataRef{Object: "datasets/secret.txt", Length: 5, Blake3: make([]byte, 32)}},
	}
	resp, err := cl.Report(ctx, &rolloutv1.ReportRequest{WorkerId: "w1", Reports: reports})
	require.NoError(t, err)
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, resp.GetResults()[0].GetStatus())
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, resp.GetResults()[1].GetStatus())
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_INVALID, resp.GetResults()[2].GetStatus())
	require.Contains(t, resp.GetResults()[2].GetMessage(), "result prefix")
	// A retry is applied again (a duplicate); another hash is a conflict.
	reports[1].ResultRef = ref(1, 9)
	resp, err = cl.Report(ctx, &rolloutv1.ReportRequest{WorkerId: "w1", Reports: reports[:2]})
	require.NoError(t, err)
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, resp.GetResults()[0].GetStatus())
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_CONFLICT, resp.GetResults()[1].GetStatus())

	page, err := cl.Results(ctx, &rolloutv1.ResultsRequest{Run: "s"})
	require.NoError(t, err)
	require.Equal(t, obj, page.GetItems()[1].GetResultRef().GetObject())
	require.Equal(t, byte(2), page.GetItems()[1].GetResultRef().GetBlake3()[0], "the first hash stands")

	_, err = cl.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: "s"})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	cr, err := cl.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "s"})
	require.NoError(t, err)
	require.Equal(t, uint64(1), cr.GetCancelled())
	require.Equal(t, uint64(1), cr.GetRunning())
	dr, err := cl.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: "s"})
	require.NoError(t, err)
	require.Equal(t, uint64(4), dr.GetItems())
	require.Equal(t, "file:///srv/store", dr.GetStore())
	_, err = cl.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "s"})
	require.Equal(t, codes.NotFound, status.Code(err))
}
