package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// TestCommandSpecs walks the Command oneof by reflection: every case must
// have a spec (so a new case cannot be forgotten), labelled with the
// field's name (the metric label the replicas always exported), with an
// apply function, a known snapshot effect and known event kinds; no spec may
// serve a case that does not exist, and no two may share a label.
func TestCommandSpecs(t *testing.T) {
	od := (&fsmpb.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("cmd")
	require.NotNil(t, od, "fsmpb.Command has no oneof cmd")
	specs := commandSpecs()
	labels := map[string]protoreflect.FieldNumber{}
	for i := range od.Fields().Len() {
		fd := od.Fields().Get(i)
		c := &fsmpb.Command{}
		m := c.ProtoReflect()
		m.Set(fd, m.NewField(fd))
		s := commands.spec(c)
		if s == nil {
			t.Errorf("Command oneof field %q (number %d, %T) has no commandSpec: declare one beside its apply function and list it in commandSpecs",
				fd.Name(), fd.Number(), c.Cmd)
			continue
		}
		if s.label != string(fd.Name()) {
			t.Errorf("Command oneof field %q (number %d): its spec's metric label is %q, want the field's name", fd.Name(), fd.Number(), s.label)
		}
		if n, dup := labels[s.label]; dup {
			t.Errorf("Command oneof fields %d and %d share the metric label %q", n, fd.Number(), s.label)
		}
		labels[s.label] = fd.Number()
		if got := CommandLabel(c); got != string(fd.Name()) {
			t.Errorf("CommandLabel of a %q command is %q", fd.Name(), got)
		}
		if int(fd.Number()) > len(specs) || specs[fd.Number()-1].label != s.label {
			t.Errorf("Command oneof field %q (number %d) is not at its place (%d) in commandSpecs", fd.Name(), fd.Number(), fd.Number())
		}
		if s.snapshot == 0 || s.snapshot&^partsAll != 0 {
			t.Errorf("Command oneof field %q: snapshot effect %#x is empty or names parts that do not exist", fd.Name(), s.snapshot)
		}
		if v := s.snapshot.since(); v < minSnapshotVersion || v > snapshotVersionHandles {
			t.Errorf("Command oneof field %q changes state that snapshot version %d first carries; this build writes version %d at most", fd.Name(), v, snapshotVersionHandles)
		}
		seen := map[EventKind]bool{}
		for _, k := range s.kinds {
			if k == 0 || k.String() == fmt.Sprintf("event(%d)", k) || seen[k] {
				t.Errorf("Command oneof field %q declares event kind %d, which is unknown or repeated", fd.Name(), k)
			}
			seen[k] = true
		}
		if s.events != nil && len(s.kinds) == 0 {
			t.Errorf("Command oneof field %q records events but declares no event kind", fd.Name())
		}
	}
	if len(specs) > od.Fields().Len() {
		t.Errorf("commandSpecs lists %d specs, the Command oneof has %d cases", len(specs), od.Fields().Len())
	}
	require.Equal(t, "none", CommandLabel(&fsmpb.Command{}))
	require.Equal(t, "none", CommandLabel(nil))
}

// TestCommandTableRefusesBadSpecs: a spec without its oneof type, label or
// apply function, or two specs of one oneof type, stop the package from
// initialising rather than dispatching wrongly.
func TestCommandTableRefusesBadSpecs(t *testing.T) {
	good := claimCommand()
	for name, specs := range map[string][]commandSpec{
		"no oneof":  {{label: "x", apply: good.apply}},
		"no label":  {{oneof: good.oneof, apply: good.apply}},
		"no apply":  {{oneof: good.oneof, label: "claim"}},
		"duplicate": {good, good},
	} {
		require.Panics(t, func() { newCommandTable(specs) }, name)
	}
	require.NotPanics(t, func() { newCommandTable(commandSpecs()) })
}

// TestStatePartSince: a set of parts needs the newest version among them.
func TestStatePartSince(t *testing.T) {
	require.Equal(t, uint32(1), (partRuns | partItems).since())
	require.Equal(t, uint32(2), (partRuns | partEvents).since())
	require.Equal(t, uint32(6), (partRevocations | partEvents).since())
	require.Equal(t, uint32(8), (partsAll &^ partHandles).since())
	require.Equal(t, uint32(snapshotVersionHandles), partsAll.since())
	require.Equal(t, uint32(0), statePart(0).since())
	for p := statePart(1); p <= partsAll; p <<= 1 {
		require.NotZero(t, partSince(p), "part %#x has no version", p)
	}
}

// declaredKinds is the union of the event kinds cmds' specs declare.
func declaredKinds(cmds []*fsmpb.Command) map[EventKind]bool {
	kinds := map[EventKind]bool{}
	for _, c := range cmds {
		if s := commands.spec(c); s != nil {
			for _, k := range s.kinds {
				kinds[k] = true
			}
		}
	}
	return kinds
}

// requireDeclaredKinds checks that every event l recorded after seq after
// (by applying one entry of cmds) is of a kind one of cmds' specs declares.
func requireDeclaredKinds(t testing.TB, l *Ledger, after uint64, cmds []*fsmpb.Command) {
	t.Helper()
	kinds := declaredKinds(cmds)
	for {
		evs, _, _ := l.Events(after, MaxEventsPage, "")
		if len(evs) == 0 {
			return
		}
		for _, e := range evs {
			if !kinds[e.Kind] {
				t.Fatalf("an entry of %s recorded event %d of kind %s, which none of its command specs declares", labelsOf(cmds), e.Seq, e.Kind)
			}
		}
		after = evs[len(evs)-1].Seq
	}
}

func labelsOf(cmds []*fsmpb.Command) []string {
	out := make([]string, len(cmds))
	for i, c := range cmds {
		out[i] = CommandLabel(c)
	}
	return out
}

// requireDeclaredEffect checks that the parts of the snapshot in which
// after differs from idle (the same ledger after the same entry with no
// commands) are among those that cmds' specs declare, and that the new
// events are of declared kinds.
func requireDeclaredEffect(t testing.TB, cmds []*fsmpb.Command, idle, after []byte) {
	t.Helper()
	declared := statePart(0)
	for _, c := range cmds {
		if s := commands.spec(c); s != nil {
			declared |= s.snapshot
		}
	}
	a, b := snapshotParts(t, idle), snapshotParts(t, after)
	for p := statePart(1); p <= partsAll; p <<= 1 {
		if !bytes.Equal(a[p], b[p]) && declared&p == 0 {
			t.Fatalf("an entry of %s changed snapshot part %#x, which none of its command specs declares (declared %#x)", labelsOf(cmds), p, declared)
		}
	}
}

// snapshotParts splits a snapshot stream into its parts: the header (less
// the record counts, which follow their parts) and the records of each kind,
// concatenated.
func snapshotParts(t testing.TB, b []byte) map[statePart][]byte {
	t.Helper()
	require.Greater(t, len(b), 8+32)
	body := b[8 : len(b)-32]
	next := func() []byte {
		n, k := binary.Uvarint(body)
		require.Positive(t, k)
		require.LessOrEqual(t, n, uint64(len(body)-k))
		rec := body[k : k+int(n)]
		body = body[k+int(n):]
		return rec
	}
	hdr := &fsmpb.SnapshotHeader{}
	require.NoError(t, proto.Unmarshal(next(), hdr))
	out := map[statePart][]byte{}
	out[partItems] = []byte(fmt.Sprint(hdr.Owners)) // owner_idx of item records names these
	hdr.Owners = nil
	hdr.Members, hdr.Runs, hdr.Items, hdr.Workers, hdr.Revocations, hdr.Tenants = 0, 0, 0, 0, 0, 0
	out[partEvents] = []byte(fmt.Sprint(hdr.Events, hdr.EventSeq))
	hdr.Events, hdr.EventSeq = 0, 0
	h, err := proto.MarshalOptions{Deterministic: true}.Marshal(hdr)
	require.NoError(t, err)
	out[partHeader] = h
	rec := &fsmpb.SnapshotRecord{}
	for len(body) > 0 {
		raw := next()
		require.NoError(t, proto.Unmarshal(raw, rec))
		var p statePart
		switch rec.Rec.(type) {
		case *fsmpb.SnapshotRecord_Member:
			p = partMembers
		case *fsmpb.SnapshotRecord_Run:
			p = partRuns
		case *fsmpb.SnapshotRecord_Item:
			p = partItems
		case *fsmpb.SnapshotRecord_Worker:
			p = partWorkers
		case *fsmpb.SnapshotRecord_Event:
			p = partEvents
		case *fsmpb.SnapshotRecord_Revocation:
			p = partRevocations
		case *fsmpb.SnapshotRecord_Tenant:
			p = partTenants
		default:
			t.Fatalf("a snapshot record of an unknown kind %T: give it a statePart", rec.Rec)
		}
		out[p] = append(append(out[p], raw...), 0xff)
	}
	return out
}
