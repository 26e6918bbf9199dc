package fsm

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// checksumEntry is an entry of two commands that changes the base ledger: a
// completion and a claim.
func checksumEntry(t *testing.T, h *harness) *fsmpb.Entry {
	t.Helper()
	data := h.entry(1, cComplete("r", "a", "w1", 1, "result-a"), cClaim("w2", 1))
	var e fsmpb.Entry
	require.NoError(t, proto.Unmarshal(data, &e))
	require.Len(t, e.Checksum, EntryChecksumSize)
	return &e
}

func marshalEntry(t *testing.T, e *fsmpb.Entry) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(e)
	require.NoError(t, err)
	return b
}

// applyRefused applies data as log index 7 and requires that the whole entry
// is refused with ErrCorruptEntry naming the index, changing nothing.
func applyRefused(t *testing.T, h *harness, data []byte) {
	t.Helper()
	before := persist(t, h.l)
	out := h.l.Apply(&raft.Log{Index: 7, Term: 1, Type: raft.LogCommand, Data: data})
	err, ok := out.(error)
	require.True(t, ok, "Apply returned %T (%v), want an error", out, out)
	require.ErrorIs(t, err, ErrCorruptEntry)
	require.NotErrorIs(t, err, ErrInvalidCommand, "wraps exactly one sentinel")
	require.Contains(t, err.Error(), "log entry 7")
	require.Equal(t, before, persist(t, h.l), "a refused entry changed the ledger")
}

func TestEntryChecksumCoversEveryField(t *testing.T) {
	tests := []struct {
		name  string
		alter func(e *fsmpb.Entry)
	}{
		{name: "now", alter: func(e *fsmpb.Entry) { e.NowUnixNano++ }},
		{name: "now zeroed", alter: func(e *fsmpb.Entry) { e.NowUnixNano = 0 }},
		{name: "epoch", alter: func(e *fsmpb.Entry) { e.Epoch++ }},
		{name: "epoch zeroed", alter: func(e *fsmpb.Entry) { e.Epoch = 0 }},
		{name: "a byte of a command", alter: func(e *fsmpb.Entry) {
			c := append([]byte(nil), e.Commands[0]...)
			c[len(c)-1] ^= 0x01 // the last byte of "result-a"
			e.Commands[0] = c
		}},
		{name: "a command dropped", alter: func(e *fsmpb.Entry) { e.Commands = e.Commands[:1] }},
		{name: "a command added", alter: func(e *fsmpb.Entry) { e.Commands = append(e.Commands, e.Commands[1]) }},
		{name: "commands swapped", alter: func(e *fsmpb.Entry) { e.Commands[0], e.Commands[1] = e.Commands[1], e.Commands[0] }},
		{name: "command boundary moved", alter: func(e *fsmpb.Entry) {
			e.Commands[1] = append([]byte{e.Commands[0][len(e.Commands[0])-1]}, e.Commands[1]...)
			e.Commands[0] = e.Commands[0][:len(e.Commands[0])-1]
		}},
		{name: "checksum flipped", alter: func(e *fsmpb.Entry) { e.Checksum[3] ^= 0x80 }},
		{name: "checksum truncated", alter: func(e *fsmpb.Entry) { e.Checksum = e.Checksum[:EntryChecksumSize-1] }},
		{name: "checksum extended", alter: func(e *fsmpb.Entry) { e.Checksum = append(e.Checksum, 0) }},
		{name: "unknown field", alter: func(e *fsmpb.Entry) {
			e.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := base(t)
			e := checksumEntry(t, h)
			tc.alter(e)
			applyRefused(t, h, marshalEntry(t, e))
		})
	}
	t.Run("undecodable data", func(t *testing.T) {
		applyRefused(t, base(t), []byte{0xff, 0xff, 0xff})
	})
	t.Run("unaltered entry applies", func(t *testing.T) {
		h := base(t)
		res, ok := h.applyData(1, marshalEntry(t, checksumEntry(t, h))).(Results)
		require.True(t, ok)
		require.NoError(t, res[0].Err)
		require.NoError(t, res[1].Err)
	})
}

// Every single-bit flip anywhere in an encoded entry (a tag, a length, a
// value, the checksum) is refused: none is applied as different bytes.
func TestEveryBitFlipOfAnEntryIsRefused(t *testing.T) {
	h := base(t)
	data := marshalEntry(t, checksumEntry(t, h))
	for i := range data {
		for bit := range 8 {
			t.Run(fmt.Sprintf("byte%d-bit%d", i, bit), func(t *testing.T) {
				d := append([]byte(nil), data...)
				d[i] ^= 1 << bit
				applyRefused(t, h, d)
			})
		}
	}
}

// An entry without a checksum was written before checksums existed; it is
// applied exactly as the same entry with one.
func TestEntryWithoutChecksumIsAccepted(t *testing.T) {
	with, without := base(t), base(t)
	e := checksumEntry(t, with)
	res1, ok := with.applyData(1, marshalEntry(t, e)).(Results)
	require.True(t, ok)
	e.Checksum = nil
	res2, ok := without.applyData(1, marshalEntry(t, e)).(Results)
	require.True(t, ok)
	require.Equal(t, res1, res2)
	require.Equal(t, persist(t, with.l), persist(t, without.l))
}

func TestEncodeEntryChecksumIsCanonical(t *testing.T) {
	now := time.Unix(0, 1234567890)
	cmds := [][]byte{[]byte("one"), []byte("two")}
	a, err := EncodeEntry(now, 3, cmds)
	require.NoError(t, err)
	b, err := EncodeEntry(now, 3, [][]byte{[]byte("one"), []byte("two")})
	require.NoError(t, err)
	require.Equal(t, a, b, "the same entry encodes to the same bytes")
	var e fsmpb.Entry
	require.NoError(t, proto.Unmarshal(a, &e))
	require.Equal(t, entryChecksum(1234567890, 3, cmds), e.Checksum)
	// The zero time is stamped as 0 and checksummed as 0.
	z, err := EncodeEntry(time.Time{}, 3, cmds)
	require.NoError(t, err)
	require.NoError(t, proto.Unmarshal(z, &e))
	require.Zero(t, e.NowUnixNano)
	require.Equal(t, entryChecksum(0, 3, cmds), e.Checksum)
}

// splitEntrySeeds are entry encodings splitEntry must agree with protobuf
// on: EncodeEntry's own, fields out of order and repeated, empty commands,
// and damage (unknown fields, other wire types, truncation).
func splitEntrySeeds(t testing.TB) [][]byte {
	good, err := EncodeEntry(time.Unix(1_700_000_000, 5), 7, [][]byte{[]byte("a"), {}, []byte("ccc")})
	require.NoError(t, err)
	var b []byte
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("x"))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 9)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 10)
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(1<<63))
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendBytes(b, nil)
	unknown := protowire.AppendVarint(protowire.AppendTag(bytes.Clone(good), 9, protowire.VarintType), 1)
	wrongType := protowire.AppendFixed64(protowire.AppendTag(nil, 2, protowire.Fixed64Type), 3)
	return [][]byte{good, b, nil, unknown, wrongType, good[:len(good)-1], good[:1], {0xff, 0xff}, append(bytes.Clone(good), good...)}
}

// TestSplitEntryAgrees: where splitEntry answers, it decodes what
// proto.Unmarshal decodes; and the commands it returns are sub-slices of the
// data that an append cannot spill from.
func TestSplitEntryAgrees(t *testing.T) {
	answered := 0
	for _, data := range splitEntrySeeds(t) {
		if checkSplitEntry(t, data) {
			answered++
		}
	}
	require.Equal(t, 4, answered, "the canonical, reordered, empty and doubled entries take the fast path")
	e, ok := splitEntry(splitEntrySeeds(t)[0])
	require.True(t, ok)
	require.Equal(t, 1, cap(e.Commands[0]))
}

func checkSplitEntry(t *testing.T, data []byte) bool {
	t.Helper()
	got, ok := splitEntry(data)
	if !ok {
		return false
	}
	var want fsmpb.Entry
	require.NoError(t, proto.Unmarshal(data, &want), "splitEntry accepted %x", data)
	require.Empty(t, want.ProtoReflect().GetUnknown())
	require.True(t, proto.Equal(&want, got), "%x: splitEntry %v, protobuf %v", data, got, &want)
	return true
}

// FuzzSplitEntry: splitEntry never disagrees with protobuf.
func FuzzSplitEntry(f *testing.F) {
	for _, s := range splitEntrySeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkSplitEntry(t, data) })
}
