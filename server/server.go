package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/server/liveness"
)

// Errors returned by New and Config.Validate.
var (
	// ErrInvalidConfig wraps every configuration problem; the message names the field.
	ErrInvalidConfig = errors.New("server: invalid config")
)

// Config configures the service of one replica.
type Config struct {
	// ReplicaID is this replica's Raft server id.
	ReplicaID string
	// ClusterName is the cluster's name (rollout-coord --cluster-name): the
	// prefix of the runs it hands to peers, and what PeerInfo answers.
	ClusterName string
	// Peers, when not nil, serves the peers file (rollout-coord --peers,
	// a *peers.Watcher): federation is on. Nil: inert (no connection, no
	// loop, no handle; federation.go).
	Peers PeerFiles
	// PeerPollInterval is how often the leader polls each peer (PeerInfo
	// and PeerRuns, one call each); zero selects DefaultPeerPollInterval.
	PeerPollInterval time.Duration
	// GRPCAddr is the address clients reach this replica at (advertised in
	// leader hints).
	GRPCAddr string
	// MaxClaimWait caps a Claim long-poll.
	MaxClaimWait time.Duration
	// MaxClaimItems caps how many items one Claim hands out.
	MaxClaimItems uint32
	// MaxSubmitItems caps the reports of one Report or ReportRange request
	// (a SubmitItems or SubmitRanges request is bounded by Limits).
	MaxSubmitItems int
	// Limits are the sizes this replica accepts from clients: SubmitItems
	// is checked against them (validate.Limits.CheckRequest) before anything
	// is proposed, Cluster announces them, GRPCOptions sets the message
	// limit from them.
	Limits validate.Limits
	// InflightBytes is the budget of request bytes the handlers hold at
	// once; AdmitWait is how long a large request waits for room in it
	// before it is refused with RESOURCE_EXHAUSTED (see admission).
	InflightBytes int64
	AdmitWait     time.Duration
	// MaxResultsPage caps one Results page.
	MaxResultsPage int
	// FailureTimeout is how long a worker may go without a heartbeat before
	// the leader's failure scan re-pends its items: the floor of the TTL,
	// which grows with the fleet (see HeartbeatBudget).
	FailureTimeout time.Duration
	// ScanInterval is how often the leader looks for expired workers.
	ScanInterval time.Duration
	// HeartbeatBudget is the heartbeats per second the leader plans for
	// across the whole fleet (liveness.Config.Budget): a fleet of n asks
	// each worker for a heartbeat every n/HeartbeatBudget seconds (when
	// over a second), and the TTL grows to twice that when it passes
	// FailureTimeout. 0: liveness.DefaultBudget.
	HeartbeatBudget float64
	// Insecure records that the replica serves without TLS (no caller is
	// authenticated); Cluster reports it.
	Insecure bool
	// PeerTLS is the client configuration the leader dials other replicas'
	// gRPC with (a replica certificate), to see whether a joining replica
	// has caught up and which voters it can reach; nil dials plaintext.
	PeerTLS *tls.Config
	// TLSSource, when set, is where the replica's TLS material comes from
	// (reloaded in place); Cluster reports its certificate's expiry.
	TLSSource *mtls.Source
	// Revocations, when set, is the revocation set this replica enforces:
	// RunRevocations keeps it equal to the ledger's list, the TLS
	// configuration refuses its certificates, and RPCs of a revoked
	// certificate on a live connection are refused.
	Revocations *mtls.Revocations
	// JoinCatchUpTimeout bounds how long a Join waits for the joining
	// replica, added as a non-voter, to catch up before it is promoted; a
	// replica that does not is removed again and the Join fails. Keep it
	// below the joiner's --join-timeout.
	JoinCatchUpTimeout time.Duration
	// MemberProbeTimeout bounds one question to another replica during a
	// membership change (is it reachable, has it caught up).
	MemberProbeTimeout time.Duration
	// Logger receives the service's logs.
	Logger hclog.Logger
	// Observer, when set, is told the ledger's result of every command this
	// replica proposed (for metrics). Nil observes nothing.
	Observer CommandObserver
	// CapacityItems and CapacityBytes bound what the ledger may hold: the
	// items (its records: an item, or a range of a range run), and the ledger's estimate of their bytes (fsm.Ledger.Usage).
	// A submit that would pass either is refused whole with
	// RESOURCE_EXHAUSTED before anything is proposed. Zero: no limit.
	CapacityItems uint64
	CapacityBytes uint64
	// MutationRate and MutationBurst are the token bucket of mutating calls
	// (SubmitItems, SubmitRanges, CancelRun, DeleteRun, Join, RemoveMember, EvictWorker;
	// Renew too, which signs with the CA key)
	// per caller certificate (see callerLimits); MutationRate 0: no limit.
	MutationRate  float64
	MutationBurst int
	// MaxLongPollsPerCaller bounds the long-polls (Events with wait_ms) one
	// caller certificate holds at once (0: no limit).
	MaxLongPollsPerCaller int
	// MaxClaimPollsPerCaller bounds the claim long-polls (Claim with
	// wait_ms) one caller certificate holds at once, apart from the Events
	// long-polls (0: no limit).
	MaxClaimPollsPerCaller int
	// MaxConcurrentStreams bounds the calls in flight on one connection
	// (grpc.MaxConcurrentStreams; GRPCOptions).
	MaxConcurrentStreams uint32
	// ConnectionTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface (grpc.ConnectionTimeout; GRPCOptions): a client that connects
	// and then says nothing (or sends a ClientHello byte by byte) is closed.
	ConnectionTimeout time.Duration
	// RenewCA, when set, is the CA (certificate and key) this replica signs
	// Renew requests with; nil: the replica holds no CA key and refuses
	// Renew with FailedPrecondition. RenewValidFor is the validity of the
	// certificates it signs (zero: DefaultRenewValidFor), never beyond the
	// CA's expiry.
	RenewCA       *mtls.CA
	RenewValidFor time.Duration
}

// CommandObserver receives the outcome of each command a replica proposed
// and the ledger applied: claims, reports, steals, expirations. It is called
// on the proposing RPC's goroutine once the entry applied, so it sees the
// commands of the leader it runs on. It must be fast and safe for
// concurrent use, and must neither modify c or r nor keep them.
type CommandObserver interface {
	ObserveCommand(c *fsmpb.Command, r fsm.Result)
}

// DefaultConfig returns a Config with the defaults; ReplicaID and GRPCAddr
// must still be set.
func DefaultConfig() Config {
	return Config{
		MaxClaimWait:   10 * time.Second,
		MaxClaimItems:  1024,
		MaxSubmitItems: 10000,
		Limits:         validate.DefaultLimits(),
		InflightBytes:  8 * validate.DefaultMaxMessageBytes,
		AdmitWait:      time.Second,
		MaxResultsPage: 5000,
		FailureTimeout: 10 * time.Second,
		ScanInterval:   500 * time.Millisecond,

		JoinCatchUpTimeout: 30 * time.Second,
		MemberProbeTimeout: 2 * time.Second,

		MutationRate:           100,
		MutationBurst:          200,
		MaxLongPollsPerCaller:  64,
		MaxClaimPollsPerCaller: 64,
		MaxConcurrentStreams:   1000,
		ConnectionTimeout:      5 * time.Second,
	}
}

// Validate reports the first invalid field, wrapped in ErrInvalidConfig.
func (c Config) Validate() error {
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: Limits: %w", ErrInvalidConfig, err)
	}
	switch {
	case c.ReplicaID == "":
		return fmt.Errorf("%w: ReplicaID is empty", ErrInvalidConfig)
	case c.GRPCAddr == "":
		return fmt.Errorf("%w: GRPCAddr is empty", ErrInvalidConfig)
	case c.MaxClaimWait <= 0:
		return fmt.Errorf("%w: MaxClaimWait must be > 0", ErrInvalidConfig)
	case c.MaxClaimItems == 0:
		return fmt.Errorf("%w: MaxClaimItems must be > 0", ErrInvalidConfig)
	case c.MaxSubmitItems <= 0:
		return fmt.Errorf("%w: MaxSubmitItems must be > 0", ErrInvalidConfig)
	case c.InflightBytes < int64(c.Limits.MaxMessageBytes):
		return fmt.Errorf("%w: InflightBytes (%d) must be at least Limits.MaxMessageBytes (%d)", ErrInvalidConfig, c.InflightBytes, c.Limits.MaxMessageBytes)
	case c.AdmitWait < 0:
		return fmt.Errorf("%w: AdmitWait must be >= 0", ErrInvalidConfig)
	case c.MaxResultsPage <= 0:
		return fmt.Errorf("%w: MaxResultsPage must be > 0", ErrInvalidConfig)
	case c.FailureTimeout <= 0:
		return fmt.Errorf("%w: FailureTimeout must be > 0", ErrInvalidConfig)
	case c.ScanInterval <= 0 || c.ScanInterval > c.FailureTimeout:
		return fmt.Errorf("%w: ScanInterval must be > 0 and <= FailureTimeout", ErrInvalidConfig)
	case c.HeartbeatBudget < 0 || math.IsNaN(c.HeartbeatBudget) || math.IsInf(c.HeartbeatBudget, 0):
		return fmt.Errorf("%w: HeartbeatBudget must be finite and >= 0", ErrInvalidConfig)
	case c.JoinCatchUpTimeout <= 0:
		return fmt.Errorf("%w: JoinCatchUpTimeout must be > 0", ErrInvalidConfig)
	case c.MemberProbeTimeout <= 0:
		return fmt.Errorf("%w: MemberProbeTimeout must be > 0", ErrInvalidConfig)
	case c.MutationRate < 0 || (c.MutationRate > 0 && c.MutationBurst <= 0):
		return fmt.Errorf("%w: MutationRate must be >= 0, and MutationBurst > 0 with a rate", ErrInvalidConfig)
	case c.MaxLongPollsPerCaller < 0:
		return fmt.Errorf("%w: MaxLongPollsPerCaller must be >= 0", ErrInvalidConfig)
	case c.MaxClaimPollsPerCaller < 0:
		return fmt.Errorf("%w: MaxClaimPollsPerCaller must be >= 0", ErrInvalidConfig)
	case c.ConnectionTimeout < 0:
		return fmt.Errorf("%w: ConnectionTimeout must be >= 0", ErrInvalidConfig)
	case c.RenewValidFor < 0:
		return fmt.Errorf("%w: RenewValidFor must be >= 0", ErrInvalidConfig)
	case c.PeerPollInterval < 0:
		return fmt.Errorf("%w: PeerPollInterval must be >= 0", ErrInvalidConfig)
	case c.Peers != nil && c.ClusterName == "":
		return fmt.Errorf("%w: Peers needs a ClusterName (--peers needs --cluster-name)", ErrInvalidConfig)
	}
	if c.ClusterName != "" {
		if err := mtls.CheckClusterName(c.ClusterName); err != nil {
			return fmt.Errorf("%w: ClusterName: %v", ErrInvalidConfig, err)
		}
	}
	return nil
}

// Node is what the service needs of its Raft replica; *raftnode.Node
// implements it.
type Node interface {
	ProposeBatch(ctx context.Context, cmds [][]byte) ([]raftnode.Applied, error)
	ServingTerm() (uint64, bool)
	WithLeadership(ctx context.Context) (context.Context, context.CancelFunc, uint64, error)
	VerifyLeader(ctx context.Context) (uint64, error)
	Leader() (id, raftAddr string)
	Stats() raftnode.Stats
	Members() ([]raftnode.Member, error)
	AddNonvoter(ctx context.Context, id, addr string) error
	PromoteNonvoter(ctx context.Context, id string) error
	RemoveServer(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context) error
	// HasState, Addr and Unreachable: see raftnode.Node (ReplicaInfo and
	// the dead-server cleanup).
	HasState() bool
	Addr() string
	Unreachable() map[string]time.Time
}

var _ Node = (*raftnode.Node)(nil)

// Server implements rolloutv1.CoordinatorServer over one replica.
type Server struct {
	rolloutv1.UnimplementedCoordinatorServer

	cfg     Config
	node    Node
	ledger  *fsm.Ledger
	log     hclog.Logger
	adm     *admission
	callers *callerLimits

	// members (capacity one) serialises membership changes, so each one's
	// quorum check holds until it is made.
	members chan struct{}

	// live is the leader's memory of its workers (leader-local liveness);
	// liveCfg sizes its timers; fleet is the live workers the last failure
	// scan counted (-1 before the first).
	live    *liveness.Tracker
	liveCfg liveness.Config
	fleet   atomic.Int64

	// fed is the federation's state (federation.go); nil without peers.
	fed *federation
}

var _ rolloutv1.CoordinatorServer = (*Server)(nil)

// New returns the service of one replica. ledger must be the FSM that node
// applies to.
func New(cfg Config, node Node, ledger *fsm.Ledger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if node == nil || ledger == nil {
		return nil, fmt.Errorf("%w: node and ledger are required", ErrInvalidConfig)
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	srv := &Server{cfg: cfg, node: node, ledger: ledger, log: log.Named("api"), adm: newAdmission(cfg.InflightBytes, cfg.AdmitWait), callers: newCallerLimits(cfg),
		members: make(chan struct{}, 1),
		live:    liveness.New(), liveCfg: liveness.Config{Floor: cfg.FailureTimeout, Budget: cfg.HeartbeatBudget}}
	srv.fleet.Store(-1)
	if cfg.Peers != nil {
		srv.fed = newFederation(srv)
	}
	return srv, nil
}

// RegisterOn registers the service on g.
func (s *Server) RegisterOn(g *grpc.Server) {
	rolloutv1.RegisterCoordinatorServer(g, s)
}

// header builds a reply header decided in term.
func (s *Server) header(term uint64) *rolloutv1.ReplyHeader {
	h := &rolloutv1.ReplyHeader{Term: term, ReplicaId: s.cfg.ReplicaID}
	h.LeaderId, h.LeaderAddr = s.leaderHint()
	return h
}

// leaderHint returns the leader's id and gRPC address as this replica knows
// them.
func (s *Server) leaderHint() (id, addr string) {
	id, _ = s.node.Leader()
	if id == "" {
		return "", ""
	}
	if id == s.cfg.ReplicaID {
		return id, s.cfg.GRPCAddr
	}
	if m, ok := s.ledger.Member(id); ok {
		return id, m.GRPCAddr
	}
	return id, ""
}

// notLeader is the Unavailable error with a leader hint in its details.
func (s *Server) notLeader(msg string) error {
	id, addr := s.leaderHint()
	h := &rolloutv1.ReplyHeader{Term: s.node.Stats().Term, ReplicaId: s.cfg.ReplicaID, LeaderId: id, LeaderAddr: addr}
	if msg == "" {
		msg = "not leader"
	}
	if addr != "" {
		msg = fmt.Sprintf("%s; leader is %s at %s", msg, id, addr)
	}
	st, err := status.New(codes.Unavailable, msg).WithDetails(h)
	if err != nil {
		return status.Error(codes.Unavailable, msg)
	}
	return st.Err()
}

// toStatus maps an error from the replica or the ledger to a gRPC status.
// Unavailable, which clients retry (at another replica), is kept for
// failures of the replica rather than of the request: not the leader, shut
// down, raft's enqueue timeout, a replica that stopped applying the log,
// any other failure raft reported (raftnode.ErrRaft). Anything not
// recognised, a broken FSM contract included, is Internal: a bug that
// retrying would repeat.
func (s *Server) toStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raftnode.ErrNotLeader), errors.Is(err, raftnode.ErrShutdown):
		return s.notLeader(err.Error())
	case errors.Is(err, fsm.ErrStaleEpoch):
		return s.notLeader("stale epoch: " + err.Error())
	case errors.Is(err, fsm.ErrInvalidCommand), errors.Is(err, raftnode.ErrInvalidArgument):
		// Malformed or too large for the ledger or the proposer: retrying
		// the same request cannot help.
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, fsm.ErrRunNotFound), errors.Is(err, fsm.ErrItemNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, fsm.ErrCertRevoked), errors.Is(err, fsm.ErrNotOwner):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, fsm.ErrQuota):
		// A tenant's max_queued: the submit was refused whole.
		return quotaStatus(err)
	case errors.Is(err, fsm.ErrAlreadyRevoked):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, fsm.ErrNotIdle), errors.Is(err, fsm.ErrRunCancelled), errors.Is(err, raftnode.ErrUnsafeChange),
		errors.Is(err, fsm.ErrLastAdmin), errors.Is(err, fsm.ErrHandled), errors.Is(err, fsm.ErrRouteConflict):
		// ErrRunCancelled: a submit to a cancelled run, refused by the
		// ledger's state (not the request's shape) until the run is deleted.
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, raftnode.ErrNotMember):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, raftnode.ErrFSMContract):
		return status.Error(codes.Internal, err.Error())
	case errors.Is(err, raftnode.ErrTimeout), errors.Is(err, raftnode.ErrFatalApply),
		errors.Is(err, raftnode.ErrRaft):
		return status.Error(codes.Unavailable, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// propose commits one command and returns the ledger's result for it and
// the term it was decided in. An error is either a failure of the replica
// (not leader, timeout), the ledger's error for an entry it refused as a
// whole, or ErrFSMContract.
func (s *Server) propose(ctx context.Context, c *fsmpb.Command) (fsm.Result, uint64, error) {
	results, term, err := s.proposeAll(ctx, []*fsmpb.Command{c})
	if err != nil {
		return fsm.Result{}, term, err
	}
	return results[0], term, nil
}

// proposeAll commits cmds as one batch (one log entry when it fits in one;
// see raftnode.Node.ProposeBatch) and returns the ledger's results in
// order, results[i] answering cmds[i], and the newest term they were
// decided in. An error fails the whole batch (its outcome is unknown: some
// commands may have been applied) and is either a failure of the replica,
// the ledger's error for an entry it refused as a whole, or an error
// wrapping raftnode.ErrFSMContract when the replica returned anything but
// one fsm.Result per command.
func (s *Server) proposeAll(ctx context.Context, cmds []*fsmpb.Command) ([]fsm.Result, uint64, error) {
	data := make([][]byte, len(cmds))
	for i, c := range cmds {
		b, err := fsm.EncodeCommand(c)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: command %d: %v", fsm.ErrInvalidCommand, i, err)
		}
		data[i] = b
	}
	applied, err := s.node.ProposeBatch(ctx, data)
	if err != nil {
		return nil, 0, err
	}
	if len(applied) != len(cmds) {
		return nil, 0, fmt.Errorf("%w: %d commands proposed, %d results", raftnode.ErrFSMContract, len(cmds), len(applied))
	}
	results := make([]fsm.Result, len(applied))
	var term uint64
	for i, a := range applied {
		r, ok := a.Result.(fsm.Result)
		if !ok {
			return nil, 0, fmt.Errorf("%w: result %d is %T, want fsm.Result", raftnode.ErrFSMContract, i, a.Result)
		}
		results[i] = r
		term = max(term, a.Term)
	}
	if o := s.cfg.Observer; o != nil {
		for i, c := range cmds {
			o.ObserveCommand(c, results[i])
		}
	}
	return results, term, nil
}

// readBarrier makes a local read of the ledger current (read-index) and
// returns the term it is current in.
func (s *Server) readBarrier(ctx context.Context) (uint64, error) {
	term, err := s.node.VerifyLeader(ctx)
	if err != nil {
		return 0, s.toStatus(err)
	}
	return term, nil
}

// validWorkerID refuses an empty or oversized worker id at the edge; the
// ledger applies its own rule (printable text) and its refusal maps to
// InvalidArgument too.
func validWorkerID(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "worker_id is empty")
	}
	if len(id) > 128 || !utf8.ValidString(id) {
		return status.Error(codes.InvalidArgument, "worker_id must be valid UTF-8 of at most 128 bytes")
	}
	return nil
}

// authorizeWorker checks a worker RPC's worker_id: it must be well formed
// and, on a mutual-TLS connection, the caller's verified certificate must
// have role worker and a Common Name equal to it: the identity in a
// worker's certificate is the identity the ledger uses, so a worker cannot
// act on another's items. A plaintext connection carries no identity to
// check (only a replica started with --insecure accepts one; Authz refuses
// plaintext callers everywhere else). Refusals are PermissionDenied.
func authorizeWorker(ctx context.Context, workerID string) error {
	if err := validWorkerID(workerID); err != nil {
		return err
	}
	id, err := mtls.PeerIdentity(ctx)
	if errors.Is(err, mtls.ErrNoPeerIdentity) {
		return nil
	}
	if err != nil {
		return status.Errorf(codes.PermissionDenied, "peer identity: %v", err)
	}
	if id.Role != mtls.RoleWorker {
		return status.Errorf(codes.PermissionDenied, "worker RPCs need role worker; the certificate %q has role %s", id.Name, id.Role)
	}
	if workerIdentityEnforced && id.Name != workerID {
		return status.Errorf(codes.PermissionDenied, "certificate identity %q may not act as worker %q", id.Name, workerID)
	}
	return nil
}

// validRun is the looser check of a run name a read names (Results): a
// name the ledger may hold from before api/validate's rule (which governs
// new runs in SubmitItems) must stay readable; a name no run can have
// comes back NotFound.
func validRun(run string) error {
	if run == "" {
		return status.Error(codes.InvalidArgument, "run is empty")
	}
	if len(run) > 128 || !utf8.ValidString(run) {
		return status.Error(codes.InvalidArgument, "run must be valid UTF-8 of at most 128 bytes")
	}
	return nil
}

func toItem(it fsm.Item) *rolloutv1.Item {
	return &rolloutv1.Item{Run: it.Run, Id: it.ID, Index: it.Index, Payload: it.Payload, Attempt: it.Attempt,
		PayloadRef: toRef(it.PayloadRef), Count: it.Count, Base: it.Base, Started: it.Started}
}

// toRef converts a ledger reference; nil stays nil.
func toRef(r *fsm.Ref) *rolloutv1.DataRef {
	if r == nil {
		return nil
	}
	return &rolloutv1.DataRef{Object: r.Object, Offset: r.Offset, Length: r.Length, Blake3: r.Blake3}
}

// fromRef converts an API reference to its ledger form; nil stays nil.
func fromRef(r *rolloutv1.DataRef) *fsmpb.DataRef {
	if r == nil {
		return nil
	}
	return &fsmpb.DataRef{Object: r.GetObject(), Offset: r.GetOffset(), Length: r.GetLength(), Blake3: r.GetBlake3()}
}

func toItems(items []fsm.Item) []*rolloutv1.Item {
	out := make([]*rolloutv1.Item, len(items))
	for i, it := range items {
		out[i] = toItem(it)
	}
	return out
}

func toKeys(keys []*rolloutv1.ItemKey) []*fsmpb.ItemKey {
	out := make([]*fsmpb.ItemKey, len(keys))
	for i, k := range keys {
		out[i] = &fsmpb.ItemKey{Run: k.GetRun(), Id: k.GetId(), Attempt: k.GetAttempt(), Started: k.GetStarted()}
	}
	return out
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
