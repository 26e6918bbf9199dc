package fsm

import (
	"fmt"
	"slices"

	"github.com/rollout/rollout/internal/limits"
)

// Run kinds and the workers that run them.
//
// A run's kind is its RunSpec.kind: "" (batch inference, the default) or a
// name such as "train". A worker registers the kinds it runs; Claim and
// Steal give it items of those kinds only, so that a training worker never
// receives (and fails) a batch item and the reverse. A worker that names no
// kind runs every kind. "batch" is the name of the default kind in a
// worker's set.

// BatchKind names the default run kind ("") in a worker's kinds.
const BatchKind = "batch"

// canonicalKind maps a kind as a worker names it to a run's kind.
func canonicalKind(k string) string {
	if k == BatchKind {
		return ""
	}
	return k
}

// displayKind maps a run's kind to the name a worker uses for it.
func displayKind(k string) string {
	if k == "" {
		return BatchKind
	}
	return k
}

// checkKinds validates a Register command's kinds and returns them
// canonical, sorted and without repeats; nil means every kind.
func checkKinds(kinds []string) ([]string, error) {
	if len(kinds) > limits.MaxWorkerKinds {
		return nil, fmt.Errorf("%w: register names %d kinds, limit %d", ErrInvalidCommand, len(kinds), limits.MaxWorkerKinds)
	}
	if len(kinds) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(kinds))
	for i, k := range kinds {
		if err := checkText(fmt.Sprintf("register kind %d", i), k, limits.MaxKindBytes); err != nil {
			return nil, err
		}
		out = append(out, canonicalKind(k))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// runs reports whether w runs items of kind (a run's kind).
func (w *worker) runs(kind string) bool {
	if w.kinds == nil {
		return true
	}
	_, found := slices.BinarySearch(w.kinds, kind)
	return found
}

// kindNames returns w's kinds as a worker names them (nil: every kind).
func (w *worker) kindNames() []string {
	if w.kinds == nil {
		return nil
	}
	out := make([]string, len(w.kinds))
	for i, k := range w.kinds {
		out[i] = displayKind(k)
	}
	return out
}

// queueKey names one claim queue: the run kind and the run model its items
// share. Both are immutable parts of a run's spec, so an item stays in one
// queue while it is queued.
type queueKey struct {
	kind, model string
}

func keyOf(r *run) queueKey {
	return queueKey{kind: r.spec.GetKind(), model: r.spec.GetModel()}
}

func cmpKey(a, b queueKey) int {
	if c := cmpString(a.kind, b.kind); c != 0 {
		return c
	}
	return cmpString(a.model, b.model)
}

// Claimable returns how many Pending items the named worker could claim
// now (its kinds and models; not blocked); 0 for an unknown worker. The server's
// long-poll proposes a claim only when this is positive.
func (l *Ledger) Claimable(workerID string) int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	w := l.st.workers[workerID]
	if w == nil {
		return 0
	}
	return l.st.pending.count(w) + l.st.probesDue(w)
}
