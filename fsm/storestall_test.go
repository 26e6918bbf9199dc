package fsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// cHoldStore is a hold that says the run's store could not be reached.
func cHoldStore(run, id, worker string, attempt uint64, object, reason string) *fsmpb.Command {
	c := cHold(run, id, worker, attempt, object, reason)
	c.GetHold().StoreUnavailable = true
	return c
}

func suspectsOf(h *harness, run string) []string {
	h.l.mu.RLock()
	defer h.l.mu.RUnlock()
	return append([]string(nil), h.l.st.runs[run].storeSuspects...)
}

// TestStoreHoldIsolatesOnTwoWorkers: one worker's store-unreachable hold
// gives the item back to the claim queue with no failure and no stall (one
// worker's broken path must not isolate a run), the same worker again
// changes nothing; a second distinct worker's isolates the run like a
// stalled input: its items leave the claim queue, the stall says the store
// is unreachable, an event is recorded, and the other run is still served.
func TestStoreHoldIsolatesOnTwoWorkers(t *testing.T) {
	h := stallLedger(t) // w1 holds s/a and s/b; w2 registered
	h.now = h.now.Add(time.Second)
	res := h.ok(cHoldStore("s", "a", "w1", 1, "in/1", "object store unavailable: connection refused"))
	require.Equal(t, 1, res[0].Repended)
	require.Nil(t, h.run("s").Stall)
	require.Equal(t, StatePending, h.item("s", "a").State)
	require.Zero(t, h.item("s", "a").Failures)
	require.Equal(t, []string{"w1"}, suspectsOf(h, "s"))
	require.Empty(t, eventsOf(h.l, EventRunStalled))
	h.ok(cHoldStore("s", "b", "w1", 1, "in/1", "connection refused"))
	require.Nil(t, h.run("s").Stall, "the same worker twice is one worker")
	checkInvariants(t, h.l)

	// w2 takes everything queued, s's items among them.
	got := claimedRunIDs(h.ok(cClaim("w2", 10))[0])
	require.ElementsMatch(t, []string{"s/a", "s/b", "s/c", "s/d", "o/o0", "o/o1"}, got)
	h.now = h.now.Add(time.Second)
	h.ok(cHoldStore("s", "c", "w2", 1, "in/2", "object store unavailable: dial tcp: connection refused"))
	isolatedAt := h.now // the hold's stamped time
	rs := h.run("s")
	require.NotNil(t, rs.Stall)
	require.True(t, rs.Stall.StoreUnreachable)
	require.True(t, rs.Stall.Since.Equal(isolatedAt))
	require.Contains(t, rs.Stall.Reason, "connection refused")
	require.Zero(t, rs.Failures)
	require.Empty(t, suspectsOf(h, "s"))
	evs := eventsOf(h.l, EventRunStalled)
	require.Len(t, evs, 1)
	require.Equal(t, "w2", evs[0].Worker)
	require.Contains(t, evs[0].Detail, "store unreachable")
	// The rest of w2's items of s come back held and are parked too.
	h.ok(cHoldStore("s", "a", "w2", 2, "in/1", "refused"), cHoldStore("s", "b", "w2", 2, "in/1", "refused"),
		cHoldStore("s", "d", "w2", 1, "in/2", "refused"))
	require.Equal(t, uint64(4), h.run("s").Stall.Parked)
	for _, id := range []string{"a", "b", "c", "d"} {
		require.Zero(t, h.item("s", id).Failures, id)
		require.Equal(t, StatePending, h.item("s", id).State, id)
	}
	// The other run is served; the isolated one is not, before its probe.
	h.ok(cComplete("o", "o0", "w2", 1, `{}`))
	require.Empty(t, h.ok(cClaim("w1", 10))[0].Items)
	require.Len(t, eventsOf(h.l, EventRunStalled), 1)
	checkInvariants(t, h.l)

	// One probe per interval; a probe held again as unreachable doubles it.
	h.now = h.now.Add(StallProbeMin)
	probe := h.ok(cClaim("w1", 10))[0].Items
	require.Len(t, probe, 1)
	require.Empty(t, h.ok(cClaim("w2", 10))[0].Items, "one probe at a time")
	h.ok(cHoldStore("s", string(probe[0].ID), "w1", probe[0].Attempt, "in/1", "refused"))
	require.True(t, h.run("s").Stall.NextProbe.Equal(h.now.Add(2*StallProbeMin)))
	h.now = h.now.Add(2 * StallProbeMin)
	probe = h.ok(cClaim("w1", 10))[0].Items
	require.Len(t, probe, 1)

	// The store is back: the probe completes, the run resumes by itself.
	h.ok(cCompleteRef("s", string(probe[0].ID), "w1", probe[0].Attempt, "results/s/x", 0, 4, sum(1), ""))
	require.Nil(t, h.run("s").Stall)
	res2 := eventsOf(h.l, EventRunResumed)
	require.Len(t, res2, 1)
	require.Contains(t, res2[0].Detail, "store reachable again")
	require.Len(t, h.ok(cClaim("w2", 10))[0].Items, 3)
	require.Zero(t, h.run("s").Failures)
	checkInvariants(t, h.l)
}

// TestStoreHoldFleetOfOne: where one registered worker takes the run, its
// one report isolates the run; a Lost worker does not count.
func TestStoreHoldFleetOfOne(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmit("s", &fsmpb.RunSpec{Store: testStore}, false, nr("a", 0, "in/1", 0, 4), nr("b", 1, "in/1", 4, 4)))
	h.ok(cRegisterAll("w1")...)
	h.ok(cClaim("w1", 1))
	h.ok(cHoldStore("s", "a", "w1", 1, "in/1", "timeout"))
	require.NotNil(t, h.run("s").Stall)
	require.True(t, h.run("s").Stall.StoreUnreachable)
	checkInvariants(t, h.l)

	// Two workers, one of them Lost: the live one alone isolates.
	h = newHarness(t)
	h.ok(cSubmit("s", &fsmpb.RunSpec{Store: testStore}, false, nr("a", 0, "in/1", 0, 4)))
	h.ok(cRegisterAll("w1", "w2")...)
	h.ok(cClaim("w1", 1))
	h.now = h.now.Add(time.Minute)
	h.ok(cHeartbeat("w1", 0, 0, []*fsmpb.ItemKey{key("s", "a", 1)}, nil))
	require.Equal(t, []string{"w2"}, h.ok(cExpire(30 * time.Second))[0].Expired)
	h.ok(cHoldStore("s", "a", "w1", 1, "in/1", "timeout"))
	require.NotNil(t, h.run("s").Stall)
	checkInvariants(t, h.l)
}

// TestStoreSuspectsClearedByProgress: an item of the run completed or
// failed (the store answered that worker) forgets the suspects, so two
// workers' blips far apart do not isolate the run; a permanent problem
// (a missing object) stays what it was: a missing input stall, and a
// failure is still a failure.
func TestStoreSuspectsClearedByProgress(t *testing.T) {
	h := stallLedger(t) // w1 holds s/a and s/b
	h.ok(cHoldStore("s", "a", "w1", 1, "in/1", "timeout"))
	require.Equal(t, []string{"w1"}, suspectsOf(h, "s"))
	h.ok(cCompleteRef("s", "b", "w1", 1, "results/s/x", 0, 4, sum(1), ""))
	require.Empty(t, suspectsOf(h, "s"))
	// w2 takes what is queued: s/a, s/c, s/d and the other run's.
	require.ElementsMatch(t, []string{"s/a", "s/c", "s/d", "o/o0", "o/o1"}, claimedRunIDs(h.ok(cClaim("w2", 10))[0]))
	h.ok(cHoldStore("s", "a", "w2", 2, "in/1", "timeout"))
	require.Nil(t, h.run("s").Stall, "w1's report was cleared by its completion")
	require.Equal(t, []string{"w2"}, suspectsOf(h, "s"))
	h.ok(cFail("s", "c", "w2", 1, "backend said no"))
	require.Empty(t, suspectsOf(h, "s"))
	require.EqualValues(t, 1, h.item("s", "c").Failures)

	// A missing object held on a store-isolated run turns the stall into
	// a missing input (the last hold says what is wrong).
	h.ok(cHoldStore("s", "d", "w2", 1, "in/2", "timeout"))
	require.Equal(t, []string{"w2"}, suspectsOf(h, "s"))
	require.ElementsMatch(t, []string{"s/a", "s/c", "s/d"}, claimedRunIDs(h.ok(cClaim("w1", 10))[0]))
	h.ok(cHoldStore("s", "a", "w1", 3, "in/1", "timeout"))
	require.True(t, h.run("s").Stall.StoreUnreachable)
	h.ok(cHold("s", "c", "w1", 2, "in/2", "object not found"))
	require.NotNil(t, h.run("s").Stall)
	require.False(t, h.run("s").Stall.StoreUnreachable)
	require.Equal(t, "object not found", h.run("s").Stall.Reason)
	checkInvariants(t, h.l)
}

// TestStoreStallSnapshot: a store-isolated run and another run's store
// suspects survive a snapshot byte for byte, and the restored ledger
// isolates and probes the same way.
func TestStoreStallSnapshot(t *testing.T) {
	h := stallLedger(t)
	h.ok(cSubmit("t", &fsmpb.RunSpec{Store: testStore}, false, nr("t0", 0, "in/9", 0, 4), nr("t1", 1, "in/9", 4, 4)))
	h.ok(cHoldStore("s", "a", "w1", 1, "in/1", "timeout"))
	h.ok(cClaim("w2", 10))
	h.ok(cHoldStore("s", "c", "w2", 1, "in/2", "timeout"))  // s isolated
	h.ok(cHoldStore("t", "t0", "w2", 1, "in/9", "refused")) // t suspects w2
	require.True(t, h.run("s").Stall.StoreUnreachable)
	require.Equal(t, []string{"w2"}, suspectsOf(h, "t"))
	b := persist(t, h.l)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, b))
	checkInvariants(t, l)
	require.Equal(t, b, persist(t, l))
	h2 := &harness{t: t, l: l, term: h.term, now: h.now, index: h.index + 1}
	require.Equal(t, h.run("s").Stall, h2.run("s").Stall)
	require.Equal(t, []string{"w2"}, suspectsOf(h2, "t"))
	require.Equal(t, dumpLedger(h.l), dumpLedger(l))
	// The restored suspects count: w1's report on t isolates it.
	h2.ok(cHoldStore("t", "t1", "w2", 1, "in/9", "refused"))
	require.Nil(t, h2.run("t").Stall)
	got := claimedRunIDs(h2.ok(cClaim("w1", 10))[0])
	require.Contains(t, got, "t/t0")
	h2.ok(cHoldStore("t", "t0", "w1", 2, "in/9", "refused"))
	require.True(t, h2.run("t").Stall.StoreUnreachable)
	checkInvariants(t, l)
}

// TestStoreHoldRefusedChangesNothing: a store-unreachable hold that is
// not the owner's, names no object or a bad one, or names a run without a
// store is refused and counts no suspect.
func TestStoreHoldRefusedChangesNothing(t *testing.T) {
	h := stallLedger(t) // w1 holds s/a and s/b
	require.ErrorIs(t, h.one(cHoldStore("s", "a", "w2", 1, "in/1", "refused")).Err, ErrCASMiss)
	require.ErrorIs(t, h.one(cHoldStore("s", "a", "w1", 2, "in/1", "refused")).Err, ErrCASMiss)
	require.ErrorIs(t, h.one(cHoldStore("s", "a", "w1", 1, "", "refused")).Err, ErrInvalidCommand)
	require.ErrorIs(t, h.one(cHoldStore("s", "a", "w1", 1, "../x", "refused")).Err, ErrInvalidCommand)
	require.Empty(t, suspectsOf(h, "s"))
	require.Nil(t, h.run("s").Stall)
	require.Equal(t, StateRunning, h.item("s", "a").State)
	h.ok(cClaim("w2", 1)) // o0, of the run without a store
	require.ErrorIs(t, h.one(cHoldStore("o", "o0", "w2", 1, "in/1", "refused")).Err, ErrInvalidCommand)
	require.Empty(t, suspectsOf(h, "o"))
	checkInvariants(t, h.l)
}
