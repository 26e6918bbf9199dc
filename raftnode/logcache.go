package raftnode

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// ErrLogCacheBounds is returned by newLogCache for a capacity or a byte
// budget below 1.
var ErrLogCacheBounds = errors.New("raftnode: log cache bounds must be >= 1")

// logCache is the replica's cache of its most recent log entries in front
// of raft.db (replication and the FSM read them back soon after they are
// written). It replaces raft.LogCache, which keeps the *raft.Log pointers
// it is handed: on a leader those point into hashicorp/raft's apply
// futures, so its ring kept each of the last entries' whole FSM response
// (a claim's items, a status's runs) alive, and its entries' data had no
// bound but their count (MaxBatchBytes each).
//
// The contract: the cache holds its own copy of each entry's Log header
// (never the caller's *raft.Log, so nothing the caller's struct points to
// but Data and Extensions is retained), at most capacity entries, and at
// most maxBytes of their Data and Extensions together; it holds one
// window of consecutive indexes [first, last], evicting from first. An
// entry larger than maxBytes on its own is never cached. Reads outside
// the window, and every read after a DeleteRange, go to the store.
type logCache struct {
	store    raft.LogStore
	maxBytes int

	mu    sync.RWMutex
	ring  []raft.Log // slot i % len(ring); valid for first <= Index <= last
	first uint64     // 0: the window is empty
	last  uint64
	bytes int // Data and Extensions bytes of the window's entries
}

// newLogCache returns a cache of at most capacity entries and maxBytes of
// entry data in front of store.
func newLogCache(store raft.LogStore, capacity, maxBytes int) (*logCache, error) {
	if capacity < 1 || maxBytes < 1 {
		return nil, fmt.Errorf("%w: capacity %d, max bytes %d", ErrLogCacheBounds, capacity, maxBytes)
	}
	return &logCache{store: store, maxBytes: maxBytes, ring: make([]raft.Log, capacity)}, nil
}

// entryBytes is what an entry counts against the byte budget.
func entryBytes(l *raft.Log) int { return len(l.Data) + len(l.Extensions) }

// slot is where index idx lives in the ring.
func (c *logCache) slot(idx uint64) *raft.Log { return &c.ring[idx%uint64(len(c.ring))] }

// IsMonotonic exposes the store's raft.MonotonicLogStore answer, as
// raft.LogCache does.
func (c *logCache) IsMonotonic() bool {
	if m, ok := c.store.(raft.MonotonicLogStore); ok {
		return m.IsMonotonic()
	}
	return false
}

// GetLog copies entry idx into log, from the cache when it holds it.
func (c *logCache) GetLog(idx uint64, log *raft.Log) error {
	c.mu.RLock()
	if c.first != 0 && idx >= c.first && idx <= c.last {
		*log = *c.slot(idx)
		c.mu.RUnlock()
		return nil
	}
	c.mu.RUnlock()
	return c.store.GetLog(idx, log)
}

// StoreLog stores one entry.
func (c *logCache) StoreLog(log *raft.Log) error { return c.StoreLogs([]*raft.Log{log}) }

// StoreLogs writes logs to the store and, once they are durable, caches a
// copy of each.
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return fmt.Errorf("unable to store logs within log store, err: %q", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		c.add(l)
	}
	return nil
}

// add caches a copy of l, keeping the window consecutive and within its
// bounds: it first evicts the oldest entries until l has a slot and its
// bytes fit. The caller holds mu.
func (c *logCache) add(l *raft.Log) {
	if c.first != 0 && l.Index != c.last+1 {
		c.reset() // not the next index (a rewrite after a truncation): start over
	}
	n := entryBytes(l)
	if n > c.maxBytes {
		c.reset()
		return
	}
	for c.first != 0 && (c.last-c.first+1 >= uint64(len(c.ring)) || c.bytes+n > c.maxBytes) {
		c.evictFirst()
	}
	if c.first == 0 {
		c.first = l.Index
	}
	c.last = l.Index
	*c.slot(l.Index) = *l
	c.bytes += n
}

// evictFirst drops the window's oldest entry. The caller holds mu and the
// window is not empty.
func (c *logCache) evictFirst() {
	s := c.slot(c.first)
	c.bytes -= entryBytes(s)
	*s = raft.Log{}
	if c.first == c.last {
		c.first, c.last = 0, 0
		return
	}
	c.first++
}

// reset empties the window. The caller holds mu.
func (c *logCache) reset() {
	clear(c.ring)
	c.first, c.last, c.bytes = 0, 0, 0
}

// FirstIndex is the store's.
func (c *logCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

// LastIndex is the store's.
func (c *logCache) LastIndex() (uint64, error) { return c.store.LastIndex() }

// DeleteRange empties the cache and deletes [lo, hi] from the store.
func (c *logCache) DeleteRange(lo, hi uint64) error {
	c.mu.Lock()
	c.reset()
	c.mu.Unlock()
	return c.store.DeleteRange(lo, hi)
}
