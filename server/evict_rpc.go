package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/internal/mtls"
)

// EvictWorker (admin) removes a worker from the ledger (its eviction event
// names the operator's certificate): its Running items go
// back to Pending at once (attempt unchanged, so its later reports are CAS
// misses) and its Claim, Steal and Heartbeat get FailedPrecondition until it
// registers again. An unknown worker is NotFound and changes nothing. Who may
// call it is decided before the handler (the admin role).
func (s *Server) EvictWorker(ctx context.Context, req *rolloutv1.EvictWorkerRequest) (*rolloutv1.EvictWorkerResponse, error) {
	if err := validWorkerID(req.GetWorkerId()); err != nil {
		return nil, err
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_Deregister{Deregister: &fsmpb.DeregisterCmd{
		Worker: req.GetWorkerId(), Evicted: true, Reason: evictReason(ctx)}}})
	if err == nil {
		err = res.Err
	}
	if errors.Is(err, fsm.ErrWorkerNotRegistered) {
		return nil, status.Errorf(codes.NotFound, "worker %q is not registered: nothing to evict", req.GetWorkerId())
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	s.log.Warn("worker evicted; its items are pending again", "worker", req.GetWorkerId(), "repended", res.Repended)
	return &rolloutv1.EvictWorkerResponse{Header: s.header(term), Repended: uint64(res.Repended)}, nil
}

// evictReason is the detail of an eviction's event: who asked for it.
func evictReason(ctx context.Context) string {
	id, err := mtls.PeerIdentity(ctx)
	if err != nil {
		return "evicted by an operator"
	}
	return limits.CleanReason(fmt.Sprintf("evicted by %s (role %s)", id.Name, id.Role))
}

// evictRPCs declares EvictWorker's authorization: admin only.
func evictRPCs() []rpcSpec {
	return []rpcSpec{adminOnly(rolloutv1.Coordinator_EvictWorker_FullMethodName)}
}
