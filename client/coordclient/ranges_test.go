package coordclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// TestRangeCallsFollowLeaderAndGuard: SubmitRanges and ReportRange get the
// treatment of every call: a follower's hint is followed, a reply older than
// the newest term is rejected and the call retried, and an error retrying
// cannot fix (here InvalidArgument: a submit of no ranges) comes back at
// once.
func TestRangeCallsFollowLeaderAndGuard(t *testing.T) {
	a := startFake(t, "a")
	b := startFake(t, "b")
	a.SetFollower(b.Addr())
	a.SetTerm(9)
	b.SetTerm(9)
	var term uint64 = 9
	b.Intercept("ReportRange", func(context.Context, any) (any, error) {
		t := term
		term = 8 // every later reply is stale
		return &rolloutv1.ReportRangeResponse{Header: &rolloutv1.ReplyHeader{Term: t}, Results: []*rolloutv1.RangeReportResult{
			{Id: []byte("R1"), Status: rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS}}}, nil
	})
	c := newClient(t, a.Addr())
	req := &rolloutv1.ReportRangeRequest{WorkerId: "w1", Reports: []*rolloutv1.RangeReport{{Run: "r", Id: []byte("R1"), Attempt: 1, Lo: 0, DoneTo: 1}}}
	resp, err := c.ReportRange(ctxFor(t, 10*time.Second), req)
	require.NoError(t, err, "a CAS miss is a result")
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, resp.GetResults()[0].GetStatus())
	require.Equal(t, b.Addr(), c.Leader(), "the hint was followed")
	require.Equal(t, 1, a.Calls("ReportRange"))
	require.Equal(t, uint64(9), c.Guard().Highest())

	// A stale reply is rejected; the call is retried until the context ends.
	_, err = c.ReportRange(ctxFor(t, 300*time.Millisecond), req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, c.Guard().Rejected(), uint64(1))

	_, err = c.SubmitRanges(ctxFor(t, 10*time.Second), &rolloutv1.SubmitRangesRequest{Run: "r"})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Equal(t, 1, b.Calls("SubmitRanges"), "an error retrying cannot fix is not retried")
}
