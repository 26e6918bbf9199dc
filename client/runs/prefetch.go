package runs

import (
	"context"
	"sync"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// aheadObjects bounds the objects an aheadWalk holds at once: being read,
// or read and waiting for the records that name them to be rendered.
const aheadObjects = 16

// unknownResultBytes is what an aheadWalk counts for a result object whose
// reference records no length.
const unknownResultBytes = 4 << 20

// aheadWalk runs a rangeWalk fed from another goroutine: add, called with
// the run's records in index order as the ledger's pages bring them,
// starts reading the objects each record needs (readChunk, readResults)
// at once, each on a goroutine of its own, and queues the record; the
// walk renders the queued records in their order on its own goroutine,
// each once its objects are read. Reads are bounded: at most aheadObjects
// objects, and at most maxBytes bytes of them (a chunk's lines part, a
// result object's recorded length), are held at once, being read or
// waiting to be rendered; add waits for room. (When no queued record is
// left, the objects of one record and of the record before it, at most
// four, are held whatever their size.) Records that name the same object
// as the record before them share its one read. The lines rendered from a
// chunk stay in memory until written (at most GOMAXPROCS+2 batches of
// renderBatch lines, writeLines), beyond these bounds.
type aheadWalk struct {
	w      *rangeWalk
	ctx    context.Context // cancelled when the walk ends
	cancel context.CancelFunc
	steps  chan aheadStep
	done   chan struct{} // closed when the walk has returned; err is why
	err    error
	reads  sync.WaitGroup

	mu       sync.Mutex
	maxBytes int64
	held     int64         // bytes counted by the objects held
	objects  int           // objects held
	pending  int           // records queued and not yet rendered
	freed    chan struct{} // closed (and replaced) when a record is rendered
	stats    *aheadStats

	// The objects of the last record added, which the next one may share.
	chunk, res *aheadRead
}

// aheadStats counts what an aheadWalk read and held at most (a test's
// window on the read-ahead's bounds: ResultsConfig.ahead).
type aheadStats struct {
	mu sync.Mutex
	// reads counts the objects read; maxObjects and maxBytes are the most
	// objects, and bytes, held at once.
	reads, maxObjects int
	maxBytes          int64
}

// count records that objects objects of held bytes are held, after reads
// more were read.
func (s *aheadStats) count(reads, objects int, held int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads += reads
	s.maxObjects = max(s.maxObjects, objects)
	s.maxBytes = max(s.maxBytes, held)
}

// snapshot returns the counts so far.
func (s *aheadStats) snapshot() (reads, maxObjects int, maxBytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads, s.maxObjects, s.maxBytes
}

// aheadRead is one object being read ahead. ready is closed once chunk or
// res is set.
type aheadRead struct {
	// ref names the object (set before the read starts).
	ref    *rolloutv1.DataRef
	ready  chan struct{}
	chunk  *chunkObject
	res    *resultObject
	weight int64
	// refs counts the queued records that use the object, and one more
	// while it is the last record's (aheadWalk.chunk or res): the object
	// is let go when none is left.
	refs int
}

// aheadStep is a queued record with the reads of the objects it needs
// (nil: not needed).
type aheadStep struct {
	rec        *rolloutv1.ResultItem
	chunk, res *aheadRead
}

// newAheadWalk starts w's goroutine. maxBytes <= 0 is DefaultCacheBytes;
// stats, when set, counts what the walk held. Call add for each record,
// then finish, always.
func newAheadWalk(ctx context.Context, w *rangeWalk, maxBytes int64, stats *aheadStats) *aheadWalk {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	if stats == nil {
		stats = &aheadStats{}
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &aheadWalk{w: w, ctx: ctx, cancel: cancel, steps: make(chan aheadStep, 4*maxLinesParsed),
		done: make(chan struct{}), maxBytes: maxBytes, freed: make(chan struct{}), stats: stats}
	go a.render()
	return a
}

// add queues the record it, first starting the reads of the objects it
// needs that the record before it did not name (waiting for room). It
// returns the walk's error once the walk has stopped.
func (a *aheadWalk) add(it *rolloutv1.ResultItem) error {
	select {
	case <-a.done:
		return a.err
	default:
	}
	needChunk, needRes := a.w.needs(it)
	st := aheadStep{rec: it}
	var fresh []*aheadRead
	var start []func()
	if needChunk {
		pr := it.GetPayloadRef()
		if a.chunk == nil || !sameChunk(a.chunk.ref, pr) {
			a.unref(a.chunk) // no longer the last record's
			r := &aheadRead{ref: pr, ready: make(chan struct{}), weight: int64(min(pr.GetLength(), 1<<40)), refs: 1}
			a.chunk = r
			fresh = append(fresh, r)
			start = append(start, func() { r.chunk = readChunk(a.ctx, a.w.st, pr) })
		}
		st.chunk = a.chunk
	}
	if needRes {
		ref := it.GetResultRef()
		if a.res == nil || !sameResults(a.res.ref, ref) {
			a.unref(a.res)
			w := int64(min(ref.GetLength(), 1<<40))
			if w == 0 {
				w = unknownResultBytes
			}
			r := &aheadRead{ref: ref, ready: make(chan struct{}), weight: w, refs: 1}
			a.res = r
			fresh = append(fresh, r)
			start = append(start, func() { r.res = readResults(a.ctx, a.w.st, ref) })
		}
		st.res = a.res
	}
	if len(fresh) > 0 {
		if err := a.room(fresh); err != nil {
			return a.stopped(err)
		}
		for k, r := range fresh {
			a.reads.Add(1)
			go func() {
				defer a.reads.Done()
				defer close(r.ready)
				start[k]()
			}()
		}
	}
	a.mu.Lock()
	if st.chunk != nil {
		st.chunk.refs++
	}
	if st.res != nil {
		st.res.refs++
	}
	a.pending++
	a.mu.Unlock()
	select {
	case a.steps <- st:
		return nil
	case <-a.done:
		return a.err
	}
}

// stopped is add's error when waiting failed (err): the walk's own error
// when it stopped.
func (a *aheadWalk) stopped(err error) error {
	select {
	case <-a.done:
		if a.err != nil {
			return a.err
		}
	default:
	}
	return err
}

// room waits until the objects rs can be held and counts them held: until
// they fit under both bounds, or no queued record is left to render (the
// objects still held are then the last record's, which the next one may
// share: waiting would free nothing).
func (a *aheadWalk) room(rs []*aheadRead) error {
	var weight int64
	for _, r := range rs {
		weight += r.weight
	}
	for {
		a.mu.Lock()
		if a.pending == 0 || (a.objects+len(rs) <= aheadObjects && a.held+weight <= a.maxBytes) {
			a.objects += len(rs)
			a.held += weight
			a.stats.count(len(rs), a.objects, a.held)
			a.mu.Unlock()
			return nil
		}
		freed := a.freed
		a.mu.Unlock()
		select {
		case <-freed:
		case <-a.ctx.Done():
			return a.ctx.Err()
		}
	}
}

// unref drops one reference to r (nil: none); the last one lets the
// object go.
func (a *aheadWalk) unref(r *aheadRead) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unrefLocked(r)
}

func (a *aheadWalk) unrefLocked(r *aheadRead) {
	if r == nil {
		return
	}
	r.refs--
	if r.refs == 0 {
		a.held -= r.weight
		a.objects--
	}
}

// rendered lets go of a rendered record's objects, and wakes room.
func (a *aheadWalk) rendered(st aheadStep) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unrefLocked(st.chunk)
	a.unrefLocked(st.res)
	a.pending--
	close(a.freed)
	a.freed = make(chan struct{})
}

// render renders the queued records in order, each once its objects are
// read, until the queue is closed or a record's rendering fails.
func (a *aheadWalk) render() {
	defer close(a.done)
	for st := range a.steps {
		var err error
		if st.chunk != nil {
			err = a.wait(st.chunk)
		}
		if err == nil && st.res != nil {
			err = a.wait(st.res)
		}
		if err == nil {
			var chunk *chunkObject
			var res *resultObject
			if st.chunk != nil {
				chunk = st.chunk.chunk
			}
			if st.res != nil {
				res = st.res.res
			}
			err = a.w.step(a.ctx, st.rec, chunk, res)
		}
		a.rendered(st)
		if err != nil {
			a.err = err
			a.cancel()
			return
		}
	}
}

// wait waits for r's read.
func (a *aheadWalk) wait(r *aheadRead) error {
	select {
	case <-r.ready:
		return nil
	case <-a.ctx.Done():
		return a.ctx.Err()
	}
}

// finish ends the walk after the last add: resultsErr is why the records
// stopped coming (nil: all were added). It waits for the walk and every
// read, and returns resultsErr, else the walk's error.
func (a *aheadWalk) finish(resultsErr error) error {
	if resultsErr != nil {
		a.cancel()
	}
	close(a.steps)
	<-a.done
	a.cancel()
	a.reads.Wait()
	if resultsErr != nil {
		return resultsErr
	}
	return a.err
}
