package coordtest

import (
	"context"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// AddEvent appends e to the fake's event history, giving it the next seq,
// the current term and, when unset, the current time; a waiting Events call
// returns it.
func (s *Server) AddEvent(e *rolloutv1.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordLocked(proto.Clone(e).(*rolloutv1.Event))
	s.notifyLocked()
}

// EventLog returns copies of the fake's event history, oldest first.
func (s *Server) EventLog() []*rolloutv1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*rolloutv1.Event, len(s.events))
	for i, e := range s.events {
		out[i] = proto.Clone(e).(*rolloutv1.Event)
	}
	return out
}

// DropEventsBefore forgets the events with seq < seq, as the real ledger's
// bound does (numbering goes on).
func (s *Server) DropEventsBefore(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.events) > 0 && s.events[0].GetSeq() < seq {
		s.events = s.events[1:]
	}
}

func (s *Server) recordLocked(e *rolloutv1.Event) {
	s.eventSeq++
	e.Seq = s.eventSeq
	e.Term = s.term
	if e.UnixMs == 0 {
		e.UnixMs = time.Now().UnixMilli()
	}
	s.events = append(s.events, e)
}

// Events answers like the real service: events after after_seq, at most
// limit, of run when set, long-polling up to wait_ms (capped like Claim).
func (s *Server) Events(ctx context.Context, req *rolloutv1.EventsRequest) (*rolloutv1.EventsResponse, error) {
	wait := min(time.Duration(req.GetWaitMs())*time.Millisecond, s.maxWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	limit := int(req.GetLimit())
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	for {
		s.mu.Lock()
		if err := s.notLeaderLocked(); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		resp := &rolloutv1.EventsResponse{Header: s.headerLocked()}
		if n := len(s.events); n > 0 {
			resp.FirstSeq, resp.LastSeq = s.events[0].GetSeq(), s.events[n-1].GetSeq()
		}
		for _, e := range s.events {
			if len(resp.Events) == limit {
				break
			}
			if e.GetSeq() > req.GetAfterSeq() && (req.GetRun() == "" || e.GetRun() == req.GetRun()) {
				resp.Events = append(resp.Events, proto.Clone(e).(*rolloutv1.Event))
			}
		}
		changed := s.changed
		s.mu.Unlock()
		if len(resp.Events) > 0 || wait <= 0 {
			return resp, nil
		}
		select {
		case <-changed:
		case <-timer.C:
			wait = 0
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}
