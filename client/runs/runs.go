// Package runs is the client side of one run on a rollout cluster: submit
// JSONL input as a run (Submit) or items a program built, with
// dependencies and a run kind (SubmitItems), wait until it finishes (Wait),
// and read its items in index order (Results) or write them as output files
// (WriteFile, WriteDir). The CLI (submit, status, results, demo), the end-to-end tests
// and jepsen-lite's workload call it; it knows no flags and writes only
// where it is told (SubmitConfig.Invalid, the output files).
//
// Every function takes a Coordinator (*coordclient.Client implements it;
// the result readers need only its ResultsReader part), bounds each call to
// the cluster by a timeout (the client retries an unreachable or leaderless
// cluster within it), and returns a failed call as a *CallError naming what
// was attempted; an unknown run is an error matching ErrRunNotFound.
//
// For training runs (package batch/train's plans) it also reads the layout
// (TrainShape, DiscoverTrainShape), one step's result (ReadStep), every
// finished step (TrainSteps), and follows a run step by step as its reduce
// items complete (FollowTraining).
package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

var (
	// ErrRunNotFound: the cluster knows no run of that name.
	ErrRunNotFound = errors.New("run not found")
	// ErrInvalidConfig wraps every refusal of a SubmitConfig, WaitConfig
	// or ResultsConfig; nothing was sent.
	ErrInvalidConfig = errors.New("runs: invalid config")
	// ErrSubmitRefused: the cluster would refuse the submit (the caller's
	// certificate may not submit, or not for the tenant named, the run
	// belongs to another tenant, was cancelled, keeps its data in another
	// store, or holds other items at the input's indexes: another input,
	// model or sampling under the same run name). Submit finds out before
	// it uploads the input chunk concerned.
	ErrSubmitRefused = errors.New("submit refused")
	// ErrAmbiguousStore: Sweep cannot tell whether the store it was given
	// is the store of some runs of the ledger (their stores have other
	// identities but may share its bytes: a directory inside it or around
	// it, the same bucket through other parameters); it removed nothing.
	ErrAmbiguousStore = errors.New("cannot tell whether runs of the ledger keep their data in this store")
)

// DefaultTimeout bounds one call to the cluster (with its retries) when a
// config leaves Timeout zero.
const DefaultTimeout = 30 * time.Second

// ResultsReader is what Results, WriteFile and WriteDir need: one call
// that answers one page of a run's items.
type ResultsReader interface {
	Results(ctx context.Context, req *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error)
}

// Coordinator is what this package needs of a coordinator client.
type Coordinator interface {
	ResultsReader
	SubmitItems(ctx context.Context, req *rolloutv1.SubmitItemsRequest) (*rolloutv1.SubmitItemsResponse, error)
	RunStatus(ctx context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error)
	// Cluster asks one replica (addr, or the believed leader when "") for
	// its view; Submit reads the announced limits from it.
	Cluster(ctx context.Context, addr string) (*rolloutv1.ClusterResponse, error)
}

// CallError is a call to the cluster that failed: Op says what was
// attempted, Timeout bounded it, Err is the client's error. Callers that
// know more (a CLI naming its flags, TLS diagnosis) may re-describe it.
type CallError struct {
	Op      string
	Timeout time.Duration
	Err     error
}

func (e *CallError) Error() string {
	if errors.Is(e.Err, context.DeadlineExceeded) {
		return fmt.Sprintf("%s: no answer from the cluster within %v: %v", e.Op, e.Timeout, e.Err)
	}
	return e.Op + ": " + e.Err.Error()
}

func (e *CallError) Unwrap() error { return e.Err }

func callError(op string, timeout time.Duration, err error) error {
	return &CallError{Op: op, Timeout: timeout, Err: err}
}

// notFoundError says which run is unknown; it matches ErrRunNotFound and
// wraps the cluster's NOT_FOUND answer (status.Code sees it).
type notFoundError struct {
	run string
	err error
}

func newNotFound(run string, err error) error {
	if err == nil {
		err = status.Errorf(codes.NotFound, "run %q not found", run)
	}
	return &notFoundError{run: run, err: err}
}

func (e *notFoundError) Error() string        { return fmt.Sprintf("run %q not found", e.run) }
func (e *notFoundError) Is(target error) bool { return target == ErrRunNotFound }
func (e *notFoundError) Unwrap() error        { return e.err }

// isNotFound reports a gRPC NOT_FOUND (an unknown run).
func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }

// orDefault is d when t is zero.
func orDefault(t, d time.Duration) time.Duration {
	if t == 0 {
		return d
	}
	return t
}
