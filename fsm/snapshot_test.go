package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"lukechampine.com/blake3"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// rich returns a ledger holding every kind of state: members, two runs,
// items in each state, pending order that differs from index order, workers
// with claim-ordered items across runs, executing lists, a lost worker.
func rich(t *testing.T) *harness {
	h := base(t)
	h.ok(cSetMember("c1", "raft1", "g1"), cSetMember("c0", "raft0", "g0"))
	h.ok(cSubmit("s", &fsmpb.RunSpec{Model: "m2", Sampling: []byte{1, 2}, Total: 5}, false,
		ni("x4", 4, "p4"), ni("x2", 2, "p2"), ni("x3", 3, "")))
	h.ok(cNack("r", "b", "w1", 1))           // queues: r c, b (served 2); s x4, x2, x3
	h.ok(cComplete("r", "a", "w1", 1, "ra")) // a done
	h.ok(cClaim("w2", 2))                    // w2: x4, x2 (s's turn)
	h.ok(cClaim("w1", 1))                    // w1: c (r and s served 2: r is older)
	h.ok(cClaim("w2", 1))                    // w2: x4, x2, x3
	h.ok(cFail("r", "c", "w1", 1, "oom"))    // queue of r: b, c
	h.ok(cHeartbeat("w2", 0, 3.5, []*fsmpb.ItemKey{key("s", "x4", 1)}, nil))
	h.ok(cSteal("w3", 0)) // w3 takes x3, x2 from w2's end
	h.ok(cRegister("w9"), cHeartbeat("w9", 0, 0, nil, nil))
	h.now = h.now.Add(time.Minute)
	h.ok(cHeartbeat("w2", 1, 1, nil, nil), cHeartbeat("w3", 0, 1, nil, nil))
	res := h.applyAt(cExpire(30 * time.Second))
	require.Equal(t, []string{"w1", "w9"}, res[0].Expired)
	checkInvariants(t, h.l)
	require.Equal(t, 2, h.l.Pending())
	return h
}

// readsOf renders everything the read API exposes.
func readsOf(t *testing.T, l *Ledger) string {
	var b bytes.Buffer
	id, addr := l.Leader()
	fmt.Fprintf(&b, "epoch=%d now=%v leader=%s,%s pending=%d\n", l.Epoch(), l.Now(), id, addr, l.Pending())
	fmt.Fprintf(&b, "members=%v\n", l.Members())
	for _, r := range l.Runs() {
		fmt.Fprintf(&b, "run %+v spec=%v\n", r, r.Spec.String())
		items, _, _, err := l.Results(r.Name, 0, 0)
		require.NoError(t, err)
		for _, it := range items {
			fmt.Fprintf(&b, "  %+v\n", it)
		}
	}
	for _, w := range l.Workers() {
		fmt.Fprintf(&b, "worker %+v owned=%v\n", w, claimedIDs(l.Owned(w.ID)))
	}
	return b.String()
}

func TestSnapshotRoundTrip(t *testing.T) {
	h := rich(t)
	snap := persist(t, h.l)
	require.Equal(t, snap, persist(t, h.l), "persist is repeatable")

	// A ledger with other state is replaced wholesale.
	other := rich(t)
	other.ok(cSubmit("zzz", nil, false, ni("q", 0, "")))
	ch := other.l.PendingSignal()
	require.NoError(t, restore(other.l, snap))
	requireClosed(t, ch)
	require.Equal(t, snap, persist(t, other.l))
	require.Equal(t, readsOf(t, h.l), readsOf(t, other.l))
	checkInvariants(t, other.l)
	_, err := other.l.Run("zzz")
	require.ErrorIs(t, err, ErrRunNotFound)

	// Both go on identically: queue order, claim order and steal choices
	// survived the round trip.
	more := []*fsmpb.Command{cRegister("w4"), cClaim("w4", 10), cRegister("w5"), cSteal("w5", 0), cDeregister("w2"),
		cClaim("w1", 1), cExpire(time.Second), cEvict("w3"), cExpire(time.Hour)}
	for _, c := range more {
		data := h.entry(0, c)
		h.now = h.now.Add(time.Second)
		require.Equal(t, h.applyData(1, data), other.applyData(1, data))
	}
	require.Equal(t, persist(t, h.l), persist(t, other.l))
}

func TestSnapshotIsPointInTime(t *testing.T) {
	h := rich(t)
	want := persist(t, h.l)
	s, err := h.l.Snapshot()
	require.NoError(t, err)
	h.ok(cRegister("w4"), cClaim("w4", 10), cComplete("s", "x4", "w2", 1, "x"), cHeartbeat("w2", 0, 9, nil, nil))
	h.ok(cSubmit("r", &fsmpb.RunSpec{Total: 99}, false, ni("new", 50, "")))
	var buf bytes.Buffer
	require.NoError(t, s.(*snapshot).writeTo(&buf))
	require.Equal(t, want, buf.Bytes())
	checkInvariants(t, h.l)
}

// sink is a raft.SnapshotSink over a buffer, optionally failing writes.
type sink struct {
	bytes.Buffer
	failAfter int
	closed    bool
	cancelled bool
}

func (s *sink) Write(p []byte) (int, error) {
	if s.failAfter >= 0 && s.Len()+len(p) > s.failAfter {
		return 0, errors.New("disk full")
	}
	return s.Buffer.Write(p)
}
func (s *sink) Close() error  { s.closed = true; return nil }
func (s *sink) ID() string    { return "test" }
func (s *sink) Cancel() error { s.cancelled = true; return nil }

var _ raft.SnapshotSink = (*sink)(nil)

func TestPersist(t *testing.T) {
	h := rich(t)
	want := persist(t, h.l)
	s, err := h.l.Snapshot()
	require.NoError(t, err)
	defer s.Release()

	ok := &sink{failAfter: -1}
	require.NoError(t, s.Persist(ok))
	require.True(t, ok.closed)
	require.False(t, ok.cancelled)
	require.Equal(t, want, ok.Bytes())

	bad := &sink{failAfter: 100}
	err = s.Persist(bad)
	require.ErrorContains(t, err, "disk full")
	require.True(t, bad.cancelled)
	require.False(t, bad.closed)
}

func TestRestoreCorrupt(t *testing.T) {
	h := rich(t)
	good := persist(t, h.l)
	victim := base(t)
	before := persist(t, victim.l)
	beforeReads := readsOf(t, victim.l)

	refuse := func(t *testing.T, data []byte, detail string) {
		t.Helper()
		err := restore(victim.l, data)
		require.ErrorIs(t, err, ErrCorruptSnapshot)
		if detail != "" {
			require.ErrorContains(t, err, detail)
		}
		require.Equal(t, before, persist(t, victim.l), "a refused restore changed the ledger")
	}

	t.Run("every truncation", func(t *testing.T) {
		for n := 0; n < len(good); n++ {
			refuse(t, good[:n], "")
		}
	})
	t.Run("every flipped byte", func(t *testing.T) {
		for i := range good {
			bad := bytes.Clone(good)
			bad[i] ^= 0x41
			refuse(t, bad, "")
		}
	})
	t.Run("wrong magic", func(t *testing.T) {
		bad := bytes.Clone(good)
		copy(bad, "XLDG")
		refuse(t, bad, "bad magic")
	})
	t.Run("wrong version", func(t *testing.T) {
		bad := bytes.Clone(good)
		binary.BigEndian.PutUint32(bad[4:], snapshotVersionHandles+1)
		refuse(t, bad, fmt.Sprintf("version %d", snapshotVersionHandles+1))
	})
	t.Run("trailing data", func(t *testing.T) {
		refuse(t, append(bytes.Clone(good), 0), "after the checksum")
	})
	t.Run("lying length", func(t *testing.T) {
		bad := append([]byte("RLDG\x00\x00\x00\x01"), binary.AppendUvarint(nil, 1<<40)...)
		refuse(t, bad, "limit")
	})
	require.Equal(t, beforeReads, readsOf(t, victim.l))
	checkInvariants(t, victim.l)
}

// craft builds a stream with a valid checksum around arbitrary records, to
// reach the consistency checks behind it.
func craft(t *testing.T, hdr *fsmpb.SnapshotHeader, recs ...*fsmpb.SnapshotRecord) []byte {
	// Records are written as in version 2 (owner by name, absolute times):
	// turn them into version 3's form (owners by index, times as deltas).
	hdr = proto.Clone(hdr).(*fsmpb.SnapshotHeader)
	idx := map[string]uint32{}
	var created, updated, claimed int64
	prevRun, first := "", true
	out := make([]*fsmpb.SnapshotRecord, len(recs))
	for i, r := range recs {
		ir := r.GetItem()
		if ir == nil {
			out[i] = r
			continue
		}
		ir = proto.Clone(ir).(*fsmpb.ItemRecord)
		if !first && ir.Run == prevRun {
			ir.Run = ""
		} else {
			prevRun = ir.Run
		}
		first = false
		if ir.Owner != "" {
			if _, ok := idx[ir.Owner]; !ok {
				hdr.Owners = append(hdr.Owners, ir.Owner)
				idx[ir.Owner] = uint32(len(hdr.Owners))
			}
			ir.OwnerIdx, ir.Owner = idx[ir.Owner], ""
		}
		ir.CreatedDelta, created = ir.CreatedUnixNano-created, ir.CreatedUnixNano
		ir.UpdatedDelta, updated = ir.UpdatedUnixNano-updated, ir.UpdatedUnixNano
		ir.ClaimedDelta, claimed = ir.ClaimedUnixNano-claimed, ir.ClaimedUnixNano
		ir.CreatedUnixNano, ir.UpdatedUnixNano, ir.ClaimedUnixNano = 0, 0, 0
		out[i] = &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Item{Item: ir}}
	}
	return craftVersion(t, snapshotVersion, hdr, out...)
}

// craftVersion is craft with the preamble's version v.
func craftVersion(t *testing.T, v uint32, hdr *fsmpb.SnapshotHeader, recs ...*fsmpb.SnapshotRecord) []byte {
	b := binary.BigEndian.AppendUint32([]byte("RLDG"), v)
	add := func(m proto.Message) {
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		require.NoError(t, err)
		b = binary.AppendUvarint(b, uint64(len(data)))
		b = append(b, data...)
	}
	add(hdr)
	for _, r := range recs {
		add(r)
	}
	sum := blake3.Sum256(b)
	return append(b, sum[:]...)
}

func TestRestoreInconsistent(t *testing.T) {
	run := func(name string) *fsmpb.SnapshotRecord {
		return &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Run{Run: &fsmpb.RunRecord{
			Name: name, Spec: &fsmpb.RunSpec{MaxFailures: 3}, Seq: 1}}}
	}
	item := func(run, id string, index uint64, state State, owner string, attempt, pseq uint64) *fsmpb.SnapshotRecord {
		return &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Item{Item: &fsmpb.ItemRecord{
			Run: run, Id: []byte(id), Index: index, State: uint32(state), Owner: owner, Attempt: attempt, PendingSeq: pseq}}}
	}
	worker := func(id string, lost bool) *fsmpb.SnapshotRecord {
		return &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Worker{Worker: &fsmpb.WorkerRecord{Id: id, Lost: lost}}}
	}
	member := func(id string) *fsmpb.SnapshotRecord {
		return &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Member{Member: &fsmpb.MemberRecord{Id: id}}}
	}
	tenant := func(name string, weight uint32, set bool) *fsmpb.SnapshotRecord {
		return &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Tenant{Tenant: &fsmpb.TenantRecord{Name: name, Weight: weight, Set: set}}}
	}
	hdr := func(members, runs, items, workers uint64) *fsmpb.SnapshotHeader {
		return &fsmpb.SnapshotHeader{Version: snapshotVersion, Members: members, Runs: runs, Items: items, Workers: workers, RunSeq: runs}
	}
	withTenants := func(h *fsmpb.SnapshotHeader, n uint64) *fsmpb.SnapshotHeader {
		h.Tenants = n
		return h
	}
	tests := []struct {
		name   string
		data   func(t *testing.T) []byte
		detail string
	}{
		{"valid minimal stream", func(t *testing.T) []byte {
			return craft(t, withTenants(hdr(1, 1, 2, 1), 1), member("c1"), run("r"),
				item("r", "a", 0, StatePending, "", 0, 1), item("r", "b", 1, StateRunning, "w", 1, 0), worker("w", false),
				tenant(DefaultTenant, 1, false))
		}, ""},
		{"tenants out of order", func(t *testing.T) []byte {
			return craft(t, withTenants(hdr(0, 1, 0, 0), 2), run("r"), tenant("z", 1, true), tenant(DefaultTenant, 1, false))
		}, "out of order"},
		{"tenant of weight 0", func(t *testing.T) []byte {
			return craft(t, withTenants(hdr(0, 1, 0, 0), 1), run("r"), tenant(DefaultTenant, 0, false))
		}, "weight 0"},
		{"tenant with no run, never set", func(t *testing.T) []byte {
			return craft(t, withTenants(hdr(0, 1, 0, 0), 2), run("r"), tenant(DefaultTenant, 1, false), tenant("idle", 1, false))
		}, "never set"},
		{"tenants in a version 7 header", func(t *testing.T) []byte {
			h := withTenants(hdr(0, 0, 0, 0), 1)
			h.Version = 7
			return craftVersion(t, 7, h, tenant("x", 1, true))
		}, "version 8 field"},
		{"store suspects in a version 8 stream", func(t *testing.T) []byte {
			r := run("r")
			r.GetRun().StoreSuspects = []string{"w1"}
			h := hdr(0, 1, 0, 0)
			h.Version = 8
			return craftVersion(t, 8, h, r)
		}, "a field of version 9"},
		{"a store stall in a version 8 stream", func(t *testing.T) []byte {
			r := run("r")
			r.GetRun().Stall = &fsmpb.RunStallRecord{Object: "in/1", BackoffNano: int64(StallProbeMin), Store: true}
			h := hdr(0, 1, 0, 0)
			h.Version = 8
			return craftVersion(t, 8, h, r)
		}, "a field of version 9"},
		{"store suspects as many as isolate", func(t *testing.T) []byte {
			r := run("r")
			r.GetRun().StoreSuspects = []string{"w1", "w2"}
			return craft(t, hdr(0, 1, 0, 0), r)
		}, "store suspects"},
		{"store suspects of a stalled run", func(t *testing.T) []byte {
			r := run("r")
			r.GetRun().StoreSuspects = []string{"w1"}
			r.GetRun().Stall = &fsmpb.RunStallRecord{Object: "in/1", BackoffNano: int64(StallProbeMin), Store: true}
			return craft(t, hdr(0, 1, 0, 0), r)
		}, "store suspects while stalled"},
		{"an empty store suspect", func(t *testing.T) []byte {
			r := run("r")
			r.GetRun().StoreSuspects = []string{""}
			return craft(t, hdr(0, 1, 0, 0), r)
		}, "store suspect"},
		{"header version", func(t *testing.T) []byte {
			return craft(t, &fsmpb.SnapshotHeader{Version: snapshotVersion + 1})
		}, "header version"},
		{"item of an unknown run", func(t *testing.T) []byte {
			return craft(t, hdr(0, 1, 1, 0), run("r"), item("q", "a", 0, StatePending, "", 0, 1))
		}, "unknown run"},
		{"duplicate run", func(t *testing.T) []byte {
			return craft(t, hdr(0, 2, 0, 0), run("r"), run("r"))
		}, "twice"},
		{"record of the wrong kind", func(t *testing.T) []byte {
			return craft(t, hdr(0, 1, 0, 0), worker("w", false))
		}, "expected a run"},
		{"empty record", func(t *testing.T) []byte {
			return craft(t, hdr(1, 0, 0, 0), &fsmpb.SnapshotRecord{})
		}, "expected a member"},
		{"members out of order", func(t *testing.T) []byte {
			return craft(t, hdr(2, 0, 0, 0), member("c2"), member("c1"))
		}, "out of order"},
		{"duplicate item", func(t *testing.T) []byte {
			return craft(t, hdr(0, 1, 2, 0), run("r"), item("r", "a", 0, StateDone, "", 1, 0), item("r", "a", 1, StateDone, "", 1, 0))
		}, "twice"},
		{"two items at one index", func(t *testing.T) []byte {
			return craft(t, hdr(0, 1, 2, 0), run("r"), item("r", "a", 0, StateDone, "", 1, 0), item("r", "b", 0, StateDone, "", 1, 0))
		}, "at index 0"},
		{"bad state", func(t *testing.T) []byte {
			return craft(t, hdr(0, 1, 1, 0), run("r"), item("r", "a", 0, 9, "", 1, 0))
		}, "state 9"},
		{"pending without a queue position", func(t *testing.T) []byte {
			return craft(t, hdr(0, 1, 1, 0), run("r"), item("r", "a", 0, StatePending, "", 0, 0))
		}, "pending_seq"},
		{"shared queue position", func(t *testing.T) []byte {
			return craft(t, hdr(0, 1, 2, 0), run("r"), item("r", "a", 0, StatePending, "", 0, 4), item("r", "b", 1, StatePending, "", 0, 4))
		}, "share pending_seq"},
		{"running with an unknown owner", func(t *testing.T) []byte {
			return craft(t, hdr(0, 1, 1, 1), run("r"), item("r", "a", 0, StateRunning, "w2", 1, 0), worker("w", false))
		}, "unknown or lost"},
		{"running with a lost owner", func(t *testing.T) []byte {
			return craft(t, hdr(0, 1, 1, 1), run("r"), item("r", "a", 0, StateRunning, "w", 1, 0), worker("w", true))
		}, "unknown or lost"},
		{"finished run with pending items", func(t *testing.T) []byte {
			r := run("r")
			r.GetRun().FinishedUnixNano = 5
			return craft(t, hdr(0, 1, 1, 0), r, item("r", "a", 0, StatePending, "", 0, 1))
		}, "finished"},
		{"more records than the header says", func(t *testing.T) []byte {
			return craft(t, hdr(0, 0, 0, 0), run("r"))
		}, "checksum"},
		{"fewer records than the header says", func(t *testing.T) []byte {
			return craft(t, hdr(0, 2, 0, 0), run("r"))
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := base(t).l
			before := persist(t, l)
			data := tc.data(t)
			err := restore(l, data)
			if tc.detail == "" && tc.name == "valid minimal stream" {
				require.NoError(t, err)
				checkInvariants(t, l)
				require.Equal(t, data, persist(t, l))
				require.Equal(t, []string{"b"}, claimedIDs(l.Owned("w")))
				return
			}
			require.ErrorIs(t, err, ErrCorruptSnapshot)
			require.ErrorContains(t, err, tc.detail)
			require.Equal(t, before, persist(t, l))
		})
	}
}

func TestRestoreClosesReader(t *testing.T) {
	h := rich(t)
	rc := &closeTracker{Reader: bytes.NewReader(persist(t, h.l))}
	require.NoError(t, h.l.Restore(rc))
	require.True(t, rc.closed)
	rc = &closeTracker{Reader: bytes.NewReader(nil)}
	require.ErrorIs(t, h.l.Restore(rc), ErrCorruptSnapshot)
	require.True(t, rc.closed)
}

type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }
