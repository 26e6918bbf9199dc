package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"lukechampine.com/blake3"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// EntryChecksumSize is the length of Entry.checksum: a blake3-256 sum.
const EntryChecksumSize = 32

// entryChecksumDomain separates entry checksums from every other blake3 sum
// of the project (sample ids, snapshot trailers). Changing it invalidates
// every checksum ever written.
const entryChecksumDomain = "rollout.fsm.v1.Entry.checksum\x00"

// entryChecksum returns the checksum EncodeEntry writes into an entry and
// decodeEntry verifies: blake3-256 over this canonical encoding, which does
// not depend on how protobuf lays the entry out:
//
//	"rollout.fsm.v1.Entry.checksum\x00"
//	now_unix_nano      8 bytes, big-endian two's complement
//	epoch              8 bytes, big-endian
//	len(commands)      8 bytes, big-endian
//	per command, in order:
//	  len(command)     8 bytes, big-endian
//	  command          its bytes, exactly as stored in the entry
//
// So it covers the stamped time, the epoch, the number, order and
// boundaries of the commands and every byte of each. It does not cover what
// raft keeps beside the data (the log's index, term and type): those are
// raft's own, checked by raft's log matching, and the leader does not know
// the index when it encodes the entry.
//
// It detects damage, not forgery: it has no key, so anyone who can write
// the Raft log can compute it. Who may write the log is the transport's
// business (replica certificates only).
func entryChecksum(nowUnixNano int64, epoch uint64, cmds [][]byte) []byte {
	h := blake3.New(EntryChecksumSize, nil)
	var n [8]byte
	put := func(v uint64) {
		binary.BigEndian.PutUint64(n[:], v)
		_, _ = h.Write(n[:])
	}
	_, _ = h.Write([]byte(entryChecksumDomain))
	put(uint64(nowUnixNano))
	put(epoch)
	put(uint64(len(cmds)))
	for _, c := range cmds {
		put(uint64(len(c)))
		_, _ = h.Write(c)
	}
	return h.Sum(nil)
}

// decodeEntry decodes the data of command log lg and verifies it before
// anything is applied. It refuses, with an error wrapping ErrCorruptEntry
// that names the log index:
//   - data that does not decode as an Entry (EncodeEntry never writes such
//     data, so this replica's copy was damaged);
//   - an entry with fields this version does not know (EncodeEntry writes
//     none, and the checksum would not cover them; a flipped tag byte of a
//     known field turns it into one);
//   - a checksum that is not EntryChecksumSize bytes or does not match
//     entryChecksum of the entry's now, epoch and commands.
//
// An entry with no checksum at all is accepted: it was written before
// checksums existed. Raft replays the log from the last snapshot on every
// restart, so refusing such entries would stop every replica upgraded over
// an existing data directory. Every entry written since carries a checksum
// (EncodeEntry always writes one), and damage that removes the field while
// the entry still decodes would have to rewrite the enclosing lengths as
// well as the tag; flipped bits do not.
//
// The entry's commands and checksum are sub-slices of lg.Data, not copies:
// Apply only reads them while it runs (each command is decoded, which
// copies what the ledger keeps), so they must not be retained.
func decodeEntry(lg *raft.Log) (*fsmpb.Entry, error) {
	e, ok := splitEntry(lg.Data)
	if !ok {
		// Not the canonical layout EncodeEntry writes: let protobuf decide
		// what it is (and say what is wrong).
		e = &fsmpb.Entry{}
		if err := proto.Unmarshal(lg.Data, e); err != nil {
			return nil, fmt.Errorf("%w: log entry %d does not decode as an entry: %v", ErrCorruptEntry, lg.Index, err)
		}
	}
	return verifyEntry(lg, e)
}

// splitEntry decodes data as an Entry without copying: the commands and
// the checksum alias data (capacity-capped). It answers only for data made
// of Entry's four fields with their own wire types, each well formed (as
// EncodeEntry writes it, in any order, a field repeated meaning what
// protobuf makes of it: the last scalar wins, commands append); anything
// else (unknown fields, other wire types, truncation) gives ok=false and is
// left to proto.Unmarshal, so the verdict is protobuf's either way.
func splitEntry(data []byte) (_ *fsmpb.Entry, ok bool) {
	e := &fsmpb.Entry{}
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return nil, false
		}
		data = data[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(data)
			if m < 0 {
				return nil, false
			}
			if num == 1 {
				e.NowUnixNano = int64(v)
			} else {
				e.Epoch = v
			}
			data = data[m:]
		case (num == 3 || num == 4) && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return nil, false
			}
			v = v[:len(v):len(v)]
			if num == 3 {
				if e.Commands == nil {
					e.Commands = make([][]byte, 0, 64)
				}
				e.Commands = append(e.Commands, v)
			} else {
				e.Checksum = v
			}
			data = data[m:]
		default:
			return nil, false
		}
	}
	return e, true
}

// verifyEntry applies decodeEntry's checks to a decoded entry.
func verifyEntry(lg *raft.Log, e *fsmpb.Entry) (*fsmpb.Entry, error) {
	if len(e.ProtoReflect().GetUnknown()) > 0 {
		return nil, fmt.Errorf("%w: log entry %d has fields its checksum does not cover", ErrCorruptEntry, lg.Index)
	}
	if len(e.Checksum) == 0 {
		return e, nil // written before checksums existed: see above
	}
	if len(e.Checksum) != EntryChecksumSize {
		return nil, fmt.Errorf("%w: log entry %d fails its checksum: stored checksum is %d bytes, want %d",
			ErrCorruptEntry, lg.Index, len(e.Checksum), EntryChecksumSize)
	}
	if sum := entryChecksum(e.NowUnixNano, e.Epoch, e.Commands); !bytes.Equal(sum, e.Checksum) {
		return nil, fmt.Errorf("%w: log entry %d fails its checksum: stored %x, computed %x",
			ErrCorruptEntry, lg.Index, e.Checksum, sum)
	}
	return e, nil
}
