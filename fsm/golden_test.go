package fsm

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in fsm/testdata")

const (
	// goldenSnapshot is the snapshot stream of goldenLedger, in today's
	// format (snapshotVersion 9: version 8 plus the runs whose store is
	// unreachable, which goldenLedger holds none of: stall_test.go
	// round-trips them).
	goldenSnapshot = "testdata/snapshot-v9.golden"
	// goldenDump is dumpLedger, dumpEvents, dumpRevocations and dumpTenants
	// of that snapshot restored: what it holds, in words.
	goldenDump = "testdata/snapshot-v9.txt"
	// goldenSnapshotV8 and goldenDumpV8 are the frozen version 8 stream
	// (version 7 plus tenants, their usage and each run's served count;
	// goldenLedger's runs are the default tenant's, tenants_test.go
	// round-trips several) and what it holds.
	goldenSnapshotV8 = "testdata/snapshot-v8.golden"
	goldenDumpV8     = "testdata/snapshot-v8.txt"
	// goldenSnapshotV7 and goldenDumpV7 are the frozen version 7 stream
	// (before tenants) and what it holds. It is the last stream the script
	// of goldenLedger wrote while claims served one FIFO across runs:
	// every older frozen stream must read as it does (fifoGoldenReads).
	goldenSnapshotV7 = "testdata/snapshot-v7.golden"
	goldenDumpV7     = "testdata/snapshot-v7.txt"
	// goldenSnapshotV6 and goldenDumpV6 are the frozen version 6 stream
	// (before range runs) and what it holds.
	goldenSnapshotV6 = "testdata/snapshot-v6.golden"
	goldenDumpV6     = "testdata/snapshot-v6.txt"
	// goldenSnapshotV5 and goldenDumpV5 are the frozen version 5 stream
	// (before the revocation list) and what it holds.
	goldenSnapshotV5 = "testdata/snapshot-v5.golden"
	goldenDumpV5     = "testdata/snapshot-v5.txt"
	// goldenSnapshotV4 and goldenDumpV4 are the frozen version 4 stream
	// (before stalled runs) and what it holds.
	goldenSnapshotV4 = "testdata/snapshot-v4.golden"
	goldenDumpV4     = "testdata/snapshot-v4.txt"
	// goldenSnapshotV3 and goldenDumpV3 are the frozen version 3 stream
	// (before the models a worker serves) and what it holds.
	goldenSnapshotV3 = "testdata/snapshot-v3.golden"
	goldenDumpV3     = "testdata/snapshot-v3.txt"
	// goldenSnapshotV2 and goldenDumpV2 are the frozen version 2 stream
	// (before run object tables, references and cancelled runs) and what
	// it holds.
	goldenSnapshotV2 = "testdata/snapshot-v2.golden"
	goldenDumpV2     = "testdata/snapshot-v2.txt"
	// goldenSnapshotV1 is the stream goldenLedger persisted in format
	// version 1 (before events), frozen: replicas must keep restoring
	// snapshots written by the released version. goldenDumpV1 is what it
	// holds.
	goldenSnapshotV1 = "testdata/snapshot-v1.golden"
	goldenDumpV1     = "testdata/snapshot-v1.txt"
	// goldenHowTo ends every golden failure.
	goldenHowTo = "If the format change is intended, bump snapshotVersion and keep " +
		"reading the versions before it (replicas restore snapshots written by the released version), " +
		"freeze the current golden files under their version's name, " +
		"then run `go test ./fsm -run Golden -update` and commit the rewritten files."
)

// goldenLedger builds, from a fixed script of commands at fixed stamped
// times, a ledger holding every kind of record: an epoch from term 3 and
// its leader, three members, three runs (one with a full spec, one whose
// items came out of index order, one finished), items in every state
// (Pending fresh and re-pended, Running in claim order across runs,
// Done, Dead after max failures and created Dead), and workers live, busy,
// executing, with reported backlog and rate, and Lost.
func goldenLedger(t *testing.T) *harness {
	h := newHarness(t)
	h.term = 3
	h.ok(cEpoch("c1", "g1"))
	h.ok(cSetMember("c1", "raft1", "g1"), cSetMember("c2", "raft2", "g2"), cSetMember("c3", "raft3", ""))
	h.ok(cSubmit("r", &fsmpb.RunSpec{Model: "m", MaxFailures: 2, Total: 4, Sampling: []byte{1, 2, 3}}, false,
		ni("a", 0, "pa"), ni("b", 1, "pb"), ni("c", 2, "pc"),
		&fsmpb.NewItem{Id: []byte("d"), Index: 3, DeadReason: "unreadable input"}))
	h.ok(cSubmit("s", &fsmpb.RunSpec{Total: 3}, false, ni("x2", 2, "p2"), ni("x0", 0, "p0"), ni("x1", 1, "")))
	h.ok(cSubmit("f", nil, false, ni("only", 0, "po")))
	h.ok(cRegisterAll("w1", "w2", "w3", "w4")...)
	h.ok(cClaim("w1", 3))                       // w1: a b c
	h.ok(cComplete("r", "a", "w1", 1, "ra"))    // a done
	h.ok(cFail("r", "b", "w1", 1, "e1"))        // b pending (1 failure), at the back
	h.ok(cClaim("w2", 2))                       // w2: x2 x0
	h.ok(cClaim("w3", 1))                       // w3: only (f's turn: it was served least)
	h.ok(cClaim("w4", 1))                       // w4: x1
	h.ok(cComplete("f", "only", "w3", 1, "ro")) // f finished
	h.ok(cClaim("w1", 1))                       // w1: c b
	h.ok(cFail("r", "b", "w1", 2, "e2"))        // b dead after 2 failures
	h.ok(cHeartbeat("w2", 1, 2.5, []*fsmpb.ItemKey{key("s", "x2", 1)}, nil))
	h.ok(cSteal("w3", 0))                             // w3 takes x0 from w2
	h.ok(cSubmit("r", nil, false, ni("e", 4, "pe")))  // e pending
	h.ok(cSubmit("s", nil, false, ni("x3", 3, "p3"))) // x3 pending
	h.now = h.now.Add(time.Minute)
	h.ok(cHeartbeat("w1", 0, 1, nil, nil), cHeartbeat("w2", 1, 2.5, []*fsmpb.ItemKey{key("s", "x2", 1)}, nil),
		cHeartbeat("w3", 0, 0, nil, nil))
	res := h.ok(cExpire(30 * time.Second)) // w4 lost, x1 back to pending
	require.Equal(t, []string{"w4"}, res[0].Expired)
	// Version 6: the revocation list and a known admin (no worker evicted,
	// so the reads and events of the older golden files still match).
	// At the same time, so that the clock of the older files still matches.
	for _, r := range h.applyAt(cRevoke("3fa1", "", "gw", "client", "root", "b7"), cRevoke("", "c9", "", "replica", "root", "b7")) {
		require.NoError(t, r.Err)
	}
	// Version 8: a tenant set without runs (the runs are the default
	// tenant's, whose usage the claims made).
	for _, r := range h.applyAt(cSetTenant("team-b", 3, 100, 8)) {
		require.NoError(t, r.Err)
	}
	checkInvariants(t, h.l)
	return h
}

// dumpTenants renders the tenants, their usage and decay time, and each
// run's served count.
func dumpTenants(l *Ledger) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage-at=%s\n", l.UsageAt().Format(time.RFC3339Nano))
	for _, t := range l.Tenants() {
		fmt.Fprintf(&b, "tenant %s weight=%d max-queued=%d max-running=%d usage=%g queued=%d running=%d done=%d runs=%d active=%d set=%v\n",
			t.Name, t.Weight, t.MaxQueued, t.MaxRunning, t.Usage, t.Queued, t.Running, t.Done, t.Runs, t.Active, t.Set)
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, r := range l.st.runOrder {
		fmt.Fprintf(&b, "run %s tenant=%s priority=%d served=%d\n", r.name, r.ten.name, priorityOf(r.spec), r.served)
	}
	return b.String()
}

// dumpRevocations renders the revocation list and the known admins.
func dumpRevocations(l *Ledger) string {
	var b strings.Builder
	for _, r := range l.Revocations() {
		fmt.Fprintf(&b, "revoked serial=%q name=%q holder=%q role=%q by=%q at=%s reason=%q\n",
			r.Serial, r.Name, r.Holder, r.Role, r.By, r.At.Format(time.RFC3339Nano), r.Reason)
	}
	admins := l.KnownAdmins()
	names := make([]string, 0, len(admins))
	for n := range admins {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "admin %s serial=%s\n", n, admins[n])
	}
	return b.String()
}

// TestGoldenSnapshot pins the snapshot format: the stream goldenLedger
// persists must equal testdata/snapshot-v1.golden byte for byte, and that
// file must restore to the same state (testdata/snapshot-v1.txt, and the
// same reads as the ledger that wrote it). A change to the writer fails the
// first half, a change to the reader the second.
func TestGoldenSnapshot(t *testing.T) {
	h := goldenLedger(t)
	got := persist(t, h.l)
	dump := dumpLedger(h.l) + dumpEvents(h.l) + dumpRevocations(h.l) + dumpTenants(h.l)
	requireEveryRecordKind(t, h.l)

	if *updateGolden {
		require.NoError(t, os.MkdirAll(filepath.Dir(goldenSnapshot), 0o755))
		require.NoError(t, os.WriteFile(goldenSnapshot, got, 0o644))
		require.NoError(t, os.WriteFile(goldenDump, []byte(dump), 0o644))
		t.Logf("rewrote %s (%d bytes) and %s", goldenSnapshot, len(got), goldenDump)
	}

	want, err := os.ReadFile(goldenSnapshot)
	require.NoError(t, err, "missing golden file; create it with `go test ./fsm -run Golden -update`")
	if d := firstDiff(want, got); d >= 0 {
		t.Fatalf("the snapshot format changed: the stream persisted by goldenLedger differs from %s at byte %d "+
			"(golden %d bytes, now %d bytes).\n%s", goldenSnapshot, d, len(want), len(got), goldenHowTo)
	}

	// The golden stream restores to the state that wrote it.
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, want), "the golden snapshot no longer restores.\n%s", goldenHowTo)
	checkInvariants(t, l)
	wantDump, err := os.ReadFile(goldenDump)
	require.NoError(t, err)
	require.Equal(t, string(wantDump), dumpLedger(l)+dumpEvents(l)+dumpRevocations(l)+dumpTenants(l),
		"the golden snapshot restores to another state than %s.\n%s", goldenDump, goldenHowTo)
	require.Equal(t, readsOf(t, h.l), readsOf(t, l), "the restored ledger reads differently from the one that wrote it")
	require.Equal(t, want, persist(t, l), "persist after restoring the golden snapshot does not reproduce it")
}

// requireEveryRecordKind checks that l holds what goldenLedger promises, so
// that an edit of the script cannot quietly drop a kind of record from the
// golden file.
func requireEveryRecordKind(t *testing.T, l *Ledger) {
	t.Helper()
	require.Equal(t, uint64(3), l.Epoch())
	require.Len(t, l.Members(), 3)
	runs := l.Runs()
	require.Len(t, runs, 3)
	var pending, running, done, dead uint64
	finished := false
	for _, r := range runs {
		pending, running, done, dead = pending+r.Pending, running+r.Running, done+r.Done, dead+r.Dead
		finished = finished || !r.FinishedAt.IsZero()
	}
	require.Positive(t, pending)
	require.Positive(t, running)
	require.Positive(t, done)
	require.Equal(t, uint64(2), dead, "one dead after failures, one created dead")
	require.True(t, finished, "a finished run")
	lost, executing := false, false
	for _, w := range l.Workers() {
		lost = lost || w.Lost
		executing = executing || len(w.Executing) > 0
	}
	require.True(t, lost, "a lost worker")
	require.True(t, executing, "a worker with executing keys")
	evs, _, _ := l.Events(0, 0, "")
	kinds := map[EventKind]bool{}
	for _, e := range evs {
		kinds[e.Kind] = true
	}
	for _, k := range []EventKind{EventLeaderElected, EventMemberJoined, EventWorkerRegistered, EventWorkerExpired,
		EventItemsStolen, EventRunCreated, EventRunFinished, EventItemDead} {
		require.True(t, kinds[k], "an event of kind %s", k)
	}
}

// TestGoldenSnapshotV1 restores the frozen version 1 stream: it must give
// the state it was written from (testdata/snapshot-v1.txt, the reads of
// goldenLedger) with an empty event history, and persisting that state
// writes today's version, which restores to the same state.
func TestGoldenSnapshotV1(t *testing.T) {
	want, err := os.ReadFile(goldenSnapshotV1)
	require.NoError(t, err)
	require.Equal(t, uint32(1), binary.BigEndian.Uint32(want[4:8]), "%s is not a version 1 stream", goldenSnapshotV1)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, want), "the version 1 golden snapshot no longer restores.\n%s", goldenHowTo)
	checkInvariants(t, l)
	wantDump, err := os.ReadFile(goldenDumpV1)
	require.NoError(t, err)
	require.Equal(t, string(wantDump), dumpLedger(l), "the version 1 golden snapshot restores to another state than %s", goldenDumpV1)
	require.Equal(t, fifoGoldenReads(t), readsOf(t, l), "the version 1 snapshot reads differently from the ledger that wrote it")
	evs, first, last := l.Events(0, 0, "")
	require.Empty(t, evs)
	require.Zero(t, first)
	require.Zero(t, last)

	again := persist(t, l)
	require.Equal(t, uint32(snapshotVersion), binary.BigEndian.Uint32(again[4:8]))
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, again))
	require.Equal(t, string(wantDump), dumpLedger(l2))
	require.Equal(t, again, persist(t, l2))
}

// TestGoldenSnapshotV2 restores the frozen version 2 stream (written by the
// release before the data plane): it must give the state it was written
// from, events included, and persisting it writes today's version, which
// restores to the same state. This is the migration of a data directory
// written by the previous version: its runs have no store and keep their
// inline payloads and results.
func TestGoldenSnapshotV2(t *testing.T) {
	want, err := os.ReadFile(goldenSnapshotV2)
	require.NoError(t, err)
	require.Equal(t, uint32(2), binary.BigEndian.Uint32(want[4:8]), "%s is not a version 2 stream", goldenSnapshotV2)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, want), "the version 2 golden snapshot no longer restores.\n%s", goldenHowTo)
	checkInvariants(t, l)
	wantDump, err := os.ReadFile(goldenDumpV2)
	require.NoError(t, err)
	require.Equal(t, string(wantDump), dumpLedger(l)+dumpEvents(l), "the version 2 golden snapshot restores to another state than %s", goldenDumpV2)
	require.Equal(t, fifoGoldenReads(t), readsOf(t, l), "the version 2 snapshot reads differently from the ledger that wrote it")

	again := persist(t, l)
	require.Equal(t, uint32(snapshotVersion), binary.BigEndian.Uint32(again[4:8]))
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, again))
	require.Equal(t, string(wantDump), dumpLedger(l2)+dumpEvents(l2))
	require.Equal(t, again, persist(t, l2))
	// A run created after the migration gets the next sequence number.
	h := &harness{t: t, l: l2, term: 3, now: time.Unix(0, l2.Now().UnixNano()).Add(time.Second), index: 1 << 20}
	h.ok(cSubmit("after-migration", &fsmpb.RunSpec{Total: 1}, false, ni("n0", 0, "p")))
	rs, err := l2.Run("after-migration")
	require.NoError(t, err)
	require.Equal(t, "after-migration", rs.Name)
}

// TestGoldenSnapshotV3 restores the frozen version 3 stream (written by the
// release before workers named their models): it must give the state it
// was written from, events included, with every worker serving every
// model, and persisting it writes today's version, which restores to the
// same state.
func TestGoldenSnapshotV3(t *testing.T) {
	want, err := os.ReadFile(goldenSnapshotV3)
	require.NoError(t, err)
	require.Equal(t, uint32(3), binary.BigEndian.Uint32(want[4:8]), "%s is not a version 3 stream", goldenSnapshotV3)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, want), "the version 3 golden snapshot no longer restores.\n%s", goldenHowTo)
	checkInvariants(t, l)
	wantDump, err := os.ReadFile(goldenDumpV3)
	require.NoError(t, err)
	require.Equal(t, string(wantDump), dumpLedger(l)+dumpEvents(l), "the version 3 golden snapshot restores to another state than %s", goldenDumpV3)
	require.Equal(t, fifoGoldenReads(t), readsOf(t, l), "the version 3 snapshot reads differently from the ledger that wrote it")
	for _, w := range l.Workers() {
		require.Nil(t, w.Models, "worker %s of a version 3 snapshot serves every model", w.ID)
	}

	again := persist(t, l)
	require.Equal(t, uint32(snapshotVersion), binary.BigEndian.Uint32(again[4:8]))
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, again))
	require.Equal(t, string(wantDump), dumpLedger(l2)+dumpEvents(l2))
	require.Equal(t, again, persist(t, l2))
}

// fifoGoldenReads returns the reads of the frozen version 7 stream: the
// state goldenLedger's script built while claims served one FIFO across
// runs (the script now claims "only" before x1, as the turns of runs
// would; their claim times differ by a millisecond). The older frozen
// streams were written by that script too.
func fifoGoldenReads(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(goldenSnapshotV7)
	require.NoError(t, err)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, b))
	return readsOf(t, l)
}

// TestGoldenSnapshotV8 restores the frozen version 8 stream (written by the
// release before runs whose store is unreachable): it must give the state
// it was written from, and persisting it writes today's version, which
// restores to the same state.
func TestGoldenSnapshotV8(t *testing.T) {
	want, err := os.ReadFile(goldenSnapshotV8)
	require.NoError(t, err)
	require.Equal(t, uint32(8), binary.BigEndian.Uint32(want[4:8]), "%s is not a version 8 stream", goldenSnapshotV8)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, want), "the version 8 golden snapshot no longer restores.\n%s", goldenHowTo)
	checkInvariants(t, l)
	wantDump, err := os.ReadFile(goldenDumpV8)
	require.NoError(t, err)
	dump := func(l *Ledger) string { return dumpLedger(l) + dumpEvents(l) + dumpRevocations(l) + dumpTenants(l) }
	require.Equal(t, string(wantDump), dump(l), "the version 8 golden snapshot restores to another state than %s", goldenDumpV8)
	again := persist(t, l)
	require.Equal(t, uint32(snapshotVersion), binary.BigEndian.Uint32(again[4:8]))
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, again))
	require.Equal(t, string(wantDump), dump(l2))
	require.Equal(t, again, persist(t, l2))
}

// TestGoldenSnapshotV7 restores the frozen version 7 stream (written by the
// release before tenants): it must give the state it was written from,
// every run the default tenant's at the default priority, and persisting
// it writes today's version, which restores to the same state.
func TestGoldenSnapshotV7(t *testing.T) {
	want, err := os.ReadFile(goldenSnapshotV7)
	require.NoError(t, err)
	require.Equal(t, uint32(7), binary.BigEndian.Uint32(want[4:8]), "%s is not a version 7 stream", goldenSnapshotV7)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, want), "the version 7 golden snapshot no longer restores.\n%s", goldenHowTo)
	checkInvariants(t, l)
	wantDump, err := os.ReadFile(goldenDumpV7)
	require.NoError(t, err)
	require.Equal(t, string(wantDump), dumpLedger(l)+dumpEvents(l)+dumpRevocations(l), "the version 7 golden snapshot restores to another state than %s", goldenDumpV7)
	ts := l.Tenants()
	require.Len(t, ts, 1)
	require.Equal(t, DefaultTenant, ts[0].Name)
	require.Equal(t, uint32(1), ts[0].Weight)
	require.Zero(t, ts[0].Usage)
	again := persist(t, l)
	require.Equal(t, uint32(snapshotVersion), binary.BigEndian.Uint32(again[4:8]))
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, again))
	require.Equal(t, string(wantDump), dumpLedger(l2)+dumpEvents(l2)+dumpRevocations(l2))
	require.Equal(t, again, persist(t, l2))
}

// TestGoldenSnapshotV6 restores the frozen version 6 stream (written by the
// release before range runs): it must give the state it was
// written from, events included, with an empty revocation list, and
// persisting it writes today's version, which restores to the same state.
func TestGoldenSnapshotV6(t *testing.T) {
	want, err := os.ReadFile(goldenSnapshotV6)
	require.NoError(t, err)
	require.Equal(t, uint32(6), binary.BigEndian.Uint32(want[4:8]), "%s is not a version 6 stream", goldenSnapshotV6)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, want), "the version 6 golden snapshot no longer restores.\n%s", goldenHowTo)
	checkInvariants(t, l)
	wantDump, err := os.ReadFile(goldenDumpV6)
	require.NoError(t, err)
	require.Equal(t, string(wantDump), dumpLedger(l)+dumpEvents(l)+dumpRevocations(l), "the version 6 golden snapshot restores to another state than %s", goldenDumpV6)
	require.Equal(t, fifoGoldenReads(t), readsOf(t, l), "the version 6 snapshot reads differently from the ledger that wrote it")
	again := persist(t, l)
	require.Equal(t, uint32(snapshotVersion), binary.BigEndian.Uint32(again[4:8]))
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, again))
	require.Equal(t, string(wantDump), dumpLedger(l2)+dumpEvents(l2)+dumpRevocations(l2))
	require.Equal(t, again, persist(t, l2))
}

// TestGoldenSnapshotV5 restores the frozen version 5 stream (written by the
// release before the revocation list): it must give the state it was
// written from, events included, with an empty revocation list, and
// persisting it writes today's version, which restores to the same state.
func TestGoldenSnapshotV5(t *testing.T) {
	want, err := os.ReadFile(goldenSnapshotV5)
	require.NoError(t, err)
	require.Equal(t, uint32(5), binary.BigEndian.Uint32(want[4:8]), "%s is not a version 5 stream", goldenSnapshotV5)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, want), "the version 5 golden snapshot no longer restores.\n%s", goldenHowTo)
	checkInvariants(t, l)
	wantDump, err := os.ReadFile(goldenDumpV5)
	require.NoError(t, err)
	require.Equal(t, string(wantDump), dumpLedger(l)+dumpEvents(l), "the version 5 golden snapshot restores to another state than %s", goldenDumpV5)
	require.Equal(t, fifoGoldenReads(t), readsOf(t, l), "the version 5 snapshot reads differently from the ledger that wrote it")
	require.Empty(t, l.Revocations())
	require.Empty(t, l.KnownAdmins())
	again := persist(t, l)
	require.Equal(t, uint32(snapshotVersion), binary.BigEndian.Uint32(again[4:8]))
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, again))
	require.Equal(t, string(wantDump), dumpLedger(l2)+dumpEvents(l2))
	require.Equal(t, again, persist(t, l2))
}

// TestGoldenSnapshotV4 restores the frozen version 4 stream (written by the
// release before stalled runs): it must give the state it was written
// from, events included, with no run stalled, and persisting it writes
// today's version, which restores to the same state.
func TestGoldenSnapshotV4(t *testing.T) {
	want, err := os.ReadFile(goldenSnapshotV4)
	require.NoError(t, err)
	require.Equal(t, uint32(4), binary.BigEndian.Uint32(want[4:8]), "%s is not a version 4 stream", goldenSnapshotV4)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, want), "the version 4 golden snapshot no longer restores.\n%s", goldenHowTo)
	checkInvariants(t, l)
	wantDump, err := os.ReadFile(goldenDumpV4)
	require.NoError(t, err)
	require.Equal(t, string(wantDump), dumpLedger(l)+dumpEvents(l), "the version 4 golden snapshot restores to another state than %s", goldenDumpV4)
	require.Equal(t, fifoGoldenReads(t), readsOf(t, l), "the version 4 snapshot reads differently from the ledger that wrote it")
	for _, r := range l.Runs() {
		require.Nil(t, r.Stall, "run %s of a version 4 snapshot is stalled", r.Name)
	}
	again := persist(t, l)
	require.Equal(t, uint32(snapshotVersion), binary.BigEndian.Uint32(again[4:8]))
	l2, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l2, again))
	require.Equal(t, string(wantDump), dumpLedger(l2)+dumpEvents(l2))
	require.Equal(t, again, persist(t, l2))
}

// firstDiff returns the first offset where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
