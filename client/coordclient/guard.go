package coordclient

import (
	"fmt"
	"sync"
)

// EpochGuard tracks the highest Raft term (epoch) seen in any coordinator
// reply and rejects replies decided in an older term. It is safe for
// concurrent use. The zero value is not usable; call NewEpochGuard.
type EpochGuard struct {
	mu       sync.Mutex
	highest  uint64
	rejected uint64
}

// NewEpochGuard returns a guard that has seen no term yet.
func NewEpochGuard() *EpochGuard {
	return &EpochGuard{}
}

// Observe checks a reply's term against the highest term seen. A term of 0
// (a reply without a header) or a term lower than the highest is rejected:
// Observe counts it and returns an error wrapping ErrStaleTerm that names both
// terms. Otherwise term becomes the new highest (if it is higher) and Observe
// returns nil.
func (g *EpochGuard) Observe(term uint64) error {
	_, _, err := g.observe(term)
	return err
}

// observe is Observe that also reports the highest term before and after.
func (g *EpochGuard) observe(term uint64) (old, cur uint64, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old = g.highest
	if !guardEnforced {
		g.highest = max(old, term)
		return old, g.highest, nil
	}
	if term == 0 {
		g.rejected++
		return old, old, fmt.Errorf("%w: reply carries no term (highest seen %d)", ErrStaleTerm, old)
	}
	if term < old {
		g.rejected++
		return old, old, fmt.Errorf("%w: reply term %d is older than highest seen %d", ErrStaleTerm, term, old)
	}
	g.highest = term
	return old, term, nil
}

// Highest returns the highest term observed so far (0 if none).
func (g *EpochGuard) Highest() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest
}

// Rejected returns how many replies Observe has rejected.
func (g *EpochGuard) Rejected() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rejected
}
