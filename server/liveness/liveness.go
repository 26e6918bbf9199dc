// Package liveness is the leader's memory of its workers: when each last
// spoke, and the progress its last heartbeat reported. It is leader-local
// state, never replicated: a heartbeat is a plain RPC that updates a
// Tracker, and only a change of ledger state (a worker declared lost, a
// steal, a claim, a report) is a Raft command. This is Nomad's design:
// timers in the leader's memory, the TTL grown with the fleet, and a full
// grace period for every worker after a leader change.
//
// Safety does not rest on this memory. The leader proposes ExpireWorkers
// naming the workers its timers call silent; the ledger applies it only to
// workers it holds live that sent no command within the TTL either, and a
// stale leader's command is refused by its term like any other. A Tracker
// that forgets everything (a new leader) only delays expiry by one TTL.
package liveness

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for Config.
const (
	// DefaultBudget is the heartbeats per second a leader plans to receive
	// from the whole fleet: 10,000 workers heartbeat every 100 s.
	DefaultBudget = 100
	// TTLIntervals is how many heartbeat intervals the TTL spans when the
	// fleet sets it: a worker may miss one heartbeat and be late on the
	// next before it is declared lost.
	TTLIntervals = 2
)

// Config sizes a Tracker's timers.
type Config struct {
	// Floor is the least TTL (rollout-coord --failure-timeout): a worker
	// silent for longer than TTL(n) >= Floor is declared lost.
	Floor time.Duration
	// Budget is the heartbeats per second the leader plans for across the
	// fleet; the heartbeat interval it asks of each worker is n/Budget
	// seconds for a fleet of n. 0: DefaultBudget.
	Budget float64
}

// Interval is the heartbeat interval the leader asks of each worker of a
// fleet of n live workers: n/Budget seconds, so the fleet sends about
// Budget heartbeats a second. Zero when that is under a second (the
// workers' own interval stands).
func (c Config) Interval(n int) time.Duration {
	b := c.Budget
	if b <= 0 {
		b = DefaultBudget
	}
	d := float64(n) / b * float64(time.Second)
	if d < float64(time.Second) {
		return 0
	}
	if d > float64(math.MaxInt64/TTLIntervals) {
		d = float64(math.MaxInt64 / TTLIntervals)
	}
	return time.Duration(d).Round(time.Millisecond)
}

// TTL is how long a worker of a fleet of n may stay silent before the
// leader declares it lost: the larger of Floor and TTLIntervals × Interval(n).
func (c Config) TTL(n int) time.Duration {
	return max(c.Floor, TTLIntervals*c.Interval(n))
}

// Key names a record a worker holds, as its heartbeat reports it: Started,
// for a range it is executing, is the first index it has not started.
type Key struct {
	Run     string
	ID      []byte
	Attempt uint64
	Started uint64
}

// Progress is what a worker's heartbeat reports besides being alive.
type Progress struct {
	Backlog     uint32
	ItemsPerSec float64
	// Executing are the records running on its backend now (never
	// stolen whole; a range is split only past Started).
	Executing []Key
}

// View is the leader's memory of one worker.
type View struct {
	// Last is when the worker last spoke to this leader; zero if it has
	// not in this leadership.
	Last time.Time
	// Progress is from its last heartbeat in this leadership (zero if none).
	Progress Progress
	// Beats counts its heartbeats in this leadership.
	Beats uint64
}

// Tracker is the leader's memory of its workers for one leadership (a
// term). It is safe for concurrent use.
type Tracker struct {
	mu      sync.Mutex
	term    uint64
	since   time.Time
	workers map[string]*View

	beats atomic.Uint64
}

// New returns an empty Tracker, leading no term.
func New() *Tracker {
	return &Tracker{workers: make(map[string]*View)}
}

// lead starts a new leadership if term is not the tracked one: everything
// is forgotten and the grace period of every worker starts at now. Call
// with t.mu held.
func (t *Tracker) lead(term uint64, now time.Time) {
	if term == t.term && !t.since.IsZero() {
		return
	}
	t.term, t.since = term, now
	t.workers = make(map[string]*View)
}

// Lead makes term the tracked leadership (see Since); a new term forgets
// every worker, so each gets a full TTL from now.
func (t *Tracker) Lead(term uint64, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lead(term, now)
}

// Since returns when the tracked leadership began in this Tracker, and its
// term.
func (t *Tracker) Since() (time.Time, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.since, t.term
}

// Heartbeat records worker id's heartbeat in term at now with its progress.
func (t *Tracker) Heartbeat(term uint64, id string, now time.Time, p Progress) {
	t.beats.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lead(term, now)
	v := t.view(id)
	v.Last = now
	v.Progress = p
	v.Beats++
}

// Touch records that worker id spoke in term at now (a claim, a report, a
// steal, a registration): alive, its progress unchanged.
func (t *Tracker) Touch(term uint64, id string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lead(term, now)
	t.view(id).Last = now
}

func (t *Tracker) view(id string) *View {
	v := t.workers[id]
	if v == nil {
		v = &View{}
		t.workers[id] = v
	}
	return v
}

// Forget drops worker id (deregistered, expired, evicted).
func (t *Tracker) Forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.workers, id)
}

// Prune drops every worker keep does not accept (those the ledger no
// longer holds).
func (t *Tracker) Prune(keep func(id string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.workers {
		if !keep(id) {
			delete(t.workers, id)
		}
	}
}

// Heard reports whether worker id spoke to this leader in term.
func (t *Tracker) Heard(term uint64, id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if term != t.term {
		return false
	}
	v := t.workers[id]
	return v != nil && !v.Last.IsZero()
}

// Get returns the view of worker id in term; ok is false when this leader
// has not heard from it in term (or tracks another term).
func (t *Tracker) Get(term uint64, id string) (View, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if term != t.term {
		return View{}, false
	}
	v := t.workers[id]
	if v == nil || v.Last.IsZero() {
		return View{}, false
	}
	return *v, true
}

// Silent returns those of ids that have not spoken to this leader in term
// for longer than ttl at now, a worker not heard from at all counting from
// the start of the leadership (its grace period). A term other than the
// tracked one starts a new leadership at now, in which nobody is silent yet.
func (t *Tracker) Silent(term uint64, now time.Time, ttl time.Duration, ids []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lead(term, now)
	var out []string
	for _, id := range ids {
		last := t.since
		if v := t.workers[id]; v != nil && v.Last.After(last) {
			last = v.Last
		}
		if now.Sub(last) > ttl {
			out = append(out, id)
		}
	}
	return out
}

// Heartbeats counts every heartbeat recorded since New (for metrics:
// heartbeats per second).
func (t *Tracker) Heartbeats() uint64 { return t.beats.Load() }

// Len counts the workers this leadership has heard from.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.workers)
}

// Started returns, from every worker's last heartbeat in term, the executing
// keys of run that carry a progress mark (Started > 0).
func (t *Tracker) Started(term uint64, run string) []Key {
	t.mu.Lock()
	defer t.mu.Unlock()
	if term != t.term {
		return nil
	}
	var out []Key
	for _, v := range t.workers {
		for _, k := range v.Progress.Executing {
			if k.Run == run && k.Started > 0 {
				out = append(out, k)
			}
		}
	}
	return out
}
