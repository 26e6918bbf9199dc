package worker

import (
	"math/rand/v2"
	"sync"
	"time"
)

// faultBackoff spaces out the failure reports of items whose data cannot
// be read or checked (a damaged, missing or unreachable input object), so
// that a fault of the store does not use up an item's max_failures within
// seconds: the n-th consecutive fault on one object waits a delay drawn
// from [c/2, c], c = min(base·2^(n-1), max), before its failure is
// reported (half of it jitter, so that workers do not retry in step).
// Any successful read of the object resets its count. It is safe for
// concurrent use; it remembers at most maxFaultObjects objects (past that
// it forgets them all, which only shortens delays).
type faultBackoff struct {
	base, max time.Duration

	mu     sync.Mutex
	faults map[string]int
}

// maxFaultObjects bounds faultBackoff's memory.
const maxFaultObjects = 4096

func newFaultBackoff(base, max time.Duration) *faultBackoff {
	return &faultBackoff{base: base, max: max, faults: make(map[string]int)}
}

// fault records one more fault on object and returns how long to wait
// before reporting it.
func (b *faultBackoff) fault(object string) time.Duration {
	b.mu.Lock()
	if len(b.faults) >= maxFaultObjects {
		clear(b.faults)
	}
	b.faults[object]++
	n := b.faults[object]
	b.mu.Unlock()
	ceil := b.base
	for i := 1; i < n && ceil < b.max; i++ {
		ceil *= 2
	}
	ceil = min(ceil, b.max)
	if ceil <= 0 {
		return 0
	}
	return ceil/2 + time.Duration(rand.Int64N(int64(ceil-ceil/2)+1))
}

// ok forgets object's faults.
func (b *faultBackoff) ok(object string) {
	b.mu.Lock()
	delete(b.faults, object)
	b.mu.Unlock()
}
