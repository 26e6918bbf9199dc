package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/peers"
	"github.com/rollout/rollout/internal/tenancy"
)

// Federation (issue 42), the parent's side: routing at a run's creation,
// forwarding of a handle's submits, results, cancel and delete to its peer,
// and the leader's loop that polls each peer (RunFederation).
//
// Everything here is inert without Config.Peers: Server.fed is nil, no
// connection is made, no loop runs, and no command this file proposes is
// ever proposed (the ledger holds no handle, so its snapshots are byte for
// byte those of a coordinator without federation).
//
// The ledger records decisions and state changes (fsm handles.go); the
// leader's memory holds what it polled (peerView), which RunStatus answers
// from, never below what the ledger recorded. An idle federation writes no
// log entry: a poll proposes only state changes (acknowledged, finished,
// cancelled, lost) and reachability changes.

// PeerFiles serves the current peers file (*peers.Watcher).
type PeerFiles interface {
	Current() *peers.File
}

// DefaultPeerPollInterval is Config.PeerPollInterval's default.
const DefaultPeerPollInterval = 2 * time.Second

// peerCallTimeout bounds one call to a peer made by the loop.
const peerCallTimeout = 5 * time.Second

// inlineDriveTimeout bounds one attempt at having the peer confirm a
// cancel or a delete (the intent is recorded first; the loop re-drives).
const inlineDriveTimeout = 2 * time.Second

// forwardTimeout bounds a forwarded call when the caller set no deadline.
const forwardTimeout = 30 * time.Second

// ClusterLocal is RunSpec.cluster's and RunCounters.cluster's name of this
// cluster.
const ClusterLocal = "local"

// federation is the leader-side state of federation.
type federation struct {
	s    *Server
	name string
	src  PeerFiles
	log  hclog.Logger
	poll time.Duration

	mu    sync.Mutex
	file  *peers.File // the file conns were made from
	conns map[string]*peerConn
	views map[string]*peerView
	locks map[string]*runLock
	errs  map[string]uint64 // forward errors by peer
}

// peerConn is a leader-following client of one peer's replicas,
// presenting the peer certificate of the peers file.
type peerConn struct {
	peer   peers.Peer
	client *coordclient.Client
	tls    *mtls.Source
}

// peerView is the leader's memory of one peer: its last PeerInfo and
// PeerRuns.
type peerView struct {
	known, reachable bool
	info             *rolloutv1.PeerInfoResponse
	runs             map[string]*rolloutv1.RunCounters // by remote run name
	lastErr          string
	lastPoll         time.Time
	skewMs           int64
	noted            time.Time // the last reachability note proposed
}

// runLock serializes a handle's forwarded submits with its cancel, so that
// a cancel confirmed on the peer is never followed by a forward that
// creates the run there.
type runLock struct {
	mu   sync.Mutex
	refs int
}

func newFederation(s *Server) *federation {
	poll := s.cfg.PeerPollInterval
	if poll == 0 {
		poll = DefaultPeerPollInterval
	}
	return &federation{s: s, name: s.cfg.ClusterName, src: s.cfg.Peers, log: s.log.Named("federation"), poll: poll,
		conns: map[string]*peerConn{}, views: map[string]*peerView{}, locks: map[string]*runLock{}, errs: map[string]uint64{}}
}

// lock locks run's forwarding lock and returns its unlock.
func (f *federation) lock(run string) func() {
	f.mu.Lock()
	l := f.locks[run]
	if l == nil {
		l = &runLock{}
		f.locks[run] = l
	}
	l.refs++
	f.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		f.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(f.locks, run)
		}
		f.mu.Unlock()
	}
}

// current returns the peers file in use, dropping the connections of
// peers that left it or changed since the last call.
func (f *federation) current() *peers.File {
	file := f.src.Current()
	f.mu.Lock()
	defer f.mu.Unlock()
	if file == f.file {
		return file
	}
	for name, c := range f.conns {
		if p, ok := file.Peer(name); !ok || !samePeer(p, c.peer) {
			_ = c.client.Close()
			delete(f.conns, name)
		}
	}
	for name := range f.views {
		if _, ok := file.Peer(name); !ok {
			delete(f.views, name)
		}
	}
	f.file = file
	return file
}

func samePeer(a, b peers.Peer) bool {
	return a.Name == b.Name && slices.Equal(a.Coord, b.Coord) && a.Files() == b.Files()
}

// conn returns the client of the peer named name, making it on first use.
func (f *federation) conn(name string) (*peerConn, error) {
	file := f.current()
	p, ok := file.Peer(name)
	if !ok {
		return nil, fmt.Errorf("peer %q is not in the peers file %s", name, file.Path)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.conns[name]; c != nil {
		return c, nil
	}
	src, err := p.Files().NewSource(mtls.SourceOptions{Warn: f.log.Named(name).Warn,
		Expect: &mtls.Identity{Name: f.name, Role: mtls.RolePeer}})
	if err != nil {
		return nil, fmt.Errorf("peer %q: TLS files: %w", name, err)
	}
	cl, err := coordclient.New(coordclient.Config{Addrs: p.Coord, TLS: src.Config(), CallTimeout: peerCallTimeout,
		Logger: f.log.Named(name), MaxMessageBytes: int(f.s.cfg.Limits.MaxMessageBytes)})
	if err != nil {
		return nil, fmt.Errorf("peer %q: %w", name, err)
	}
	c := &peerConn{peer: p, client: cl, tls: src}
	f.conns[name] = c
	return c, nil
}

// close closes every peer connection.
func (f *federation) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, c := range f.conns {
		_ = c.client.Close()
		delete(f.conns, name)
	}
}

// view returns a copy of the leader's view of peer (nil: never polled).
func (f *federation) view(peer string) *peerView {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.views[peer]
	if v == nil {
		return nil
	}
	c := *v
	return &c
}

// ---- routing ----

// route decides where a submit of run goes: "" for this cluster, or a
// peer's name. A run the ledger holds keeps its decision (a local run, or a
// handle's peer), and a spec naming another cluster is FailedPrecondition
// naming both; a new run follows its spec's cluster, or, when auto, the
// first peer that serves its model (see autoRoute).
func (s *Server) route(ctx context.Context, run string, spec *rolloutv1.RunSpec) (string, error) {
	want := spec.GetCluster()
	if h, err := s.ledger.Handle(run); err == nil {
		if want != "" && want != h.Peer {
			return "", status.Errorf(codes.FailedPrecondition,
				"submit of run %q names cluster %q, but the run was routed to peer %q when it was created (a run's cluster is fixed); nothing was changed", run, want, h.Peer)
		}
		return h.Peer, nil
	}
	if _, err := s.ledger.Run(run); err == nil {
		if want != "" && want != ClusterLocal {
			return "", status.Errorf(codes.FailedPrecondition,
				"submit of run %q names cluster %q, but the run runs on cluster %q (fixed when it was created); nothing was changed", run, want, ClusterLocal)
		}
		return "", nil
	}
	if want == ClusterLocal || spec.GetOrigin() != "" {
		return "", nil // pinned here, or handed here by a peer: never handed on
	}
	if s.fed == nil {
		if want != "" {
			return "", status.Errorf(codes.InvalidArgument,
				"submit of run %q names cluster %q, but this coordinator has no peers (--peers); nothing was changed", run, want)
		}
		return "", nil
	}
	file := s.fed.current()
	if want != "" {
		p, ok := file.Peer(want)
		if !ok {
			return "", status.Errorf(codes.InvalidArgument,
				"submit of run %q names cluster %q, which is neither %q nor a peer in the peers file (peers: %v); nothing was changed", run, want, ClusterLocal, file.Names())
		}
		if !p.ReachesStore(spec.GetStore()) {
			return "", status.Errorf(codes.InvalidArgument,
				"submit of run %q pins peer %q, whose workers do not reach the run's store %q (the peers file lists %v); nothing was changed", run, want, spec.GetStore(), p.Stores)
		}
		return want, nil
	}
	return s.autoRoute(ctx, file, spec), nil
}

// autoRoute resolves an auto run: local when a live local worker serves
// its model (a run naming no model, or of a kind other than batch, stays
// local); else the first peer, in the file's order, whose last PeerInfo
// advertises a live worker for the model and whose stores list the run's
// store; else local (the run waits here as it always did). A peer this
// leader has not polled yet (it was just elected) is polled first, so the
// decision, which is final, never rests on an empty view.
func (s *Server) autoRoute(ctx context.Context, file *peers.File, spec *rolloutv1.RunSpec) string {
	model := spec.GetModel()
	if model == "" || (spec.GetKind() != "" && spec.GetKind() != fsm.BatchKind) {
		return ""
	}
	probe := []fsm.RunStatus{{Name: "?", Spec: &fsmpb.RunSpec{Model: model, Kind: spec.GetKind()}}}
	if !unservedModels(probe, s.WorkerViews(s.ledger.Workers()))["?"] {
		return ""
	}
	for _, p := range file.Peers {
		if !p.ReachesStore(spec.GetStore()) {
			continue
		}
		v := s.fed.view(p.Name)
		if v == nil {
			if _, ok := s.node.ServingTerm(); ok {
				s.pollPeer(ctx, p)
				v = s.fed.view(p.Name)
			}
		}
		if v == nil || !v.reachable || v.info == nil || !p.ReachesStore(spec.GetStore()) {
			continue
		}
		if v.info.GetAllModels() || slices.Contains(v.info.GetModels(), model) {
			return p.Name
		}
	}
	return ""
}

// ---- forwarding ----

// handleFor returns the handle of run routed to peer, creating it (one
// ledger command: the decision and the remote name) when the ledger holds
// none; it also returns the term of the leadership it was read under.
func (s *Server) handleFor(ctx context.Context, run, peer, tenant string, spec *fsmpb.RunSpec) (fsm.HandleStatus, uint64, error) {
	if h, err := s.ledger.Handle(run); err == nil {
		if s.fed == nil {
			return h, 0, status.Errorf(codes.FailedPrecondition,
				"run %q was handed to peer %q, and this coordinator has no peers (--peers) to forward to; nothing was changed", run, h.Peer)
		}
		if tenant != "" && tenancy.CheckOwner(tenant, h.Tenant) != nil {
			return h, 0, status.Errorf(codes.PermissionDenied,
				"submit of run %q as tenant %q refused, nothing was changed: the run belongs to tenant %q", run, tenant, h.Tenant)
		}
		term, err := s.readBarrier(ctx)
		return h, term, err
	}
	if spec == nil {
		return fsm.HandleStatus{}, 0, status.Errorf(codes.InvalidArgument, "submit creates run %q and needs its spec; nothing was changed", run)
	}
	sp := proto.Clone(spec).(*fsmpb.RunSpec)
	sp.Tenant = tenant
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Handle{Handle: &fsmpb.HandleCmd{
		Op: fsmpb.HandleOp_HANDLE_OP_CREATE, Run: run, Peer: peer, Spec: sp, Tenant: tenant, Parent: s.cfg.ClusterName}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return fsm.HandleStatus{}, 0, s.toStatus(err)
	}
	h, err := s.ledger.Handle(run)
	if err != nil {
		return fsm.HandleStatus{}, 0, s.toStatus(err)
	}
	s.log.Info("run handed off", "run", run, "peer", peer, "remote run", h.RemoteRun)
	return h, term, nil
}

// forwardable refuses a submit to a handle that takes no work: refused by
// the peer (its code and reason), cancelled, or lost.
func forwardable(h fsm.HandleStatus) error {
	switch {
	case h.State == fsm.HandleRefused:
		code := codes.Code(h.Code)
		if code == codes.OK || code == codes.Unknown {
			code = codes.FailedPrecondition
		}
		return status.Errorf(code, "run %q was refused by peer %q and is nowhere: %s (delete it to reuse the name)", h.Run, h.Peer, h.Reason)
	case h.CancelIntent || h.State == fsm.HandleCancelled:
		return status.Errorf(codes.FailedPrecondition, "%v: run %q (handed to peer %q) was cancelled; it takes no new items (delete it to reuse the name)",
			fsm.ErrRunCancelled, h.Run, h.Peer)
	case h.State == fsm.HandleLost:
		return status.Errorf(codes.FailedPrecondition, "run %q was lost on peer %q (%s); it takes no new items", h.Run, h.Peer, h.Reason)
	}
	return nil
}

// apiSpec is the spec every forward sends the peer: the handle's recorded
// one (the first creates the run there; a later one names the same store
// and prefix, which the peer checks, as the callee always gives a peer's
// submit a spec to mark its origin in), its total raised to the request's.
// The tenant is left for the peer to set (the calling cluster's name), and
// the cluster and origin too.
func apiSpec(h fsm.HandleStatus, req *rolloutv1.RunSpec) *rolloutv1.RunSpec {
	sp := h.Spec
	out := &rolloutv1.RunSpec{MaxFailures: sp.GetMaxFailures(), Model: sp.GetModel(), Sampling: sp.GetSampling(), Total: max(sp.GetTotal(), req.GetTotal()),
		Kind: sp.GetKind(), Store: sp.GetStore(), RetainMs: uint64(sp.GetRetainNano() / int64(time.Millisecond)),
		Priority: sp.GetPriority()}
	if out.Store != "" {
		// The parent's effective prefix ("runs/NAME/" for a run without
		// one): the objects the client wrote are read where they are.
		out.DataPrefix = fsm.RunDataPrefix(h.Run, sp.GetDataPrefix())
	}
	return out
}

// permanent reports whether a peer's refusal of a forward is permanent:
// retrying the same request cannot help (invalid, permission, quota).
func permanent(code codes.Code) bool {
	switch code {
	case codes.InvalidArgument, codes.PermissionDenied, codes.ResourceExhausted, codes.FailedPrecondition,
		codes.AlreadyExists, codes.OutOfRange, codes.Unauthenticated:
		return true
	}
	return false
}

// forward sends one submit of handle h to its peer (call makes the call
// under the remote name) and records what it learnt: the peer's
// acknowledgment of a pending handle, or its permanent refusal (the run is
// then nowhere). A refusal passes through with its code and details (a
// quota's RESOURCE_EXHAUSTED stays one, for the gateway's 429); a failure
// to reach the peer is UNAVAILABLE, for the client to retry (the peer's
// submit is idempotent, and the remote name is fixed).
func (s *Server) forward(ctx context.Context, h fsm.HandleStatus, call func(ctx context.Context, c *coordclient.Client) error) error {
	unlock := s.fed.lock(h.Run)
	defer unlock()
	// Re-read under the lock: a cancel may have been recorded meanwhile.
	if cur, err := s.ledger.Handle(h.Run); err == nil {
		h = cur
	}
	if err := forwardable(h); err != nil {
		return err
	}
	pc, err := s.fed.conn(h.Peer)
	if err != nil {
		// The peers file no longer names the peer, or its TLS files do not
		// load: the operator's to fix, not the client's to retry.
		s.fed.countError(h.Peer)
		return status.Errorf(codes.FailedPrecondition, "forwarding run %q to peer %q: %v", h.Run, h.Peer, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, forwardTimeout)
		defer cancel()
	}
	err = call(ctx, pc.client)
	if err == nil {
		if h.State == fsm.HandlePending {
			s.proposeHandle(ctx, &fsmpb.HandleCmd{Op: fsmpb.HandleOp_HANDLE_OP_ACKNOWLEDGED, Run: h.Run, RemoteRun: h.RemoteRun})
		}
		return nil
	}
	s.fed.countError(h.Peer)
	st, ok := peerStatus(err)
	if !ok || !permanent(st.Code()) {
		s.log.Warn("forward to peer failed", "run", h.Run, "peer", h.Peer, "error", err)
		return status.Errorf(codes.Unavailable, "forwarding run %q to peer %q (as %q) failed, retry: %v", h.Run, h.Peer, h.RemoteRun, err)
	}
	if h.State == fsm.HandlePending {
		s.log.Warn("peer refused a run: it is nowhere", "run", h.Run, "peer", h.Peer, "code", st.Code(), "reason", st.Message())
		s.proposeHandle(ctx, &fsmpb.HandleCmd{Op: fsmpb.HandleOp_HANDLE_OP_REFUSED, Run: h.Run, RemoteRun: h.RemoteRun,
			Reason: st.Message(), Code: uint32(st.Code())})
	}
	out := status.New(st.Code(), fmt.Sprintf("peer %q refused run %q (as %q): %s", h.Peer, h.Run, h.RemoteRun, st.Message()))
	if d := st.Proto().GetDetails(); len(d) > 0 {
		p := out.Proto()
		p.Details = d
		return status.FromProto(p).Err()
	}
	return out.Err()
}

// peerStatus returns the gRPC status a call to a peer ended with, its own
// message unwrapped from the client's context.
func peerStatus(err error) (*status.Status, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus(), true
	}
	return nil, false
}

// proposeHandle proposes c, logging a failure (the loop re-drives what it
// must).
func (s *Server) proposeHandle(ctx context.Context, c *fsmpb.HandleCmd) {
	res, _, err := s.propose(context.WithoutCancel(ctx), &fsmpb.Command{Cmd: &fsmpb.Command_Handle{Handle: c}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		s.log.Warn("recording a handle's change failed", "run", c.GetRun(), "op", c.GetOp().String(), "error", err)
	}
}

func (f *federation) countError(peer string) {
	f.mu.Lock()
	f.errs[peer]++
	f.mu.Unlock()
}

// forwardErrors returns the forward errors counted for each peer.
func (f *federation) forwardErrors() map[string]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]uint64, len(f.errs))
	for k, v := range f.errs {
		out[k] = v
	}
	return out
}

// fedSubmit forwards a submit of a run routed to a peer: send calls the
// peer with the request renamed to the handle's remote run and its spec.
// handled is false for a run of this cluster (the caller goes on as
// before); term is the term the answer's header carries.
func fedSubmit[R any](ctx context.Context, s *Server, run string, reqSpec *rolloutv1.RunSpec, tenant string, spec *fsmpb.RunSpec,
	send func(ctx context.Context, c *coordclient.Client, remote string, sp *rolloutv1.RunSpec) (R, error)) (handled bool, resp R, term uint64, err error) {
	peer, err := s.route(ctx, run, reqSpec)
	if err != nil || peer == "" {
		return err != nil, resp, 0, err
	}
	h, term, err := s.handleFor(ctx, run, peer, tenant, spec)
	if err != nil {
		return true, resp, 0, err
	}
	err = s.forward(ctx, h, func(ctx context.Context, c *coordclient.Client) error {
		var err error
		resp, err = send(ctx, c, h.RemoteRun, apiSpec(h, reqSpec))
		return err
	})
	return true, resp, term, err
}

// fedSubmitItems forwards a SubmitItems of a run routed to a peer (fedSubmit).
func (s *Server) fedSubmitItems(ctx context.Context, req *rolloutv1.SubmitItemsRequest, tenant string, spec *fsmpb.RunSpec) (bool, *rolloutv1.SubmitItemsResponse, error) {
	ok, resp, term, err := fedSubmit(ctx, s, req.GetRun(), req.GetSpec(), tenant, spec,
		func(ctx context.Context, c *coordclient.Client, remote string, sp *rolloutv1.RunSpec) (*rolloutv1.SubmitItemsResponse, error) {
			fr := proto.Clone(req).(*rolloutv1.SubmitItemsRequest)
			fr.Run, fr.Spec = remote, sp
			return c.SubmitItems(ctx, fr)
		})
	if err != nil || !ok {
		return ok, nil, err
	}
	resp.Header = s.header(term)
	return true, resp, nil
}

// fedSubmitRanges is fedSubmitItems for SubmitRanges.
func (s *Server) fedSubmitRanges(ctx context.Context, req *rolloutv1.SubmitRangesRequest, tenant string, spec *fsmpb.RunSpec) (bool, *rolloutv1.SubmitRangesResponse, error) {
	ok, resp, term, err := fedSubmit(ctx, s, req.GetRun(), req.GetSpec(), tenant, spec,
		func(ctx context.Context, c *coordclient.Client, remote string, sp *rolloutv1.RunSpec) (*rolloutv1.SubmitRangesResponse, error) {
			fr := proto.Clone(req).(*rolloutv1.SubmitRangesRequest)
			fr.Run, fr.Spec = remote, sp
			return c.SubmitRanges(ctx, fr)
		})
	if err != nil || !ok {
		return ok, nil, err
	}
	resp.Header = s.header(term)
	return true, resp, nil
}

// checkHandleOwner is checkOwner for a handle: a client acts only on its
// own tenant's handles.
func checkHandleOwner(ctx context.Context, method string, h fsm.HandleStatus) error {
	id, err := mtls.PeerIdentity(ctx)
	if errors.Is(err, mtls.ErrNoPeerIdentity) {
		return nil
	}
	if err != nil {
		return status.Errorf(codes.PermissionDenied, "%s: %v", method, err)
	}
	if id.Role == mtls.RoleAdmin || id.Role == mtls.RoleGateway {
		return nil
	}
	owner := h.Tenant
	if owner == "" {
		owner = fsm.DefaultTenant
	}
	if owner != id.Name {
		return status.Errorf(codes.PermissionDenied,
			"%s of run %q refused: the run belongs to tenant %q; the certificate %q (role %s) may act only on its own runs (an admin may act on any)",
			method, h.Run, owner, id.Name, id.Role)
	}
	return nil
}

// fedResults answers Results of a handle from its peer, under the remote
// name: the peer's items as they are (their objects are in the same
// store). handled is false when run is no handle.
func (s *Server) fedResults(ctx context.Context, req *rolloutv1.ResultsRequest, term uint64) (bool, *rolloutv1.ResultsResponse, error) {
	h, err := s.ledger.Handle(req.GetRun())
	if err != nil {
		return false, nil, nil
	}
	if err := checkHandleOwner(ctx, "results", h); err != nil {
		return true, nil, err
	}
	switch h.State {
	case fsm.HandleRefused, fsm.HandleLost:
		return true, nil, status.Errorf(codes.FailedPrecondition, "run %q has no results: it was %s by peer %q (%s)", h.Run, h.State, h.Peer, h.Reason)
	}
	if s.fed == nil {
		return true, nil, status.Errorf(codes.FailedPrecondition, "run %q was handed to peer %q, and this coordinator has no peers (--peers) to read it from", h.Run, h.Peer)
	}
	pc, err := s.fed.conn(h.Peer)
	if err != nil {
		return true, nil, status.Errorf(codes.Unavailable, "results of run %q from peer %q: %v", h.Run, h.Peer, err)
	}
	fr := proto.Clone(req).(*rolloutv1.ResultsRequest)
	fr.Run = h.RemoteRun
	resp, err := pc.client.Results(ctx, fr)
	if err != nil {
		if st, ok := peerStatus(err); ok && st.Code() != codes.Unknown {
			return true, nil, status.Errorf(st.Code(), "results of run %q from peer %q (as %q): %s", h.Run, h.Peer, h.RemoteRun, st.Message())
		}
		return true, nil, status.Errorf(codes.Unavailable, "results of run %q from peer %q (as %q): %v", h.Run, h.Peer, h.RemoteRun, err)
	}
	resp.Header = s.header(term)
	return true, resp, nil
}

// fedCancel records the cancel intent of a handle and tries once to have
// the peer confirm it (the loop re-drives it until it does).
func (s *Server) fedCancel(ctx context.Context, run string) (bool, *rolloutv1.CancelRunResponse, error) {
	h, err := s.ledger.Handle(run)
	if err != nil {
		return false, nil, nil
	}
	if err := checkHandleOwner(ctx, "cancel", h); err != nil {
		return true, nil, err
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Handle{Handle: &fsmpb.HandleCmd{
		Op: fsmpb.HandleOp_HANDLE_OP_CANCEL, Run: run, RemoteRun: h.RemoteRun, By: caller(ctx)}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return true, nil, s.toStatus(err)
	}
	resp := &rolloutv1.CancelRunResponse{Header: s.header(term)}
	if s.fed != nil {
		// The intent is durable: answer now, and try the peer at once in the
		// background (a partition must not hold the caller); the loop
		// re-drives it until the peer confirms.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forwardTimeout)
		go func() {
			defer cancel()
			if err := s.driveCancel(dctx, h); err != nil {
				s.log.Debug("cancel of a handed-off run not confirmed yet", "run", h.Run, "peer", h.Peer, "error", err)
			}
		}()
	}
	s.log.Info("cancel of a handed-off run recorded", "run", run, "peer", h.Peer, "by", caller(ctx))
	return true, resp, nil
}

// driveCancel asks the peer to cancel h's remote run. The cancellation is
// recorded by the poll that sees the remote run cancelled and finished,
// with its final counters. A run the peer does not hold while the handle
// is pending was never created there: under the run's lock no forward can
// create it any more (the intent is recorded), so the cancel is confirmed
// at once.
func (s *Server) driveCancel(ctx context.Context, h fsm.HandleStatus) error {
	unlock := s.fed.lock(h.Run)
	defer unlock()
	pc, err := s.fed.conn(h.Peer)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
	defer cancel()
	_, err = pc.client.CancelRun(cctx, &rolloutv1.CancelRunRequest{Run: h.RemoteRun})
	if st, ok := peerStatus(err); ok && st.Code() == codes.NotFound && h.Acked.IsZero() {
		s.proposeHandle(ctx, &fsmpb.HandleCmd{Op: fsmpb.HandleOp_HANDLE_OP_CANCELLED, Run: h.Run, RemoteRun: h.RemoteRun})
		return nil
	}
	if err != nil {
		s.fed.countError(h.Peer)
	}
	return err
}

// fedDelete records the delete intent of a finished, cancelled, refused
// or lost handle and tries once to have the peer delete the remote run.
// The answer names the run's store and data prefix: its objects (inputs
// and results, all under this cluster's prefix) are the caller's to remove.
func (s *Server) fedDelete(ctx context.Context, run string) (bool, *rolloutv1.DeleteRunResponse, error) {
	h, err := s.ledger.Handle(run)
	if err != nil {
		return false, nil, nil
	}
	if err := checkHandleOwner(ctx, "delete", h); err != nil {
		return true, nil, err
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Handle{Handle: &fsmpb.HandleCmd{
		Op: fsmpb.HandleOp_HANDLE_OP_DELETE, Run: run, RemoteRun: h.RemoteRun, By: caller(ctx)}}})
	if err == nil {
		err = res.Err
	}
	if errors.Is(err, fsm.ErrRunActive) {
		return true, nil, status.Errorf(codes.FailedPrecondition, "%v", err)
	}
	if err != nil {
		return true, nil, s.toStatus(err)
	}
	resp := &rolloutv1.DeleteRunResponse{Header: s.header(term), Store: h.Spec.GetStore()}
	if resp.Store != "" {
		resp.DataPrefix = fsm.RunDataPrefix(run, h.Spec.GetDataPrefix())
	}
	if s.fed != nil {
		if cur, err := s.ledger.Handle(run); err == nil && cur.DeleteIntent {
			if r, err := s.driveDelete(ctx, cur); err == nil && r != nil {
				resp.Items = r.GetItems()
			}
		}
	}
	s.log.Info("delete of a handed-off run recorded", "run", run, "peer", h.Peer, "by", caller(ctx))
	return true, resp, nil
}

// driveDelete asks the peer to delete h's remote run and records the
// confirmation (NotFound confirms too: it is gone).
func (s *Server) driveDelete(ctx context.Context, h fsm.HandleStatus) (*rolloutv1.DeleteRunResponse, error) {
	pc, err := s.fed.conn(h.Peer)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, inlineDriveTimeout)
	defer cancel()
	resp, err := pc.client.DeleteRun(cctx, &rolloutv1.DeleteRunRequest{Run: h.RemoteRun})
	if st, ok := peerStatus(err); ok && st.Code() == codes.NotFound {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	s.proposeHandle(ctx, &fsmpb.HandleCmd{Op: fsmpb.HandleOp_HANDLE_OP_DELETED, Run: h.Run, RemoteRun: h.RemoteRun})
	return resp, nil
}

// handleCounters answers RunStatus for a handle: the peer's counters as
// the ledger recorded them (so no leader answers less than an earlier one
// did), finished only once the peer said so.
func (s *Server) handleCounters(h fsm.HandleStatus) *rolloutv1.RunCounters {
	k := h.Counters
	rc := &rolloutv1.RunCounters{Name: h.Run, Cluster: h.Peer, RemoteRun: h.RemoteRun, HandleState: h.State, HandleReason: h.Reason,
		Total: k.GetTotal(), Pending: k.GetPending(), Running: k.GetRunning(), Done: k.GetDone(), Dead: k.GetDead(),
		Failures: k.GetFailures(), CancelledItems: k.GetCancelledItems(), Blocked: k.GetBlocked(),
		ExpectedTotal: max(k.GetExpectedTotal(), h.Spec.GetTotal()), CreatedUnixMs: unixMs(h.Created), FinishedUnixMs: k.GetFinishedUnixMs(),
		Kind: h.Spec.GetKind(), Store: h.Spec.GetStore(), Model: h.Spec.GetModel(), Sampling: h.Spec.GetSampling(),
		Tenant: h.Tenant, Priority: h.Spec.GetPriority(), Cancelled: h.CancelIntent || h.State == fsm.HandleCancelled}
	if rc.Tenant == "" {
		rc.Tenant = fsm.DefaultTenant
	}
	if rc.Priority == 0 {
		rc.Priority = 3
	}
	if rc.Store != "" {
		rc.DataPrefix = fsm.RunDataPrefix(h.Run, h.Spec.GetDataPrefix())
	}
	if fsm.HandleTerminal(h.State) || s.fed == nil {
		return rc
	}
	v := s.fed.view(h.Peer)
	if v == nil {
		return rc
	}
	r := v.runs[h.RemoteRun]
	if r == nil {
		return rc
	}
	// The counters and the state are the ledger's (recorded by the
	// leader's poll when the peer's moved): what one leader answered, any
	// later leader answers too. Only what no one counts on being monotone
	// comes from this leader's last poll.
	rc.RunningLong, rc.OwnerLost, rc.Stall, rc.Ranges = r.GetRunningLong(), r.GetOwnerLost(), r.GetStall(), r.GetRanges()
	rc.UnservedModel = r.GetUnservedModel()
	return rc
}
