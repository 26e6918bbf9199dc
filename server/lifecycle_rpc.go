package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/internal/mtls"
)

// CancelRun (client, for its own runs; admin or gateway, any run) cancels a
// run: see fsm's CancelRunCmd. The run's event names the caller's
// certificate. An unknown run is NotFound; another tenant's run is
// PermissionDenied naming its owner (tenant.go).
func (s *Server) CancelRun(ctx context.Context, req *rolloutv1.CancelRunRequest) (*rolloutv1.CancelRunResponse, error) {
	if err := validRun(req.GetRun()); err != nil {
		return nil, err
	}
	if err := s.checkOwner(ctx, "cancel", req.GetRun()); err != nil {
		return nil, err
	}
	if handled, resp, err := s.fedCancel(ctx, req.GetRun()); handled {
		return resp, err // a run handed to a peer: a durable intent
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_CancelRun{CancelRun: &fsmpb.CancelRunCmd{
		Run: req.GetRun(), By: caller(ctx), Started: s.startedMarks(req.GetRun())}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	resp := &rolloutv1.CancelRunResponse{Header: s.header(term), Cancelled: uint64(res.Repended)}
	if r, err := s.ledger.Run(req.GetRun()); err == nil {
		resp.Running = r.Running
	}
	s.log.Info("run cancelled", "run", req.GetRun(), "by", caller(ctx), "items", res.Repended, "still running", resp.Running)
	return resp, nil
}

// DeleteRun (client, for its own runs; admin or gateway, any run; another
// tenant's run is PermissionDenied naming its owner) removes a finished or
// cancelled run's records
// from the ledger (FailedPrecondition for an active run: cancel it first).
// It answers the run's store URL so that the caller can remove the run's
// objects: replicas never touch the data plane.
func (s *Server) DeleteRun(ctx context.Context, req *rolloutv1.DeleteRunRequest) (*rolloutv1.DeleteRunResponse, error) {
	if err := validRun(req.GetRun()); err != nil {
		return nil, err
	}
	if err := s.checkOwner(ctx, "delete", req.GetRun()); err != nil {
		return nil, err
	}
	if handled, resp, err := s.fedDelete(ctx, req.GetRun()); handled {
		return resp, err // a run handed to a peer: a durable intent
	}
	var store, prefix string
	if r, err := s.ledger.Run(req.GetRun()); err == nil {
		store = r.Spec.GetStore()
		prefix = fsm.RunDataPrefix(req.GetRun(), r.Spec.GetDataPrefix())
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_DeleteRun{DeleteRun: &fsmpb.DeleteRunCmd{
		Run: req.GetRun(), By: caller(ctx)}}})
	if err == nil {
		err = res.Err
	}
	if errors.Is(err, fsm.ErrRunActive) {
		return nil, status.Errorf(codes.FailedPrecondition, "%v", err)
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	s.log.Info("run deleted", "run", req.GetRun(), "by", caller(ctx), "items", res.Repended)
	return &rolloutv1.DeleteRunResponse{Header: s.header(term), Items: uint64(res.Repended), Store: store, DataPrefix: prefix}, nil
}

// caller names the certificate of the caller for the event history.
func caller(ctx context.Context) string {
	id, err := mtls.PeerIdentity(ctx)
	if err != nil {
		return "an unauthenticated caller (insecure)"
	}
	return limits.CleanText(fmt.Sprintf("%s (role %s)", id.Name, id.Role), limits.MaxWorkerIDBytes)
}

// checkCapacity refuses, before anything is proposed, a submit that would
// take the ledger past CapacityItems or CapacityBytes: for a run the ledger
// does not hold yet, by the whole run (its spec's total, when larger than
// the request); otherwise by the request's items.
func (s *Server) checkCapacity(req *rolloutv1.SubmitItemsRequest) error {
	if s.cfg.CapacityItems == 0 && s.cfg.CapacityBytes == 0 {
		return nil
	}
	add := uint64(len(req.GetItems()))
	if _, err := s.ledger.Run(req.GetRun()); errors.Is(err, fsm.ErrRunNotFound) {
		add = max(add, req.GetSpec().GetTotal())
	}
	var inline uint64
	for _, it := range req.GetItems() {
		inline += uint64(len(it.GetPayload()))
	}
	if add > uint64(len(req.GetItems())) {
		inline = inline / max(uint64(len(req.GetItems())), 1) * add
	}
	return s.checkRecords(add, inline)
}

// checkRecords refuses, before anything is proposed, a submit that would
// add add ledger records (items or ranges) and about inline bytes of
// inline data to the ledger past CapacityItems or CapacityBytes.
func (s *Server) checkRecords(add, inline uint64) error {
	if s.cfg.CapacityItems == 0 && s.cfg.CapacityBytes == 0 {
		return nil
	}
	items, bytes := s.ledger.Usage()
	addBytes := add*fsm.ItemBytes + inline
	switch {
	case s.cfg.CapacityItems > 0 && items+add > s.cfg.CapacityItems:
		return status.Errorf(codes.ResourceExhausted,
			"submit refused, nothing was changed: the ledger's capacity is %d items; %d are in use and this would add %d (delete finished runs, or raise --capacity-items)",
			s.cfg.CapacityItems, items, add)
	case s.cfg.CapacityBytes > 0 && bytes+addBytes > s.cfg.CapacityBytes:
		return status.Errorf(codes.ResourceExhausted,
			"submit refused, nothing was changed: the ledger's capacity is %d bytes; %d are in use and this would add about %d (delete finished runs, or raise --capacity-bytes)",
			s.cfg.CapacityBytes, bytes, addBytes)
	}
	return nil
}

// sweepRetention proposes the deletion of every run whose retention has
// passed (the leader's part of RunFailureScan).
func (s *Server) sweepRetention(ctx context.Context) {
	for _, due := range s.ledger.RetentionDue(time.Now().UnixNano(), 16) {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.FailureTimeout)
		res, _, err := s.propose(pctx, &fsmpb.Command{Cmd: &fsmpb.Command_DeleteRun{DeleteRun: &fsmpb.DeleteRunCmd{
			Run: due.Run, By: "retention", RetentionNano: due.RetainNano}}})
		cancel()
		if err == nil {
			err = res.Err
		}
		if err != nil {
			s.log.Debug("retention sweep proposal failed", "run", due.Run, "error", err)
			continue
		}
		if res.Repended > 0 {
			s.log.Info("run deleted: its retention passed", "run", due.Run, "items", res.Repended)
		}
	}
}

// lifecycleRPCs declares CancelRun's and DeleteRun's authorization: a
// client, admin or gateway (the handlers hold a client to its own tenant's
// runs), or a peer cluster for a run under its prefix.
func lifecycleRPCs() []rpcSpec {
	return []rpcSpec{
		{Method: rolloutv1.Coordinator_CancelRun_FullMethodName, Roles: submitterRoles(), PeerRun: true},
		{Method: rolloutv1.Coordinator_DeleteRun_FullMethodName, Roles: submitterRoles(), PeerRun: true},
	}
}
