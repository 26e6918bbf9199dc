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
)

// SubmitRanges creates a range run or adds input chunks to one, in one
// ledger command (fsm SubmitRangesCmd). The whole request is checked first
// (validate.Limits.CheckRangesRequest: run name, at least one range, counts
// and sizes, the spec with its store, each range's count and payload_ref,
// no two ranges overlapping); a refusal is INVALID_ARGUMENT naming the
// field, and nothing is proposed. The capacity check charges one ledger
// record per range (a range run's ledger cost grows with its ranges, not
// its items). The reply's counts are in items (indexes).
func (s *Server) SubmitRanges(ctx context.Context, req *rolloutv1.SubmitRangesRequest) (*rolloutv1.SubmitRangesResponse, error) {
	if err := s.cfg.Limits.CheckRangesRequest(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "submit refused, nothing was changed: %v", err)
	}
	if err := s.checkRecords(uint64(len(req.GetRanges())), 0); err != nil {
		return nil, err
	}
	cmd := submitRangesCommand(req)
	sub := cmd.GetSubmitRanges()
	as, spec, err := s.submitAs(ctx, "submit", req.GetRun(), sub.Spec)
	if err != nil {
		return nil, err
	}
	sub.Tenant, sub.Spec = as, spec
	objects := make([]string, 0, len(sub.GetRanges()))
	for _, r := range sub.GetRanges() {
		objects = append(objects, r.GetPayloadRef().GetObject())
	}
	if err := s.checkPayloadObjects("submit", req.GetRun(), spec, objects, false); err != nil {
		return nil, err
	}
	if handled, resp, err := s.fedSubmitRanges(ctx, req, as, spec); handled {
		return resp, err // a run routed to a peer (federation.go)
	}
	sub.StaleByLeader, sub.StaleWorkers = s.staleWorkers(time.Duration(sub.GetRependStaleNano()))
	res, term, err := s.propose(ctx, cmd)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	c := res.Submit
	return &rolloutv1.SubmitRangesResponse{
		Header: s.header(term), Created: c.Created, AlreadyPending: c.AlreadyPending,
		AlreadyRunning: c.AlreadyRunning, AlreadyDone: c.AlreadyDone, Retried: c.Retried, Dead: c.Dead,
		RependedStale: c.RependedStale, CreatedDead: c.CreatedDead,
	}, nil
}

// submitRangesCommand is the ledger command of a checked SubmitRanges
// request.
func submitRangesCommand(req *rolloutv1.SubmitRangesRequest) *fsmpb.Command {
	cmd := &fsmpb.SubmitRangesCmd{Run: req.GetRun(), Spec: specCmd(req.GetSpec()), RetryDead: req.GetRetryDead(),
		RependStaleNano: int64(req.GetStaleAfterMs()) * int64(time.Millisecond)}
	cmd.Ranges = make([]*fsmpb.NewRange, len(req.GetRanges()))
	for i, r := range req.GetRanges() {
		cmd.Ranges[i] = &fsmpb.NewRange{Index: r.GetIndex(), Count: r.GetCount(), PayloadRef: fromRef(r.GetPayloadRef())}
	}
	return &fsmpb.Command{Cmd: &fsmpb.Command_SubmitRanges{SubmitRanges: cmd}}
}

// specCmd converts a request's run spec to the ledger's; nil stays nil.
func specCmd(sp *rolloutv1.RunSpec) *fsmpb.RunSpec {
	if sp == nil {
		return nil
	}
	return &fsmpb.RunSpec{MaxFailures: sp.GetMaxFailures(), Model: sp.GetModel(), Sampling: sp.GetSampling(), Total: sp.GetTotal(), Kind: sp.GetKind(),
		Store: sp.GetStore(), RetainNano: int64(sp.GetRetainMs()) * int64(time.Millisecond),
		Tenant: sp.GetTenant(), Priority: sp.GetPriority(), DataPrefix: sp.GetDataPrefix(), Origin: sp.GetOrigin()}
}

// ReportRange reports progress on Running ranges: every report is its own
// CAS command (fsm ReportRangeCmd), and the request's commands are
// proposed as one batch. results[i] answers reports[i]. A report whose
// shape is wrong (validate.Limits.CheckRangeReport: done_to below lo, a
// failed index outside [lo, done_to), no result_ref for done indexes) fails
// the whole call with INVALID_ARGUMENT naming the field, and nothing is
// proposed; a result_ref outside the run's result prefix is an INVALID
// result of that report only (as in Report). CAS misses (a stale owner,
// attempt or bound: a steal cut the range), conflicts and unknown ranges
// are results, never transport errors; a failure of the replica (or a stale
// epoch) fails the whole call so that the worker retries it (an identical
// retry is a duplicate, not a second application).
func (s *Server) ReportRange(ctx context.Context, req *rolloutv1.ReportRangeRequest) (*rolloutv1.ReportRangeResponse, error) {
	if err := authorizeWorker(ctx, req.GetWorkerId()); err != nil {
		return nil, err
	}
	s.touch(req.GetWorkerId())
	reports := req.GetReports()
	if len(reports) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no reports")
	}
	if len(reports) > s.cfg.MaxSubmitItems {
		return nil, status.Errorf(codes.InvalidArgument, "too many reports in one request: %d > %d", len(reports), s.cfg.MaxSubmitItems)
	}
	failed := 0
	for i, r := range reports {
		if err := s.cfg.Limits.CheckRangeReport(i, r); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "report refused, nothing was changed: %v", err)
		}
		failed += len(r.GetFailed())
	}
	if failed > s.cfg.Limits.MaxItemsPerRequest {
		return nil, status.Errorf(codes.InvalidArgument, "report refused, nothing was changed: %d failed indexes in one request, the limit is %d",
			failed, s.cfg.Limits.MaxItemsPerRequest)
	}
	worker := req.GetWorkerId()
	at := make([]int, len(reports)) // at[i]: the command of report i, -1 when invalid
	cmds := make([]*fsmpb.Command, 0, len(reports))
	var invalid map[int]string
	for i, r := range reports {
		// A result lives under its run's result prefix: a worker cannot
		// make the run's readers fetch another object of the store.
		if ref := r.GetResultRef(); ref != nil && !strings.HasPrefix(ref.GetObject(), s.resultPrefix(r.GetRun())) {
			at[i] = -1
			if invalid == nil {
				invalid = map[int]string{}
			}
			invalid[i] = fmt.Sprintf("result_ref object %q is not under the run's result prefix %q; nothing was recorded",
				ref.GetObject(), s.resultPrefix(r.GetRun()))
			continue
		}
		at[i] = len(cmds)
		cmds = append(cmds, &fsmpb.Command{Cmd: &fsmpb.Command_ReportRange{ReportRange: reportRangeCmd(worker, r)}})
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
	resp := &rolloutv1.ReportRangeResponse{Results: make([]*rolloutv1.RangeReportResult, len(reports))}
	for i, r := range reports {
		rr := &rolloutv1.RangeReportResult{Id: r.GetId(), Status: rolloutv1.ReportStatus_REPORT_STATUS_APPLIED}
		resp.Results[i] = rr
		if msg, bad := invalid[i]; bad {
			rr.Status, rr.Message = rolloutv1.ReportStatus_REPORT_STATUS_INVALID, msg
			continue
		}
		res := results[at[i]]
		if err := res.Err; err != nil {
			if errors.Is(err, fsm.ErrStaleEpoch) {
				return nil, s.toStatus(err)
			}
			rr.Status, rr.Message = reportStatus(err), err.Error()
			continue
		}
		rr.Duplicate = res.Duplicate
		rr.Repended = uint64(max(res.Repended, 0))
	}
	resp.Header = s.header(term)
	return resp, nil
}

// reportRangeCmd is the ledger command of one checked RangeReport.
func reportRangeCmd(worker string, r *rolloutv1.RangeReport) *fsmpb.ReportRangeCmd {
	c := &fsmpb.ReportRangeCmd{Run: r.GetRun(), Id: r.GetId(), Worker: worker, Attempt: r.GetAttempt(),
		Lo: r.GetLo(), DoneTo: r.GetDoneTo(), ResultRef: fromRef(r.GetResultRef()), NackRest: r.GetNackRest(), ReleaseFrom: r.GetReleaseFrom()}
	if len(r.GetFailed()) > 0 {
		c.Failed = make([]*fsmpb.FailedIndex, len(r.GetFailed()))
		for k, f := range r.GetFailed() {
			c.Failed[k] = &fsmpb.FailedIndex{Index: f.GetIndex(), Reason: limits.CleanReason(f.GetReason()), Permanent: f.GetPermanent()}
		}
	}
	return c
}

// reportStatus maps the ledger's refusal of one report (Report's or
// ReportRange's) to its result status.
func reportStatus(err error) rolloutv1.ReportStatus {
	switch {
	case errors.Is(err, fsm.ErrCASMiss):
		return rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS
	case errors.Is(err, fsm.ErrConflict):
		return rolloutv1.ReportStatus_REPORT_STATUS_CONFLICT
	case errors.Is(err, fsm.ErrRunNotFound), errors.Is(err, fsm.ErrItemNotFound):
		return rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND
	default:
		return rolloutv1.ReportStatus_REPORT_STATUS_INVALID
	}
}

// toBounds converts a heartbeat's range bounds.
func toBounds(bs []fsm.RangeBound) []*rolloutv1.RangeBound {
	if len(bs) == 0 {
		return nil
	}
	out := make([]*rolloutv1.RangeBound, len(bs))
	for i, b := range bs {
		out[i] = &rolloutv1.RangeBound{Run: b.Run, Id: b.ID, Attempt: b.Attempt, Lo: b.Lo, Hi: b.Hi}
	}
	return out
}

// rangesRPCs declares the range RPCs' authorization: SubmitRanges as
// SubmitItems (a peer cluster too, for a run under its prefix);
// ReportRange a worker, as itself.
func rangesRPCs() []rpcSpec {
	return []rpcSpec{
		{Method: rolloutv1.Coordinator_SubmitRanges_FullMethodName, Roles: submitterRoles(), PeerRun: true},
		workerSelf(rolloutv1.Coordinator_ReportRange_FullMethodName),
	}
}
