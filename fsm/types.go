package fsm

import (
	"fmt"
	"time"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// State is an item's place in its life cycle. The numbers equal those of
// rolloutv1.ItemState, so the API converts with a plain cast.
type State uint8

// The item states. Done and Dead are terminal (Dead only until a submit with
// retry_dead re-pends the item).
const (
	StatePending State = 1
	StateRunning State = 2
	StateDone    State = 3
	StateDead    State = 4
	// StateCancelled: the item's run was cancelled before it finished
	// (terminal).
	StateCancelled State = 5
)

// String returns the state's lower-case name, or "state(N)" for a number
// that is not a state.
func (s State) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateRunning:
		return "running"
	case StateDone:
		return "done"
	case StateDead:
		return "dead"
	case StateCancelled:
		return "cancelled"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

func (s State) valid() bool { return s >= StatePending && s <= StateCancelled }

// ItemKey names one attempt of one item.
type ItemKey struct {
	Run     string
	ID      []byte
	Attempt uint64
}

// Item is a read-only copy of an item, handed out by reads and command
// results. Its byte slices are copies: the caller may keep or modify them.
type Item struct {
	Run     string
	ID      []byte
	Index   uint64
	Payload []byte

	State    State
	Owner    string // the Running owner; for Done and Dead the last owner; "" when Pending
	Attempt  uint64 // incremented by every claim and steal
	Failures uint32 // failed attempts so far (reset by retry_dead)

	Result []byte // set when Done
	Reason string // the last failure's reason when Dead
	// DependsOn lists the ids of the items this one depends on, as
	// submitted (nil when none).
	DependsOn [][]byte
	// PayloadRef and ResultRef reference the payload and the result in the
	// run's store (runs with a store); Summary is the result's summary.
	PayloadRef *Ref
	ResultRef  *Ref
	Summary    []byte

	// Count is, for a record of a range run (ranges.go), its number of
	// indexes: it stands for the indexes [Index, Index+Count) of its run,
	// the lines Index-Base .. Index-Base+Count-1 of the input chunk that
	// PayloadRef names whole. Count is 0 for an item (one index, its own
	// id and payload).
	Count uint64
	// Base is a range's chunk's first index (the chunk's line 0).
	Base uint64
	// Started is a Running range's progress high-water mark as its owner
	// last reported it (0: none reported).
	Started uint64

	// Times come from the leader-stamped entry times (UTC); zero when unset.
	CreatedAt time.Time
	UpdatedAt time.Time
	ClaimedAt time.Time
}

// Member is a coordinator replica as recorded in the ledger.
type Member struct {
	ID       string
	RaftAddr string
	GRPCAddr string
}

// RunStatus is a copy of a run's spec and counters.
type RunStatus struct {
	Name string
	Spec *fsmpb.RunSpec // a clone; max_failures already defaulted

	Total   uint64 // items submitted
	Pending uint64
	Running uint64
	Done    uint64
	Dead    uint64
	// Cancelled counts the items that will not run because the run was
	// cancelled; IsCancelled tells that it was.
	Cancelled   uint64
	IsCancelled bool
	// Blocked counts the Pending items that wait on a dependency not yet
	// Done (included in Pending; see limits.MaxDepsPerItem).
	Blocked  uint64
	Failures uint64 // failed attempts over the run's life (not reset by retry_dead)
	// Ranges is, for a range run, the records the ledger holds for it
	// (unfinished ranges, one-index records, done segments); 0 for an
	// item run.
	Ranges uint64
	// Stall is set while the run is stalled on a missing or changed input
	// object (see HoldCmd); nil otherwise.
	Stall *Stall

	CreatedAt time.Time
	// FinishedAt is zero until Pending+Running == 0, Total > 0 and Total >=
	// Spec.Total; it is cleared again if pending items appear later.
	FinishedAt time.Time
}

// WorkerStatus is a copy of what the ledger knows about a worker.
type WorkerStatus struct {
	ID            string
	Running       uint64 // items the ledger says it owns
	Backlog       uint32 // as reported in its last heartbeat command (liveness is leader-local: the server overlays its own view)
	ItemsPerSec   float64
	LastHeartbeat time.Time
	Lost          bool // declared lost by ExpireWorkers; cleared by its next register (the leader refuses a Lost worker's heartbeat, claim and steal until then)
	Completed     uint64
	Executing     []ItemKey // from its last heartbeat
	// Kinds are the run kinds it runs, as it named them ("batch" for the
	// default kind); nil: every kind.
	Kinds []string
	// Models are the run models it serves, sorted; nil: every model.
	Models []string
}

// SubmitCounts tells what a SubmitItems or SubmitRanges command did with
// each item it named, in items (a range counts its indexes). The counters
// are 64-bit: one SubmitRanges command may name more than 2^32 items, and
// a count never saturates.
type SubmitCounts struct {
	Created        uint64
	AlreadyPending uint64
	AlreadyRunning uint64
	AlreadyDone    uint64
	Retried        uint64 // Dead items re-pended because retry_dead was set
	Dead           uint64 // Dead items left Dead
	// RependedStale counts Running items re-pended because their owner's
	// last heartbeat was older than repend_stale_nano; they are not in
	// AlreadyRunning.
	RependedStale uint64
	// CreatedDead counts items created Dead (dead_reason set); they are not
	// in Created.
	CreatedDead uint64
}

// Result is the outcome of one command. Apply returns []Result for an entry,
// one per command in order. When Err is non-nil the command changed nothing
// and the other fields are zero.
type Result struct {
	// Err is nil when the command applied; otherwise it wraps one of the
	// package's sentinel errors.
	Err error
	// Items holds, for Claim and Steal, the items now owned by the caller,
	// with their new attempt.
	Items []Item
	// Victim is the worker a Steal chose ("" when there was none).
	Victim string
	// Submit holds SubmitItems' per-item outcome counts.
	Submit SubmitCounts
	// Lost holds, for Heartbeat, the held keys that are no longer
	// Running(worker, that attempt); the worker must drop them.
	Lost []ItemKey
	// Repended counts items put back to Pending by Deregister,
	// ExpireWorkers, Nack (1) and a Fail that will be retried (1).
	Repended int
	// Expired lists, sorted, the workers ExpireWorkers declared lost.
	Expired []string
	// Removed lists, sorted, the Lost workers ExpireWorkers removed from the
	// ledger (silent past the retention; see Config.LostWorkerRetention).
	Removed []string
	// Duplicate is set when a Complete named an item already Done with the
	// identical result: an idempotent retry, nothing changed.
	Duplicate bool
	// Each holds, for CompleteMany, the outcome of each item in order (an
	// item's Err does not fail the command; Result.Err stays nil).
	Each []Result
	// Bounds holds, for Heartbeat, the current bounds of every held range
	// still Running(worker, that attempt): a steal may have cut its end.
	Bounds []RangeBound
}

// RangeBound is a Running range's current extent [Lo, Hi).
type RangeBound struct {
	Run     string
	ID      []byte
	Attempt uint64
	Lo, Hi  uint64
}
