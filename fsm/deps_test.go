package fsm

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// nd is a new item with dependencies.
func nd(id string, index uint64, deps ...string) *fsmpb.NewItem {
	it := ni(id, index, "p"+id)
	for _, d := range deps {
		it.DependsOn = append(it.DependsOn, []byte(d))
	}
	return it
}

func TestDepsLimit(t *testing.T) {
	h := newHarness(t)
	var items []*fsmpb.NewItem
	var deps []string
	for i := range limits.MaxDepsPerItem + 1 {
		id := fmt.Sprintf("s%03d", i)
		items = append(items, ni(id, uint64(i), ""))
		deps = append(deps, id)
	}
	h.ok(cSubmit("r", nil, false, items...))
	before := persist(t, h.l)
	res := h.one(cSubmit("r", nil, false, nd("over", 1000, deps...)))
	require.ErrorIs(t, res.Err, ErrInvalidCommand)
	require.ErrorContains(t, res.Err, fmt.Sprintf("depends on %d items, limit %d", limits.MaxDepsPerItem+1, limits.MaxDepsPerItem))
	require.NotEqual(t, before, persist(t, h.l)) // the clock moved, nothing else
	require.Equal(t, uint64(limits.MaxDepsPerItem+1), h.run("r").Total)
	h.ok(cSubmit("r", nil, false, nd("max", 1000, deps[:limits.MaxDepsPerItem]...)))
	require.Equal(t, uint64(1), h.run("r").Blocked)
	checkInvariants(t, h.l)
}

func TestDepsKindStoredAndChecked(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmit("r", &fsmpb.RunSpec{Kind: "train"}, false, ni("a", 0, "")))
	require.Equal(t, "train", h.run("r").Spec.GetKind())
	res := h.one(cSubmit("q", &fsmpb.RunSpec{Kind: string(make([]byte, limits.MaxKindBytes+1))}, false, ni("a", 0, "")))
	require.ErrorIs(t, res.Err, ErrInvalidCommand)
	require.ErrorContains(t, res.Err, "spec kind")
}

// A whole submit is validated before anything changes: a bad dependency of
// its last item leaves the earlier ones uncreated.
func TestDepsWholeCommandValidated(t *testing.T) {
	h := newHarness(t)
	res := h.one(cSubmit("r", nil, false, ni("a", 0, ""), nd("b", 1, "a"), nd("c", 2, "missing")))
	require.ErrorIs(t, res.Err, ErrInvalidCommand)
	require.ErrorContains(t, res.Err, "items[2]")
	_, err := h.l.Run("r")
	require.ErrorIs(t, err, ErrRunNotFound)
}

// TestDepsDeadDependency: a Dead dependency keeps its dependents blocked and
// the run unfinished; retry_dead lets the graph finish, and every item ends
// with exactly one result.
func TestDepsDeadDependency(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegister("w"))
	h.ok(cSubmit("r", &fsmpb.RunSpec{MaxFailures: 1, Total: 4}, false,
		ni("s0", 0, ""), ni("s1", 1, ""), nd("red", 2, "s0", "s1"), nd("next", 3, "red")))
	res := h.ok(cClaim("w", 10))
	require.Equal(t, []string{"s0", "s1"}, claimedIDs(res[0].Items))
	h.ok(cComplete("r", "s0", "w", 1, "g0"))
	h.ok(cFail("r", "s1", "w", 1, "oom"))

	rs := h.run("r")
	require.Equal(t, uint64(2), rs.Blocked)
	require.Equal(t, uint64(2), rs.Pending)
	require.Equal(t, uint64(1), rs.Dead)
	require.True(t, rs.FinishedAt.IsZero(), "a run with blocked items is not finished")
	require.Equal(t, 0, h.l.Pending())
	require.Empty(t, h.ok(cClaim("w", 10))[0].Items)

	h.ok(cSubmit("r", nil, true, ni("s1", 1, "")))
	require.Equal(t, []string{"s1"}, claimedIDs(h.ok(cClaim("w", 10))[0].Items))
	h.ok(cComplete("r", "s1", "w", 2, "g1"))
	res = h.ok(cClaim("w", 10))
	require.Equal(t, []string{"red"}, claimedIDs(res[0].Items))
	deps, err := h.l.Dependencies("r", []byte("red"))
	require.NoError(t, err)
	require.Equal(t, []Dependency{{ID: []byte("s0"), State: StateDone, Result: []byte("g0")}, {ID: []byte("s1"), State: StateDone, Result: []byte("g1")}}, deps)
	h.ok(cComplete("r", "red", "w", 1, "w1"))
	require.Equal(t, []string{"next"}, claimedIDs(h.ok(cClaim("w", 10))[0].Items))
	h.ok(cComplete("r", "next", "w", 1, "w2"))
	rs = h.run("r")
	require.False(t, rs.FinishedAt.IsZero())
	require.Equal(t, uint64(4), rs.Done)
	require.Zero(t, rs.Blocked)
	items, _, _, err := h.l.Results("r", 0, 0)
	require.NoError(t, err)
	for _, it := range items {
		require.Equal(t, StateDone, it.State, "%s", it.ID)
		require.NotEmpty(t, it.Result)
	}
	require.Equal(t, [][]byte{[]byte("red")}, items[3].DependsOn)
	checkInvariants(t, h.l)
}

// TestDepsUnblockOrderIsHistoryFree: dependents created out of index order
// unblock in index order, in the ledger that applied the log and in one
// restored from its snapshot alike, which then stay byte-identical.
func TestDepsUnblockOrderIsHistoryFree(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegister("w"))
	h.ok(cSubmit("r", nil, false, ni("a", 0, ""), nd("z", 9, "a"), nd("m", 5, "a"), nd("b", 1, "a")))
	h.ok(cSubmit("r", nil, false, nd("c", 2, "a")))
	h.ok(cClaim("w", 1))

	restored, err := New(h.l.cfg)
	require.NoError(t, err)
	require.NoError(t, restore(restored, persist(t, h.l)))
	other := &harness{t: t, l: restored, term: h.term, now: h.now, index: h.index}

	for _, x := range []*harness{h, other} {
		x.ok(cComplete("r", "a", "w", 1, "ra"))
		require.Equal(t, []string{"b", "c", "m", "z"}, claimedIDs(x.ok(cClaim("w", 10))[0].Items))
		checkInvariants(t, x.l)
	}
	require.Equal(t, persist(t, h.l), persist(t, other.l))
}

func TestDepsResubmit(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmit("r", nil, false, ni("a", 0, ""), ni("b", 1, ""), nd("c", 2, "a", "b")))
	res := h.ok(cSubmit("r", nil, false, nd("c", 2, "a", "b")))
	require.Equal(t, uint64(1), res[0].Submit.AlreadyPending)
	for _, deps := range [][]string{nil, {"b", "a"}, {"a"}, {"a", "b", "x"}} {
		r := h.one(cSubmit("r", nil, false, ni("x", 3, ""), nd("c", 2, deps...)))
		require.ErrorIs(t, r.Err, ErrInvalidCommand, "%v", deps)
		require.ErrorContains(t, r.Err, "items[1] gives id 63 other dependencies", "%v", deps)
	}
	require.Equal(t, uint64(3), h.run("r").Total)
}

func TestRestoreInconsistentDeps(t *testing.T) {
	run := &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Run{Run: &fsmpb.RunRecord{
		Name: "r", Spec: &fsmpb.RunSpec{MaxFailures: 3}, Seq: 1}}}
	item := func(id string, index uint64, state State, owner string, attempt, pseq uint64, deps ...string) *fsmpb.SnapshotRecord {
		ir := &fsmpb.ItemRecord{Run: "r", Id: []byte(id), Index: index, State: uint32(state), Owner: owner, Attempt: attempt, PendingSeq: pseq}
		for _, d := range deps {
			ir.DependsOn = append(ir.DependsOn, []byte(d))
		}
		return &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Item{Item: ir}}
	}
	worker := &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Worker{Worker: &fsmpb.WorkerRecord{Id: "w"}}}
	// The run's tenant's record (the default tenant's), which a valid
	// stream of today's version holds.
	tenant := &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Tenant{Tenant: &fsmpb.TenantRecord{Name: DefaultTenant, Weight: 1}}}
	hdr := func(items, workers, tenants uint64) *fsmpb.SnapshotHeader {
		return &fsmpb.SnapshotHeader{Version: snapshotVersion, Runs: 1, Items: items, Workers: workers, RunSeq: 1, Tenants: tenants}
	}
	tests := []struct {
		name   string
		recs   []*fsmpb.SnapshotRecord
		detail string // "" for a valid stream
	}{
		{"valid: blocked, claimable, running, dead with deps", []*fsmpb.SnapshotRecord{
			run, item("b", 1, StatePending, "", 0, 0, "a"),
			item("c", 2, StateDone, "w", 1, 0), item("d", 3, StatePending, "", 0, 1, "c"),
			item("e", 4, StateDead, "", 0, 0, "a"), item("a", 0, StateRunning, "w", 1, 0)}, ""},
		{"unknown dependency", []*fsmpb.SnapshotRecord{run, item("b", 1, StatePending, "", 0, 0, "zz")}, "unknown item"},
		{"self dependency", []*fsmpb.SnapshotRecord{run, item("b", 1, StatePending, "", 0, 0, "b")}, "itself"},
		{"duplicate dependency", []*fsmpb.SnapshotRecord{run, item("a", 0, StatePending, "", 0, 1),
			item("b", 1, StatePending, "", 0, 0, "a", "a")}, "twice"},
		{"blocked item in the queue", []*fsmpb.SnapshotRecord{run, item("a", 0, StatePending, "", 0, 1),
			item("b", 1, StatePending, "", 0, 2, "a")}, "blocked true"},
		{"claimable item out of the queue", []*fsmpb.SnapshotRecord{run, item("a", 0, StateDone, "", 1, 0),
			item("b", 1, StatePending, "", 0, 0, "a")}, "blocked false"},
		{"running item with an unmet dependency", []*fsmpb.SnapshotRecord{run, item("a", 0, StatePending, "", 0, 1),
			item("b", 1, StateRunning, "w", 1, 0, "a")}, "not done"},
		{"done item with an unmet dependency", []*fsmpb.SnapshotRecord{run, item("a", 0, StateDead, "", 1, 0),
			item("b", 1, StateDone, "", 1, 0, "a"), item("c", 2, StatePending, "", 0, 1)}, "not done"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := base(t).l
			before := persist(t, l)
			workers, tenants := uint64(0), uint64(0)
			recs := tc.recs
			if tc.detail == "" || tc.name == "running item with an unmet dependency" {
				recs, workers = append(recs, worker), 1
			}
			if tc.detail == "" {
				recs, tenants = append(recs, tenant), 1
			}
			data := craft(t, hdr(uint64(len(tc.recs)-1), workers, tenants), recs...)
			err := restore(l, data)
			if tc.detail == "" {
				require.NoError(t, err)
				checkInvariants(t, l)
				require.Equal(t, data, persist(t, l))
				rs, err := l.Run("r")
				require.NoError(t, err)
				require.Equal(t, uint64(1), rs.Blocked)
				require.Equal(t, 1, l.Pending())
				return
			}
			require.ErrorIs(t, err, ErrCorruptSnapshot)
			require.ErrorContains(t, err, tc.detail)
			require.Equal(t, before, persist(t, l))
		})
	}
}

const (
	// goldenDepsV1 and goldenDepsV1Dump are goldenDepsLedger's snapshot in
	// format version 1 and what it holds, frozen: a later format must keep
	// restoring them.
	goldenDepsV1     = "testdata/snapshot-v1-deps.golden"
	goldenDepsV1Dump = "testdata/snapshot-v1-deps.txt"
)

// goldenDepsFile is the file pinning goldenDepsLedger's snapshot in the
// current format (version 2 since the event history).
func goldenDepsFile() string {
	return fmt.Sprintf("testdata/snapshot-v%d-deps.golden", snapshotVersion)
}

// goldenDepsLedger is goldenLedger's companion for what came after it: a
// training-shaped run of kind "train" with dependencies in every state
// (blocked on a Pending, a Running and a Dead item, unblocked and queued,
// Running and Done with dependencies).
func goldenDepsLedger(t *testing.T) *harness {
	h := newHarness(t)
	h.term = 2
	h.ok(cEpoch("c1", "g1"))
	h.ok(cRegisterAll("w1", "w2")...)
	h.ok(cSubmit("t", &fsmpb.RunSpec{Kind: "train", Total: 7, MaxFailures: 1}, false,
		ni("s0", 0, "p0"), ni("s1", 1, "p1"), nd("r1", 2, "s1", "s0"), nd("s2", 3, "r1"), ni("s3", 4, "p3"),
		nd("r2", 5, "s2", "s3"), ni("bad", 6, "pb")))
	h.ok(cSubmit("t", nil, false, nd("after-bad", 7, "bad")))
	h.ok(cClaim("w1", 2)) // s0 s1
	h.ok(cClaim("w2", 2)) // s3 bad
	h.ok(cComplete("t", "s0", "w1", 1, "g0"))
	h.ok(cComplete("t", "s1", "w1", 1, "g1")) // r1 unblocked
	h.ok(cFail("t", "bad", "w2", 1, "boom"))  // after-bad blocked on a Dead item
	h.ok(cClaim("w1", 1))                     // r1
	h.ok(cComplete("t", "r1", "w1", 1, "w1")) // s2 unblocked
	checkInvariants(t, h.l)
	return h
}

// TestGoldenSnapshotDeps pins the snapshot of a ledger with dependencies,
// like TestGoldenSnapshot (which keeps checking that a snapshot from before
// dependencies restores): the stream goldenDepsLedger persists must equal
// goldenDepsFile byte for byte, and the frozen version 1 file must restore
// to the state it was written from. After a format change, -update writes
// the new version's file and leaves the version 1 files alone.
func TestGoldenSnapshotDeps(t *testing.T) {
	h := goldenDepsLedger(t)
	got := persist(t, h.l)
	if *updateGolden {
		require.NoError(t, os.WriteFile(goldenDepsFile(), got, 0o644))
		if snapshotVersion == 1 {
			require.NoError(t, os.WriteFile(goldenDepsV1Dump, []byte(dumpLedger(h.l)), 0o644))
		}
	}
	want, err := os.ReadFile(goldenDepsFile())
	require.NoError(t, err, "missing golden file; create it with `go test ./fsm -run Golden -update`")
	if d := firstDiff(want, got); d >= 0 {
		t.Fatalf("the snapshot format changed: the stream persisted by goldenDepsLedger differs from %s at byte %d.\n%s",
			goldenDepsFile(), d, goldenHowTo)
	}

	// The frozen version 1 stream restores to the ledger that wrote it.
	v1, err := os.ReadFile(goldenDepsV1)
	require.NoError(t, err)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, v1))
	checkInvariants(t, l)
	wantDump, err := os.ReadFile(goldenDepsV1Dump)
	require.NoError(t, err)
	require.Equal(t, string(wantDump), dumpLedger(l))
	rs, err := l.Run("t")
	require.NoError(t, err)
	require.Equal(t, "train", rs.Spec.GetKind())
	require.Equal(t, uint64(2), rs.Blocked, "r2 waits on s2 (Pending) and s3 (Running); after-bad on Dead bad")
	// It goes on like the original: completing s2 and s3 unblocks r2.
	other := &harness{t: t, l: l, term: h.term, now: h.now, index: h.index}
	for _, x := range []*harness{h, other} {
		x.ok(cClaim("w1", 5))
		x.ok(cComplete("t", "s2", "w1", 1, "g2"), cComplete("t", "s3", "w2", 1, "g3"))
		require.Equal(t, []string{"r2"}, claimedIDs(x.ok(cClaim("w1", 5))[0].Items))
	}
	require.Equal(t, dumpLedger(h.l), dumpLedger(l))
}
