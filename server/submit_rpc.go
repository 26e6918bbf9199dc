package server

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// SubmitItems adds a chunk of items to a run in one ledger command. The
// whole request is checked first (validate.Limits.CheckRequest: run name, at
// least one item, counts and sizes, 32-byte ids, JSON-object payloads); a
// refusal is INVALID_ARGUMENT naming the item and the rule, and nothing is
// proposed.
func (s *Server) SubmitItems(ctx context.Context, req *rolloutv1.SubmitItemsRequest) (*rolloutv1.SubmitItemsResponse, error) {
	if err := s.cfg.Limits.CheckRequest(req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "submit refused, nothing was changed: %v", err)
	}
	if err := s.checkCapacity(req); err != nil {
		return nil, err
	}
	cmd := submitCommand(req)
	sub := cmd.GetSubmit()
	as, spec, err := s.submitAs(ctx, "submit", req.GetRun(), sub.Spec)
	if err != nil {
		return nil, err
	}
	sub.Tenant, sub.Spec = as, spec
	if err := s.checkPayloadObjects("submit", req.GetRun(), spec, sub.GetObjects(), true); err != nil {
		return nil, err
	}
	if handled, resp, err := s.fedSubmitItems(ctx, req, as, spec); handled {
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
	// SubmitItemsResponse's counters are 32-bit. Each count is at most the
	// request's items (one record an item), which the checked request
	// (MaxItemsPerRequest, and a message of under 2 GiB) keeps far below
	// 2^32, so each converts exactly.
	c := res.Submit
	return &rolloutv1.SubmitItemsResponse{
		Header: s.header(term), Created: uint32(c.Created), AlreadyPending: uint32(c.AlreadyPending),
		AlreadyRunning: uint32(c.AlreadyRunning), AlreadyDone: uint32(c.AlreadyDone), Retried: uint32(c.Retried), Dead: uint32(c.Dead),
		RependedStale: uint32(c.RependedStale), CreatedDead: uint32(c.CreatedDead),
	}, nil
}

// submitCommand is the ledger command of a checked SubmitItems request. Its
// encoding is at most a few bytes per item larger than the request's (the
// dead reasons are already clean), so it fits the proposer's command limit.
func submitCommand(req *rolloutv1.SubmitItemsRequest) *fsmpb.Command {
	cmd := &fsmpb.SubmitItemsCmd{Run: req.GetRun(), RetryDead: req.GetRetryDead(),
		RependStaleNano: int64(req.GetStaleAfterMs()) * int64(time.Millisecond)}
	cmd.Spec = specCmd(req.GetSpec())
	cmd.Items = make([]*fsmpb.NewItem, len(req.GetItems()))
	objects := map[string]uint32{}
	for i, it := range req.GetItems() {
		ni := &fsmpb.NewItem{Id: it.GetId(), Index: it.GetIndex(), Payload: it.GetPayload(),
			DeadReason: limits.CleanReason(it.GetDeadReason()), DependsOn: it.GetDependsOn()}
		if r := it.GetPayloadRef(); r != nil {
			// The object key, shared by the items of a chunk, goes into the
			// command's table once; the item names it by number.
			k, ok := objects[r.GetObject()]
			if !ok {
				cmd.Objects = append(cmd.Objects, r.GetObject())
				k = uint32(len(cmd.Objects))
				objects[r.GetObject()] = k
			}
			ni.PayloadObj = k
			ni.PayloadRef = &fsmpb.DataRef{Offset: r.GetOffset(), Length: r.GetLength(), Blake3: r.GetBlake3()}
		}
		cmd.Items[i] = ni
	}
	return &fsmpb.Command{Cmd: &fsmpb.Command_Submit{Submit: cmd}}
}

// unservedModels returns the names of the runs among runs that wait on a
// model no live worker serves: the run names a model, it is neither
// finished nor cancelled, and no worker of workers that is not Lost and
// runs the run's kind serves every model or names the run's model. A
// worker that is silent but not yet declared Lost still counts as live. It
// costs O(runs × live workers × their kinds and models).
func unservedModels(runs []fsm.RunStatus, workers []fsm.WorkerStatus) map[string]bool {
	live := make([]fsm.WorkerStatus, 0, len(workers))
	for _, w := range workers {
		if !w.Lost {
			live = append(live, w)
		}
	}
	var out map[string]bool
	for _, r := range runs {
		m := r.Spec.GetModel()
		if m == "" || r.IsCancelled || !r.FinishedAt.IsZero() {
			continue
		}
		kind := r.Spec.GetKind()
		if kind == "" {
			kind = fsm.BatchKind
		}
		served := false
		for _, w := range live {
			if (w.Kinds == nil || slices.Contains(w.Kinds, kind)) && (w.Models == nil || slices.Contains(w.Models, m)) {
				served = true
				break
			}
		}
		if served {
			continue
		}
		if out == nil {
			out = make(map[string]bool)
		}
		out[r.Name] = true
	}
	return out
}

// submitRPCs declares SubmitItems's authorization: a client, admin or
// gateway (the handler holds a client to its own tenant's runs), or a peer
// cluster for a run under its prefix (as its own tenant).
func submitRPCs() []rpcSpec {
	return []rpcSpec{{Method: rolloutv1.Coordinator_SubmitItems_FullMethodName, Roles: submitterRoles(), PeerRun: true}}
}
