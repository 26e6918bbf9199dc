package fsm

import (
	"fmt"
	"time"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// item is the ledger's record of one item. An item is linked into exactly one
// list while it is Pending (the global pending queue) or Running (its owner's
// claim-ordered list), and into none when Done or Dead; prev/next serve both.
// Byte slices are never modified in place, only replaced, so snapshots and
// copies may share them.
type item struct {
	run     *run
	id      string
	index   uint64
	owner   string
	attempt uint64
	// pref and rref reference the payload and the result in the run's
	// store (runs with a store); rsum is the result's blake3 when rref is
	// set. x holds the rarely set fields (refs.go).
	pref, rref ref
	rsum       [hashBytes]byte
	x          *itemExt
	// seq is the global claim sequence while Running (orders the owner's
	// list and the snapshot's running records); 0 otherwise.
	seq      uint64
	created  int64
	updated  int64
	claimed  int64
	failures uint32
	state    State
	// pseq is the item's claim-queue sequence while queued (kinds.go); 0
	// otherwise.
	pseq uint64
	// deps is the item's dependency record (deps.go); nil when it has
	// neither dependencies nor dependents.
	deps *itemDeps
	// n is, for a record of a range run, its number of indexes
	// [index, index+n) (ranges.go); 0 for an item. base is the first
	// index of the range's input chunk; started a Running range's
	// reported high-water mark.
	n, base, started uint64

	prev, next *item
}

// itemList is an intrusive doubly-linked list of items with O(1) push and
// removal. The zero value is not usable: call init. A list must not be
// copied after init.
type itemList struct {
	root item
	len  int
}

func (l *itemList) init() {
	l.root.next = &l.root
	l.root.prev = &l.root
	l.len = 0
}

func (l *itemList) pushBack(it *item) {
	last := l.root.prev
	it.prev = last
	it.next = &l.root
	last.next = it
	l.root.prev = it
	l.len++
}

func (l *itemList) remove(it *item) {
	it.prev.next = it.next
	it.next.prev = it.prev
	it.prev, it.next = nil, nil
	l.len--
}

func (l *itemList) front() *item {
	if l.len == 0 {
		return nil
	}
	return l.root.next
}

func (l *itemList) back() *item {
	if l.len == 0 {
		return nil
	}
	return l.root.prev
}

func (l *itemList) after(it *item) *item {
	if it.next == &l.root {
		return nil
	}
	return it.next
}

func (l *itemList) before(it *item) *item {
	if it.prev == &l.root {
		return nil
	}
	return it.prev
}

// run is a run's spec, counters and item indexes.
type run struct {
	name     string
	spec     *fsmpb.RunSpec // owned by the ledger; handed out only as clones
	seq      uint64         // creation order, 1-based
	created  int64
	finished int64
	failures uint64

	items   map[string]*item // id -> item
	byIndex recordIndex      // the records by first index (recindex.go)
	// objects is the run's table of store object keys its items reference
	// (refs.go); objIdx maps a key to its 1-based index.
	objects []string
	objIdx  map[string]uint32
	// objBytes estimates what the object table costs (Usage).
	objBytes uint64
	// cancelled is set by CancelRun: no item of the run is claimed again.
	cancelled bool
	// stall is set while the run is stalled on a missing input object;
	// parked then holds its Pending, unblocked items, which are not in the
	// claim queue (stall.go). parked is initialised on first use.
	stall  *runStall
	parked itemList
	// storeSuspects are the workers, sorted, that reported the run's store
	// unreachable while it was not stalled (stall.go); fewer than
	// StoreIsolationWorkers.
	storeSuspects []string

	pending, running, done, dead, cancelledN uint64
	// total counts the run's indexes (items, and every range's width).
	total uint64
	// ranged is set for a range run (ranges.go): its records are ranges,
	// their ids made by the ledger.
	ranged bool
	// recSeq numbers the run's range records (rangeID).
	recSeq uint64
	// blocked counts the Pending items that wait on a dependency (they are
	// in pending, not in the pending queue).
	blocked uint64
	// ten is the run's tenant (tenants.go); queued its records in the claim
	// queue, in order; lane its place there while it has any (queue.go);
	// served the items claims gave it (its turn among its tenant's runs).
	ten    *tenant
	queued itemList
	lane   *lane
	served uint64
}

// addCount adds d indexes to r's counter of state s and to its tenant's.
func (r *run) addCount(s State, d int64) {
	if c := r.counter(s); c != nil {
		*c = uint64(int64(*c) + d)
	}
	if t := r.ten; t != nil {
		t.add(s, d)
		if s == StateRunning {
			t.updateThrottle()
		}
	}
}

func (r *run) counter(s State) *uint64 {
	switch s {
	case StatePending:
		return &r.pending
	case StateRunning:
		return &r.running
	case StateDone:
		return &r.done
	case StateDead:
		return &r.dead
	case StateCancelled:
		return &r.cancelledN
	}
	return nil
}

// updateFinished sets finished at now when the run has just become finished
// and clears it when it no longer is.
func (r *run) updateFinished(now int64) {
	fin := r.pending+r.running == 0 && (r.cancelled || r.total > 0 && r.total >= r.spec.GetTotal())
	switch {
	case fin && r.finished == 0:
		r.finished = now
		if r.finished == 0 {
			// A finished run always has a non-zero time, even in a ledger
			// whose entries were stamped at the epoch of Unix time.
			r.finished = 1
		}
	case !fin:
		r.finished = 0
	}
}

// execKey identifies an item attempt a worker reported as executing.
type execKey struct {
	run     string
	id      string
	attempt uint64
}

// worker is what the ledger knows about a worker.
type worker struct {
	id            string
	registered    int64
	lastHeartbeat int64
	backlog       uint32
	itemsPerSec   float64
	executing     []execKey // from the last heartbeat, in reported order
	lost          bool
	completed     uint64
	owned         itemList // Running items, in claim order
	// kinds are the run kinds it runs, canonical and sorted; nil: every
	// kind (kinds.go).
	kinds []string
	// models are the run models it serves, sorted; nil: every model
	// (models.go).
	models []string
}

func newWorker(id string, now int64) *worker {
	w := &worker{id: id, registered: now, lastHeartbeat: now}
	w.owned.init()
	return w
}

// state is the whole replicated ledger. Restore builds a fresh state and
// swaps it in.
type state struct {
	epoch    uint64
	now      int64
	leaderID string
	members  map[string]Member
	runs     map[string]*run
	runOrder []*run
	workers  map[string]*worker
	pending  pendingQueues // claimable Pending items, oldest first, by kind and model (kinds.go)
	claimSeq uint64
	items    uint64
	// runSeq numbers runs in creation order (RunRecord.seq); deleted runs
	// keep their numbers used.
	runSeq uint64
	// dataBytes counts the bytes of inline payloads and results and of
	// summaries the ledger holds (see Usage).
	dataBytes uint64
	events    eventLog // the bounded event history (events.go)
	// stalled lists the stalled runs by creation order (stall.go).
	stalled []*run
	// revoked is the revocation list in commit order and admins the known
	// admin certificates, name to serial (revoke.go).
	revoked []Revocation
	admins  map[string]string
	// tenants by name, and the stamped time their usage was last decayed
	// to (tenants.go).
	tenants map[string]*tenant
	usageAt int64
	// clusterID is the cluster's identity, set once (cluster.go).
	clusterID string
	// handles are the runs handed to peer clusters, by run name
	// (handles.go).
	handles map[string]*handle
}

func newState() *state {
	st := &state{
		members: make(map[string]Member),
		runs:    make(map[string]*run),
		workers: make(map[string]*worker),
		admins:  make(map[string]string),
		tenants: make(map[string]*tenant),
		handles: make(map[string]*handle),
	}
	st.pending.init()
	return st
}

// setState moves it to s, keeping its run's counters and finished time.
// It does not touch list membership.
func (st *state) setState(it *item, s State) {
	r := it.run
	n := int64(it.width())
	r.addCount(it.state, -n)
	r.addCount(s, n)
	it.state = s
	it.updated = st.now
	r.updateFinished(st.now)
}

// enqueue makes an item that is in no list Pending: at the back of the
// pending queue, or, when it waits on a dependency, blocked (in no list; see
// deps.go).
func (st *state) enqueue(it *item) {
	it.owner = ""
	it.seq = 0
	if it.run.cancelled {
		// A cancelled run's items never run again.
		st.setState(it, StateCancelled)
		return
	}
	st.setState(it, StatePending)
	if it.blocked() {
		it.run.blocked++
		return
	}
	st.queue(it)
}

// assign makes it Running(w, attempt+1); it must be in no list.
func (st *state) assign(it *item, w *worker) {
	st.claimSeq++
	it.seq = st.claimSeq
	it.owner = w.id
	it.attempt++
	it.claimed = st.now
	it.started = 0
	if it.state != StateRunning {
		st.setState(it, StateRunning)
	} else {
		it.updated = st.now
	}
	w.owned.pushBack(it)
}

// release takes a Running item out of its owner's list.
func (st *state) release(it *item) {
	if w := st.workers[it.owner]; w != nil {
		w.owned.remove(it)
	}
	it.seq = 0
}

// repend moves every item w owns back to the pending queue, in claim order.
func (st *state) repend(w *worker) int {
	n := 0
	for it := w.owned.front(); it != nil; it = w.owned.front() {
		w.owned.remove(it)
		st.enqueue(it)
		n += int(it.width())
	}
	return n
}

// register records the worker if unknown and refreshes it (see refresh).
func (st *state) register(id string) *worker {
	w := st.workers[id]
	if w == nil {
		w = newWorker(id, st.now)
		st.workers[id] = w
	}
	st.refresh(w)
	return w
}

// registered returns the worker a command of op names, or an error wrapping
// ErrWorkerNotRegistered when the ledger does not hold it.
func (st *state) registered(op, id string) (*worker, error) {
	w := st.workers[id]
	if w == nil {
		return nil, fmt.Errorf("%w: %s from %q; the worker must register first", ErrWorkerNotRegistered, op, id)
	}
	return w, nil
}

// refresh sets a registered worker's heartbeat to now and clears Lost.
func (st *state) refresh(w *worker) {
	w.lastHeartbeat = st.now
	w.lost = false
}

// heartbeat refreshes a known worker's last heartbeat.
func (st *state) heartbeat(id string) {
	if w := st.workers[id]; w != nil {
		w.lastHeartbeat = st.now
	}
}

// isRunning reports whether it is Running(owner, attempt).
func (it *item) isRunning(owner string, attempt uint64) bool {
	if !casEnforced {
		return it.state == StateRunning
	}
	return it.state == StateRunning && it.owner == owner && it.attempt == attempt
}

// copyOut returns a caller-owned copy of it, with one allocation for its
// bytes (references and summary aside).
func (it *item) copyOut() Item {
	pl, rs := it.payload(), it.result()
	buf := make([]byte, len(it.id)+len(pl)+len(rs)+it.depBytes())
	n := copy(buf, it.id)
	id := buf[:n:n]
	m := copy(buf[n:], pl)
	var payload, result []byte
	if pl != nil {
		payload = buf[n : n+m : n+m]
	}
	var dependsOn [][]byte
	if rs != nil {
		result = buf[n+m : n+m+len(rs) : n+m+len(rs)]
		copy(result, rs)
	}
	if on := it.dependsOn(); len(on) > 0 {
		rest := buf[n+m+len(rs):]
		dependsOn = make([][]byte, len(on))
		for k, d := range on {
			c := copy(rest, d.id)
			dependsOn[k] = rest[:c:c]
			rest = rest[c:]
		}
	}
	out := Item{
		Run:       it.run.name,
		ID:        id,
		Index:     it.index,
		Payload:   payload,
		State:     it.state,
		Owner:     it.owner,
		Attempt:   it.attempt,
		Failures:  it.failures,
		Result:    result,
		Reason:    it.reason(),
		DependsOn: dependsOn,
		CreatedAt: unixTime(it.created),
		UpdatedAt: unixTime(it.updated),
		ClaimedAt: unixTime(it.claimed),
		Count:     it.n,
		Base:      it.base,
		Started:   it.started,
	}
	if it.x != nil {
		out.PayloadRef = it.run.refOut(it.pref, it.x.psum)
		if it.x.summary != nil {
			out.Summary = append([]byte(nil), it.x.summary...)
		}
	} else {
		out.PayloadRef = it.run.refOut(it.pref, nil)
	}
	if it.rref.obj != 0 {
		out.ResultRef = it.run.refOut(it.rref, it.rsum[:])
	}
	return out
}

// unixTime converts a stamped time; 0 means unset and gives the zero Time.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
