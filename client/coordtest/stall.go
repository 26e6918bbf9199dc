package coordtest

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// DefaultStallProbe is the fake's probe interval of a stalled run.
const DefaultStallProbe = 200 * time.Millisecond

// stall is a stalled run, as the fake keeps it: a simpler copy of the
// ledger's rules (fsm stall.go). A held report puts the item back to
// Pending without a failure and stalls its run; claims skip the run's
// items but for one probe item every probe interval; the probe's done or
// failed report, or a submit naming the run, resumes it. A held report
// with store_unavailable stalls (isolates) the run only once two distinct
// workers, or every registered worker when fewer, reported so; before,
// it gives the item back like a nack.
type stall struct {
	object, reason string
	since, probeAt time.Time
	probe          key // the probe item out now; zero when none
	holds          uint64
	store          bool // the last hold said the store is unreachable
}

// SetStallProbe sets the probe interval of stalled runs (default
// DefaultStallProbe).
func (s *Server) SetStallProbe(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stallProbe = d
}

// Stall returns the stall of run as RunStatus reports it, or nil when the
// run is not stalled.
func (s *Server) Stall(run string) *rolloutv1.RunStall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stallLocked(run)
}

func (s *Server) stallLocked(run string) *rolloutv1.RunStall {
	st := s.stalls[run]
	if st == nil {
		return nil
	}
	return &rolloutv1.RunStall{Object: st.object, Reason: st.reason, SinceUnixMs: st.since.UnixMilli(),
		NextProbeUnixMs: st.probeAt.UnixMilli(), Holds: st.holds, StoreUnreachable: st.store}
}

func (s *Server) probeInterval() time.Duration {
	if s.stallProbe > 0 {
		return s.stallProbe
	}
	return DefaultStallProbe
}

// holdLocked applies worker's held report of it (Running for the
// reporter).
func (s *Server) holdLocked(worker string, it *item, r *rolloutv1.ItemReport) {
	now := time.Now()
	k := key{it.Run, string(it.ID)}
	st := s.stalls[it.Run]
	unreachable := r.GetStoreUnavailable()
	if st == nil && unreachable {
		if s.storeSuspects == nil {
			s.storeSuspects = make(map[string]map[string]bool)
		}
		sus := s.storeSuspects[it.Run]
		if sus == nil {
			sus = make(map[string]bool)
			s.storeSuspects[it.Run] = sus
		}
		sus[worker] = true
		if len(sus) < max(1, min(2, len(s.workers))) {
			s.enqueueLocked(it)
			return
		}
		delete(s.storeSuspects, it.Run)
	}
	it.State, it.Owner = Pending, ""
	if st == nil {
		if s.stalls == nil {
			s.stalls = make(map[string]*stall)
		}
		st = &stall{since: now, probeAt: now.Add(s.probeInterval())}
		s.stalls[it.Run] = st
		detail := fmt.Sprintf("input object %s: %s", r.GetHeldObject(), r.GetReason())
		if unreachable {
			detail = "store unreachable (isolated), reading " + detail
		}
		s.recordLocked(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_RUN_STALLED, Run: it.Run, Worker: worker, Detail: detail})
	}
	if st.probe == k {
		st.probe = key{}
		st.probeAt = now.Add(s.probeInterval())
	}
	st.object, st.reason, st.store = r.GetHeldObject(), r.GetReason(), unreachable
	st.holds++
}

// resumeLocked ends run's stall, if any, recording why.
func (s *Server) resumeLocked(run, why string) {
	st := s.stalls[run]
	if st == nil {
		return
	}
	delete(s.stalls, run)
	what := "input object " + st.object
	if st.store {
		what = "store reachable again, " + what
	}
	s.recordLocked(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_RUN_RESUMED, Run: run,
		Detail: fmt.Sprintf("%s: %s", what, why)})
}

// reportedLocked resumes it's run when it is the run's probe, and forgets
// the run's store suspects (the store answered).
func (s *Server) reportedLocked(it *item) {
	delete(s.storeSuspects, it.Run)
	if st := s.stalls[it.Run]; st != nil && st.probe == (key{it.Run, string(it.ID)}) {
		s.resumeLocked(it.Run, "probe item read its input")
	}
}

// claimableLocked filters pend (FIFO) for a claim at now: a stalled run's
// items are skipped but for one probe when its probe is due. It marks the
// probes it lets through and returns when the next probe is due (zero
// when none waits).
func (s *Server) claimableLocked(pend []*item, now time.Time) (out []*item, next time.Time) {
	taken := map[string]bool{}
	for _, it := range pend {
		st := s.stalls[it.Run]
		if st == nil {
			out = append(out, it)
			continue
		}
		if out := s.items[st.probe]; out != nil && out.State == Running {
			continue
		}
		if now.Before(st.probeAt) {
			if next.IsZero() || st.probeAt.Before(next) {
				next = st.probeAt
			}
			continue
		}
		if !taken[it.Run] {
			taken[it.Run] = true
			out = append(out, it)
		}
	}
	return out, next
}

// probeTakenLocked marks it, claimed, as its stalled run's probe.
func (s *Server) probeTakenLocked(it *item, now time.Time) {
	if st := s.stalls[it.Run]; st != nil {
		st.probe = key{it.Run, string(it.ID)}
		st.probeAt = now.Add(s.probeInterval())
	}
}

// EventsOf returns copies of the recorded events of kind, oldest first.
func (s *Server) EventsOf(kind rolloutv1.EventKind) []*rolloutv1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*rolloutv1.Event
	for _, e := range s.events {
		if e.GetKind() == kind {
			out = append(out, proto.Clone(e).(*rolloutv1.Event))
		}
	}
	return out
}

// Results pages through a run's records by first index (ResultItem copies
// of the fake's items and ranges; a page's next_index follows its last
// record); an unknown run is NOT_FOUND.
func (s *Server) Results(_ context.Context, req *rolloutv1.ResultsRequest) (*rolloutv1.ResultsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeaderLocked(); err != nil {
		return nil, err
	}
	var its []*item
	found := false
	for _, it := range s.items {
		if it.Run != req.GetRun() {
			continue
		}
		found = true
		if it.Index >= req.GetFromIndex() {
			its = append(its, it)
		}
	}
	if !found {
		return nil, status.Errorf(codes.NotFound, "run %q not found", req.GetRun())
	}
	sort.Slice(its, func(i, j int) bool { return its[i].Index < its[j].Index })
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = 1000
	}
	resp := &rolloutv1.ResultsResponse{Header: s.headerLocked(), Done: len(its) <= limit, NextIndex: req.GetFromIndex()}
	if len(its) > limit {
		its = its[:limit]
	}
	states := map[State]rolloutv1.ItemState{Pending: rolloutv1.ItemState_ITEM_STATE_PENDING, Running: rolloutv1.ItemState_ITEM_STATE_RUNNING,
		Done: rolloutv1.ItemState_ITEM_STATE_DONE, Dead: rolloutv1.ItemState_ITEM_STATE_DEAD, Cancelled: rolloutv1.ItemState_ITEM_STATE_CANCELLED}
	for _, it := range its {
		v := it.copy()
		resp.Items = append(resp.Items, &rolloutv1.ResultItem{Id: v.ID, Index: v.Index, State: states[v.State], Payload: v.Payload,
			Result: v.Result, Reason: v.Reason, Attempt: v.Attempt, Owner: v.Owner, DependsOn: v.DependsOn,
			PayloadRef: v.PayloadRef, ResultRef: v.ResultRef, Summary: v.Summary, Count: v.Count, Base: v.Base})
		resp.NextIndex = it.end()
	}
	return resp, nil
}
