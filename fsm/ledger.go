package fsm

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// Ledger is the work ledger: the replicated state machine of a rollout
// coordinator. Raft calls Apply, Snapshot and Restore from one goroutine; every read method may be called from any goroutine at any
// time and returns copies.
type Ledger struct {
	cfg Config

	mu sync.RWMutex
	st *state
	// pendingCh is closed by the Apply that adds pending items; see
	// PendingSignal.
	pendingCh chan struct{}
	// addedPending is set by command handlers that put items in the pending
	// queue, and consumed when the Apply call ends.
	addedPending bool
	// ev is the event recorder's signal and per-Apply scratch (events.go).
	ev eventScratch
}

var _ raft.FSM = (*Ledger)(nil)

// Results is what Apply returns for a command entry: one Result per command
// of the entry, in order. Len and At let a generic proposer (package
// raftnode's Results contract) hand each caller its own Result, typed,
// without knowing this package.
type Results []Result

// Len returns the number of results.
func (r Results) Len() int { return len(r) }

// At returns result i (a Result).
func (r Results) At(i int) any { return r[i] }

// New returns an empty ledger, or an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Ledger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Ledger{cfg: cfg, st: newState(), pendingCh: make(chan struct{}), ev: eventScratch{ch: make(chan struct{})}}, nil
}

// Apply applies one committed Raft log. For a LogCommand whose data decodes as
// an fsmpb.Entry and passes its checksum it returns Results, one per command
// in order; for data that does not decode or fails its checksum it returns
// an error wrapping ErrCorruptEntry and changes nothing; for any other log
// type it returns nil.
//
// Apply is deterministic: its outcome depends only on the ledger's state,
// the log's Term and Data, and the Config.
func (l *Ledger) Apply(lg *raft.Log) interface{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	res := l.applyLocked(lg)
	l.signalLocked()
	l.endEventsLocked()
	return res
}

// signalLocked wakes the long-pollers if this Apply added pending items.
func (l *Ledger) signalLocked() {
	if (l.addedPending || l.st.pending.woke) && l.st.pending.len > 0 {
		close(l.pendingCh)
		l.pendingCh = make(chan struct{})
	}
	l.addedPending = false
	l.st.pending.woke = false
}

func (l *Ledger) applyLocked(lg *raft.Log) interface{} {
	if lg == nil {
		return fmt.Errorf("%w: nil log", ErrInvalidCommand)
	}
	if lg.Type != raft.LogCommand {
		return nil
	}
	e, err := decodeEntry(lg) // checksum.go: verified before anything else
	if err != nil {
		return err
	}
	st := l.st
	results := make(Results, len(e.Commands))
	if epochEnforced && (lg.Term < st.epoch || (e.Epoch != 0 && e.Epoch < st.epoch)) {
		err := fmt.Errorf("%w: entry of term %d, epoch %d; ledger epoch is %d", ErrStaleEpoch, lg.Term, e.Epoch, st.epoch)
		for i := range results {
			results[i].Err = err
		}
		return results
	}
	if e.NowUnixNano > st.now {
		st.now = e.NowUnixNano
	}
	l.decayUsage() // tenants.go: the usage decays with the stamped time
	var c fsmpb.Command
	for i, raw := range e.Commands {
		c.Reset()
		if err := proto.Unmarshal(raw, &c); err != nil {
			results[i].Err = fmt.Errorf("%w: command %d does not decode: %v", ErrInvalidCommand, i, err)
			continue
		}
		results[i] = l.applyRecorded(lg.Term, &c) // events.go: the command's spec applies it and records its events
	}
	return results
}

// Epoch returns the ledger's epoch: the Raft term of the last applied
// EpochCmd.
func (l *Ledger) Epoch() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.st.epoch
}

// Leader returns the leader named by the last applied EpochCmd and its gRPC
// address as currently recorded in its member record ("" if the member was
// removed since).
func (l *Ledger) Leader() (id, grpcAddr string) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.st.leaderID, l.st.members[l.st.leaderID].GRPCAddr
}

// Now returns the newest stamped time applied (the zero Time before any).
func (l *Ledger) Now() time.Time {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return unixTime(l.st.now)
}

// Members returns the recorded coordinator members sorted by ID.
func (l *Ledger) Members() []Member {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]Member, 0, len(l.st.members))
	for _, m := range l.st.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Member returns the member with the given id.
func (l *Ledger) Member(id string) (Member, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	m, ok := l.st.members[id]
	return m, ok
}

// Run returns the status of the named run, or an error wrapping
// ErrRunNotFound.
func (l *Ledger) Run(name string) (RunStatus, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r := l.st.runs[name]
	if r == nil {
		return RunStatus{}, fmt.Errorf("%w: %q", ErrRunNotFound, name)
	}
	return r.status(), nil
}

// Runs returns the status of every run in creation order.
func (l *Ledger) Runs() []RunStatus {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]RunStatus, len(l.st.runOrder))
	for i, r := range l.st.runOrder {
		out[i] = r.status()
	}
	return out
}

func (r *run) status() RunStatus {
	var ranges uint64
	if r.ranged {
		ranges = uint64(len(r.items))
	}
	return RunStatus{
		Ranges:      ranges,
		Name:        r.name,
		Spec:        proto.Clone(r.spec).(*fsmpb.RunSpec),
		Total:       r.total,
		Pending:     r.pending,
		Running:     r.running,
		Done:        r.done,
		Dead:        r.dead,
		Blocked:     r.blocked,
		Cancelled:   r.cancelledN,
		IsCancelled: r.cancelled,
		Failures:    r.failures,
		CreatedAt:   unixTime(r.created),
		FinishedAt:  unixTime(r.finished),
		Stall:       r.stallOut(),
	}
}

// Workers returns every known worker, lost ones included, sorted by ID.
func (l *Ledger) Workers() []WorkerStatus {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]WorkerStatus, 0, len(l.st.workers))
	for _, w := range l.st.workers {
		ws := WorkerStatus{
			ID:            w.id,
			Running:       w.runningIndexes(),
			Backlog:       w.backlog,
			ItemsPerSec:   w.itemsPerSec,
			LastHeartbeat: unixTime(w.lastHeartbeat),
			Lost:          w.lost,
			Completed:     w.completed,
			Kinds:         w.kindNames(),
			Models:        slices.Clone(w.models),
		}
		if len(w.executing) > 0 {
			ws.Executing = make([]ItemKey, len(w.executing))
			for i, k := range w.executing {
				ws.Executing[i] = ItemKey{Run: k.run, ID: []byte(k.id), Attempt: k.attempt}
			}
		}
		out = append(out, ws)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Owned returns the Running items owned by worker, in claim order (nil for
// an unknown worker).
func (l *Ledger) Owned(worker string) []Item {
	l.mu.RLock()
	defer l.mu.RUnlock()
	w := l.st.workers[worker]
	if w == nil || w.owned.len == 0 {
		return nil
	}
	out := make([]Item, 0, w.owned.len)
	for it := w.owned.front(); it != nil; it = w.owned.after(it) {
		out = append(out, it.copyOut())
	}
	return out
}

// Results returns the items of run with Index >= from in ascending Index
// order, at most limit of them (limit <= 0 means 1000). next is the index to
// pass as from to continue; done reports that no items lie beyond those
// returned. An unknown run gives an error wrapping ErrRunNotFound.
func (l *Ledger) Results(run string, from uint64, limit int) (items []Item, next uint64, done bool, err error) {
	if limit <= 0 {
		limit = 1000
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	r := l.st.runs[run]
	if r == nil {
		return nil, from, false, fmt.Errorf("%w: %q", ErrRunNotFound, run)
	}
	next = from
	done = true
	r.byIndex.from(from, func(it *item) bool {
		if len(items) == limit {
			done = false
			return false
		}
		items = append(items, it.copyOut())
		next = it.end()
		return true
	})
	return items, next, done, nil
}

// Pending returns the number of claimable Pending items over all runs (the
// pending queue's length; blocked items, which wait on a dependency, are
// not counted).
func (l *Ledger) Pending() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.st.pending.len
}

// PendingSignal returns a channel that the next Apply which adds pending
// items (submit, nack, a fail that will be retried, expire, deregister,
// retry_dead, a complete that unblocks dependents; never steal) and leaves
// Pending() > 0 closes. A fresh channel
// is made after each close. A long-poller takes the channel before it
// checks Pending, so no wake-up is lost:
//
//	for {
//		ch := l.PendingSignal()
//		if l.Pending() > 0 { /* propose a claim */ }
//		select { case <-ch: case <-ctx.Done(): return }
//	}
func (l *Ledger) PendingSignal() <-chan struct{} {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.pendingCh
}
