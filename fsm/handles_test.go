package fsm

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

const testClusterID = "0123456789abcdef0123456789abcdef"

func cHandle(op fsmpb.HandleOp, run string, f func(*fsmpb.HandleCmd)) *fsmpb.Command {
	c := &fsmpb.HandleCmd{Op: op, Run: run}
	if f != nil {
		f(c)
	}
	return &fsmpb.Command{Cmd: &fsmpb.Command_Handle{Handle: c}}
}

func cCreateHandle(run, peer string) *fsmpb.Command {
	return cHandle(fsmpb.HandleOp_HANDLE_OP_CREATE, run, func(c *fsmpb.HandleCmd) {
		c.Peer, c.Parent, c.Tenant = peer, "a", "alice"
		c.Spec = &fsmpb.RunSpec{Model: "m", Store: "file:///s", Tenant: "alice", DataPrefix: "clusters/" + testClusterID + "/runs/" + run + "/" + testClusterID + "/"}
	})
}

func cStatus(run, state string, k *fsmpb.HandleCounters) *fsmpb.Command {
	return cHandle(fsmpb.HandleOp_HANDLE_OP_STATUS, run, func(c *fsmpb.HandleCmd) { c.State, c.Counters = state, k })
}

// handleHarness is a ledger with a cluster id and a leader.
func handleHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(cEpochID("r1", testClusterID))
	return h
}

// TestRemoteRunNameDeterministic: two ledgers that apply the same log
// (replicas) hand the same run the same remote name, which has the
// documented shape and depends on the cluster id, the run and its
// sequence number.
func TestRemoteRunNameDeterministic(t *testing.T) {
	a, b := handleHarness(t), handleHarness(t)
	for _, h := range []*harness{a, b} {
		h.ok(cSubmit("local", nil, false, ni("i1", 0, "p")))
		h.ok(cCreateHandle("r", "b"))
	}
	ha, err := a.l.Handle("r")
	require.NoError(t, err)
	hb, err := b.l.Handle("r")
	require.NoError(t, err)
	require.Equal(t, ha.RemoteRun, hb.RemoteRun)
	require.Regexp(t, regexp.MustCompile(`^a/r\.[0-9a-f]{8}$`), ha.RemoteRun)
	require.Equal(t, RemoteRunName("a", testClusterID, "r", ha.Seq), ha.RemoteRun)
	require.Equal(t, uint64(2), ha.Seq, "the handle took the run sequence number after the local run's")
	require.NotEqual(t, ha.RemoteRun, RemoteRunName("a", testClusterID, "r", ha.Seq+1))
	require.NotEqual(t, ha.RemoteRun, RemoteRunName("a", "fedcba9876543210fedcba9876543210", "r", ha.Seq))
	require.Equal(t, persist(t, a.l), persist(t, b.l), "replicas write identical snapshots")
}

// TestHandleCreateIdempotent: a re-applied CREATE (a new leader's re-drive
// of the same decision) changes nothing, keeps the remote name and records
// one handed-off event; a CREATE naming another peer, or a local run, is
// refused; a submit naming the handle is ErrHandled.
func TestHandleCreateIdempotent(t *testing.T) {
	h := handleHarness(t)
	h.ok(cCreateHandle("r", "b"))
	first, _ := h.l.Handle("r")
	before := persist(t, h.l)
	require.NoError(t, h.applyAt(cCreateHandle("r", "b"))[0].Err) // same stamped time: the same bytes
	again, _ := h.l.Handle("r")
	require.Equal(t, first.RemoteRun, again.RemoteRun)
	require.Equal(t, first.Seq, again.Seq)
	require.Equal(t, before, persist(t, h.l), "a repeated create changes nothing")
	evs, _, _ := h.l.Events(0, 100, "r")
	n := 0
	for _, e := range evs {
		if e.Kind == EventRunHandedOff {
			n++
			require.Equal(t, "b", e.Member)
			require.Equal(t, first.RemoteRun, e.Detail)
		}
	}
	require.Equal(t, 1, n)

	require.ErrorIs(t, h.one(cCreateHandle("r", "c")).Err, ErrRouteConflict)
	require.ErrorIs(t, h.one(cSubmit("r", nil, false, ni("i1", 0, "p"))).Err, ErrHandled)
	h.ok(cSubmit("loc", nil, false, ni("i1", 0, "p")))
	require.ErrorIs(t, h.one(cCreateHandle("loc", "b")).Err, ErrRouteConflict)
	origin := cCreateHandle("x", "b")
	origin.GetHandle().Spec.Origin = "z"
	require.ErrorIs(t, h.one(origin).Err, ErrRouteConflict, "a run from a peer is never handed on")
	_, err := h.l.Handle("x")
	require.ErrorIs(t, err, ErrRunNotFound)
}

// TestHandleCreateNeedsClusterID: without a cluster id there is no
// deterministic remote name: the create is refused.
func TestHandleCreateNeedsClusterID(t *testing.T) {
	h := newHarness(t)
	h.ok(cEpoch("r1", "r1:1"))
	require.ErrorIs(t, h.one(cCreateHandle("r", "b")).Err, ErrInvalidCommand)
}

// TestHandleLifecycle: acknowledged, counters that never go backwards, a
// terminal state that stays, and refusal only of a pending handle.
func TestHandleLifecycle(t *testing.T) {
	h := handleHarness(t)
	h.ok(cCreateHandle("r", "b"))
	hs, _ := h.l.Handle("r")
	require.Equal(t, HandlePending, hs.State)
	require.ErrorIs(t, h.one(cStatus("r", HandleLost, nil)).Err, ErrInvalidCommand, "never acknowledged: not lost")
	require.ErrorIs(t, h.one(cStatus("r", "bogus", nil)).Err, ErrInvalidCommand)
	require.ErrorIs(t, h.one(cHandle(fsmpb.HandleOp_HANDLE_OP_ACKNOWLEDGED, "r", func(c *fsmpb.HandleCmd) { c.RemoteRun = "a/other" })).Err, ErrRouteConflict)
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_ACKNOWLEDGED, "r", func(c *fsmpb.HandleCmd) { c.RemoteRun = hs.RemoteRun }))
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_REFUSED, "r", func(c *fsmpb.HandleCmd) { c.Reason = "late" }))
	hs, _ = h.l.Handle("r")
	require.Equal(t, HandleAcknowledged, hs.State, "an acknowledged run is not refused")

	h.ok(cStatus("r", HandleAcknowledged, &fsmpb.HandleCounters{Total: 10, Done: 6, Pending: 4}))
	h.ok(cStatus("r", HandleAcknowledged, &fsmpb.HandleCounters{Total: 10, Done: 3, Pending: 7})) // a stale answer
	hs, _ = h.l.Handle("r")
	require.Equal(t, uint64(6), hs.Counters.Done, "done never goes backwards")
	h.ok(cStatus("r", HandleFinished, &fsmpb.HandleCounters{Total: 10, Done: 10, FinishedUnixMs: 5}))
	h.ok(cStatus("r", HandleAcknowledged, &fsmpb.HandleCounters{Total: 10, Done: 2, Pending: 8}))
	hs, _ = h.l.Handle("r")
	require.Equal(t, HandleFinished, hs.State, "finished is final")
	require.Equal(t, uint64(10), hs.Counters.Done)
	require.Zero(t, hs.Counters.Pending)

	h.ok(cCreateHandle("q", "b"))
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_REFUSED, "q", func(c *fsmpb.HandleCmd) { c.Reason, c.Code = "quota", 8 }))
	qs, _ := h.l.Handle("q")
	require.Equal(t, HandleRefused, qs.State)
	require.Equal(t, "quota", qs.Reason)
	require.Equal(t, uint32(8), qs.Code)
	evs, _, _ := h.l.Events(0, 100, "q")
	require.Equal(t, EventPeerRefused, evs[len(evs)-1].Kind)
}

// TestHandleIntents: a cancel is a durable intent until the peer confirms;
// a delete needs a terminal handle, and is an intent until confirmed
// (removing the handle), except for a refused one (nothing on the peer).
func TestHandleIntents(t *testing.T) {
	h := handleHarness(t)
	h.ok(cCreateHandle("r", "b"))
	require.ErrorIs(t, h.one(cHandle(fsmpb.HandleOp_HANDLE_OP_DELETE, "r", nil)).Err, ErrRunActive)
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_CANCEL, "r", func(c *fsmpb.HandleCmd) { c.By = "alice" }))
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_CANCEL, "r", func(c *fsmpb.HandleCmd) { c.By = "bob" }))
	hs, _ := h.l.Handle("r")
	require.True(t, hs.CancelIntent)
	require.Equal(t, "alice", hs.CancelBy, "the first request is kept")
	require.Equal(t, HandlePending, hs.State, "an intent is not a confirmation")

	// Snapshot and restore keep the intent (a new leader re-drives it).
	snap := persist(t, h.l)
	r := newHarness(t)
	require.NoError(t, restore(r.l, snap))
	rs, err := r.l.Handle("r")
	require.NoError(t, err)
	require.Equal(t, hs, rs)
	require.Equal(t, snap, persist(t, r.l), "persist after restore reproduces the stream")

	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_CANCELLED, "r", nil))
	hs, _ = h.l.Handle("r")
	require.Equal(t, HandleCancelled, hs.State)

	// A finished handle has nothing to cancel: no intent, no event.
	g := handleHarness(t)
	g.ok(cCreateHandle("f", "b"))
	g.ok(cStatus("f", HandleFinished, &fsmpb.HandleCounters{Done: 1}))
	_, _, last := g.l.Events(0, 1, "")
	g.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_CANCEL, "f", nil))
	fs, _ := g.l.Handle("f")
	require.False(t, fs.CancelIntent)
	_, _, after := g.l.Events(0, 1, "")
	require.Equal(t, last, after)
	require.ErrorIs(t, h.one(cHandle(fsmpb.HandleOp_HANDLE_OP_DELETED, "r", nil)).Err, ErrInvalidCommand, "no delete was requested")
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_DELETE, "r", func(c *fsmpb.HandleCmd) { c.By = "alice" }))
	hs, _ = h.l.Handle("r")
	require.True(t, hs.DeleteIntent)
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_DELETED, "r", nil))
	_, err = h.l.Handle("r")
	require.ErrorIs(t, err, ErrRunNotFound)
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_DELETED, "r", nil)) // a re-driven confirmation
	require.Empty(t, h.l.Handles())
	// With no handle left the snapshot is version 9 again.
	require.Equal(t, uint32(snapshotVersion), uint32(persist(t, h.l)[7]))

	h.ok(cCreateHandle("q", "b"))
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_REFUSED, "q", func(c *fsmpb.HandleCmd) { c.Reason = "no" }))
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_DELETE, "q", nil))
	require.Empty(t, h.l.Handles(), "a refused handle is deleted at once")
	h.ok(cSubmit("q", nil, false, ni("i1", 0, "p"))) // the name is free again
}

// TestHandleSnapshotVersion: a ledger with a handle writes version 10 and
// restores it; a version 9 stream that claims handles, or a version 10 one
// that claims none, is refused.
func TestHandleSnapshotVersion(t *testing.T) {
	h := handleHarness(t)
	h.ok(cCreateHandle("r", "b"))
	snap := persist(t, h.l)
	require.Equal(t, byte(snapshotVersionHandles), snap[7])
	r := newHarness(t)
	require.NoError(t, restore(r.l, snap))
	require.Len(t, r.l.Handles(), 1)
	bad := append([]byte(nil), snap...)
	bad[7] = byte(snapshotVersion)
	require.ErrorIs(t, restore(newHarness(t).l, bad), ErrCorruptSnapshot)
}

// TestOriginKeepsParentPrefix: a run a peer handed here keeps the
// parent's data prefix (another cluster id, the parent's run name); a run
// of this cluster's own may not name another cluster's prefix.
func TestOriginKeepsParentPrefix(t *testing.T) {
	h := handleHarness(t)
	other := "clusters/fedcba9876543210fedcba9876543210/runs/r/" + testClusterID + "/"
	spec := &fsmpb.RunSpec{Store: "file:///s", DataPrefix: other}
	require.ErrorIs(t, h.one(cSubmitRef("a/r.0000abcd", spec, "i1", 0)).Err, ErrInvalidCommand)
	spec.Origin = "a"
	h.ok(cSubmitRef("a/r.0000abcd", spec, "i1", 0))
	require.Equal(t, "a", h.run("a/r.0000abcd").Spec.GetOrigin())
	spec.DataPrefix = "clusters/nothex/runs/r/" + testClusterID + "/"
	require.ErrorIs(t, h.one(cSubmitRef("a/r.1111abcd", spec, "i1", 0)).Err, ErrInvalidCommand)
}

// TestOriginLegacyPrefix: a handed-off run of the parent's layout without
// cluster identities keeps "runs/NAME/"; a run of this cluster may not.
func TestOriginLegacyPrefix(t *testing.T) {
	h := handleHarness(t)
	spec := &fsmpb.RunSpec{Store: "file:///s", DataPrefix: "runs/fed-1/"}
	require.ErrorIs(t, h.one(cSubmitRef("a/fed-1.0000abcd", spec, "i1", 0)).Err, ErrInvalidCommand)
	spec.Origin = "a"
	h.ok(cSubmitRef("a/fed-1.0000abcd", spec, "i1", 0))
	p, ok := h.l.RunDataPrefix("a/fed-1.0000abcd")
	require.True(t, ok)
	require.Equal(t, "runs/fed-1/", p)
}

// goldenHandles is the snapshot stream of handlesLedger: version 10, the
// handles after the tenants.
const goldenHandles = "testdata/snapshot-v10-handles.golden"

// handlesLedger holds a local run and a handle in each kind of state: a
// pending one with a cancel intent, an acknowledged one with counters, a
// refused one and a finished one with a delete intent.
func handlesLedger(t *testing.T) *harness {
	h := handleHarness(t)
	h.ok(cSubmit("local", nil, false, ni("i1", 0, "p")))
	for _, run := range []string{"p", "k", "x", "f"} {
		h.ok(cCreateHandle(run, "b"))
	}
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_CANCEL, "p", func(c *fsmpb.HandleCmd) { c.By = "alice" }))
	h.ok(cStatus("k", HandleAcknowledged, &fsmpb.HandleCounters{Total: 10, Done: 4, Pending: 5, Running: 1, ExpectedTotal: 10}))
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_REFUSED, "x", func(c *fsmpb.HandleCmd) { c.Reason, c.Code = "quota", 8 }))
	h.ok(cStatus("f", HandleFinished, &fsmpb.HandleCounters{Total: 3, Done: 2, Dead: 1, FinishedUnixMs: 1234}))
	h.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_DELETE, "f", func(c *fsmpb.HandleCmd) { c.By = "ops" }))
	return h
}

// TestGoldenHandles pins the version 10 stream (the handles' records) and
// that it restores to a ledger that writes it again byte for byte.
func TestGoldenHandles(t *testing.T) {
	got := persist(t, handlesLedger(t).l)
	if *updateGolden {
		require.NoError(t, os.WriteFile(goldenHandles, got, 0o644))
	}
	want, err := os.ReadFile(goldenHandles)
	require.NoError(t, err)
	require.Equal(t, want, got, "the version 10 snapshot of handlesLedger changed. "+goldenHowTo)
	r := newHarness(t)
	require.NoError(t, restore(r.l, want))
	require.Equal(t, want, persist(t, r.l))
	hs := r.l.Handles()
	require.Len(t, hs, 4)
	states := map[string]string{}
	for _, x := range hs {
		states[x.Run] = x.State
	}
	require.Equal(t, map[string]string{"f": HandleFinished, "k": HandleAcknowledged, "p": HandlePending, "x": HandleRefused}, states)
}
