package coordtest

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// SubmitRanges is not served by the fake (it holds items, not ranges): a
// leader answers Unimplemented; a follower (SetFollower) answers UNAVAILABLE
// with its leader hint first, as a replica answers any write, so a client's
// leader following can be tested on it. Intercept("SubmitRanges", ...)
// gives it any other behaviour.
func (s *Server) SubmitRanges(context.Context, *rolloutv1.SubmitRangesRequest) (*rolloutv1.SubmitRangesResponse, error) {
	return nil, s.unserved("SubmitRanges")
}

// ReportRange is not served by the fake; see SubmitRanges.
func (s *Server) ReportRange(context.Context, *rolloutv1.ReportRangeRequest) (*rolloutv1.ReportRangeResponse, error) {
	return nil, s.unserved("ReportRange")
}

// unserved is the answer of a method the fake does not serve: the
// not-leader error on a follower, else Unimplemented. It takes s.mu.
func (s *Server) unserved(method string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return err
	}
	return status.Errorf(codes.Unimplemented, "method %s not implemented", method)
}
