package fsm

import (
	"fmt"
	"slices"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// Item dependencies.
//
// A NewItem may name, in depends_on, items of the same run that must be Done
// before it can be claimed. Each must already exist in the run or come
// earlier in the same SubmitItems command, so the graph is acyclic by
// construction. An item with a dependency that is not Done is Pending but
// blocked: it sits in no list (not in the pending queue), so Claim never
// sees it and stays O(claimed). Each item keeps the number of its
// dependencies not yet Done (unmet) and each dependency keeps a reverse index
// of its dependents; when an item becomes Done its dependents' counts drop,
// and those that reach zero while Pending join the back of the pending queue
// in ascending index order (an order that does not depend on history, so a
// replica restored from a snapshot unblocks exactly as one that applied the
// log).
//
// A Dead dependency is not Done: its Pending dependents stay blocked (and
// the run is not finished while they are) until retry_dead re-pends the
// dependency and it completes. Every item still ends with exactly one
// outcome: a blocked item is never lost, it waits.

// limits.MaxDepsPerItem bounds NewItem.depends_on; limits.MaxKindBytes
// bounds RunSpec.kind.

// itemDeps is the dependency record of an item that has dependencies or
// dependents; items with neither have none (item.deps is nil).
type itemDeps struct {
	// on lists the items this one depends on, in depends_on order. It is
	// set once, when the item is created, and never modified (snapshots
	// share it).
	on []*item
	// dependents lists the items that depend on this one (creation order
	// while live, index order after a restore; unblocking sorts).
	dependents []*item
	// unmet counts the items of on that are not Done.
	unmet int
}

// blocked reports whether it has a dependency that is not Done.
func (it *item) blocked() bool { return it.deps != nil && it.deps.unmet > 0 }

// dependsOn returns the items it depends on (nil when none).
func (it *item) dependsOn() []*item {
	if it.deps == nil {
		return nil
	}
	return it.deps.on
}

func (it *item) depRecord() *itemDeps {
	if it.deps == nil {
		it.deps = &itemDeps{}
	}
	return it.deps
}

// checkDeps validates the depends_on of the new item items[i] of a submit to
// run r (nil when the command creates it); seen maps the ids of items[:i] to
// their positions.
func checkDeps(r *run, items []*fsmpb.NewItem, i int, seen map[string]int) error {
	ni := items[i]
	deps := ni.GetDependsOn()
	if len(deps) == 0 {
		return nil
	}
	if len(deps) > limits.MaxDepsPerItem {
		return invalidErr("submit items[%d] (id %x) depends on %d items, limit %d", i, ni.Id, len(deps), limits.MaxDepsPerItem)
	}
	for k, d := range deps {
		if len(d) == 0 || len(d) > limits.MaxIDBytes {
			return invalidErr("submit items[%d] (id %x) depends_on[%d] is %d bytes, must be 1 to %d", i, ni.Id, k, len(d), limits.MaxIDBytes)
		}
		if string(d) == string(ni.Id) {
			return invalidErr("submit items[%d] (id %x) depends on itself", i, ni.Id)
		}
		if slices.ContainsFunc(deps[:k], func(e []byte) bool { return string(e) == string(d) }) {
			return invalidErr("submit items[%d] (id %x) names dependency %x twice", i, ni.Id, d)
		}
		if _, earlier := seen[string(d)]; earlier {
			continue
		}
		if r != nil && r.items[string(d)] != nil {
			continue
		}
		return invalidErr("submit items[%d] (id %x) depends on %x, which is neither in the run nor earlier in the command", i, ni.Id, d)
	}
	return nil
}

// sameDeps reports whether an existing item's dependencies are exactly ids
// (a resubmit must repeat them).
func sameDeps(ex *item, ids [][]byte) bool {
	on := ex.dependsOn()
	if len(on) != len(ids) {
		return false
	}
	for k, d := range on {
		if d.id != string(ids[k]) {
			return false
		}
	}
	return true
}

// linkDeps records the dependencies (ids, all present in r) of the new item
// it, before it is enqueued.
func linkDeps(r *run, it *item, ids [][]byte) {
	if len(ids) == 0 {
		return
	}
	rec := it.depRecord()
	rec.on = make([]*item, len(ids))
	for k, id := range ids {
		d := r.items[string(id)]
		rec.on[k] = d
		dr := d.depRecord()
		dr.dependents = append(dr.dependents, it)
		if d.state != StateDone {
			rec.unmet++
		}
	}
}

// unblockDependents is called when it has just become Done: each dependent's
// unmet count drops, and the Pending ones that no longer wait on anything
// join the back of the pending queue in ascending index order. It reports
// whether any did.
func (st *state) unblockDependents(it *item) bool {
	if it.deps == nil || len(it.deps.dependents) == 0 {
		return false
	}
	var ready []*item
	for _, d := range it.deps.dependents {
		d.deps.unmet--
		if d.deps.unmet == 0 && d.state == StatePending {
			ready = append(ready, d)
		}
	}
	if len(ready) == 0 {
		return false
	}
	slices.SortFunc(ready, func(a, b *item) int { return cmpU64(a.index, b.index) })
	for _, d := range ready {
		d.run.blocked--
		d.updated = st.now
		st.queue(d)
	}
	return true
}

// restoreDeps resolves the dependency ids a snapshot recorded (deps, per
// item) once every item is known, recomputes the unmet counts, the reverse
// index and each run's blocked count, and checks them against the items'
// states: only Pending and Dead items may wait on a dependency, and a Pending
// item is in the queue exactly when it does not.
func (b *builder) restoreDeps() error {
	for _, r := range b.st.runOrder {
		for _, it := range r.byIndex.all() {
			ids := b.deps[it]
			if len(ids) == 0 {
				continue
			}
			if len(ids) > limits.MaxDepsPerItem {
				return corrupt("item %x of run %q depends on %d items", it.id, r.name, len(ids))
			}
			for k, id := range ids {
				d := r.items[string(id)]
				switch {
				case d == nil:
					return corrupt("item %x of run %q depends on unknown item %x", it.id, r.name, id)
				case d == it:
					return corrupt("item %x of run %q depends on itself", it.id, r.name)
				case slices.ContainsFunc(ids[:k], func(e []byte) bool { return string(e) == string(id) }):
					return corrupt("item %x of run %q names dependency %x twice", it.id, r.name, id)
				}
			}
			linkDeps(r, it, ids)
		}
	}
	for _, r := range b.st.runOrder {
		for _, it := range r.byIndex.all() {
			blocked := it.blocked()
			switch {
			case blocked && (it.state == StateRunning || it.state == StateDone):
				return corrupt("%s item %x of run %q has a dependency that is not done", it.state, it.id, r.name)
			case it.state == StatePending && blocked != (it.seq == 0):
				return corrupt("pending item %x of run %q has pending_seq %d, blocked %v", it.id, r.name, it.seq, blocked)
			}
			if blocked && it.state == StatePending {
				r.blocked++
			}
		}
	}
	return nil
}

// depBytes is the total length of the ids it depends on.
func (it *item) depBytes() int {
	n := 0
	for _, d := range it.dependsOn() {
		n += len(d.id)
	}
	return n
}

// Dependency is a dependency of an item as Dependencies returns it: its id,
// state and (when Done) result.
type Dependency struct {
	ID     []byte
	State  State
	Result []byte
	// ResultRef references the result in the run's store (runs with a
	// store); Summary is its summary.
	ResultRef *Ref
	Summary   []byte
}

// Dependencies returns, for the item id of run, the items it depends on in
// depends_on order, with their results (copies). A claimed item's
// dependencies are all Done, and Done is final, so what this returns for an
// item a Claim or Steal handed out is exactly what it depended on. An
// unknown run or item gives an error wrapping ErrRunNotFound or
// ErrItemNotFound.
func (l *Ledger) Dependencies(run string, id []byte) ([]Dependency, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r := l.st.runs[run]
	if r == nil {
		return nil, fmt.Errorf("%w: %q", ErrRunNotFound, run)
	}
	it := r.items[string(id)]
	if it == nil {
		return nil, fmt.Errorf("%w: %x of run %q", ErrItemNotFound, id, run)
	}
	on := it.dependsOn()
	if len(on) == 0 {
		return nil, nil
	}
	out := make([]Dependency, len(on))
	for k, d := range on {
		out[k] = Dependency{ID: []byte(d.id), State: d.state}
		if rs := d.result(); rs != nil {
			out[k].Result = slices.Clone(rs)
		}
		if d.rref.obj != 0 {
			out[k].ResultRef = d.run.refOut(d.rref, d.rsum[:])
		}
		if sm := d.summary(); sm != nil {
			out[k].Summary = slices.Clone(sm)
		}
	}
	return out, nil
}
