package fsm

import (
	"time"

	"fmt"
	"slices"

	"github.com/rollout/rollout/internal/limits"
)

// Run kinds and the workers that run them.
//
// A run's kind is its RunSpec.kind: "" (batch inference, the default) or a
// name such as "train". A worker registers the kinds it runs; Claim and
// Steal give it items of those kinds only, so that a training worker never
// receives (and fails) a batch item and the reverse. A worker that names no
// kind runs every kind. "batch" is the name of the default kind in a
// worker's set.

// BatchKind names the default run kind ("") in a worker's kinds.
const BatchKind = "batch"

// canonicalKind maps a kind as a worker names it to a run's kind.
func canonicalKind(k string) string {
	if k == BatchKind {
		return ""
	}
	return k
}

// displayKind maps a run's kind to the name a worker uses for it.
func displayKind(k string) string {
	if k == "" {
		return BatchKind
	}
	return k
}

// checkKinds validates a Register command's kinds and returns them
// canonical, sorted and without repeats; nil means every kind.
func checkKinds(kinds []string) ([]string, error) {
	if len(kinds) > limits.MaxWorkerKinds {
		return nil, fmt.Errorf("%w: register names %d kinds, limit %d", ErrInvalidCommand, len(kinds), limits.MaxWorkerKinds)
	}
	if len(kinds) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(kinds))
	for i, k := range kinds {
		if err := checkText(fmt.Sprintf("register kind %d", i), k, limits.MaxKindBytes); err != nil {
			return nil, err
		}
		out = append(out, canonicalKind(k))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// runs reports whether w runs items of kind (a run's kind).
func (w *worker) runs(kind string) bool {
	if w.kinds == nil {
		return true
	}
	_, found := slices.BinarySearch(w.kinds, kind)
	return found
}

// kindNames returns w's kinds as a worker names them (nil: every kind).
func (w *worker) kindNames() []string {
	if w.kinds == nil {
		return nil
	}
	out := make([]string, len(w.kinds))
	for i, k := range w.kinds {
		out[i] = displayKind(k)
	}
	return out
}

// queueKey names one claim queue: the run kind and the run model its items
// share. Both are immutable parts of a run's spec, so an item stays in one
// queue while it is queued.
type queueKey struct {
	kind, model string
}

func keyOf(r *run) queueKey {
	return queueKey{kind: r.spec.GetKind(), model: r.spec.GetModel()}
}

func cmpKey(a, b queueKey) int {
	if c := cmpString(a.kind, b.kind); c != 0 {
		return c
	}
	return cmpString(a.model, b.model)
}

// pendingQueues is the claim queue: one FIFO per (run kind, run model).
// Every item gets a queue sequence number (item.pseq) when it is pushed; the
// global FIFO order across queues is the order of those numbers, so a
// worker that takes several kinds or models still receives the oldest
// claimable items first, and a snapshot records one global order. Only
// relative order matters: Restore renumbers from 1.
//
// A claim looks at the head of each non-empty queue only and skips whole
// queues the worker does not take (models.go): its cost is O(batch ×
// non-empty queues), never O(pending items). An emptied queue is dropped,
// so runs of models long gone cost nothing.
type pendingQueues struct {
	byKey map[queueKey]*itemList
	keys  []queueKey // the keys of byKey, sorted (deterministic iteration)
	len   int
	seq   uint64
}

func (q *pendingQueues) init() {
	q.byKey = make(map[queueKey]*itemList)
	q.keys = nil
	q.len = 0
	q.seq = 0
}

func (q *pendingQueues) list(k queueKey) *itemList {
	l := q.byKey[k]
	if l == nil {
		l = &itemList{}
		l.init()
		q.byKey[k] = l
		i, _ := slices.BinarySearchFunc(q.keys, k, cmpKey)
		q.keys = slices.Insert(q.keys, i, k)
	}
	return l
}

// pushBack appends it at the back of its queue.
func (q *pendingQueues) pushBack(it *item) {
	q.seq++
	it.pseq = q.seq
	q.list(keyOf(it.run)).pushBack(it)
	q.len++
}

// remove takes a queued item out, and drops its queue when it empties.
func (q *pendingQueues) remove(it *item) {
	k := keyOf(it.run)
	l := q.byKey[k]
	l.remove(it)
	it.pseq = 0
	q.len--
	if l.len == 0 {
		delete(q.byKey, k)
		if i, found := slices.BinarySearchFunc(q.keys, k, cmpKey); found {
			q.keys = slices.Delete(q.keys, i, i+1)
		}
	}
}

// front returns the oldest queued item that w takes (any item when w is
// nil), or nil.
func (q *pendingQueues) front(w *worker) *item {
	var best *item
	for _, k := range q.keys {
		if w != nil && !w.takes(k) {
			continue
		}
		if it := q.byKey[k].front(); it != nil && (best == nil || it.pseq < best.pseq) {
			best = it
		}
	}
	return best
}

// count returns how many queued items w takes (all when w is nil).
func (q *pendingQueues) count(w *worker) int {
	if w == nil || w.takesAll() {
		return q.len
	}
	n := 0
	for _, k := range q.keys {
		if w.takes(k) {
			n += q.byKey[k].len
		}
	}
	return n
}

// each calls fn for every queued item in global FIFO order.
func (q *pendingQueues) each(fn func(*item)) {
	keys := slices.Clone(q.keys) // fn must not change the queues; be safe anyway
	heads := make([]*item, len(keys))
	lists := make([]*itemList, len(keys))
	for i, k := range keys {
		lists[i] = q.byKey[k]
		heads[i] = lists[i].front()
	}
	for {
		best := -1
		for i, it := range heads {
			if it != nil && (best < 0 || it.pseq < heads[best].pseq) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		it := heads[best]
		heads[best] = lists[best].after(it)
		fn(it)
	}
}

// Claimable returns how many Pending items the named worker could claim
// (its kinds and models; not blocked), with the probes of stalled runs a
// claim stamped at now would take (now is the caller's clock, never earlier
// than the last stamped time: an idle cluster writes no entries, so the
// ledger's own time stands still); 0 for an unknown worker. The server's
// long-poll proposes a claim only when this is positive.
func (l *Ledger) Claimable(workerID string, now time.Time) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	w := l.st.workers[workerID]
	if w == nil {
		return 0
	}
	return l.st.pending.count(w) + l.st.probesDue(w, max(l.st.now, now.UnixNano()))
}
