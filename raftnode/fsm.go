package raftnode

import (
	"io"
	"reflect"
	"sync"
	"sync/atomic"

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
// of its entry.
type fsmAdapter struct {
	inner raft.FSM

	applied  atomic.Uint64 // last index the FSM goroutine finished
	restored atomic.Bool   // a snapshot was restored and nothing applied since

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

func newFSMAdapter(inner raft.FSM) *fsmAdapter {
	return &fsmAdapter{inner: inner, waiters: make(map[*appliedWaiter]struct{})}
}

// Apply forwards a command entry to the user FSM.
func (f *fsmAdapter) Apply(l *raft.Log) any {
	resp := asResults(f.inner.Apply(l))
	f.advance(l.Index)
	return entryResult{term: l.Term, resp: resp}
}

// asResults turns a typed slice of per-command results (such as
// []fsm.Result) into the []any the proposer hands out; anything else is
// returned as it is.
func asResults(resp any) any {
	switch resp.(type) {
	case nil, []any, error:
		return resp
	}
	v := reflect.ValueOf(resp)
	if v.Kind() != reflect.Slice {
		return resp
	}
	out := make([]any, v.Len())
	for i := range out {
		out[i] = v.Index(i).Interface()
	}
	return out
}

// StoreConfiguration is called by raft, on the FSM goroutine, for each
// committed configuration entry; it forwards to the user FSM if that stores
// configurations too. Implementing it makes configuration entries advance the
// applied index, which read-index waits rely on.
func (f *fsmAdapter) StoreConfiguration(index uint64, c raft.Configuration) {
	if cs, ok := f.inner.(raft.ConfigurationStore); ok {
		cs.StoreConfiguration(index, c)
	}
	f.advance(index)
}

// Snapshot forwards to the user FSM.
func (f *fsmAdapter) Snapshot() (raft.FSMSnapshot, error) { return f.inner.Snapshot() }

// Restore forwards to the user FSM.
func (f *fsmAdapter) Restore(rc io.ReadCloser) error {
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
