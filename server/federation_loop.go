package server

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/peers"
)

// reachabilityNoteEvery bounds how often the leader records a peer's
// reachability changing (a flapping link is one event a period).
const reachabilityNoteEvery = 10 * time.Second

// RunFederation is the leader's federation loop, until ctx ends: every
// poll interval, while this replica leads, it polls each peer of the
// peers file (one PeerInfo and one PeerRuns call) and reconciles the
// handles routed to it: it records an acknowledgment, a finish, a
// cancellation or a loss (a log entry only when a handle's state changes),
// re-drives recorded cancel and delete intents until the peer confirms
// them, and cancels and deletes a run under this cluster's prefix on the
// peer that no handle names (an orphan). Without peers it returns at once.
func (s *Server) RunFederation(ctx context.Context) {
	f := s.fed
	if f == nil {
		return
	}
	defer f.close()
	t := time.NewTicker(f.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, ok := s.node.ServingTerm(); !ok {
			f.forget()
			continue
		}
		s.pollPeers(ctx)
	}
}

// forget drops the views of a replica that no longer leads (a new leader
// polls afresh; its routing waits for its first poll).
func (f *federation) forget() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.views)
}

// pollPeers polls every peer of the file concurrently, once.
func (s *Server) pollPeers(ctx context.Context) {
	file := s.fed.current()
	var wg sync.WaitGroup
	for _, p := range file.Peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.pollPeer(ctx, p)
		}()
	}
	wg.Wait()
}

// pollPeer polls one peer and reconciles its handles.
func (s *Server) pollPeer(ctx context.Context, p peers.Peer) {
	f := s.fed
	// The handles as they were before the poll: a handle acknowledged
	// after PeerRuns was answered must not be found missing.
	before := map[string]fsm.HandleStatus{}
	for _, h := range s.ledger.Handles() {
		if h.Peer == p.Name {
			before[h.Run] = h
		}
	}
	pc, err := f.conn(p.Name)
	if err != nil {
		s.peerFailed(ctx, p.Name, err)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
	defer cancel()
	sent := time.Now()
	info, err := pc.client.PeerInfo(cctx, &rolloutv1.PeerInfoRequest{})
	if err != nil {
		s.peerFailed(ctx, p.Name, err)
		return
	}
	got := time.Now()
	runs, err := pc.client.PeerRuns(cctx, &rolloutv1.PeerRunsRequest{})
	if err != nil {
		s.peerFailed(ctx, p.Name, err)
		return
	}
	byName := make(map[string]*rolloutv1.RunCounters, len(runs.GetRuns()))
	for _, r := range runs.GetRuns() {
		byName[r.GetName()] = r
	}
	mid := sent.Add(got.Sub(sent) / 2)
	f.mu.Lock()
	v := f.views[p.Name]
	if v == nil {
		v = &peerView{}
		f.views[p.Name] = v
	}
	wasKnown, wasReachable := v.known, v.reachable
	v.known, v.reachable, v.info, v.runs, v.lastErr, v.lastPoll = true, true, info, byName, "", got
	v.skewMs = info.GetNowUnixMs() - mid.UnixMilli()
	f.mu.Unlock()
	if wasKnown && !wasReachable {
		s.noteReachability(ctx, p.Name, true, "")
	}
	s.reconcile(ctx, pc, p.Name, before, byName)
}

// peerFailed records a failed poll; a peer that was reachable becomes
// unreachable (an event, at most one a period).
func (s *Server) peerFailed(ctx context.Context, peer string, err error) {
	f := s.fed
	f.mu.Lock()
	v := f.views[peer]
	if v == nil {
		v = &peerView{}
		f.views[peer] = v
	}
	was := !v.known || v.reachable
	v.known, v.reachable, v.lastErr = true, false, err.Error()
	f.mu.Unlock()
	if was {
		s.log.Warn("peer unreachable", "peer", peer, "error", err)
		s.noteReachability(ctx, peer, false, err.Error())
	}
}

// noteReachability records a peer's reachability change in the event
// history (a NoteCmd), at most once per reachabilityNoteEvery.
func (s *Server) noteReachability(ctx context.Context, peer string, reachable bool, detail string) {
	f := s.fed
	f.mu.Lock()
	v := f.views[peer]
	if v == nil || time.Since(v.noted) < reachabilityNoteEvery {
		f.mu.Unlock()
		return
	}
	v.noted = time.Now()
	f.mu.Unlock()
	kind := fsm.EventPeerUnreachable
	if reachable {
		kind = fsm.EventPeerReachable
	}
	if len(detail) > fsm.MaxEventDetailBytes {
		detail = detail[:fsm.MaxEventDetailBytes]
	}
	_, _, _ = s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Note{Note: &fsmpb.NoteCmd{
		Kind: uint32(kind), Member: peer, Detail: detail}}})
}

// counters converts a peer's RunCounters to the ledger's.
func counters(r *rolloutv1.RunCounters) *fsmpb.HandleCounters {
	return &fsmpb.HandleCounters{Total: r.GetTotal(), Pending: r.GetPending(), Running: r.GetRunning(), Done: r.GetDone(),
		Dead: r.GetDead(), Failures: r.GetFailures(), CancelledItems: r.GetCancelledItems(), ExpectedTotal: r.GetExpectedTotal(),
		FinishedUnixMs: r.GetFinishedUnixMs(), Blocked: r.GetBlocked()}
}

// countersMoved: the peer's counters r differ from the recorded k in a
// way a STATUS entry would record (a monotone counter grew, or pending,
// running or blocked changed).
func countersMoved(k *fsmpb.HandleCounters, r *rolloutv1.RunCounters) bool {
	return r.GetTotal() > k.GetTotal() || r.GetDone() > k.GetDone() || r.GetDead() > k.GetDead() ||
		r.GetFailures() > k.GetFailures() || r.GetCancelledItems() > k.GetCancelledItems() ||
		r.GetExpectedTotal() > k.GetExpectedTotal() ||
		r.GetPending() != k.GetPending() || r.GetRunning() != k.GetRunning() || r.GetBlocked() != k.GetBlocked()
}

// reconcile brings the handles of peer in line with what the peer
// reported (runs, by remote name), proposing only state changes, and
// re-drives intents.
func (s *Server) reconcile(ctx context.Context, pc *peerConn, peer string, before map[string]fsm.HandleStatus, runs map[string]*rolloutv1.RunCounters) {
	var cmds []*fsmpb.Command
	add := func(c *fsmpb.HandleCmd) {
		c.Peer = peer
		cmds = append(cmds, &fsmpb.Command{Cmd: &fsmpb.Command_Handle{Handle: c}})
	}
	for _, h := range before {
		r := runs[h.RemoteRun]
		switch {
		case h.DeleteIntent:
			if _, err := s.driveDelete(ctx, h); err != nil {
				s.log.Debug("delete of a handed-off run not confirmed yet", "run", h.Run, "peer", peer, "error", err)
			}
			continue
		case h.State == fsm.HandleCancelled && r != nil && !r.GetCancelled():
			// A deposed leader's forward that landed after the cancel was
			// confirmed: cancel that copy too.
			s.log.Warn("a cancelled run is live on the peer: cancelling it", "run", h.Run, "peer", peer, "remote run", h.RemoteRun)
			cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
			_, _ = pc.client.CancelRun(cctx, &rolloutv1.CancelRunRequest{Run: h.RemoteRun})
			cancel()
			continue
		case fsm.HandleTerminal(h.State):
			// A run's retain_ms holds for a handle too: its delete is then
			// an intent like an operator's (the peer's copy, forwarded
			// with the same retention, is most likely gone already).
			if ret := time.Duration(h.Spec.GetRetainNano()); ret > 0 && time.Since(h.Updated) > ret {
				add(&fsmpb.HandleCmd{Op: fsmpb.HandleOp_HANDLE_OP_DELETE, Run: h.Run, RemoteRun: h.RemoteRun, By: "retention"})
			}
			continue
		case r == nil && h.State == fsm.HandleAcknowledged:
			add(&fsmpb.HandleCmd{Op: fsmpb.HandleOp_HANDLE_OP_STATUS, Run: h.Run, RemoteRun: h.RemoteRun, State: fsm.HandleLost,
				Reason: "peer " + peer + " no longer holds run " + h.RemoteRun})
			continue
		case r == nil && h.CancelIntent:
			if err := s.driveCancel(ctx, h); err != nil {
				s.log.Debug("cancel of a handed-off run not confirmed yet", "run", h.Run, "peer", peer, "error", err)
			}
			continue
		case r == nil:
			continue // pending: the client's submit (re)creates it
		}
		switch {
		case r.GetCancelled() && r.GetFinishedUnixMs() != 0:
			// Cancelled and nothing left running: the final counters.
			add(&fsmpb.HandleCmd{Op: fsmpb.HandleOp_HANDLE_OP_STATUS, Run: h.Run, RemoteRun: h.RemoteRun, State: fsm.HandleCancelled, Counters: counters(r)})
		case r.GetFinishedUnixMs() != 0 && !r.GetCancelled():
			add(&fsmpb.HandleCmd{Op: fsmpb.HandleOp_HANDLE_OP_STATUS, Run: h.Run, RemoteRun: h.RemoteRun, State: fsm.HandleFinished, Counters: counters(r)})
		case r.GetCancelled():
			if h.State == fsm.HandlePending {
				add(&fsmpb.HandleCmd{Op: fsmpb.HandleOp_HANDLE_OP_ACKNOWLEDGED, Run: h.Run, RemoteRun: h.RemoteRun})
			}
			// Cancelled there; its running items may still finish.
		case h.CancelIntent:
			if err := s.driveCancel(ctx, h); err != nil {
				s.log.Debug("cancel of a handed-off run not confirmed yet", "run", h.Run, "peer", peer, "error", err)
			}
		case h.State == fsm.HandlePending:
			add(&fsmpb.HandleCmd{Op: fsmpb.HandleOp_HANDLE_OP_ACKNOWLEDGED, Run: h.Run, RemoteRun: h.RemoteRun})
		}
		// A live handle's counters are answered from the ledger only (never
		// from one leader's memory), so that no later leader answers less:
		// record them when the peer's moved. A run that does not move
		// writes nothing.
		if !fsm.HandleTerminal(h.State) && r != nil && countersMoved(h.Counters, r) {
			add(&fsmpb.HandleCmd{Op: fsmpb.HandleOp_HANDLE_OP_STATUS, Run: h.Run, RemoteRun: h.RemoteRun, State: fsm.HandleAcknowledged, Counters: counters(r)})
		}
	}
	if len(cmds) > 0 {
		results, _, err := s.proposeAll(ctx, cmds)
		if err != nil {
			s.log.Warn("recording peer status failed", "peer", peer, "error", err)
		}
		for i, r := range results {
			if r.Err != nil {
				s.log.Warn("recording peer status refused", "peer", peer, "run", cmds[i].GetHandle().GetRun(), "error", r.Err)
			}
		}
	}
	s.reapOrphans(ctx, pc, peer, runs)
}

// reapOrphans cancels and deletes the runs under this cluster's prefix on
// the peer that no handle of the ledger names (a deposed leader's late
// forward of a handle deleted since): no remote run lacks a handle.
func (s *Server) reapOrphans(ctx context.Context, pc *peerConn, peer string, runs map[string]*rolloutv1.RunCounters) {
	if len(runs) == 0 {
		return
	}
	named := map[string]bool{}
	for _, h := range s.ledger.Handles() {
		if h.Peer == peer {
			named[h.RemoteRun] = true
		}
	}
	prefix := s.cfg.ClusterName + "/"
	for name, r := range runs {
		if named[name] || !strings.HasPrefix(name, prefix) {
			continue
		}
		s.log.Warn("a run on the peer has no handle here: cancelling and deleting it", "peer", peer, "remote run", name)
		cctx, cancel := context.WithTimeout(ctx, peerCallTimeout)
		if !r.GetCancelled() && r.GetFinishedUnixMs() == 0 {
			_, _ = pc.client.CancelRun(cctx, &rolloutv1.CancelRunRequest{Run: name})
		}
		_, _ = pc.client.DeleteRun(cctx, &rolloutv1.DeleteRunRequest{Run: name})
		cancel()
	}
}

// peerStatuses is ClusterResponse.peers: the leader's view of each peer in
// the file's order (nil on a follower and without peers).
func (s *Server) peerStatuses() []*rolloutv1.PeerStatus {
	if s.fed == nil {
		return nil
	}
	if _, ok := s.node.ServingTerm(); !ok {
		return nil
	}
	file := s.fed.current()
	handles := s.ledger.Handles()
	now := time.Now()
	out := make([]*rolloutv1.PeerStatus, 0, len(file.Peers))
	for _, p := range file.Peers {
		ps := &rolloutv1.PeerStatus{Name: p.Name, Coord: p.Coord, Stores: p.Stores}
		if v := s.fed.view(p.Name); v != nil {
			ps.Reachable, ps.LastError, ps.ClockSkewMs, ps.LastPollUnixMs = v.reachable, v.lastErr, v.skewMs, unixMs(v.lastPoll)
			if i := v.info; i != nil {
				ps.LeaderId, ps.Term, ps.ClusterId, ps.Models, ps.AllModels = i.GetLeaderId(), i.GetTerm(), i.GetClusterId(), i.GetModels(), i.GetAllModels()
			}
		}
		if pc, err := s.fed.conn(p.Name); err == nil {
			leaf := pc.tls.Current().Leaf
			id, _ := mtls.IdentityOf(leaf)
			ps.Certificate = certInfo(mtls.PeerCert{Identity: id, Serial: mtls.SerialOf(leaf), NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter}, now)
		} else if ps.LastError == "" {
			ps.LastError = err.Error()
		}
		for _, h := range handles {
			if h.Peer == p.Name {
				ps.Handles++
				if !fsm.HandleTerminal(h.State) {
					ps.Active++
				}
			}
		}
		out = append(out, ps)
	}
	return out
}

// ---- the callee's side ----

// PeerRuns lists the runs under a calling cluster's name prefix: a peer
// certificate's own (the request may name only it), or, for an admin, the
// cluster the request names.
func (s *Server) PeerRuns(ctx context.Context, req *rolloutv1.PeerRunsRequest) (*rolloutv1.PeerRunsResponse, error) {
	cluster := req.GetCluster()
	id, err := mtls.PeerIdentity(ctx)
	switch {
	case err == nil && id.Role == mtls.RolePeer:
		if cluster != "" && cluster != id.Name {
			return nil, status.Errorf(codes.PermissionDenied, "PeerRuns: the peer certificate %q lists its own runs only, not cluster %q's", id.Name, cluster)
		}
		cluster = id.Name
	case cluster == "":
		return nil, status.Error(codes.InvalidArgument, "PeerRuns: name the cluster whose runs to list (cluster)")
	}
	if err := mtls.CheckClusterName(cluster); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "PeerRuns: %v", err)
	}
	all, err := s.RunStatus(ctx, &rolloutv1.RunStatusRequest{})
	if err != nil {
		return nil, err
	}
	resp := &rolloutv1.PeerRunsResponse{Header: all.GetHeader(), NowUnixMs: all.GetNowUnixMs()}
	prefix := cluster + "/"
	for _, r := range all.GetRuns() {
		// The runs the cluster created here (origin): not a run another
		// caller of this cluster named under the prefix.
		if strings.HasPrefix(r.GetName(), prefix) && r.GetRemoteRun() == "" && r.GetOrigin() == cluster {
			resp.Runs = append(resp.Runs, r)
		}
	}
	return resp, nil
}

// PeerInfo tells a calling cluster who this cluster is and which models a
// live (not lost) worker of the batch kind serves.
func (s *Server) PeerInfo(ctx context.Context, _ *rolloutv1.PeerInfoRequest) (*rolloutv1.PeerInfoResponse, error) {
	term, err := s.readBarrier(ctx)
	if err != nil {
		return nil, err
	}
	resp := &rolloutv1.PeerInfoResponse{Header: s.header(term), ClusterName: s.cfg.ClusterName, ClusterId: s.ledger.ClusterID(),
		LeaderId: s.cfg.ReplicaID, Term: term}
	seen := map[string]bool{}
	for _, w := range s.WorkerViews(s.ledger.Workers()) {
		if w.Lost || (w.Kinds != nil && !slices.Contains(w.Kinds, fsm.BatchKind)) {
			continue
		}
		if w.Models == nil {
			resp.AllModels = true
			continue
		}
		for _, m := range w.Models {
			if !seen[m] {
				seen[m] = true
				resp.Models = append(resp.Models, m)
			}
		}
	}
	slices.Sort(resp.Models)
	resp.NowUnixMs = time.Now().UnixMilli()
	return resp, nil
}

// PeerFigure is one peer's figures for the rollout_peer_* metrics.
type PeerFigure struct {
	Name      string
	Reachable bool
	// LastPollAge is the time since the last successful poll; negative
	// before the first.
	LastPollAge, ClockSkew time.Duration
	// Handles counts the ledger's handles routed to the peer by state.
	Handles       map[string]int
	ForwardErrors uint64
}

// PeerFigures returns the figures of every peer of the file, in its order:
// the leader's view (a follower's reachability and poll age are those of a
// peer never polled); nil without peers.
func (s *Server) PeerFigures() []PeerFigure {
	if s.fed == nil {
		return nil
	}
	file := s.fed.current()
	errs := s.fed.forwardErrors()
	handles := s.ledger.Handles()
	now := time.Now()
	out := make([]PeerFigure, 0, len(file.Peers))
	for _, p := range file.Peers {
		pf := PeerFigure{Name: p.Name, LastPollAge: -1, Handles: map[string]int{}, ForwardErrors: errs[p.Name]}
		if v := s.fed.view(p.Name); v != nil {
			pf.Reachable = v.reachable
			if !v.lastPoll.IsZero() {
				pf.LastPollAge, pf.ClockSkew = now.Sub(v.lastPoll), time.Duration(v.skewMs)*time.Millisecond
			}
		}
		for _, h := range handles {
			if h.Peer == p.Name {
				pf.Handles[h.State]++
			}
		}
		out = append(out, pf)
	}
	return out
}

// pollUnseen polls, once, each peer of a live handle among handles that
// this leader has not polled yet (it was just elected), so that RunStatus
// answers the peer's counters, recorded in the ledger by that poll, not
// only what earlier leaders recorded. It reports whether it polled.
func (s *Server) pollUnseen(ctx context.Context, handles []fsm.HandleStatus) bool {
	if s.fed == nil {
		return false
	}
	if _, ok := s.node.ServingTerm(); !ok {
		return false
	}
	file := s.fed.current()
	done := map[string]bool{}
	for _, h := range handles {
		if fsm.HandleTerminal(h.State) || done[h.Peer] || s.fed.view(h.Peer) != nil {
			continue
		}
		done[h.Peer] = true
		if p, ok := file.Peer(h.Peer); ok {
			s.pollPeer(ctx, p)
		}
	}
	return len(done) > 0
}
