package worker

import (
	"context"
	"time"
)

// Providers of a Notice.
const (
	// ProviderAWS is an EC2 spot instance-action notice.
	ProviderAWS = "aws"
	// ProviderGCP is a Compute Engine preemption notice.
	ProviderGCP = "gcp"
	// ProviderSignal is SIGTERM or SIGINT (Kubernetes, systemd, an operator).
	ProviderSignal = "signal"
	// ProviderShutdown is the end of Run's context.
	ProviderShutdown = "shutdown"
)

// Notice tells a Worker that its machine is going away: it must drain by
// Deadline.
type Notice struct {
	// Provider names the source: ProviderAWS, ProviderGCP, ProviderSignal,
	// ProviderShutdown, or an implementation's own name.
	Provider string
	// Reason is a human-readable account of the notice, for logs.
	Reason string
	// Received is when the notice was observed. Zero means when the Worker
	// received it.
	Received time.Time
	// Terminate is when the provider takes the machine away, as far as the
	// provider says; zero when it does not say.
	Terminate time.Time
	// Deadline is when the drain must be over: the worker has then nacked
	// what it holds, reported what it finished, and deregistered. It is
	// earlier than Terminate, leaving a margin. Zero means Received plus the
	// Worker's DrainTimeout.
	Deadline time.Time
	// Force asks for an immediate exit (a second SIGTERM): in-flight items
	// are cancelled and nacked at once.
	Force bool
}

// ComputeHint delivers preemption notices of the machine a Worker runs on.
// Implementations (in package hint: AWS, GCP, signals) must not block in
// Watch beyond setting up.
type ComputeHint interface {
	// Watch starts watching and returns the channel notices arrive on. The
	// channel is closed when ctx ends or when the hint will deliver no
	// more notices. An error means the hint could not start (bad
	// configuration); transient failures while watching are retried by the
	// implementation, not reported here.
	Watch(ctx context.Context) (<-chan Notice, error)
}

// ItemRef names one ownership of an item.
type ItemRef struct {
	Run     string
	ID      []byte
	Index   uint64
	Attempt uint64
	// Count is, for the nack of a range's rest, how many indexes from
	// Index it gave back (0 for a plain item).
	Count uint64
}

// DrainReport describes how a Worker drained when Run ended.
type DrainReport struct {
	// Notice is the notice that started the drain (Provider
	// ProviderShutdown when Run's context ended first).
	Notice Notice
	// Started is when the drain began and Ended when Run was about to
	// return (after deregistration).
	Started, Ended time.Time
	// Deadline is the deadline the drain worked to: the notice's, or an
	// earlier one from a later notice or from Run's context ending.
	Deadline time.Time
	// Forced is true when a notice asked for an immediate exit.
	Forced bool
	// Unstarted counts held items that had not started: nacked at once.
	Unstarted int
	// InFlight counts items executing when the drain began; Cancelled
	// counts those the drain cancelled because their expected remaining time
	// did not fit the budget, the cut-off came or the exit was forced (their
	// outcome is a nack unless the backend still returned a result).
	InFlight, Cancelled int
	// Nacked lists the nacks the ledger applied during the drain: those
	// items are Pending again, for other workers.
	Nacked []ItemRef
	// Unreported counts outcomes the ledger never confirmed before the
	// deadline; deregistration re-pends those items.
	Unreported int
	// Deregistered is true when the coordinator confirmed deregistration.
	Deregistered bool
}

// WithinDeadline reports whether the drain ended by its deadline.
func (r DrainReport) WithinDeadline() bool { return !r.Ended.After(r.Deadline) }
