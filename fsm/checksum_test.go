package fsm

import (
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
