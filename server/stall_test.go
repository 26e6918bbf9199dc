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

// TestReportStoreUnavailableIsolatesRun: a held report with
// store_unavailable from one worker gives the item back without a failure
// and isolates nothing; the same report from a second worker isolates the
// run: RunStatus shows its stall as the store unreachable, with the last
// error, an event says so, and claims hand out another run's items only.
func TestReportStoreUnavailableIsolatesRun(t *testing.T) {
	const run, other = "dark", "lit"
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
	_, err := cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: run,
		Spec: &rolloutv1.RunSpec{Total: 3, Store: "file:///var/rollout-store"}, Items: items})
	require.NoError(t, err)
	registerWorkers(t, cl, "w1", "w2")
	claim := func(w string) []*rolloutv1.Item {
		resp, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: w, MaxItems: 1, WaitMs: 50})
		require.NoError(t, err)
		return resp.GetItems()
	}
	hold := func(w string, it *rolloutv1.Item) {
		resp, err := cl.Report(ctx, &rolloutv1.ReportRequest{WorkerId: w, Reports: []*rolloutv1.ItemReport{{
			Run: run, Id: it.GetId(), Attempt: it.GetAttempt(), Outcome: rolloutv1.Outcome_OUTCOME_HELD,
			HeldObject: object, StoreUnavailable: true,
			Reason: "payload: reading object: object store unavailable: dial tcp 127.0.0.1:9: connect: connection refused"}}})
		require.NoError(t, err)
		require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, resp.GetResults()[0].GetStatus())
	}
	got := claim("w1")
	require.Len(t, got, 1)
	hold("w1", got[0])
	rc, err := c.runStatus(run)
	require.NoError(t, err)
	require.Nil(t, rc.GetStall(), "one worker's report isolates nothing")
	require.EqualValues(t, 3, rc.GetPending())
	require.Zero(t, rc.GetFailures())

	got = claim("w2")
	require.Len(t, got, 1)
	hold("w2", got[0])
	rc, err = c.runStatus(run)
	require.NoError(t, err)
	require.NotNil(t, rc.GetStall(), "two workers' reports isolate the run")
	require.True(t, rc.GetStall().GetStoreUnreachable())
	require.Contains(t, rc.GetStall().GetReason(), "connection refused")
	require.NotZero(t, rc.GetStall().GetSinceUnixMs())
	require.Zero(t, rc.GetFailures(), "an unreachable store counts no failure")
	require.EqualValues(t, 3, rc.GetPending())

	ev, err := cl.Events(ctx, &rolloutv1.EventsRequest{Run: run})
	require.NoError(t, err)
	var stalled *rolloutv1.Event
	for _, e := range ev.GetEvents() {
		if e.GetKind() == rolloutv1.EventKind_EVENT_KIND_RUN_STALLED {
			stalled = e
		}
	}
	require.NotNil(t, stalled, "an event records the isolation")
	require.Contains(t, stalled.GetDetail(), "store unreachable")
	require.Equal(t, "w2", stalled.GetWorker())

	// Claims hand out the other run's items; of the isolated run's, at
	// most one probe (due a second after the isolation, on a slow machine).
	c.submit(other, 2)
	byRun := map[string]int{}
	for i := 0; byRun[other] < 2 && i < 6; i++ {
		for _, it := range claim([]string{"w1", "w2"}[i%2]) {
			byRun[it.GetRun()]++
		}
	}
	require.Equal(t, 2, byRun[other])
	require.LessOrEqual(t, byRun[run], 1, "the isolated run's items are not handed out, but for one probe")
}
