package fsm

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// EncodeCommand marshals one command deterministically for EncodeEntry. A nil
// command or one with no operation set gives an error wrapping
// ErrInvalidCommand. It checks only the shape: field limits are enforced by
// Apply, which returns the error in that command's Result.
func EncodeCommand(c *fsmpb.Command) ([]byte, error) {
	if c == nil || c.Cmd == nil {
		return nil, fmt.Errorf("%w: command has no operation set", ErrInvalidCommand)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	return b, nil
}

// EncodeEntry builds the data of one Raft log entry: the commands (each from
// EncodeCommand) stamped with the leader's time now and the epoch (Raft
// term) the leader believes current. A zero now is encoded as 0. Apply
// returns one Result per command, in order.
//
// The entry carries a checksum (Entry.checksum, EntryChecksumSize bytes):
// blake3-256 over a canonical encoding of now (as UnixNano, 0 for a zero
// now), epoch, the number of commands and each command's length and bytes,
// in order. It covers nothing else: not the raft log index or term. Apply
// verifies it before it changes anything and refuses an entry whose
// checksum does not match with ErrCorruptEntry (see ErrCorruptEntry for
// entries without one).
func EncodeEntry(now time.Time, epoch uint64, cmds [][]byte) ([]byte, error) {
	e := &fsmpb.Entry{Epoch: epoch, Commands: cmds}
	if !now.IsZero() {
		e.NowUnixNano = now.UnixNano()
	}
	e.Checksum = entryChecksum(e.NowUnixNano, e.Epoch, e.Commands)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	return b, nil
}
