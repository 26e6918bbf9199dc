package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// Ranges: the ledger's unit of work for a batch run.
//
// A range run's records are ranges: a record stands for the consecutive
// indexes [index, index+n) of its run, lines index-base .. index-base+n-1
// of one input chunk (the object its payload reference names whole). Its
// id is made by the ledger ("R" and the run's record number, rangeID), so a
// record's identity never depends on where its bounds moved. The run's
// records partition the indexes it holds: every index is in exactly one
// record, and byIndex keeps them in index order.
//
// The life cycle, and the function that enforces each rule:
//   - submit (applySubmitRanges): one Pending record per new chunk; a chunk
//     the run holds already is counted, never created again.
//   - claim (applyClaim, carve): the oldest Pending record the worker takes;
//     one longer than the claim's index budget is cut, the claim taking a
//     new record for the head and the rest staying where it was in the
//     queue.
//   - progress (applyReportRange): Running(w,a) over [lo,hi) reports
//     [lo,c): each maximal run of indexes in it that did not fail becomes a
//     Done segment record (the result object's reference and blake3), each
//     failed index a one-index record with its failure (Pending again, or
//     Dead at max_failures or when permanent), and the range shrinks to
//     [c,hi) (removed when empty). lo must be the range's current first
//     index and c at most its end: otherwise the report is a CAS miss,
//     unless it repeats an applied one (Duplicate).
//   - split (applySteal, splitTail): a thief takes the tail [s,hi) of a
//     victim's range past its reported high-water mark: at most half of
//     the unstarted indexes and Config.MaxStealBatch; the victim keeps
//     [lo,s) and finds out from its heartbeat's Bounds or a CAS miss.
//   - nack, expiry, deregistration, cancel and delete act on whole records
//     as on items, counting indexes.
//
// Counters and Usage count indexes (width), records cost memory: a
// run's RAM, log and snapshot grow with its records, never with its
// indexes.

// MaxRangeCount bounds one range's width: a chunk holds at most this many
// lines.
const MaxRangeCount = limits.MaxRangeCount

// MaxReportFailures bounds the failed indexes one ReportRange names.
const MaxReportFailures = limits.MaxReportFailures

// width is how many indexes a record stands for: n for a range, 1 for an
// item.
func (it *item) width() uint64 {
	if it.n == 0 {
		return 1
	}
	return it.n
}

// runningIndexes counts the indexes w owns (its items, and its ranges'
// widths).
func (w *worker) runningIndexes() uint64 {
	n := uint64(0)
	for it := w.owned.front(); it != nil; it = w.owned.after(it) {
		n += it.width()
	}
	return n
}

// isRange reports whether the record is a range (of a range run).
func (it *item) isRange() bool { return it.n > 0 }

// end is one past the record's last index.
func (it *item) end() uint64 { return it.index + it.width() }

// rangeID is the id of a run's record number seq.
func rangeID(seq uint64) string {
	var b [9]byte
	b[0] = 'R'
	binary.BigEndian.PutUint64(b[1:], seq)
	return string(b[:])
}

// newRecord returns a new range record of r over [lo, lo+n) of chunk
// base, its payload reference pref, in no list and no state; the caller
// links it (link) and gives it a state.
func (r *run) newRecord(lo, n, base uint64, pref ref, now int64) *item {
	r.recSeq++
	return &item{run: r, id: rangeID(r.recSeq), index: lo, n: n, base: base, pref: pref, created: now, updated: now}
}

// link adds a new record to r's id map and index order: O(log records).
func (st *state) link(it *item) {
	r := it.run
	r.items[it.id] = it
	r.byIndex.insert(it)
	st.items++
}

// unlink removes a record that is in no list from r's map and index
// order; its indexes must be accounted for by the caller.
func (st *state) unlink(it *item) {
	r := it.run
	delete(r.items, it.id)
	r.byIndex.remove(it)
	st.items--
}

// recordAt returns the record of r that holds index idx, or nil.
func (r *run) recordAt(idx uint64) *item {
	if it := r.byIndex.atOrBefore(idx); it != nil && idx < it.end() {
		return it
	}
	return nil
}

// count adds n indexes to the counter of state s (the record's state does
// not change).
func (r *run) count(s State, n int64) { r.addCount(s, n) }

// rangeSubmitPlan is what validateSubmitRanges learned.
type rangeSubmitPlan struct {
	run    *run
	store  string
	fresh  []*fsmpb.NewRange // chunks the run does not hold, by index
	tenant string            // the tenant a new run gets
}

// submitRangesCommand: SubmitRangesCmd creates a range run or adds chunks.
func submitRangesCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_SubmitRanges)(nil), label: "submit_ranges",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applySubmitRanges(c.GetSubmitRanges()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			return runBefore(l, c.GetSubmitRanges().GetRun(), b)
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, _ Result) {
			run := c.GetSubmitRanges().GetRun()
			if !b.existed {
				l.record(EventRunCreated, run, "", "", l.runDetail(run), 0)
			}
			l.recordFinished(run, b)
		},
		kinds:    []EventKind{EventRunResumed, EventRunCreated, EventRunFinished},
		snapshot: partHeader | partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

// applySubmitRanges creates a range run or adds chunks to one. A chunk the
// run holds already (a record of chunk base index at its first index, the
// same object) is counted in the result, never created again; retry_dead
// re-pends its Dead indexes. A chunk that overlaps indexes of the run held
// by another chunk, or by an item, refuses the whole command.
func (l *Ledger) applySubmitRanges(c *fsmpb.SubmitRangesCmd) Result {
	p, err := l.validateSubmitRanges(c)
	if err != nil {
		return fail(err)
	}
	st := l.st
	r := l.openRun(p.run, c.GetRun(), c.GetSpec(), p.tenant, len(p.fresh))
	r.ranged = true
	l.resume(r, "", "the run was submitted again")
	var res Result
	stale := newStaleOwners(c.GetRependStaleNano(), c.GetStaleByLeader(), c.GetStaleWorkers())
	for _, nr := range c.GetRanges() {
		ex := r.recordAt(nr.GetIndex())
		if ex == nil {
			continue
		}
		var chunk []*item
		r.byIndex.from(ex.index, func(it *item) bool {
			if it.base != nr.GetIndex() || it.index >= nr.GetIndex()+nr.GetCount() {
				return false
			}
			chunk = append(chunk, it)
			return true
		})
		for _, it := range chunk {
			n := it.width()
			switch it.state {
			case StatePending:
				res.Submit.AlreadyPending += n
			case StateRunning:
				// A Running range whose owner has been silent for longer
				// than the stale window goes back to Pending, attempt
				// unchanged: the owner's later report misses (CAS).
				if stale.owns(st, it.owner) {
					st.release(it)
					st.enqueue(it)
					l.addedPending = true
					res.Submit.RependedStale += n
					continue
				}
				res.Submit.AlreadyRunning += n
			case StateDone:
				res.Submit.AlreadyDone += n
			case StateCancelled:
			case StateDead:
				if !c.GetRetryDead() {
					res.Submit.Dead += n
					continue
				}
				it.failures = 0
				it.setReason("")
				st.enqueue(it)
				l.addedPending = true
				res.Submit.Retried += n
			}
		}
	}
	for _, nr := range p.fresh {
		it := r.newRecord(nr.GetIndex(), nr.GetCount(), nr.GetIndex(), r.refIn(nr.GetPayloadRef()), st.now)
		if len(nr.GetPayloadRef().GetBlake3()) > 0 {
			it.ext().psum = nr.GetPayloadRef().GetBlake3()
		}
		st.link(it)
		r.total += it.n
		st.enqueue(it)
		l.addedPending = true
		res.Submit.Created += it.n
	}
	r.updateFinished(st.now)
	return res
}

// validateSubmitRanges checks a SubmitRanges command against the ledger; it
// only reads.
func (l *Ledger) validateSubmitRanges(c *fsmpb.SubmitRangesCmd) (rangeSubmitPlan, error) {
	name := c.GetRun()
	if err := checkName("submit_ranges run", name, limits.MaxRunNameBytes); err != nil {
		return rangeSubmitPlan{}, err
	}
	if err := l.checkSpec(c.GetSpec()); err != nil {
		return rangeSubmitPlan{}, err
	}
	if c.GetRependStaleNano() < 0 {
		return rangeSubmitPlan{}, invalidErr("submit_ranges repend_stale_nano is %d, must be >= 0", c.GetRependStaleNano())
	}
	if err := checkStaleWorkers("submit_ranges", c.GetStaleWorkers()); err != nil {
		return rangeSubmitPlan{}, err
	}
	r := l.st.runs[name]
	if r == nil && l.st.handles[name] != nil {
		return rangeSubmitPlan{}, l.st.handledErr("submit_ranges", name)
	}
	store := c.GetSpec().GetStore()
	if r != nil {
		switch {
		case r.cancelled:
			return rangeSubmitPlan{}, fmt.Errorf("%w: run %q was cancelled; it takes no new items (delete it to reuse the name)", ErrRunCancelled, name)
		case !r.ranged && r.byIndex.len() > 0:
			return rangeSubmitPlan{}, invalidErr("submit_ranges names run %q, whose items have ids (a run is ranges or items, not both)", name)
		case c.GetSpec() != nil && store != r.spec.GetStore():
			return rangeSubmitPlan{}, invalidErr("submit_ranges names store %q for run %q, whose store is %q", store, name, r.spec.GetStore())
		}
		store = r.spec.GetStore()
	}
	if err := l.checkDataPrefix("submit_ranges", name, c.GetSpec(), r); err != nil {
		return rangeSubmitPlan{}, err
	}
	if store == "" {
		return rangeSubmitPlan{}, invalidErr("submit_ranges run %q has no store: a range's lines are read from its chunk object", name)
	}
	ranges := c.GetRanges()
	if len(ranges) == 0 {
		return rangeSubmitPlan{}, invalidErr("submit_ranges names no ranges")
	}
	byIdx := make([]*fsmpb.NewRange, 0, len(ranges))
	for i, nr := range ranges {
		switch {
		case nr == nil:
			return rangeSubmitPlan{}, invalidErr("submit_ranges ranges[%d] is nil", i)
		case nr.GetCount() == 0 || nr.GetCount() > MaxRangeCount:
			return rangeSubmitPlan{}, invalidErr("submit_ranges ranges[%d] count is %d, must be 1 to %d", i, nr.GetCount(), uint64(MaxRangeCount))
		case nr.GetIndex() > limits.MaxRangeIndex:
			return rangeSubmitPlan{}, invalidErr("submit_ranges ranges[%d] index %d is over %d", i, nr.GetIndex(), uint64(limits.MaxRangeIndex))
		case nr.GetPayloadRef() == nil:
			return rangeSubmitPlan{}, invalidErr("submit_ranges ranges[%d] has no payload_ref", i)
		}
		if err := checkRef(fmt.Sprintf("submit_ranges ranges[%d].payload_ref", i), nr.GetPayloadRef(), false); err != nil {
			return rangeSubmitPlan{}, err
		}
		byIdx = append(byIdx, nr)
	}
	slices.SortStableFunc(byIdx, func(a, b *fsmpb.NewRange) int { return cmpU64(a.GetIndex(), b.GetIndex()) })
	for k := 1; k < len(byIdx); k++ {
		if prev := byIdx[k-1]; byIdx[k].GetIndex() < prev.GetIndex()+prev.GetCount() {
			return rangeSubmitPlan{}, invalidErr("submit_ranges chunk at index %d (count %d) overlaps the chunk at index %d", byIdx[k].GetIndex(), byIdx[k].GetCount(), prev.GetIndex())
		}
	}
	var fresh []*fsmpb.NewRange
	for _, nr := range byIdx {
		lo, hi := nr.GetIndex(), nr.GetIndex()+nr.GetCount()
		if r == nil {
			fresh = append(fresh, nr)
			continue
		}
		if ex := r.recordAt(lo); ex != nil {
			if err := sameChunk(r, ex, nr); err != nil {
				return rangeSubmitPlan{}, err
			}
			continue
		}
		if next := r.byIndex.firstFrom(lo); next != nil && next.index < hi {
			return rangeSubmitPlan{}, invalidErr("submit_ranges chunk [%d, %d) of run %q overlaps indexes the run holds from %d", lo, hi, name, next.index)
		}
		fresh = append(fresh, nr)
	}
	adds := uint64(0)
	for _, nr := range fresh {
		adds += nr.GetCount()
	}
	ten, err := l.submitTenant("submit_ranges", name, r, c.GetSpec(), c.GetTenant(), adds)
	if err != nil {
		return rangeSubmitPlan{}, err
	}
	return rangeSubmitPlan{run: r, store: store, fresh: fresh, tenant: ten}, nil
}

// sameChunk checks that the run's record ex, which holds nr's first index,
// belongs to the very chunk nr names again.
func sameChunk(r *run, ex *item, nr *fsmpb.NewRange) error {
	if !ex.isRange() || ex.base != nr.GetIndex() || ex.pref.obj == 0 || r.object(ex.pref.obj) != nr.GetPayloadRef().GetObject() {
		return invalidErr("submit_ranges chunk at index %d of object %q: run %q holds that index for another chunk", nr.GetIndex(), nr.GetPayloadRef().GetObject(), r.name)
	}
	// The chunk's last index must be its chunk's too (its count).
	if last := r.recordAt(nr.GetIndex() + nr.GetCount() - 1); last == nil || last.base != ex.base {
		return invalidErr("submit_ranges chunk at index %d: count %d differs from the chunk run %q holds", nr.GetIndex(), nr.GetCount(), r.name)
	}
	if next := r.recordAt(nr.GetIndex() + nr.GetCount()); next != nil && next.base == ex.base {
		return invalidErr("submit_ranges chunk at index %d: count %d differs from the chunk run %q holds", nr.GetIndex(), nr.GetCount(), r.name)
	}
	return nil
}

// carve cuts the Pending range it (in the claim queue) after its first k
// indexes (0 < k < width): a new record takes the head [index, index+k),
// in no list and in no state, and it keeps the rest in its queue place.
func (st *state) carve(it *item, k uint64) *item {
	r := it.run
	head := r.newRecord(it.index, k, it.base, it.pref, st.now)
	head.x = it.x // shared: an itemExt is copy on write
	r.count(StatePending, -int64(k))
	it.index += k
	it.n -= k
	st.link(head)
	return head
}

// rangeCAS explains a report's CAS miss.
func rangeCAS(it *item, c *fsmpb.ReportRangeCmd, why string) error {
	return fmt.Errorf("%w: report_range of %s/%x [%d, %d) by (%q, %d): %s; the record is %s(%q, %d) over [%d, %d)",
		ErrCASMiss, it.run.name, it.id, c.GetLo(), c.GetDoneTo(), c.GetWorker(), c.GetAttempt(), why, it.state, it.owner, it.attempt, it.index, it.end())
}

// reportRangeCommand: ReportRangeCmd, a range's progress.
func reportRangeCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_ReportRange)(nil), label: "report_range",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyReportRange(c.GetReportRange()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			return runBefore(l, c.GetReportRange().GetRun(), b)
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, _ Result) {
			// Dead indexes are recorded by progress as they die.
			l.recordFinished(c.GetReportRange().GetRun(), b)
		},
		kinds:    []EventKind{EventRunResumed, EventItemDead, EventRunFinished},
		snapshot: partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

// applyReportRange applies a range's progress report; see the package
// comment of ranges.go for the rules.
func (l *Ledger) applyReportRange(c *fsmpb.ReportRangeCmd) Result {
	if err := checkName("report_range run", c.GetRun(), limits.MaxRunNameBytes); err != nil {
		return fail(err)
	}
	if err := checkID("report_range id", c.GetId()); err != nil {
		return fail(err)
	}
	if err := checkName("report_range worker", c.GetWorker(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	lo, to := c.GetLo(), c.GetDoneTo()
	if to < lo {
		return invalid("report_range done_to %d is below lo %d", to, lo)
	}
	rf := c.GetReleaseFrom()
	switch {
	case rf > 0 && c.GetNackRest():
		return invalid("report_range sets both release_from %d and nack_rest", rf)
	case rf > 0 && rf < to:
		return invalid("report_range release_from %d is below done_to %d", rf, to)
	case rf > 0 && rf == lo:
		return invalid("report_range release_from %d equals lo: give the whole range back with nack_rest", rf)
	case to == lo && !c.GetNackRest() && rf == 0:
		return invalid("report_range reports nothing: done_to equals lo %d and neither nack_rest nor release_from is set", lo)
	}
	failed := c.GetFailed()
	if len(failed) > MaxReportFailures {
		return invalid("report_range names %d failed indexes, limit %d", len(failed), MaxReportFailures)
	}
	for i, f := range failed {
		if f.GetIndex() < lo || f.GetIndex() >= to || (i > 0 && f.GetIndex() <= failed[i-1].GetIndex()) {
			return invalid("report_range failed[%d] index %d is not in [%d, %d) or not above the one before", i, f.GetIndex(), lo, to)
		}
		if err := checkText(fmt.Sprintf("report_range failed[%d] reason", i), f.GetReason(), limits.MaxReasonBytes); err != nil {
			return fail(err)
		}
	}
	done := to - lo - uint64(len(failed))
	rr := c.GetResultRef()
	switch {
	case done > 0 && rr == nil:
		return invalid("report_range reports %d done indexes without a result_ref", done)
	case rr != nil:
		if err := checkRef("report_range result_ref", rr, true); err != nil {
			return fail(err)
		}
	}
	st := l.st
	r := st.runs[c.GetRun()]
	if r == nil {
		return fail(fmt.Errorf("%w: report_range names run %q", ErrRunNotFound, c.GetRun()))
	}
	it := r.items[string(c.GetId())]
	if it == nil {
		// The range may be gone because this report was applied already
		// (its last indexes done): the segment at lo says.
		if dup, err := l.reportRetry(r, c); dup || err != nil {
			return Result{Duplicate: dup, Err: err}
		}
		// A range's record goes when its last indexes are reported (or
		// its run's chunk is re-cut): for its late owner that is a CAS
		// miss, as for any range no longer its.
		return fail(fmt.Errorf("%w: report_range names record %x of run %q, which holds no such range now (finished, or never one)", ErrCASMiss, c.GetId(), c.GetRun()))
	}
	if !it.isRange() {
		return invalid("report_range names %s/%x, an item: report it with Complete, Fail or Nack", r.name, it.id)
	}
	if !it.isRunning(c.GetWorker(), c.GetAttempt()) {
		if dup, err := l.reportRetry(r, c); dup || err != nil {
			return Result{Duplicate: dup, Err: err}
		}
		return fail(rangeCAS(it, c, "not its owner or attempt"))
	}
	if lo != it.index {
		if dup, err := l.reportRetry(r, c); dup || err != nil {
			return Result{Duplicate: dup, Err: err}
		}
		return fail(rangeCAS(it, c, fmt.Sprintf("lo is not the range's first index %d", it.index)))
	}
	if to > it.end() {
		return fail(rangeCAS(it, c, fmt.Sprintf("indexes from %d are not its: the range ends there (a steal, a cancel or a release cut it, or its claim never went further)", it.end())))
	}
	return l.progress(it, c)
}

// reportRetry reports whether c repeats a report that was applied: the
// record at c's lo is a Done segment by the same owner and attempt, with the
// same result hash, that ends where c's first done segment ends (its first
// failed index, else done_to). A Done segment there with another hash by
// the same owner and attempt is a conflict. A report that only starts like
// an applied one (a longer done_to, other failures) is no retry: it
// returns false, and the caller's CAS check refuses it. (A build without
// the CAS, tag rollout_bug_nocas, takes any owner and attempt: the same
// bytes from a worker that lost the range are accepted as a second
// result.)
func (l *Ledger) reportRetry(r *run, c *fsmpb.ReportRangeCmd) (bool, error) {
	seg := r.recordAt(c.GetLo())
	if seg == nil || seg.state != StateDone || !seg.isRange() || seg.index != c.GetLo() || c.GetResultRef() == nil {
		return false, nil
	}
	if casEnforced && (seg.owner != c.GetWorker() || seg.attempt != c.GetAttempt()) {
		return false, nil
	}
	end := c.GetDoneTo()
	if f := c.GetFailed(); len(f) > 0 {
		end = min(end, f[0].GetIndex())
	}
	if seg.end() != end {
		return false, nil
	}
	if !bytes.Equal(seg.rsum[:], c.GetResultRef().GetBlake3()) {
		return false, fmt.Errorf("%w: %s [%d, %d) was reported done by %q at attempt %d with another result; the first result stands",
			ErrConflict, r.name, seg.index, seg.end(), seg.owner, seg.attempt)
	}
	return true, nil
}

// progress applies a checked report c to the Running range it.
func (l *Ledger) progress(it *item, c *fsmpb.ReportRangeCmd) Result {
	st := l.st
	r := it.run
	lo, to := c.GetLo(), c.GetDoneTo()
	failed := c.GetFailed()
	var res Result
	w := st.workers[it.owner]
	if w != nil {
		w.lastHeartbeat = st.now
	}
	// A report means the worker read the range's input: a stalled run's
	// probe succeeded (stall.go).
	l.probeReported(it, c.GetWorker())
	// A one-index range that failed fails in place, keeping its count.
	if it.width() == 1 && len(failed) == 1 {
		st.release(it)
		it.failures++
		r.failures++
		if it.failures >= r.spec.GetMaxFailures() || failed[0].GetPermanent() {
			it.setReason(failed[0].GetReason())
			st.setState(it, StateDead)
			l.recordItemsDead(r.name, c.GetWorker(), failed[0].GetReason(), 1)
			return res
		}
		st.enqueue(it)
		l.addedPending = true
		res.Repended = 1
		return res
	}
	// Take [lo, to) off the range's front.
	r.count(StateRunning, -int64(to-lo))
	rest := it.end() - to
	if rest == 0 {
		st.release(it)
		st.unlink(it)
	} else {
		it.index = to
		it.n = rest
		it.updated = st.now
		it.started = max(it.started, to)
	}
	var result ref
	var sum [hashBytes]byte
	if rr := c.GetResultRef(); rr != nil {
		result = r.refIn(rr)
		copy(sum[:], rr.GetBlake3())
	}
	segment := func(a, b uint64) {
		if a >= b {
			return
		}
		seg := r.newRecord(a, b-a, it.base, it.pref, st.now)
		seg.x = it.x
		seg.owner, seg.attempt, seg.claimed = c.GetWorker(), c.GetAttempt(), it.claimed
		seg.rref, seg.rsum = result, sum
		st.link(seg)
		seg.state = StateDone
		r.count(StateDone, int64(b-a))
		if w != nil {
			w.completed += b - a
		}
	}
	next := lo
	for _, f := range failed {
		segment(next, f.GetIndex())
		one := r.newRecord(f.GetIndex(), 1, it.base, it.pref, st.now)
		one.x = it.x
		one.owner, one.attempt = c.GetWorker(), c.GetAttempt()
		one.failures = 1
		r.failures++
		st.link(one)
		if one.failures >= r.spec.GetMaxFailures() || f.GetPermanent() {
			one.setReason(f.GetReason())
			st.setState(one, StateDead)
			l.recordItemsDead(r.name, c.GetWorker(), f.GetReason(), 1)
		} else {
			one.setReason(f.GetReason())
			st.enqueue(one)
			l.addedPending = true
			res.Repended++
		}
		next = f.GetIndex() + 1
	}
	segment(next, to)
	switch rf := c.GetReleaseFrom(); {
	case rest > 0 && c.GetNackRest(), rest > 0 && rf > 0 && rf <= it.index:
		st.release(it)
		st.enqueue(it)
		l.addedPending = true
		res.Repended += int(rest)
	case rest > 0 && rf > 0 && rf < it.end():
		// The tail [rf, end) goes back to Pending as a record of its own;
		// the owner keeps [index, rf) at its attempt.
		k := it.end() - rf
		st.enqueue(st.cutTail(it, k))
		l.addedPending = true
		res.Repended += int(k)
	}
	r.updateFinished(st.now)
	return res
}

// unstarted counts the indexes of a Running range past its high-water
// mark.
func (it *item) unstarted() uint64 {
	from := max(it.index, it.started)
	if from >= it.end() {
		return 0
	}
	return it.end() - from
}

// cancelTail cuts the unstarted indexes off the Running range it (past its
// high-water mark) as a Cancelled record, and returns how many.
func (st *state) cancelTail(it *item) uint64 {
	k := it.unstarted()
	if k == 0 {
		return 0
	}
	if k == it.width() {
		// Nothing reported started: the whole range is cancelled; its
		// owner's late report misses.
		st.release(it)
		st.setState(it, StateCancelled)
		return k
	}
	st.setState(st.cutTail(it, k), StateCancelled)
	return k
}

// splitTail gives thief the last k indexes of victim's Running range it
// (k < unstarted): a new record Running(thief, attempt+1) over [end-k,
// end); it keeps the head. It returns the new record.
func (st *state) splitTail(it *item, k uint64, thief *worker) *item {
	tail := st.cutTail(it, k)
	st.assign(tail, thief)
	return tail
}

// cutTail takes the last k indexes (0 < k < width) off the Running range
// it as a new record at it's attempt, linked but in no list and no state:
// the caller gives it one (a thief's, Pending, Cancelled). it keeps the
// head, its high-water mark capped at its new end.
func (st *state) cutTail(it *item, k uint64) *item {
	r := it.run
	tail := r.newRecord(it.end()-k, k, it.base, it.pref, st.now)
	tail.x = it.x
	tail.attempt = it.attempt
	r.count(StateRunning, -int64(k))
	it.n -= k
	it.updated = st.now
	it.started = min(it.started, it.end())
	st.link(tail)
	return tail
}
