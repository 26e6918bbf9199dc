package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// stealSetup submits n items to run r, registers the thieves t, w4 and w5,
// and has each worker register and claim its count, in the order given.
func stealSetup(t *testing.T, cfg Config, claims ...struct {
	w string
	n uint32
}) *harness {
	h := newHarnessConfig(t, cfg)
	var total uint32
	for _, c := range claims {
		total += c.n
	}
	var items []*fsmpb.NewItem
	for i := range total {
		items = append(items, ni(fmt.Sprintf("i%03d", i), uint64(i), ""))
	}
	h.ok(cSubmit("r", nil, false, items...))
	h.ok(cRegisterAll("t", "w4", "w5")...)
	for _, c := range claims {
		h.ok(cRegister(c.w))
		res := h.ok(cClaim(c.w, c.n))
		require.Len(t, res[0].Items, int(c.n))
	}
	return h
}

type claimN = struct {
	w string
	n uint32
}

func TestStealPicksBusiestVictim(t *testing.T) {
	h := stealSetup(t, DefaultConfig(), claimN{"w1", 5}, claimN{"w3", 7}, claimN{"w2", 7})
	before := h.l.Owned("w2")
	res := h.one(cSteal("w4", 0))
	require.NoError(t, res.Err)
	require.Equal(t, "w2", res.Victim, "w2 and w3 tie at 7; the smaller id wins")
	require.Len(t, res.Items, 4, "ceil(7/2)")
	// Taken from the most recently claimed end, attempt + 1, owned by the thief.
	for i, it := range res.Items {
		want := before[len(before)-1-i]
		require.Equal(t, want.ID, it.ID)
		require.Equal(t, want.Attempt+1, it.Attempt)
		require.Equal(t, "w4", it.Owner)
		require.Equal(t, StateRunning, it.State)
		require.Equal(t, h.now, it.ClaimedAt)
	}
	require.Equal(t, claimedIDs(before[:3]), claimedIDs(h.l.Owned("w2")))
	require.Equal(t, claimedIDs(res.Items), claimedIDs(h.l.Owned("w4")))
	require.Equal(t, h.now, h.worker("w4").LastHeartbeat)
	checkInvariants(t, h.l)

	// The victim's ack of a stolen item misses; the thief's wins.
	stolen := res.Items[0]
	miss := h.one(cComplete("r", string(stolen.ID), "w2", stolen.Attempt-1, "v"))
	require.ErrorIs(t, miss.Err, ErrCASMiss)
	require.NoError(t, h.one(cComplete("r", string(stolen.ID), "w4", stolen.Attempt, "t")).Err)
	// And the victim learns at its next heartbeat.
	hb := h.one(cHeartbeat("w2", 0, 0, nil, []*fsmpb.ItemKey{key("r", string(stolen.ID), stolen.Attempt-1)}))
	require.Len(t, hb.Lost, 1)
}

func TestStealAmount(t *testing.T) {
	tests := []struct {
		name      string
		running   uint32
		batch     int
		executing int // the victim's most recent items reported as executing
		want      int
	}{
		{"one item", 1, 32, 0, 1},
		{"odd count rounds up", 9, 32, 0, 5},
		{"capped at MaxStealBatch", 100, 32, 0, 32},
		{"capped at a smaller batch", 10, 2, 0, 2},
		{"executing items are skipped", 6, 32, 2, 3},
		{"fewer candidates than half", 6, 32, 5, 1},
		{"everything executing", 4, 32, 4, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxStealBatch = tc.batch
			h := stealSetup(t, cfg, claimN{"v", tc.running})
			owned := h.l.Owned("v")
			var exec []*fsmpb.ItemKey
			busy := map[string]bool{}
			for _, it := range owned[len(owned)-tc.executing:] {
				exec = append(exec, key(it.Run, string(it.ID), it.Attempt))
				busy[string(it.ID)] = true
			}
			// A stale executing key (wrong attempt) protects nothing.
			exec = append(exec, key("r", string(owned[0].ID), owned[0].Attempt+5))
			h.ok(cHeartbeat("v", uint32(tc.running), 1, exec, nil))

			res := h.one(cSteal("t", 0))
			require.NoError(t, res.Err)
			require.Equal(t, "v", res.Victim)
			require.Len(t, res.Items, tc.want)
			for _, it := range res.Items {
				require.False(t, busy[string(it.ID)], "stole executing item %s", it.ID)
			}
			require.Equal(t, tc.want, len(h.l.Owned("t")))
			require.Equal(t, int(tc.running)-tc.want, len(h.l.Owned("v")))
			checkInvariants(t, h.l)
		})
	}
}

func TestStealNoVictim(t *testing.T) {
	h := stealSetup(t, DefaultConfig(), claimN{"t", 3})
	res := h.one(cSteal("t", 0))
	require.NoError(t, res.Err, "the thief never robs itself")
	require.Empty(t, res.Items)
	require.Empty(t, res.Victim)

	// A lost worker is never a victim.
	h.ok(cRegister("v"), cClaim("v", 10))
	h.now = h.now.Add(time.Minute)
	h.applyAt(cHeartbeat("t", 0, 0, nil, nil))
	require.Equal(t, []string{"v", "w4", "w5"}, h.applyAt(cExpire(time.Second))[0].Expired)
	res = h.one(cSteal("t", 0))
	require.NoError(t, res.Err)
	require.Empty(t, res.Items)
}

func TestStealNotIdle(t *testing.T) {
	h := stealSetup(t, DefaultConfig(), claimN{"v", 4})
	before := persist(t, h.l)
	res := h.applyAt(cSteal("t", 2))[0]
	require.ErrorIs(t, res.Err, ErrNotIdle)
	require.Equal(t, before, persist(t, h.l))
}

// TestAckStealRace applies a Complete and a Steal that expect the same
// Running(v, a) in both orders: exactly one wins each time.
func TestAckStealRace(t *testing.T) {
	for _, ackFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("ack first %v", ackFirst), func(t *testing.T) {
			h := stealSetup(t, DefaultConfig(), claimN{"v", 1})
			it := h.l.Owned("v")[0]
			ack := cComplete("r", string(it.ID), "v", it.Attempt, "from-v")
			steal := cSteal("t", 0)
			var ackRes, stealRes Result
			if ackFirst {
				res := h.apply(ack, steal) // one entry: the log orders them
				ackRes, stealRes = res[0], res[1]
			} else {
				res := h.apply(steal, ack)
				stealRes, ackRes = res[0], res[1]
			}
			require.NoError(t, stealRes.Err)
			ackWon := ackRes.Err == nil
			stealWon := len(stealRes.Items) == 1
			require.NotEqual(t, ackWon, stealWon, "exactly one of ack and steal wins")
			require.Equal(t, ackFirst, ackWon)
			got := h.item("r", string(it.ID))
			if ackWon {
				require.Equal(t, StateDone, got.State)
				require.Equal(t, "from-v", string(got.Result))
			} else {
				require.ErrorIs(t, ackRes.Err, ErrCASMiss)
				require.Equal(t, StateRunning, got.State)
				require.Equal(t, "t", got.Owner)
				require.Equal(t, it.Attempt+1, got.Attempt)
			}
			checkInvariants(t, h.l)
		})
	}
}
