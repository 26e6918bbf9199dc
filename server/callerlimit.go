package server

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
)

// RetryAfterHeader is the response header (gRPC metadata) in which a
// refusal by the per-caller limits says how many seconds to wait; the
// status also carries an errdetails.RetryInfo with the exact delay.
const RetryAfterHeader = "retry-after"

// maxIdleCallers bounds the callers whose buckets are kept; past it, the
// buckets of callers that are back to a full bucket and hold no long-poll
// are dropped (they lose nothing: a new bucket starts full).
const maxIdleCallers = 4096

// mutatingMethods are the client and admin calls that change the ledger or
// the membership, limited per caller by Config.MutationRate. Worker calls
// (claims, reports, heartbeats) are not: their rate is bounded by the
// items a worker holds, and a worker must never miss a heartbeat.
var mutatingMethods = map[string]bool{
	rolloutv1.Coordinator_SubmitItems_FullMethodName:       true,
	rolloutv1.Coordinator_SubmitRanges_FullMethodName:      true,
	rolloutv1.Coordinator_CancelRun_FullMethodName:         true,
	rolloutv1.Coordinator_DeleteRun_FullMethodName:         true,
	rolloutv1.Coordinator_Join_FullMethodName:              true,
	rolloutv1.Coordinator_RemoveMember_FullMethodName:      true,
	rolloutv1.Coordinator_EvictWorker_FullMethodName:       true,
	rolloutv1.Coordinator_RevokeCertificate_FullMethodName: true,
	// Renew changes nothing, but signs with the CA key: bounded the same way.
	rolloutv1.Coordinator_Renew_FullMethodName: true,
}

// callerLimits bounds what one authenticated caller (one certificate name
// and role) may ask of a replica, after authentication and before
// admission (see Config.MutationRate, Config.MaxLongPollsPerCaller and
// Config.MaxClaimPollsPerCaller):
//
//   - mutating calls: a token bucket of MutationRate calls a second and
//     MutationBurst calls of burst per caller; a call without a token is
//     refused with RESOURCE_EXHAUSTED, changing nothing, with the wait
//     before a token is free in a RetryInfo detail and in the retry-after
//     header (whole seconds, rounded up). coordclient waits that long and
//     retries.
//   - long-polls (an Events call with wait_ms > 0): at most
//     MaxLongPollsPerCaller at once per caller; one more is refused the
//     same way (retry after a second).
//   - claim long-polls (a Claim with wait_ms > 0): at most
//     MaxClaimPollsPerCaller at once per caller, counted apart from the
//     Events long-polls; one more is refused the same way (retry after a
//     second), before it proposes anything, so it claims nothing. A worker
//     claims with one long-poll at a time; the cap stops a worker
//     certificate (or a copy of it) from pinning a replica's goroutines
//     and proposals with thousands of waiting claims.
//
// A caller without a verified certificate (a replica running Insecure) is
// not limited: there is no identity to charge; the connection limits still
// apply. grpc.MaxConcurrentStreams bounds the calls of one connection.
type callerLimits struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	polls   pollPool // Events long-polls
	claims  pollPool // Claim long-polls
}

// pollPool counts the long-polls each caller holds, up to max (0: no
// limit). Its counts are guarded by callerLimits.mu.
type pollPool struct {
	max   int
	count map[string]int
}

func newCallerLimits(c Config) *callerLimits {
	return &callerLimits{
		rate: rate.Limit(c.MutationRate), burst: c.MutationBurst,
		buckets: make(map[string]*rate.Limiter),
		polls:   pollPool{max: c.MaxLongPollsPerCaller, count: make(map[string]int)},
		claims:  pollPool{max: c.MaxClaimPollsPerCaller, count: make(map[string]int)},
	}
}

// callerKey names the caller of ctx, or "" for one without a verified
// certificate.
func callerKey(ctx context.Context) string {
	id, err := mtls.PeerIdentity(ctx)
	if err != nil && id.Name == "" {
		return ""
	}
	return string(id.Role) + ":" + id.Name
}

// allow takes a token of caller's bucket at now, or returns how long until
// one is free.
func (l *callerLimits) allow(caller string, now time.Time) (ok bool, wait time.Duration) {
	if l.rate <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[caller]
	if b == nil {
		if len(l.buckets) >= maxIdleCallers {
			l.dropIdleLocked(now)
		}
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[caller] = b
	}
	if b.AllowN(now, 1) {
		return true, 0
	}
	r := b.ReserveN(now, 1)
	wait = r.DelayFrom(now)
	r.CancelAt(now)
	if !r.OK() || wait == rate.InfDuration {
		wait = time.Second
	}
	return false, wait
}

// dropIdleLocked forgets the callers whose bucket is full again.
func (l *callerLimits) dropIdleLocked(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, k)
		}
	}
}

// startPoll counts a long-poll of caller in pool (&l.polls or &l.claims),
// or refuses it when the caller holds pool.max already; done ends it (call
// it once).
func (l *callerLimits) startPoll(pool *pollPool, caller string) (done func(), ok bool) {
	if pool.max <= 0 {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if pool.count[caller] >= pool.max {
		return nil, false
	}
	pool.count[caller]++
	return func() {
		l.mu.Lock()
		if pool.count[caller]--; pool.count[caller] <= 0 {
			delete(pool.count, caller)
		}
		l.mu.Unlock()
	}, true
}

// tooMany is the RESOURCE_EXHAUSTED refusal of a caller, telling it to wait
// wait; it also sets the retry-after header on ctx's call.
func tooMany(ctx context.Context, wait time.Duration, format string, args ...any) error {
	secs := int64(math.Ceil(wait.Seconds()))
	_ = grpc.SetHeader(ctx, metadata.Pairs(RetryAfterHeader, strconv.FormatInt(max(secs, 1), 10)))
	st := status.New(codes.ResourceExhausted, fmt.Sprintf(format, args...)+fmt.Sprintf("; nothing was done, retry after %s", wait.Round(time.Millisecond)))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
		st = d
	}
	return st.Err()
}

// limitCaller is the unary server interceptor of callerLimits.
func (s *Server) limitCaller(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	caller := callerKey(ctx)
	if caller == "" {
		return handler(ctx, req)
	}
	l := s.callers
	if mutatingMethods[info.FullMethod] {
		if ok, wait := l.allow(caller, time.Now()); !ok {
			return nil, tooMany(ctx, wait, "rate limit: caller %s may make %g mutating calls a second (burst %d)", caller, float64(l.rate), l.burst)
		}
	}
	if e, ok := req.(*rolloutv1.EventsRequest); ok && info.FullMethod == rolloutv1.Coordinator_Events_FullMethodName && e.GetWaitMs() > 0 {
		done, ok := l.startPoll(&l.polls, caller)
		if !ok {
			return nil, tooMany(ctx, time.Second, "caller %s already holds %d long-polls (Events with wait_ms), the most allowed", caller, l.polls.max)
		}
		defer done()
	}
	if c, ok := req.(*rolloutv1.ClaimRequest); ok && info.FullMethod == rolloutv1.Coordinator_Claim_FullMethodName && c.GetWaitMs() > 0 {
		done, ok := l.startPoll(&l.claims, caller)
		if !ok {
			return nil, tooMany(ctx, time.Second, "caller %s already holds %d claim long-polls (Claim with wait_ms), the most allowed", caller, l.claims.max)
		}
		defer done()
	}
	return handler(ctx, req)
}
