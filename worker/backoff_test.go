package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFaultBackoffGrowsPerObjectAndResets(t *testing.T) {
	b := newFaultBackoff(100*time.Millisecond, 400*time.Millisecond)
	// The n-th fault's delay is in [c/2, c], c = min(base·2^(n-1), max).
	ceil := []time.Duration{100, 200, 400, 400, 400}
	for i, c := range ceil {
		for range 50 {
			b.faults["a"] = i // as if i faults were recorded before
			d := b.fault("a")
			require.GreaterOrEqual(t, d, c*time.Millisecond/2, "fault %d", i+1)
			require.LessOrEqual(t, d, c*time.Millisecond, "fault %d", i+1)
		}
	}
	// Jitter: the delays of the 5th fault are not all the same.
	seen := map[time.Duration]bool{}
	for range 20 {
		b.faults["a"] = 4
		seen[b.fault("a")] = true
	}
	require.Greater(t, len(seen), 1, "delays have no jitter")

	// Objects are counted apart, and a success resets the count.
	b.faults["a"] = 10
	require.Equal(t, 0, b.faults["b"])
	b.ok("a")
	require.Equal(t, 0, b.faults["a"])
	require.Equal(t, 1, func() int { b.fault("a"); return b.faults["a"] }())
}

func TestFaultBackoffBoundedMemory(t *testing.T) {
	b := newFaultBackoff(time.Millisecond, time.Millisecond)
	for i := range 3 * maxFaultObjects {
		b.fault(string(rune('a'+i%26)) + string(rune(i)))
	}
	require.LessOrEqual(t, len(b.faults), maxFaultObjects)
}

func TestDataFaultBackoffConfig(t *testing.T) {
	c := DefaultConfig()
	c.ID = "w"
	require.NoError(t, c.Validate())
	d := c.withDefaults()
	require.Equal(t, DefaultDataFaultBackoff, d.DataFaultBackoff)
	require.Equal(t, DefaultDataFaultMaxBackoff, d.DataFaultMaxBackoff)
	c.DataFaultBackoff = -time.Second
	require.ErrorIs(t, c.Validate(), ErrInvalidConfig)
	c.DataFaultBackoff, c.DataFaultMaxBackoff = time.Minute, time.Second
	require.ErrorContains(t, c.Validate(), "DataFaultMaxBackoff")
}
