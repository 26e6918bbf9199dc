// Package coordclient is the client of the rollout coordinator's gRPC
// service, used by everyone who talks to a coordinator: workers, the rollout
// CLI, a replica joining its cluster, jepsen-lite and the tests.
//
// A Client follows the Raft leader: it sends each call to the replica it
// believes leads, switches to the leader named in an UNAVAILABLE reply's hint,
// rotates through the configured addresses when a replica is unreachable or
// does not know the leader, and retries with jittered exponential backoff
// until the caller's context ends. Errors that retrying cannot fix
// (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, ...) are returned at
// once; their gRPC status survives wrapping (status.Code works on them). A
// RESOURCE_EXHAUSTED refusal that carries a RetryInfo (a replica's
// per-caller rate limit) is waited out, as long as it asks (at most 30 s),
// and retried at the same replica until the caller's context ends.
//
// Every reply, and every leader hint, passes the client's EpochGuard: a reply
// decided in a term older than the newest term the client has seen (or one
// without a term) is rejected, counted and discarded, and the call is retried
// elsewhere. This holds for long-poll Claim answers that arrive late: items in
// a rejected reply never reach the caller.
package coordclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
)

var (
	// ErrNoAddrs is returned when a Config lists no coordinator address.
	ErrNoAddrs = errors.New("coordclient: no coordinator addresses")
	// ErrInvalidConfig is wrapped by every other Config.Validate error.
	ErrInvalidConfig = errors.New("coordclient: invalid config")
	// ErrStaleTerm is returned by EpochGuard.Observe (and wrapped in call
	// errors) for a reply whose term is older than the highest seen, or
	// that carries no term.
	ErrStaleTerm = errors.New("coordclient: reply from a stale term")
	// ErrClosed is returned by calls on a closed Client.
	ErrClosed = errors.New("coordclient: client closed")
	// ErrNilRequest is returned when a call is given a nil request.
	ErrNilRequest = errors.New("coordclient: nil request")
	// ErrBadAddr is returned by Cluster for an address that is not host:port.
	ErrBadAddr = errors.New("coordclient: bad address")
	// ErrNotRegistered is wrapped (with the FAILED_PRECONDITION status) in
	// the error of a Claim, Steal or Heartbeat from a worker the coordinator
	// does not hold: it never registered, or it was evicted or expired. The
	// worker must call Register again and reconcile with OwnedItems.
	ErrNotRegistered = errors.New("coordclient: worker is not registered")
	// ErrRevoked is wrapped (with the PERMISSION_DENIED status) in the
	// error of any call made with a revoked certificate: the replica said
	// so, naming the revocation (rolloutv1.RevokedOf reads who, when and
	// why). It is final: the call is not retried, and no later call will
	// succeed with the same certificate.
	ErrRevoked = errors.New("coordclient: this client's certificate is revoked")
)

// RevokedOf returns the revocation a call's error reports (see ErrRevoked).
func RevokedOf(err error) (rolloutv1.Revoked, bool) { return rolloutv1.RevokedOf(err) }

// finalError wraps the error of a call that must not be retried: a
// revocation also wraps ErrRevoked, an unregistered worker ErrNotRegistered.
func finalError(method string, err error) error {
	if rev, ok := rolloutv1.RevokedOf(err); ok {
		return fmt.Errorf("coordclient: %s: %w: %s: %w", method, ErrRevoked, rev, err)
	}
	if rolloutv1.IsNotRegistered(err) {
		return fmt.Errorf("coordclient: %s: %w: %w", method, ErrNotRegistered, err)
	}
	return fmt.Errorf("coordclient: %s: %w", method, err)
}

// maxHintHops is how many leader hints a call follows back to back before it
// backs off (two replicas pointing at each other must not spin).
const maxHintHops = 3

// Client is a leader-following, epoch-guarded coordinator client. It is safe
// for concurrent use.
type Client struct {
	cfg   Config
	log   hclog.Logger
	creds credentials.TransportCredentials
	guard *EpochGuard

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	leader string // address believed to lead
	// leaderTerm is the term of the reply or hint that named leader; an
	// older one does not override it.
	leaderTerm uint64
	next       int // rotation position in cfg.Addrs
	closed     bool
	termFns    []func(old, new uint64)
	guardFns   []func(GuardEvent)

	// termMu serialises guard observations with their term-change
	// callbacks so that callbacks see terms in increasing order.
	termMu sync.Mutex

	claimsInDoubt atomic.Uint64
}

// New validates cfg and returns a Client. Connections are created lazily
// (grpc.NewClient) the first time an address is used.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Addrs = append([]string(nil), cfg.Addrs...)
	var creds credentials.TransportCredentials
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS.Clone())
	} else {
		creds = insecure.NewCredentials()
	}
	return &Client{
		cfg:    cfg,
		log:    cfg.Logger.Named("coordclient"),
		creds:  creds,
		guard:  NewEpochGuard(),
		conns:  make(map[string]*grpc.ClientConn),
		leader: cfg.Addrs[0],
	}, nil
}

// Close closes every connection. Calls made after Close fail with ErrClosed.
// Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for addr, cc := range c.conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("coordclient: closing %s: %w", addr, err))
		}
	}
	c.conns = nil
	return errors.Join(errs...)
}

// Guard returns the client's epoch guard.
func (c *Client) Guard() *EpochGuard {
	return c.guard
}

// Leader returns the address currently believed to be the leader. It is a
// guess: it changes when a call succeeds elsewhere, follows a hint or
// rotates away from an unreachable replica.
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// OnTermChange registers fn to be called whenever the highest term seen
// grows (including the first term seen, with old == 0). Calls are
// synchronous, on the goroutine that received the reply, and in increasing
// term order; fn must be fast and must not call the Client.
func (c *Client) OnTermChange(fn func(old, new uint64)) {
	if fn == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.termFns = append(c.termFns, fn)
}

// GuardEvent is one term check made by the client's epoch guard: a reply's
// header or a leader hint in an UNAVAILABLE error.
type GuardEvent struct {
	// Method is the RPC (for example "Claim") and Addr the replica that
	// answered.
	Method, Addr string
	// Hint is true when the term came from a leader hint rather than a reply.
	Hint bool
	// Term is the term the reply carried; Highest is the highest term the
	// guard had seen before this check.
	Term, Highest uint64
	// Rejected is true when the guard refused the reply.
	Rejected bool
}

// OnGuard registers fn to be called for every term check of the epoch
// guard, accepted or rejected. Calls are synchronous, on the goroutine that
// received the reply, serialised with each other and with OnTermChange
// callbacks, and in the order the guard made the checks; fn must be fast and
// must not call the Client. It is meant for history recording (jepsen-lite).
func (c *Client) OnGuard(fn func(GuardEvent)) {
	if fn == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.guardFns = append(c.guardFns, fn)
}

// ClaimsInDoubt returns how many Claim attempts ended without an accepted
// reply and without a replica's explicit "not leader" refusal: timeouts,
// connection errors and replies rejected by the epoch guard. Such an attempt
// may have claimed items that the caller never received; a worker that sees
// this counter grow should reconcile with OwnedItems.
func (c *Client) ClaimsInDoubt() uint64 {
	return c.claimsInDoubt.Load()
}

// SubmitItems adds a chunk of items to a run (creating it on first use).
func (c *Client) SubmitItems(ctx context.Context, req *rolloutv1.SubmitItemsRequest) (*rolloutv1.SubmitItemsResponse, error) {
	return call(ctx, c, "SubmitItems", req, 0, nil, rolloutv1.CoordinatorClient.SubmitItems)
}

// SubmitRanges adds input chunks (ranges) to a range run, creating it on
// first use (its spec must name a store). Resubmitting a chunk is
// idempotent, so a SubmitRanges may be retried safely; the counts are in
// items.
func (c *Client) SubmitRanges(ctx context.Context, req *rolloutv1.SubmitRangesRequest) (*rolloutv1.SubmitRangesResponse, error) {
	return call(ctx, c, "SubmitRanges", req, 0, nil, rolloutv1.CoordinatorClient.SubmitRanges)
}

// Claim long-polls for up to req.MaxItems items. Each attempt may last
// CallTimeout plus req.WaitMs. See ClaimsInDoubt for attempts whose outcome
// is unknown.
func (c *Client) Claim(ctx context.Context, req *rolloutv1.ClaimRequest) (*rolloutv1.ClaimResponse, error) {
	wait := time.Duration(req.GetWaitMs()) * time.Millisecond
	return call(ctx, c, "Claim", req, wait, &c.claimsInDoubt, rolloutv1.CoordinatorClient.Claim)
}

// Report completes, fails or nacks held items. Per-item outcomes are in the
// reply; completing is idempotent, so a Report may be retried safely.
func (c *Client) Report(ctx context.Context, req *rolloutv1.ReportRequest) (*rolloutv1.ReportResponse, error) {
	return call(ctx, c, "Report", req, 0, nil, rolloutv1.CoordinatorClient.Report)
}

// ReportRange reports progress on held ranges. Per-range outcomes are in
// the reply (a CAS miss is a result, not an error); an identical retry of an
// applied report is a duplicate, so a ReportRange may be retried safely.
func (c *Client) ReportRange(ctx context.Context, req *rolloutv1.ReportRangeRequest) (*rolloutv1.ReportRangeResponse, error) {
	return call(ctx, c, "ReportRange", req, 0, nil, rolloutv1.CoordinatorClient.ReportRange)
}

// Register registers the worker, or refreshes a registered one (its items
// stay its). A worker registers before it claims, steals or heartbeats.
func (c *Client) Register(ctx context.Context, req *rolloutv1.RegisterRequest) (*rolloutv1.RegisterResponse, error) {
	return call(ctx, c, "Register", req, 0, nil, rolloutv1.CoordinatorClient.Register)
}

// EvictWorker (admin) removes a worker: its Running items go back to
// Pending. An unknown worker is NOT_FOUND.
func (c *Client) EvictWorker(ctx context.Context, req *rolloutv1.EvictWorkerRequest) (*rolloutv1.EvictWorkerResponse, error) {
	return call(ctx, c, "EvictWorker", req, 0, nil, rolloutv1.CoordinatorClient.EvictWorker)
}

// RevokeCertificate (admin) adds a certificate, by name or serial, to the
// cluster's revocation list (AlreadyExists when it is on it already).
func (c *Client) RevokeCertificate(ctx context.Context, req *rolloutv1.RevokeCertificateRequest) (*rolloutv1.RevokeCertificateResponse, error) {
	return call(ctx, c, "RevokeCertificate", req, 0, nil, rolloutv1.CoordinatorClient.RevokeCertificate)
}

// Revocations (admin) lists the cluster's revocation list.
func (c *Client) Revocations(ctx context.Context, req *rolloutv1.RevocationsRequest) (*rolloutv1.RevocationsResponse, error) {
	return call(ctx, c, "Revocations", req, 0, nil, rolloutv1.CoordinatorClient.Revocations)
}

// CancelRun (client or admin) cancels a run: pending items are cancelled,
// running ones may finish. Idempotent.
func (c *Client) CancelRun(ctx context.Context, req *rolloutv1.CancelRunRequest) (*rolloutv1.CancelRunResponse, error) {
	return call(ctx, c, "CancelRun", req, 0, nil, rolloutv1.CoordinatorClient.CancelRun)
}

// DeleteRun (client or admin) removes a finished or cancelled run's records
// (FAILED_PRECONDITION for an active run); the reply names its store.
func (c *Client) DeleteRun(ctx context.Context, req *rolloutv1.DeleteRunRequest) (*rolloutv1.DeleteRunResponse, error) {
	return call(ctx, c, "DeleteRun", req, 0, nil, rolloutv1.CoordinatorClient.DeleteRun)
}

// SetTenant (admin) sets a tenant's weight and quotas.
func (c *Client) SetTenant(ctx context.Context, req *rolloutv1.SetTenantRequest) (*rolloutv1.SetTenantResponse, error) {
	return call(ctx, c, "SetTenant", req, 0, nil, rolloutv1.CoordinatorClient.SetTenant)
}

// ListTenants lists the tenants the ledger knows, with their work and
// share.
func (c *Client) ListTenants(ctx context.Context, req *rolloutv1.ListTenantsRequest) (*rolloutv1.ListTenantsResponse, error) {
	return call(ctx, c, "ListTenants", req, 0, nil, rolloutv1.CoordinatorClient.ListTenants)
}

// PeerRuns (federation: role peer, or admin naming a cluster) lists the
// counters of every run the calling cluster handed to this one.
func (c *Client) PeerRuns(ctx context.Context, req *rolloutv1.PeerRunsRequest) (*rolloutv1.PeerRunsResponse, error) {
	return call(ctx, c, "PeerRuns", req, 0, nil, rolloutv1.CoordinatorClient.PeerRuns)
}

// PeerInfo (federation: role peer, admin or replica) tells who the cluster
// is and which models its live workers serve.
func (c *Client) PeerInfo(ctx context.Context, req *rolloutv1.PeerInfoRequest) (*rolloutv1.PeerInfoResponse, error) {
	return call(ctx, c, "PeerInfo", req, 0, nil, rolloutv1.CoordinatorClient.PeerInfo)
}

// Heartbeat refreshes a registered worker; the reply lists held items the
// worker has lost. An unregistered worker gets an error wrapping
// ErrNotRegistered.
func (c *Client) Heartbeat(ctx context.Context, req *rolloutv1.HeartbeatRequest) (*rolloutv1.HeartbeatResponse, error) {
	return call(ctx, c, "Heartbeat", req, 0, nil, rolloutv1.CoordinatorClient.Heartbeat)
}

// Deregister removes a worker; its Running items go back to Pending.
func (c *Client) Deregister(ctx context.Context, req *rolloutv1.DeregisterRequest) (*rolloutv1.DeregisterResponse, error) {
	return call(ctx, c, "Deregister", req, 0, nil, rolloutv1.CoordinatorClient.Deregister)
}

// OwnedItems lists the items the ledger says the worker owns.
func (c *Client) OwnedItems(ctx context.Context, req *rolloutv1.OwnedItemsRequest) (*rolloutv1.OwnedItemsResponse, error) {
	return call(ctx, c, "OwnedItems", req, 0, nil, rolloutv1.CoordinatorClient.OwnedItems)
}

// Steal asks the leader to move items from the busiest worker to the caller.
func (c *Client) Steal(ctx context.Context, req *rolloutv1.StealRequest) (*rolloutv1.StealResponse, error) {
	return call(ctx, c, "Steal", req, 0, nil, rolloutv1.CoordinatorClient.Steal)
}

// RunStatus returns counters for one run or all runs.
func (c *Client) RunStatus(ctx context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	return call(ctx, c, "RunStatus", req, 0, nil, rolloutv1.CoordinatorClient.RunStatus)
}

// Results pages through a run's items in input-index order.
func (c *Client) Results(ctx context.Context, req *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error) {
	return call(ctx, c, "Results", req, 0, nil, rolloutv1.CoordinatorClient.Results)
}

// Events pages through the ledger's event history after req.AfterSeq,
// long-polling up to req.WaitMs for new events when there are none (each
// attempt may last CallTimeout plus req.WaitMs). Like every call it follows
// the leader, so a long-poll cut short by a leader change goes on at the
// new leader.
func (c *Client) Events(ctx context.Context, req *rolloutv1.EventsRequest) (*rolloutv1.EventsResponse, error) {
	wait := time.Duration(req.GetWaitMs()) * time.Millisecond
	return call(ctx, c, "Events", req, wait, nil, rolloutv1.CoordinatorClient.Events)
}

// Join adds a replica as a voter.
func (c *Client) Join(ctx context.Context, req *rolloutv1.JoinRequest) (*rolloutv1.JoinResponse, error) {
	return call(ctx, c, "Join", req, 0, nil, rolloutv1.CoordinatorClient.Join)
}

// RemoveMember removes a replica.
func (c *Client) RemoveMember(ctx context.Context, req *rolloutv1.RemoveMemberRequest) (*rolloutv1.RemoveMemberResponse, error) {
	return call(ctx, c, "RemoveMember", req, 0, nil, rolloutv1.CoordinatorClient.RemoveMember)
}

// Cluster asks one replica for its view of the replica set. With an addr it
// asks that replica: a single attempt bounded by CallTimeout, following no
// hint. With addr "" it asks the cluster as every call does: the believed
// leader first, then the other addresses, retrying an unreachable replica
// (with Config.OnRetry consulted) until one answers or ctx ends; any
// replica's answer will do, leader or not. The reply is that replica's local
// view, which may lag; it does not pass through the epoch guard.
func (c *Client) Cluster(ctx context.Context, addr string) (*rolloutv1.ClusterResponse, error) {
	if addr == "" {
		return callAs(ctx, c, "Cluster", &rolloutv1.ClusterRequest{}, 0, nil, true, rolloutv1.CoordinatorClient.Cluster)
	}
	if err := validAddr(addr); err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrBadAddr, addr, err)
	}
	cc, err := c.conn(addr)
	if err != nil {
		return nil, fmt.Errorf("coordclient: Cluster %s: %w", addr, err)
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	resp, err := rolloutv1.NewCoordinatorClient(cc).Cluster(actx, &rolloutv1.ClusterRequest{})
	if err != nil {
		return nil, finalError("Cluster "+addr, err)
	}
	// A Cluster reply is one replica's local view, which may lag by design
	// (that is what the command shows); it decides nothing, so it does not
	// pass the epoch guard and does not raise the highest term seen.
	return resp, nil
}

// reply is what every coordinator response has in common.
type reply interface {
	proto.Message
	GetHeader() *rolloutv1.ReplyHeader
}

// rpcFunc is a generated CoordinatorClient method as a method expression.
type rpcFunc[Req, Resp any] func(rolloutv1.CoordinatorClient, context.Context, Req, ...grpc.CallOption) (Resp, error)

// call runs rpc with leader following, the epoch guard and retries; see the
// package comment. extra lengthens each attempt's deadline (Claim's wait);
// doubt, when not nil, counts attempts whose outcome is unknown.
func call[Req proto.Message, Resp reply](ctx context.Context, c *Client, method string, req Req,
	extra time.Duration, doubt *atomic.Uint64, rpc rpcFunc[Req, Resp]) (Resp, error) {
	return callAs(ctx, c, method, req, extra, doubt, false, rpc)
}

// callAs is call; view says the reply is one replica's local view, which
// any replica gives (Cluster): it is returned as it is, without passing the
// epoch guard or moving the leader guess.
func callAs[Req proto.Message, Resp reply](ctx context.Context, c *Client, method string, req Req,
	extra time.Duration, doubt *atomic.Uint64, view bool, rpc rpcFunc[Req, Resp]) (Resp, error) {
	var zero Resp
	if !req.ProtoReflect().IsValid() {
		return zero, fmt.Errorf("coordclient: %s: %w", method, ErrNilRequest)
	}
	var lastErr error
	failures, hops := 0, 0
	for {
		if err := ctx.Err(); err != nil {
			if lastErr != nil {
				return zero, fmt.Errorf("coordclient: %s: %w (last attempt: %v)", method, err, lastErr)
			}
			return zero, fmt.Errorf("coordclient: %s: %w", method, err)
		}
		addr := c.target()
		cc, err := c.conn(addr)
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return zero, fmt.Errorf("coordclient: %s: %w", method, err)
			}
			lastErr = fmt.Errorf("%s: %w", addr, err)
			c.rotate(addr)
		} else {
			actx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout+extra)
			pd, bounded := ctx.Deadline()
			ad, _ := actx.Deadline()
			bounded = bounded && pd.Equal(ad) // the caller's deadline bounds this attempt
			resp, err := rpc(rolloutv1.NewCoordinatorClient(cc), actx, req)
			cancel()
			if err == nil && view {
				return resp, nil
			}
			if err == nil {
				oerr := c.observe(method, addr, false, resp.GetHeader())
				if oerr == nil {
					c.succeeded(addr, resp.GetHeader().GetTerm())
					return resp, nil
				}
				c.log.Warn("rejected reply", "method", method, "addr", addr, "error", oerr)
				lastErr = fmt.Errorf("%s: %w", addr, oerr)
				if doubt != nil {
					doubt.Add(1)
				}
				c.rotate(addr)
			} else {
				code := status.Code(err)
				if wait, ok := retryAfter(err); ok && ctx.Err() == nil {
					// The replica refused the caller's rate (nothing was
					// done): wait what it asks, then try again.
					c.log.Debug("rate limited; waiting", "method", method, "addr", addr, "wait", wait)
					lastErr = fmt.Errorf("%s: %w", addr, err)
					c.wait(ctx, wait)
					continue
				}
				callerEnded := ctx.Err() != nil ||
					(bounded && (code == codes.DeadlineExceeded || code == codes.Canceled) && time.Until(pd) < 50*time.Millisecond)
				follow, ferr := c.classify(method, addr, err, callerEnded, doubt)
				if ferr != nil {
					return zero, ferr
				}
				if !callerEnded || lastErr == nil {
					// (An attempt cut short by the caller's context says less
					// than the one before it.)
					lastErr = fmt.Errorf("%s: %w", addr, err)
				}
				if follow && hops < maxHintHops {
					hops++
					continue
				}
			}
		}
		hops = 0
		failures++
		if c.cfg.OnRetry != nil && ctx.Err() == nil {
			if herr := c.cfg.OnRetry(RetryEvent{Method: method, Addr: addr, Err: errors.Unwrap(lastErr), Failures: failures}); herr != nil {
				return zero, fmt.Errorf("coordclient: %s: %w", method, herr)
			}
		}
		c.sleep(ctx, failures) // if ctx ends, the loop head reports it
	}
}

// classify handles a failed attempt at addr. callerEnded says the caller's
// context (not the attempt's own deadline) ended the attempt. It returns
// follow=true when the error carried a leader hint that the client now
// follows, and a non-nil error when the call must fail at once.
func (c *Client) classify(method, addr string, err error, callerEnded bool, doubt *atomic.Uint64) (follow bool, _ error) {
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable:
		hint := hintOf(st)
		if hint == nil {
			if doubt != nil {
				doubt.Add(1)
			}
			if mtls.IsNotReplica(err) {
				// An impostor (or a --coord address that is not a
				// replica's): nothing was sent to it; try the others.
				c.log.Warn("refused a server that is not a replica", "method", method, "addr", addr, "error", err)
				c.rotate(addr)
				return false, nil
			}
			c.log.Debug("replica unavailable", "method", method, "addr", addr, "error", err)
			c.rotate(addr)
			return false, nil
		}
		if oerr := c.observe(method, addr, true, hint); oerr != nil {
			c.log.Warn("rejected leader hint", "method", method, "addr", addr, "error", oerr)
			c.rotate(addr)
			return false, nil
		}
		la := hint.GetLeaderAddr()
		if la == "" || la == addr || validAddr(la) != nil {
			c.log.Debug("no leader known", "method", method, "addr", addr, "hint", la)
			c.rotate(addr)
			return false, nil
		}
		c.follow(addr, la, hint.GetTerm())
		return true, nil
	case codes.DeadlineExceeded, codes.Canceled:
		if doubt != nil {
			doubt.Add(1)
		}
		if !callerEnded {
			c.log.Debug("attempt timed out", "method", method, "addr", addr, "error", err)
			c.rotate(addr)
		}
		return false, nil
	default:
		return false, finalError(method, err)
	}
}

// hintOf returns the ReplyHeader in st's details, or nil.
func hintOf(st *status.Status) *rolloutv1.ReplyHeader {
	for _, d := range st.Details() {
		if h, ok := d.(*rolloutv1.ReplyHeader); ok {
			return h
		}
	}
	return nil
}

// observe passes a header (of a reply from addr to method, or a leader hint)
// through the guard and runs the guard and term-change callbacks.
func (c *Client) observe(method, addr string, hint bool, h *rolloutv1.ReplyHeader) error {
	c.termMu.Lock()
	defer c.termMu.Unlock()
	old, cur, err := c.guard.observe(h.GetTerm())
	c.mu.Lock()
	gfns, tfns := c.guardFns, c.termFns
	c.mu.Unlock()
	for _, fn := range gfns {
		fn(GuardEvent{Method: method, Addr: addr, Hint: hint, Term: h.GetTerm(), Highest: old, Rejected: err != nil})
	}
	if err != nil {
		return err
	}
	if cur > old {
		for _, fn := range tfns {
			fn(old, cur)
		}
	}
	return nil
}

// target returns the address the next attempt goes to.
func (c *Client) target() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// rotate moves the leader guess away from addr to the next configured
// address, unless another call already moved it.
func (c *Client) rotate(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader != addr {
		return
	}
	c.next = (c.next + 1) % len(c.cfg.Addrs)
	c.leader = c.cfg.Addrs[c.next]
}

// follow switches the leader guess to a hint given in term, unless a newer
// term already named the leader.
//
// A hint says the replica at to is up and leads: if the connection to it is
// waiting out a reconnect backoff from when it was down, it dials at once.
func (c *Client) follow(from, to string, term uint64) {
	c.mu.Lock()
	if term < c.leaderTerm {
		c.mu.Unlock()
		return
	}
	if c.leader != to {
		c.log.Info("following leader hint", "from", from, "to", to, "term", term)
	}
	c.leader, c.leaderTerm = to, term
	cc := c.conns[to]
	c.mu.Unlock()
	if cc != nil {
		cc.ResetConnectBackoff()
	}
}

// succeeded records that addr answered as leader in term (unless a newer
// term already named another leader: concurrent calls finish out of order).
func (c *Client) succeeded(addr string, term uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if term < c.leaderTerm {
		return
	}
	c.leader, c.leaderTerm = addr, term
}

// conn returns the (lazily created) connection to addr.
func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, append(c.cfg.dialOptions(), grpc.WithTransportCredentials(c.creds))...)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// maxRetryAfter caps the wait a replica's RetryInfo may ask for.
const maxRetryAfter = 30 * time.Second

// retryAfter returns the delay of a RESOURCE_EXHAUSTED refusal that carries
// an errdetails.RetryInfo (the replica's per-caller limits; see package
// server), capped at maxRetryAfter. Other errors, and a
// RESOURCE_EXHAUSTED without one (a full ledger, a busy in-flight budget),
// are not retried here.
func retryAfter(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return min(max(ri.GetRetryDelay().AsDuration(), time.Millisecond), maxRetryAfter), true
		}
	}
	return 0, false
}

// wait waits d or until ctx ends.
func (c *Client) wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// sleep waits the jittered backoff for the n-th consecutive failure, or
// until ctx ends.
func (c *Client) sleep(ctx context.Context, n int) {
	d := c.cfg.RetryMin
	for i := 1; i < n && d < c.cfg.RetryMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.RetryMax)
	if half := d / 2; half > 0 {
		d = half + rand.N(half+1)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
