package fsm

import "github.com/google/btree"

// recordIndex keeps a run's records (items, or ranges) ordered by their
// first index. Records never overlap, so the first index is a key. It is a
// B-tree so that a range run's progress reports and splits, which add
// records in the middle, cost O(log records), not a copy of the run's
// whole index: a billion-item run holds millions of done segments. The
// zero value is not usable: call init.
type recordIndex struct {
	t *btree.BTreeG[*item]
}

// recordDegree is the B-tree's degree: wide nodes, few pointers per record.
const recordDegree = 32

func lessIndex(a, b *item) bool { return a.index < b.index }

func (x *recordIndex) init() { x.t = btree.NewG[*item](recordDegree, lessIndex) }

// probe is a key for lookups.
func probe(idx uint64) *item { return &item{index: idx} }

// len is the number of records.
func (x *recordIndex) len() int { return x.t.Len() }

// insert adds it; it returns the record it replaced (one at the same first
// index), which callers treat as a broken invariant.
func (x *recordIndex) insert(it *item) (replaced *item) {
	old, _ := x.t.ReplaceOrInsert(it)
	return old
}

// remove takes it out (if it is the record at its index).
func (x *recordIndex) remove(it *item) {
	if got, ok := x.t.Get(it); ok && got == it {
		x.t.Delete(it)
	}
}

// get returns the record whose first index is idx, or nil.
func (x *recordIndex) get(idx uint64) *item {
	it, _ := x.t.Get(probe(idx))
	return it
}

// atOrBefore returns the record with the largest first index <= idx, or
// nil.
func (x *recordIndex) atOrBefore(idx uint64) *item {
	var out *item
	x.t.DescendLessOrEqual(probe(idx), func(it *item) bool {
		out = it
		return false
	})
	return out
}

// firstFrom returns the record with the smallest first index >= idx, or
// nil.
func (x *recordIndex) firstFrom(idx uint64) *item {
	var out *item
	x.t.AscendGreaterOrEqual(probe(idx), func(it *item) bool {
		out = it
		return false
	})
	return out
}

// last returns the record with the largest first index, or nil.
func (x *recordIndex) last() *item {
	it, _ := x.t.Max()
	return it
}

// each calls fn for every record in index order until fn returns false.
// fn must not add or remove records.
func (x *recordIndex) each(fn func(*item) bool) { x.t.Ascend(fn) }

// from calls fn for the records with first index >= idx, in order, until
// fn returns false. fn must not add or remove records.
func (x *recordIndex) from(idx uint64, fn func(*item) bool) {
	x.t.AscendGreaterOrEqual(probe(idx), fn)
}

// all returns the records in index order (a fresh slice).
func (x *recordIndex) all() []*item {
	out := make([]*item, 0, x.t.Len())
	x.t.Ascend(func(it *item) bool {
		out = append(out, it)
		return true
	})
	return out
}
