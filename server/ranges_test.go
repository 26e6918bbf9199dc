package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/storeurl"
)

// rangeResult is a result reference of run "rr" whose hash starts with h.
func rangeResult(name string, h byte) *rolloutv1.DataRef {
	sum := make([]byte, 32)
	sum[0] = h
	return &rolloutv1.DataRef{Object: storeurl.ResultPrefix("rr") + name, Length: 64, Blake3: sum}
}

// TestRangeRun drives a range run through the API on one real replica:
// SubmitRanges with two chunks (idempotent), a claim that splits a range
// (max_indexes), progress reports that shrink it (an identical retry is a
// duplicate, a stale attempt a CAS miss result), a failed index that comes
// back as a one-item range, a steal by an idle worker that takes a tail (the
// victim's report past the cut misses, its heartbeat shows the new bound),
// and RunStatus counters in items all along.
func TestRangeRun(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{server: func(sc *Config) { sc.FailureTimeout = time.Hour }})
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	chunk := func(name string, index, count uint64) *rolloutv1.InputRange {
		return &rolloutv1.InputRange{Index: index, Count: count,
			PayloadRef: &rolloutv1.DataRef{Object: storeurl.InputPrefix("rr") + name, Length: count * 16}}
	}
	submit := &rolloutv1.SubmitRangesRequest{Run: "rr", Spec: &rolloutv1.RunSpec{Store: "file:///srv/store", Total: 20, MaxFailures: 3},
		Ranges: []*rolloutv1.InputRange{chunk("a", 0, 10), chunk("b", 10, 10)}}
	sr, err := cl.SubmitRanges(ctx, submit)
	require.NoError(t, err)
	require.EqualValues(t, 20, sr.GetCreated(), "counts are in items")
	require.NotZero(t, sr.GetHeader().GetTerm())
	sr, err = cl.SubmitRanges(ctx, submit)
	require.NoError(t, err)
	require.Zero(t, sr.GetCreated(), "resubmitting the same chunks creates nothing")
	require.EqualValues(t, 20, sr.GetAlreadyPending())

	counters := func(total, pending, running, done uint64) {
		t.Helper()
		rc, err := c.runStatus("rr")
		require.NoError(t, err)
		require.Equal(t, []uint64{total, pending, running, done},
			[]uint64{rc.GetTotal(), rc.GetPending(), rc.GetRunning(), rc.GetDone()}, "total, pending, running, done")
	}
	counters(20, 20, 0, 0)

	for _, w := range []string{"w1", "w2"} {
		_, err = cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: w})
		require.NoError(t, err)
	}
	// A claim of at most 4 indexes splits the first chunk.
	claim, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 1, MaxIndexes: 4})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), 1)
	a := claim.GetItems()[0]
	require.Equal(t, "rr", a.GetRun())
	require.EqualValues(t, 0, a.GetIndex())
	require.EqualValues(t, 4, a.GetCount())
	require.EqualValues(t, 0, a.GetBase())
	require.Equal(t, storeurl.InputPrefix("rr")+"a", a.GetPayloadRef().GetObject(), "payload_ref names the whole chunk")
	require.EqualValues(t, 160, a.GetPayloadRef().GetLength())
	require.Equal(t, "file:///srv/store", a.GetStore())
	counters(20, 16, 4, 0)

	report := func(worker string, rs ...*rolloutv1.RangeReport) []*rolloutv1.RangeReportResult {
		t.Helper()
		resp, err := cl.ReportRange(ctx, &rolloutv1.ReportRangeRequest{WorkerId: worker, Reports: rs})
		require.NoError(t, err, "a report's outcome is a result, never a transport error")
		require.Len(t, resp.GetResults(), len(rs))
		require.NotZero(t, resp.GetHeader().GetTerm())
		for i, r := range resp.GetResults() {
			require.Equal(t, rs[i].GetId(), r.GetId())
		}
		return resp.GetResults()
	}
	// Progress [0, 2) shrinks the range; the identical retry is a duplicate.
	first := &rolloutv1.RangeReport{Run: "rr", Id: a.GetId(), Attempt: a.GetAttempt(), Lo: 0, DoneTo: 2, ResultRef: rangeResult("a0", 1)}
	res := report("w1", first)
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, res[0].GetStatus(), res[0].GetMessage())
	require.False(t, res[0].GetDuplicate())
	counters(20, 16, 2, 2)
	res = report("w1", first)
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, res[0].GetStatus(), res[0].GetMessage())
	require.True(t, res[0].GetDuplicate(), "an identical retry is a duplicate")
	counters(20, 16, 2, 2)
	// Results lists the records with their width: the done segment [0, 2),
	// the running [2, 4), the pending rest of both chunks.
	rr, err := cl.Results(ctx, &rolloutv1.ResultsRequest{Run: "rr"})
	require.NoError(t, err)
	var widths [][3]uint64
	for _, it := range rr.GetItems() {
		widths = append(widths, [3]uint64{it.GetIndex(), it.GetCount(), it.GetBase()})
	}
	require.Equal(t, [][3]uint64{{0, 2, 0}, {2, 2, 0}, {4, 6, 0}, {10, 10, 10}}, widths)
	require.Equal(t, rolloutv1.ItemState_ITEM_STATE_DONE, rr.GetItems()[0].GetState())
	// A stale attempt, a lo that is not the range's first index any more,
	// and a result outside the run's result prefix are results.
	res = report("w1",
		&rolloutv1.RangeReport{Run: "rr", Id: a.GetId(), Attempt: a.GetAttempt() + 1, Lo: 2, DoneTo: 3, ResultRef: rangeResult("a1", 2)},
		&rolloutv1.RangeReport{Run: "rr", Id: a.GetId(), Attempt: a.GetAttempt(), Lo: 1, DoneTo: 3, ResultRef: rangeResult("a1", 2)},
		&rolloutv1.RangeReport{Run: "rr", Id: a.GetId(), Attempt: a.GetAttempt(), Lo: 2, DoneTo: 3,
			ResultRef: &rolloutv1.DataRef{Object: "datasets/secret", Length: 5, Blake3: make([]byte, 32)}})
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, res[0].GetStatus(), res[0].GetMessage())
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, res[1].GetStatus(), res[1].GetMessage())
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_INVALID, res[2].GetStatus(), res[2].GetMessage())
	require.Contains(t, res[2].GetMessage(), "result prefix")
	counters(20, 16, 2, 2)

	// Index 3 fails: it becomes a one-item range, Pending again.
	res = report("w1", &rolloutv1.RangeReport{Run: "rr", Id: a.GetId(), Attempt: a.GetAttempt(), Lo: 2, DoneTo: 4,
		ResultRef: rangeResult("a2", 3), Failed: []*rolloutv1.FailedIndex{{Index: 3, Reason: "backend\nerror", Permanent: false}}})
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, res[0].GetStatus(), res[0].GetMessage())
	require.EqualValues(t, 1, res[0].GetRepended())
	counters(20, 17, 0, 3)

	// w1 claims everything pending: the failed index alone, and the rest of
	// both chunks.
	claim, err = cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 10, MaxIndexes: 100})
	require.NoError(t, err)
	var one, rest4, chunkB *rolloutv1.Item
	var claimed uint64
	for _, it := range claim.GetItems() {
		claimed += max(it.GetCount(), 1)
		switch it.GetIndex() {
		case 3:
			one = it
		case 4:
			rest4 = it
		case 10:
			chunkB = it
		}
	}
	require.EqualValues(t, 17, claimed, "claimed %v", claim.GetItems())
	require.NotNil(t, one, "the failed index is claimed again: %v", claim.GetItems())
	require.EqualValues(t, 1, one.GetCount(), "a failed index is a one-item range")
	require.EqualValues(t, 0, one.GetBase())
	require.Greater(t, one.GetAttempt(), a.GetAttempt(), "a new claim is a new attempt")
	require.NotNil(t, rest4)
	require.EqualValues(t, 6, rest4.GetCount())
	require.NotNil(t, chunkB)
	require.EqualValues(t, 10, chunkB.GetCount())
	require.EqualValues(t, 10, chunkB.GetBase())
	counters(20, 0, 17, 3)
	res = report("w1", &rolloutv1.RangeReport{Run: "rr", Id: one.GetId(), Attempt: one.GetAttempt(), Lo: 3, DoneTo: 4, ResultRef: rangeResult("a3", 4)})
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, res[0].GetStatus(), res[0].GetMessage())
	counters(20, 0, 16, 4)

	// w1 says it started chunk b's first index; idle w2 steals a tail.
	held := []*rolloutv1.ItemKey{
		{Run: "rr", Id: rest4.GetId(), Attempt: rest4.GetAttempt()},
		{Run: "rr", Id: chunkB.GetId(), Attempt: chunkB.GetAttempt()},
	}
	hb, err := cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: "w1", Backlog: 16, Held: held,
		Executing: []*rolloutv1.ItemKey{{Run: "rr", Id: chunkB.GetId(), Attempt: chunkB.GetAttempt(), Started: 11}}})
	require.NoError(t, err)
	require.Empty(t, hb.GetLost())
	require.Len(t, hb.GetBounds(), 2, "every held range still owned has its bounds")
	steal, err := cl.Steal(ctx, &rolloutv1.StealRequest{WorkerId: "w2"})
	require.NoError(t, err)
	require.Equal(t, "w1", steal.GetVictim())
	require.NotEmpty(t, steal.GetItems())
	// Each stolen item is the tail of one of w1's ranges.
	mine := []*rolloutv1.Item{rest4, chunkB}
	cut := map[string]*rolloutv1.Item{} // w1's range id -> the tail taken from it
	var stolen uint64
	for _, tail := range steal.GetItems() {
		require.Positive(t, tail.GetCount(), "a steal of ranges takes tail ranges")
		stolen += tail.GetCount()
		var victim *rolloutv1.Item
		for _, it := range mine {
			if tail.GetIndex() > it.GetIndex() && tail.GetIndex()+tail.GetCount() == it.GetIndex()+it.GetCount() {
				victim = it
			}
		}
		require.NotNil(t, victim, "the tail %d+%d is the end of one of w1's ranges", tail.GetIndex(), tail.GetCount())
		require.Equal(t, victim.GetBase(), tail.GetBase())
		require.Equal(t, victim.GetPayloadRef().GetObject(), tail.GetPayloadRef().GetObject(), "a tail's payload_ref names the whole chunk")
		if victim == chunkB {
			require.GreaterOrEqual(t, tail.GetIndex(), uint64(11), "a steal splits past the started mark")
		}
		require.NotEqual(t, victim.GetId(), tail.GetId())
		cut[string(victim.GetId())] = tail
	}
	// At most half of w1's unstarted indexes (6 of rest4, 9 of chunk b).
	require.LessOrEqual(t, stolen, uint64(8))
	counters(20, 0, 16, 4)

	// A report past a cut misses; the heartbeat shows the cut.
	for _, it := range mine {
		tail := cut[string(it.GetId())]
		if tail == nil {
			continue
		}
		res = report("w1", &rolloutv1.RangeReport{Run: "rr", Id: it.GetId(), Attempt: it.GetAttempt(), Lo: it.GetIndex(),
			DoneTo: it.GetIndex() + it.GetCount(), ResultRef: rangeResult("v", 5)})
		require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, res[0].GetStatus(), res[0].GetMessage())
	}
	hb, err = cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: "w1", Backlog: 16, Held: held})
	require.NoError(t, err)
	require.Empty(t, hb.GetLost())
	require.Len(t, hb.GetBounds(), 2, "bounds %v", hb.GetBounds())
	bounds := map[string]*rolloutv1.RangeBound{}
	for _, b := range hb.GetBounds() {
		bounds[string(b.GetId())] = b
	}
	var finish []*rolloutv1.RangeReport
	for i, it := range mine {
		b := bounds[string(it.GetId())]
		require.NotNil(t, b, "bounds %v", hb.GetBounds())
		require.Equal(t, "rr", b.GetRun())
		require.Equal(t, it.GetAttempt(), b.GetAttempt())
		require.Equal(t, it.GetIndex(), b.GetLo())
		hi := it.GetIndex() + it.GetCount()
		if tail := cut[string(it.GetId())]; tail != nil {
			hi = tail.GetIndex()
		}
		require.Equal(t, hi, b.GetHi(), "a range cut by a steal ends where its tail begins")
		finish = append(finish, &rolloutv1.RangeReport{Run: "rr", Id: it.GetId(), Attempt: it.GetAttempt(), Lo: b.GetLo(), DoneTo: b.GetHi(),
			ResultRef: rangeResult("v", byte(6+i))})
	}

	// Everything finishes: w1 its ranges up to the cuts, w2 the tails.
	res = report("w1", finish...)
	for _, r := range res {
		require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, r.GetStatus(), r.GetMessage())
	}
	var tails []*rolloutv1.RangeReport
	for i, tail := range steal.GetItems() {
		tails = append(tails, &rolloutv1.RangeReport{Run: "rr", Id: tail.GetId(), Attempt: tail.GetAttempt(), Lo: tail.GetIndex(),
			DoneTo: tail.GetIndex() + tail.GetCount(), ResultRef: rangeResult("t", byte(8+i))})
	}
	res = report("w2", tails...)
	for _, r := range res {
		require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, r.GetStatus(), r.GetMessage())
	}
	counters(20, 0, 0, 20)
	// The same segment reported again with another hash is not applied.
	tail := steal.GetItems()[0]
	res = report("w2", &rolloutv1.RangeReport{Run: "rr", Id: tail.GetId(), Attempt: tail.GetAttempt(), Lo: tail.GetIndex(),
		DoneTo: tail.GetIndex() + tail.GetCount(), ResultRef: rangeResult("t", 99)})
	require.NotEqual(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, res[0].GetStatus(), res[0].GetMessage())
}

// TestRangeBadInput: malformed SubmitRanges and ReportRange requests are
// INVALID_ARGUMENT naming the field, and change nothing.
func TestRangeBadInput(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{server: func(sc *Config) { sc.FailureTimeout = time.Hour }})
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := &rolloutv1.RunSpec{Store: "file:///srv/store"}
	ref := func(name string) *rolloutv1.DataRef {
		return &rolloutv1.DataRef{Object: storeurl.InputPrefix("bad") + name, Length: 100}
	}
	for _, tc := range []struct {
		name string
		req  *rolloutv1.SubmitRangesRequest
		want string
	}{
		{"count 0", &rolloutv1.SubmitRangesRequest{Run: "bad", Spec: spec, Ranges: []*rolloutv1.InputRange{
			{Index: 0, Count: 5, PayloadRef: ref("a")}, {Index: 5, Count: 0, PayloadRef: ref("b")}}}, "ranges[1].count"},
		{"missing payload_ref", &rolloutv1.SubmitRangesRequest{Run: "bad", Spec: spec, Ranges: []*rolloutv1.InputRange{
			{Index: 0, Count: 5}}}, "ranges[0].payload_ref"},
		{"overlapping chunks", &rolloutv1.SubmitRangesRequest{Run: "bad", Spec: spec, Ranges: []*rolloutv1.InputRange{
			{Index: 0, Count: 5, PayloadRef: ref("a")}, {Index: 3, Count: 5, PayloadRef: ref("b")}}}, "ranges[1] [3, 8) overlaps ranges[0] [0, 5)"},
		{"no store", &rolloutv1.SubmitRangesRequest{Run: "bad", Spec: &rolloutv1.RunSpec{}, Ranges: []*rolloutv1.InputRange{
			{Index: 0, Count: 5, PayloadRef: ref("a")}}}, "spec.store"},
		{"no ranges", &rolloutv1.SubmitRangesRequest{Run: "bad", Spec: spec}, "no ranges"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.SubmitRanges(ctx, tc.req)
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tc.want)
		})
	}
	_, err := c.runStatus("bad")
	require.Equal(t, codes.NotFound, status.Code(err), "a refused submit created nothing: %v", err)

	// A chunk that overlaps a chunk the run holds is the ledger's refusal.
	_, err = cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "bad", Spec: spec, Ranges: []*rolloutv1.InputRange{{Index: 0, Count: 5, PayloadRef: ref("a")}}})
	require.NoError(t, err)
	_, err = cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "bad", Ranges: []*rolloutv1.InputRange{{Index: 3, Count: 5, PayloadRef: ref("b")}}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	_, err = cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "w1"})
	require.NoError(t, err)
	result := &rolloutv1.DataRef{Object: storeurl.ResultPrefix("bad") + "r", Length: 5, Blake3: make([]byte, 32)}
	for _, tc := range []struct {
		name string
		r    *rolloutv1.RangeReport
		want string
	}{
		{"lo and done_to reversed", &rolloutv1.RangeReport{Run: "bad", Id: []byte("R1"), Attempt: 1, Lo: 4, DoneTo: 2, ResultRef: result}, "reports[0].done_to 2 is below reports[0].lo 4"},
		{"failed index outside", &rolloutv1.RangeReport{Run: "bad", Id: []byte("R1"), Attempt: 1, Lo: 0, DoneTo: 2, ResultRef: result,
			Failed: []*rolloutv1.FailedIndex{{Index: 2}}}, "reports[0].failed[0].index"},
		{"done without result_ref", &rolloutv1.RangeReport{Run: "bad", Id: []byte("R1"), Attempt: 1, Lo: 0, DoneTo: 2}, "reports[0].result_ref"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cl.ReportRange(ctx, &rolloutv1.ReportRangeRequest{WorkerId: "w1", Reports: []*rolloutv1.RangeReport{tc.r}})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tc.want)
		})
	}
	_, err = cl.ReportRange(ctx, &rolloutv1.ReportRangeRequest{WorkerId: "w1"})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	// An unknown run is a NOT_FOUND result; a range the run does not hold
	// (never, or no longer: a finished range leaves no record) is a result
	// too, never a transport error.
	resp, err := cl.ReportRange(ctx, &rolloutv1.ReportRangeRequest{WorkerId: "w1", Reports: []*rolloutv1.RangeReport{
		{Run: "nope", Id: []byte("R1"), Attempt: 1, Lo: 0, DoneTo: 1, ResultRef: &rolloutv1.DataRef{Object: storeurl.ResultPrefix("nope") + "r", Length: 5, Blake3: make([]byte, 32)}},
		{Run: "bad", Id: []byte("Rnothing"), Attempt: 1, Lo: 0, DoneTo: 1, ResultRef: result}}})
	require.NoError(t, err)
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND, resp.GetResults()[0].GetStatus(), resp.GetResults()[0].GetMessage())
	require.Contains(t, []rolloutv1.ReportStatus{rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND, rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS},
		resp.GetResults()[1].GetStatus(), resp.GetResults()[1].GetMessage())
	rc, err := c.runStatus("bad")
	require.NoError(t, err)
	require.EqualValues(t, 5, rc.GetTotal())
	require.EqualValues(t, 5, rc.GetPending())
}
