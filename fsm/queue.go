package fsm

import (
	"math/bits"
	"slices"

	"github.com/google/btree"
)

// pendingQueues is the claim queue: every claimable Pending record (an item,
// or a range), ordered as tenants.go describes. Its layers:
//
//   - one queue per (run kind, run model) (kinds.go, models.go): a worker
//     skips whole queues it does not take;
//   - in a queue, one level per priority: an ordered index (B-tree) of
//     lanes by their tenant's usage per weight;
//   - a lane is one tenant's runs with queued records of that queue and
//     priority, an ordered index by (served, run seq);
//   - a run holds its queued records in FIFO order (run.queued).
//
// A claim looks at the first lane of the highest non-empty level of each
// queue the worker takes, and its first run: O(queues × priorities +
// log tenants + log runs) per record claimed, however many runs and
// tenants are queued. A tenant at its max_running quota has its lanes out
// of the levels (throttled) until it has room again.
//
// Every record gets a sequence number (item.pseq, > 0 while queued) when it
// is pushed; a snapshot writes the queued records run by run, each run's in
// its queue order, and Restore pushes them back in that order.
type pendingQueues struct {
	byKey map[queueKey]*queue
	keys  []queueKey // the keys of byKey, sorted (deterministic iteration)
	len   int        // every queued record, throttled tenants' included
	seq   uint64
	// active orders the tenants that have queued records by usage per
	// weight (the least is the floor of a tenant that comes back).
	active *btree.BTreeG[*tenant]
	// restoring turns off the floors while Restore rebuilds the queue (the
	// snapshot holds the usage and served counts as they were).
	restoring bool
	// woke is set when a throttled tenant's lanes come back (it has room
	// again): its queued work is claimable, and long-pollers must hear of
	// it as of new work (Ledger.signalLocked).
	woke bool
}

// queue is one (kind, model)'s claimable records.
type queue struct {
	all    *pendingQueues
	key    queueKey
	levels [MaxPriority + 1]*btree.BTreeG[*lane]
	len    int // its records
	ready  int // its records in lanes of tenants not throttled
}

// lane is one tenant's runs with queued records in one queue at one
// priority.
type lane struct {
	t    *tenant
	q    *queue
	prio uint32
	runs *btree.BTreeG[*run]
	n    int // queued records of its runs
}

func lessRun(a, b *run) bool {
	if a.served != b.served {
		return a.served < b.served
	}
	return a.seq < b.seq
}

func lessLane(a, b *lane) bool { return cmpScore(a.t, b.t) < 0 }

// level returns the lane's level, creating it.
func (ln *lane) level() *btree.BTreeG[*lane] {
	lv := ln.q.levels[ln.prio]
	if lv == nil {
		lv = btree.NewG[*lane](8, lessLane)
		ln.q.levels[ln.prio] = lv
	}
	return lv
}

// attach puts the lane into its level; detach takes it out.
func (ln *lane) attach() {
	ln.level().ReplaceOrInsert(ln)
	ln.q.ready += ln.n
}

func (ln *lane) detach() {
	ln.level().Delete(ln)
	ln.q.ready -= ln.n
}

func (q *pendingQueues) init() {
	q.byKey = make(map[queueKey]*queue)
	q.keys = nil
	q.len = 0
	q.seq = 0
	q.active = newActiveTree()
	q.restoring = false
}

func (q *pendingQueues) queue(k queueKey) *queue {
	qu := q.byKey[k]
	if qu == nil {
		qu = &queue{all: q, key: k}
		q.byKey[k] = qu
		i, _ := slices.BinarySearchFunc(q.keys, k, cmpKey)
		q.keys = slices.Insert(q.keys, i, k)
	}
	return qu
}

// queuedList returns r's list of queued records, initialising it.
func (r *run) queuedList() *itemList {
	if r.queued.root.next == nil {
		r.queued.init()
	}
	return &r.queued
}

// pushBack appends it at the back of its run's queue. A run that had no
// queued record joins its tenant's lane (its served count raised to the
// lane's least); a tenant that had none becomes active (its usage raised
// to the least usage per weight of the active tenants).
func (q *pendingQueues) pushBack(it *item) {
	q.seq++
	it.pseq = q.seq
	r := it.run
	l := r.queuedList()
	if l.len == 0 {
		q.join(r)
	}
	l.pushBack(it)
	ln := r.lane
	ln.n++
	ln.q.len++
	if !ln.t.throttled {
		ln.q.ready++
	}
	q.len++
}

// join puts r, which has just queued its first record, into its lane.
func (q *pendingQueues) join(r *run) {
	t := r.ten
	qu := q.queue(keyOf(r))
	prio := priorityOf(r.spec)
	var ln *lane
	for _, x := range t.lanes {
		if x.q == qu && x.prio == prio {
			ln = x
			break
		}
	}
	if ln == nil {
		if !t.active {
			if m, ok := q.active.Min(); ok && !q.restoring {
				// The floor: m's usage per weight, at t's weight.
				hi, lo := bits.Mul64(m.usage, uint64(t.weight))
				if hi < uint64(m.weight) {
					if f, _ := bits.Div64(hi, lo, uint64(m.weight)); f > t.usage {
						t.usage = f
					}
				} else {
					t.usage = ^uint64(0)
				}
			}
			t.active = true
			q.active.ReplaceOrInsert(t)
		}
		ln = &lane{t: t, q: qu, prio: prio, runs: btree.NewG[*run](8, lessRun)}
		t.lanes = append(t.lanes, ln)
		if !t.throttled {
			ln.level().ReplaceOrInsert(ln)
		}
	}
	if m, ok := ln.runs.Min(); ok && !q.restoring && m.served > r.served {
		r.served = m.served
	}
	ln.runs.ReplaceOrInsert(r)
	r.lane = ln
}

// remove takes a queued record out; a run left with none leaves its lane,
// an empty lane its tenant, a tenant with no lane the active tenants, an
// empty queue the claim queue.
func (q *pendingQueues) remove(it *item) {
	r := it.run
	ln := r.lane
	r.queuedList().remove(it)
	it.pseq = 0
	ln.n--
	ln.q.len--
	if !ln.t.throttled {
		ln.q.ready--
	}
	q.len--
	if r.queued.len > 0 {
		return
	}
	ln.runs.Delete(r)
	r.lane = nil
	if ln.runs.Len() > 0 {
		return
	}
	t := ln.t
	if !t.throttled {
		ln.level().Delete(ln)
	}
	i := slices.Index(t.lanes, ln)
	t.lanes = slices.Delete(t.lanes, i, i+1)
	if len(t.lanes) == 0 {
		q.active.Delete(t)
		t.active = false
	}
	if qu := ln.q; qu.len == 0 {
		delete(q.byKey, qu.key)
		if i, found := slices.BinarySearchFunc(q.keys, qu.key, cmpKey); found {
			q.keys = slices.Delete(q.keys, i, i+1)
		}
	}
}

// betterLane reports whether a claim should serve lane a before lane b:
// the higher priority, then the tenant of less usage per weight, then
// (one tenant's lanes of two queues) the run served less, then the older.
func betterLane(a, b *lane) bool {
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	if c := cmpScore(a.t, b.t); c != 0 || a.t != b.t {
		return c < 0
	}
	ra, _ := a.runs.Min()
	rb, _ := b.runs.Min()
	return lessRun(ra, rb)
}

// pick returns the record a claim by w takes next (any worker when w is
// nil), or nil when no queue w takes holds a claimable one.
func (q *pendingQueues) pick(w *worker) *item {
	var best *lane
	for _, k := range q.keys {
		if w != nil && !w.takes(k) {
			continue
		}
		qu := q.byKey[k]
		if qu.ready == 0 {
			continue
		}
		for p := MaxPriority; p >= MinPriority; p-- {
			lv := qu.levels[p]
			if lv == nil || lv.Len() == 0 {
				continue
			}
			ln, _ := lv.Min()
			if best == nil || betterLane(ln, best) {
				best = ln
			}
			break
		}
	}
	if best == nil {
		return nil
	}
	r, _ := best.runs.Min()
	return r.queued.front()
}

// count returns how many queued records w could claim now (every one when
// w is nil): those of tenants not at their max_running quota.
func (q *pendingQueues) count(w *worker) int {
	n := 0
	for _, k := range q.keys {
		if w == nil || w.takes(k) {
			n += q.byKey[k].ready
		}
	}
	return n
}

// each calls fn for every queued record: run by run in the order of runs
// given, each run's in its queue order. fn must not change the queue.
func (q *pendingQueues) each(runs []*run, fn func(*item)) {
	for _, r := range runs {
		if r.lane == nil {
			continue
		}
		for it := r.queued.front(); it != nil; it = r.queued.after(it) {
			fn(it)
		}
	}
}
