package worker

// Ranges: the records of a range run (SubmitRanges) stand for the indexes
// [index, index+count) of one input chunk. The worker runs each index of a
// range as a sub-item on the Backend (the chunk's line as its payload, its
// sample id recomputed from the line), and reports the finished prefix of
// the range with ReportRange: one result object per report
// (store.EncodeRangeResults), the failed indexes with their reasons.
//
//   - A range waits in the queue while it has unstarted indexes; an
//     executor takes its next index (the concurrency limit is per index).
//   - A range's chunk is read whole and checked once (two ranged reads
//     and one blake3), by the first executor that needs it or ahead of
//     time (the next queued ranges' chunks are read while a range
//     executes), and its lines are served from the checked bytes
//     (chunkcheck.go).
//   - The finished prefix [lo, c) is reported about every
//     RangeReportInterval, every RangeReportIndexes finished indexes, and
//     when the range is finished; later finished indexes wait.
//   - Heartbeats name the first unstarted index (ItemKey.started) of an
//     executing range; their bounds cut a range's hi (a steal): the
//     indexes past hi are not started, and those running are cancelled and
//     their results discarded.
//   - A CAS miss asks for the bounds at once (a heartbeat): a range cut
//     by a steal reports its shorter prefix (a new object), one that is no
//     longer the worker's (its bounds did not change) is dropped.
//   - A chunk that is missing, shorter or not the one recorded reports
//     the finished prefix, then the rest of the range held (OUTCOME_HELD:
//     the run stalls on the chunk; holdRanges), with a log line naming it.
//     A store that cannot be reached (a fault that may go away) reports
//     the rest held with store_unavailable at once (the ledger isolates
//     the run once two workers say so); a refusal retrying cannot change
//     (store.ErrRefused: access denied) fails the index at once; another
//     fault reading the chunk gives the range back (nack_rest) after the
//     chunk's backoff. A drain
//     reports the finished prefix and gives back the rest.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// rangeState is a held range's progress. All fields are guarded by
// Worker.mu, except those of a lineWindow once its done is closed.
type rangeState struct {
	base    uint64             // the chunk's first index
	ref     *rolloutv1.DataRef // the whole chunk
	store   string             // the run's store URL
	results string             // where its result objects go (resultPrefix)
	// lo and hi are the range's bounds as the worker knows them; next is
	// the first index not started.
	lo, hi, next uint64
	res          map[uint64]*indexResult
	// resBytes counts the result bytes in res (unreportedLocked).
	resBytes int
	running  map[uint64]*subExec
	// chunk is the load of the range's chunk once an executor or the
	// read-ahead asked for it (nil after a failed load: read again).
	chunk *chunkLoad
	sp    batch.SamplingParams
	spErr error
	// lastReport is when the prefix was last reported (or the range
	// received); unreported counts indexes finished since.
	lastReport time.Time
	unreported int
	// nack: start nothing more; give the rest back once nothing runs.
	nack bool
	// held, when set with nack, says why the range's input chunk cannot
	// be used (missing or changed, or the store unreachable: heldStore):
	// the rest is reported held, not nacked.
	held      string
	heldStore bool
	// gen counts bound changes (a CAS miss checks whether they moved).
	gen uint64
}

// indexResult is a finished index of a range.
type indexResult struct {
	failed    bool
	permanent bool
	reason    string
	result    []byte
	sid       [32]byte
}

// subExec is an executing index of a range.
type subExec struct {
	started time.Time
	cancel  context.CancelFunc
	drained bool
}

// Defaults of the range settings.
const (
	DefaultMaxRangeIndexes     = 4096
	DefaultRangeReportInterval = time.Second
	DefaultRangeReportIndexes  = 1024
)

func (r *rangeState) queued() uint64 {
	if r.nack || r.next >= r.hi {
		return 0
	}
	return r.hi - r.next
}

// prefixLocked is the end of the finished prefix: the first index of
// [lo, hi) without a result.
func (r *rangeState) prefix() uint64 {
	c := r.lo
	for c < r.hi {
		if _, ok := r.res[c]; !ok {
			break
		}
		c++
	}
	return c
}

// newRange makes the state of a range received as it.
func newRange(it *rolloutv1.Item, now time.Time) *rangeState {
	r := &rangeState{
		base: it.GetBase(), ref: it.GetPayloadRef(), store: it.GetStore(), results: resultPrefix(it),
		lo: it.GetIndex(), hi: it.GetIndex() + it.GetCount(), next: it.GetIndex(),
		res: map[uint64]*indexResult{}, running: map[uint64]*subExec{},
		lastReport: now,
	}
	r.sp, r.spErr = batch.ParseSamplingJSON(it.GetSampling())
	return r
}

// queuedLocked counts the indexes waiting for an executor.
func (w *Worker) queuedLocked() int {
	n := 0
	for _, e := range w.queue {
		if e.rng != nil {
			n += int(min(e.rng.queued(), math.MaxInt32))
		} else {
			n++
		}
	}
	return n
}

// heldIndexesLocked counts the indexes held (a plain item counts one).
func (w *Worker) heldIndexesLocked() int {
	n := 0
	for _, e := range w.held {
		if e.rng != nil {
			if e.rng.hi > e.rng.lo {
				n += int(min(e.rng.hi-e.rng.lo, math.MaxInt32))
			}
		} else {
			n++
		}
	}
	return n
}

// rangeTargetLocked is how many indexes the worker aims to hold when it
// claims ranges: before anything completed, Backlog; after, enough for
// ClaimHorizon at the measured rate, at least Concurrency and at most
// MaxRangeIndexes. A range then takes seconds, never hours.
func (w *Worker) rangeTargetLocked(now time.Time) int {
	if !w.rate.measured() {
		return w.cfg.Backlog
	}
	want := math.Ceil(w.rate.rate(now) * w.cfg.ClaimHorizon.Seconds())
	if want >= float64(w.cfg.MaxRangeIndexes) {
		return w.cfg.MaxRangeIndexes
	}
	return max(int(want), w.cfg.Concurrency)
}

// holdRangeLocked takes a range the ledger gave this worker (a claim, a
// steal, an adoption). A range held with the same attempt takes the bounds
// (they only shrink); a newer attempt of a held range takes over in place.
// It returns whether a new entry was queued.
func (w *Worker) holdRangeLocked(it *rolloutv1.Item, term uint64) bool {
	k := key{it.GetRun(), string(it.GetId())}
	lo, hi := it.GetIndex(), it.GetIndex()+it.GetCount()
	if e, ok := w.held[k]; ok && e.rng != nil && !e.lost {
		switch {
		case it.GetAttempt() < e.item.Attempt:
			return false
		case it.GetAttempt() > e.item.Attempt:
			e.item.Attempt = it.GetAttempt()
			e.item.Term = max(e.item.Term, term)
		}
		w.applyBoundsLocked(e, lo, hi)
		return false
	}
	if a, ok := w.forgotten[k]; ok && it.GetAttempt() <= a {
		return false
	}
	e := &entry{state: queued, item: Item{
		Run: it.GetRun(), ID: slices.Clone(it.GetId()), Index: lo, Attempt: it.GetAttempt(),
		Model: it.GetModel(), Sampling: slices.Clone(it.GetSampling()), Kind: it.GetKind(), Term: term,
	}, rng: newRange(it, time.Now())}
	w.held[k] = e
	if hi > lo {
		w.queue = append(w.queue, e)
		w.aheadStale = true
	}
	return true
}

// applyBoundsLocked applies the ledger's bounds [lo, hi) of range e: hi
// only shrinks (a steal took the tail: indexes past it are not started,
// running ones are cancelled and their results dropped), lo only grows (a
// report was applied whose answer was lost).
func (w *Worker) applyBoundsLocked(e *entry, lo, hi uint64) {
	r := e.rng
	changed := false
	if hi < r.hi {
		r.hi, changed = hi, true
	}
	if lo > r.lo {
		r.lo, changed = lo, true
	}
	if !changed {
		return
	}
	r.gen++
	for idx, o := range r.res {
		if idx < r.lo || idx >= r.hi {
			r.resBytes -= len(o.result)
			delete(r.res, idx)
		}
	}
	for idx, s := range r.running {
		if idx < r.lo || idx >= r.hi {
			s.cancel()
		}
	}
	r.next = max(r.next, r.lo)
	if r.next >= r.hi {
		w.unqueueLocked(e)
	}
	w.log.Debug("a range's bounds changed", "run", e.item.Run, "range", string(e.item.ID), "lo", r.lo, "hi", r.hi)
	w.settleRangeLocked(e)
}

func (w *Worker) unqueueLocked(e *entry) {
	w.queue = slices.DeleteFunc(w.queue, func(q *entry) bool { return q == e })
}

// settleRangeLocked forgets range e once nothing of it runs and it is
// either lost or empty.
func (w *Worker) settleRangeLocked(e *entry) {
	r := e.rng
	if len(r.running) > 0 || (!e.lost && r.lo < r.hi) {
		return
	}
	w.unqueueLocked(e)
	e.state = finished
	w.forgetLocked(e)
}

// dropRangeLocked gives up range e (the ledger says it is not this
// worker's): nothing more starts, running indexes are cancelled.
func (w *Worker) dropRangeLocked(e *entry) {
	if e.lost {
		return
	}
	e.lost = true
	for _, s := range e.rng.running {
		s.cancel()
	}
	w.unqueueLocked(e)
	w.st.Dropped++
	w.settleRangeLocked(e)
}

// nextIndexLocked takes the next index of range e (the queue's head) for
// an executor.
func (w *Worker) nextIndexLocked(ctx context.Context, e *entry) (uint64, *subExec, context.Context) {
	r := e.rng
	idx := r.next
	r.next++
	if r.next >= r.hi {
		w.unqueueLocked(e)
	}
	ictx, cancel := context.WithCancel(ctx)
	s := &subExec{started: time.Now(), cancel: cancel}
	r.running[idx] = s
	e.state = executing
	w.executing++
	return idx, s, ictx
}

// rangeLine returns the line of index idx of range e from its checked
// chunk, reading the chunk if neither an executor nor the read-ahead did.
func (w *Worker) rangeLine(ctx, ictx context.Context, e *entry, idx uint64) ([]byte, error) {
	w.mu.Lock()
	r := e.rng
	l := r.chunk
	if l == nil {
		l = w.stores.chunk(ctx, r.store, r.ref, w.countReads)
		r.chunk = l
	}
	w.mu.Unlock()
	select {
	case <-l.done:
	case <-ictx.Done():
		return nil, ictx.Err()
	}
	if l.err != nil {
		// The next try reads again.
		w.mu.Lock()
		if r.chunk == l {
			r.chunk = nil
		}
		w.mu.Unlock()
		return nil, l.err
	}
	line, err := l.chunk.Line(idx - r.base)
	if err != nil {
		return nil, chunkError(fmt.Errorf("chunk %s: %w", r.ref.GetObject(), err))
	}
	return line, nil
}

// readAheadLocked starts the loads of the chunks of the first queued
// ranges: those of the ranges executing first, then readAheadChunks more
// distinct chunks, so that an executor moving on to the next range finds
// its lines checked and in memory. ctx bounds the loads (the executors'
// context).
func (w *Worker) readAheadLocked(ctx context.Context) {
	w.aheadStale = false
	seen := 0
	var last *rolloutv1.DataRef
	var lastStore string
	for _, q := range w.queue {
		r := q.rng
		if r == nil || q.lost || r.queued() == 0 {
			continue
		}
		if last == nil || r.store != lastStore || r.ref.GetObject() != last.GetObject() {
			seen++
			last, lastStore = r.ref, r.store
		}
		if seen > 1+readAheadChunks {
			return
		}
		if r.chunk == nil {
			r.chunk = w.stores.chunk(ctx, r.store, r.ref, w.countReads)
		}
	}
}

// countReads counts n ranged reads of a run's store (Stats.StoreReads).
func (w *Worker) countReads(n int) { w.countStore(n, 0) }

// executeIndex runs index idx of range e on the backend as a sub-item and
// records its outcome.
func (w *Worker) executeIndex(ctx, ictx context.Context, e *entry, idx uint64, s *subExec) {
	w.mu.Lock()
	item := e.item
	r := e.rng
	spErr := r.spErr
	w.mu.Unlock()

	faultKey := r.store + "\x00" + r.ref.GetObject()
	line, err := w.rangeLine(ctx, ictx, e, idx)
	dataFault := false
	switch {
	case err == nil:
		w.faults.ok(faultKey)
	case ictx.Err() != nil:
	case errors.Is(err, store.ErrRefused):
		// The store answered with a refusal retrying cannot change (access
		// denied): the index fails at once (waiting would keep an executor
		// from other runs' items); the run is neither stalled nor isolated.
		w.log.Debug("the run's store refused a read; failing the index", "run", item.Run, "index", idx,
			"object", r.ref.GetObject(), "error", err)
	default:
		dataFault = true
		// A chunk that is missing or not the one recorded: the range is
		// reported held at once (its run stalls until the chunk is back);
		// a store that cannot be reached: held at once with
		// store_unavailable (the ledger isolates the run once two workers
		// say so); another fault: given back after the chunk's backoff.
		missing := errors.Is(err, ErrInputMissing)
		w.mu.Lock()
		first := !r.nack
		r.nack = true
		if r.held == "" && (missing || transientStore(err)) {
			r.held, r.heldStore = limits.CleanReason(err.Error()), !missing
		}
		w.unqueueLocked(e)
		w.mu.Unlock()
		switch {
		case first && missing:
			w.log.Warn("a range's input chunk is missing or not the one recorded; reporting the range held (its run stalls until the chunk is back)",
				"run", item.Run, "range", string(item.ID), "index", idx, "object", r.ref.GetObject(),
				"store", storeurl.Redact(r.store), "error", err)
		case first && transientStore(err):
			w.log.Warn("the run's store cannot be reached; reporting the range's unfinished indexes held (the ledger isolates the run once two workers say so, until the store answers a probe)",
				"run", item.Run, "range", string(item.ID), "index", idx, "object", r.ref.GetObject(),
				"store", storeurl.Redact(r.store), "error", err)
		case first:
			w.log.Warn("reading a range's input chunk failed; giving the range's unfinished indexes back to the ledger (nack) after the chunk's backoff",
				"run", item.Run, "range", string(item.ID), "index", idx, "object", r.ref.GetObject(),
				"store", storeurl.Redact(r.store), "error", err)
		}
		if !missing && !transientStore(err) {
			// A store that cannot be reached is held at once (the
			// ledger spaces out the run's probes); waiting would keep
			// an executor from other runs' items.
			w.waitFault(ictx, faultKey, err)
		}
	}
	var res []byte
	var sid [32]byte
	if err == nil && spErr != nil {
		err = fmt.Errorf("%w: the run's sampling parameters: %w", ErrData, spErr)
	}
	if err == nil {
		// line is the chunk's memory, which nothing modifies and which
		// the sub-item holds anyway (its Payload): the parse shares it
		// instead of copying each line.
		in := batch.ParseInputShared(line)
		sid = in.SampleID(item.Model, r.sp, idx)
		sub := item
		sub.ID, sub.Index, sub.Payload, sub.Input = sid[:], idx, line, in
		res, err = w.runBackend(ictx, sub)
	}

	cancelled := ictx.Err() != nil
	w.mu.Lock()
	s.cancel()
	delete(r.running, idx)
	w.executing--
	took := time.Since(s.started)
	var o *indexResult
	stale := false
	switch {
	case e.lost || idx < r.lo || idx >= r.hi:
		// Lost, or cut off by a steal: the result is not ours to report.
	case errors.Is(err, ErrStaleItem):
		stale = true
		w.st.StaleDropped++
		w.dropRangeLocked(e)
		w.st.Dropped-- // counted as stale, not as dropped
	case dataFault:
	case err == nil && w.resultObject(res):
		o = &indexResult{result: res, sid: sid}
	case err == nil:
		o = &indexResult{failed: true, reason: "backend returned a result that is not a JSON object"}
	case ctx.Err() != nil || s.drained || cancelled:
		r.nack = true
		w.unqueueLocked(e)
	default:
		o = &indexResult{failed: true, reason: limits.CleanReason(err.Error()), permanent: errors.Is(err, ErrPermanent)}
	}
	flush := false
	if o != nil || r.nack {
		w.armReporterLocked()
	}
	if o != nil {
		r.res[idx] = o
		r.resBytes += len(o.result)
		r.unreported++
		w.rate.addTimed(time.Now(), took)
		flush = r.unreported >= w.cfg.RangeReportIndexes || (r.next >= r.hi && len(r.running) == 0)
	}
	if r.nack && len(r.running) == 0 {
		flush = true
	}
	w.settleRangeLocked(e)
	w.mu.Unlock()
	if o != nil {
		if obs := w.cfg.Observer; obs != nil {
			kind := rolloutv1.Outcome_OUTCOME_DONE
			if o.failed {
				kind = rolloutv1.Outcome_OUTCOME_FAILED
			}
			obs.ObserveItem(took, kind)
		}
	}
	if stale {
		w.log.Debug("dropped a range from a stale term", "run", item.Run, "range", string(item.ID), "term", item.Term)
		w.requestReconcile()
	}
	notify(w.space)
	if flush {
		notify(w.flush)
	}
}

// rangeReport is one RangeReport being sent, with what it names.
type rangeReport struct {
	e        *entry
	attempt  uint64
	lo, c    uint64
	done     []store.RangeResult
	failed   []*rolloutv1.FailedIndex
	nack     bool
	ref      *rolloutv1.DataRef
	gen      uint64
	reported int // indexes finished in [lo, c)
	// held, with nack: the range's chunk is missing or changed (or its
	// store unreachable: heldStore); the rest is reported held
	// (holdRanges) once [lo, c) is reported, not nacked.
	held      string
	heldStore bool
	// progressed: [lo, c) was reported (applied), or there was nothing to
	// report.
	progressed bool
}

// advanceReported moves r past the prefix [rep.lo, rep.c) the ledger
// applied: its results are dropped, lo (and next, if behind) move to c,
// and the unreported count and the report clock restart from there.
func (r *rangeState) advanceReported(rep *rangeReport) {
	if rep.lo == r.lo && rep.c > r.lo {
		for idx := r.lo; idx < rep.c; idx++ {
			if o := r.res[idx]; o != nil {
				r.resBytes -= len(o.result)
			}
			delete(r.res, idx)
		}
		r.lo = rep.c
		r.next = max(r.next, r.lo)
	}
	r.unreported = max(r.unreported-rep.reported, 0)
	r.lastReport = time.Now()
}

// unreportedLocked is the bytes of finished range results not yet
// reported (Config.MaxUnreportedBytes bounds it).
func (w *Worker) unreportedLocked() int {
	n := 0
	for _, e := range w.held {
		if e.rng != nil && !e.lost {
			n += e.rng.resBytes
		}
	}
	return n
}

// rangesLeft counts the held ranges (not lost).
func (w *Worker) rangesLeft() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rangesHeldLocked()
}

// rangesHeldLocked counts the held ranges (not lost).
func (w *Worker) rangesHeldLocked() int {
	n := 0
	for _, e := range w.held {
		if e.rng != nil && !e.lost && e.rng.lo < e.rng.hi {
			n++
		}
	}
	return n
}

// collectRangeReportsLocked picks the ranges whose report is due at now:
// a finished prefix that reaches hi, is RangeReportIndexes long or waited
// RangeReportInterval; a range to give back once nothing of it runs (or
// every range, when final).
func (w *Worker) collectRangeReportsLocked(now time.Time, final bool) []*rangeReport {
	var out []*rangeReport
	for _, e := range w.held {
		r := e.rng
		if r == nil || e.lost || r.lo >= r.hi {
			continue
		}
		c := r.prefix()
		nack := (r.nack && len(r.running) == 0) || final
		if c == r.hi {
			nack = false
		}
		due := c > r.lo && (c == r.hi || now.Sub(r.lastReport) >= w.cfg.RangeReportInterval || int(c-r.lo) >= w.cfg.RangeReportIndexes)
		if !due && !nack {
			continue
		}
		if c > r.lo && now.Before(w.resultRetry[r.store]) {
			// The store is in its backoff: nothing can be reported done.
			if !final {
				continue
			}
			c = r.lo
		}
		rep := &rangeReport{e: e, attempt: e.item.Attempt, lo: r.lo, c: c, nack: nack, gen: r.gen, reported: int(c - r.lo)}
		if nack {
			rep.held, rep.heldStore = r.held, r.heldStore
		}
		rep.done = make([]store.RangeResult, 0, c-r.lo)
		for idx := r.lo; idx < c; idx++ {
			o := r.res[idx]
			if o.failed {
				rep.failed = append(rep.failed, &rolloutv1.FailedIndex{Index: idx, Reason: o.reason, Permanent: o.permanent})
			} else {
				rep.done = append(rep.done, store.RangeResult{Index: idx, SampleID: o.sid, Result: o.result})
			}
		}
		out = append(out, rep)
		if len(out) >= w.cfg.MaxReportBatch {
			break
		}
	}
	return out
}

// rangeUploads bounds the result objects one flush writes at once.
const rangeUploads = 4

// storeRangeResults writes each report's done results as one object (only
// a durably stored object is named), up to rangeUploads objects at once:
// the writes of one flush overlap each other, and the executors never wait
// on them (they run on the reporter's goroutine and its helpers; the
// memory they hold is the flush's reports, MaxReportBatch at most). A
// store fault that may go away holds the report (its store backs off), or
// at a final flush gives the whole range back; another write error fails
// the done indexes naming it. It returns the reports to send, in order.
func (w *Worker) storeRangeResults(ctx context.Context, reps []*rangeReport, final bool) []*rangeReport {
	keep := make([]bool, len(reps))
	var uploads []int
	for i, rep := range reps {
		if len(rep.done) == 0 {
			keep[i] = true
			continue
		}
		uploads = append(uploads, i)
	}
	if len(uploads) == 1 {
		keep[uploads[0]] = w.storeRangeReport(ctx, reps[uploads[0]], final)
	} else if len(uploads) > 1 {
		var wg sync.WaitGroup
		slots := make(chan struct{}, rangeUploads)
		for _, i := range uploads {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				keep[i] = w.storeRangeReport(ctx, reps[i], final)
			})
		}
		wg.Wait()
	}
	out := reps[:0]
	for i, rep := range reps {
		if keep[i] {
			out = append(out, rep)
		}
	}
	return out
}

// storeRangeReport writes rep's done results as one object (see
// storeRangeResults) and reports whether rep is to be sent.
func (w *Worker) storeRangeReport(ctx context.Context, rep *rangeReport, final bool) bool {
	e := rep.e
	obj, err := store.EncodeRangeResults(rep.done)
	var key string
	var sum store.Sum
	if err == nil {
		key, sum, err = w.putResults(ctx, e.rng.store, e.rng.results, obj)
	}
	switch {
	case err == nil:
		w.countStore(0, 1)
		w.faults.ok(resultFaultKey(e.rng.store))
		if sum == (store.Sum{}) {
			sum = store.Hash(obj) // a store that did not say (the contract is blake3(obj))
		}
		rep.ref = &rolloutv1.DataRef{Object: key, Length: uint64(len(obj)), Blake3: sum[:]}
		return true
	case transientStore(err) && ctx.Err() == nil:
		d := w.faults.fault(resultFaultKey(e.rng.store))
		w.mu.Lock()
		if w.resultRetry == nil {
			w.resultRetry = make(map[string]time.Time)
		}
		w.resultRetry[e.rng.store] = time.Now().Add(d)
		w.st.ResultWritesDeferred += uint64(len(rep.done))
		w.mu.Unlock()
		w.log.Warn("writing a range's results to the run's store failed; holding them and writing again after a backoff (no failure counted)",
			"run", e.item.Run, "range", string(e.item.ID), "store", storeurl.Redact(e.rng.store), "indexes", len(rep.done), "retry_in", d, "error", err)
		if final {
			rep.c, rep.done, rep.failed, rep.nack, rep.reported = rep.lo, nil, nil, true, 0
			return true
		}
		return false
	case ctx.Err() != nil:
		return false
	default:
		reason := limits.CleanReason(fmt.Sprintf("%v: writing the results to the run's store: %v", ErrData, err))
		w.log.Warn("writing a range's results to the run's store failed; failing its done indexes", "run", e.item.Run,
			"range", string(e.item.ID), "store", storeurl.Redact(e.rng.store), "indexes", len(rep.done), "error", err)
		failed := make([]*rolloutv1.FailedIndex, 0, rep.c-rep.lo)
		fi := 0
		for idx := rep.lo; idx < rep.c; idx++ {
			if fi < len(rep.failed) && rep.failed[fi].GetIndex() == idx {
				failed = append(failed, rep.failed[fi])
				fi++
				continue
			}
			failed = append(failed, &rolloutv1.FailedIndex{Index: idx, Reason: reason})
		}
		rep.failed, rep.done = failed, nil
		return true
	}
}

// flushRanges sends the due range reports (see collectRangeReportsLocked)
// and applies the ledger's answers. A CAS miss reads the bounds at once
// (a heartbeat): a range a steal cut reports its shorter prefix at the next
// flush; one whose bounds did not move is not this worker's any more and
// is dropped.
func (w *Worker) flushRanges(ctx context.Context, final bool) error {
	w.mu.Lock()
	reps := w.collectRangeReportsLocked(time.Now(), final)
	w.mu.Unlock()
	if len(reps) == 0 {
		return nil
	}
	reps = w.storeRangeResults(ctx, reps, final)
	if len(reps) == 0 {
		return ctx.Err()
	}
	// A held range reports its finished prefix (if any) here, then the
	// rest held (holdRanges).
	var holds []*rangeReport
	sent := make([]*rangeReport, 0, len(reps))
	for _, rep := range reps {
		if rep.held != "" {
			holds = append(holds, rep)
			if rep.c == rep.lo {
				rep.progressed = true
				continue
			}
		}
		sent = append(sent, rep)
	}
	if err := w.sendRangeReports(ctx, sent); err != nil {
		return err
	}
	return w.holdRanges(ctx, holds)
}

// sendRangeReports sends reps in one ReportRange and applies the answers
// (see flushRanges).
func (w *Worker) sendRangeReports(ctx context.Context, reps []*rangeReport) error {
	if len(reps) == 0 {
		return nil
	}
	req := &rolloutv1.ReportRangeRequest{WorkerId: w.cfg.ID, Reports: make([]*rolloutv1.RangeReport, len(reps))}
	for i, rep := range reps {
		req.Reports[i] = &rolloutv1.RangeReport{Run: rep.e.item.Run, Id: rep.e.item.ID, Attempt: rep.attempt,
			Lo: rep.lo, DoneTo: rep.c, ResultRef: rep.ref, Failed: rep.failed, NackRest: rep.nack && rep.held == ""}
	}
	resp, err := record(ctx, w, "ReportRange", w.client.ReportRange, req)
	if err != nil {
		w.mu.Lock()
		w.st.ReportErrors++
		w.mu.Unlock()
		return err
	}
	results := resp.GetResults()
	var missed []*rangeReport
	w.mu.Lock()
	for i, rep := range reps {
		if i >= len(results) {
			break // no answer: the next flush sends it again
		}
		e, r := rep.e, rep.e.rng
		res := results[i]
		w.log.Debug("range report", "run", e.item.Run, "range", string(e.item.ID), "attempt", rep.attempt, "lo", rep.lo, "done_to", rep.c,
			"failed", len(rep.failed), "nack_rest", rep.nack, "status", res.GetStatus(), "duplicate", res.GetDuplicate(), "message", res.GetMessage())
		switch res.GetStatus() {
		case rolloutv1.ReportStatus_REPORT_STATUS_APPLIED:
			rep.progressed = true
			// A duplicate is this very report applied before, its answer
			// lost (a leader killed, a stale reply refused): it was never
			// counted, and an applied report is not sent again, so count
			// it now, as an item's idempotent retry is (Report).
			w.st.Completed += uint64(len(rep.done))
			w.st.Failed += uint64(len(rep.failed))
			w.st.Nacked += res.GetRepended()
			if rep.held != "" {
				// The rest is reported held next (holdRanges).
				r.advanceReported(rep)
				continue
			}
			if rep.nack && w.stopping {
				w.nacked = append(w.nacked, ItemRef{Run: e.item.Run, ID: e.item.ID, Index: rep.c, Attempt: rep.attempt, Count: r.hi - min(rep.c, r.hi)})
			}
			r.advanceReported(rep)
			if rep.nack {
				// The rest is the ledger's again.
				r.hi = min(r.hi, max(rep.c, r.lo))
				for idx, s := range r.running {
					if idx >= r.hi {
						s.cancel()
					}
				}
				w.unqueueLocked(e)
			}
			w.settleRangeLocked(e)
		case rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS:
			missed = append(missed, rep)
		case rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND:
			w.log.Debug("dropping a range the ledger no longer has", "run", e.item.Run, "range", string(e.item.ID), "message", res.GetMessage())
			w.dropRangeLocked(e)
		case rolloutv1.ReportStatus_REPORT_STATUS_CONFLICT:
			w.st.Conflicts++
			w.log.Warn("a range's results conflict with those recorded; the first stand", "run", e.item.Run, "range", string(e.item.ID),
				"lo", rep.lo, "done_to", rep.c, "message", res.GetMessage())
			w.dropRangeLocked(e)
			w.st.Dropped--
			w.needReconcile = true
		case rolloutv1.ReportStatus_REPORT_STATUS_INVALID:
			w.st.Invalid++
			w.log.Error("coordinator refused a range report as invalid", "run", e.item.Run, "range", string(e.item.ID),
				"lo", rep.lo, "done_to", rep.c, "message", res.GetMessage())
			if len(rep.done) > 0 && rep.lo == r.lo {
				// Fail the done indexes rather than leave them Running forever.
				reason := limits.CleanReason("coordinator refused the result: " + res.GetMessage())
				for _, d := range rep.done {
					if o := r.res[d.Index]; o != nil {
						r.resBytes -= len(o.result)
						*o = indexResult{failed: true, reason: reason}
					}
				}
			} else {
				w.dropRangeLocked(e)
			}
		}
	}
	w.mu.Unlock()
	// Reports that landed free room under MaxUnreportedBytes.
	notify(w.space)
	if len(missed) > 0 {
		w.rangeMisses(ctx, missed)
	}
	return nil
}

// holdRanges reports the held ranges of reps (their input chunk is
// missing or not the one recorded) with OUTCOME_HELD naming the chunk: the
// ledger puts the rest of each back to Pending without a failure and
// stalls its run until the chunk is back (a probe claim reads it again).
// A range whose prefix report was not applied waits for the next flush.
// An applied hold forgets the range; a CAS miss or an unknown range drops
// it; a refusal as invalid clears the hold, so the next flush gives the
// range back (nack_rest) instead.
func (w *Worker) holdRanges(ctx context.Context, reps []*rangeReport) error {
	reps = slices.DeleteFunc(reps, func(rep *rangeReport) bool { return !rep.progressed })
	if len(reps) == 0 {
		return nil
	}
	req := &rolloutv1.ReportRequest{WorkerId: w.cfg.ID, Reports: make([]*rolloutv1.ItemReport, len(reps))}
	for i, rep := range reps {
		req.Reports[i] = &rolloutv1.ItemReport{Run: rep.e.item.Run, Id: rep.e.item.ID, Attempt: rep.attempt,
			Outcome: rolloutv1.Outcome_OUTCOME_HELD, Reason: rep.held, HeldObject: rep.e.rng.ref.GetObject(),
			StoreUnavailable: rep.heldStore}
	}
	resp, err := record(ctx, w, "Report", w.client.Report, req)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.st.ReportErrors++
		return err
	}
	for i, res := range resp.GetResults() {
		if i >= len(reps) {
			break
		}
		e, r := reps[i].e, reps[i].e.rng
		switch res.GetStatus() {
		case rolloutv1.ReportStatus_REPORT_STATUS_APPLIED:
			if reps[i].heldStore {
				w.st.StoreHeld++
			} else {
				w.st.InputsHeld++
			}
			if w.stopping && r.hi > r.lo {
				w.nacked = append(w.nacked, ItemRef{Run: e.item.Run, ID: e.item.ID, Index: r.lo, Attempt: reps[i].attempt, Count: r.hi - r.lo})
			}
			r.hi = min(r.hi, r.lo)
			for _, s := range r.running {
				s.cancel()
			}
			w.unqueueLocked(e)
			w.settleRangeLocked(e)
		case rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND:
			w.log.Debug("dropping a held range the ledger no longer gives us", "run", e.item.Run, "range", string(e.item.ID), "message", res.GetMessage())
			w.dropRangeLocked(e)
			w.needReconcile = true
		case rolloutv1.ReportStatus_REPORT_STATUS_INVALID:
			w.st.Invalid++
			w.log.Error("coordinator refused a range's hold as invalid; giving the range back instead", "run", e.item.Run, "range", string(e.item.ID),
				"message", res.GetMessage())
			r.held, r.heldStore = "", false
		}
	}
	return nil
}

// rangeMisses handles the CAS misses of range reports: it reads the
// bounds (a heartbeat); a range whose bounds moved reports again at the
// next flush, one whose bounds did not move is dropped.
func (w *Worker) rangeMisses(ctx context.Context, missed []*rangeReport) {
	if _, err := w.heartbeat(ctx); err != nil {
		w.log.Debug("reading bounds after a range report's CAS miss failed; reporting again later", "error", err)
		return
	}
	w.mu.Lock()
	dropped := 0
	for _, rep := range missed {
		e := rep.e
		if e.lost || w.held[e.key()] != e || e.rng.gen != rep.gen || e.item.Attempt != rep.attempt {
			continue // lost (handled), or its bounds or attempt moved: report again
		}
		w.log.Debug("dropping a range the ledger no longer gives us (report CAS miss)", "run", e.item.Run, "range", string(e.item.ID), "lo", rep.lo, "done_to", rep.c)
		w.dropRangeLocked(e)
		dropped++
	}
	if dropped > 0 {
		w.needReconcile = true
	}
	w.mu.Unlock()
	if dropped > 0 {
		notify(w.reconcile)
		notify(w.space)
	}
}

// releaseUnstarted is a drain's first step for ranges: each held range
// gives its unstarted indexes back to the ledger at once, as a drain nacks
// unstarted items, so that other workers take them while the started
// indexes still run. A range that started nothing is given back whole
// (nack_rest); one that started some keeps [lo, next) and releases [next,
// hi) (release_from). A refused or failed release changes nothing here: the
// final flush gives back what is left (nack_rest), as before.
func (w *Worker) releaseUnstarted(ctx context.Context) {
	type release struct {
		e                      *entry
		attempt, lo, from, end uint64
		whole                  bool
	}
	w.mu.Lock()
	var rels []release
	for _, e := range w.held {
		r := e.rng
		if r == nil || e.lost || r.next >= r.hi {
			continue
		}
		whole := r.next <= r.lo && len(r.running) == 0 && len(r.res) == 0
		if !whole && r.next <= r.lo {
			continue
		}
		rels = append(rels, release{e: e, attempt: e.item.Attempt, lo: r.lo, from: r.next, end: r.hi, whole: whole})
	}
	w.mu.Unlock()
	if len(rels) == 0 {
		return
	}
	req := &rolloutv1.ReportRangeRequest{WorkerId: w.cfg.ID, Reports: make([]*rolloutv1.RangeReport, len(rels))}
	for i, rl := range rels {
		rep := &rolloutv1.RangeReport{Run: rl.e.item.Run, Id: rl.e.item.ID, Attempt: rl.attempt, Lo: rl.lo, DoneTo: rl.lo}
		if rl.whole {
			rep.NackRest = true
		} else {
			rep.ReleaseFrom = rl.from
		}
		req.Reports[i] = rep
	}
	resp, err := record(ctx, w, "ReportRange", w.client.ReportRange, req)
	if err != nil {
		w.log.Warn("draining: giving back the unstarted indexes of ranges failed; the final flush gives back what is left", "ranges", len(rels), "error", err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, res := range resp.GetResults() {
		if i >= len(rels) || res.GetStatus() != rolloutv1.ReportStatus_REPORT_STATUS_APPLIED {
			continue
		}
		rl := rels[i]
		e, r := rl.e, rl.e.rng
		w.st.Nacked += res.GetRepended()
		w.nacked = append(w.nacked, ItemRef{Run: e.item.Run, ID: e.item.ID, Index: rl.from, Attempt: rl.attempt, Count: rl.end - rl.from})
		r.hi = min(r.hi, rl.from)
		r.next = min(r.next, r.hi)
		for idx, s := range r.running {
			if idx >= r.hi {
				s.cancel()
			}
		}
		if r.hi <= r.lo {
			w.unqueueLocked(e)
		}
		w.settleRangeLocked(e)
	}
}
