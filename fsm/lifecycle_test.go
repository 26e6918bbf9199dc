package fsm

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

const testStore = "file:///var/rollout-store"

func sum(b byte) []byte { return bytes.Repeat([]byte{b}, hashBytes) }

// nr is a new item whose payload is length bytes at offset of object.
func nr(id string, index uint64, object string, offset, length uint64) *fsmpb.NewItem {
	return &fsmpb.NewItem{Id: []byte(id), Index: index, PayloadRef: &fsmpb.DataRef{Object: object, Offset: offset, Length: length}}
}

func cCompleteRef(run, id, worker string, attempt uint64, object string, offset, length uint64, hash []byte, summary string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Complete{Complete: &fsmpb.CompleteCmd{Run: run, Id: []byte(id), Worker: worker,
		Attempt: attempt, ResultRef: &fsmpb.DataRef{Object: object, Offset: offset, Length: length, Blake3: hash}, Summary: []byte(summary)}}}
}

func cCancel(run string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_CancelRun{CancelRun: &fsmpb.CancelRunCmd{Run: run, By: "ops"}}}
}

func cDelete(run string, retention int64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_DeleteRun{DeleteRun: &fsmpb.DeleteRunCmd{Run: run, By: "ops", RetentionNano: retention}}}
}

func storeHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(cEpoch("c1", "a"))
	h.ok(cRegisterAll("w1", "w2")...)
	h.ok(cSubmit("s", &fsmpb.RunSpec{Store: testStore, Total: 4}, false,
		nr("a", 0, "runs/s/inputs/c1", 0, 10), nr("b", 1, "runs/s/inputs/c1", 11, 5),
		nr("c", 2, "runs/s/inputs/c2", 0, 7), nr("d", 3, "runs/s/inputs/c2", 8, 3)))
	return h
}

func TestStoreRunReferences(t *testing.T) {
	h := storeHarness(t)
	claimed := h.ok(cClaim("w1", 2))[0].Items
	require.Len(t, claimed, 2)
	require.Equal(t, &Ref{Object: "runs/s/inputs/c1", Offset: 11, Length: 5}, claimed[1].PayloadRef)
	require.Nil(t, claimed[0].Payload)

	res := "runs/s/results/r1"
	h.ok(cCompleteRef("s", "a", "w1", 1, res, 0, 4, sum(1), `{"loss":1}`))
	// A retry of the same completion with the same hash, even from another
	// object, is a duplicate; another hash is a conflict.
	r := h.one(cCompleteRef("s", "a", "w1", 1, "runs/s/results/r2", 9, 4, sum(1), ""))
	require.NoError(t, r.Err)
	require.True(t, r.Duplicate)
	r = h.one(cCompleteRef("s", "a", "w1", 1, res, 0, 4, sum(2), ""))
	require.ErrorIs(t, r.Err, ErrConflict)

	it := h.item("s", "a")
	require.Equal(t, StateDone, it.State)
	require.Equal(t, &Ref{Object: res, Offset: 0, Length: 4, Blake3: sum(1)}, it.ResultRef)
	require.Equal(t, []byte(`{"loss":1}`), it.Summary)

	// Refused, changing nothing: an inline result for a store run, a ref
	// without a hash, a key escaping the root, an oversized summary.
	before := persist(t, h.l)
	for _, c := range []*fsmpb.Command{
		cComplete("s", "b", "w1", 1, "inline"),
		cCompleteRef("s", "b", "w1", 1, res, 0, 4, nil, ""),
		cCompleteRef("s", "b", "w1", 1, "../escape", 0, 4, sum(1), ""),
		cCompleteRef("s", "b", "w1", 1, "runs//x", 0, 4, sum(1), ""),
		cCompleteRef("s", "b", "w1", 1, res, 0, 4, sum(1), string(bytes.Repeat([]byte("x"), limits.MaxSummaryBytes+1))),
		cSubmit("s", nil, false, ni("e", 4, "inline payload")),
		cSubmit("s", &fsmpb.RunSpec{Store: "s3://other"}, false, nr("e", 4, "k", 0, 1)),
		cSubmit("inline", nil, false, nr("e", 0, "k", 0, 1)),
	} {
		r := h.applyAt(c)[0] // the clock stands still: the snapshot must not change
		require.ErrorIs(t, r.Err, ErrInvalidCommand, "%v", c)
	}
	require.Equal(t, before, persist(t, h.l))

	// Dependencies hand out their results' references and summaries.
	deps, err := h.l.Dependencies("s", []byte("a"))
	require.NoError(t, err)
	require.Empty(t, deps)

	// Snapshots keep references, object tables and summaries.
	snap := persist(t, h.l)
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, snap))
	checkInvariants(t, l2)
	require.Equal(t, snap, persist(t, l2))
	h2 := &harness{t: t, l: l2}
	require.Equal(t, it, h2.item("s", "a"))
	require.Equal(t, h.item("s", "c"), h2.item("s", "c"))
}

func TestCancelRun(t *testing.T) {
	h := storeHarness(t)
	h.ok(cClaim("w1", 2)) // a, b running
	r := h.one(cCancel("s"))
	require.NoError(t, r.Err)
	require.Equal(t, 2, r.Repended, "c and d were pending")
	rs := h.run("s")
	require.True(t, rs.IsCancelled)
	require.Equal(t, uint64(2), rs.Cancelled)
	require.Equal(t, uint64(2), rs.Running)
	require.True(t, rs.FinishedAt.IsZero(), "running items may still finish")
	require.Empty(t, h.ok(cClaim("w2", 10))[0].Items, "a cancelled run hands out nothing")

	// A running item may finish; a nacked one is cancelled, not re-pended.
	h.ok(cCompleteRef("s", "a", "w1", 1, "runs/s/results/r", 0, 1, sum(3), ""))
	h.ok(cNack("s", "b", "w1", 1))
	require.Equal(t, StateCancelled, h.item("s", "b").State)
	rs = h.run("s")
	require.Equal(t, uint64(1), rs.Done)
	require.Equal(t, uint64(3), rs.Cancelled)
	require.False(t, rs.FinishedAt.IsZero())
	require.Zero(t, h.l.Pending())

	// Idempotent; a submit to a cancelled run is refused.
	require.NoError(t, h.one(cCancel("s")).Err)
	require.ErrorIs(t, h.one(cSubmit("s", nil, false, nr("e", 4, "k", 0, 1))).Err, ErrRunCancelled)
	require.ErrorIs(t, h.one(cCancel("nope")).Err, ErrRunNotFound)
	checkInvariants(t, h.l)

	evs, _, _ := h.l.Events(0, 0, "s")
	var kinds []EventKind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	require.Contains(t, kinds, EventRunCancelled)

	snap := persist(t, h.l)
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, snap))
	checkInvariants(t, l2)
	require.Equal(t, snap, persist(t, l2))
}

func TestCancelRunFailsAndExpiry(t *testing.T) {
	h := storeHarness(t)
	h.ok(cClaim("w1", 1), cClaim("w2", 1)) // a on w1, b on w2
	h.ok(cCancel("s"))
	h.ok(cFail("s", "a", "w1", 1, "boom")) // would be retried: cancelled instead
	require.Equal(t, StateCancelled, h.item("s", "a").State)
	h.ok(cDeregister("w2"))
	require.Equal(t, StateCancelled, h.item("s", "b").State)
	require.Zero(t, h.l.Pending())
	checkInvariants(t, h.l)
}

func TestDeleteRun(t *testing.T) {
	h := storeHarness(t)
	h.ok(cSubmit("other", &fsmpb.RunSpec{Total: 1}, false, ni("x", 0, "p")))
	h.ok(cClaim("w1", 1))
	before := persist(t, h.l)
	r := h.applyAt(cDelete("s", 0))[0]
	require.ErrorIs(t, r.Err, ErrRunActive)
	require.ErrorContains(t, r.Err, "cancel it first")
	require.Equal(t, before, persist(t, h.l))

	h.ok(cCancel("s"))
	r = h.one(cDelete("s", 0))
	require.NoError(t, r.Err)
	require.Equal(t, 4, r.Repended)
	_, err := h.l.Run("s")
	require.ErrorIs(t, err, ErrRunNotFound)
	require.Empty(t, h.l.Owned("w1"), "the deleted run's running item left its owner")
	require.ErrorIs(t, h.one(cCompleteRef("s", "a", "w1", 1, "runs/s/results/r", 0, 1, sum(3), "")).Err, ErrRunNotFound)
	checkInvariants(t, h.l)
	require.Less(t, len(persist(t, h.l)), len(before), "the snapshot is smaller by the run")

	// The name can be used again; the new run gets a new sequence number.
	h.ok(cSubmit("s", &fsmpb.RunSpec{Total: 1}, false, ni("y", 0, "p")))
	checkInvariants(t, h.l)
	evs, _, _ := h.l.Events(0, 0, "s")
	found := false
	for _, e := range evs {
		if e.Kind == EventRunDeleted {
			found = true
			require.Equal(t, "deleted by ops", e.Detail)
			require.Equal(t, uint64(4), e.Count)
		}
	}
	require.True(t, found)

	snap := persist(t, h.l)
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, snap))
	checkInvariants(t, l2)
	require.Equal(t, snap, persist(t, l2))
}

func TestDeleteRunRetention(t *testing.T) {
	h := newHarness(t)
	h.ok(cEpoch("c1", "a"))
	h.ok(cRegisterAll("w1")...)
	const ret = int64(3600e9)
	h.ok(cSubmit("r", &fsmpb.RunSpec{Total: 1, RetainNano: ret}, false, ni("x", 0, "p")))
	require.Empty(t, h.l.RetentionDue(h.now.UnixNano()+2*ret, 10), "not finished")
	h.ok(cClaim("w1", 1))
	h.ok(cComplete("r", "x", "w1", 1, "done"))
	fin := h.run("r").FinishedAt.UnixNano()
	require.Empty(t, h.l.RetentionDue(fin+ret-1, 10))
	require.Equal(t, []RetentionSweep{{Run: "r", RetainNano: ret}}, h.l.RetentionDue(fin+ret, 10))

	// Too early: a no-op that succeeds.
	r := h.one(cDelete("r", ret))
	require.NoError(t, r.Err)
	require.Zero(t, r.Repended)
	_, err := h.l.Run("r")
	require.NoError(t, err)
	// Another retention than the spec's: a no-op.
	h.now = h.now.Add(2 * 3600e9)
	require.Zero(t, h.one(cDelete("r", ret+1)).Repended)
	r = h.one(cDelete("r", ret))
	require.NoError(t, r.Err)
	require.Equal(t, 1, r.Repended)
	_, err = h.l.Run("r")
	require.ErrorIs(t, err, ErrRunNotFound)
	require.NoError(t, h.one(cDelete("r", ret)).Err, "a sweep of a deleted run is a no-op")
	checkInvariants(t, h.l)
}

func TestCompleteManyAndSubmitObjects(t *testing.T) {
	h := newHarness(t)
	h.ok(cEpoch("c1", "a"))
	h.ok(cRegisterAll("w1", "w2")...)
	sub := cSubmit("s", &fsmpb.RunSpec{Store: testStore, Total: 3}, false,
		&fsmpb.NewItem{Id: []byte("a"), Index: 0, PayloadObj: 1, PayloadRef: &fsmpb.DataRef{Offset: 0, Length: 4}},
		&fsmpb.NewItem{Id: []byte("b"), Index: 1, PayloadObj: 2, PayloadRef: &fsmpb.DataRef{Offset: 5, Length: 4}},
		&fsmpb.NewItem{Id: []byte("c"), Index: 2, PayloadObj: 1, PayloadRef: &fsmpb.DataRef{Offset: 9, Length: 2}})
	sub.GetSubmit().Objects = []string{"runs/s/inputs/x", "runs/s/inputs/y"}
	h.ok(sub)
	require.Equal(t, &Ref{Object: "runs/s/inputs/y", Offset: 5, Length: 4}, h.item("s", "b").PayloadRef)
	require.Equal(t, &Ref{Object: "runs/s/inputs/x", Offset: 9, Length: 2}, h.item("s", "c").PayloadRef)

	// An object number out of range, or with an object named as well, is
	// refused whole.
	for _, ni := range []*fsmpb.NewItem{
		{Id: []byte("d"), Index: 3, PayloadObj: 3, PayloadRef: &fsmpb.DataRef{Length: 1}},
		{Id: []byte("d"), Index: 3, PayloadObj: 1, PayloadRef: &fsmpb.DataRef{Object: "k", Length: 1}},
		{Id: []byte("d"), Index: 3, PayloadObj: 1},
	} {
		c := cSubmit("s", nil, false, ni)
		c.GetSubmit().Objects = []string{"runs/s/inputs/x", "runs/s/inputs/y"}
		require.ErrorIs(t, h.one(c).Err, ErrInvalidCommand)
	}

	h.ok(cClaim("w1", 2), cClaim("w2", 1)) // a, b on w1; c on w2
	many := func(worker string, ids []string, attempts []uint64, hash byte) *fsmpb.Command {
		cm := &fsmpb.CompleteManyCmd{Run: "s", Worker: worker, Object: "runs/s/results/o1"}
		for i, id := range ids {
			cm.Ids = append(cm.Ids, []byte(id))
			cm.Attempts = append(cm.Attempts, attempts[i])
			cm.Offsets = append(cm.Offsets, uint64(i)*10)
			cm.Lengths = append(cm.Lengths, 10)
			cm.Hashes = append(cm.Hashes, sum(hash+byte(i))...)
		}
		return &fsmpb.Command{Cmd: &fsmpb.Command_CompleteMany{CompleteMany: cm}}
	}
	// c is not w1's: a CAS miss for it alone; a and b complete.
	r := h.one(many("w1", []string{"a", "b", "c"}, []uint64{1, 1, 1}, 10))
	require.NoError(t, r.Err)
	require.Len(t, r.Each, 3)
	require.NoError(t, r.Each[0].Err)
	require.NoError(t, r.Each[1].Err)
	require.ErrorIs(t, r.Each[2].Err, ErrCASMiss)
	require.Equal(t, &Ref{Object: "runs/s/results/o1", Offset: 10, Length: 10, Blake3: sum(11)}, h.item("s", "b").ResultRef)
	// A retry is a duplicate per item; another hash a conflict.
	r = h.one(many("w1", []string{"a", "b"}, []uint64{1, 1}, 10))
	require.True(t, r.Each[0].Duplicate)
	require.True(t, r.Each[1].Duplicate)
	r = h.one(many("w1", []string{"a"}, []uint64{1}, 99))
	require.ErrorIs(t, r.Each[0].Err, ErrConflict)

	// A malformed command fails whole and changes nothing.
	bad := many("w2", []string{"c"}, []uint64{1}, 20)
	bad.GetCompleteMany().Hashes = bad.GetCompleteMany().Hashes[:31]
	require.ErrorIs(t, h.applyAt(bad)[0].Err, ErrInvalidCommand)
	require.Equal(t, StateRunning, h.item("s", "c").State)
	h.ok(many("w2", []string{"c"}, []uint64{1}, 20))
	require.False(t, h.run("s").FinishedAt.IsZero())
	checkInvariants(t, h.l)
}

func TestPermanentFailure(t *testing.T) {
	h := newHarness(t)
	h.ok(cEpoch("c1", "a"))
	h.ok(cRegisterAll("w1")...)
	h.ok(cSubmit("r", &fsmpb.RunSpec{Total: 2, MaxFailures: 5}, false, ni("a", 0, "p"), ni("b", 1, "p")))
	h.ok(cClaim("w1", 2))
	h.ok(cFail("r", "a", "w1", 1, "flaky"))
	require.Equal(t, StatePending, h.item("r", "a").State, "an ordinary failure is retried")
	perm := cFail("r", "b", "w1", 1, "bad input: the handler says retrying cannot help")
	perm.GetFail().Permanent = true
	r := h.one(perm)
	require.NoError(t, r.Err)
	require.Zero(t, r.Repended)
	it := h.item("r", "b")
	require.Equal(t, StateDead, it.State, "a permanent failure is Dead at once")
	require.Equal(t, "bad input: the handler says retrying cannot help", it.Reason)
	checkInvariants(t, h.l)
}
