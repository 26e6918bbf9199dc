package fsm

import "errors"

// Errors returned by the ledger. Every error a command result, Restore, New or
// an Encode function returns wraps exactly one of these sentinels with detail
// (only Persist passes on the sink's own I/O errors); match them with
// errors.Is, never by message. A command result that carries one of them
// changed nothing.
var (
	// ErrCASMiss means the item is not Running(worker, attempt) as the command
	// expected (it is Pending, Dead, Done, owned by another worker, or at
	// another attempt). A CAS miss is an ordinary outcome, not a failure of
	// the system: it is how a stolen-then-acknowledged item gets exactly one
	// winner.
	ErrCASMiss = errors.New("fsm: item is not in the state the command expected")

	// ErrConflict means a Complete named a Done item with a result different
	// from the one recorded. The first result stands; results are never
	// overwritten.
	ErrConflict = errors.New("fsm: item is already done with a different result")

	// ErrRunNotFound means the command or read named a run the ledger does
	// not hold.
	ErrRunNotFound = errors.New("fsm: run not found")

	// ErrHandled means a local operation (a submit) named a run that was
	// handed to a peer cluster (a handle, handles.go).
	ErrHandled = errors.New("fsm: run was handed to a peer cluster")

	// ErrRouteConflict means a command would route a run elsewhere than
	// where it was routed when created (a local run to a peer, a handle to
	// another peer), or hand on a run that came from a peer (one hop).
	ErrRouteConflict = errors.New("fsm: run is routed elsewhere")

	// ErrItemNotFound means the command named an item its run does not hold.
	ErrItemNotFound = errors.New("fsm: item not found")

	// ErrInvalidCommand means a command (or a whole entry) is malformed,
	// oversized or self-contradictory. Nothing was changed.
	ErrInvalidCommand = errors.New("fsm: invalid command")

	// ErrStaleEpoch means the entry's Raft term or its stamped epoch is older
	// than the ledger's epoch: it was proposed by a deposed leader. Every
	// command of such an entry is refused and nothing changes.
	ErrStaleEpoch = errors.New("fsm: stale epoch")

	// ErrNotIdle means a Steal came from a thief whose local backlog is not
	// empty; only idle workers may steal.
	ErrNotIdle = errors.New("fsm: thief is not idle")

	// ErrWorkerNotRegistered means a Claim, Steal or Heartbeat came from a
	// worker the ledger does not hold (it never registered, or it was
	// deregistered, evicted or removed after expiring), or an eviction named
	// such a worker. Workers register explicitly with RegisterWorker; an
	// unknown worker id is never registered implicitly.
	ErrWorkerNotRegistered = errors.New("fsm: worker is not registered")

	// ErrCorruptSnapshot means Restore was handed a stream that is not a
	// complete, consistent ledger snapshot (bad magic, version, checksum,
	// truncation, or a record that contradicts the others). The ledger's
	// previous state is unchanged.
	ErrCorruptSnapshot = errors.New("fsm: corrupt snapshot")

	// ErrInvalidConfig means Config.Validate found a field out of range.
	ErrInvalidConfig = errors.New("fsm: invalid config")

	// ErrCorruptEntry means this replica's copy of a command log entry is
	// damaged: its data does not decode as an entry, has fields the
	// checksum does not cover, or fails its checksum (see EncodeEntry).
	// Apply returns it as the single result of the whole entry and changes
	// nothing. It is fatal for the replica: the other replicas applied the
	// entry as it was written, so this one must stop applying rather than
	// skip it (which would diverge). An entry with no checksum at all was
	// written before checksums existed and is accepted.
	ErrCorruptEntry = errors.New("fsm: corrupt log entry")

	// ErrRunCancelled means a submit named a run that was cancelled: a
	// cancelled run takes no new items (delete it to reuse its name).
	ErrRunCancelled = errors.New("fsm: run is cancelled")

	// ErrRunActive means a DeleteRun named a run that is neither finished
	// nor cancelled.
	ErrRunActive = errors.New("fsm: run is neither finished nor cancelled")

	// ErrAlreadyRevoked means a revocation named a serial number or a name
	// the revocation list already holds; nothing changed.
	ErrAlreadyRevoked = errors.New("fsm: certificate already revoked")

	// ErrCertRevoked means a worker registered with a certificate (or as a
	// name) on the revocation list; nothing changed.
	ErrCertRevoked = errors.New("fsm: certificate revoked")

	// ErrLastAdmin means a revocation would revoke the certificate of the
	// admin that asked for it while no other known admin certificate (see
	// RevokeCmd) stays unrevoked: the cluster would be left with no admin
	// it knows of. Nothing changed.
	ErrLastAdmin = errors.New("fsm: refusing to revoke the last known admin certificate")

	// ErrQuota means a submit would put its run's tenant past the tenant's
	// max_queued quota (tenants.go); the error names the tenant, the limit,
	// what is queued and what the submit adds. Nothing changed.
	ErrQuota = errors.New("fsm: tenant quota exceeded")

	// ErrNotOwner means a submit named, for an existing run, a tenant other
	// than the run's (a run's tenant is fixed when it is created). Nothing
	// changed.
	ErrNotOwner = errors.New("fsm: run belongs to another tenant")
)
