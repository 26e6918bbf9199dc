package conformance

import (
	"context"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/storeurl"
)

// The range scenario (caps Ranges): a range run of two input chunks, X
// over indexes [0, 12) and Y over [12, 20), worked by W3, W4 and W5.
//
// Submit: both chunks are created (counts in indexes); the same chunks
// again create nothing; a chunk overlapping X, and X again with another
// count, refuse the whole request and change nothing; a run is ranges or
// items (each refuses the other's submit).
//
// Work (caps Worker too), in the ledger's order:
//   - W3 claims at most 5 indexes: X is carved, W3 takes [0,5) (a new
//     record), the rest [5,12) keeps X's record and its queue place.
//   - W3 reports [0,2) done: the range shrinks to [2,5). The identical
//     retry is a duplicate; another hash for it is a conflict; a report
//     that only starts like it (a longer done_to), a stale
//     attempt, another worker's copy, a lo that is not the range's first
//     index, a done_to past its end and an unknown record are CAS misses;
//     an unknown run is not found; a result outside the run's result
//     prefix is invalid.
//   - W3 reports [2,5) with index 3 failed: 2 and 4 are done segments, 3
//     a one-index record, Pending again with one failure; the range is
//     gone (its identical retry is still a duplicate, a later report a
//     CAS miss).
//   - W3 claims two records (at most 16 indexes): [5,12) and Y whole; W4
//     claims the one-index record (attempt 2) and fails it again: at
//     max_failures it is Dead, in place, with its reason.
//   - W3 reports [12,14) of Y with 13 failed permanently: Dead at once.
//   - W3 heartbeats its ranges as held (and a record it lost) and both as
//     executing, started at 7 and 16: the lost record is listed lost, the
//     ranges' bounds are answered in held order.
//   - W4 (idle) steals: W3 has 9 unstarted indexes, so W4 takes 5 at
//     most, latest claim first, each tail at most half a range's
//     unstarted indexes and past its started mark: [18,20) of Y and
//     [10,12) of [5,12), at the next attempt. W3's heartbeat shows the
//     cuts; its report past one misses.
//   - W3 reports [5,7) done giving back [8,10) (release_from): a Pending
//     record; it keeps [7,8). It reports [14,15) done and gives back the
//     rest of Y (nack_rest). W4 reports its tail [18,20) done.
//   - W4 heartbeats [10,12) as executing, started at 11.
//   - W5 claims the given-back [8,10) (attempt 2) and deregisters: the
//     record is Pending again whole, at its attempt, and W5's late report
//     of it misses.
//   - The chunks again count every record by state (in indexes); Y again
//     with retry_dead re-pends its Dead index 13 (reason and failures
//     cleared).
//
// Cancel (caps Cancel): the Pending records are Cancelled, a Running
// range keeps what its owner started and loses its unstarted tail as a
// Cancelled record ([7,8) whole: nothing of it started; [11,12) of
// [10,12)); W4 still reports [10,11) done, W3's report of [7,8) misses.
// The results list every record with its width; delete (caps Delete)
// counts the run's indexes.

// RangeRun is the range scenario's run.
const RangeRun = "conformance-ranges"

// RangeStore is the range run's store URL (the ledger reads no object:
// only the names matter).
const RangeStore = "file:///conformance-store"

// The range scenario's workers.
const (
	W3 = "conformance-w3"
	W4 = "conformance-w4"
	W5 = "conformance-w5"
)

// The range run's chunks: X over [0, 12) and Y over [12, 20).
const (
	xCount     = 12
	yCount     = 8
	rangeTotal = xCount + yCount
)

// chunk is the InputRange of a chunk object named name at index with
// count lines (16 bytes a line).
func chunk(name string, index, count uint64) *rolloutv1.InputRange {
	return &rolloutv1.InputRange{Index: index, Count: count,
		PayloadRef: &rolloutv1.DataRef{Object: storeurl.InputPrefix(RangeRun) + name, Length: count * 16}}
}

// Chunks is the range run's submission: chunks X and Y.
func Chunks() []*rolloutv1.InputRange {
	return []*rolloutv1.InputRange{chunk("x", 0, xCount), chunk("y", xCount, yCount)}
}

// rangeSpec is the range run's spec.
func rangeSpec() *rolloutv1.RunSpec {
	return &rolloutv1.RunSpec{MaxFailures: MaxFailures, Total: rangeTotal, Store: RangeStore}
}

// resultRef is a result object of the range run whose blake3 starts with
// h.
func resultRef(name string, h byte) *rolloutv1.DataRef {
	sum := make([]byte, 32)
	sum[0] = h
	return &rolloutv1.DataRef{Object: storeurl.ResultPrefix(RangeRun) + name, Length: 64, Blake3: sum}
}

// rec is a range record as a claim, a steal or the results show it.
type rec struct {
	index, count, base, attempt uint64
	state                       rolloutv1.ItemState
	owner                       string
}

func recOfItem(it *rolloutv1.Item) rec {
	return rec{index: it.GetIndex(), count: it.GetCount(), base: it.GetBase(), attempt: it.GetAttempt()}
}

func recsOfItems(its []*rolloutv1.Item) []rec {
	out := make([]rec, len(its))
	for i, it := range its {
		out[i] = recOfItem(it)
	}
	return out
}

// ranges is the range scenario; see the comment above.
func (s *scenario) ranges() {
	if !s.caps.Has(Ranges) {
		s.unimplemented("SubmitRanges", func(ctx context.Context) error {
			_, err := s.cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: RangeRun, Spec: rangeSpec(), Ranges: Chunks()})
			return err
		})
	}
	if !s.caps.Has(Ranges) || !s.caps.Has(Worker) {
		s.unimplemented("ReportRange", func(ctx context.Context) error {
			_, err := s.cl.ReportRange(ctx, &rolloutv1.ReportRangeRequest{WorkerId: W3, Reports: []*rolloutv1.RangeReport{
				{Run: RangeRun, Id: []byte("R1"), Attempt: 1, Lo: 0, DoneTo: 0, NackRest: true}}})
			return err
		})
	}
	if !s.caps.Has(Ranges) {
		return
	}
	s.submitRanges()
	if s.caps.Has(Worker) {
		s.workRanges()
	}
	if !s.caps.Has(Cancel) {
		return
	}
	s.cancelRanges()
	s.rangeResults()
	if s.caps.Has(Delete) {
		s.deleteRanges()
	}
}

// rangeCounters checks the range run's counters (in indexes; Ranges: its
// records).
func (s *scenario) rangeCounters(when string, w *rolloutv1.RunCounters) {
	s.t.Helper()
	w.Total, w.ExpectedTotal = rangeTotal, rangeTotal
	s.countersOf(RangeRun, when, w)
}

// submitRanges: creation, idempotent resubmission, refused overlaps, the
// counters and the records.
func (s *scenario) submitRanges() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	resp, err := s.cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: RangeRun, Spec: rangeSpec(), Ranges: Chunks()})
	require.NoError(t, err, "submit ranges")
	require.EqualValues(t, rangeTotal, resp.GetCreated(), "submit ranges: created (indexes)")
	resp, err = s.cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: RangeRun, Spec: rangeSpec(), Ranges: Chunks()})
	require.NoError(t, err, "resubmit ranges")
	require.Zero(t, resp.GetCreated(), "resubmit ranges: created")
	require.EqualValues(t, rangeTotal, resp.GetAlreadyPending(), "resubmit ranges: already pending (indexes)")

	for name, rs := range map[string][]*rolloutv1.InputRange{
		"a chunk overlapping X":               {chunk("z", 8, 8)},
		"X again, another count":              {chunk("x", 0, 10)},
		"a new chunk and X's overlapping one": {chunk("w", rangeTotal, 4), chunk("v", 4, 2)},
	} {
		_, err = s.cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: RangeRun, Ranges: rs})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "submit of %s: %v", name, err)
	}
	_, err = s.cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: RangeRun})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "submit of no ranges: %v", err)
	// A payload_ref outside the run's input prefix (another run's chunk,
	// any other key): refused, naming the key; nothing is created.
	for _, obj := range []string{"secret/keys", storeurl.InputPrefix(RangeRun+"-other") + "x", storeurl.ResultPrefix(RangeRun) + "x"} {
		rs := []*rolloutv1.InputRange{chunk("w", rangeTotal, 4)}
		rs[0].PayloadRef.Object = obj
		_, err = s.cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: RangeRun, Ranges: rs})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "a payload_ref %s outside the run's input prefix: %v", obj, err)
		require.ErrorContains(t, err, obj)
		_, err = s.cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: RangeRun + "-new", Spec: rangeSpec(), Ranges: rs})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "a new run's payload_ref %s outside its input prefix: %v", obj, err)
	}
	_, err = s.cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: RangeRun, Items: Items()[:1]})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "submit of items to a range run: %v", err)
	s.rangeCounters("after submit", &rolloutv1.RunCounters{Pending: rangeTotal, Ranges: 2})
	pending := rolloutv1.ItemState_ITEM_STATE_PENDING
	s.rangeRecords("after submit", []rec{{0, xCount, 0, 0, pending, ""}, {xCount, yCount, xCount, 0, pending, ""}})
}

// rangeRecords checks the range run's records, all on one page.
func (s *scenario) rangeRecords(when string, want []rec) {
	t := s.t
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	resp, err := s.cl.Results(ctx, &rolloutv1.ResultsRequest{Run: RangeRun})
	require.NoError(t, err, "results %s", when)
	got := make([]rec, len(resp.GetItems()))
	for i, it := range resp.GetItems() {
		got[i] = rec{it.GetIndex(), it.GetCount(), it.GetBase(), it.GetAttempt(), it.GetState(), it.GetOwner()}
	}
	require.Equal(t, want, got, "records %s", when)
	require.Equal(t, [2]any{uint64(rangeTotal), true}, [2]any{resp.GetNextIndex(), resp.GetDone()}, "results %s: next index and done", when)
}

// claimRanges claims for worker at most max records and maxIndexes
// indexes.
func (s *scenario) claimRanges(worker string, max uint32, maxIndexes uint64) []*rolloutv1.Item {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	resp, err := s.cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: worker, MaxItems: max, MaxIndexes: maxIndexes, WaitMs: 1000})
	require.NoError(s.t, err, "claim by %s", worker)
	return resp.GetItems()
}

// reportRange sends one range report by worker and returns its result.
func (s *scenario) reportRange(worker string, r *rolloutv1.RangeReport) *rolloutv1.RangeReportResult {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	if r.Run == "" {
		r.Run = RangeRun
	}
	resp, err := s.cl.ReportRange(ctx, &rolloutv1.ReportRangeRequest{WorkerId: worker, Reports: []*rolloutv1.RangeReport{r}})
	require.NoError(s.t, err, "range report by %s", worker)
	require.Len(s.t, resp.GetResults(), 1)
	require.Equal(s.t, r.GetId(), resp.GetResults()[0].GetId(), "range report result id")
	return resp.GetResults()[0]
}

// outcome is a range report's result as the scenario checks it.
type outcome struct {
	status    rolloutv1.ReportStatus
	duplicate bool
	repended  uint64
}

func outcomeOf(r *rolloutv1.RangeReportResult) outcome {
	return outcome{r.GetStatus(), r.GetDuplicate(), r.GetRepended()}
}

// progress is a report of [lo, doneTo) of it, done but for failed, whose
// result object is named name with hash h.
func progress(it *rolloutv1.Item, lo, doneTo uint64, name string, h byte, failed ...*rolloutv1.FailedIndex) *rolloutv1.RangeReport {
	r := &rolloutv1.RangeReport{Id: it.GetId(), Attempt: it.GetAttempt(), Lo: lo, DoneTo: doneTo, Failed: failed}
	if doneTo-lo > uint64(len(failed)) {
		r.ResultRef = resultRef(name, h)
	}
	return r
}

func key(it *rolloutv1.Item, started uint64) *rolloutv1.ItemKey {
	return &rolloutv1.ItemKey{Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt(), Started: started}
}

// bound is a heartbeat's bound of a range, as the scenario checks it.
type bound struct {
	id      string
	attempt uint64
	lo, hi  uint64
}

// heartbeatRanges heartbeats worker and returns the ids of the keys it
// lost and its bounds.
func (s *scenario) heartbeatRanges(worker string, held, executing []*rolloutv1.ItemKey) (lost []string, bounds []bound) {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	hb, err := s.cl.Heartbeat(ctx, &rolloutv1.HeartbeatRequest{WorkerId: worker, Held: held, Executing: executing, Backlog: uint32(len(held))})
	require.NoError(s.t, err, "heartbeat of %s", worker)
	for _, k := range hb.GetLost() {
		lost = append(lost, string(k.GetId()))
	}
	for _, b := range hb.GetBounds() {
		require.Equal(s.t, RangeRun, b.GetRun(), "bound's run")
		bounds = append(bounds, bound{string(b.GetId()), b.GetAttempt(), b.GetLo(), b.GetHi()})
	}
	return lost, bounds
}

func boundOf(it *rolloutv1.Item, lo, hi uint64) bound {
	return bound{string(it.GetId()), it.GetAttempt(), lo, hi}
}

const (
	running   = rolloutv1.ItemState_ITEM_STATE_RUNNING
	rPending  = rolloutv1.ItemState_ITEM_STATE_PENDING
	rDone     = rolloutv1.ItemState_ITEM_STATE_DONE
	rDead     = rolloutv1.ItemState_ITEM_STATE_DEAD
	rCanceled = rolloutv1.ItemState_ITEM_STATE_CANCELLED
	invalid   = rolloutv1.ReportStatus_REPORT_STATUS_INVALID
)

// rangeWork holds what the work phase hands to the cancel phase.
type rangeWork struct {
	a2    *rolloutv1.Item // W3's [7, 8) of X, at attempt 1
	tailX *rolloutv1.Item // W4's stolen [10, 12) of X, at attempt 2
}

// workRanges is the range life cycle through the worker protocol; see the
// comment at the top of this file.
func (s *scenario) workRanges() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	for _, w := range []string{W3, W4} {
		_, err := s.cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: w})
		require.NoError(t, err, "register %s", w)
	}

	// A claim of at most 5 indexes carves X: W3 gets its head.
	got := s.claimRanges(W3, 1, 5)
	require.Equal(t, []rec{{index: 0, count: 5, base: 0, attempt: 1}}, recsOfItems(got), "claim of 5 indexes")
	a := got[0]
	require.Equal(t, RangeRun, a.GetRun())
	require.Equal(t, RangeStore, a.GetStore(), "a range is handed out with its run's store")
	require.Equal(t, Chunks()[0].GetPayloadRef().GetObject(), a.GetPayloadRef().GetObject(), "payload_ref names the whole chunk")
	require.EqualValues(t, xCount*16, a.GetPayloadRef().GetLength(), "payload_ref names the whole chunk")
	require.Empty(t, a.GetPayload())
	s.rangeCounters("after the carving claim", &rolloutv1.RunCounters{Pending: 15, Running: 5, Ranges: 3})
	s.rangeRecords("after the carving claim", []rec{{0, 5, 0, 1, running, W3}, {5, 7, 0, 0, rPending, ""}, {xCount, yCount, xCount, 0, rPending, ""}})

	s.reportRules(a)

	// [2, 5) with 3 failed: done segments around a one-index record.
	fail3 := &rolloutv1.FailedIndex{Index: 3, Reason: "first failure"}
	require.Equal(t, outcome{applied, false, 1}, outcomeOf(s.reportRange(W3, progress(a, 2, 5, "a2", 2, fail3))), "report of [2, 5) with 3 failed")
	require.Equal(t, outcome{applied, true, 0}, outcomeOf(s.reportRange(W3, progress(a, 2, 5, "a2", 2, fail3))),
		"the same report again, the range gone: a duplicate")
	require.Equal(t, casMiss, s.reportRange(W3, progress(a, 5, 6, "a3", 3)).GetStatus(), "a report of a range that is gone")
	s.rangeCounters("after a failed index", &rolloutv1.RunCounters{Pending: 16, Done: 4, Failures: 1, Ranges: 6})
	s.rangeRecords("after a failed index", []rec{{0, 2, 0, 1, rDone, W3}, {2, 1, 0, 1, rDone, W3}, {3, 1, 0, 1, rPending, ""},
		{4, 1, 0, 1, rDone, W3}, {5, 7, 0, 0, rPending, ""}, {xCount, yCount, xCount, 0, rPending, ""}})

	// The queue: the rest of X, Y, then the failed index.
	got = s.claimRanges(W3, 2, 16)
	require.Equal(t, []rec{{index: 5, count: 7, base: 0, attempt: 1}, {index: xCount, count: yCount, base: xCount, attempt: 1}}, recsOfItems(got),
		"claim of two records")
	x, y := got[0], got[1]
	got = s.claimRanges(W4, 10, 10)
	require.Equal(t, []rec{{index: 3, count: 1, base: 0, attempt: 2}}, recsOfItems(got), "claim of the failed index")
	one := got[0]
	require.Equal(t, outcome{applied, false, 0}, outcomeOf(s.reportRange(W4, progress(one, 3, 4, "", 0,
		&rolloutv1.FailedIndex{Index: 3, Reason: "second failure"}))), "the failed index fails again")
	require.Equal(t, outcome{applied, false, 0}, outcomeOf(s.reportRange(W3, progress(y, 12, 14, "y0", 4,
		&rolloutv1.FailedIndex{Index: 13, Reason: "permanent failure", Permanent: true}))), "report of [12, 14) with 13 failed permanently")
	s.rangeCounters("after the dead indexes", &rolloutv1.RunCounters{Running: 13, Done: 5, Dead: 2, Failures: 3, Ranges: 8})
	require.Empty(t, s.claim(W4, 10, 50*time.Millisecond), "nothing is pending")

	tails := s.stealRanges(a, x, y)
	xTail, yTail := tails[0], tails[1]

	// release_from, nack_rest, and the thief's report.
	require.Equal(t, outcome{applied, false, 2}, outcomeOf(s.reportRange(W3, &rolloutv1.RangeReport{Id: x.GetId(), Attempt: 1, Lo: 5, DoneTo: 7,
		ResultRef: resultRef("x0", 5), ReleaseFrom: 8})), "report of [5, 7) releasing [8, 10)")
	require.Equal(t, outcome{applied, false, 3}, outcomeOf(s.reportRange(W3, &rolloutv1.RangeReport{Id: y.GetId(), Attempt: 1, Lo: 14, DoneTo: 15,
		ResultRef: resultRef("y1", 6), NackRest: true})), "report of [14, 15) giving back the rest")
	require.Equal(t, outcome{applied, false, 0}, outcomeOf(s.reportRange(W4, progress(yTail, 18, 20, "y2", 7))), "the thief's report of [18, 20)")
	lost, bounds := s.heartbeatRanges(W3, []*rolloutv1.ItemKey{key(x, 0), key(y, 0)}, nil)
	require.Equal(t, []string{string(y.GetId())}, lost, "W3 lost Y, given back")
	require.Equal(t, []bound{boundOf(x, 7, 8)}, bounds, "W3 keeps [7, 8) of X")
	lost, _ = s.heartbeatRanges(W4, []*rolloutv1.ItemKey{key(xTail, 0)}, []*rolloutv1.ItemKey{key(xTail, 11)})
	require.Empty(t, lost, "W4 holds its tail of X")
	s.deregisterRanges()
	s.resubmitRanges()
	s.rangeCounters("before cancel", &rolloutv1.RunCounters{Pending: 6, Running: 3, Done: 10, Dead: 1, Failures: 3, Ranges: 13})
	s.rangeRecords("before cancel", []rec{{0, 2, 0, 1, rDone, W3}, {2, 1, 0, 1, rDone, W3}, {3, 1, 0, 2, rDead, W4},
		{4, 1, 0, 1, rDone, W3}, {5, 2, 0, 1, rDone, W3}, {7, 1, 0, 1, running, W3}, {8, 2, 0, 2, rPending, ""}, {10, 2, 0, 2, running, W4},
		{12, 1, 12, 1, rDone, W3}, {13, 1, 12, 1, rPending, ""}, {14, 1, 12, 1, rDone, W3}, {15, 3, 12, 1, rPending, ""}, {18, 2, 12, 2, rDone, W4}})
	s.work2 = rangeWork{a2: x, tailX: xTail}
}

// deregisterRanges: W5 claims the Pending [8,10) and deregisters, giving
// it back whole at its attempt.
func (s *scenario) deregisterRanges() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := s.cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: W5})
	require.NoError(t, err, "register %s", W5)
	got := s.claimRanges(W5, 1, 2)
	require.Equal(t, []rec{{index: 8, count: 2, base: 0, attempt: 2}}, recsOfItems(got), "claim of the given-back [8, 10)")
	resp, err := s.cl.Deregister(ctx, &rolloutv1.DeregisterRequest{WorkerId: W5, Reason: "conformance"})
	require.NoError(t, err, "deregister %s", W5)
	require.EqualValues(t, 2, resp.GetRepended(), "deregister: indexes given back")
	require.Equal(t, casMiss, s.reportRange(W5, progress(got[0], 8, 10, "x3", 11)).GetStatus(), "the deregistered worker's late report")
}

// submitCounts is a SubmitRanges reply's counts.
type submitCounts struct{ created, pending, running, done, retried, dead uint64 }

// resubmitRanges submits the chunks again: every record of them is
// counted by state, nothing created; Y again with retry_dead re-pends its
// Dead index.
func (s *scenario) resubmitRanges() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	counts := func(r *rolloutv1.SubmitRangesResponse) submitCounts {
		return submitCounts{r.GetCreated(), r.GetAlreadyPending(), r.GetAlreadyRunning(), r.GetAlreadyDone(), r.GetRetried(), r.GetDead()}
	}
	resp, err := s.cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: RangeRun, Ranges: Chunks()})
	require.NoError(t, err, "resubmit of the chunks")
	require.Equal(t, submitCounts{pending: 5, running: 3, done: 10, dead: 2}, counts(resp), "resubmit of the chunks: counts by state")
	resp, err = s.cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: RangeRun, Ranges: Chunks()[1:], RetryDead: true})
	require.NoError(t, err, "resubmit of Y with retry_dead")
	require.Equal(t, submitCounts{pending: 3, done: 4, retried: 1}, counts(resp), "resubmit of Y with retry_dead: counts by state")
}

// reportRules checks the outcomes of progress reports on W3's range a,
// [0, 5) at attempt 1: it ends as [2, 5) with [0, 2) done.
func (s *scenario) reportRules(a *rolloutv1.Item) {
	t := s.t
	first := progress(a, 0, 2, "a0", 1)
	require.Equal(t, outcome{applied, false, 0}, outcomeOf(s.reportRange(W3, first)), "report of [0, 2)")
	require.Equal(t, outcome{applied, true, 0}, outcomeOf(s.reportRange(W3, progress(a, 0, 2, "a0", 1))), "the same report again: a duplicate")
	require.Equal(t, conflict, s.reportRange(W3, progress(a, 0, 2, "a0-other", 9)).GetStatus(), "the same segment with another hash")
	require.Equal(t, casMiss, s.reportRange(W3, progress(a, 0, 4, "a0", 1)).GetStatus(),
		"a report that only starts like the applied one (a longer done_to, the same result): no duplicate")
	require.Equal(t, casMiss, s.reportRange(W4, progress(a, 0, 2, "a0", 1)).GetStatus(), "the same report by a worker that does not own the range")
	stale := progress(a, 2, 3, "a1", 2)
	stale.Attempt = 2
	require.Equal(t, casMiss, s.reportRange(W3, stale).GetStatus(), "a report at another attempt")
	require.Equal(t, casMiss, s.reportRange(W3, progress(a, 1, 3, "a1", 2)).GetStatus(), "a lo that is not the range's first index")
	require.Equal(t, casMiss, s.reportRange(W3, progress(a, 2, 6, "a1", 2)).GetStatus(), "a done_to past the range's end")
	require.Equal(t, casMiss, s.reportRange(W3, &rolloutv1.RangeReport{Id: []byte("no-such-record"), Attempt: 1, Lo: 2, DoneTo: 3,
		ResultRef: resultRef("a1", 2)}).GetStatus(), "a report naming no record of the run")
	require.Equal(t, notFound, s.reportRange(W3, &rolloutv1.RangeReport{Run: "no-such-run", Id: a.GetId(), Attempt: 1, Lo: 2, DoneTo: 2,
		NackRest: true}).GetStatus(), "a report naming an unknown run")
	outside := progress(a, 2, 3, "a1", 2)
	outside.ResultRef.Object = storeurl.InputPrefix(RangeRun) + "x"
	require.Equal(t, invalid, s.reportRange(W3, outside).GetStatus(), "a result outside the run's result prefix")
	require.Equal(t, invalid, s.report(W3, &rolloutv1.ItemReport{Run: RangeRun, Id: a.GetId(), Attempt: 1, Outcome: rolloutv1.Outcome_OUTCOME_DONE,
		ResultRef: resultRef("a1", 2)}), "an item's report of a range of 3 indexes")
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := s.cl.ReportRange(ctx, &rolloutv1.ReportRangeRequest{WorkerId: W3, Reports: []*rolloutv1.RangeReport{
		{Run: RangeRun, Id: a.GetId(), Attempt: 1, Lo: 3, DoneTo: 2, ResultRef: resultRef("a1", 2)}}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "a report whose done_to is below its lo: %v", err)
	s.rangeCounters("after the report rules", &rolloutv1.RunCounters{Pending: 15, Running: 3, Done: 2, Ranges: 4})
}

// stealRanges: W3 holds x ([5,12), started at 7) and y ([14,20), started
// at 16); W4 steals their tails [10,12) and [18,20). It returns them in
// that order.
func (s *scenario) stealRanges(a, x, y *rolloutv1.Item) []*rolloutv1.Item {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	lost, bounds := s.heartbeatRanges(W3, []*rolloutv1.ItemKey{key(a, 0), key(x, 0), key(y, 0)}, []*rolloutv1.ItemKey{key(x, 7), key(y, 16)})
	require.Equal(t, []string{string(a.GetId())}, lost, "W3's heartbeat: the range it reported whole is lost")
	require.Equal(t, []bound{boundOf(x, 5, 12), boundOf(y, 14, 20)}, bounds, "W3's heartbeat: its ranges' bounds, in held order")
	_, err := s.cl.Steal(ctx, &rolloutv1.StealRequest{WorkerId: W4, Backlog: 1})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "steal with a backlog: %v", err)
	st, err := s.cl.Steal(ctx, &rolloutv1.StealRequest{WorkerId: W4})
	require.NoError(t, err, "steal")
	require.Equal(t, W3, st.GetVictim(), "steal victim")
	require.Equal(t, []rec{{index: 18, count: 2, base: xCount, attempt: 2}, {index: 10, count: 2, base: 0, attempt: 2}}, recsOfItems(st.GetItems()),
		"stolen tails: latest claim first, half of each range's unstarted indexes")
	for i, it := range st.GetItems() {
		require.NotEqual(t, string(x.GetId()), string(it.GetId()), "tail %d is a record of its own", i)
		require.NotEqual(t, string(y.GetId()), string(it.GetId()), "tail %d is a record of its own", i)
	}
	require.Equal(t, Chunks()[1].GetPayloadRef().GetObject(), st.GetItems()[0].GetPayloadRef().GetObject(), "a tail's payload_ref names its chunk")
	yTail, xTail := st.GetItems()[0], st.GetItems()[1]
	_, bounds = s.heartbeatRanges(W3, []*rolloutv1.ItemKey{key(x, 0), key(y, 0)}, []*rolloutv1.ItemKey{key(x, 7), key(y, 16)})
	require.Equal(t, []bound{boundOf(x, 5, 10), boundOf(y, 14, 18)}, bounds, "W3's heartbeat after the steal: the cuts")
	require.Equal(t, casMiss, s.reportRange(W3, progress(x, 5, 11, "x0", 5)).GetStatus(), "the victim's report past the cut")
	s.rangeCounters("after the steal", &rolloutv1.RunCounters{Running: 13, Done: 5, Dead: 2, Failures: 3, Ranges: 10})
	return []*rolloutv1.Item{xTail, yTail}
}

// cancelRanges: the Pending records are Cancelled, each Running range
// loses its unstarted tail; its started head may still finish.
func (s *scenario) cancelRanges() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	wantCancelled, wantRunning := uint64(rangeTotal), uint64(0)
	after := &rolloutv1.RunCounters{CancelledItems: rangeTotal, Cancelled: true, Ranges: 2}
	if s.caps.Has(Worker) {
		// [8,10), 13 and [15,18) pending, [7,8) (nothing started),
		// [11,12) (past the started mark 11 of [10,12)).
		wantCancelled, wantRunning = 8, 1
		after = &rolloutv1.RunCounters{Running: 1, Done: 10, Dead: 1, Failures: 3, CancelledItems: 8, Cancelled: true, Ranges: 14}
	}
	resp, err := s.cl.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: RangeRun})
	require.NoError(t, err, "cancel the range run")
	require.Equal(t, [2]uint64{wantCancelled, wantRunning}, [2]uint64{resp.GetCancelled(), resp.GetRunning()}, "cancel: cancelled and running indexes")
	s.rangeCounters("after cancel", after)
	_, err = s.cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: RangeRun, Ranges: Chunks()})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "submit ranges to a cancelled run: %v", err)
	if !s.caps.Has(Worker) {
		return
	}
	w := s.work2
	require.Empty(t, s.claimRanges(W4, 10, 10), "claim from a cancelled run")
	require.Equal(t, casMiss, s.reportRange(W3, progress(w.a2, 7, 8, "x1", 8)).GetStatus(), "report of a range cancelled whole")
	require.Equal(t, casMiss, s.reportRange(W4, progress(w.tailX, 10, 12, "x2", 10)).GetStatus(), "report past the cancel's cut")
	require.Equal(t, outcome{applied, false, 0}, outcomeOf(s.reportRange(W4, progress(w.tailX, 10, 11, "x2", 10))), "report of the started head")
	s.rangeCounters("after the cancelled run's last range", &rolloutv1.RunCounters{Done: 11, Dead: 1, Failures: 3, CancelledItems: 8, Cancelled: true, Ranges: 14})
}

// rangeResults pages through the range run's records (five a page).
func (s *scenario) rangeResults() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	want := []rec{{0, xCount, 0, 0, rCanceled, ""}, {xCount, yCount, xCount, 0, rCanceled, ""}}
	if s.caps.Has(Worker) {
		want = []rec{{0, 2, 0, 1, rDone, W3}, {2, 1, 0, 1, rDone, W3}, {3, 1, 0, 2, rDead, W4}, {4, 1, 0, 1, rDone, W3},
			{5, 2, 0, 1, rDone, W3}, {7, 1, 0, 1, rCanceled, W3}, {8, 2, 0, 2, rCanceled, ""}, {10, 1, 0, 2, rDone, W4},
			{11, 1, 0, 2, rCanceled, ""}, {12, 1, 12, 1, rDone, W3}, {13, 1, 12, 1, rCanceled, ""}, {14, 1, 12, 1, rDone, W3},
			{15, 3, 12, 1, rCanceled, ""}, {18, 2, 12, 2, rDone, W4}}
	}
	var got []rec
	var all []*rolloutv1.ResultItem
	from := uint64(0)
	for range rangeTotal {
		resp, err := s.cl.Results(ctx, &rolloutv1.ResultsRequest{Run: RangeRun, FromIndex: from, Limit: 5})
		require.NoError(t, err, "range results from %d", from)
		for _, it := range resp.GetItems() {
			got = append(got, rec{it.GetIndex(), it.GetCount(), it.GetBase(), it.GetAttempt(), it.GetState(), it.GetOwner()})
		}
		all = append(all, resp.GetItems()...)
		if n := len(resp.GetItems()); n > 0 {
			last := resp.GetItems()[n-1]
			require.Equal(t, last.GetIndex()+last.GetCount(), resp.GetNextIndex(), "a page's next index follows its last record")
		}
		if resp.GetDone() {
			break
		}
		from = resp.GetNextIndex()
	}
	require.Equal(t, want, got, "range records")
	resp, err := s.cl.Results(ctx, &rolloutv1.ResultsRequest{Run: RangeRun, FromIndex: 1, Limit: 1})
	require.NoError(t, err)
	require.Len(t, resp.GetItems(), 1, "results from inside a record")
	require.Equal(t, want[1].index, resp.GetItems()[0].GetIndex(), "results from inside a record start at the next record")
	if !s.caps.Has(Worker) {
		return
	}
	reasons := map[uint64]string{3: "second failure"} // 13's went with its retry
	hashes := map[uint64]byte{0: 1, 2: 2, 4: 2, 5: 5, 10: 10, 12: 4, 14: 6, 18: 7}
	for _, it := range all {
		require.Equal(t, reasons[it.GetIndex()], it.GetReason(), "reason of the record at %d", it.GetIndex())
		if h, ok := hashes[it.GetIndex()]; ok {
			require.NotNil(t, it.GetResultRef(), "result of the record at %d", it.GetIndex())
			require.Equal(t, h, it.GetResultRef().GetBlake3()[0], "result hash of the record at %d", it.GetIndex())
		} else {
			require.Nil(t, it.GetResultRef(), "result of the record at %d", it.GetIndex())
		}
		chunk := Chunks()[0]
		if it.GetBase() == xCount {
			chunk = Chunks()[1]
		}
		require.Equal(t, chunk.GetPayloadRef().GetObject(), it.GetPayloadRef().GetObject(), "payload of the record at %d", it.GetIndex())
	}
}

// deleteRanges removes the cancelled range run: the reply counts its
// indexes.
func (s *scenario) deleteRanges() {
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	resp, err := s.cl.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: RangeRun})
	require.NoError(t, err, "delete the range run")
	require.EqualValues(t, rangeTotal, resp.GetItems(), "delete: indexes removed")
	_, err = s.cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: RangeRun})
	require.Equal(t, codes.NotFound, status.Code(err), "status of a deleted range run: %v", err)
}
