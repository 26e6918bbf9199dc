package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// OpenAI's answer to a batch past the organisation's enqueued limit: its
// error code (what clients written for OpenAI test for) and the advice its
// message ends with. The gateway's limit counts requests (the ledger's
// items), so its error type is "requests", as OpenAI types a 429 by the
// unit that ran out.
const (
	codeQueueFull = "token_limit_exceeded"
	typeRequests  = "requests"
	queueAdvice   = "Please try again once some in_progress batches have been completed."
)

// quota is a cluster's refusal of a submit for its tenant's queued quota.
type quota struct {
	// Detail is the cluster's own words (they name the tenant, the limit
	// and what is in use).
	Detail string
	// Tenant and Violation are the QuotaFailure detail's, when the
	// refusal carries one: the tenant (its subject "tenant:NAME") and the
	// limit, what is queued and what the submit adds.
	Tenant, Violation string
}

// quotaRefusal reports whether err is the cluster refusing a submit
// because the run's tenant would pass its max_queued quota: a
// RESOURCE_EXHAUSTED that carries a QuotaFailure detail, or whose message
// names the tenant's quota. Other RESOURCE_EXHAUSTED refusals (a busy
// replica's in-flight budget, a full ledger, a caller past its rate) are
// the cluster's, not the tenant's, and stay 503s.
func quotaRefusal(err error) (quota, bool) {
	// The status itself, not FromError's (whose message, for a wrapped
	// status, is the whole chain's text).
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return quota{}, false
	}
	st := se.GRPCStatus()
	if st.Code() != codes.ResourceExhausted {
		return quota{}, false
	}
	msg := st.Message()
	for _, d := range st.Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok && len(qf.GetViolations()) > 0 {
			v := qf.GetViolations()[0]
			q := quota{Detail: msg, Violation: v.GetDescription()}
			q.Tenant, _ = strings.CutPrefix(v.GetSubject(), "tenant:")
			return q, true
		}
	}
	lower := strings.ToLower(msg)
	if strings.Contains(lower, "tenant") && (strings.Contains(lower, "max_queued") || strings.Contains(lower, "max-queued") ||
		strings.Contains(lower, "quota") || strings.Contains(lower, "queued")) {
		return quota{Detail: msg}, true
	}
	return quota{}, false
}

// rateLimited is the 429 of a batch past its tenant's queued quota, in
// OpenAI's error shape: {"error": {"message", "type": "requests", "param":
// null, "code": "token_limit_exceeded"}}. The message names the tenant,
// the limit and what is queued from the refusal's QuotaFailure detail, or
// quotes the cluster's words where it has none.
func rateLimited(q quota) *apiError {
	what := strings.TrimRight(q.Detail, ". ")
	if q.Tenant != "" && q.Violation != "" {
		what = fmt.Sprintf("for tenant %q: %s", q.Tenant, strings.TrimRight(q.Violation, ". "))
	} else {
		what = "(" + what + ")"
	}
	return &apiError{Status: http.StatusTooManyRequests, Type: typeRequests, Code: codeQueueFull,
		Message: fmt.Sprintf("Enqueued request limit reached %s. %s", what, queueAdvice)}
}
