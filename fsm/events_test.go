package fsm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// dumpEvents renders the event history: a line with the bounds, then one
// line per event held, oldest first.
func dumpEvents(l *Ledger) string {
	evs, first, last := l.Events(0, MaxEventsPage, "")
	var b strings.Builder
	fmt.Fprintf(&b, "events first=%d last=%d\n", first, last)
	for _, e := range evs {
		b.WriteString(eventLine(e))
	}
	return b.String()
}

// eventLine renders one event, leaving out its empty fields.
func eventLine(e Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s term=%d %s", e.Seq, since(e.Time.UnixNano()), e.Term, e.Kind)
	for _, f := range []struct{ k, v string }{{"run", e.Run}, {"worker", e.Worker}, {"member", e.Member}} {
		if f.v != "" {
			fmt.Fprintf(&b, " %s=%s", f.k, f.v)
		}
	}
	if e.Count != 0 {
		fmt.Fprintf(&b, " count=%d", e.Count)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, " detail=%q", e.Detail)
	}
	b.WriteString("\n")
	return b.String()
}

// events runs the script command `events [after=N limit=N run=r]`.
func (s *script) events(d *datadriven.TestData) string {
	evs, first, last := s.h.l.Events(s.u64(d, "after", 0), int(s.u64(d, "limit", 0)), s.str(d, "run", ""))
	var b strings.Builder
	fmt.Fprintf(&b, "first=%d last=%d\n", first, last)
	for _, e := range evs {
		b.WriteString(eventLine(e))
	}
	return b.String()
}

// text returns a script argument's values joined by ", " (so that a
// parenthesised value keeps its commas).
func (s *script) text(d *datadriven.TestData, key string) string {
	arg, ok := d.Arg(key)
	if !ok {
		return ""
	}
	return strings.Join(arg.Vals, ", ")
}

func eventKinds(evs []Event) []EventKind {
	out := make([]EventKind, len(evs))
	for i, e := range evs {
		out[i] = e.Kind
	}
	return out
}

func TestEventHistoryBound(t *testing.T) {
	cfg := DefaultConfig()
	cfg.EventHistory = 3
	h := newHarnessConfig(t, cfg)
	h.ok(cEpoch("c1", "g1")) // 1 member-joined, 2 leader-elected
	for i := range 5 {
		h.ok(cRegister(fmt.Sprintf("w%d", i))) // 3..7
	}
	evs, first, last := h.l.Events(0, 0, "")
	require.Equal(t, uint64(5), first, "the oldest events were dropped")
	require.Equal(t, uint64(7), last)
	require.Len(t, evs, 3)
	for i, e := range evs {
		require.Equal(t, uint64(5+i), e.Seq)
		require.Equal(t, EventWorkerRegistered, e.Kind)
		require.Equal(t, fmt.Sprintf("w%d", 2+i), e.Worker)
	}

	// The history and its numbering survive a snapshot; numbering goes on.
	snap := persist(t, h.l)
	l, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, restore(l, snap))
	require.Equal(t, snap, persist(t, l))
	got, first2, last2 := l.Events(0, 0, "")
	require.Equal(t, evs, got)
	require.Equal(t, []uint64{first, last}, []uint64{first2, last2})
	h.l = l
	h.ok(cRegister("w9"))
	got, first, last = l.Events(6, 0, "")
	require.Equal(t, []uint64{6, 8}, []uint64{first, last})
	require.Len(t, got, 2)
	require.Equal(t, uint64(8), got[1].Seq)
	require.Equal(t, "w9", got[1].Worker)

	// A replica with a smaller bound keeps the newest of a snapshot.
	small := cfg
	small.EventHistory = 1
	l1, err := New(small)
	require.NoError(t, err)
	require.NoError(t, restore(l1, persist(t, l)))
	got, first, last = l1.Events(0, 0, "")
	require.Equal(t, []uint64{8, 8}, []uint64{first, last})
	require.Len(t, got, 1)

	// An emptied history (a bound of one, then a restore of a snapshot
	// without events but a seq) still numbers on.
	bad := DefaultConfig()
	bad.EventHistory = 0
	_, err = New(bad)
	require.ErrorIs(t, err, ErrInvalidConfig)
	bad.EventHistory = MaxEventHistory + 1
	_, err = New(bad)
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestEventsReadAPI(t *testing.T) {
	h := newHarness(t)
	l := h.l
	evs, first, last := l.Events(0, 0, "")
	require.Empty(t, evs)
	require.Zero(t, first)
	require.Zero(t, last)

	h.ok(cEpoch("c1", "g1"))
	h.ok(cSubmit("r", &fsmpb.RunSpec{Total: 1}, false, ni("a", 0, "")))
	h.ok(cSubmit("s", &fsmpb.RunSpec{Total: 1}, false, ni("b", 0, "")))
	h.ok(cRegister("w1"))
	h.ok(cClaim("w1", 2))
	h.ok(cComplete("r", "a", "w1", 1, "ra"), cComplete("s", "b", "w1", 1, "rb"))
	all, first, last := l.Events(0, 0, "")
	require.Equal(t, []EventKind{EventMemberJoined, EventLeaderElected, EventRunCreated, EventRunCreated,
		EventWorkerRegistered, EventRunFinished, EventRunFinished}, eventKinds(all))
	require.Equal(t, []uint64{1, 7}, []uint64{first, last})

	page, _, _ := l.Events(2, 2, "")
	require.Equal(t, all[2:4], page, "after and limit")
	page, _, _ = l.Events(7, 0, "")
	require.Empty(t, page, "nothing after the newest")
	page, _, _ = l.Events(100, 0, "")
	require.Empty(t, page)
	page, _, _ = l.Events(0, 0, "s")
	require.Equal(t, []Event{all[3], all[6]}, page, "the run filter")
	page, _, _ = l.Events(4, 1, "s")
	require.Equal(t, []Event{all[6]}, page, "filter, after and limit together")
	page, _, _ = l.Events(0, 0, "nope")
	require.Empty(t, page)
	page, _, _ = l.Events(0, MaxEventsPage+5, "")
	require.Len(t, page, 7)

	// Reads hand out copies stamped with the entry's time and the epoch.
	require.Equal(t, startTime().Add(time.Millisecond), all[0].Time)
	require.Equal(t, uint64(1), all[1].Term)
	require.Equal(t, "c1", all[1].Member)
	require.Equal(t, "1 done, 0 dead", all[5].Detail)
	require.Equal(t, uint64(1), all[5].Count)
}

func TestEventSignal(t *testing.T) {
	h := base(t)
	ch := h.l.EventSignal()
	h.ok(cHeartbeat("w1", 0, 0, nil, nil)) // records nothing
	requireOpen(t, ch)
	h.apply(cRegister("")) // refused: records nothing
	requireOpen(t, ch)
	h.ok(cRegister("w7"))
	requireClosed(t, ch)
	ch = h.l.EventSignal()
	requireOpen(t, ch)
	require.NoError(t, restore(h.l, persist(t, base(t).l)))
	requireClosed(t, ch)
}

// TestItemDeadBounded fails many items to Dead in one entry: the history
// gets one event per run and worker with the count, not one per item.
func TestItemDeadBounded(t *testing.T) {
	h := newHarness(t)
	h.ok(cEpoch("c1", "g1"))
	var items []*fsmpb.NewItem
	for i := range 300 {
		items = append(items, ni(fmt.Sprintf("i%03d", i), uint64(i), ""))
	}
	h.ok(cSubmit("r", &fsmpb.RunSpec{MaxFailures: 1}, false, items[:200]...))
	h.ok(cSubmit("s", &fsmpb.RunSpec{MaxFailures: 1}, false, items[200:]...))
	h.ok(cRegisterAll("w1", "w2")...)
	got := h.ok(cClaim("w1", 250), cClaim("w2", 50))
	var fails []*fsmpb.Command
	for _, r := range got {
		for j, it := range r.Items {
			reason := "oom"
			if j == 7 {
				reason = "timeout"
			}
			fails = append(fails, cFail(it.Run, string(it.ID), it.Owner, it.Attempt, reason))
		}
	}
	_, _, last := h.l.Events(0, 0, "")
	h.ok(fails...)
	evs, _, _ := h.l.Events(last, 0, "")
	var lines []string
	for _, e := range evs {
		lines = append(lines, strings.TrimSpace(eventLine(e)))
	}
	require.Equal(t, []string{
		`#7 +6ms term=1 item-dead run=r worker=w1 count=200 detail="oom (and other reasons)"`,
		`#8 +6ms term=1 run-finished run=r count=200 detail="0 done, 200 dead"`,
		`#9 +6ms term=1 item-dead run=s worker=w1 count=50 detail="oom"`,
		`#10 +6ms term=1 item-dead run=s worker=w2 count=50 detail="oom (and other reasons)"`,
		`#11 +6ms term=1 run-finished run=s count=100 detail="0 done, 100 dead"`,
	}, lines)
}

// TestEventsStaleAndRefused: a refused command and a stale entry record
// nothing.
func TestEventsStaleAndRefused(t *testing.T) {
	h := base(t)
	_, _, last := h.l.Events(0, 0, "")
	h.term = 1
	h.ok(cEpoch("c2", "g2"))
	_, _, last2 := h.l.Events(0, 0, "")
	require.Equal(t, last+2, last2, "member joined and leader elected")
	h.term = 5
	h.ok(cEpoch("c2", "g2"))
	_, _, last3 := h.l.Events(0, 0, "")
	require.Equal(t, last2+1, last3, "leader elected again in a new term")
	h.ok(cEpoch("c2", "g2"))
	_, _, last4 := h.l.Events(0, 0, "")
	require.Equal(t, last3, last4, "the same leader in the same term is no new election")

	res := h.applyData(2, h.entry(2, cRegister("w8")))
	require.ErrorIs(t, res.(Results)[0].Err, ErrStaleEpoch)
	_, _, last5 := h.l.Events(0, 0, "")
	require.Equal(t, last4, last5)
}

func TestDeregisterReason(t *testing.T) {
	h := base(t)
	_, _, last := h.l.Events(0, 0, "")
	bad := cDeregister("w1")
	bad.GetDeregister().Reason = "line one\nline two"
	r := h.one(bad)
	require.ErrorIs(t, r.Err, ErrInvalidCommand)
	require.ErrorContains(t, r.Err, "deregister reason")
	bad.GetDeregister().Reason = strings.Repeat("x", limits.MaxReasonBytes+1)
	require.ErrorIs(t, h.one(bad).Err, ErrInvalidCommand)
	h.l.mu.RLock()
	require.Len(t, h.l.st.workers, 3, "refused: w1 still registered")
	h.l.mu.RUnlock()
	_, _, last2 := h.l.Events(0, 0, "")
	require.Equal(t, last, last2, "refused: no event")

	ok := cDeregister("w1")
	ok.GetDeregister().Reason = strings.Repeat("drain ", 400)
	r = h.one(ok)
	require.NoError(t, r.Err)
	evs, _, last := h.l.Events(0, 0, "")
	e := evs[len(evs)-1]
	require.Equal(t, last, e.Seq)
	require.Equal(t, EventWorkerDeregistered, e.Kind)
	require.Equal(t, uint64(2), e.Count)
	require.LessOrEqual(t, len(e.Detail), MaxEventDetailBytes)
	require.True(t, strings.HasPrefix(e.Detail, "drain drain"))
	require.False(t, strings.HasSuffix(e.Detail, " "))
}

func TestRestoreEventsInconsistent(t *testing.T) {
	ev := func(seq uint64, kind uint32, detail string) *fsmpb.SnapshotRecord {
		return &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Event{Event: &fsmpb.EventRecord{
			Seq: seq, Kind: kind, Term: 1, Detail: detail}}}
	}
	hdr := func(n, seq uint64) *fsmpb.SnapshotHeader {
		return &fsmpb.SnapshotHeader{Version: snapshotVersion, Events: n, EventSeq: seq}
	}
	good := craft(t, hdr(2, 9), ev(8, 4, ""), ev(9, 11, "x"))
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, good))
	require.Equal(t, good, persist(t, l))
	_, first, last := l.Events(0, 0, "")
	require.Equal(t, []uint64{8, 9}, []uint64{first, last})

	// A version 1 stream (no events) restores, and numbering starts at 1.
	v1 := craftVersion(t, 1, &fsmpb.SnapshotHeader{Version: 1})
	require.NoError(t, restore(l, v1))
	h := &harness{t: t, l: l, term: 1, now: startTime()}
	h.ok(cRegister("w"))
	evs, _, _ := l.Events(0, 0, "")
	require.Len(t, evs, 1)
	require.Equal(t, uint64(1), evs[0].Seq)

	for _, tc := range []struct {
		name   string
		data   []byte
		detail string
	}{
		{"seq gap", craft(t, hdr(2, 9), ev(7, 4, ""), ev(9, 4, "")), "does not follow"},
		{"seq zero", craft(t, hdr(1, 0), ev(0, 4, "")), "does not follow"},
		{"newest is not event_seq", craft(t, hdr(1, 9), ev(8, 4, "")), "event_seq"},
		{"kind zero", craft(t, hdr(1, 1), ev(1, 0, "")), "kind 0"},
		{"kind too large", craft(t, hdr(1, 1), ev(1, 300, "")), "kind 300"},
		{"non-printable detail", craft(t, hdr(1, 1), ev(1, 4, "a\nb")), "non-printable"},
		{"long detail", craft(t, hdr(1, 1), ev(1, 4, strings.Repeat("x", MaxEventDetailBytes+1))), "limit"},
		{"version 1 with events", craftVersion(t, 1, &fsmpb.SnapshotHeader{Version: 1, Events: 1, EventSeq: 1}, ev(1, 4, "")), "claims 1 events"},
		{"wrong record kind", craft(t, hdr(1, 1), &fsmpb.SnapshotRecord{}), "expected an event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := base(t).l
			before := persist(t, l)
			err := restore(l, tc.data)
			require.ErrorIs(t, err, ErrCorruptSnapshot)
			require.ErrorContains(t, err, tc.detail)
			require.Equal(t, before, persist(t, l))
		})
	}
}

func TestEventKindString(t *testing.T) {
	require.Equal(t, "leader-elected", EventLeaderElected.String())
	require.Equal(t, "item-dead", EventItemDead.String())
	require.Equal(t, "event(99)", EventKind(99).String())
}

func cNote(kind EventKind, member, detail string, count uint64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Note{Note: &fsmpb.NoteCmd{Kind: uint32(kind), Member: member, Detail: detail, Count: count}}}
}

// TestNoteRecordsOnlyAnEvent: a NoteCmd of a note kind records one event
// with its member, detail and count and changes nothing else; a note of
// any other kind, or with a bad member or detail, is ErrInvalidCommand
// and records nothing. Replicas that apply the same notes hold the same
// snapshot.
func TestNoteRecordsOnlyAnEvent(t *testing.T) {
	h := base(t)
	h2 := base(t)
	// The entry's stamped time moves the ledger's clock; nothing else moves.
	state := func() string { d := dumpLedger(h.l); return d[strings.IndexByte(d, '\n'):] }
	before := state()
	_, _, last := h.l.Events(0, 0, "")
	notes := []*fsmpb.Command{
		cNote(EventConnsRefused, "c1", "listener grpc: 23900 refused (per_ip 23900); most from 127.0.0.2 (23900)", 23900),
		cNote(EventLeaderSteppedAside, "c1", "the gRPC port refused every new connection for 5s; leadership to c2", 0),
	}
	h.ok(notes...)
	h2.ok(notes...)
	require.Equal(t, before, state(), "a note changes nothing but the history")
	evs, _, last2 := h.l.Events(last, 0, "")
	require.Equal(t, last+2, last2)
	require.Equal(t, []EventKind{EventConnsRefused, EventLeaderSteppedAside}, eventKinds(evs))
	require.Equal(t, "c1", evs[0].Member)
	require.Equal(t, uint64(23900), evs[0].Count)
	require.Contains(t, evs[0].Detail, "127.0.0.2")
	require.Contains(t, evs[1].Detail, "to c2")
	require.Equal(t, persist(t, h.l), persist(t, h2.l))

	for name, c := range map[string]*fsmpb.Command{
		"not a note kind":  cNote(EventLeaderElected, "c1", "", 0),
		"unknown kind":     cNote(EventKind(99), "c1", "", 0),
		"kind over a byte": {Cmd: &fsmpb.Command_Note{Note: &fsmpb.NoteCmd{Kind: 256 + uint32(EventConnsRefused), Member: "c1"}}},
		"no member":        cNote(EventConnsRefused, "", "", 1),
		"long detail":      cNote(EventConnsRefused, "c1", strings.Repeat("x", MaxEventDetailBytes+1), 1),
		"control char":     cNote(EventConnsRefused, "c1", "a\x00b", 1),
	} {
		t.Run(name, func(t *testing.T) {
			snap := state()
			_, _, seq := h.l.Events(0, 0, "")
			require.ErrorIs(t, h.one(c).Err, ErrInvalidCommand)
			_, _, seq2 := h.l.Events(0, 0, "")
			require.Equal(t, seq, seq2, "a refused note records nothing")
			require.Equal(t, snap, state())
		})
	}
}

func TestNoteKindStrings(t *testing.T) {
	require.Equal(t, "conns-refused", EventConnsRefused.String())
	require.Equal(t, "leader-stepped-aside", EventLeaderSteppedAside.String())
	require.True(t, noteKind(EventConnsRefused) && noteKind(EventLeaderSteppedAside))
	require.False(t, noteKind(EventRunDeleted))
}
