package coordtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
)

// Ranges: the fake's range runs, with the ledger's rules (fsm/ranges.go).
//
// A range run (created by SubmitRanges) keeps its records in the same
// table as items: a record is an item whose Count is its number of
// indexes [Index, Index+Count) of the chunk whose first index is Base
// (PayloadRef names the whole chunk). Its id is made by the fake as by
// the ledger ("R" and the run's record number), so it never depends on
// where its bounds moved. A run's records partition the indexes it holds.
//
//   - submit (SubmitRanges): one Pending record per new chunk; the same
//     chunk again is counted by state, never created again (retry_dead
//     re-pends its Dead indexes); a chunk overlapping indexes of the run,
//     or a run of items, refuses the whole request (INVALID_ARGUMENT).
//   - claim (Claim): max_indexes bounds the indexes a claim takes (an item
//     counts one); a longer Pending range is carved, the claim taking a
//     new record for its head, the rest keeping its queue place.
//   - progress (ReportRange): Running(w, a) over [lo, hi) reports [lo, c):
//     each run of indexes that did not fail becomes a Done segment (a new
//     record holding the result reference), each failed index a one-index
//     record with one failure (Pending again, or Dead at max_failures or
//     when permanent; a one-index range fails in place, keeping its
//     count), and the range shrinks to [c, hi) (gone when empty). A stale
//     owner, attempt or lo, or a c past hi, is a CAS miss; the identical
//     retry of an applied report is a duplicate, another hash for its
//     segment a conflict. nack_rest gives the rest back to Pending,
//     release_from the tail from there (the owner keeps the head).
//   - heartbeat: an executing key's started raises the range's high-water
//     mark; each held range still the worker's has its bounds answered.
//   - steal: the victim is the worker with the most stealable work (an
//     item counts one, a range its indexes past the mark); from a victim
//     with ranges the thief takes, latest claim first, each range's tail of
//     at most half its unstarted indexes (a new record at the next
//     attempt) and each item not executing, up to half the stealable work
//     (at most 32).
//   - cancel: Pending records are Cancelled; a Running range loses its
//     unstarted tail as a Cancelled record (whole when nothing started).
//   - status, results and the events count indexes.
//
// Not faked: stale_after_ms (a resubmit never re-pends a silent owner's
// ranges, as SubmitItems' does not), item-dead events, and the ledger's
// record and request size limits beyond validate.DefaultLimits.

// rangeID is the id of a range run's record number seq, as the ledger
// makes it.
func rangeID(seq uint64) []byte {
	b := make([]byte, 9)
	b[0] = 'R'
	binary.BigEndian.PutUint64(b[1:], seq)
	return b
}

// width is how many indexes a record stands for: Count for a range, 1 for
// an item.
func (it *item) width() uint64 { return max(it.Count, 1) }

// end is one past the record's last index.
func (it *item) end() uint64 { return it.Index + it.width() }

// isRange reports whether the record is a range of a range run.
func (it *item) isRange() bool { return it.Count > 0 }

// unstarted counts a Running range's indexes past its high-water mark.
func (it *item) unstarted() uint64 {
	from := max(it.Index, it.Started)
	if from >= it.end() {
		return 0
	}
	return it.end() - from
}

// newRecordLocked returns a new range record of run over [lo, lo+n) of the
// chunk at base, in no state: the caller gives it one (and a queue place).
func (s *Server) newRecordLocked(run string, lo, n, base uint64, pref *rolloutv1.DataRef) *item {
	s.recSeq[run]++
	it := &item{ItemView: ItemView{Run: run, ID: rangeID(s.recSeq[run]), Index: lo, Count: n, Base: base}}
	if pref != nil {
		it.PayloadRef = proto.Clone(pref).(*rolloutv1.DataRef)
	}
	s.items[key{run, string(it.ID)}] = it
	return it
}

// recordsLocked returns run's records in index order.
func (s *Server) recordsLocked(run string) []*item {
	var out []*item
	for _, it := range s.items {
		if it.Run == run {
			out = append(out, it)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// recordAtLocked returns the record of run that holds index idx, or nil.
func (s *Server) recordAtLocked(run string, idx uint64) *item {
	for _, it := range s.items {
		if it.Run == run && it.Index <= idx && idx < it.end() {
			return it
		}
	}
	return nil
}

// SubmitRanges creates a range run or adds input chunks to one, as the
// ledger does; see the comment at the top of this file. The request is
// checked as the service checks it (validate.DefaultLimits
// CheckRangesRequest: INVALID_ARGUMENT, nothing changed); a cancelled run
// is FAILED_PRECONDITION. The counts are in indexes. A follower answers
// UNAVAILABLE with its leader hint, as for every write.
func (s *Server) SubmitRanges(_ context.Context, req *rolloutv1.SubmitRangesRequest) (*rolloutv1.SubmitRangesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	if err := validate.DefaultLimits().CheckRangesRequest(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "submit refused, nothing was changed: %v", err)
	}
	run := req.GetRun()
	fresh, err := s.checkRangesLocked(req)
	if err != nil {
		return nil, err
	}
	if _, ok := s.specs[run]; !ok {
		s.specs[run] = proto.Clone(req.GetSpec()).(*rolloutv1.RunSpec)
		s.kinds[run] = req.GetSpec().GetKind()
	} else if t := req.GetSpec().GetTotal(); t > s.specs[run].GetTotal() {
		s.specs[run].Total = t
	}
	s.ranged[run] = true
	resp := &rolloutv1.SubmitRangesResponse{}
	for _, in := range req.GetRanges() {
		s.countChunkLocked(run, in, req.GetRetryDead(), resp)
	}
	for _, in := range fresh {
		it := s.newRecordLocked(run, in.GetIndex(), in.GetCount(), in.GetIndex(), in.GetPayloadRef())
		s.enqueueLocked(it)
		resp.Created += it.Count
	}
	s.resumeLocked(run, "the run was submitted again")
	s.notifyLocked()
	resp.Header = s.headerLocked()
	return resp, nil
}

// checkRangesLocked checks req (already checked on its own) against the
// fake's runs and returns the chunks the run does not hold, by index.
func (s *Server) checkRangesLocked(req *rolloutv1.SubmitRangesRequest) ([]*rolloutv1.InputRange, error) {
	run := req.GetRun()
	invalid := func(format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, "invalid command: "+format, args...)
	}
	recs := s.recordsLocked(run)
	exists := len(recs) > 0
	store := req.GetSpec().GetStore()
	if exists {
		switch {
		case s.cancelled[run]:
			return nil, status.Errorf(codes.FailedPrecondition, "run %q was cancelled; it takes no new items", run)
		case !s.ranged[run]:
			return nil, invalid("submit_ranges names run %q, whose items have ids (a run is ranges or items, not both)", run)
		case req.GetSpec() != nil && store != s.specs[run].GetStore():
			return nil, invalid("submit_ranges names store %q for run %q, whose store is %q", store, run, s.specs[run].GetStore())
		}
		store = s.specs[run].GetStore()
	}
	if err := s.checkSpecLocked("submit_ranges", run, req.GetSpec()); err != nil {
		return nil, err
	}
	if store == "" {
		return nil, invalid("submit_ranges run %q has no store: a range's lines are read from its chunk object", run)
	}
	objects := make([]string, 0, len(req.GetRanges()))
	for _, in := range req.GetRanges() {
		objects = append(objects, in.GetPayloadRef().GetObject())
	}
	if err := s.checkPayloadsLocked(run, req.GetSpec(), objects, false); err != nil {
		return nil, err
	}
	byIdx := slices.Clone(req.GetRanges())
	sort.SliceStable(byIdx, func(i, j int) bool { return byIdx[i].GetIndex() < byIdx[j].GetIndex() })
	var fresh []*rolloutv1.InputRange
	for _, in := range byIdx {
		lo, hi := in.GetIndex(), in.GetIndex()+in.GetCount()
		if ex := s.recordAtLocked(run, lo); ex != nil {
			if !s.sameChunkLocked(ex, in) {
				return nil, invalid("submit_ranges chunk at index %d of object %q: run %q holds that index for another chunk, or with another count",
					lo, in.GetPayloadRef().GetObject(), run)
			}
			continue
		}
		for _, it := range recs {
			if it.Index >= lo && it.Index < hi {
				return nil, invalid("submit_ranges chunk [%d, %d) of run %q overlaps indexes the run holds from %d", lo, hi, run, it.Index)
			}
		}
		fresh = append(fresh, in)
	}
	return fresh, nil
}

// sameChunkLocked reports whether the record ex, which holds in's first
// index, belongs to the very chunk in names: the same first index, object
// and count.
func (s *Server) sameChunkLocked(ex *item, in *rolloutv1.InputRange) bool {
	if !ex.isRange() || ex.Base != in.GetIndex() || ex.PayloadRef.GetObject() != in.GetPayloadRef().GetObject() {
		return false
	}
	last := s.recordAtLocked(ex.Run, in.GetIndex()+in.GetCount()-1)
	if last == nil || last.Base != ex.Base {
		return false
	}
	next := s.recordAtLocked(ex.Run, in.GetIndex()+in.GetCount())
	return next == nil || next.Base != ex.Base
}

// countChunkLocked counts the records of the chunk in names that run
// holds already by state into resp (in indexes); with retryDead it
// re-pends the Dead ones.
func (s *Server) countChunkLocked(run string, in *rolloutv1.InputRange, retryDead bool, resp *rolloutv1.SubmitRangesResponse) {
	for _, it := range s.recordsLocked(run) {
		if it.Base != in.GetIndex() || it.Index >= in.GetIndex()+in.GetCount() || !it.isRange() {
			continue
		}
		n := it.width()
		switch it.State {
		case Pending:
			resp.AlreadyPending += n
		case Running:
			resp.AlreadyRunning += n
		case Done:
			resp.AlreadyDone += n
		case Dead:
			if !retryDead {
				resp.Dead += n
				continue
			}
			it.Failures, it.Reason = 0, ""
			s.enqueueLocked(it)
			resp.Retried += n
		}
	}
}

// carveLocked cuts the Pending range it after its first k indexes (0 < k <
// width): a new record takes the head, Pending in no queue place; it keeps
// the rest and its queue place. It returns the head.
func (s *Server) carveLocked(it *item, k uint64) *item {
	head := s.newRecordLocked(it.Run, it.Index, k, it.Base, it.PayloadRef)
	head.State = Pending
	it.Index += k
	it.Count -= k
	return head
}

// cutTailLocked takes the last k indexes (0 < k < width) off the Running
// range it as a new record at its attempt, in no state: the caller gives
// it one. it keeps the head, its high-water mark capped at its new end.
func (s *Server) cutTailLocked(it *item, k uint64) *item {
	tail := s.newRecordLocked(it.Run, it.end()-k, k, it.Base, it.PayloadRef)
	tail.Attempt = it.Attempt
	it.Count -= k
	it.Started = min(it.Started, it.end())
	return tail
}

// cancelTailLocked cuts the unstarted indexes off the Running range it as
// a Cancelled record (the whole range when nothing of it started) and
// returns how many.
func (s *Server) cancelTailLocked(it *item) uint64 {
	k := it.unstarted()
	switch {
	case k == 0:
	case k == it.width():
		it.State = Cancelled
	default:
		s.cutTailLocked(it, k).State = Cancelled
	}
	return k
}

// ReportRange applies progress reports on Running ranges, each on its own
// (results[i] answers reports[i]); see the comment at the top of this file.
// A report whose shape is wrong (validate.DefaultLimits CheckRangeReport)
// fails the whole call with INVALID_ARGUMENT and nothing is applied; a
// result_ref outside the run's result prefix is an INVALID result of its
// report only, as in the service.
func (s *Server) ReportRange(_ context.Context, req *rolloutv1.ReportRangeRequest) (*rolloutv1.ReportRangeResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	if req.GetWorkerId() == "" || len(req.GetReports()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "worker_id and reports are required")
	}
	lim := validate.DefaultLimits()
	for i, r := range req.GetReports() {
		if err := lim.CheckRangeReport(i, r); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "report refused, nothing was changed: %v", err)
		}
	}
	resp := &rolloutv1.ReportRangeResponse{Header: s.headerLocked()}
	for _, r := range req.GetReports() {
		res := &rolloutv1.RangeReportResult{Id: bytes.Clone(r.GetId()), Status: rolloutv1.ReportStatus_REPORT_STATUS_APPLIED}
		if ref := r.GetResultRef(); ref != nil && !strings.HasPrefix(ref.GetObject(), s.dataPrefixLocked(r.GetRun())+"results/") {
			res.Status, res.Message = rolloutv1.ReportStatus_REPORT_STATUS_INVALID, "result_ref object is not under the run's result prefix"
		} else {
			s.applyRangeLocked(req.GetWorkerId(), r, res)
		}
		resp.Results = append(resp.Results, res)
	}
	s.notifyLocked()
	return resp, nil
}

// applyRangeLocked applies one checked report r by worker, filling in res.
func (s *Server) applyRangeLocked(worker string, r *rolloutv1.RangeReport, res *rolloutv1.RangeReportResult) {
	miss := func(why string) {
		if dup, conflict := s.reportRetryLocked(worker, r); conflict {
			res.Status, res.Message = rolloutv1.ReportStatus_REPORT_STATUS_CONFLICT, "the segment was reported done with another result"
		} else if dup {
			res.Duplicate = true
		} else {
			res.Status, res.Message = rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, why
		}
	}
	if len(s.recordsLocked(r.GetRun())) == 0 {
		res.Status, res.Message = rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND, "no such run"
		return
	}
	it := s.items[key{r.GetRun(), string(r.GetId())}]
	switch {
	case it == nil:
		miss("the run holds no such range now (finished, or never one)")
	case !it.isRange():
		res.Status, res.Message = rolloutv1.ReportStatus_REPORT_STATUS_INVALID, "the record is an item: report it with Report"
	case it.State != Running || it.Owner != worker || it.Attempt != r.GetAttempt():
		miss("not its owner or attempt")
	case r.GetLo() != it.Index:
		miss("lo is not the range's first index")
	case r.GetDoneTo() > it.end():
		res.Status, res.Message = rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, "indexes past the range's end are not its: the range ends there (a steal, a cancel or a release cut it, or its claim never went further)"
	default:
		res.Repended = s.progressLocked(it, worker, r)
	}
}

// reportRetryLocked reports whether r repeats an applied report (the
// record at its lo is a Done segment by the same worker and attempt that
// ends where r's first done segment ends, with the same result hash: dup),
// or conflicts with one (another hash). A report that only starts like an
// applied one is neither (a CAS miss), as in the ledger (fsm reportRetry).
func (s *Server) reportRetryLocked(worker string, r *rolloutv1.RangeReport) (dup, conflict bool) {
	seg := s.recordAtLocked(r.GetRun(), r.GetLo())
	if seg == nil || seg.State != Done || !seg.isRange() || seg.Index != r.GetLo() || seg.Owner != worker ||
		seg.Attempt != r.GetAttempt() || r.GetResultRef() == nil {
		return false, false
	}
	end := r.GetDoneTo()
	if f := r.GetFailed(); len(f) > 0 {
		end = min(end, f[0].GetIndex())
	}
	if seg.end() != end {
		return false, false // it only starts like the applied report
	}
	if !bytes.Equal(seg.ResultRef.GetBlake3(), r.GetResultRef().GetBlake3()) {
		return false, true
	}
	return true, false
}

// progressLocked applies a checked report r by worker to its Running range
// it and returns how many indexes went back to Pending.
func (s *Server) progressLocked(it *item, worker string, r *rolloutv1.RangeReport) uint64 {
	s.reportedLocked(it)
	failed := r.GetFailed()
	if it.width() == 1 && len(failed) == 1 {
		// A one-index range that failed fails in place, keeping its count.
		if !s.failLocked(it, failed[0].GetReason(), failed[0].GetPermanent()) {
			return 0
		}
		return 1
	}
	lo, to := r.GetLo(), r.GetDoneTo()
	rest := it.end() - to
	if rest == 0 {
		delete(s.items, key{it.Run, string(it.ID)})
	} else {
		it.Index, it.Count = to, rest
		it.Started = max(it.Started, to)
	}
	segment := func(a, b uint64) {
		if a >= b {
			return
		}
		seg := s.newRecordLocked(it.Run, a, b-a, it.Base, it.PayloadRef)
		seg.State, seg.Owner, seg.Attempt = Done, worker, r.GetAttempt()
		seg.ResultRef = proto.Clone(r.GetResultRef()).(*rolloutv1.DataRef)
	}
	repended := uint64(0)
	next := lo
	for _, f := range failed {
		segment(next, f.GetIndex())
		one := s.newRecordLocked(it.Run, f.GetIndex(), 1, it.Base, it.PayloadRef)
		one.State, one.Owner, one.Attempt, one.Reason = Running, worker, r.GetAttempt(), f.GetReason()
		if s.failLocked(one, f.GetReason(), f.GetPermanent()) {
			repended++
		}
		next = f.GetIndex() + 1
	}
	segment(next, to)
	switch rf := r.GetReleaseFrom(); {
	case rest > 0 && r.GetNackRest():
		s.enqueueLocked(it)
		repended += rest
	case rest > 0 && rf > 0 && rf <= it.Index:
		s.enqueueLocked(it)
		repended += rest
	case rest > 0 && rf > 0 && rf < it.end():
		// The tail [rf, end) goes back to Pending as a record of its own;
		// the owner keeps the head at its attempt.
		k := it.end() - rf
		s.enqueueLocked(s.cutTailLocked(it, k))
		repended += k
	}
	return repended
}

// failLocked counts a failure of the Running record it: Dead with reason
// at its run's max_failures or when permanent, else Pending again (true).
func (s *Server) failLocked(it *item, reason string, permanent bool) bool {
	it.Failures++
	s.failures[it.Run]++
	if it.Failures >= s.maxFailuresLocked(it.Run) || permanent {
		it.State, it.Reason = Dead, reason
		return false
	}
	s.enqueueLocked(it)
	return true
}

// stealable counts what victim's Running records its thief may take: an
// item one, a range its unstarted indexes.
func stealable(its []*item) uint64 {
	n := uint64(0)
	for _, it := range its {
		if it.isRange() {
			n += it.unstarted()
			continue
		}
		n++
	}
	return n
}

// stealRangesLocked takes up to want of the victim's records its (in claim
// order) for thief, latest claims first: from each range the tail of at
// most half its unstarted indexes, and each item not executing.
func (s *Server) stealRangesLocked(thief string, its []*item, exec map[key]bool, want uint64) []*item {
	var out []*item
	taken := uint64(0)
	for i := len(its) - 1; i >= 0 && taken < want; i-- {
		it := its[i]
		if it.isRange() {
			if k := min(it.unstarted()/2, want-taken); k > 0 {
				tail := s.cutTailLocked(it, k)
				s.assignLocked(tail, thief)
				out = append(out, tail)
				taken += k
			}
			continue
		}
		if !exec[key{it.Run, string(it.ID)}] {
			s.assignLocked(it, thief)
			out = append(out, it)
			taken++
		}
	}
	return out
}

// assignLocked makes it Running(worker, attempt+1), the worker's latest
// claim, with no high-water mark.
func (s *Server) assignLocked(it *item, worker string) {
	it.State, it.Owner = Running, worker
	it.Attempt++
	it.Started = 0
	s.seq++
	it.claimed = s.seq
}

// heartbeatRangesLocked raises the marks of worker's executing ranges
// (ItemKey.started) and returns the bounds of the held ranges it still
// owns, in held order.
func (s *Server) heartbeatRangesLocked(worker string, req *rolloutv1.HeartbeatRequest) []*rolloutv1.RangeBound {
	for _, k := range req.GetExecuting() {
		it := s.items[key{k.GetRun(), string(k.GetId())}]
		if k.GetStarted() > 0 && it != nil && it.isRange() && it.State == Running && it.Owner == worker && it.Attempt == k.GetAttempt() {
			it.Started = max(it.Started, min(k.GetStarted(), it.end()))
		}
	}
	var out []*rolloutv1.RangeBound
	for _, k := range req.GetHeld() {
		it := s.items[key{k.GetRun(), string(k.GetId())}]
		if it != nil && it.isRange() && it.State == Running && it.Owner == worker && it.Attempt == k.GetAttempt() {
			out = append(out, &rolloutv1.RangeBound{Run: it.Run, Id: bytes.Clone(it.ID), Attempt: it.Attempt, Lo: it.Index, Hi: it.end()})
		}
	}
	return out
}
