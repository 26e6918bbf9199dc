package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRateWindow(t *testing.T) {
	start := time.Unix(1000, 0)
	r := newRateWindow(10*time.Second, start)
	require.Zero(t, r.rate(start))
	require.Zero(t, r.rate(start.Add(5*time.Second)))

	// 10 completions per second for 5 s.
	for i := 0; i < 50; i++ {
		r.add(start.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	require.InDelta(t, 10, r.rate(start.Add(5*time.Second)), 0.01)

	// Another 10 s at 20/s: the window forgets the first 5 s.
	base := start.Add(5 * time.Second)
	for i := 0; i < 200; i++ {
		r.add(base.Add(time.Duration(i) * 50 * time.Millisecond))
	}
	require.InDelta(t, 20, r.rate(base.Add(10*time.Second)), 2)

	// Nothing for a whole window: zero again.
	require.Zero(t, r.rate(base.Add(30*time.Second)))

	// A burst right at start is measured over one bucket, not over 0 s.
	r2 := newRateWindow(10*time.Second, start)
	r2.add(start.Add(time.Millisecond))
	require.InDelta(t, 1, r2.rate(start.Add(2*time.Millisecond)), 0.001)
}
