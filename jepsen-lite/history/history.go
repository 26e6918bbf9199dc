package history

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"golang.org/x/sys/unix"
)

var (
	// ErrBadEvent is wrapped by errors about an event that cannot be
	// written or a line that does not decode.
	ErrBadEvent = errors.New("history: bad event")
)

// Type says what an Event records.
type Type string

// Event types. An operation is an TypeInvoke followed by one of TypeOK,
// TypeFail (it certainly changed nothing) or TypeUnknown (it may have taken
// effect) with the same Process and Call; an invocation with no completion
// (its process was killed) is unknown with an open end.
const (
	TypeInvoke  Type = "invoke"
	TypeOK      Type = "ok"
	TypeFail    Type = "fail"
	TypeUnknown Type = "unknown"
	// TypeGuard is a worker's epoch guard checking a reply's term: Term
	// is the reply's, Highest the highest seen before, Rejected the verdict.
	TypeGuard Type = "guard"
	// TypeNemesis is a fault injected or healed (Op names it, Nodes the
	// targets, Detail the rest).
	TypeNemesis Type = "nemesis"
	// TypeInfo is anything else worth a line: a process start, a leader
	// observed (Op "leader", Term, Detail the leader id).
	TypeInfo Type = "info"
	// TypeHostile is one operation of the hostile nemesis, recorded once it
	// is over: Op names the attack, Expect the outcomes that refuse it, Got
	// the outcome, Changed what it changed (empty: nothing seen). It is no
	// workload operation: the ledger model never sees it.
	TypeHostile Type = "hostile"
)

// Event is one line of a history.
type Event struct {
	// Time is CLOCK_MONOTONIC nanoseconds (see Now).
	Time int64 `json:"t"`
	// Process names the recording process incarnation: "w1/4242" for a
	// worker, "submit", "reader-1", "straggler", "nemesis" for the harness.
	Process string `json:"p"`
	Type    Type   `json:"type"`
	// Op is the RPC ("Register", "Claim", "Report", "SubmitItems", "Results", ...), the
	// nemesis ("kill", "partition-halves", ...) or the info topic.
	Op string `json:"op,omitempty"`
	// Call pairs an invocation with its completion within Process.
	Call uint64 `json:"call,omitempty"`
	// Term is the term (epoch) the reply carried (TypeOK, TypeGuard).
	Term uint64 `json:"term,omitempty"`
	// Worker is the worker identity the operation acted as.
	Worker string `json:"worker,omitempty"`
	// Items are the items the operation named or returned.
	Items []Item `json:"items,omitempty"`
	// Err is the error of a failed or unknown operation.
	Err string `json:"err,omitempty"`
	// Detail is free text (nemesis parameters, an info message).
	Detail string `json:"detail,omitempty"`
	// Addr is the replica that answered (TypeGuard).
	Addr string `json:"addr,omitempty"`
	// Hint is true when a guard event checked a leader hint.
	Hint bool `json:"hint,omitempty"`
	// Highest is the highest term seen before a guard check.
	Highest uint64 `json:"highest,omitempty"`
	// Rejected is the guard's verdict.
	Rejected bool `json:"rejected,omitempty"`
	// Nodes are a nemesis event's targets.
	Nodes []string `json:"nodes,omitempty"`
	// Expect, Got and Changed describe a TypeHostile event: the outcomes
	// that refuse the attack (comma-separated gRPC code names or report
	// statuses), the outcome seen, and any change traced to it.
	Expect  string `json:"expect,omitempty"`
	Got     string `json:"got,omitempty"`
	Changed string `json:"changed,omitempty"`
	// Object is the object key a store nemesis event damaged (deleted or
	// changed) in a run's object store; Items are then the items whose
	// recorded result the ledger held in that object before the damage.
	Object string `json:"object,omitempty"`
}

// Item is one item as an operation saw it. Which fields are set depends on
// the operation: claims list the attempt handed out, report invocations the
// outcome and result hash sent, report completions the status per item,
// reads the ledger's state, owner, attempt and result hash.
type Item struct {
	Run string `json:"run"`
	// ID is the item id in hex.
	ID    string `json:"id"`
	Index uint64 `json:"idx"`
	// Attempt is the ownership's fencing token.
	Attempt uint64 `json:"att,omitempty"`
	// Outcome is a report's outcome: "DONE", "FAILED", "NACK" or "HELD".
	Outcome string `json:"outcome,omitempty"`
	// StoreDown marks a HELD report that said the run's store could not be
	// reached (ItemReport.store_unavailable), not that its input is missing.
	StoreDown bool `json:"store_down,omitempty"`
	// Status is a report's result: "APPLIED", "CAS_MISS", "CONFLICT",
	// "NOT_FOUND", "INVALID".
	Status string `json:"status,omitempty"`
	// State is the ledger state a read saw: "PENDING", "RUNNING", "DONE",
	// "DEAD".
	State string `json:"state,omitempty"`
	// Owner is the owner a read saw.
	Owner string `json:"owner,omitempty"`
	// Result is ResultHash of a reported or read result, or RefHash of
	// its reference when the result lives in the run's object store (for
	// a range report or a Done range segment: the result object's).
	Result string `json:"res,omitempty"`

	// Ranges (a range run's records, fsm/ranges.go). Count is a range's
	// width: the item stands for the indexes [Index, Index+Count) (a
	// claimed, stolen, adopted or read range; a submitted chunk; a
	// heartbeat's bound of a held range); 0 for an item.
	Count uint64 `json:"n,omitempty"`
	// DoneTo, Failed, Nack and ReleaseFrom describe one RangeReport (Op
	// "ReportRange"; Index is its lo): the indexes [Index, DoneTo) are
	// finished, those in Failed failed (the others are done, their
	// results in the object Result fingerprints), Nack gives the rest of
	// the range back, ReleaseFrom (when > 0) the indexes from it on.
	DoneTo      uint64   `json:"to,omitempty"`
	Failed      []uint64 `json:"failed,omitempty"`
	Nack        bool     `json:"nack,omitempty"`
	ReleaseFrom uint64   `json:"rel,omitempty"`
	// Dup is set on a range report's completion when the ledger answered
	// that it repeated one already applied (nothing changed).
	Dup bool `json:"dup,omitempty"`
}

// IsRange reports whether it names a range of a range run (a record, a
// chunk or a bound) rather than an item.
func (it Item) IsRange() bool { return it.Count > 0 }

// Key identifies an item across runs.
type Key struct{ Run, ID string }

// Key returns the item's key.
func (it Item) Key() Key { return Key{it.Run, it.ID} }

// Now returns CLOCK_MONOTONIC in nanoseconds: the time base of every
// history on this machine.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// CLOCK_MONOTONIC is always available on Linux.
		panic("history: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// ResultHash is the short fingerprint of a result recorded in histories
// (the first 8 bytes of its SHA-256, in hex); "" for no result.
func ResultHash(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// RefHash is the short fingerprint of a result that lives in a run's
// object store, from its reference's blake3: "b3:" and the first 8 bytes
// in hex; "" without a hash. Two references to the same bytes (a retry that
// wrote them into another object) have the same fingerprint.
func RefHash(blake3 []byte) string {
	if len(blake3) == 0 {
		return ""
	}
	return "b3:" + hex.EncodeToString(blake3[:min(8, len(blake3))])
}

// IDString is an item id as written in histories.
func IDString(id []byte) string { return hex.EncodeToString(id) }
