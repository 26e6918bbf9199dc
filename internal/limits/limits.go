// Package limits is the one definition of the ledger's size limits and text
// rules that the ledger (fsm) and every client share: the coordinator's API
// edge (api/validate), the worker, the CLI and batch/train all refer to these
// constants and cleaners instead of to fsm, so that a client binary never
// links the ledger or Raft, and a limit changed here changes on both sides
// at once.
//
// Its contract: it imports only the standard library; every constant is the
// bound the ledger enforces (a command that exceeds one is refused and
// changes nothing); CleanText and CleanReason return text the ledger accepts
// (see CleanText); Limits are the sizes the coordinator accepts from clients
// at its API edge, announced to them (ClusterResponse.limits), with Default
// the ones rollout runs with.
package limits

// Limits on the fields of ledger commands. A command that exceeds one of
// them is refused by the ledger with fsm.ErrInvalidCommand and changes
// nothing.
const (
	// MaxRunNameBytes bounds a run name (printable UTF-8, non-empty).
	MaxRunNameBytes = 128
	// MaxWorkerIDBytes bounds a worker id and a member id (printable UTF-8,
	// non-empty).
	MaxWorkerIDBytes = 128
	// MaxIDBytes bounds an item id (1 to 64 bytes; rollout uses 32-byte
	// blake3 ids).
	MaxIDBytes = 64
	// MaxReasonBytes bounds a failure reason. Workers should truncate longer
	// backend errors before they fail an item (CleanReason does).
	MaxReasonBytes = 4096
	// MaxModelBytes bounds RunSpec.model and each model a worker registers.
	MaxModelBytes = 1024
	// MaxKindBytes bounds RunSpec.kind (printable UTF-8).
	MaxKindBytes = 64
	// MaxWorkerKinds bounds the kinds one worker registers.
	MaxWorkerKinds = 16
	// MaxWorkerModels bounds the models one worker registers.
	MaxWorkerModels = 256
	// MaxDepsPerItem bounds NewItem.depends_on: an item may depend on at
	// most this many items.
	MaxDepsPerItem = 256
)

// Limits of the data-plane references the ledger records.
const (
	// MaxObjectKeyBytes bounds DataRef.object.
	MaxObjectKeyBytes = 1024
	// MaxSummaryBytes bounds a result's summary (CompleteCmd.summary).
	MaxSummaryBytes = 1024
	// MaxStoreURLBytes bounds RunSpec.store.
	MaxStoreURLBytes = 1024
	// MaxRefLength bounds DataRef.length: one payload or result in the
	// store (the store, not the ledger, holds the bytes).
	MaxRefLength = 1 << 40
)

// Limits of a range run's ranges (fsm/ranges.go), checked at the edge and
// by the ledger.
const (
	// MaxRangeCount bounds one range's width: a chunk holds at most this
	// many lines.
	MaxRangeCount = 1 << 32
	// MaxRangeIndex bounds a range's first index.
	MaxRangeIndex = MaxRefLength
	// MaxReportFailures bounds the failed indexes one range report names.
	MaxReportFailures = 4096
)

// DefaultMaxPayloadBytes is the ledger's default cap (fsm.Config's
// MaxPayloadBytes) on each item's payload, each result and a run spec's
// sampling bytes: 1 MiB. It is also the edge's default payload and result
// limit (Default).
const DefaultMaxPayloadBytes = 1 << 20
