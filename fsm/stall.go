package fsm

import (
	"fmt"
	"slices"
	"time"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// Stalled runs.
//
// A worker that cannot read an item's input object (it is missing, shorter
// than the reference, or its bytes are not what the ledger recorded) gives
// the item back with a HoldCmd instead of failing it: retrying cannot help
// until someone puts the object back, and counting failures would make the
// items Dead. The hold puts the item back to Pending without a failure and
// stalls its run: the run records the object, the reason and the stamped
// time the stall began, and its Pending items leave the claim queue for the
// run's parked list, so that claims hand out other runs' items and no
// worker is kept busy by an input that is not there.
//
// While a run is stalled, a claim hands out at most one of its parked
// items at a time, the probe, once the stamped time reaches probeAt: an
// item of the stalled object when one is parked, else the oldest. A probe
// that is held again doubles the probe interval (StallProbeMin up to
// StallProbeMax). The stall ends (EventRunResumed) when:
//   - the probe item completes or fails: its worker read its input, so the
//     object is back;
//   - a submit names the run again (a resubmit re-uploads its inputs);
//   - the run is cancelled (its parked items are cancelled with the rest)
//     or deleted.
//
// Everything is stamped time and ordered iteration: replicas agree.
//
// Runs whose store is unreachable.
//
// A worker that cannot reach the run's store at all (the store's retries
// ended in store.ErrUnavailable: connection refused, timeouts, 5xx) holds
// the item with HoldCmd.store_unavailable instead of nacking it. Such a
// hold never counts a failure. While the run is not stalled, the hold puts
// the item back in the claim queue and notes its worker as a suspect; the
// run is stalled - isolated, with the same parked list, probe and backoff
// as a missing input - once StoreIsolationWorkers distinct workers are
// suspects, or every registered worker that takes the run is one (a fleet
// of one isolates on its one report). One worker with a broken path to the
// store therefore cannot isolate a run that others reach. A completed or
// failed item or range of the run (the store answered its worker) clears
// the suspects. The stall's store flag tells the two kinds apart
// (Stall.StoreUnreachable); the last hold sets it.

// The probe interval of a stalled run (stamped time).
const (
	StallProbeMin = time.Second
	StallProbeMax = 30 * time.Second
)

// StoreIsolationWorkers is how many distinct workers must report a run's
// store unreachable before the run is isolated (fewer when fewer registered
// workers take the run, never less than one).
const StoreIsolationWorkers = 2

// runStall is a stalled run's record.
type runStall struct {
	object  string // the input object of the last hold
	reason  string // the last hold's reason
	since   int64  // stamped time the stall began
	probeAt int64  // stamped time from which a probe may be handed out
	backoff int64  // the current probe interval
	probe   string // id of the probe item handed out ("" none)
	holds   uint64 // holds reported since the stall began
	store   bool   // the last hold said the store is unreachable
}

// Stall is a copy of a stalled run's record (RunStatus.Stall).
type Stall struct {
	Object string
	Reason string
	// Since is the stamped time the stall began; NextProbe when the next
	// probe claim may be handed out.
	Since, NextProbe time.Time
	// Holds counts the holds reported since the stall began; Parked the
	// Pending items waiting outside the claim queue.
	Holds, Parked uint64
	// StoreUnreachable: the last hold said the run's store could not be
	// reached (Reason is its error; Object what it was reading). Otherwise
	// the input object is missing or changed.
	StoreUnreachable bool
}

func (r *run) stallOut() *Stall {
	s := r.stall
	if s == nil {
		return nil
	}
	// An item run's parked list counts itself; a range run's records are
	// few, so summing their widths is cheap.
	p := r.parkedList()
	parked := uint64(p.len)
	if r.ranged {
		parked = 0
		for it := p.front(); it != nil; it = p.after(it) {
			parked += it.width()
		}
	}
	return &Stall{Object: s.object, Reason: s.reason, Since: unixTime(s.since), NextProbe: unixTime(s.probeAt),
		Holds: s.holds, Parked: parked, StoreUnreachable: s.store}
}

// parkedList returns r's parked list, initialising it on first use.
func (r *run) parkedList() *itemList {
	if r.parked.root.next == nil {
		r.parked.init()
	}
	return &r.parked
}

// isParked reports whether a Pending item waits in its run's parked list:
// it is neither blocked nor in the claim queue (whose items have pseq > 0).
func (it *item) isParked() bool {
	return it.state == StatePending && it.pseq == 0 && !it.blocked()
}

// unqueue takes a Pending item that is not blocked out of the claim queue
// or its run's parked list.
func (st *state) unqueue(it *item) {
	if it.isParked() {
		it.run.parkedList().remove(it)
		return
	}
	st.pending.remove(it)
}

// queue puts a Pending, unblocked item in no list into the claim queue, or
// into its run's parked list while the run is stalled.
func (st *state) queue(it *item) {
	if it.run.stall != nil {
		it.run.parkedList().pushBack(it)
		return
	}
	st.pending.pushBack(it)
}

// stallRun stalls r (not stalled, not cancelled): its queued items move to
// its parked list in queue order. It returns how many moved.
func (st *state) stallRun(r *run, s *runStall) int {
	r.stall = s
	i, _ := slices.BinarySearchFunc(st.stalled, r, func(a, b *run) int { return cmpU64(a.seq, b.seq) })
	st.stalled = slices.Insert(st.stalled, i, r)
	if r.lane == nil {
		return 0
	}
	var move []*item
	for it := r.queued.front(); it != nil; it = r.queued.after(it) {
		move = append(move, it)
	}
	p := r.parkedList()
	for _, it := range move {
		st.pending.remove(it)
		p.pushBack(it)
	}
	return len(move)
}

// unstall ends r's stall: its parked items go back to the claim queue in
// their order. It reports whether r was stalled.
func (st *state) unstall(r *run) bool {
	if r.stall == nil {
		return false
	}
	r.stall = nil
	r.storeSuspects = nil
	if i := slices.Index(st.stalled, r); i >= 0 {
		st.stalled = slices.Delete(st.stalled, i, i+1)
	}
	p := r.parkedList()
	for it := p.front(); it != nil; it = p.front() {
		p.remove(it)
		st.pending.pushBack(it)
	}
	return true
}

// resume ends r's stall, if any, and records EventRunResumed with why.
func (l *Ledger) resume(r *run, worker, why string) {
	s := r.stall
	if s == nil {
		return
	}
	n := r.parkedList().len
	l.st.unstall(r)
	if n > 0 {
		l.addedPending = true
	}
	what := "input object " + s.object
	if s.store {
		what = "store reachable again, " + what
	}
	l.record(EventRunResumed, r.name, worker, "",
		fmt.Sprintf("%s: %s (stalled since %s)", what, why, unixTime(s.since).Format(time.RFC3339)), uint64(n))
}

// probeDue reports whether a claim by w may take a probe of stalled run r
// now.
func (st *state) probeDue(r *run, w *worker, now int64) bool {
	s := r.stall
	if now < s.probeAt || r.parkedList().len == 0 || !w.takes(keyOf(r)) {
		return false
	}
	if s.probe != "" {
		if it := r.items[s.probe]; it != nil && it.state == StateRunning {
			return false // the probe is still out
		}
	}
	return true
}

// probesDue counts the stalled runs a claim by w stamped at now would take a
// probe of.
func (st *state) probesDue(w *worker, now int64) int {
	n := 0
	for _, r := range st.stalled {
		if st.probeDue(r, w, now) {
			n++
		}
	}
	return n
}

// takeProbe takes r's probe item out of its parked list: the oldest parked
// item of the stalled object, else the oldest parked item. The scan is
// bounded by the parked list and happens at most once a probe interval.
func (st *state) takeProbe(r *run) *item {
	p := r.parkedList()
	pick := p.front()
	if obj, ok := r.objIdx[r.stall.object]; ok {
		for it := pick; it != nil; it = p.after(it) {
			if it.pref.obj == obj {
				pick = it
				break
			}
		}
	}
	p.remove(pick)
	r.stall.probe = pick.id
	r.stall.probeAt = st.now + r.stall.backoff
	return pick
}

// holdCommand: HoldCmd gives an item back and stalls its run.
func holdCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Hold)(nil), label: "hold",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyHold(c.GetHold()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			return runBefore(l, c.GetHold().GetRun(), b)
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, _ Result) {
			l.recordFinished(c.GetHold().GetRun(), b)
		},
		kinds:    []EventKind{EventRunStalled, EventRunFinished},
		snapshot: partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

// applyHold gives a Running item back without a failure and stalls its run
// on the object named (see the comment at the top of this file). It is a
// CAS command: the item must be Running(worker, attempt).
func (l *Ledger) applyHold(c *fsmpb.HoldCmd) Result {
	if err := checkText("hold reason", c.GetReason(), limits.MaxReasonBytes); err != nil {
		return fail(err)
	}
	if err := checkRef("hold object", &fsmpb.DataRef{Object: c.GetObject()}, false); err != nil {
		return fail(err)
	}
	it, err := l.lookup("hold", c.GetRun(), c.GetId(), c.GetWorker())
	if err != nil {
		return fail(err)
	}
	if !hasStore(it.run) {
		return invalid("hold of %s/%x: run %q has no store, so no input object to miss", it.run.name, it.id, it.run.name)
	}
	if !it.isRunning(c.GetWorker(), c.GetAttempt()) {
		return fail(casMiss("hold", it, c.GetWorker(), c.GetAttempt()))
	}
	st := l.st
	r := it.run
	st.heartbeat(it.owner)
	st.release(it)
	if r.cancelled {
		st.enqueue(it) // Cancelled
		return Result{}
	}
	s := r.stall
	unreachable := c.GetStoreUnavailable()
	if s == nil && unreachable {
		// Not isolated yet: the item goes back to the claim queue, and the
		// run is isolated once enough distinct workers said so.
		r.storeSuspects = insertSorted(r.storeSuspects, c.GetWorker())
		if len(r.storeSuspects) < st.storeQuorum(r) {
			st.enqueue(it)
			l.addedPending = true
			return Result{Repended: int(it.width())}
		}
		r.storeSuspects = nil
	}
	switch {
	case s == nil:
		s = &runStall{since: st.now, backoff: int64(StallProbeMin), store: unreachable}
		s.object, s.reason = c.GetObject(), c.GetReason()
		s.probeAt = st.now + s.backoff
		s.holds = 1
		n := st.stallRun(r, s)
		detail := fmt.Sprintf("input object %s: %s", c.GetObject(), c.GetReason())
		if unreachable {
			detail = fmt.Sprintf("store unreachable (isolated), reading input object %s: %s", c.GetObject(), c.GetReason())
		}
		l.record(EventRunStalled, r.name, c.GetWorker(), "", detail, uint64(n+1))
	case it.id == s.probe:
		// The probe found the object still missing (or the store still
		// unreachable): wait longer.
		s.object, s.reason, s.store = c.GetObject(), c.GetReason(), unreachable
		s.backoff = min(2*s.backoff, int64(StallProbeMax))
		s.probe = ""
		s.probeAt = st.now + s.backoff
		s.holds++
	default:
		s.object, s.reason, s.store = c.GetObject(), c.GetReason(), unreachable
		s.holds++
	}
	st.enqueue(it) // parked
	return Result{Repended: 1}
}

// probeReported ends it's run's stall when it is the run's probe: its
// worker read its input, so the object is back. Complete and Fail call it.
//
// It also clears the run's store suspects: the store answered that worker.
func (l *Ledger) probeReported(it *item, worker string) {
	if it.run.storeSuspects != nil {
		it.run.storeSuspects = nil
	}
	if s := it.run.stall; s != nil && s.probe == it.id {
		l.resume(it.run, worker, fmt.Sprintf("probe item %d read its input", it.index))
	}
}

// stallRecord is r's stall as a snapshot records it (nil when none).
func stallRecord(s *runStall) *fsmpb.RunStallRecord {
	if s == nil {
		return nil
	}
	return &fsmpb.RunStallRecord{Object: s.object, Reason: s.reason, SinceUnixNano: s.since,
		ProbeAtUnixNano: s.probeAt, BackoffNano: s.backoff, ProbeId: []byte(s.probe), Holds: s.holds, Store: s.store}
}

// stallFromRecord checks and converts a snapshot's stall record.
func stallFromRecord(run string, rec *fsmpb.RunStallRecord) (*runStall, error) {
	if rec == nil {
		return nil, nil
	}
	if err := checkRef("stall object", &fsmpb.DataRef{Object: rec.Object}, false); err != nil {
		return nil, corrupt("run %q: %v", run, err)
	}
	if err := checkText("stall reason", rec.Reason, limits.MaxReasonBytes); err != nil {
		return nil, corrupt("run %q: %v", run, err)
	}
	if rec.BackoffNano < int64(StallProbeMin) || rec.BackoffNano > int64(StallProbeMax) || len(rec.ProbeId) > limits.MaxIDBytes {
		return nil, corrupt("run %q: stall backoff %d or probe id of %d bytes out of range", run, rec.BackoffNano, len(rec.ProbeId))
	}
	return &runStall{object: rec.Object, reason: rec.Reason, since: rec.SinceUnixNano, probeAt: rec.ProbeAtUnixNano,
		backoff: rec.BackoffNano, probe: string(rec.ProbeId), holds: rec.Holds, store: rec.Store}, nil
}

// storeQuorum is how many distinct workers must report r's store
// unreachable to isolate r: StoreIsolationWorkers, or fewer when fewer
// registered, not Lost workers take r (at least one).
func (st *state) storeQuorum(r *run) int {
	n := 0
	k := keyOf(r)
	for _, w := range st.workers {
		if !w.lost && (w.takesAll() || w.takes(k)) {
			n++
			if n >= StoreIsolationWorkers {
				break
			}
		}
	}
	return max(1, min(n, StoreIsolationWorkers))
}

// insertSorted adds id to the sorted ids unless it is there.
func insertSorted(ids []string, id string) []string {
	i, found := slices.BinarySearch(ids, id)
	if found {
		return ids
	}
	return slices.Insert(ids, i, id)
}

// suspectsFromRecord checks a snapshot's store suspects: sorted, distinct,
// fewer than StoreIsolationWorkers, each a valid worker id.
func suspectsFromRecord(run string, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if len(ids) >= StoreIsolationWorkers {
		return nil, corrupt("run %q: %d store suspects (isolation takes %d)", run, len(ids), StoreIsolationWorkers)
	}
	for i, id := range ids {
		if err := checkName("store suspect", id, limits.MaxWorkerIDBytes); err != nil {
			return nil, corrupt("run %q: %v", run, err)
		}
		if i > 0 && ids[i-1] >= id {
			return nil, corrupt("run %q: store suspects not sorted and distinct", run)
		}
	}
	return slices.Clone(ids), nil
}

// StalledRuns returns how many runs are stalled on a missing or changed
// input object now.
func (l *Ledger) StalledRuns() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.st.stalled)
}
