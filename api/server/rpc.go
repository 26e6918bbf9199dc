package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
)

// SubmitItems adds a chunk of items to a run in one ledger command.
func (s *Server) SubmitItems(ctx context.Context, req *rolloutv1.SubmitItemsRequest) (*rolloutv1.SubmitItemsResponse, error) {
	if err := validRun(req.GetRun()); err != nil {
		return nil, err
	}
	if n := len(req.GetItems()); n > s.cfg.MaxSubmitItems {
		return nil, status.Errorf(codes.InvalidArgument, "too many items in one request: %d > %d", n, s.cfg.MaxSubmitItems)
	}
	if req.GetStaleAfterMs() > math.MaxInt64/uint64(time.Millisecond) {
		return nil, status.Errorf(codes.InvalidArgument, "stale_after_ms %d is too large", req.GetStaleAfterMs())
	}
	cmd := &fsmpb.SubmitItemsCmd{Run: req.GetRun(), RetryDead: req.GetRetryDead(),
		RependStaleNano: int64(req.GetStaleAfterMs()) * int64(time.Millisecond)}
	if sp := req.GetSpec(); sp != nil {
		cmd.Spec = &fsmpb.RunSpec{MaxFailures: sp.GetMaxFailures(), Model: sp.GetModel(), Sampling: sp.GetSampling(), Total: sp.GetTotal()}
	}
	cmd.Items = make([]*fsmpb.NewItem, len(req.GetItems()))
	for i, it := range req.GetItems() {
		cmd.Items[i] = &fsmpb.NewItem{Id: it.GetId(), Index: it.GetIndex(), Payload: it.GetPayload(), DeadReason: cleanReason(it.GetDeadReason())}
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Submit{Submit: cmd}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	c := res.Submit
	return &rolloutv1.SubmitItemsResponse{
		Header: s.header(term), Created: c.Created, AlreadyPending: c.AlreadyPending,
		AlreadyRunning: c.AlreadyRunning, AlreadyDone: c.AlreadyDone, Retried: c.Retried, Dead: c.Dead,
		RependedStale: c.RependedStale, CreatedDead: c.CreatedDead,
	}, nil
}

// Claim long-polls for Pending items. It returns as soon as it claimed at
// least one, when the wait elapses (with none), or with Unavailable when this
// replica stops being the serving leader.
func (s *Server) Claim(ctx context.Context, req *rolloutv1.ClaimRequest) (*rolloutv1.ClaimResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	maxItems := req.GetMaxItems()
	if maxItems == 0 {
		return nil, status.Error(codes.InvalidArgument, "max_items must be > 0")
	}
	maxItems = min(maxItems, s.cfg.MaxClaimItems)
	wait := min(time.Duration(req.GetWaitMs())*time.Millisecond, s.cfg.MaxClaimWait)

	lctx, cancel, term, err := s.node.WithLeadership(ctx)
	if err != nil {
		return nil, s.toStatus(err)
	}
	defer cancel()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	claim := &fsmpb.Command{Cmd: &fsmpb.Command_Claim{Claim: &fsmpb.ClaimCmd{Worker: req.GetWorkerId(), Max: maxItems}}}
	first := true
	for {
		signal := s.ledger.PendingSignal()
		// The first round always proposes: a claim also refreshes the
		// worker's liveness, even when nothing is pending.
		if first || s.ledger.Pending() > 0 {
			first = false
			res, t, err := s.propose(lctx, claim)
			if err == nil {
				err = res.Err
			}
			if err != nil {
				if ctx.Err() == nil && lctx.Err() != nil {
					return nil, s.notLeader("leadership lost")
				}
				return nil, s.toStatus(err)
			}
			if len(res.Items) > 0 {
				return &rolloutv1.ClaimResponse{Header: s.header(t), Items: s.withSpec(toItems(res.Items))}, nil
			}
			term = max(term, t)
		}
		select {
		case <-signal:
		case <-timer.C:
			return &rolloutv1.ClaimResponse{Header: s.header(term)}, nil
		case <-lctx.Done():
			if ctx.Err() != nil {
				return nil, s.toStatus(ctx.Err())
			}
			return nil, s.notLeader("leadership lost")
		}
	}
}

// Report completes, fails or nacks items; every report is its own CAS
// command and they share log entries.
func (s *Server) Report(ctx context.Context, req *rolloutv1.ReportRequest) (*rolloutv1.ReportResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	if len(req.GetReports()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no reports")
	}
	if len(req.GetReports()) > s.cfg.MaxSubmitItems {
		return nil, status.Errorf(codes.InvalidArgument, "too many reports in one request: %d > %d", len(req.GetReports()), s.cfg.MaxSubmitItems)
	}
	worker := req.GetWorkerId()
	cmds := make([]*fsmpb.Command, len(req.GetReports()))
	for i, r := range req.GetReports() {
		switch r.GetOutcome() {
		case rolloutv1.Outcome_OUTCOME_DONE:
			cmds[i] = &fsmpb.Command{Cmd: &fsmpb.Command_Complete{Complete: &fsmpb.CompleteCmd{
				Run: r.GetRun(), Id: r.GetId(), Worker: worker, Attempt: r.GetAttempt(), Result: r.GetResult()}}}
		case rolloutv1.Outcome_OUTCOME_FAILED:
			cmds[i] = &fsmpb.Command{Cmd: &fsmpb.Command_Fail{Fail: &fsmpb.FailCmd{
				Run: r.GetRun(), Id: r.GetId(), Worker: worker, Attempt: r.GetAttempt(), Reason: cleanReason(r.GetReason())}}}
		case rolloutv1.Outcome_OUTCOME_NACK:
			cmds[i] = &fsmpb.Command{Cmd: &fsmpb.Command_Nack{Nack: &fsmpb.NackCmd{
				Run: r.GetRun(), Id: r.GetId(), Worker: worker, Attempt: r.GetAttempt()}}}
		default:
			return nil, status.Errorf(codes.InvalidArgument, "report %d: outcome %v is not DONE, FAILED or NACK", i, r.GetOutcome())
		}
	}
	results, errs, term := s.proposeAll(ctx, cmds)
	resp := &rolloutv1.ReportResponse{Results: make([]*rolloutv1.ReportResult, len(cmds))}
	for i, r := range req.GetReports() {
		// A transport-level failure of any report fails the whole call so the
		// worker retries it; completes are idempotent.
		if errs[i] != nil {
			return nil, s.toStatus(errs[i])
		}
		rr := &rolloutv1.ReportResult{Id: r.GetId(), Status: rolloutv1.ReportStatus_REPORT_STATUS_APPLIED}
		if err := results[i].Err; err != nil {
			rr.Message = err.Error()
			switch {
			case errors.Is(err, fsm.ErrCASMiss):
				rr.Status = rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS
			case errors.Is(err, fsm.ErrConflict):
				rr.Status = rolloutv1.ReportStatus_REPORT_STATUS_CONFLICT
			case errors.Is(err, fsm.ErrRunNotFound), errors.Is(err, fsm.ErrItemNotFound):
				rr.Status = rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND
			case errors.Is(err, fsm.ErrStaleEpoch):
				return nil, s.toStatus(err)
			default:
				rr.Status = rolloutv1.ReportStatus_REPORT_STATUS_INVALID
			}
		}
		resp.Results[i] = rr
	}
	resp.Header = s.header(term)
	return resp, nil
}

// Heartbeat registers or refreshes a worker.
func (s *Server) Heartbeat(ctx context.Context, req *rolloutv1.HeartbeatRequest) (*rolloutv1.HeartbeatResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Heartbeat{Heartbeat: &fsmpb.HeartbeatCmd{
		Worker: req.GetWorkerId(), Backlog: req.GetBacklog(), Executing: toKeys(req.GetExecuting()),
		ItemsPerSec: req.GetItemsPerSec(), Held: toKeys(req.GetHeld()),
	}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	resp := &rolloutv1.HeartbeatResponse{Header: s.header(term)}
	for _, k := range res.Lost {
		resp.Lost = append(resp.Lost, &rolloutv1.ItemKey{Run: k.Run, Id: k.ID, Attempt: k.Attempt})
	}
	return resp, nil
}

// Deregister removes a worker and re-pends its items.
func (s *Server) Deregister(ctx context.Context, req *rolloutv1.DeregisterRequest) (*rolloutv1.DeregisterResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Deregister{Deregister: &fsmpb.DeregisterCmd{Worker: req.GetWorkerId()}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	return &rolloutv1.DeregisterResponse{Header: s.header(term), Repended: uint32(res.Repended)}, nil
}

// OwnedItems lists the items the ledger gives the worker (linearizable).
func (s *Server) OwnedItems(ctx context.Context, req *rolloutv1.OwnedItemsRequest) (*rolloutv1.OwnedItemsResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	term, err := s.readBarrier(ctx)
	if err != nil {
		return nil, err
	}
	return &rolloutv1.OwnedItemsResponse{Header: s.header(term), Items: s.withSpec(toItems(s.ledger.Owned(req.GetWorkerId())))}, nil
}

// Steal moves work from the busiest worker to an idle caller.
func (s *Server) Steal(ctx context.Context, req *rolloutv1.StealRequest) (*rolloutv1.StealResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Steal{Steal: &fsmpb.StealCmd{
		Thief: req.GetWorkerId(), ThiefBacklog: req.GetBacklog()}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	return &rolloutv1.StealResponse{Header: s.header(term), Victim: res.Victim, Items: s.withSpec(toItems(res.Items))}, nil
}

// RunStatus reports run counters and workers (linearizable).
func (s *Server) RunStatus(ctx context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	term, err := s.readBarrier(ctx)
	if err != nil {
		return nil, err
	}
	var runs []fsm.RunStatus
	if req.GetRun() != "" {
		r, err := s.ledger.Run(req.GetRun())
		if err != nil {
			return nil, s.toStatus(err)
		}
		runs = []fsm.RunStatus{r}
	} else {
		runs = s.ledger.Runs()
	}
	now := time.Now()
	byRun, byWorker := s.ledger.RunningConditions(now, s.cfg.FailureTimeout/2)
	resp := &rolloutv1.RunStatusResponse{Header: s.header(term), NowUnixMs: now.UnixMilli()}
	for _, r := range runs {
		rc := &rolloutv1.RunCounters{
			Name: r.Name, Total: r.Total, Pending: r.Pending, Running: r.Running, Done: r.Done, Dead: r.Dead,
			Failures: r.Failures, CreatedUnixMs: unixMs(r.CreatedAt), FinishedUnixMs: unixMs(r.FinishedAt),
		}
		if r.Spec != nil {
			rc.ExpectedTotal = r.Spec.GetTotal()
		}
		rc.RunningLong, rc.OwnerLost = byRun[r.Name].RunningLong, byRun[r.Name].OwnerLost
		resp.Runs = append(resp.Runs, rc)
	}
	for _, w := range s.ledger.Workers() {
		resp.Workers = append(resp.Workers, &rolloutv1.WorkerStatus{
			Id: w.ID, Running: w.Running, Backlog: w.Backlog, ItemsPerSec: w.ItemsPerSec,
			LastHeartbeatUnixMs: unixMs(w.LastHeartbeat), Lost: w.Lost, Completed: w.Completed,
			RunningLong: byWorker[w.ID].RunningLong, OwnerLost: byWorker[w.ID].OwnerLost,
		})
	}
	return resp, nil
}

// Results pages through a run's items in input order (linearizable).
func (s *Server) Results(ctx context.Context, req *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error) {
	if err := validRun(req.GetRun()); err != nil {
		return nil, err
	}
	term, err := s.readBarrier(ctx)
	if err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit <= 0 || limit > s.cfg.MaxResultsPage {
		limit = s.cfg.MaxResultsPage
	}
	items, next, done, err := s.ledger.Results(req.GetRun(), req.GetFromIndex(), limit)
	if err != nil {
		return nil, s.toStatus(err)
	}
	resp := &rolloutv1.ResultsResponse{Header: s.header(term), NextIndex: next, Done: done}
	resp.Items = make([]*rolloutv1.ResultItem, len(items))
	for i, it := range items {
		resp.Items[i] = &rolloutv1.ResultItem{
			Id: it.ID, Index: it.Index, State: rolloutv1.ItemState(it.State), Payload: it.Payload,
			Result: it.Result, Reason: it.Reason, Attempt: it.Attempt, Owner: it.Owner,
		}
	}
	return resp, nil
}

// Cluster describes the replica set from this replica's local view.
func (s *Server) Cluster(ctx context.Context, _ *rolloutv1.ClusterRequest) (*rolloutv1.ClusterResponse, error) {
	st := s.node.Stats()
	resp := &rolloutv1.ClusterResponse{
		Header: s.header(st.Term), State: st.State, CommitIndex: st.CommitIndex,
		AppliedIndex: st.AppliedIndex, LastLogIndex: st.LastLogIndex, LedgerEpoch: s.ledger.Epoch(),
	}
	members, err := s.node.Members()
	if err != nil {
		return nil, s.toStatus(err)
	}
	leaderID, _ := s.node.Leader()
	for _, m := range members {
		pm := &rolloutv1.Member{Id: m.ID, RaftAddr: m.Address, Suffrage: m.Suffrage, Leader: m.ID == leaderID}
		if m.ID == s.cfg.ReplicaID {
			pm.GrpcAddr = s.cfg.GRPCAddr
		} else if lm, ok := s.ledger.Member(m.ID); ok {
			pm.GrpcAddr = lm.GRPCAddr
		}
		resp.Members = append(resp.Members, pm)
	}
	return resp, nil
}

// Join adds a replica as a voter. A non-leader answers Unavailable with the
// leader's hint; the joining replica's client follows it.
func (s *Server) Join(ctx context.Context, req *rolloutv1.JoinRequest) (*rolloutv1.JoinResponse, error) {
	if req.GetId() == "" || req.GetRaftAddr() == "" || req.GetGrpcAddr() == "" {
		return nil, status.Error(codes.InvalidArgument, "join needs id, raft_addr and grpc_addr")
	}
	if _, ok := s.node.ServingTerm(); !ok {
		return nil, s.notLeader("")
	}
	if err := s.node.AddVoter(ctx, req.GetId(), req.GetRaftAddr()); err != nil {
		return nil, s.toStatus(fmt.Errorf("add voter %s: %w", req.GetId(), err))
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_SetMember{SetMember: &fsmpb.SetMemberCmd{
		Id: req.GetId(), RaftAddr: req.GetRaftAddr(), GrpcAddr: req.GetGrpcAddr()}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	s.log.Info("replica joined", "id", req.GetId(), "raft", req.GetRaftAddr(), "grpc", req.GetGrpcAddr())
	return &rolloutv1.JoinResponse{Header: s.header(term)}, nil
}

// RemoveMember removes a replica. Removing the leader itself transfers
// leadership first and answers Unavailable so the caller retries at the new
// leader.
func (s *Server) RemoveMember(ctx context.Context, req *rolloutv1.RemoveMemberRequest) (*rolloutv1.RemoveMemberResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id is empty")
	}
	if _, ok := s.node.ServingTerm(); !ok {
		return nil, s.notLeader("")
	}
	if req.GetId() == s.cfg.ReplicaID {
		if err := s.node.TransferLeadership(ctx); err != nil {
			return nil, s.toStatus(err)
		}
		return nil, s.notLeader("leadership transferred before removing this replica; retry")
	}
	if err := s.node.RemoveServer(ctx, req.GetId()); err != nil {
		return nil, s.toStatus(err)
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_RemoveMember{RemoveMember: &fsmpb.RemoveMemberCmd{Id: req.GetId()}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	return &rolloutv1.RemoveMemberResponse{Header: s.header(term)}, nil
}

// RunFailureScan runs the leader's failure scan until ctx ends: whenever
// this replica is the serving leader and its ledger shows a worker silent for
// longer than FailureTimeout, it proposes an ExpireWorkers command (the ledger
// decides from stamped times which workers really expired).
func (s *Server) RunFailureScan(ctx context.Context) {
	t := time.NewTicker(s.cfg.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, ok := s.node.ServingTerm(); !ok {
			continue
		}
		now := time.Now()
		due := false
		for _, w := range s.ledger.Workers() {
			if !w.Lost && now.Sub(w.LastHeartbeat) > s.cfg.FailureTimeout {
				due = true
				break
			}
		}
		if !due {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, s.cfg.FailureTimeout)
		res, _, err := s.propose(pctx, &fsmpb.Command{Cmd: &fsmpb.Command_Expire{Expire: &fsmpb.ExpireWorkersCmd{
			TimeoutNano: s.cfg.FailureTimeout.Nanoseconds()}}})
		cancel()
		if err != nil {
			s.log.Debug("failure scan proposal failed", "error", err)
			continue
		}
		if len(res.Expired) > 0 {
			s.log.Warn("workers expired; their items are pending again", "workers", res.Expired, "repended", res.Repended)
		}
	}
}
