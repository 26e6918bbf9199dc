package fsm

import (
	"slices"
	"sort"
	"time"
)

// Liveness is leader-local (server/liveness): heartbeats are plain RPCs the
// leader answers from its memory and this ledger's state, and only changes
// of state are commands. The reads below are what the leader needs for
// that; they change nothing.

// WorkerState tells whether the ledger holds a worker and whether it is
// Lost.
type WorkerState uint8

const (
	// WorkerUnknown: the ledger does not hold the worker (never registered,
	// deregistered, evicted, or forgotten after the retention).
	WorkerUnknown WorkerState = iota
	// WorkerLive: registered and not Lost.
	WorkerLive
	// WorkerLost: declared lost; it must register again.
	WorkerLost
)

// Worker returns the state of worker id.
func (l *Ledger) Worker(id string) WorkerState {
	l.mu.RLock()
	defer l.mu.RUnlock()
	w := l.st.workers[id]
	switch {
	case w == nil:
		return WorkerUnknown
	case w.lost:
		return WorkerLost
	}
	return WorkerLive
}

// LiveWorkers counts the registered workers that are not Lost.
func (l *Ledger) LiveWorkers() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n := 0
	for _, w := range l.st.workers {
		if !w.lost {
			n++
		}
	}
	return n
}

// Held answers a worker's heartbeat from the ledger: of held (the records
// it believes it owns), lost lists those no longer Running(worker, that
// attempt), and bounds the current [lo, hi) of those that are ranges and
// still its (a steal may have cut a range's hi). An unknown worker has lost
// everything.
func (l *Ledger) Held(worker string, held []ItemKey) (lost []ItemKey, bounds []RangeBound) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.st.held(worker, held)
}

func (st *state) held(worker string, held []ItemKey) (lost []ItemKey, bounds []RangeBound) {
	for _, k := range held {
		if r := st.runs[k.Run]; r != nil {
			if it := r.items[string(k.ID)]; it != nil && it.isRunning(worker, k.Attempt) {
				if it.isRange() {
					bounds = append(bounds, RangeBound{Run: r.name, ID: []byte(it.id), Attempt: it.attempt, Lo: it.index, Hi: it.end()})
				}
				continue
			}
		}
		lost = append(lost, ItemKey{Run: k.Run, ID: slices.Clone(k.ID), Attempt: k.Attempt})
	}
	return lost, bounds
}

// ExpiryCandidates lists, sorted, the live workers from which the ledger has
// seen no command for longer than ttl at now: the only workers an
// ExpireWorkers command by the leader can declare lost (the leader names
// those of them its heartbeat timers also call silent). removal reports
// whether a Lost worker holding nothing has been silent past the retention
// (Config.LostWorkerRetention × ttl), which such a command would forget.
func (l *Ledger) ExpiryCandidates(now time.Time, ttl time.Duration) (silent []string, removal bool) {
	if ttl <= 0 {
		return nil, false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	t := now.UnixNano()
	retention := retentionNano(int64(ttl), l.cfg.LostWorkerRetention)
	for _, w := range l.st.workers {
		quiet := t - w.lastHeartbeat
		if !w.lost && quiet > int64(ttl) {
			silent = append(silent, w.id)
		}
		if w.lost && w.owned.len == 0 && quiet > retention {
			removal = true
		}
	}
	sort.Strings(silent)
	return silent, removal
}

// StealVictim is the worker a Steal by thief would take from, chosen as
// the ledger chooses (the live peer owning the most of what thief takes,
// ties to the smaller id), among the workers heard accepts: the leader
// passes those it has heard from in its term, so that a just-elected leader
// never robs a worker whose progress it does not know yet. "" when thief is
// not a live registered worker or no such peer owns anything thief takes.
func (l *Ledger) StealVictim(thief string, heard func(id string) bool) string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	t := l.st.workers[thief]
	if t == nil {
		return ""
	}
	var victim *worker
	victimLen := 0
	for _, w := range l.st.workers {
		if w.lost || w == t || w.owned.len == 0 || !heard(w.id) {
			continue
		}
		n := stealable(t, w)
		if n == 0 {
			continue
		}
		if victim == nil || n > victimLen || (n == victimLen && w.id < victim.id) {
			victim, victimLen = w, n
		}
	}
	if victim == nil {
		return ""
	}
	return victim.id
}

// LiveWorkerIDs lists the registered workers that are not Lost, sorted.
func (l *Ledger) LiveWorkerIDs() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]string, 0, len(l.st.workers))
	for _, w := range l.st.workers {
		if !w.lost {
			out = append(out, w.id)
		}
	}
	sort.Strings(out)
	return out
}

// WorkerIDs is the set of every worker the ledger holds, Lost ones included.
func (l *Ledger) WorkerIDs() map[string]struct{} {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make(map[string]struct{}, len(l.st.workers))
	for id := range l.st.workers {
		out[id] = struct{}{}
	}
	return out
}

// WorkerSeen is the leader's view of a worker for RunningConditions: when
// it last heard from it and its measured rate; ok is false when the leader
// has not heard from it (the ledger's own record then stands).
type WorkerSeen func(id string) (last time.Time, itemsPerSec float64, ok bool)
