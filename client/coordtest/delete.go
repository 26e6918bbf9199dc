package coordtest

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/storeurl"
)

// DeleteRun removes a run as the ledger does: an unknown run is NOT_FOUND;
// a run that is not cancelled and still has Pending or Running indexes is
// FAILED_PRECONDITION (nothing changes); else its records, spec, counters
// and stall are forgotten and the reply counts its indexes (a range its
// width) and names its store and data prefix, for the caller's sweep. A
// RUN_DELETED event records it.
func (s *Server) DeleteRun(_ context.Context, req *rolloutv1.DeleteRunRequest) (*rolloutv1.DeleteRunResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	run := req.GetRun()
	recs := s.recordsLocked(run)
	if len(recs) == 0 {
		return nil, status.Errorf(codes.NotFound, "run %q not found", run)
	}
	var total, active uint64
	for _, it := range recs {
		total += it.width()
		if it.State == Pending || it.State == Running {
			active += it.width()
		}
	}
	if !s.cancelled[run] && active > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "run %q is neither finished nor cancelled", run)
	}
	resp := &rolloutv1.DeleteRunResponse{Items: total, Store: s.specs[run].GetStore()}
	if resp.Store != "" {
		resp.DataPrefix = storeurl.RunData(run, s.specs[run].GetDataPrefix())
	}
	for _, it := range recs {
		delete(s.items, key{run, string(it.ID)})
	}
	delete(s.specs, run)
	delete(s.kinds, run)
	delete(s.cancelled, run)
	delete(s.failures, run)
	delete(s.ranged, run)
	delete(s.recSeq, run)
	delete(s.stalls, run)
	delete(s.storeSuspects, run)
	s.recordLocked(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_RUN_DELETED, Run: run, Count: total})
	s.notifyLocked()
	resp.Header = s.headerLocked()
	return resp, nil
}
