package rolloutv1

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo details the
// coordinator attaches to errors a client must tell apart by more than their
// code.
const ErrorDomain = "rollout.v1"

// ReasonWorkerNotRegistered is the ErrorInfo reason of the FAILED_PRECONDITION
// a Claim, Steal or Heartbeat gets from a worker the ledger does not hold
// (never registered, deregistered, evicted, or removed after it expired).
// The worker must call Register, then reconcile with OwnedItems.
const ReasonWorkerNotRegistered = "WORKER_NOT_REGISTERED"

// NotRegisteredError is the FAILED_PRECONDITION status a Claim, Steal or
// Heartbeat from an unregistered worker gets: its message tells the worker
// to Register, and its ErrorInfo carries ReasonWorkerNotRegistered.
func NotRegisteredError(workerID string) error {
	msg := fmt.Sprintf("worker %q is not registered; call Register first", workerID)
	st, err := status.New(codes.FailedPrecondition, msg).WithDetails(&errdetails.ErrorInfo{
		Reason: ReasonWorkerNotRegistered, Domain: ErrorDomain, Metadata: map[string]string{"worker_id": workerID}})
	if err != nil {
		return status.Error(codes.FailedPrecondition, msg)
	}
	return st.Err()
}

// IsNotRegistered reports whether err (or an error it wraps) is the status
// NotRegisteredError makes.
func IsNotRegistered(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return false
	}
	st := se.GRPCStatus()
	if st.Code() != codes.FailedPrecondition {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain && info.GetReason() == ReasonWorkerNotRegistered {
			return true
		}
	}
	return false
}
