package fsm

import (
	"fmt"
	"slices"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// cancelRunCommand: CancelRunCmd cancels a run.
func cancelRunCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_CancelRun)(nil), label: "cancel_run",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyCancelRun(c.GetCancelRun()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			if r := l.st.runs[c.GetCancelRun().GetRun()]; r != nil {
				b.existed, b.finished, b.lost = true, r.finished != 0, r.cancelled
			}
			return b
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, res Result) {
			x := c.GetCancelRun()
			if b.existed && !b.lost {
				l.record(EventRunCancelled, x.GetRun(), "", "", "cancelled by "+orUnknown(x.GetBy()), uint64(res.Repended))
				l.recordFinished(x.GetRun(), b)
			}
		},
		kinds:    []EventKind{EventRunCancelled, EventRunFinished},
		snapshot: partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

// applyCancelRun cancels a run: it takes no new claims and no new items;
// every Pending item (blocked ones too) becomes Cancelled; Running items keep
// their owner and may still complete (their results are kept), but a nack,
// a retried failure, an expiry or a deregistration moves them to Cancelled
// instead of Pending. Cancelling a cancelled run is a no-op that succeeds.
// Result.Repended counts the items this command cancelled.
func (l *Ledger) applyCancelRun(c *fsmpb.CancelRunCmd) Result {
	if err := checkName("cancel_run run", c.GetRun(), limits.MaxRunNameBytes); err != nil {
		return fail(err)
	}
	if err := checkText("cancel_run by", c.GetBy(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	st := l.st
	r := st.runs[c.GetRun()]
	if r == nil {
		return fail(fmt.Errorf("%w: cancel names run %q", ErrRunNotFound, c.GetRun()))
	}
	if r.cancelled {
		return Result{}
	}
	if err := checkKeys("cancel_run started", c.GetStarted()); err != nil {
		return fail(err)
	}
	r.cancelled = true
	for _, k := range c.GetStarted() {
		if it := r.items[string(k.GetId())]; it != nil && k.GetRun() == r.name && it.isRange() && it.state == StateRunning {
			if w := st.workers[it.owner]; w != nil {
				st.markStarted(w, []*fsmpb.ItemKey{k})
			}
		}
	}
	n := 0
	for _, it := range r.byIndex.all() {
		if it.state == StateRunning && it.isRange() {
			// A Running range keeps what its owner has started; the
			// unstarted tail is cancelled (its owner sees the cut in its
			// heartbeat's bounds, and a report past it misses).
			n += int(st.cancelTail(it))
			continue
		}
		if it.state != StatePending {
			continue
		}
		if it.blocked() {
			r.blocked--
		} else {
			st.unqueue(it)
		}
		st.setState(it, StateCancelled)
		n += int(it.width())
	}
	// A cancelled run's stall ends with it (EventRunCancelled says so).
	st.unstall(r)
	r.updateFinished(st.now)
	return Result{Repended: n}
}

// deleteRunCommand: DeleteRunCmd removes a finished run past its retention.
func deleteRunCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_DeleteRun)(nil), label: "delete_run",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyDeleteRun(c.GetDeleteRun()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			_, b.existed = l.st.runs[c.GetDeleteRun().GetRun()]
			return b
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, res Result) {
			x := c.GetDeleteRun()
			if _, still := l.st.runs[x.GetRun()]; b.existed && !still {
				l.record(EventRunDeleted, x.GetRun(), "", "", "deleted by "+orUnknown(x.GetBy()), uint64(res.Repended))
			}
		},
		kinds:    []EventKind{EventRunDeleted},
		snapshot: partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

// applyDeleteRun removes a run and all its items from the ledger. The run
// must be finished or cancelled (ErrRunActive otherwise); a cancelled run's
// Running items are taken from their owners, whose later reports find no
// run. With retention_nano set the command is the leader's retention sweep:
// it applies only to a run that finished at least that long before the
// entry's stamped time and whose spec still asks for that retention, and
// is otherwise a no-op that succeeds (so a sweep raced by a resubmit never
// deletes a live run). Result.Repended counts the items removed.
func (l *Ledger) applyDeleteRun(c *fsmpb.DeleteRunCmd) Result {
	if err := checkName("delete_run run", c.GetRun(), limits.MaxRunNameBytes); err != nil {
		return fail(err)
	}
	if err := checkText("delete_run by", c.GetBy(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	if c.GetRetentionNano() < 0 {
		return invalid("delete_run retention_nano is %d, must be >= 0", c.GetRetentionNano())
	}
	st := l.st
	r := st.runs[c.GetRun()]
	if r == nil {
		if c.GetRetentionNano() > 0 {
			return Result{}
		}
		return fail(fmt.Errorf("%w: delete names run %q", ErrRunNotFound, c.GetRun()))
	}
	if ret := c.GetRetentionNano(); ret > 0 {
		if r.finished == 0 || r.spec.GetRetainNano() != ret || st.now-r.finished < ret {
			return Result{}
		}
	} else if r.finished == 0 && !r.cancelled {
		return fail(fmt.Errorf("%w: run %q has %d pending and %d running items; cancel it first",
			ErrRunActive, r.name, r.pending, r.running))
	}
	records := r.byIndex.all()
	for _, it := range records {
		switch it.state {
		case StateRunning:
			st.release(it)
		case StatePending:
			if !it.blocked() {
				st.unqueue(it)
			}
		}
	}
	st.unstall(r)
	n := int(r.total)
	st.items -= uint64(len(records))
	for _, it := range records {
		st.dataBytes -= it.dataBytes()
	}
	// Its tenant no longer counts its work.
	t := r.ten
	t.add(StatePending, -int64(r.pending))
	t.add(StateRunning, -int64(r.running))
	t.add(StateDone, -int64(r.done))
	t.runs--
	t.updateThrottle()
	st.dropTenant(t)
	delete(st.runs, r.name)
	if i := slices.Index(st.runOrder, r); i >= 0 {
		st.runOrder = slices.Delete(st.runOrder, i, i+1)
	}
	return Result{Repended: n}
}

// ItemBytes is the ledger's estimate of what one item costs it in memory,
// beyond its inline data: the record, its id, its map and index entries.
// Usage counts it per item; the capacity checks compare against Usage.
const ItemBytes = 320

// Usage returns how many items the ledger holds and an estimate of the
// bytes they cost it: ItemBytes per item plus inline payloads and results,
// summaries and the runs' object tables.
func (l *Ledger) Usage() (items, bytes uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	st := l.st
	bytes = st.items*ItemBytes + st.dataBytes
	for _, r := range st.runOrder {
		bytes += r.objBytes
	}
	return st.items, bytes
}

// dataBytes is what it adds to state.dataBytes.
func (it *item) dataBytes() uint64 {
	if it.x == nil {
		return 0
	}
	return uint64(len(it.x.payload) + len(it.x.result) + len(it.x.summary))
}

// RetentionDue returns the runs whose retention has passed at now (their
// spec's retain_nano after they finished), oldest first, at most max: the
// leader proposes a DeleteRun with retention_nano for each.
func (l *Ledger) RetentionDue(now int64, max int) []RetentionSweep {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []RetentionSweep
	for _, r := range l.st.runOrder {
		ret := r.spec.GetRetainNano()
		if ret <= 0 || r.finished == 0 || now-r.finished < ret {
			continue
		}
		out = append(out, RetentionSweep{Run: r.name, RetainNano: ret})
		if len(out) >= max {
			break
		}
	}
	return out
}

// RetentionSweep names a run whose retention has passed.
type RetentionSweep struct {
	Run        string
	RetainNano int64
}
