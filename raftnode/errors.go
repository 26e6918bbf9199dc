package raftnode

import (
	"errors"
	"fmt"
)

// Errors returned by the package. Every error a Node returns either is one of
// these sentinels, wraps one of them with detail, or (for Propose and the
// membership calls) wraps the caller's context error or an error value the
// FSM returned. Match them with errors.Is, never by message.
var (
	// ErrNotLeader means this node is not the serving leader: it is a
	// follower or candidate, it has not yet applied the epoch entry of its
	// term, or it lost leadership while the call was in progress. It is
	// always carried by a *NotLeaderError, which names the leader if known.
	//
	// For Propose, a NotLeaderError returned for a command that had already
	// been handed to raft is an unknown outcome: the command may still
	// commit under the new leader. A command that was still queued when
	// leadership was lost was never proposed.
	ErrNotLeader = errors.New("raftnode: not the serving leader")

	// ErrShutdown means the node has been shut down (or is shutting down).
	ErrShutdown = errors.New("raftnode: node is shut down")

	// ErrInvalidConfig means Config.Validate found one or more fields out of
	// range; the error names every one of them.
	ErrInvalidConfig = errors.New("raftnode: invalid config")

	// ErrInvalidArgument means a call was given bad input (an empty or
	// oversized command, an empty server id, a malformed address). Nothing
	// was changed.
	ErrInvalidArgument = errors.New("raftnode: invalid argument")

	// ErrNotMember means a membership call named a server id that is not in
	// the raft configuration. Nothing was changed.
	ErrNotMember = errors.New("raftnode: not a member of the configuration")

	// ErrUnsafeChange means a membership change was refused because it
	// could cost the cluster its quorum (removing the last voter, or
	// re-adding a voter as a non-voter). Nothing was changed.
	ErrUnsafeChange = errors.New("raftnode: unsafe membership change")

	// ErrTimeout means raft did not accept the request within
	// Config.ApplyTimeout (raft.ErrEnqueueTimeout). The request was not
	// appended to the log.
	ErrTimeout = errors.New("raftnode: timed out")

	// ErrFSMContract means the FSM broke the contract documented in the
	// package doc: its Apply returned something other than an error value
	// or a []any with exactly one element per command of the batch, or the
	// epoch command failed. Every caller of the affected batch receives it.
	ErrFSMContract = errors.New("raftnode: FSM broke the apply contract")
)

// NotLeaderError is returned when a call needs the serving leader and this
// node is not it. LeaderID and LeaderAddr name the leader this node knows
// of; both are empty when none is known (for example during an election).
// It matches ErrNotLeader under errors.Is; use errors.As to read the hint.
type NotLeaderError struct {
	// LeaderID is the raft server id of the known leader, or "".
	LeaderID string
	// LeaderAddr is the raft address of the known leader, or "".
	LeaderAddr string
}

// Error implements error; the message names the leader when one is known.
func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" && e.LeaderAddr == "" {
		return ErrNotLeader.Error() + " (leader unknown)"
	}
	return fmt.Sprintf("%s (leader is %q at %s)", ErrNotLeader.Error(), e.LeaderID, e.LeaderAddr)
}

// Is reports whether target is ErrNotLeader, so that errors.Is(err,
// ErrNotLeader) holds for every *NotLeaderError.
func (e *NotLeaderError) Is(target error) bool {
	return target == ErrNotLeader
}
