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

	// ErrRaft wraps any other error hashicorp/raft returned for a request
	// (a leadership transfer that found no peer or timed out, an apply
	// aborted by a snapshot restore, ...): a failure of the replica, not of
	// the request, so a retry may succeed. For Propose it is an unknown
	// outcome.
	ErrRaft = errors.New("raftnode: raft failed the request")

	// ErrFSMContract means the FSM broke the contract documented in the
	// package doc: its Apply returned something other than an error value
	// or a Results (or []any) with exactly one element per command of the
	// entry, or the epoch command failed. Every caller of the affected
	// entry receives it. It is a bug, not a transient failure: retrying the
	// same commands would meet it again.
	ErrFSMContract = errors.New("raftnode: FSM broke the apply contract")

	// ErrFatalApply means Config.FatalResult classified what the FSM
	// returned for a log entry as fatal (for the work ledger: this
	// replica's copy of the entry fails its checksum). The node stopped
	// applying at that entry and stopped raft; the error names the entry's
	// index and term and the raft.db file, and wraps the FSM's error. It is
	// reported by Node.Fatal and Node.FatalErr, and returned to every
	// proposer whose entry this node did not apply because of it. For such
	// a proposer it is an unknown outcome, like a lost leadership: the
	// entry was committed, and the other replicas may have applied it.
	ErrFatalApply = errors.New("raftnode: stopped applying the log")

	// ErrReplicaIDMismatch means New was given a DataDir whose replica-id
	// file names another replica: the directory holds that replica's raft
	// state, and running it under another id would make it a stranger to
	// its cluster. The error names both ids and the directory.
	ErrReplicaIDMismatch = errors.New("raftnode: data directory belongs to another replica")

	// ErrSnapshotStore means the snapshot directory (DataDir/snapshots) is
	// missing while raft.db exists, is not a usable directory, or does not
	// hold the snapshot that the log in raft.db starts after. The error
	// names the path. Nothing was changed.
	ErrSnapshotStore = errors.New("raftnode: snapshot directory is missing or unusable")

	// ErrPeerRefused means the raft transport refused a TLS peer: its
	// certificate is not a replica's, or names a replica outside the raft
	// configuration.
	ErrPeerRefused = errors.New("raftnode: raft peer refused")
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
