package worker

// The data plane of runs with an object store (RunSpec.store): payloads and
// dependency results are read by reference before an item runs, results are
// written as one content-addressed object per run and report flush before
// they are reported by reference.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// ErrData is wrapped by the reason of an attempt failed because its
// payload or a dependency's result could not be read from the run's store
// or did not match what the ledger recorded, and of one whose result could
// not be written there.
var ErrData = errors.New("data plane")

// ErrInputMissing is wrapped, beside ErrData, by the error of an item
// whose input object is missing or changed: not found, shorter than the
// reference, or bytes that are not what the ledger recorded. The worker
// reports such an item held (OUTCOME_HELD), at once and without a failure:
// its run stalls until the object is back (see docs/RECOVERY.md).
var ErrInputMissing = errors.New("input object missing or changed")

// errStoreFault marks a store error that may go away (unreachable, slow,
// 5xx, a full disk: store.ErrUnavailable and deadlines) or a store that
// could not be opened: the item is reported held with store_unavailable
// (the ledger isolates the run once two workers say so), and a result
// write is retried after the store's backoff, without a failure counted.
var errStoreFault = errors.New("store fault")

// transientStore reports whether err is a store fault that may go away: a
// store the worker could not reach (or open), never one that answered with
// a refusal retrying cannot change (store.ErrRefused: access denied), which
// fails the item like any other data fault.
func transientStore(err error) bool {
	if errors.Is(err, store.ErrRefused) {
		return false
	}
	return errors.Is(err, errStoreFault) || errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// refusedStore reports whether err is the store's refusal that retrying
// cannot change (store.ErrRefused: access denied).
func refusedStore(err error) bool {
	return errors.Is(err, store.ErrRefused)
}

// inputMissing reports whether err says the input object is missing or
// not what the ledger recorded.
func inputMissing(err error) bool {
	return errors.Is(err, ErrInputMissing) || errors.Is(err, store.ErrNotFound) ||
		errors.Is(err, store.ErrShortObject) || errors.Is(err, store.ErrHashMismatch)
}

// ObjectStore is what the worker uses of a run's object store;
// *store.Store implements it.
type ObjectStore interface {
	// ReadRange returns exactly n bytes of key from off (store.ErrShortObject
	// for a shorter object, store.ErrNotFound for none).
	ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error)
	// PutContent writes data, durably, under prefix + hex(blake3(data)).
	PutContent(ctx context.Context, prefix string, data []byte) (key string, sum store.Sum, uploaded bool, err error)
}

// StoreOpener opens the object store named by a run's store URL
// (RunSpec.store), with the environment's credentials.
type StoreOpener func(ctx context.Context, url string) (ObjectStore, error)

// OpenStore is the default StoreOpener: store.Open with WorkerStoreOptions.
func OpenStore(ctx context.Context, url string) (ObjectStore, error) {
	return store.Open(ctx, url, WorkerStoreOptions())
}

// WorkerStoreOptions are store.DefaultOptions with shorter bounds: a
// worker reads spans of input chunks (8 MiB at most) and writes one report
// batch's results, so one attempt gets 20 s and one operation 60 s. A
// stalled store then holds an item for about a minute, not
// Attempts × OpTimeout, before its attempt fails naming the object.
func WorkerStoreOptions() store.Options {
	o := store.DefaultOptions()
	o.OpTimeout, o.Deadline = 20*time.Second, time.Minute
	return o
}

// ObjectResults may be implemented by a Backend whose every result
// returned without error is one JSON object by construction (the mock's:
// its own framing around an encoded or canonically written string, or
// json.Marshal of an object). When ResultsAreObjects reports true the
// worker does not scan each result again to check that it is one; any
// other backend's results are checked (a result that is not a JSON object
// fails its item).
type ObjectResults interface {
	ResultsAreObjects() bool
}

// Summarizer may be implemented by a Backend: Summary returns a small
// digest of an item's result (a training step's loss and accuracy) that the
// ledger keeps with the item (ItemReport.summary), or nil for none. A
// summary over MaxSummaryBytes is dropped with a log line.
type Summarizer interface {
	Summary(it Item, result []byte) []byte
}

// MaxSummaryBytes caps a result summary (the ledger's
// Limits.max_summary_bytes default).
const MaxSummaryBytes = limits.MaxSummaryBytes

// Coalescing of ranged reads: references into the same object are read as
// one span when the span is at most spanSlack times the bytes referenced
// and at most maxSpanBytes.
const (
	spanSlack    = 2
	maxSpanBytes = 16 << 20
	// MaxRefBytes bounds the bytes one reference may name (a payload or a
	// result read whole into memory): a larger one is refused before any
	// read.
	MaxRefBytes = 256 << 20
)

// stores caches the opened stores of a worker, one per URL.
type stores struct {
	open StoreOpener
	mu   sync.Mutex
	m    map[string]ObjectStore
	// chunks holds the range chunks read whole and checked (chunkcheck.go).
	chunks chunkCache
}

// get returns the store of url, opening it the first time. A failed open
// is not cached (the next item tries again).
func (s *stores) get(ctx context.Context, url string) (ObjectStore, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.m[url]; ok {
		return st, nil
	}
	st, err := s.open(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: opening the run's store %s: %w", ErrData, errStoreFault, storeurl.Redact(url), err)
	}
	if s.m == nil {
		s.m = make(map[string]ObjectStore)
	}
	s.m[url] = st
	return st, nil
}

// close closes every opened store that is an io.Closer.
func (s *stores) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.m {
		if c, ok := st.(io.Closer); ok {
			_ = c.Close()
		}
	}
	s.m = nil
}

// readRefs reads the bytes of refs from st with as few ranged reads as the
// objects they name allow: the references into one object, by offset, are
// read as one span while the span stays within spanSlack times the bytes
// they reference and maxSpanBytes, else as separate spans. out[i] and
// errs[i] are refs[i]'s bytes or error (naming the object); out[i] may
// share memory with other entries and must not be modified.
func readRefs(ctx context.Context, st ObjectStore, refs []*rolloutv1.DataRef) (out [][]byte, errs []error, reads int) {
	out, errs = make([][]byte, len(refs)), make([]error, len(refs))
	order := make([]int, 0, len(refs))
	for i, r := range refs {
		if r.GetLength() > MaxRefBytes || r.GetOffset() > 1<<62 {
			errs[i] = fmt.Errorf("%w: the reference to bytes %d..+%d of object %q is over the limit of %d bytes",
				ErrData, r.GetOffset(), r.GetLength(), r.GetObject(), MaxRefBytes)
			continue
		}
		order = append(order, i)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ra, rb := refs[a], refs[b]
		if c := bytes.Compare([]byte(ra.GetObject()), []byte(rb.GetObject())); c != 0 {
			return c
		}
		switch {
		case ra.GetOffset() < rb.GetOffset():
			return -1
		case ra.GetOffset() > rb.GetOffset():
			return 1
		}
		return 0
	})
	for len(order) > 0 {
		// One span: refs of the same object while coalescing pays.
		first := refs[order[0]]
		start, end := first.GetOffset(), first.GetOffset()+first.GetLength()
		sum := first.GetLength()
		n := 1
		for ; n < len(order); n++ {
			r := refs[order[n]]
			if r.GetObject() != first.GetObject() {
				break
			}
			e := max(end, r.GetOffset()+r.GetLength())
			s := sum + r.GetLength()
			if e-start > maxSpanBytes || e-start > spanSlack*s {
				break
			}
			end, sum = e, s
		}
		span, idx := order[:n], order[n:]
		order = idx
		b, err := st.ReadRange(ctx, first.GetObject(), int64(start), int64(end-start))
		reads++
		if errors.Is(err, store.ErrShortObject) && len(span) > 1 {
			// The object ends inside the span: read its references one by
			// one, so that those it holds whole still get their bytes.
			for _, i := range span {
				r := refs[i]
				b, err := st.ReadRange(ctx, r.GetObject(), int64(r.GetOffset()), int64(r.GetLength()))
				reads++
				if err != nil {
					errs[i] = fmt.Errorf("%w: reading object %q: %w", ErrData, r.GetObject(), err)
					continue
				}
				out[i] = b
			}
			continue
		}
		for _, i := range span {
			if err != nil {
				errs[i] = fmt.Errorf("%w: reading object %q: %w", ErrData, refs[i].GetObject(), err)
				continue
			}
			off := refs[i].GetOffset() - start
			out[i] = b[off : off+refs[i].GetLength() : off+refs[i].GetLength()]
		}
	}
	return out, errs, reads
}

// checkRef verifies b against ref's blake3 (when set).
func checkRef(ref *rolloutv1.DataRef, b []byte) error {
	h := ref.GetBlake3()
	if len(h) == 0 {
		return nil
	}
	if len(h) != 32 {
		return fmt.Errorf("%w: the reference into object %q has a blake3 of %d bytes, want 32", ErrData, ref.GetObject(), len(h))
	}
	if sum := store.Hash(b); !bytes.Equal(sum[:], h) {
		return fmt.Errorf("%w: bytes %d..%d of object %q do not match their recorded blake3 (%w)",
			ErrData, ref.GetOffset(), ref.GetOffset()+ref.GetLength(), ref.GetObject(), store.ErrHashMismatch)
	}
	return nil
}

// checkPayload verifies an item's payload read through ref: against the
// ref's blake3 when it has one; else, for a batch item (kind ""), by
// recomputing the item's sample id from the bytes (batch.SampleIDOfLine);
// a reference of another kind without a blake3 cannot be checked and is
// refused.
func checkPayload(it Item, ref *rolloutv1.DataRef, b []byte) error {
	if len(ref.GetBlake3()) > 0 {
		return checkRef(ref, b)
	}
	if it.Kind != "" {
		return fmt.Errorf("%w: the payload reference into object %q has no blake3, and an item of kind %q has no other check", ErrData, ref.GetObject(), it.Kind)
	}
	sp, err := batch.ParseSamplingJSON(it.Sampling)
	if err != nil {
		return fmt.Errorf("%w: the run's sampling parameters: %w", ErrData, err)
	}
	id := batch.SampleIDOfLine(it.Model, b, sp, it.Index)
	if !bytes.Equal(id[:], it.ID) {
		return fmt.Errorf("%w: %w: bytes %d..%d of object %q are not item %d's input: their sample id is %x, the item's is %x (the object changed or the reference is wrong)",
			ErrData, ErrInputMissing, ref.GetOffset(), ref.GetOffset()+ref.GetLength(), ref.GetObject(), it.Index, id[:8], it.ID[:min(8, len(it.ID))])
	}
	return nil
}

// fetchGroup reads the payloads of the items of one delivery (a claim, a
// steal, an adoption) that live in one store, once, for all of them: the
// first executor that needs one of them starts the read.
type fetchGroup struct {
	url  string
	refs []*rolloutv1.DataRef
	once sync.Once
	done chan struct{}
	data [][]byte
	errs []error
}

// payload returns the payload of the group's i-th item, starting the read
// (bounded by ctx, the executors' context) if it is not under way. It
// returns early with ictx's error when the item's own context ends.
func (g *fetchGroup) payload(ctx, ictx context.Context, w *Worker, i int) ([]byte, error) {
	g.once.Do(func() {
		go func() {
			defer close(g.done)
			st, err := w.stores.get(ctx, g.url)
			if err != nil {
				g.errs = make([]error, len(g.refs))
				for j := range g.errs {
					g.errs[j] = err
				}
				return
			}
			var n int
			g.data, g.errs, n = readRefs(ctx, st, g.refs)
			w.countStore(n, 0)
		}()
	})
	select {
	case <-g.done:
	case <-ictx.Done():
		return nil, ictx.Err()
	}
	if g.errs[i] != nil {
		return nil, g.errs[i]
	}
	return g.data[i], nil
}

// dataRef is how an entry's data lives in its run's store.
type dataRef struct {
	store   string               // the run's store URL; "" for inline data
	results string               // where its result objects go (resultPrefix)
	group   *fetchGroup          // the payload's read, when by reference
	index   int                  // the payload's index in group
	payload *rolloutv1.DataRef   // the payload's reference
	deps    []*rolloutv1.DataRef // Deps[i]'s result reference, or nil
}

// faultKey names what a fault loading d is counted against (faultBackoff):
// its payload's object, or its dependencies' results when it has none.
func (d *dataRef) faultKey() string {
	if d.payload != nil {
		return d.store + "\x00" + d.payload.GetObject()
	}
	return d.store + "\x00deps"
}

// storeObject names the object a store-unreachable hold of d reports:
// its payload's object, else its first dependency result's ("" for none).
func (d *dataRef) storeObject() string {
	if d.payload != nil {
		return d.payload.GetObject()
	}
	for _, ref := range d.deps {
		if ref.GetObject() != "" {
			return ref.GetObject()
		}
	}
	return ""
}

// newDataRefs returns, for each item of one delivery, its dataRef (nil for
// an item without references), grouping the payload references of the
// items that share a store.
func newDataRefs(items []*rolloutv1.Item) []*dataRef {
	out := make([]*dataRef, len(items))
	groups := make(map[string]*fetchGroup)
	for i, it := range items {
		if it.GetStore() == "" {
			continue
		}
		d := &dataRef{store: it.GetStore(), results: resultPrefix(it)}
		for _, dep := range it.GetDeps() {
			d.deps = append(d.deps, dep.GetResultRef())
		}
		if ref := it.GetPayloadRef(); ref != nil {
			g := groups[it.GetStore()]
			if g == nil {
				g = &fetchGroup{url: it.GetStore(), done: make(chan struct{})}
				groups[it.GetStore()] = g
			}
			d.payload, d.group, d.index = ref, g, len(g.refs)
			g.refs = append(g.refs, ref)
		}
		out[i] = d
	}
	return out
}

// loadData fills item's payload and its dependencies' results from the
// run's store (d), checking each against what the ledger recorded. An
// error names the object; the backend must not run.
func (w *Worker) loadData(ctx, ictx context.Context, d *dataRef, item Item) (Item, error) {
	if d == nil {
		return item, nil
	}
	if d.group != nil {
		b, err := d.group.payload(ctx, ictx, w, d.index)
		if err == nil {
			err = checkPayload(item, d.payload, b)
		}
		if err != nil {
			if inputMissing(err) && !errors.Is(err, ErrInputMissing) {
				err = fmt.Errorf("%w: %w", ErrInputMissing, err)
			}
			return item, fmt.Errorf("payload: %w", err)
		}
		item.Payload = b
	}
	var refs []*rolloutv1.DataRef
	var at []int
	for i, r := range d.deps {
		if r != nil && i < len(item.Deps) {
			refs, at = append(refs, r), append(at, i)
		}
	}
	if len(refs) == 0 {
		return item, nil
	}
	for _, r := range refs {
		if len(r.GetBlake3()) == 0 {
			return item, fmt.Errorf("%w: a dependency's result reference into object %q has no blake3", ErrData, r.GetObject())
		}
	}
	st, err := w.stores.get(ictx, d.store)
	if err != nil {
		return item, err
	}
	data, errs, n := readRefs(ictx, st, refs)
	w.countStore(n, 0)
	deps := slices.Clone(item.Deps)
	for j, i := range at {
		if errs[j] != nil {
			return item, fmt.Errorf("dependency %d's result: %w", i, errs[j])
		}
		if err := checkRef(refs[j], data[j]); err != nil {
			return item, fmt.Errorf("dependency %d's result: %w", i, err)
		}
		deps[i].Result = data[j]
	}
	item.Deps = deps
	return item, nil
}

// storeResults writes the Done results of batch whose runs have a store
// and no result reference yet: one content-addressed object per run
// (its run's result prefix: resultPrefix), the results concatenated; each outcome then
// carries its reference (blake3 of its own bytes) and no inline result. A
// run whose write fails after the store's retries has its outcomes turned
// into failures naming the store error: no reference is reported to bytes
// that are not stored. A write that failed with a fault that may go away
// (transientStore: unreachable, slow, 5xx, a full disk) fails nothing:
// its outcomes are returned (deferred), and the store is not written
// again before its backoff (the per-object backoff, keyed by the store)
// passes; outcomes of a store in its backoff are deferred unwritten.
func (w *Worker) storeResults(ctx context.Context, batch []*outcome) (deferred []*outcome) {
	type runKey struct{ run, url, results string }
	byRun := make(map[runKey][]*outcome)
	var keys []runKey
	for _, o := range batch {
		if o.kind != rolloutv1.Outcome_OUTCOME_DONE || o.e.data == nil || o.e.data.store == "" || o.ref != nil {
			continue
		}
		k := runKey{o.e.item.Run, o.e.data.store, o.e.data.results}
		if _, ok := byRun[k]; !ok {
			keys = append(keys, k)
		}
		byRun[k] = append(byRun[k], o)
	}
	for _, k := range keys {
		outs := byRun[k]
		if w.resultBackoff(k.url, time.Now()) {
			deferred = append(deferred, outs...)
			continue
		}
		var buf bytes.Buffer
		for _, o := range outs {
			buf.Write(o.result)
		}
		key, _, err := w.putResults(ctx, k.url, k.results, buf.Bytes())
		if err != nil && transientStore(err) && ctx.Err() == nil {
			d := w.faults.fault(resultFaultKey(k.url))
			w.mu.Lock()
			if w.resultRetry == nil {
				w.resultRetry = make(map[string]time.Time)
			}
			w.resultRetry[k.url] = time.Now().Add(d)
			w.mu.Unlock()
			w.log.Warn("writing results to the run's store failed; holding them and writing again after a backoff (no failure counted)",
				"run", k.run, "store", storeurl.Redact(k.url), "items", len(outs), "retry_in", d, "error", err)
			deferred = append(deferred, outs...)
			continue
		}
		if err != nil {
			reason := fmt.Sprintf("%v: writing the results to the run's store: %v", ErrData, err)
			w.log.Warn("writing results to the run's store failed; failing their attempts", "run", k.run,
				"store", storeurl.Redact(k.url), "items", len(outs), "error", err)
			for _, o := range outs {
				o.kind, o.result, o.reason = rolloutv1.Outcome_OUTCOME_FAILED, nil, limits.CleanReason(reason)
			}
			continue
		}
		w.countStore(0, 1)
		w.faults.ok(resultFaultKey(k.url))
		off := uint64(0)
		for _, o := range outs {
			sum := store.Hash(o.result)
			o.ref = &rolloutv1.DataRef{Object: key, Offset: off, Length: uint64(len(o.result)), Blake3: sum[:]}
			off += uint64(len(o.result))
			o.result = nil
		}
	}
	return deferred
}

// resultFaultKey is what faultBackoff counts result-write faults of the
// store at url against.
func resultFaultKey(url string) string { return url + "\x00results" }

// resultBackoff reports whether the store at url is in its result-write
// backoff at now.
func (w *Worker) resultBackoff(url string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return now.Before(w.resultRetry[url])
}

// resultPrefix is where the results of it go: its run's result prefix
// (Item.data_prefix + "results/"), or "runs/NAME/results/" from a
// coordinator that names none.
func resultPrefix(it *rolloutv1.Item) string {
	return store.RunResults(it.GetRun(), it.GetDataPrefix())
}

// putResults stores data as one content-addressed object under prefix (a
// run's result prefix) in the store at url.
func (w *Worker) putResults(ctx context.Context, url, prefix string, data []byte) (string, store.Sum, error) {
	st, err := w.stores.get(ctx, url)
	if err != nil {
		return "", store.Sum{}, err
	}
	key, sum, _, err := st.PutContent(ctx, prefix, data)
	return key, sum, err
}

// countStore adds to the store counters of Stats.
func (w *Worker) countStore(reads, writes int) {
	w.mu.Lock()
	w.st.StoreReads += uint64(reads)
	w.st.StoreWrites += uint64(writes)
	w.mu.Unlock()
}
