package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/server/liveness"
	"math"
	"time"
)

// Heartbeat: a worker tells the leader it is alive and what it holds.

// heartbeatRPCs declares the Heartbeat RPC's authorization: a worker, as
// itself.
func heartbeatRPCs() []rpcSpec {
	return []rpcSpec{{Method: rolloutv1.Coordinator_Heartbeat_FullMethodName, Roles: []mtls.Role{mtls.RoleWorker}, WorkerSelf: true}}
}

// Heartbeat refreshes a registered worker's liveness in the leader's memory
// (server/liveness): it is a plain RPC, never a Raft command. An
// unregistered or Lost worker gets FailedPrecondition and must Register. The
// reply lists the held items the worker lost and the current bounds of its
// held ranges (a steal may have cut a range's end), read from this leader's
// ledger, and the interval the leader asks until the next heartbeat (it
// grows with the fleet). An executing range's started is its progress mark,
// past which a steal the leader decides may split it. Only the serving
// leader answers; other replicas answer Unavailable with a leader hint.
func (s *Server) Heartbeat(ctx context.Context, req *rolloutv1.HeartbeatRequest) (*rolloutv1.HeartbeatResponse, error) {
	id := req.GetWorkerId()
	if err := authorizeWorker(ctx, id); err != nil {
		return nil, err
	}
	if r := req.GetItemsPerSec(); math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "items_per_sec is %v, must be finite and >= 0", r)
	}
	if err := s.checkKeys("executing", req.GetExecuting()); err != nil {
		return nil, err
	}
	if err := s.checkKeys("held", req.GetHeld()); err != nil {
		return nil, err
	}
	term, err := s.liveWorker(id)
	if err != nil {
		return nil, err
	}
	p := liveness.Progress{Backlog: req.GetBacklog(), ItemsPerSec: req.GetItemsPerSec()}
	// The leader keeps at most maxExecutingKept keys per worker: its memory
	// stays bounded whatever a worker sends (beyond them, a steal may take
	// an executing record; the owner's report of it then misses).
	if n := min(len(req.GetExecuting()), maxExecutingKept); n > 0 {
		p.Executing = make([]liveness.Key, n)
		for i, k := range req.GetExecuting()[:n] {
			p.Executing[i] = liveness.Key{Run: k.GetRun(), ID: k.GetId(), Attempt: k.GetAttempt(), Started: k.GetStarted()}
		}
	}
	s.live.Heartbeat(term, id, time.Now(), p)
	held := make([]fsm.ItemKey, len(req.GetHeld()))
	for i, k := range req.GetHeld() {
		held[i] = fsm.ItemKey{Run: k.GetRun(), ID: k.GetId(), Attempt: k.GetAttempt()}
	}
	lost, bounds := s.ledger.Held(id, held)
	n := s.fleetSize()
	resp := &rolloutv1.HeartbeatResponse{Header: s.header(term), Bounds: toBounds(bounds),
		NextHeartbeatMs: uint64(s.liveCfg.Interval(n).Milliseconds()), TtlMs: uint64(s.liveCfg.TTL(n).Milliseconds())}
	for _, k := range lost {
		resp.Lost = append(resp.Lost, &rolloutv1.ItemKey{Run: k.Run, Id: k.ID, Attempt: k.Attempt})
	}
	return resp, nil
}
