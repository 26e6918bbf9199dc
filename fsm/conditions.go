package fsm

import "time"

// Conditions counts Running items by how their execution looks to an
// operator.
type Conditions struct {
	// Running items are on schedule: their owner heartbeats and they have
	// not been held longer than the owner's measured throughput predicts.
	Running uint64
	// RunningLong items are held longer than their owner's measured
	// throughput predicts, while the owner still heartbeats. A slow worker
	// is never robbed for this; it is shown so "slow" can be told from
	// "stuck".
	RunningLong uint64
	// OwnerLost items belong to a worker that has not been heard from for
	// longer than silentAfter (the failure scan has not re-pended them yet).
	OwnerLost uint64
}

// MinExpectedHold is the shortest time an item may be held before it counts
// as running long, whatever the worker's throughput.
const MinExpectedHold = time.Second

// ExpectedHold is how long a worker that owns running items and completes
// itemsPerSec of them is expected to hold any one of them: three times the
// time its measured throughput needs to clear what it owns, and at least
// MinExpectedHold. Zero throughput (nothing measured yet) predicts nothing:
// ok is false.
func ExpectedHold(running uint64, itemsPerSec float64) (d time.Duration, ok bool) {
	if itemsPerSec <= 0 || running == 0 {
		return 0, false
	}
	d = time.Duration(3 * float64(running) / itemsPerSec * float64(time.Second))
	return max(d, MinExpectedHold), true
}

// RunningConditions classifies every Running item at time now, by run and by
// worker. It reads no clock: now is the caller's. An item whose owner has been
// silent for longer than silentAfter is OwnerLost; one held longer than
// ExpectedHold of its owner is RunningLong; the rest are Running. seen, when
// set, is the leader's view of when it last heard from each worker and at
// what rate it completes (liveness is leader-local); where it has none, the
// ledger's last command from the worker and last recorded rate stand. It
// costs O(running items).
func (l *Ledger) RunningConditions(now time.Time, silentAfter time.Duration, seen WorkerSeen) (byRun, byWorker map[string]Conditions) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	byRun = make(map[string]Conditions)
	byWorker = make(map[string]Conditions)
	nowNs := now.UnixNano()
	for _, w := range l.st.workers {
		last, rate := w.lastHeartbeat, w.itemsPerSec
		if seen != nil {
			if t, r, ok := seen(w.id); ok {
				last, rate = max(last, t.UnixNano()), r
			}
		}
		silent := w.lost || nowNs-last > silentAfter.Nanoseconds()
		hold, predicted := ExpectedHold(w.runningIndexes(), rate)
		for it := w.owned.front(); it != nil; it = w.owned.after(it) {
			rc, wc := byRun[it.run.name], byWorker[w.id]
			switch {
			case silent:
				rc.OwnerLost += it.width()
				wc.OwnerLost += it.width()
			case predicted && nowNs-it.claimed > hold.Nanoseconds():
				rc.RunningLong += it.width()
				wc.RunningLong += it.width()
			default:
				rc.Running += it.width()
				wc.Running += it.width()
			}
			byRun[it.run.name], byWorker[w.id] = rc, wc
		}
	}
	return byRun, byWorker
}
