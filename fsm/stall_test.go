package fsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

func cHold(run, id, worker string, attempt uint64, object, reason string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Hold{Hold: &fsmpb.HoldCmd{Run: run, Id: []byte(id), Worker: worker,
		Attempt: attempt, Object: object, Reason: reason}}}
}

// claimedIDs returns the run/id of each claimed item.
func claimedRunIDs(res Result) []string {
	var out []string
	for _, it := range res.Items {
		out = append(out, it.Run+"/"+string(it.ID))
	}
	return out
}

// stallLedger holds run "s" (store, items a b c d: a and b in object
// in/1, c and d in in/2) and run "o" (items o0 o1, inline), with worker w1
// holding a and b and worker w2 registered.
func stallLedger(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(cSubmit("s", &fsmpb.RunSpec{Store: testStore, MaxFailures: 2}, false,
		nr("a", 0, "in/1", 0, 4), nr("b", 1, "in/1", 4, 4), nr("c", 2, "in/2", 0, 4), nr("d", 3, "in/2", 4, 4)))
	h.ok(cSubmit("o", nil, false, ni("o0", 0, "p0"), ni("o1", 1, "p1")))
	h.ok(cRegisterAll("w1", "w2")...)
	require.Equal(t, []string{"s/a", "s/b"}, claimedRunIDs(h.ok(cClaim("w1", 2))[0]))
	return h
}

func eventsOf(l *Ledger, kind EventKind) []Event {
	evs, _, _ := l.Events(0, MaxEventsPage, "")
	var out []Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// TestHoldStallsRunWithoutFailure: a hold puts the item back to Pending
// with no failure counted, stalls the run on the object (stamped since,
// reason, an event naming run and object), and claims skip the stalled
// run's items so that another run's items are handed out.
func TestHoldStallsRunWithoutFailure(t *testing.T) {
	h := stallLedger(t)
	h.now = h.now.Add(time.Second)
	res := h.ok(cHold("s", "a", "w1", 1, "in/1", "object not found"))
	stalledAt := h.now // the hold's stamped time
	require.Equal(t, 1, res[0].Repended)
	checkInvariants(t, h.l)

	a := h.item("s", "a")
	require.Equal(t, StatePending, a.State)
	require.Zero(t, a.Failures)
	rs := h.run("s")
	require.Zero(t, rs.Failures)
	require.NotNil(t, rs.Stall)
	require.Equal(t, "in/1", rs.Stall.Object)
	require.Equal(t, "object not found", rs.Stall.Reason)
	require.True(t, rs.Stall.Since.Equal(stalledAt), "since %v, want the stamped %v", rs.Stall.Since, stalledAt)
	require.Equal(t, uint64(3), rs.Stall.Parked) // a, c, d
	require.Nil(t, h.run("o").Stall)
	require.Equal(t, 1, h.l.StalledRuns())

	evs := eventsOf(h.l, EventRunStalled)
	require.Len(t, evs, 1)
	require.Equal(t, "s", evs[0].Run)
	require.Equal(t, "w1", evs[0].Worker)
	require.Contains(t, evs[0].Detail, "in/1")
	require.Contains(t, evs[0].Detail, "object not found")

	// Claims hand out the other run's items, none of the stalled run's.
	require.Equal(t, 2, h.l.Claimable("w2", h.now))
	require.Equal(t, []string{"o/o0", "o/o1"}, claimedRunIDs(h.ok(cClaim("w2", 10))[0]))
	require.Empty(t, h.ok(cClaim("w2", 10))[0].Items)
	require.Zero(t, h.l.Claimable("w2", h.now))

	// A second hold of the same run (b, still out) keeps the stall's
	// start and counts the hold, again without a failure.
	h.now = h.now.Add(100 * time.Millisecond)
	h.ok(cHold("s", "b", "w1", 1, "in/1", "object not found"))
	rs = h.run("s")
	require.True(t, rs.Stall.Since.Equal(stalledAt))
	require.Equal(t, uint64(2), rs.Stall.Holds)
	require.Zero(t, rs.Failures)
	require.Len(t, eventsOf(h.l, EventRunStalled), 1)
	checkInvariants(t, h.l)
}

// TestHoldCAS: a hold is a CAS command like fail and nack; an unknown
// object key or a bad one is refused without a change.
func TestHoldCAS(t *testing.T) {
	h := stallLedger(t)
	require.ErrorIs(t, h.one(cHold("s", "a", "w2", 1, "in/1", "gone")).Err, ErrCASMiss)
	require.ErrorIs(t, h.one(cHold("s", "a", "w1", 2, "in/1", "gone")).Err, ErrCASMiss)
	require.ErrorIs(t, h.one(cHold("s", "a", "w1", 1, "", "gone")).Err, ErrInvalidCommand)
	require.ErrorIs(t, h.one(cHold("s", "a", "w1", 1, "../x", "gone")).Err, ErrInvalidCommand)
	h.ok(cClaim("w2", 1)) // o0, of the run without a store
	require.ErrorIs(t, h.one(cHold("o", "o0", "w2", 1, "in/1", "gone")).Err, ErrInvalidCommand)
	require.Nil(t, h.run("o").Stall)
	require.Nil(t, h.run("s").Stall)
	require.Equal(t, StateRunning, h.item("s", "a").State)
}

// TestStallProbeResumes: after the probe interval one claim gets one probe
// item of the stalled object; a probe held again doubles the interval; a
// probe that completes resumes the run (event) and its parked items are
// claimable again.
func TestStallProbeResumes(t *testing.T) {
	h := stallLedger(t)
	h.ok(cHold("s", "a", "w1", 1, "in/1", "object not found"))
	h.ok(cClaim("w2", 10)) // the other run's items
	require.Empty(t, h.ok(cClaim("w2", 10))[0].Items, "a probe before the interval")

	require.Zero(t, h.l.Claimable("w2", h.now), "not yet at the time of the last claim")
	h.now = h.now.Add(StallProbeMin)
	require.Equal(t, 1, h.l.Claimable("w2", h.now), "due at the caller's time, before any entry is stamped with it")
	res := h.ok(cClaim("w2", 10))[0]
	require.Equal(t, []string{"s/a"}, claimedRunIDs(res), "one probe, an item of the stalled object")
	require.Empty(t, h.ok(cClaim("w2", 10))[0].Items, "a second probe while one is out")

	// The probe finds the object still missing: the next waits twice as long.
	h.ok(cHold("s", "a", "w2", 2, "in/1", "object not found"))
	h.now = h.now.Add(StallProbeMin)
	require.Empty(t, h.ok(cClaim("w2", 10))[0].Items)
	h.now = h.now.Add(StallProbeMin)
	res = h.ok(cClaim("w2", 10))[0]
	require.Equal(t, []string{"s/a"}, claimedRunIDs(res))
	require.Zero(t, h.item("s", "a").Failures)

	// The object is back: the probe completes and the run resumes.
	h.ok(cCompleteRef("s", "a", "w2", 3, "results/s/x", 0, 4, sum(1), ""))
	require.Nil(t, h.run("s").Stall)
	require.Zero(t, h.l.StalledRuns())
	evs := eventsOf(h.l, EventRunResumed)
	require.Len(t, evs, 1)
	require.Equal(t, "s", evs[0].Run)
	require.Contains(t, evs[0].Detail, "in/1")
	require.Equal(t, []string{"s/c", "s/d"}, claimedRunIDs(h.ok(cClaim("w2", 10))[0]))
	checkInvariants(t, h.l)
}

// TestStallProbeCap: the probe interval doubles up to StallProbeMax.
func TestStallProbeCap(t *testing.T) {
	h := stallLedger(t)
	h.ok(cHold("s", "a", "w1", 1, "in/1", "gone"))
	h.ok(cClaim("w2", 10))
	want := StallProbeMin
	for attempt := uint64(2); attempt < 12; attempt++ {
		h.now = h.now.Add(want)
		res := h.ok(cClaim("w2", 10))[0]
		require.Equal(t, []string{"s/a"}, claimedRunIDs(res), "probe %d after %v", attempt, want)
		h.ok(cHold("s", "a", "w2", attempt, "in/1", "gone"))
		want = min(2*want, StallProbeMax)
		require.True(t, h.run("s").Stall.NextProbe.Equal(h.now.Add(want)))
	}
	require.Equal(t, StallProbeMax, want)
}

// TestStallResubmitResumes: a submit naming the stalled run ends the stall
// at once.
func TestStallResubmitResumes(t *testing.T) {
	h := stallLedger(t)
	h.ok(cHold("s", "a", "w1", 1, "in/1", "gone"))
	h.ok(cSubmit("s", &fsmpb.RunSpec{Store: testStore}, false, nr("a", 0, "in/1", 0, 4)))
	require.Nil(t, h.run("s").Stall)
	evs := eventsOf(h.l, EventRunResumed)
	require.Len(t, evs, 1)
	require.Contains(t, evs[0].Detail, "submitted again")
	// The parked items rejoin the claim queue at its back, in their order.
	require.Equal(t, []string{"o/o0", "o/o1", "s/c", "s/d", "s/a"}, claimedRunIDs(h.ok(cClaim("w2", 10))[0]))
	checkInvariants(t, h.l)
}

// TestStallCancel: cancelling a stalled run cancels its parked items and
// ends the stall; a hold of its item still out cancels that item.
func TestStallCancel(t *testing.T) {
	h := stallLedger(t)
	h.ok(cHold("s", "a", "w1", 1, "in/1", "gone"))
	res := h.ok(cCancel("s"))
	require.Equal(t, 3, res[0].Repended)
	rs := h.run("s")
	require.Nil(t, rs.Stall)
	require.Equal(t, uint64(3), rs.Cancelled)
	h.ok(cHold("s", "b", "w1", 1, "in/1", "gone"))
	require.Equal(t, StateCancelled, h.item("s", "b").State)
	require.Nil(t, h.run("s").Stall)
	require.False(t, h.run("s").FinishedAt.IsZero())
	checkInvariants(t, h.l)
	h.ok(cDelete("s", 0))
	checkInvariants(t, h.l)
}

// TestStallSnapshot: a stalled run's stall and parked items survive a
// snapshot (persist after restore writes the same bytes), and the restored
// ledger resumes the same way.
func TestStallSnapshot(t *testing.T) {
	h := stallLedger(t)
	h.ok(cHold("s", "a", "w1", 1, "in/1", "gone"))
	b := persist(t, h.l)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, b))
	checkInvariants(t, l)
	require.Equal(t, b, persist(t, l))
	require.Equal(t, h.run("s").Stall, func() *Stall { rs, _ := l.Run("s"); return rs.Stall }())
	require.Equal(t, dumpLedger(h.l), dumpLedger(l))

	h2 := &harness{t: t, l: l, term: h.term, now: h.now, index: h.index + 1}
	require.Equal(t, []string{"o/o0", "o/o1"}, claimedRunIDs(h2.ok(cClaim("w2", 10))[0]))
	h2.now = h2.now.Add(StallProbeMin)
	require.Equal(t, []string{"s/a"}, claimedRunIDs(h2.ok(cClaim("w2", 10))[0]))
}

// TestStallDeterministic: replicas applying the same holds and probes agree
// byte for byte.
func TestStallDeterministic(t *testing.T) {
	run := func() []byte {
		h := stallLedger(t)
		h.ok(cHold("s", "a", "w1", 1, "in/1", "gone"), cHold("s", "b", "w1", 1, "in/1", "gone"))
		h.now = h.now.Add(StallProbeMin)
		h.ok(cClaim("w2", 10))
		return persist(t, h.l)
	}
	require.Equal(t, run(), run())
}
