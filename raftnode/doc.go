// Package raftnode wires one replica of a hashicorp/raft state machine: the
// configuration and its validation, the raft-boltdb log and stable store, the
// file snapshot store, the transport (TCP or mutual TLS), bootstrap and join,
// leadership and term tracking, the group-committing proposer and
// linearizable reads. It is generic over the FSM: the FSM and the encoder of
// its log entries are passed in.
//
// # Storage
//
// Everything lives under Config.DataDir (created 0700): raft.db, a
// raft-boltdb/v2 database (bbolt with NoFreelistSync and the map freelist)
// serving as both log store (behind a log cache bounded in entries and in
// bytes, logcache.go) and stable store, and
// snapshots/, a raft.FileSnapshotStore keeping Config.SnapshotRetain
// snapshots. A node whose DataDir holds state (HasState) rejoins its cluster
// by itself; a fresh node is either bootstrapped (Bootstrap, a single-voter
// configuration) or added by the leader: as a non-voter (AddNonvoter),
// promoted to voter (PromoteNonvoter) once it has caught up, so that a
// server that never answers never counts toward the quorum.
//
// # Membership and recovery
//
// RemoveServer refuses an unknown id (ErrNotMember) and the last voter
// (ErrUnsafeChange). Whether the voters of a new configuration can still
// reach a quorum is the caller's check (the API asks each voter). After a
// quorum is lost for good, Recover rewrites a stopped replica's stored
// configuration (hashicorp/raft's RecoverCluster) from a peers file read by
// ReadPeersFile.
//
// A data directory remembers its replica: the first New writes Config.ID
// into replica-id (atomically: temporary file, fsync, rename), and a later
// New with another ID is refused with ErrReplicaIDMismatch naming both ids
// and the directory. A directory from before replica-id existed is adopted
// by the ID it is next started with, unless its raft configuration lists
// another id at this node's advertised address (and not ID): then it is
// refused the same way. A snapshot directory that is missing
// beside an existing raft.db, is not a readable directory, or lacks the
// snapshot that a compacted log starts after is refused at New with
// ErrSnapshotStore naming the path (hashicorp/raft would panic). While
// running, a snapshot fails with ErrSnapshotStore if the path is not a
// directory (raft logs it and keeps its log); a directory deleted while
// running is logged and recreated by the next snapshot.
//
// # Fatal apply results
//
// Config.FatalResult classifies FSM results as fatal (for the work ledger:
// an entry whose checksum fails in this replica's copy). The first fatal
// result latches: the FSM is never called again, the applied index stays
// before that entry, the node stops serving and shuts raft down (no
// leadership transfer), and Fatal reports an error wrapping ErrFatalApply
// naming the entry's index and term and the raft.db file. Skipping the entry
// instead would let this replica diverge from the others.
//
// # FSM contract
//
// The FSM given to New must behave as follows, and so must EncodeBatch and
// EpochCommand in Config:
//
//   - Every command log entry's data was built by Config.EncodeBatch(now,
//     term, cmds) from a batch of commands, where now is the leader's clock
//     and term the term the leader serves.
//   - FSM.Apply returns, for a command entry, either a Results (a value
//     with Len and At, such as fsm.Results) or a []any, with exactly one
//     element per command of the batch, in order; or a single error value
//     when the data cannot be decoded, which every caller of that entry
//     receives as its error. Each caller gets its command's element,
//     typed as the FSM made it (no reflection, no conversion). Anything
//     else, or another count, is reported to callers as ErrFSMContract.
//   - FSM.Apply must be deterministic; it sees raft.Log.Term and may refuse
//     commands stamped with an older epoch than it has recorded.
//   - On gaining leadership, the node issues a raft barrier and then commits
//     Config.EpochCommand(term) alone, as a batch of one. Until that entry
//     has been applied by the local FSM (and unless its single result is a
//     non-error value), the node does not serve: ServingTerm reports false
//     and Propose fails with *NotLeaderError.
//
// The FSM is wrapped before it is handed to raft; the wrapper forwards
// Apply, Snapshot and Restore (and StoreConfiguration, if the FSM
// implements raft.ConfigurationStore) and records the last index the FSM has
// consumed. The wrapper does not implement raft.BatchingFSM, so raft calls
// Apply once per entry and never an FSM's ApplyBatch: the fatal-result latch
// (below) must stop the FSM at the exact entry, and a batched apply would
// already have applied the entries after it.
//
// # Serving leadership and the epoch
//
// The raft term is the epoch. A node serves term T from the moment its
// epoch entry for T has applied until the moment it sees it is no longer
// leader of T (raft steps a partitioned leader down after
// LeaderLeaseTimeout without quorum contact; the node re-checks raft's state
// on every observation and at least every LeaderLeaseTimeout/10, capped at
// 50ms). On losing it, every context from WithLeadership is cancelled, and
// every queued or in-flight Propose fails at once with *NotLeaderError
// naming the new leader if known. Nothing is reported as applied that was
// not committed.
//
// # Group commit
//
// Propose does not pay one log entry per command. ProposeBatch queues a
// caller's commands together, as one unit that is never split across log
// entries (a batch over MaxBatchCommands or MaxBatchBytes is first cut, in
// order, into units that fit), and Propose is a batch of one. One proposer
// goroutine per serving term takes queued units in arrival order into a log
// entry (at most MaxBatchCommands commands and MaxBatchBytes bytes, at least
// one unit), stamps it through EncodeBatch with the current time and term,
// and hands it to raft.Apply; at most MaxInflightBatches entries are
// unresolved at once, and while they are, new commands queue and form the
// next entry. There is no linger: a
// lone command on an idle node goes out at once. Each caller receives its
// own element of the FSM's result. Batches are proposed in order, so
// commands are applied in the order the proposer took them, and a caller's
// batch in its own order.
//
// A caller whose context ends stops waiting; a command already handed to
// raft may still commit (an unknown outcome), and so may one whose batch was
// in flight when leadership was lost. Commands must be idempotent or
// compare-and-swap so that retrying after an unknown outcome is safe.
//
// # Reads
//
// VerifyLeader is a read-index barrier: after it returns nil, the local FSM
// reflects every write acknowledged before the call began. Reads that must
// be current go through it, never through a follower's or a deposed
// leader's local state.
package raftnode
