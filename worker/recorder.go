package worker

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
)

// Recorder receives the history of a Worker's calls to the coordinator, for
// checking offline (jepsen-lite records it through rollout-worker
// --history). Record is called synchronously on the goroutine making the
// call, so it must be fast and safe for concurrent use, and must not call the
// Worker. The messages in an Event belong to the Worker: Record must neither
// modify them nor keep them after it returns.
type Recorder interface {
	Record(Event)
}

// EventKind says what an Event records.
type EventKind int

// Event kinds. Every call is recorded as an EventInvoke followed, when the
// call returns, by exactly one of EventOK, EventFail or EventUnknown with the
// same Call; a call cut short by the process dying has no completion.
const (
	// EventInvoke: a call is about to be made; Req is set.
	EventInvoke EventKind = iota + 1
	// EventOK: the call returned a reply that passed the epoch guard; Req
	// and Resp are set.
	EventOK
	// EventFail: the call failed and certainly changed nothing (the
	// coordinator refused it: invalid argument, not found, failed
	// precondition, ...); Req and Err are set.
	EventFail
	// EventUnknown: the call failed and may have taken effect (timeouts,
	// unreachable replicas, the caller's context ending); Req and Err are
	// set.
	EventUnknown
	// EventGuard: the epoch guard checked the term of a reply or leader
	// hint; Op is the RPC and Guard says what was decided. Guard events come
	// in the order the guard made the checks.
	EventGuard
)

// String returns the kind's name as used in histories.
func (k EventKind) String() string {
	switch k {
	case EventInvoke:
		return "invoke"
	case EventOK:
		return "ok"
	case EventFail:
		return "fail"
	case EventUnknown:
		return "unknown"
	case EventGuard:
		return "guard"
	}
	return "invalid"
}

// Event is one entry of a Worker's call history.
type Event struct {
	Kind EventKind
	// Op is the RPC: "Claim", "Report", "Steal", "OwnedItems", "Heartbeat"
	// or "Deregister".
	Op string
	// Call pairs an invocation with its completion; unique per Worker and
	// increasing in invocation order. Zero for EventGuard.
	Call uint64
	// Req and Resp are the request and (for EventOK) the reply.
	Req, Resp proto.Message
	// Err is the call's error for EventFail and EventUnknown.
	Err error
	// Guard is the epoch guard's decision for EventGuard.
	Guard coordclient.GuardEvent
}

// Outcome classifies a failed call's error: EventFail when the coordinator
// certainly refused it (so it changed nothing), EventUnknown otherwise.
func Outcome(err error) EventKind {
	if errors.Is(err, coordclient.ErrNilRequest) {
		return EventFail
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.AlreadyExists,
		codes.PermissionDenied, codes.Unauthenticated, codes.OutOfRange, codes.Unimplemented:
		return EventFail
	}
	return EventUnknown
}

// Observer receives measurements of a Worker's work that its Stats
// counters cannot carry: durations and drain events. Its methods are called
// synchronously on the worker's goroutines: they must be fast, must not
// block, must be safe for concurrent use and must not call the Worker.
type Observer interface {
	// ObserveCall reports one call to the coordinator (op as in Event.Op,
	// plus "Register") that took took and failed with err (nil: it
	// succeeded), retries by the client included.
	ObserveCall(op string, took time.Duration, err error)
	// ObserveItem reports that the backend finished an item after took with
	// the outcome the worker will report (a nack when a drain cancelled it).
	ObserveItem(took time.Duration, outcome rolloutv1.Outcome)
	// ObserveDrainStart reports that a drain began on notice n.
	ObserveDrainStart(n Notice)
	// ObserveDrain reports the drain that ended Run.
	ObserveDrain(rep DrainReport)
}

// record makes one coordinator call and, when a Recorder is configured,
// records its invocation and completion; an Observer gets its duration.
func record[Req, Resp proto.Message](ctx context.Context, w *Worker, op string,
	call func(context.Context, Req) (Resp, error), req Req) (resp Resp, err error) {
	defer func() {
		if errors.Is(err, coordclient.ErrRevoked) {
			w.noteRevoked(err)
		}
	}()
	if obs := w.cfg.Observer; obs != nil {
		start := time.Now()
		defer func() { obs.ObserveCall(op, time.Since(start), err) }()
	}
	rec := w.cfg.Recorder
	if rec == nil {
		return call(ctx, req)
	}
	id := w.calls.Add(1)
	rec.Record(Event{Kind: EventInvoke, Op: op, Call: id, Req: req})
	resp, err = call(ctx, req)
	if err != nil {
		rec.Record(Event{Kind: Outcome(err), Op: op, Call: id, Req: req, Err: err})
	} else {
		rec.Record(Event{Kind: EventOK, Op: op, Call: id, Req: req, Resp: resp})
	}
	return resp, err
}
