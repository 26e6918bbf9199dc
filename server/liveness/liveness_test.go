package liveness

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestIntervalAndTTLGrowWithTheFleet(t *testing.T) {
	c := Config{Floor: 10 * time.Second, Budget: 100}
	for _, tc := range []struct {
		n        int
		interval time.Duration
		ttl      time.Duration
	}{
		{0, 0, 10 * time.Second},
		{99, 0, 10 * time.Second},            // under a second: the workers' own
		{100, time.Second, 10 * time.Second}, // the floor still holds
		{1000, 10 * time.Second, 20 * time.Second},
		{10000, 100 * time.Second, 200 * time.Second}, // Nomad's ≈200 s at 10,000 nodes
	} {
		require.Equal(t, tc.interval, c.Interval(tc.n), "interval for %d", tc.n)
		require.Equal(t, tc.ttl, c.TTL(tc.n), "ttl for %d", tc.n)
	}
	require.Equal(t, 100*time.Second, Config{Floor: time.Second}.Interval(10000), "0 budget: the default")
	require.Positive(t, Config{Floor: time.Second, Budget: 1e-300}.TTL(1<<40), "no overflow")
}

func TestSilentCountsFromTheLeadershipStart(t *testing.T) {
	tr := New()
	t0 := time.Unix(1000, 0)
	ttl := 10 * time.Second
	ids := []string{"a", "b", "c"}
	tr.Lead(1, t0)
	tr.Heartbeat(1, "a", t0.Add(5*time.Second), Progress{Backlog: 3})
	tr.Touch(1, "b", t0.Add(2*time.Second))
	require.Empty(t, tr.Silent(1, t0.Add(ttl), ttl, ids), "nobody silent within the grace period")
	require.Equal(t, []string{"b", "c"}, tr.Silent(1, t0.Add(13*time.Second), ttl, ids))
	require.Equal(t, []string{"a", "b", "c"}, tr.Silent(1, t0.Add(16*time.Second), ttl, ids))

	v, ok := tr.Get(1, "a")
	require.True(t, ok)
	require.Equal(t, uint32(3), v.Progress.Backlog)
	require.Equal(t, uint64(1), v.Beats)
	require.True(t, tr.Heard(1, "b"))
	require.False(t, tr.Heard(1, "c"))
	require.False(t, tr.Heard(2, "a"), "another term knows nothing")

	// A new term (this replica won again, or another leadership): everyone
	// gets a full TTL from its start, whatever it heard before.
	t1 := t0.Add(time.Hour)
	require.Empty(t, tr.Silent(2, t1, ttl, ids))
	require.False(t, tr.Heard(2, "a"))
	require.Empty(t, tr.Silent(2, t1.Add(ttl), ttl, ids))
	require.Equal(t, ids, tr.Silent(2, t1.Add(ttl+time.Millisecond), ttl, ids))
	since, term := tr.Since()
	require.Equal(t, t1, since)
	require.Equal(t, uint64(2), term)
	require.Equal(t, uint64(1), tr.Heartbeats())
}

func TestForgetPruneAndStarted(t *testing.T) {
	tr := New()
	t0 := time.Unix(1000, 0)
	tr.Heartbeat(4, "a", t0, Progress{Executing: []Key{{Run: "r", ID: []byte("x"), Attempt: 1, Started: 7}, {Run: "q", ID: []byte("y"), Attempt: 1, Started: 3}, {Run: "r", ID: []byte("z")}}})
	tr.Heartbeat(4, "b", t0, Progress{Executing: []Key{{Run: "r", ID: []byte("w"), Attempt: 2, Started: 9}}})
	require.ElementsMatch(t, []Key{{Run: "r", ID: []byte("x"), Attempt: 1, Started: 7}, {Run: "r", ID: []byte("w"), Attempt: 2, Started: 9}}, tr.Started(4, "r"))
	require.Nil(t, tr.Started(5, "r"))
	tr.Forget("a")
	require.False(t, tr.Heard(4, "a"))
	require.Equal(t, 1, tr.Len())
	tr.Touch(4, "c", t0)
	tr.Prune(func(id string) bool { return id == "c" })
	require.False(t, tr.Heard(4, "b"))
	require.True(t, tr.Heard(4, "c"))
}
