package raftnode

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// entryResult is what the adapter returns to raft for each command entry; the
// leader's ApplyFuture.Response carries it back to the proposer.
type entryResult struct {
	term uint64 // term of the log entry (raft.Log.Term)
	resp any    // what the user FSM's Apply returned
}

// fsmAdapter wraps the user FSM. It records the last log index the user FSM
// has consumed (raft.AppliedIndex only says what was handed to the FSM
// goroutine), wakes read-index waiters, and tags each result with the term
// of its entry. When Config.FatalResult classifies a result as fatal it
// latches: from then on it never calls the user FSM again and its applied
// index stays where it was (hashicorp/raft keeps handing it entries).
type fsmAdapter struct {
	inner       raft.FSM
	fatalResult func(any) error // Config.FatalResult; nil: nothing is fatal
	dbPath      string          // DataDir/raft.db, named in the fatal error
	snapDir     string          // DataDir/snapshots, checked before each snapshot
	logger      hclog.Logger
	observer    Observer // Config.Observer; nil observes nothing

	applied  atomic.Uint64 // last index the FSM goroutine finished
	restored atomic.Bool   // a snapshot was restored and nothing applied since

	fatal     atomic.Pointer[error] // the latched fatal error, nil while healthy
	latched   chan struct{}         // closed once fatal is set
	stopped   chan struct{}         // closed by the node once raft is shut down after a latch
	latchOnce sync.Once

	nwaiters atomic.Int64
	mu       sync.Mutex
	waiters  map[*appliedWaiter]struct{}
}

var (
	_ raft.FSM                = (*fsmAdapter)(nil)
	_ raft.ConfigurationStore = (*fsmAdapter)(nil)
)

// appliedWaiter is closed once the applied index reaches index.
type appliedWaiter struct {
	index uint64
	ch    chan struct{}
}

func newFSMAdapter(inner raft.FSM, cfg Config) *fsmAdapter {
	return &fsmAdapter{
		inner:       inner,
		fatalResult: cfg.FatalResult,
		dbPath:      filepath.Join(cfg.DataDir, dbFile),
		snapDir:     filepath.Join(cfg.DataDir, snapshotDir),
		logger:      cfg.logger(),
		observer:    cfg.Observer,
		latched:     make(chan struct{}),
		stopped:     make(chan struct{}),
		waiters:     make(map[*appliedWaiter]struct{}),
	}
}

// Apply forwards a command entry to the user FSM, unless the adapter has
// latched a fatal result: then the entry is not applied and its callers get
// the fatal error.
func (f *fsmAdapter) Apply(l *raft.Log) any {
	if err := f.fatalErr(); err != nil {
		return entryResult{term: l.Term, resp: err}
	}
	start := time.Now()
	raw := f.inner.Apply(l)
	if f.observer != nil {
		f.observer.ObserveApply(l.Index, time.Since(start))
	}
	if f.fatalResult != nil {
		if cause := f.fatalResult(raw); cause != nil {
			err := fmt.Errorf("%w: %s (%s), log entry %d (term %d): %w", ErrFatalApply, dbFile, f.dbPath, l.Index, l.Term, cause)
			f.latch(err)
			return entryResult{term: l.Term, resp: err}
		}
	}
	f.advance(l.Index)
	return entryResult{term: l.Term, resp: raw}
}

// latch records the first fatal error and wakes the node's watcher.
func (f *fsmAdapter) latch(err error) {
	f.latchOnce.Do(func() {
		f.fatal.Store(&err)
		close(f.latched)
	})
}

// fatalErr returns the latched fatal error, or nil.
func (f *fsmAdapter) fatalErr() error {
	if p := f.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

// Results is what FSM.Apply returns for a command entry that it applied: the
// per-command results, in the order of the batch's commands. Len must equal
// the number of commands; At(i) is command i's result, handed to its caller
// as Applied.Result. A plain []any is accepted too; an FSM with a typed
// result gives its result slice these two methods (as fsm.Results does), so
// that results reach callers with their own types and no reflection.
type Results interface {
	Len() int
	At(i int) any
}

// anyResults is a []any as Results.
type anyResults []any

func (r anyResults) Len() int     { return len(r) }
func (r anyResults) At(i int) any { return r[i] }

// entryResults reads what the adapter returned for a command entry of count
// commands: the entry's term and its per-command results. An error value the
// FSM returned for the whole entry is returned as it is; any other shape, or
// a result count other than count, is an error wrapping ErrFSMContract.
func entryResults(resp any, count int) (uint64, Results, error) {
	er, ok := resp.(entryResult)
	if !ok {
		return 0, nil, fmt.Errorf("%w: entry returned %T", ErrFSMContract, resp)
	}
	var rs Results
	switch r := er.resp.(type) {
	case error:
		return er.term, nil, r
	case []any:
		rs = anyResults(r)
	case Results:
		rs = r
	default:
		return er.term, nil, fmt.Errorf("%w: entry returned %T, want Results, []any or error", ErrFSMContract, er.resp)
	}
	if rs.Len() != count {
		return er.term, nil, fmt.Errorf("%w: entry of %d commands returned %d results", ErrFSMContract, count, rs.Len())
	}
	return er.term, rs, nil
}

// StoreConfiguration is called by raft, on the FSM goroutine, for each
// committed configuration entry; it forwards to the user FSM if that stores
// configurations too. Implementing it makes configuration entries advance the
// applied index, which read-index waits rely on.
func (f *fsmAdapter) StoreConfiguration(index uint64, c raft.Configuration) {
	if f.fatalErr() != nil {
		return
	}
	if cs, ok := f.inner.(raft.ConfigurationStore); ok {
		cs.StoreConfiguration(index, c)
	}
	f.advance(index)
}

// Snapshot checks the snapshot directory and forwards to the user FSM. A
// path that exists but is not a directory fails the snapshot with an error
// wrapping ErrSnapshotStore that names it (raft logs it and keeps running,
// with its log uncompacted). A directory deleted while running is logged as
// an error and recreated by the snapshot being taken, which covers the
// whole state, so the data directory is whole again. A latched adapter
// takes no snapshot: its FSM is behind the index raft would record.
func (f *fsmAdapter) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.fatalErr(); err != nil {
		return nil, err
	}
	fi, err := os.Stat(f.snapDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		f.logger.Error("snapshot directory is missing (deleted while running?); the snapshot being taken recreates it", "path", f.snapDir)
	case err != nil:
		err = fmt.Errorf("%w: %s: %v", ErrSnapshotStore, f.snapDir, err)
		f.logger.Error("cannot take a snapshot", "error", err)
		return nil, err
	case !fi.IsDir():
		err = fmt.Errorf("%w: %s is not a directory", ErrSnapshotStore, f.snapDir)
		f.logger.Error("cannot take a snapshot", "error", err)
		return nil, err
	}
	return f.inner.Snapshot()
}

// Restore forwards to the user FSM (a latched adapter refuses: the node is
// stopping).
func (f *fsmAdapter) Restore(rc io.ReadCloser) error {
	if err := f.fatalErr(); err != nil {
		_ = rc.Close()
		return err
	}
	if err := f.inner.Restore(rc); err != nil {
		return err
	}
	f.restored.Store(true)
	return nil
}

// advance records that the FSM has consumed index and wakes waiters.
func (f *fsmAdapter) advance(index uint64) {
	f.applied.Store(index)
	f.restored.Store(false)
	// Dekker pairing with waitApplied: we store applied then load nwaiters;
	// it increments nwaiters then loads applied. One of us sees the other.
	if f.nwaiters.Load() == 0 {
		return
	}
	f.mu.Lock()
	for w := range f.waiters {
		if w.index <= index {
			close(w.ch)
			delete(f.waiters, w)
			f.nwaiters.Add(-1)
		}
	}
	f.mu.Unlock()
}

// waitApplied returns a channel closed once the FSM has consumed index, and
// a func that abandons the wait.
func (f *fsmAdapter) waitApplied(index uint64) (<-chan struct{}, func()) {
	w := &appliedWaiter{index: index, ch: make(chan struct{})}
	f.mu.Lock()
	f.waiters[w] = struct{}{}
	f.nwaiters.Add(1)
	f.mu.Unlock()
	if f.applied.Load() >= index {
		f.drop(w, true)
	}
	return w.ch, func() { f.drop(w, false) }
}

// drop removes w, closing its channel if closeIt and it is still registered.
func (f *fsmAdapter) drop(w *appliedWaiter, closeIt bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.waiters[w]; !ok {
		return
	}
	delete(f.waiters, w)
	f.nwaiters.Add(-1)
	if closeIt {
		close(w.ch)
	}
}
