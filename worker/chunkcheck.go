package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store"
)

// Checked range chunks. A worker reads a range chunk whole, once, with two
// ranged reads (its lines, then its line index), checks it in one pass and
// one blake3 (store.LoadRangeChunk: its line index against its lines, and
// its blake3 against the one recorded: the reference's blake3, else the
// hash its content-addressed key names), and serves the chunk's lines from
// exactly the bytes it checked: a chunk changed after its check can never
// feed a line that was not submitted. A missing, shorter or changed chunk
// is ErrInputMissing: the range is reported held (its run stalls until the
// chunk is back), never nacked in a loop and never run on lines that are
// not the ones submitted.
//
// Checked chunks are kept in a cache bounded by bytes
// (DefaultChunkCacheBytes, least recently used first out); a range keeps the chunk it runs on until
// it is done, so the memory is the cache's bound plus one chunk per range
// being executed. While a range executes, the chunks of the next queued
// ranges are read ahead (readAheadChunks of them), so that an executor
// moving to the next range finds its lines in memory.

// readAheadChunks is how many chunks past those of the executing ranges a
// worker reads ahead.
const readAheadChunks = 2

// DefaultChunkCacheBytes bounds the checked-chunk cache: eight chunks of
// store.DefaultChunkBytes.
const DefaultChunkCacheBytes = 8 * store.DefaultChunkBytes

// chunkCache holds the checked range chunks of a worker by store URL, key,
// lines length and recorded blake3. All fields are guarded by mu.
type chunkCache struct {
	mu sync.Mutex
	m  map[string]*chunkLoad
	// bytes counts the loaded chunks in m; budget bounds it (0: the
	// default).
	bytes, budget int
	// seq orders uses (least recently used first out).
	seq uint64
}

// chunkLoad is one chunk's read and check, shared by every range of the
// chunk. chunk and err are set before done is closed, never after.
type chunkLoad struct {
	done  chan struct{}
	chunk *store.CheckedChunk
	err   error
	used  uint64 // guarded by chunkCache.mu
}

// chunkCacheKey names a chunk reference of the store url.
func chunkCacheKey(url string, ref *rolloutv1.DataRef) string {
	return url + "\x00" + ref.GetObject() + "\x00" + strconv.FormatUint(ref.GetLength(), 10) + "\x00" + string(ref.GetBlake3())
}

// chunkSum is the blake3 a chunk reference records: its own blake3 when
// set, else the hash its content-addressed key names; nil when neither.
func chunkSum(ref *rolloutv1.DataRef) *store.Sum {
	if b := ref.GetBlake3(); len(b) == len(store.Sum{}) {
		sum := store.Sum(b)
		return &sum
	}
	if sum, ok := store.KeySum(ref.GetObject()); ok {
		return &sum
	}
	return nil
}

// chunk returns the load of the range chunk ref of the store url: the
// cached one, or a new one started in the background (bounded by ctx, the
// executors' context; reads(n) is called with the ranged reads it made).
// Wait on its done. A failed load leaves the cache, so the next use reads
// again.
func (s *stores) chunk(ctx context.Context, url string, ref *rolloutv1.DataRef, reads func(int)) *chunkLoad {
	c := &s.chunks
	k := chunkCacheKey(url, ref)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	if l, ok := c.m[k]; ok {
		l.used = c.seq
		return l
	}
	l := &chunkLoad{done: make(chan struct{}), used: c.seq}
	if c.m == nil {
		c.m = make(map[string]*chunkLoad)
	}
	c.m[k] = l
	go func() {
		ch, n, err := s.loadChunk(ctx, url, ref)
		if reads != nil && n > 0 {
			reads(n)
		}
		c.mu.Lock()
		l.chunk, l.err = ch, err
		switch {
		case c.m[k] != l:
		case err != nil:
			delete(c.m, k)
		default:
			c.bytes += ch.Size()
			c.evictLocked(k)
		}
		c.mu.Unlock()
		close(l.done)
	}()
	return l
}

// evictLocked forgets the least recently used loaded chunks (never keep's)
// until the loaded bytes are within the budget.
func (c *chunkCache) evictLocked(keep string) {
	budget := c.budget
	if budget <= 0 {
		budget = DefaultChunkCacheBytes
	}
	for c.bytes > budget {
		var oldest string
		var at uint64
		for k, l := range c.m {
			if k == keep || l.chunk == nil {
				continue
			}
			if oldest == "" || l.used < at {
				oldest, at = k, l.used
			}
		}
		if oldest == "" {
			return
		}
		c.bytes -= c.m[oldest].chunk.Size()
		delete(c.m, oldest)
	}
}

// clear forgets the loaded chunks (loads under way finish for their
// waiters and are not kept).
func (c *chunkCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	c.bytes = 0
}

// cached counts the chunks the cache holds (loaded or loading).
func (c *chunkCache) cached() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// loadChunk reads and checks the range chunk ref of the store url
// (store.LoadRangeChunk). It returns how many ranged reads it made. A chunk
// that is missing, short or not the one recorded is an error wrapping
// ErrData and ErrInputMissing that names the chunk; a store fault wraps
// ErrData only.
func (s *stores) loadChunk(ctx context.Context, url string, ref *rolloutv1.DataRef) (*store.CheckedChunk, int, error) {
	st, err := s.get(ctx, url)
	if err != nil {
		return nil, 0, err
	}
	ch, err := store.LoadRangeChunk(ctx, st, ref.GetObject(), ref.GetLength(), chunkSum(ref))
	if err != nil {
		return nil, 2, chunkError(err)
	}
	return ch, 2, nil
}

// chunkError wraps an error reading a range chunk: ErrInputMissing beside
// ErrData when the chunk is missing or not the one recorded.
func chunkError(err error) error {
	if inputMissing(err) || errors.Is(err, store.ErrBadRangeObject) {
		return fmt.Errorf("%w: %w: %w", ErrData, ErrInputMissing, err)
	}
	return fmt.Errorf("%w: %w", ErrData, err)
}
