package rolloutv1

// Pure readings of a run's counters, shared by the client library and the
// coordinator's dashboard so that both judge a run the same way. Like the
// generated getters, every method is safe on a nil *RunCounters (a nil
// run reads as an empty one).

// Target is the number of items the run is expected to hold: its total, or
// the total its spec announced (expected_total) when that is more.
func (rc *RunCounters) Target() uint64 {
	return max(rc.GetTotal(), rc.GetExpectedTotal())
}

// Finished reports whether every expected item of the run is Done or Dead
// (with a Target above zero and nothing Pending or Running), or the run was
// cancelled and nothing of it is Pending or Running any more.
func (rc *RunCounters) Finished() bool {
	if rc.GetCancelled() {
		// A cancelled run is over once nothing of it runs any more.
		return rc.GetPending() == 0 && rc.GetRunning() == 0
	}
	t := rc.Target()
	return t > 0 && rc.GetPending() == 0 && rc.GetRunning() == 0 && rc.GetDone()+rc.GetDead() >= t
}

// Stuck reports whether the run cannot finish as it stands: every Pending
// item waits on a dependency that is not Done (blocked == pending > 0) and
// nothing is Running, so nothing can complete and unblock them. Counters
// are one consistent read of the ledger, in which an item is unblocked in
// the same step as its last dependency completes, so the condition is
// never transient; only a new submit (retry dead, new items) can change it.
func (rc *RunCounters) Stuck() bool {
	return rc.GetBlocked() > 0 && rc.GetBlocked() == rc.GetPending() && rc.GetRunning() == 0
}
