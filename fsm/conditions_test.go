package fsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestExpectedHold(t *testing.T) {
	for _, tc := range []struct {
		name    string
		running uint64
		rate    float64
		want    time.Duration
		ok      bool
	}{
		{"nothing measured yet", 5, 0, 0, false},
		{"nothing running", 0, 2, 0, false},
		{"three times the time to clear the backlog", 10, 2, 15 * time.Second, true},
		{"never below the minimum", 1, 100, MinExpectedHold, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := ExpectedHold(tc.running, tc.rate)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, d)
		})
	}
}

// TestRunningConditions classifies Running items as running, running long
// (held past what the owner's measured rate predicts, owner alive) and owner
// lost (owner silent), per run and per worker.
func TestRunningConditions(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("fast", "silent", "new")...)
	h.ok(cSubmit("r", nil, false, ni("a", 0, "pa"), ni("b", 1, "pb"), ni("c", 2, "pc"), ni("d", 3, "pd")))
	h.ok(cClaim("fast", 2))   // a, b at t0
	h.ok(cClaim("silent", 1)) // c at t0
	h.ok(cHeartbeat("fast", 2, 1.0, nil, nil))
	h.ok(cHeartbeat("silent", 1, 1.0, nil, nil))
	t0 := h.now

	// At t0+1s: fast owns 2 at 1 item/s, expected hold 6s: both running.
	byRun, byWorker := h.l.RunningConditions(t0.Add(time.Second), 5*time.Second, nil)
	require.Equal(t, Conditions{Running: 3}, byRun["r"])
	require.Equal(t, Conditions{Running: 2}, byWorker["fast"])

	// fast keeps heartbeating, silent stops. At t0+7s: fast's items are
	// held past 6s (running long); silent has been quiet for 7s > 5s.
	h.now = t0.Add(6 * time.Second)
	h.ok(cHeartbeat("fast", 2, 1.0, nil, nil))
	byRun, byWorker = h.l.RunningConditions(t0.Add(7*time.Second), 5*time.Second, nil)
	require.Equal(t, Conditions{RunningLong: 2, OwnerLost: 1}, byRun["r"])
	require.Equal(t, Conditions{RunningLong: 2}, byWorker["fast"])
	require.Equal(t, Conditions{OwnerLost: 1}, byWorker["silent"])

	// A worker with no measured rate is never "running long".
	h.ok(cClaim("new", 1)) // d
	byRun, _ = h.l.RunningConditions(h.now.Add(time.Hour), 2*time.Hour, nil)
	require.Equal(t, uint64(1), byRun["r"].Running)
}
