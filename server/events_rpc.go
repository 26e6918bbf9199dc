package server

import (
	"context"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
)

// maxEventsPage caps the events one Events reply carries (and is the page
// when the request's limit is 0).
const maxEventsPage = fsm.MaxEventsPage

// Events pages through the ledger's event history (linearizable: a read
// index through the leader, like RunStatus). It returns the events with
// seq > after_seq, oldest first, at most limit (capped at maxEventsPage),
// only those of run when run is set. When there are none and wait_ms > 0 it
// long-polls, up to wait_ms capped by MaxClaimWait, until one is recorded;
// if this replica stops serving as leader meanwhile it answers Unavailable
// with the leader's hint so that the client asks the new leader. first_seq
// and last_seq bound the history held; first_seq > after_seq+1 tells the
// caller that events it has not seen were dropped by the bound.
func (s *Server) Events(ctx context.Context, req *rolloutv1.EventsRequest) (*rolloutv1.EventsResponse, error) {
	if run := req.GetRun(); run != "" {
		if err := validRun(run); err != nil {
			return nil, err
		}
	}
	limit := int(req.GetLimit())
	if limit <= 0 || limit > maxEventsPage {
		limit = maxEventsPage
	}
	wait := min(time.Duration(req.GetWaitMs())*time.Millisecond, s.cfg.MaxClaimWait)

	lctx, cancel, _, err := s.node.WithLeadership(ctx)
	if err != nil {
		return nil, s.toStatus(err)
	}
	defer cancel()
	term, err := s.readBarrier(lctx)
	if err != nil {
		if ctx.Err() == nil && lctx.Err() != nil {
			return nil, s.notLeader("leadership lost")
		}
		return nil, err
	}
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	for {
		// Take the signal before reading, so that an event recorded in
		// between wakes the wait below.
		signal := s.ledger.EventSignal()
		evs, first, last := s.ledger.Events(req.GetAfterSeq(), limit, req.GetRun())
		if len(evs) > 0 || timer == nil {
			return &rolloutv1.EventsResponse{Header: s.header(term), Events: toEvents(evs), FirstSeq: first, LastSeq: last}, nil
		}
		select {
		case <-signal:
		case <-timer:
			timer = nil // one more read, then answer
		case <-lctx.Done():
			if ctx.Err() != nil {
				return nil, s.toStatus(ctx.Err())
			}
			return nil, s.notLeader("leadership lost")
		}
	}
}

func toEvents(evs []fsm.Event) []*rolloutv1.Event {
	if len(evs) == 0 {
		return nil
	}
	out := make([]*rolloutv1.Event, len(evs))
	for i, e := range evs {
		out[i] = &rolloutv1.Event{
			Seq: e.Seq, UnixMs: unixMs(e.Time), Term: e.Term, Kind: rolloutv1.EventKind(e.Kind),
			Run: e.Run, Worker: e.Worker, Member: e.Member, Detail: e.Detail, Count: e.Count,
		}
	}
	return out
}

// eventsRPCs declares Events's authorization: read as RunStatus is (a peer
// cluster: the events of one run under its prefix).
func eventsRPCs() []rpcSpec {
	return []rpcSpec{{Method: rolloutv1.Coordinator_Events_FullMethodName, Roles: readerRoles(), PeerRun: true}}
}
