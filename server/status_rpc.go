package server

import (
	"context"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"time"
)

// RunStatus: a run's counters and the workers, read by clients and the dashboards.

// statusRPCs declares RunStatus's authorization: a client, admin, gateway,
// or a replica (its web dashboard reads through the leader; a replica holds
// the whole ledger already); a peer cluster for one run under its prefix
// (answered without the workers: see RunStatus).
func statusRPCs() []rpcSpec {
	return []rpcSpec{{Method: rolloutv1.Coordinator_RunStatus_FullMethodName, Roles: readerRoles(), PeerRun: true}}
}

// RunStatus reports run counters and workers (linearizable); to a peer
// cluster (Authz holds it to one run under its prefix) without the
// workers. A run's
// unserved_model is computed here, from the workers the ledger holds now
// (see unservedModels).
func (s *Server) RunStatus(ctx context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	term, err := s.readBarrier(ctx)
	if err != nil {
		return nil, err
	}
	var runs []fsm.RunStatus
	var handles []fsm.HandleStatus // runs handed to peers (federation.go)
	if req.GetRun() != "" {
		r, err := s.ledger.Run(req.GetRun())
		if h, herr := s.ledger.Handle(req.GetRun()); err != nil && herr == nil {
			handles = []fsm.HandleStatus{h}
		} else if err != nil {
			return nil, s.toStatus(err)
		} else {
			runs = []fsm.RunStatus{r}
		}
	} else {
		runs = s.ledger.Runs()
		handles = s.ledger.Handles()
	}
	now := time.Now()
	var running uint64 // every run's, for the shares
	for _, t := range s.ledger.Tenants() {
		running += t.Running
	}
	byRun, byWorker := s.ledger.RunningConditions(now, s.TTL()/2, s.seen())
	workers := s.WorkerViews(s.ledger.Workers())
	unserved := unservedModels(runs, workers)
	resp := &rolloutv1.RunStatusResponse{Header: s.header(term), NowUnixMs: now.UnixMilli()}
	for _, r := range runs {
		rc := &rolloutv1.RunCounters{
			Name: r.Name, Total: r.Total, Pending: r.Pending, Running: r.Running, Done: r.Done, Dead: r.Dead,
			Failures: r.Failures, CreatedUnixMs: unixMs(r.CreatedAt), FinishedUnixMs: unixMs(r.FinishedAt),
			Blocked: r.Blocked, Cancelled: r.IsCancelled, CancelledItems: r.Cancelled, Ranges: r.Ranges,
			Tenant: runTenant(r), Priority: runPriority(r), Share: share(r.Running, running),
			Cluster: ClusterLocal, Origin: r.Spec.GetOrigin(),
		}
		if r.Spec != nil {
			rc.ExpectedTotal, rc.Kind, rc.Store, rc.Model = r.Spec.GetTotal(), r.Spec.GetKind(), r.Spec.GetStore(), r.Spec.GetModel()
			if rc.Store != "" {
				rc.DataPrefix = fsm.RunDataPrefix(r.Name, r.Spec.GetDataPrefix())
			}
			rc.Sampling = r.Spec.GetSampling()
		}
		rc.UnservedModel = unserved[r.Name]
		if s := r.Stall; s != nil {
			rc.Stall = &rolloutv1.RunStall{Object: s.Object, Reason: s.Reason, SinceUnixMs: unixMs(s.Since),
				NextProbeUnixMs: unixMs(s.NextProbe), Holds: s.Holds, StoreUnreachable: s.StoreUnreachable}
		}
		rc.RunningLong, rc.OwnerLost = byRun[r.Name].RunningLong, byRun[r.Name].OwnerLost
		resp.Runs = append(resp.Runs, rc)
	}
	if s.pollUnseen(ctx, handles) {
		// A new leader's first answer is the peer's counters, as the
		// poll just recorded them in the ledger (answers come from the
		// ledger only, so no later leader answers less).
		for i, h := range handles {
			if nh, err := s.ledger.Handle(h.Run); err == nil {
				handles[i] = nh
			}
		}
	}
	for _, h := range handles {
		resp.Runs = append(resp.Runs, s.handleCounters(h))
	}
	if _, peer := peerCaller(ctx); peer {
		// Another cluster sees its run, not this cluster's fleet.
		return resp, nil
	}
	for _, w := range workers {
		resp.Workers = append(resp.Workers, &rolloutv1.WorkerStatus{
			Id: w.ID, Running: w.Running, Backlog: w.Backlog, ItemsPerSec: w.ItemsPerSec,
			LastHeartbeatUnixMs: unixMs(w.LastHeartbeat), Lost: w.Lost, Completed: w.Completed,
			RunningLong: byWorker[w.ID].RunningLong, OwnerLost: byWorker[w.ID].OwnerLost,
			Kinds: w.Kinds, Models: w.Models,
		})
	}
	return resp, nil
}
