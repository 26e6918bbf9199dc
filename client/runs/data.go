package runs

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/store"
)

// DefaultCacheBytes bounds the objects a results walk keeps in memory.
const DefaultCacheBytes = 256 << 20

// objectCache reads store objects whole and keeps the most recently used
// ones up to a byte bound, so that a walk of a run's items in index order
// reads each input chunk and each result object about once (never one
// request per item) in bounded memory. An object larger than the bound is
// read by range instead, per reference.
type objectCache struct {
	st    *store.Store
	max   int64
	used  int64
	lru   *list.List // of *cached, most recent first
	byKey map[string]*list.Element
	// Reads counts the store requests made.
	Reads int
}

type cached struct {
	key  string
	data []byte
}

func newObjectCache(st *store.Store, maxBytes int64) *objectCache {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	return &objectCache{st: st, max: maxBytes, lru: list.New(), byKey: map[string]*list.Element{}}
}

// read returns the bytes a reference names, checked against its blake3 when
// it has one (store.ErrHashMismatch naming the object otherwise).
func (c *objectCache) read(ctx context.Context, r *rolloutv1.DataRef) ([]byte, error) {
	key, off, n := r.GetObject(), int64(r.GetOffset()), int64(r.GetLength())
	var out []byte
	if e, ok := c.byKey[key]; ok {
		c.lru.MoveToFront(e)
		out = e.Value.(*cached).data
	} else {
		size, err := c.st.Size(ctx, key)
		c.Reads++
		if err != nil {
			return nil, err
		}
		if size > c.max/4 {
			b, err := c.st.ReadRange(ctx, key, off, n)
			c.Reads++
			if err != nil {
				return nil, err
			}
			return check(key, off, b, r.GetBlake3())
		}
		data, err := c.st.ReadAll(ctx, key)
		c.Reads++
		if err != nil {
			return nil, err
		}
		c.byKey[key] = c.lru.PushFront(&cached{key: key, data: data})
		c.used += int64(len(data))
		for c.used > c.max && c.lru.Len() > 1 {
			old := c.lru.Remove(c.lru.Back()).(*cached)
			delete(c.byKey, old.key)
			c.used -= int64(len(old.data))
		}
		out = data
	}
	if off < 0 || n < 0 || off+n > int64(len(out)) {
		return nil, fmt.Errorf("%w: %q has %d bytes, the reference asks for %d at offset %d", store.ErrShortObject, key, len(out), n, off)
	}
	return check(key, off, out[off:off+n], r.GetBlake3())
}

func check(key string, off int64, b, sum []byte) ([]byte, error) {
	if len(sum) == 0 {
		return b, nil
	}
	if h := store.Hash(b); string(h[:]) != string(sum) {
		return nil, fmt.Errorf("%w: %q bytes %d..%d", store.ErrHashMismatch, key, off, off+int64(len(b)))
	}
	return b, nil
}

// errNoStore: a run's items reference a store, and none was given.
var errNoStore = errors.New("the run keeps its data in an object store, and no store was opened to read it")

// resolve fills a finished item's payload and result from the store when
// the ledger holds references. A reference that cannot be read, or whose
// bytes do not match their hash, turns the item into an error line naming
// the object (never a silent wrong result) and reports it as unreadable; a
// store that fails outright ends the walk with the error.
func resolve(ctx context.Context, c *objectCache, it *rolloutv1.ResultItem, fi *batch.FinishedItem) (unreadable bool, err error) {
	if it.GetPayloadRef() == nil && it.GetResultRef() == nil {
		return false, nil
	}
	if c == nil {
		return false, errNoStore
	}
	if pr := it.GetPayloadRef(); pr != nil {
		b, err := c.read(ctx, pr)
		if err != nil {
			if errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
				return false, err
			}
			// Without its input line the item cannot be rendered as
			// itself: say why, in a line of its own.
			fi.Payload = []byte(`{}`)
			fi.Done, fi.Cancelled, fi.Result, fi.Reason = false, false, nil, fmt.Sprintf("input bytes unreadable: %v", err)
			return true, nil
		}
		fi.Payload = b
	}
	if rr := it.GetResultRef(); rr != nil && fi.Done {
		b, err := c.read(ctx, rr)
		if err != nil {
			if errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
				return false, err
			}
			fi.Done, fi.Cancelled, fi.Result, fi.Reason = false, false, nil, fmt.Sprintf("result bytes unreadable: %v", err)
			return true, nil
		}
		fi.Result = b
	}
	return false, nil
}

// WithStore wraps a coordinator so that the items its Results pages hold
// carry their bytes: every payload_ref and result_ref is read from st (one
// bounded cache of cacheBytes for the wrapper's life) into payload and
// result, checked against its hash. An item whose bytes cannot be read or
// do not match comes back Dead with a reason naming the object; a store
// that fails outright fails the call. Everything else passes through.
//
// A range run's records (ResultItem.count > 0) come back as items, one per
// index, as an item run's would: the index's input line as payload, the
// sample id computed from it with the run's model and sampling (as the
// ledger records them) as id, a done index's result from its range result
// object (its sample id checked: ErrSampleIDMismatch fails the call), and
// the record's state, attempt, owner and reason. A page holds whole
// records: it ends after the first record that reaches the request's
// limit (next_index then names the next record).
func WithStore(c Coordinator, st *store.Store, cacheBytes int64) Coordinator {
	return &storeReader{Coordinator: c, st: st, cache: newObjectCache(st, cacheBytes)}
}

type storeReader struct {
	Coordinator
	st    *store.Store
	cache *objectCache

	mu sync.Mutex
	// params holds the model and sampling of the range runs read.
	params map[string]runParamsOf
}

type runParamsOf struct {
	model string
	sp    batch.SamplingParams
}

func (s *storeReader) Results(ctx context.Context, req *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error) {
	resp, err := s.Coordinator.Results(ctx, req)
	if err != nil {
		return nil, err
	}
	if items := resp.GetItems(); len(items) > 0 && isRangeRecord(items[0]) {
		return s.expandRanges(ctx, req, resp)
	}
	for _, it := range resp.GetItems() {
		fi, ok := FinishedItem(it)
		if !ok && it.GetPayloadRef() == nil {
			continue
		}
		if !ok {
			// Not finished: only its payload can be read.
			fi.Done = false
		}
		if _, err := resolve(ctx, s.cache, it, &fi); err != nil {
			return nil, fmt.Errorf("item %d: %w", it.GetIndex(), err)
		}
		it.Payload, it.PayloadRef = fi.Payload, nil
		if it.GetResultRef() != nil {
			it.ResultRef = nil
			if fi.Done {
				it.Result = fi.Result
			} else {
				it.State, it.Reason = rolloutv1.ItemState_ITEM_STATE_DEAD, fi.Reason
			}
		}
	}
	return resp, nil
}

// StorePayloads moves the inline payloads of items into st: they are packed
// into content-addressed chunks under store.InputPrefix(run) (only chunks
// not already stored are uploaded) and each item gets a payload_ref with the
// blake3 of its bytes, which the worker checks (a program-built item, such
// as a training step's, has no sample id to recompute). It returns the
// chunks uploaded and found already stored.
func StorePayloads(ctx context.Context, st *store.Store, run string, items []*rolloutv1.SubmitItem) (uploaded, reused int, err error) {
	return StorePayloadsUnder(ctx, st, store.InputPrefix(run), items)
}

// StorePayloadsUnder is StorePayloads with the chunks under prefix (a
// run's input prefix, storeurl.RunInputs).
func StorePayloadsUnder(ctx context.Context, st *store.Store, prefix string, items []*rolloutv1.SubmitItem) (uploaded, reused int, err error) {
	ch := store.NewChunker(st, prefix, store.DefaultChunkBytes)
	var waiting []*rolloutv1.SubmitItem
	flush := func() error {
		key, err := ch.Flush(ctx)
		if err != nil {
			return err
		}
		for _, it := range waiting {
			it.PayloadRef.Object = key
		}
		waiting = waiting[:0]
		return nil
	}
	for _, it := range items {
		p := it.GetPayload()
		if !ch.Fits(len(p)) {
			if err := flush(); err != nil {
				return ch.Uploaded, ch.Reused, err
			}
		}
		sum := store.Hash(p)
		it.PayloadRef = &rolloutv1.DataRef{Offset: uint64(ch.Add(p)), Length: uint64(len(p)), Blake3: sum[:]}
		it.Payload = nil
		waiting = append(waiting, it)
	}
	if err := flush(); err != nil {
		return ch.Uploaded, ch.Reused, err
	}
	return ch.Uploaded, ch.Reused, nil
}

// expandRanges turns a page of a range run's records into items, one per
// index (see WithStore).
func (s *storeReader) expandRanges(ctx context.Context, req *rolloutv1.ResultsRequest, resp *rolloutv1.ResultsResponse) (*rolloutv1.ResultsResponse, error) {
	run := req.GetRun()
	s.mu.Lock()
	p, ok := s.params[run]
	s.mu.Unlock()
	if !ok {
		rc, err := runCounters(ctx, s.Coordinator, run, 0)
		if err != nil {
			return nil, err
		}
		if p.model, p.sp, err = runParams(rc, ""); err != nil {
			return nil, err
		}
		s.mu.Lock()
		if s.params == nil {
			s.params = map[string]runParamsOf{}
		}
		s.params[run] = p
		s.mu.Unlock()
	}
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = DefaultPageSize
	}
	out := &rolloutv1.ResultsResponse{NextIndex: resp.GetNextIndex(), Done: resp.GetDone()}
	var rec *rolloutv1.ResultItem
	var m Missing
	w := newRangeWalk(s.st, p.model, p.sp, &m, func(fi batch.FinishedItem, unreadable bool) error {
		it := &rolloutv1.ResultItem{Id: fi.ID, Index: fi.Index, State: rec.GetState(), Payload: fi.Payload, Reason: fi.Reason,
			Attempt: rec.GetAttempt(), Owner: rec.GetOwner()}
		switch {
		case unreadable:
			it.State = rolloutv1.ItemState_ITEM_STATE_DEAD
		case fi.Done:
			it.Result = fi.Result
		}
		out.Items = append(out.Items, it)
		return nil
	})
	w.unfinished = func(rec *rolloutv1.ResultItem, idx uint64, line []byte, sid [32]byte, lerr error) error {
		it := &rolloutv1.ResultItem{Index: idx, State: rec.GetState(), Payload: line, Attempt: rec.GetAttempt(), Owner: rec.GetOwner()}
		if lerr != nil {
			// Not finished: without its line it has no sample id either.
			it.Payload = []byte(`{}`)
		} else {
			it.Id = append([]byte{}, sid[:]...)
		}
		out.Items = append(out.Items, it)
		return nil
	}
	for i, r := range resp.GetItems() {
		if !isRangeRecord(r) {
			return nil, fmt.Errorf("record at index %d of range run %q is not a range", r.GetIndex(), run)
		}
		if len(out.Items) >= limit {
			out.NextIndex, out.Done = resp.GetItems()[i].GetIndex(), false
			break
		}
		rec = r
		if err := w.record(ctx, r); err != nil {
			return nil, err
		}
		// The ledger's next_index follows the last record's first index;
		// the items returned end where that record ends.
		out.NextIndex = max(out.NextIndex, w.end)
	}
	return out, nil
}
