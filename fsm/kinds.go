package fsm

import (
	"fmt"
	"slices"
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

// MaxWorkerKinds bounds the kinds one worker registers.
const MaxWorkerKinds = 16

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
	if len(kinds) > MaxWorkerKinds {
		return nil, fmt.Errorf("%w: register names %d kinds, limit %d", ErrInvalidCommand, len(kinds), MaxWorkerKinds)
	}
	if len(kinds) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(kinds))
	for i, k := range kinds {
		if err := checkText(fmt.Sprintf("register kind %d", i), k, MaxKindBytes); err != nil {
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

// pendingQueues is the claim queue: one FIFO per run kind. Every item gets
// a queue sequence number (item.pseq) when it is pushed; the global FIFO
// order across kinds is the order of those numbers, so a worker that runs
// several kinds still receives the oldest claimable items first, and a
// snapshot records one global order. Only relative order matters: Restore
// renumbers from 1.
type pendingQueues struct {
	byKind map[string]*itemList
	kinds  []string // the keys of byKind, sorted (deterministic iteration)
	len    int
	seq    uint64
}

func (q *pendingQueues) init() {
	q.byKind = make(map[string]*itemList)
	q.kinds = nil
	q.len = 0
	q.seq = 0
}

func (q *pendingQueues) list(kind string) *itemList {
	l := q.byKind[kind]
	if l == nil {
		l = &itemList{}
		l.init()
		q.byKind[kind] = l
		q.kinds = append(q.kinds, kind)
		slices.Sort(q.kinds)
	}
	return l
}

// pushBack appends it at the back of its run kind's queue.
func (q *pendingQueues) pushBack(it *item) {
	q.seq++
	it.pseq = q.seq
	q.list(it.run.spec.GetKind()).pushBack(it)
	q.len++
}

// remove takes a queued item out.
func (q *pendingQueues) remove(it *item) {
	q.byKind[it.run.spec.GetKind()].remove(it)
	it.pseq = 0
	q.len--
}

// front returns the oldest queued item that w runs (any item when w is
// nil), or nil.
func (q *pendingQueues) front(w *worker) *item {
	var best *item
	for _, k := range q.kinds {
		if w != nil && !w.runs(k) {
			continue
		}
		if it := q.byKind[k].front(); it != nil && (best == nil || it.pseq < best.pseq) {
			best = it
		}
	}
	return best
}

// count returns how many queued items w runs (all when w is nil).
func (q *pendingQueues) count(w *worker) int {
	if w == nil || w.kinds == nil {
		return q.len
	}
	n := 0
	for _, k := range q.kinds {
		if w.runs(k) {
			n += q.byKind[k].len
		}
	}
	return n
}

// each calls fn for every queued item in global FIFO order.
func (q *pendingQueues) each(fn func(*item)) {
	heads := make([]*item, len(q.kinds))
	for i, k := range q.kinds {
		heads[i] = q.byKind[k].front()
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
		heads[best] = q.byKind[q.kinds[best]].after(it)
		fn(it)
	}
}

// Claimable returns how many Pending items the named worker could claim
// now (its kinds; not blocked); 0 for an unknown worker. The server's
// long-poll proposes a claim only when this is positive.
func (l *Ledger) Claimable(workerID string) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	w := l.st.workers[workerID]
	if w == nil {
		return 0
	}
	return l.st.pending.count(w)
}
