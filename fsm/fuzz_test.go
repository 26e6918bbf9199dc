package fsm

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// fuzzLedger is a small ledger with state for fuzz targets to act on.
func fuzzLedger(t testing.TB) *harness {
	h := newHarness(t)
	h.ok(cEpoch("c1", "g1"))
	h.ok(cSubmit("r", &fsmpb.RunSpec{MaxFailures: 2, Total: 4}, false,
		ni("a", 0, "pa"), ni("b", 1, "pb"), ni("c", 2, "pc"), ni("d", 3, "pd")))
	h.ok(cSubmit("t", &fsmpb.RunSpec{Kind: "train"}, false, ni("s0", 0, ""), nd("r0", 1, "s0"), nd("s1", 2, "r0")))
	h.ok(cRegisterAll("w1", "w2", "w3", "w4")...)
	h.ok(cClaim("w1", 2))
	h.ok(cClaim("w2", 1))
	h.ok(cHeartbeat("w2", 0, 1, []*fsmpb.ItemKey{key("r", "c", 1)}, nil))
	h.ok(cSubmitRanges("g", rangeSpec(100), chunk(0, 60, "in/a"), chunk(60, 40, "in/b")))
	h.ok(cClaimIdx("w3", 1, 30))
	return h
}

// seedEntries returns encoded entries exercising every command.
func seedEntries(h *harness) [][]byte {
	cmds := [][]*fsmpb.Command{
		{cEpoch("c2", "g2")},
		{cSubmit("r", nil, true, ni("e", 4, "pe"), ni("a", 0, ""))},
		{cClaim("w3", 3), cComplete("r", "a", "w1", 1, "ra")},
		{cFail("r", "b", "w1", 1, "x"), cNack("r", "c", "w2", 1)},
		{cHeartbeat("w1", 1, 2, []*fsmpb.ItemKey{key("r", "a", 1)}, []*fsmpb.ItemKey{key("r", "b", 1)})},
		{cDeregister("w2"), cSteal("w4", 0), cExpire(time.Second)},
		{cRegister("w5"), cClaim("w6", 1), cEvict("w1"), cEvict("w7")},
		{cSetMember("c3", "r3", "g3"), cRemoveMember("c1")},
		{cSubmit("t", nil, false, nd("r1", 3, "s1", "r0"), nd("r2", 4, "r1")), cClaim("w3", 5)},
		{cComplete("t", "s0", "w2", 1, "g0"), cClaim("w4", 2), cSubmit("t", nil, true, nd("r0", 1, "s1"))},
		{cReport("g", []byte(rangeID(3)), "w3", 1, 0, 10, 'a', &fsmpb.FailedIndex{Index: 4, Reason: "x"}), cClaimIdx("w4", 2, 50)},
		{cHeartbeat("w3", 0, 1, []*fsmpb.ItemKey{{Run: "g", Id: []byte(rangeID(3)), Attempt: 1, Started: 12}}, nil), cSteal("w1", 0)},
		{cSubmitRanges("g", nil, chunk(0, 60, "in/a"), chunk(100, 5, "in/c"))},
		{cEpochID("c2", testClusterID), cCreateHandle("h", "b"), cCreateHandle("r", "b"), cStatus("h", HandleFinished, &fsmpb.HandleCounters{Done: 3})},
		{cHandle(fsmpb.HandleOp_HANDLE_OP_CANCEL, "h", nil), cHandle(fsmpb.HandleOp_HANDLE_OP_DELETE, "h", nil), cHandle(fsmpb.HandleOp_HANDLE_OP_DELETED, "h", nil)},
	}
	var out [][]byte
	for _, c := range cmds {
		out = append(out, h.entry(1, c...))
	}
	return append(out, nil, []byte{0xff}, []byte{0x1a, 0x02, 0x0a, 0x00})
}

// FuzzApply applies arbitrary entry data. It must never panic; data that
// Apply refuses (it does not decode or fails its checksum) must change
// nothing; whatever applies must keep the
// invariants and be deterministic across two replicas.
func FuzzApply(f *testing.F) {
	f.Add(uint64(1), []byte(nil))
	for _, e := range seedEntries(fuzzLedger(f)) {
		f.Add(uint64(1), e)
		f.Add(uint64(0), e)
	}
	f.Fuzz(func(t *testing.T, term uint64, data []byte) {
		a, b := fuzzLedger(t), fuzzLedger(t)
		before := persist(t, a.l)
		lg := &raft.Log{Index: 100, Term: term, Type: raft.LogCommand, Data: data}
		out := a.l.Apply(lg)
		if err, ok := out.(error); ok {
			require.ErrorIs(t, err, ErrCorruptEntry)
			require.Equal(t, before, persist(t, a.l), "refused data changed the ledger")
			return
		}
		res, ok := out.(Results)
		require.True(t, ok, "Apply returned %T", out)
		for _, r := range res {
			if r.Err != nil {
				errKind(t, r.Err)
			}
		}
		require.NoError(t, invariantsErr(a.l))
		b.l.Apply(lg)
		snap := persist(t, a.l)
		require.Equal(t, snap, persist(t, b.l))
		c, err := New(DefaultConfig())
		require.NoError(t, err)
		require.NoError(t, restore(c, snap))
		require.Equal(t, snap, persist(t, c))
	})
}

// FuzzRestore restores arbitrary bytes. It must never panic; a refused
// stream leaves the ledger as it was; an accepted one yields a consistent
// ledger whose snapshot is stable.
func FuzzRestore(f *testing.F) {
	good := persist(f, fuzzLedger(f).l)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte(nil))
	f.Add([]byte("RLDG\x00\x00\x00\x01"))
	f.Add(append([]byte("RLDG\x00\x00\x00\x01"), 0xff, 0xff, 0xff, 0xff, 0x0f))
	empty, err := New(DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(persist(f, empty))
	withHandle := fuzzLedger(f)
	withHandle.ok(cEpochID("c2", testClusterID), cCreateHandle("h", "b"))
	withHandle.ok(cHandle(fsmpb.HandleOp_HANDLE_OP_CANCEL, "h", nil))
	f.Add(persist(f, withHandle.l))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := fuzzLedger(t)
		before := persist(t, h.l)
		if err := restore(h.l, data); err != nil {
			require.ErrorIs(t, err, ErrCorruptSnapshot)
			require.Equal(t, before, persist(t, h.l))
			return
		}
		require.NoError(t, invariantsErr(h.l))
		snap := persist(t, h.l)
		again, err := New(DefaultConfig())
		require.NoError(t, err)
		require.NoError(t, restore(again, snap))
		require.True(t, bytes.Equal(snap, persist(t, again)))
	})
}
