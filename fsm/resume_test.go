package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// cResubmit is a resume submit: retry_dead plus a stale window.
func cResubmit(run string, stale time.Duration, items ...*fsmpb.NewItem) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Submit{Submit: &fsmpb.SubmitItemsCmd{
		Run: run, Items: items, RetryDead: true, RependStaleNano: int64(stale)}}}
}

func deadNI(id string, index uint64, payload, reason string) *fsmpb.NewItem {
	return &fsmpb.NewItem{Id: []byte(id), Index: index, Payload: []byte(payload), DeadReason: reason}
}

// TestSubmitResumeTable drives every row of the resume table through one
// resubmit: absent -> created, Pending -> left, Dead -> re-pended, Running
// with a live owner -> left, Running with a silent owner -> re-pended,
// Done -> left.
func TestSubmitResumeTable(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("wd", "wfresh", "wstale", "w9")...)
	spec := &fsmpb.RunSpec{MaxFailures: 1}
	// Items are claimed one by one in index order: done, dead, fresh, stale.
	h.ok(cSubmit("r", spec, false, ni("done", 0, "p0"), ni("dead", 1, "p1"), ni("fresh", 2, "p2"),
		ni("stale", 3, "p3"), ni("pend", 4, "p4")))
	require.Equal(t, "done", string(h.ok(cClaim("wd", 1))[0].Items[0].ID))
	h.ok(cComplete("r", "done", "wd", 1, "rd"))
	require.Equal(t, "dead", string(h.ok(cClaim("wd", 1))[0].Items[0].ID))
	h.ok(cFail("r", "dead", "wd", 1, "boom"))
	require.Equal(t, "fresh", string(h.ok(cClaim("wfresh", 1))[0].Items[0].ID))
	require.Equal(t, "stale", string(h.ok(cClaim("wstale", 1))[0].Items[0].ID))
	require.Equal(t, StateDead, h.item("r", "dead").State)

	// wstale goes silent for 10s; wfresh heartbeats 1s before the resubmit.
	h.now = h.now.Add(9 * time.Second)
	h.ok(cHeartbeat("wfresh", 1, 0, nil, nil))
	h.now = h.now.Add(time.Second)
	res := h.ok(cResubmit("r", 5*time.Second, ni("done", 0, "p0"), ni("dead", 1, "p1"), ni("fresh", 2, "p2"),
		ni("stale", 3, "p3"), ni("pend", 4, "p4"), ni("new", 5, "p5")))[0]
	require.Equal(t, SubmitCounts{Created: 1, AlreadyPending: 1, AlreadyRunning: 1, AlreadyDone: 1, Retried: 1, RependedStale: 1},
		res.Submit)

	want := map[string]State{"done": StateDone, "dead": StatePending, "fresh": StateRunning,
		"stale": StatePending, "pend": StatePending, "new": StatePending}
	for id, st := range want {
		require.Equal(t, st, h.item("r", id).State, id)
	}
	// The stale item keeps its attempt; its old owner's report now misses.
	stale := h.item("r", "stale")
	require.Equal(t, uint64(1), stale.Attempt)
	require.Empty(t, stale.Owner)
	require.Zero(t, h.worker("wstale").Running)
	require.ErrorIs(t, h.one(cComplete("r", "stale", "wstale", 1, "late")).Err, ErrCASMiss)
	require.Equal(t, "rd", string(h.item("r", "done").Result))
	checkInvariants(t, h.l)

	// Pending order: the re-pended items join the back of the queue in
	// command order.
	got := h.ok(cClaim("w9", 10))[0].Items
	var ids []string
	for _, it := range got {
		ids = append(ids, string(it.ID))
	}
	require.Equal(t, []string{"pend", "dead", "stale", "new"}, ids)
	require.Equal(t, uint64(2), h.item("r", "stale").Attempt, "a new claim fences the old owner")
	checkInvariants(t, h.l)
}

func TestSubmitStaleWindow(t *testing.T) {
	tests := []struct {
		name    string
		silent  time.Duration // since the owner's last heartbeat
		stale   time.Duration // the window; 0 = none
		repends bool
	}{
		{"no window leaves running items", time.Hour, 0, false},
		{"silent longer than the window", 6 * time.Second, 5 * time.Second, true},
		{"silent exactly the window", 5 * time.Second, 5 * time.Second, false},
		{"silent shorter than the window", 4 * time.Second, 5 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.ok(cRegisterAll("w1")...)
			h.ok(cSubmit("r", nil, false, ni("a", 0, "p")))
			h.ok(cClaim("w1", 1))
			h.now = h.now.Add(tt.silent - time.Millisecond) // apply adds 1ms
			res := h.ok(cResubmit("r", tt.stale, ni("a", 0, "p")))[0]
			if tt.repends {
				require.Equal(t, SubmitCounts{RependedStale: 1}, res.Submit)
				require.Equal(t, StatePending, h.item("r", "a").State)
			} else {
				require.Equal(t, SubmitCounts{AlreadyRunning: 1}, res.Submit)
				require.Equal(t, StateRunning, h.item("r", "a").State)
			}
			checkInvariants(t, h.l)
		})
	}
}

func TestSubmitStaleIsDeterministic(t *testing.T) {
	// Two ledgers applying the same log hold the same snapshot bytes after a
	// stale re-pend.
	var snaps [][]byte
	for range 2 {
		h := newHarness(t)
		h.ok(cRegisterAll("w1", "w2")...)
		h.ok(cSubmit("r", nil, false, ni("a", 0, "p"), ni("b", 1, "q")))
		h.ok(cClaim("w1", 1))
		h.ok(cClaim("w2", 1))
		h.now = h.now.Add(time.Minute)
		h.ok(cHeartbeat("w2", 1, 0, nil, nil))
		h.ok(cResubmit("r", time.Second, ni("b", 1, "q"), ni("a", 0, "p")))
		snaps = append(snaps, persist(t, h.l))
	}
	require.Equal(t, snaps[0], snaps[1])
}

func TestSubmitDeadReason(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("w1")...)
	res := h.ok(cSubmit("r", &fsmpb.RunSpec{Total: 3}, false, ni("a", 0, "p"), deadNI("bad", 1, `{"invalid_line":"x"}`, "line 2: not JSON"),
		ni("c", 2, "q")))[0]
	require.Equal(t, SubmitCounts{Created: 2, CreatedDead: 1}, res.Submit)
	bad := h.item("r", "bad")
	require.Equal(t, StateDead, bad.State)
	require.Equal(t, "line 2: not JSON", bad.Reason)
	require.Zero(t, bad.Attempt)
	require.Equal(t, 2, h.l.Pending(), "the dead item is not queued")
	rs := h.run("r")
	require.Equal(t, uint64(1), rs.Dead)
	require.Equal(t, uint64(3), rs.Total)

	// A resubmit with retry_dead leaves it Dead: it can never run.
	res = h.ok(cResubmit("r", 0, deadNI("bad", 1, `{"invalid_line":"x"}`, "line 2: not JSON")))[0]
	require.Equal(t, SubmitCounts{Dead: 1}, res.Submit)
	require.Equal(t, StateDead, h.item("r", "bad").State)

	// Finishing the others finishes the run.
	items := h.ok(cClaim("w1", 5))[0].Items
	require.Len(t, items, 2)
	for _, it := range items {
		h.ok(cComplete("r", string(it.ID), "w1", it.Attempt, "ok"))
	}
	require.False(t, h.run("r").FinishedAt.IsZero())
	checkInvariants(t, h.l)

	// It survives a snapshot round trip.
	b := persist(t, h.l)
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, b))
	items2, _, _, err := l2.Results("r", 1, 1)
	require.NoError(t, err)
	require.Equal(t, StateDead, items2[0].State)
	require.Equal(t, "line 2: not JSON", items2[0].Reason)
}

func TestSubmitResumeInvalid(t *testing.T) {
	tests := []struct {
		name string
		cmd  *fsmpb.Command
	}{
		{"negative stale window", &fsmpb.Command{Cmd: &fsmpb.Command_Submit{Submit: &fsmpb.SubmitItemsCmd{
			Run: "r", Items: []*fsmpb.NewItem{ni("z", 9, "p")}, RependStaleNano: -1}}}},
		{"oversized dead reason", cSubmit("r", nil, false, deadNI("z", 9, "p", strings.Repeat("x", limits.MaxReasonBytes+1)))},
		{"non-printable dead reason", cSubmit("r", nil, false, deadNI("z", 9, "p", "bad\x00reason"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.ok(cRegisterAll("w1")...)
			h.ok(cSubmit("r", nil, false, ni("a", 0, "p")))
			h.ok(cClaim("w1", 1))
			before := persist(t, h.l)
			res := h.applyAt(tt.cmd)[0]
			require.ErrorIs(t, res.Err, ErrInvalidCommand)
			require.Equal(t, before, persist(t, h.l), "a refused command changes nothing")
		})
	}
}
