package server

import (
	"context"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// Results: a run's items and their results, in input order.

// resultsRPCs declares Results's authorization: a client, admin or gateway
// (the handler holds a client to its own tenant's runs), or a peer cluster
// for a run under its prefix.
func resultsRPCs() []rpcSpec {
	return []rpcSpec{{Method: rolloutv1.Coordinator_Results_FullMethodName, Roles: submitterRoles(), PeerRun: true}}
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
	if err := s.checkOwner(ctx, "results", req.GetRun()); err != nil {
		return nil, err
	}
	if handled, resp, err := s.fedResults(ctx, req, term); handled {
		return resp, err // a run handed to a peer: its results are the peer's
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
			Result: it.Result, Reason: it.Reason, Attempt: it.Attempt, Owner: it.Owner, DependsOn: it.DependsOn,
			PayloadRef: toRef(it.PayloadRef), ResultRef: toRef(it.ResultRef), Summary: it.Summary,
			Count: it.Count, Base: it.Base,
		}
	}
	return resp, nil
}
