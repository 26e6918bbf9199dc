package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/storeurl"
)

// TestReportHeldStallsRun: a held report (OUTCOME_HELD naming the input
// object) over gRPC against a real cluster puts the item back without a
// failure; RunStatus shows the run stalled on the object and the event
// history names the run and the object; claims skip the stalled run's
// items while another run's are handed out; a resubmit of the run resumes
// it (event run-resumed).
func TestReportHeldStallsRun(t *testing.T) {
	const run, other = "stalled", "healthy"
	c := newTestCluster(t, 1, clusterOpts{})
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	object := storeurl.InputPrefix(run) + "chunk-0"
	var items []*rolloutv1.SubmitItem
	for i := range 3 {
		items = append(items, &rolloutv1.SubmitItem{Id: testID(fmt.Sprintf("%s-%d", run, i)), Index: uint64(i),
			PayloadRef: &rolloutv1.DataRef{Object: object, Offset: uint64(10 * i), Length: 10}})
	}
	submit := func() {
		_, err := cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: run,
			Spec: &rolloutv1.RunSpec{Total: 3, Store: "file:///var/rollout-store"}, Items: items})
		require.NoError(t, err)
	}
	submit()
	registerWorkers(t, cl, "w1")
	claim := func() []*rolloutv1.Item {
		resp, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 1, WaitMs: 50})
		require.NoError(t, err)
		return resp.GetItems()
	}
	got := claim()
	require.Len(t, got, 1)
	resp, err := cl.Report(ctx, &rolloutv1.ReportRequest{WorkerId: "w1", Reports: []*rolloutv1.ItemReport{{
		Run: run, Id: got[0].GetId(), Attempt: got[0].GetAttempt(), Outcome: rolloutv1.Outcome_OUTCOME_HELD,
		HeldObject: object, Reason: "payload: reading object: object not found"}}})
	require.NoError(t, err)
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, resp.GetResults()[0].GetStatus())

	rc, err := c.runStatus(run)
	require.NoError(t, err)
	require.NotNil(t, rc.GetStall(), "the run is stalled")
	require.Equal(t, object, rc.GetStall().GetObject())
	require.Contains(t, rc.GetStall().GetReason(), "not found")
	require.NotZero(t, rc.GetStall().GetSinceUnixMs())
	require.Zero(t, rc.GetFailures(), "a held report counts no failure")
	require.EqualValues(t, 3, rc.GetPending())

	ev, err := cl.Events(ctx, &rolloutv1.EventsRequest{Run: run})
	require.NoError(t, err)
	var stalled *rolloutv1.Event
	for _, e := range ev.GetEvents() {
		if e.GetKind() == rolloutv1.EventKind_EVENT_KIND_RUN_STALLED {
			stalled = e
		}
	}
	require.NotNil(t, stalled, "an event records the stall")
	require.Contains(t, stalled.GetDetail(), object)

	// Claims skip the stalled run (no probe before the interval) and hand
	// out another run's items.
	c.submit(other, 1)
	got = claim()
	require.Len(t, got, 1)
	require.Equal(t, other, got[0].GetRun())

	// A resubmit re-uploads the inputs: the run resumes at once.
	submit()
	rc, err = c.runStatus(run)
	require.NoError(t, err)
	require.Nil(t, rc.GetStall())
	ev, err = cl.Events(ctx, &rolloutv1.EventsRequest{Run: run})
	require.NoError(t, err)
	require.Equal(t, rolloutv1.EventKind_EVENT_KIND_RUN_RESUMED, ev.GetEvents()[len(ev.GetEvents())-1].GetKind())
	got = claim()
	require.Len(t, got, 1)
	require.Equal(t, run, got[0].GetRun())
}
