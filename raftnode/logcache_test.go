package raftnode

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
)

// countingStore is an in-memory log store that counts the GetLog calls
// that reach it (cache misses).
type countingStore struct {
	*raft.InmemStore
	gets atomic.Int64
}

func (s *countingStore) GetLog(idx uint64, l *raft.Log) error {
	s.gets.Add(1)
	return s.InmemStore.GetLog(idx, l)
}

func newCountingStore() *countingStore { return &countingStore{InmemStore: raft.NewInmemStore()} }

// entries returns logs [from, from+n) whose data is size bytes naming
// their index.
func entries(from, n uint64, size int) []*raft.Log {
	out := make([]*raft.Log, 0, n)
	for i := from; i < from+n; i++ {
		d := bytes.Repeat([]byte{'.'}, size)
		copy(d, fmt.Sprintf("entry %d", i))
		out = append(out, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: d})
	}
	return out
}

// get reads idx through c and says whether the store was asked.
func get(t *testing.T, c *logCache, s *countingStore, idx uint64) (raft.Log, bool) {
	t.Helper()
	before := s.gets.Load()
	var l raft.Log
	if err := c.GetLog(idx, &l); err != nil {
		t.Fatalf("GetLog(%d): %v", idx, err)
	}
	if l.Index != idx {
		t.Fatalf("GetLog(%d) gave index %d", idx, l.Index)
	}
	return l, s.gets.Load() != before
}

// TestLogCacheHoldsCopies: the cache keeps its own copy of each entry's
// header, never the caller's *raft.Log (on a leader that struct is part of
// an apply future holding the FSM's response), and serves recent entries
// without the store.
func TestLogCacheHoldsCopies(t *testing.T) {
	s := newCountingStore()
	c, err := newLogCache(s, 8, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	logs := entries(1, 4, 64)
	if err := c.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	want := logs[2].Data
	// The caller reuses its structs: the cache must not see it.
	for _, l := range logs {
		*l = raft.Log{Index: 999, Data: []byte("overwritten")}
	}
	l, miss := get(t, c, s, 3)
	if miss {
		t.Fatalf("entry 3 of 4 just stored was read from the store, not the cache")
	}
	if !bytes.Equal(l.Data, want) {
		t.Fatalf("entry 3 from the cache is %q, want %q: the cache kept the caller's struct", l.Data, want)
	}
}

// TestLogCacheBoundsBytes: whatever the entries' size, the cached data
// stays within the byte budget and the entry count; older entries are read
// from the store, unchanged.
func TestLogCacheBoundsBytes(t *testing.T) {
	const budget = 10 << 10
	s := newCountingStore()
	c, err := newLogCache(s, 512, budget)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 200; i += 20 {
		if err := c.StoreLogs(entries(i, 20, 1<<10)); err != nil {
			t.Fatal(err)
		}
		if c.bytes > budget {
			t.Fatalf("after entry %d the cache holds %d bytes, budget %d", i+19, c.bytes, budget)
		}
	}
	if got := c.last - c.first + 1; got != 10 || c.last != 200 {
		t.Fatalf("the window is [%d, %d], want the last 10 entries [191, 200]", c.first, c.last)
	}
	if _, miss := get(t, c, s, 200); miss {
		t.Fatalf("entry 200 (the newest) missed the cache")
	}
	l, miss := get(t, c, s, 150)
	if !miss {
		t.Fatalf("entry 150 came from the cache, which should hold only [191, 200]")
	}
	if !bytes.HasPrefix(l.Data, []byte("entry 150")) {
		t.Fatalf("entry 150 from the store is %q", l.Data[:16])
	}

	// The entry count bounds it too.
	c2, err := newLogCache(newCountingStore(), 4, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.StoreLogs(entries(1, 9, 100)); err != nil {
		t.Fatal(err)
	}
	if c2.first != 6 || c2.last != 9 || c2.bytes != 400 {
		t.Fatalf("a 4-entry cache after 9 entries holds [%d, %d] (%d bytes), want [6, 9] (400 bytes)", c2.first, c2.last, c2.bytes)
	}

	// An entry larger than the budget is never cached, and empties the
	// window (it must stay consecutive).
	if err := c.StoreLogs(entries(201, 1, budget+1)); err != nil {
		t.Fatal(err)
	}
	if c.first != 0 || c.bytes != 0 {
		t.Fatalf("after an entry over the budget the window is [%d, %d] with %d bytes, want empty", c.first, c.last, c.bytes)
	}
	if l, miss := get(t, c, s, 201); !miss || len(l.Data) != budget+1 {
		t.Fatalf("entry 201 (over the budget): from the store %v, %d bytes", miss, len(l.Data))
	}
}

// TestLogCacheRewrite: after a DeleteRange (a follower's conflicting
// suffix) the rewritten indexes read the new entries, never the cached old
// ones; a store that is not the next index starts a new window.
func TestLogCacheRewrite(t *testing.T) {
	s := newCountingStore()
	c, err := newLogCache(s, 16, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StoreLogs(entries(1, 10, 32)); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteRange(5, 10); err != nil {
		t.Fatal(err)
	}
	fresh := entries(5, 3, 32)
	for _, l := range fresh {
		l.Term = 2
		copy(l.Data, "rewritten")
	}
	if err := c.StoreLogs(fresh); err != nil {
		t.Fatal(err)
	}
	if l, _ := get(t, c, s, 6); l.Term != 2 || !bytes.HasPrefix(l.Data, []byte("rewritten")) {
		t.Fatalf("entry 6 after the rewrite: term %d data %q", l.Term, l.Data)
	}
	if err := c.StoreLogs(entries(20, 2, 32)); err != nil {
		t.Fatal(err)
	}
	if c.first != 20 || c.last != 21 {
		t.Fatalf("after a jump to 20 the window is [%d, %d], want [20, 21]", c.first, c.last)
	}
	if _, miss := get(t, c, s, 6); !miss {
		t.Fatalf("entry 6 came from the cache after the window moved past it")
	}
}

// TestLogCacheBadBounds: a capacity or budget below 1 is refused, naming
// them.
func TestLogCacheBadBounds(t *testing.T) {
	for _, b := range [][2]int{{0, 1}, {1, 0}, {-1, 10}} {
		if _, err := newLogCache(raft.NewInmemStore(), b[0], b[1]); !errors.Is(err, ErrLogCacheBounds) {
			t.Fatalf("newLogCache(%d, %d) = %v, want ErrLogCacheBounds", b[0], b[1], err)
		}
	}
}
