package fsm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// Liveness is leader-local: the leader decides from its memory and the
// commands below carry its decision. These tests hold the ledger to the
// rules of applying such a decision.

func cStealBy(thief, victim string, executing ...*fsmpb.ItemKey) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Steal{Steal: &fsmpb.StealCmd{Thief: thief, ByLeader: true, Victim: victim, VictimExecuting: executing}}}
}

func cExpireBy(timeout time.Duration, workers ...string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Expire{Expire: &fsmpb.ExpireWorkersCmd{TimeoutNano: int64(timeout), ByLeader: true, Workers: workers}}}
}

// TestStealByLeaderTakesFromNamedVictim: the leader's choice of victim
// stands even when another worker owns more, and the leader's view of the
// victim's progress splits its range (no heartbeat command needed).
func TestStealByLeaderTakesFromNamedVictim(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(300), chunk(0, 300, "in/a")))
	h.ok(cRegisterAll("v", "big", "t")...)
	rg := h.one(cClaimIdx("v", 1, 100)).Items[0]
	h.one(cClaimIdx("big", 1, 200))
	res := h.one(cStealBy("t", "v", &fsmpb.ItemKey{Run: "r", Id: rg.ID, Attempt: 1, Started: 20}))
	require.NoError(t, res.Err)
	require.Equal(t, "v", res.Victim, "the leader's choice, not the busiest by the ledger")
	require.Len(t, res.Items, 1)
	k := min(40, uint64(DefaultConfig().MaxStealBatch))
	require.Equal(t, [3]uint64{100 - k, k, 2}, [3]uint64{res.Items[0].Index, res.Items[0].Count, res.Items[0].Attempt})
	require.Equal(t, uint64(20), h.item("r", string(rg.ID)).Started, "the leader's progress mark is recorded")
	checkInvariants(t, h.l)
}

// TestStealByLeaderChecksChoice: a victim that is gone, Lost, the thief
// itself or owns nothing the thief takes yields nothing and changes nothing;
// the thief must be registered and idle.
func TestStealByLeaderChecksChoice(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(100), chunk(0, 100, "in/a")))
	h.ok(cRegisterAll("v", "idle", "t")...)
	h.one(cClaimIdx("v", 1, 100))
	before := h.l.Owned("v")
	for _, victim := range []string{"nobody", "idle", "t"} {
		res := h.one(cStealBy("t", victim))
		require.NoError(t, res.Err, victim)
		require.Empty(t, res.Items, victim)
	}
	require.ErrorIs(t, h.one(cStealBy("ghost", "v")).Err, ErrWorkerNotRegistered)
	c := cStealBy("t", "v")
	c.GetSteal().ThiefBacklog = 3
	require.ErrorIs(t, h.one(c).Err, ErrNotIdle)
	bad := cStealBy("t", "v", &fsmpb.ItemKey{Run: "", Id: []byte("x")})
	require.Error(t, h.one(bad).Err, "a malformed executing key is refused")
	require.Equal(t, before, h.l.Owned("v"))
	checkInvariants(t, h.l)
}

// TestExpireByLeaderNamesWorkers: only named workers are declared lost, and
// only those the ledger holds live that sent no command within the timeout
// (a claim the log ordered after the leader's decision keeps its worker).
func TestExpireByLeaderNamesWorkers(t *testing.T) {
	const timeout = 5 * time.Second
	h := base(t) // w1 holds a, b; w2 and w3 idle
	h.now = h.now.Add(3 * time.Second)
	h.ok(cClaim("w2", 1)) // w2 holds c, and spoke 3 s in
	h.now = h.now.Add(3 * time.Second)
	// The leader names w1, w2 and an unknown worker; not w3 (silent in
	// the ledger, but heartbeating to the leader).
	res := h.one(cExpireBy(timeout, "w2", "w1", "ghost", "w1"))
	require.NoError(t, res.Err)
	require.Equal(t, []string{"w1"}, res.Expired, "w2 spoke within the timeout; ghost is unknown")
	require.Equal(t, 2, res.Repended)
	require.Equal(t, WorkerLost, h.l.Worker("w1"))
	require.Equal(t, WorkerLive, h.l.Worker("w3"))
	require.Equal(t, WorkerLive, h.l.Worker("w2"))
	require.Equal(t, WorkerUnknown, h.l.Worker("ghost"))
	// Naming a Lost worker again does nothing.
	again := h.one(cExpireBy(timeout, "w1"))
	require.NoError(t, again.Err)
	require.Empty(t, again.Expired)
	require.Error(t, h.one(cExpireBy(timeout, "")).Err, "an empty name is refused")
	checkInvariants(t, h.l)
}

// TestSubmitStaleByLeader: with the leader's judgement, a resubmit re-pends
// the Running work of the workers it names (and of Lost or unknown owners),
// never that of a live worker it did not name however old its last command.
func TestSubmitStaleByLeader(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(100), chunk(0, 100, "in/a")))
	h.ok(cRegisterAll("quiet", "gone")...)
	h.one(cClaimIdx("quiet", 1, 50))
	h.one(cClaimIdx("gone", 1, 50))
	h.now = h.now.Add(time.Hour)
	c := cSubmitRanges("r", rangeSpec(100), chunk(0, 100, "in/a"))
	c.GetSubmitRanges().RependStaleNano = int64(time.Minute)
	c.GetSubmitRanges().StaleByLeader = true
	c.GetSubmitRanges().StaleWorkers = []string{"gone"}
	res := h.one(c)
	require.NoError(t, res.Err)
	require.Equal(t, uint64(50), res.Submit.RependedStale)
	require.Equal(t, uint64(50), res.Submit.AlreadyRunning, "quiet's range stays: the leader hears it")
	require.Len(t, h.l.Owned("quiet"), 1)
	require.Empty(t, h.l.Owned("gone"))
	checkInvariants(t, h.l)
}

// TestCancelTakesLeaderStartedMarks: a cancel keeps what the leader last
// heard each owner had started, and cuts the rest.
func TestCancelTakesLeaderStartedMarks(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmitRanges("r", rangeSpec(100), chunk(0, 100, "in/a")))
	h.ok(cRegister("w1"))
	rg := h.one(cClaimIdx("w1", 1, 100)).Items[0]
	c := &fsmpb.Command{Cmd: &fsmpb.Command_CancelRun{CancelRun: &fsmpb.CancelRunCmd{Run: "r", By: "op",
		Started: []*fsmpb.ItemKey{{Run: "r", Id: rg.ID, Attempt: 1, Started: 30}, {Run: "r", Id: rg.ID, Attempt: 9, Started: 90}}}}}
	res := h.one(c)
	require.NoError(t, res.Err)
	require.Equal(t, 70, res.Repended, "[30, 100) cancelled; the stale attempt's mark is ignored")
	require.NoError(t, h.one(cReport("r", rg.ID, "w1", 1, 0, 30, 'a')).Err)
	checkInvariants(t, h.l)
}
