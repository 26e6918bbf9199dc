package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/internal/mtls"
)

// Claim long-polls for Pending items. Each item comes with its run's model,
// sampling and kind and its dependencies' results (see deliver); a reply
// holds only as many items as fit in a message, and the claimed items that
// do not fit are nacked back to Pending at once (an item too large to fit
// even alone is failed with a reason that says so). It returns as soon as it
// claimed at least one, when the wait elapses (with none), or with Unavailable when this
// replica stops being the serving leader. A worker that is not registered
// gets FailedPrecondition (see rolloutv1.NotRegisteredError).
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
	if _, err := s.liveWorker(req.GetWorkerId()); err != nil {
		return nil, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	claim := &fsmpb.Command{Cmd: &fsmpb.Command_Claim{Claim: &fsmpb.ClaimCmd{Worker: req.GetWorkerId(), Max: maxItems,
		MaxIndexes: req.GetMaxIndexes()}}}
	for {
		signal := s.ledger.PendingSignal()
		// A round proposes only when an item of the worker's kinds and
		// models is claimable: liveness is leader-local (liveWorker
		// recorded this call), so an idle fleet's long-polls write nothing
		// to the log, and pending items of other kinds or models never make
		// a long-poll spin.
		if s.ledger.Claimable(req.GetWorkerId(), time.Now()) > 0 {
			res, t, err := s.propose(lctx, claim)
			if err == nil {
				err = res.Err
			}
			if err != nil {
				if ctx.Err() == nil && lctx.Err() != nil {
					return nil, s.notLeader("leadership lost")
				}
				return nil, s.workerStatus(req.GetWorkerId(), err)
			}
			if len(res.Items) > 0 {
				items, over, tooLarge := s.deliver(res.Items)
				s.giveBack(ctx, req.GetWorkerId(), over, tooLarge)
				return &rolloutv1.ClaimResponse{Header: s.header(t), Items: items}, nil
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

// Report completes, fails or nacks items. Every report is its own CAS
// command, and the request's commands are proposed as one batch (one log
// entry unless the batch is larger than an entry holds). results[i]
// answers reports[i]. A failure of the replica (or a stale epoch) fails the
// whole call so that the worker retries it; completes are idempotent.
func (s *Server) Report(ctx context.Context, req *rolloutv1.ReportRequest) (*rolloutv1.ReportResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	s.touch(req.GetWorkerId())
	if len(req.GetReports()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no reports")
	}
	if len(req.GetReports()) > s.cfg.MaxSubmitItems {
		return nil, status.Errorf(codes.InvalidArgument, "too many reports in one request: %d > %d", len(req.GetReports()), s.cfg.MaxSubmitItems)
	}
	worker := req.GetWorkerId()
	// at[i] says which command answers report i: cmds[at[i].cmd], item
	// at[i].item of it when it is a CompleteMany (-1 otherwise).
	type pos struct{ cmd, item int }
	at := make([]pos, len(req.GetReports()))
	cmds := make([]*fsmpb.Command, 0, len(req.GetReports()))
	// Completions by reference of one run in one object share a
	// CompleteMany: the run, the worker and the object are logged once.
	many := map[[2]string]int{}
	var invalid map[int]string
	for i, r := range req.GetReports() {
		// A result lives under its run's result prefix: a worker cannot
		// make the run's readers fetch another object of the store.
		if ref := r.GetResultRef(); ref != nil && !strings.HasPrefix(ref.GetObject(), s.resultPrefix(r.GetRun())) {
			at[i] = pos{-1, -1}
			if invalid == nil {
				invalid = map[int]string{}
			}
			invalid[i] = fmt.Sprintf("result_ref object %q is not under the run's result prefix %q; nothing was recorded",
				ref.GetObject(), s.resultPrefix(r.GetRun()))
			continue
		}
		if ref := r.GetResultRef(); r.GetOutcome() == rolloutv1.Outcome_OUTCOME_DONE && ref != nil && len(r.GetResult()) == 0 &&
			len(ref.GetBlake3()) == 32 {
			k := [2]string{r.GetRun(), ref.GetObject()}
			ci, ok := many[k]
			if !ok {
				ci = len(cmds)
				many[k] = ci
				cmds = append(cmds, &fsmpb.Command{Cmd: &fsmpb.Command_CompleteMany{CompleteMany: &fsmpb.CompleteManyCmd{
					Run: r.GetRun(), Worker: worker, Object: ref.GetObject()}}})
			}
			cm := cmds[ci].GetCompleteMany()
			at[i] = pos{ci, len(cm.Ids)}
			cm.Ids = append(cm.Ids, r.GetId())
			cm.Attempts = append(cm.Attempts, r.GetAttempt())
			cm.Offsets = append(cm.Offsets, ref.GetOffset())
			cm.Lengths = append(cm.Lengths, ref.GetLength())
			cm.Hashes = append(cm.Hashes, ref.GetBlake3()...)
			if len(r.GetSummary()) > 0 && len(cm.Summaries) == 0 {
				cm.Summaries = make([][]byte, len(cm.Ids)-1, cap(cm.Ids))
			}
			if len(cm.Summaries) > 0 || len(r.GetSummary()) > 0 {
				cm.Summaries = append(cm.Summaries, r.GetSummary())
			}
			continue
		}
		at[i] = pos{len(cmds), -1}
		switch r.GetOutcome() {
		case rolloutv1.Outcome_OUTCOME_DONE:
			cmds = append(cmds, &fsmpb.Command{Cmd: &fsmpb.Command_Complete{Complete: &fsmpb.CompleteCmd{
				Run: r.GetRun(), Id: r.GetId(), Worker: worker, Attempt: r.GetAttempt(), Result: r.GetResult(),
				ResultRef: fromRef(r.GetResultRef()), Summary: r.GetSummary()}}})
		case rolloutv1.Outcome_OUTCOME_FAILED:
			cmds = append(cmds, &fsmpb.Command{Cmd: &fsmpb.Command_Fail{Fail: &fsmpb.FailCmd{
				Run: r.GetRun(), Id: r.GetId(), Worker: worker, Attempt: r.GetAttempt(), Reason: limits.CleanReason(r.GetReason()),
				Permanent: r.GetPermanent()}}})
		case rolloutv1.Outcome_OUTCOME_NACK:
			cmds = append(cmds, &fsmpb.Command{Cmd: &fsmpb.Command_Nack{Nack: &fsmpb.NackCmd{
				Run: r.GetRun(), Id: r.GetId(), Worker: worker, Attempt: r.GetAttempt()}}})
		case rolloutv1.Outcome_OUTCOME_HELD:
			// The item's input object is missing or changed, or the run's
			// store could not be reached (store_unavailable): no failure is
			// counted and the run stalls on the object, or is isolated once
			// enough workers say its store is unreachable (fsm HoldCmd).
			cmds = append(cmds, &fsmpb.Command{Cmd: &fsmpb.Command_Hold{Hold: &fsmpb.HoldCmd{
				Run: r.GetRun(), Id: r.GetId(), Worker: worker, Attempt: r.GetAttempt(),
				Object: r.GetHeldObject(), Reason: limits.CleanReason(r.GetReason()),
				StoreUnavailable: r.GetStoreUnavailable()}}})
		default:
			return nil, status.Errorf(codes.InvalidArgument, "report %d: outcome %v is not DONE, FAILED, NACK or HELD", i, r.GetOutcome())
		}
	}
	var results []fsm.Result
	var term uint64
	var err error
	if len(cmds) > 0 {
		results, term, err = s.proposeAll(ctx, cmds)
		if err != nil {
			return nil, s.toStatus(err)
		}
	} else if term, err = s.readBarrier(ctx); err != nil {
		return nil, err
	}
	resp := &rolloutv1.ReportResponse{Results: make([]*rolloutv1.ReportResult, len(req.GetReports()))}
	for i, r := range req.GetReports() {
		rr := &rolloutv1.ReportResult{Id: r.GetId(), Status: rolloutv1.ReportStatus_REPORT_STATUS_APPLIED}
		if msg, bad := invalid[i]; bad {
			rr.Status, rr.Message = rolloutv1.ReportStatus_REPORT_STATUS_INVALID, msg
			resp.Results[i] = rr
			continue
		}
		res := results[at[i].cmd]
		if at[i].item >= 0 && res.Err == nil {
			res = res.Each[at[i].item]
		}
		if err := res.Err; err != nil {
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

// Deregister removes a worker and re-pends its items. Deregistering a worker
// the ledger does not hold succeeds with nothing re-pended. The request's
// reason is cleaned (limits.CleanReason: one line, bounded) and recorded in the
// worker's deregistration event.
func (s *Server) Deregister(ctx context.Context, req *rolloutv1.DeregisterRequest) (*rolloutv1.DeregisterResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Deregister{Deregister: &fsmpb.DeregisterCmd{
		Worker: req.GetWorkerId(), Reason: limits.CleanReason(req.GetReason())}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	s.live.Forget(req.GetWorkerId())
	return &rolloutv1.DeregisterResponse{Header: s.header(term), Repended: uint64(res.Repended)}, nil
}

// OwnedItems lists the items the ledger gives the worker (linearizable),
// with their run's spec fields and dependencies' results like Claim. When
// they do not all fit in one message it lists a prefix in claim order and
// sets truncated.
func (s *Server) OwnedItems(ctx context.Context, req *rolloutv1.OwnedItemsRequest) (*rolloutv1.OwnedItemsResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	term, err := s.readBarrier(ctx)
	if err != nil {
		return nil, err
	}
	items, over, tooLarge := s.deliver(s.ledger.Owned(req.GetWorkerId()))
	// Owned items may be executing: they are listed, not given back.
	return &rolloutv1.OwnedItemsResponse{Header: s.header(term), Items: items, Truncated: len(over)+len(tooLarge) > 0}, nil
}

// Steal moves work from the busiest worker to an idle caller; an unregistered
// caller gets FailedPrecondition and must Register. Stolen items are
// delivered like claimed ones (see Claim), and those that do not fit in the
// reply are nacked.
func (s *Server) Steal(ctx context.Context, req *rolloutv1.StealRequest) (*rolloutv1.StealResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	term, err := s.liveWorker(req.GetWorkerId())
	if err != nil {
		return nil, err
	}
	if req.GetBacklog() > 0 {
		return nil, s.workerStatus(req.GetWorkerId(), notIdle(req.GetWorkerId(), req.GetBacklog()))
	}
	// The leader chooses the victim from the ledger and its own view of
	// progress; with none, nothing is proposed.
	victim, executing := s.stealVictim(term, req.GetWorkerId())
	if victim == "" {
		return &rolloutv1.StealResponse{Header: s.header(term)}, nil
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Steal{Steal: &fsmpb.StealCmd{
		Thief: req.GetWorkerId(), ThiefBacklog: req.GetBacklog(), ByLeader: true, Victim: victim, VictimExecuting: executing}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.workerStatus(req.GetWorkerId(), err)
	}
	items, over, tooLarge := s.deliver(res.Items)
	s.giveBack(ctx, req.GetWorkerId(), over, tooLarge)
	return &rolloutv1.StealResponse{Header: s.header(term), Victim: res.Victim, Items: items}, nil
}

// Register registers the calling worker, or refreshes a registered one
// (its items stay its). Workers register only this way: Claim, Steal and
// Heartbeat never register an unknown worker.
func (s *Server) Register(ctx context.Context, req *rolloutv1.RegisterRequest) (*rolloutv1.RegisterResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	reg := &fsmpb.RegisterWorkerCmd{Worker: req.GetWorkerId(), Kinds: req.GetKinds(), Models: req.GetModels()}
	if c, err := mtls.PeerCertificate(ctx); err == nil {
		// The ledger refuses a revoked certificate even before this
		// replica's revocation set has caught up with the commit.
		reg.CertSerial = mtls.SerialOf(c)
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Register{Register: reg}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	s.touch(req.GetWorkerId())
	return &rolloutv1.RegisterResponse{Header: s.header(term)}, nil
}

// workerStatus maps the error of a worker's Claim, Steal or Heartbeat: the
// ledger's ErrWorkerNotRegistered is FailedPrecondition telling the worker to
// Register; anything else as toStatus maps it.
func (s *Server) workerStatus(workerID string, err error) error {
	if errors.Is(err, fsm.ErrWorkerNotRegistered) {
		return rolloutv1.NotRegisteredError(workerID)
	}
	return s.toStatus(err)
}

// workerRPCs declares the worker RPCs' authorization: role worker, and
// worker_id equal to the certificate's name.
func workerRPCs() []rpcSpec {
	return []rpcSpec{
		workerSelf(rolloutv1.Coordinator_Claim_FullMethodName),
		workerSelf(rolloutv1.Coordinator_Report_FullMethodName),
		workerSelf(rolloutv1.Coordinator_Deregister_FullMethodName),
		workerSelf(rolloutv1.Coordinator_OwnedItems_FullMethodName),
		workerSelf(rolloutv1.Coordinator_Steal_FullMethodName),
		workerSelf(rolloutv1.Coordinator_Register_FullMethodName),
	}
}
