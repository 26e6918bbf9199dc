package rolloutv1

import (
	"errors"
	"fmt"
	"strings"
	"time"

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

// ReasonCertificateRevoked is the ErrorInfo reason of the PERMISSION_DENIED
// every call made with a revoked certificate gets: the replica completes
// the handshake (the gRPC port only) so that the holder is told that, and
// why, its certificate is revoked, and stops instead of retrying.
const ReasonCertificateRevoked = "CERTIFICATE_REVOKED"

// Revoked describes a revoked certificate as a refused caller is told it:
// the certificate's name, role and serial, and the revocation record's time,
// author and reason (each empty or zero where the ledger does not hold it).
type Revoked struct {
	Name, Role, Serial string
	RevokedAt          time.Time
	By, Reason         string
}

// String is one sentence naming the revocation, for logs and error messages.
func (r Revoked) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the certificate %q", r.Name)
	if r.Role != "" {
		fmt.Fprintf(&b, " (role %s", r.Role)
		if r.Serial != "" {
			fmt.Fprintf(&b, ", serial %s", r.Serial)
		}
		b.WriteString(")")
	} else if r.Serial != "" {
		fmt.Fprintf(&b, " (serial %s)", r.Serial)
	}
	b.WriteString(" is revoked")
	if r.By != "" {
		fmt.Fprintf(&b, " by %s", r.By)
	}
	if !r.RevokedAt.IsZero() {
		fmt.Fprintf(&b, " at %s", r.RevokedAt.UTC().Format(time.RFC3339))
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, ": %q", r.Reason)
	}
	return b.String()
}

// RevokedError is the PERMISSION_DENIED status a call of method made with
// the revoked certificate r gets; its ErrorInfo carries
// ReasonCertificateRevoked and r's fields (name, role, serial, revoked_at
// in RFC 3339, by, reason).
func RevokedError(method string, r Revoked) error {
	msg := fmt.Sprintf("%s: %s; this identity may no longer call the cluster (ask an admin for a new certificate)", method, r)
	md := map[string]string{"name": r.Name, "role": r.Role, "serial": r.Serial, "by": r.By, "reason": r.Reason}
	if !r.RevokedAt.IsZero() {
		md["revoked_at"] = r.RevokedAt.UTC().Format(time.RFC3339Nano)
	}
	st, err := status.New(codes.PermissionDenied, msg).WithDetails(&errdetails.ErrorInfo{
		Reason: ReasonCertificateRevoked, Domain: ErrorDomain, Metadata: md})
	if err != nil {
		return status.Error(codes.PermissionDenied, msg)
	}
	return st.Err()
}

// RevokedOf returns the revocation err (or an error it wraps) reports, when
// it is the status RevokedError makes.
func RevokedOf(err error) (Revoked, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return Revoked{}, false
	}
	st := se.GRPCStatus()
	if st.Code() != codes.PermissionDenied {
		return Revoked{}, false
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != ErrorDomain || info.GetReason() != ReasonCertificateRevoked {
			continue
		}
		md := info.GetMetadata()
		r := Revoked{Name: md["name"], Role: md["role"], Serial: md["serial"], By: md["by"], Reason: md["reason"]}
		if at, err := time.Parse(time.RFC3339Nano, md["revoked_at"]); err == nil {
			r.RevokedAt = at
		}
		return r, true
	}
	return Revoked{}, false
}
