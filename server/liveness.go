package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// maxExecutingKept bounds the executing keys the leader keeps per worker.
const maxExecutingKept = 1 << 16

// maxExpirePerCommand bounds the workers one ExpireWorkers command names;
// the next scan names the rest.
const maxExpirePerCommand = 1000

// checkKeys checks a heartbeat's keys: a run name and a record id (an
// item's or a range's) each within what the ledger can hold.
func (s *Server) checkKeys(field string, keys []*rolloutv1.ItemKey) error {
	for i, k := range keys {
		if err := validRun(k.GetRun()); err != nil {
			return status.Errorf(codes.InvalidArgument, "%s[%d]: %s", field, i, status.Convert(err).Message())
		}
		if n := len(k.GetId()); n == 0 || n > limits.MaxIDBytes {
			return status.Errorf(codes.InvalidArgument, "%s[%d]: id is %d bytes, must be 1 to %d", field, i, n, limits.MaxIDBytes)
		}
	}
	return nil
}

// liveWorker checks that this replica is the serving leader and that the
// ledger holds worker id live, and records in the leader's memory that it
// spoke; it returns the serving term. An unknown or Lost worker gets
// FailedPrecondition (it must Register), another replica Unavailable.
func (s *Server) liveWorker(id string) (uint64, error) {
	term, ok := s.node.ServingTerm()
	if !ok {
		return 0, s.notLeader("")
	}
	if s.ledger.Worker(id) != fsm.WorkerLive {
		return 0, rolloutv1.NotRegisteredError(id)
	}
	s.live.Touch(term, id, time.Now())
	return term, nil
}

// touch records in the leader's memory that worker id spoke (a claim, a
// report, a registration). Nothing on a replica that is not serving.
func (s *Server) touch(id string) {
	if term, ok := s.node.ServingTerm(); ok {
		s.live.Touch(term, id, time.Now())
	}
}

// fleetSize is the live workers the last failure scan counted (the ledger's
// count before the first scan).
func (s *Server) fleetSize() int {
	if n := s.fleet.Load(); n >= 0 {
		return int(n)
	}
	n := s.ledger.LiveWorkers()
	s.fleet.Store(int64(n))
	return n
}

// TTL is how long the leader waits without hearing from a worker before it
// declares it lost, for the fleet it holds now: the failure timeout, or
// more for a fleet too large to heartbeat that often within the budget
// (liveness.Config.TTL).
func (s *Server) TTL() time.Duration { return s.liveCfg.TTL(s.fleetSize()) }

// stealVictim is the worker a steal by thief takes from, chosen by the
// leader in term from the ledger and its own view: only workers it has
// heard from in term are candidates, so a just-elected leader never splits
// a range at a progress mark it has not heard. "" when there is none.
func (s *Server) stealVictim(term uint64, thief string) (string, []*fsmpb.ItemKey) {
	victim := s.ledger.StealVictim(thief, func(id string) bool { return s.live.Heard(term, id) })
	if victim == "" {
		return "", nil
	}
	v, _ := s.live.Get(term, victim)
	keys := make([]*fsmpb.ItemKey, len(v.Progress.Executing))
	for i, k := range v.Progress.Executing {
		keys[i] = &fsmpb.ItemKey{Run: k.Run, Id: k.ID, Attempt: k.Attempt, Started: k.Started}
	}
	return victim, keys
}

// startedMarks are the progress marks this leader last heard for run's
// Running ranges (for a cancel: what the owners started stays theirs).
func (s *Server) startedMarks(run string) []*fsmpb.ItemKey {
	term, ok := s.node.ServingTerm()
	if !ok {
		return nil
	}
	ks := s.live.Started(term, run)
	out := make([]*fsmpb.ItemKey, len(ks))
	for i, k := range ks {
		out[i] = &fsmpb.ItemKey{Run: k.Run, Id: k.ID, Attempt: k.Attempt, Started: k.Started}
	}
	return out
}

// staleWorkers lists, for a submit with a stale window, the live workers
// the leader has not heard from in term for longer than stale: their
// Running work in the submitted run goes back to Pending (see
// fsmpb.SubmitItemsCmd.stale_by_leader).
func (s *Server) staleWorkers(stale time.Duration) (bool, []string) {
	if stale <= 0 {
		return false, nil
	}
	term, ok := s.node.ServingTerm()
	if !ok {
		// The proposal will fail on this replica anyway.
		return false, nil
	}
	return true, s.live.Silent(term, time.Now(), stale, s.ledger.LiveWorkerIDs())
}

// expireSilent proposes, when this replica is the serving leader, an
// ExpireWorkers command naming the workers that neither this leader's
// timers nor the ledger have heard from within the TTL, or forgetting Lost
// workers silent past the retention.
func (s *Server) expireSilent(ctx context.Context) {
	term, ok := s.node.ServingTerm()
	if !ok {
		return
	}
	now := time.Now()
	n := s.ledger.LiveWorkers()
	s.fleet.Store(int64(n))
	ttl := s.liveCfg.TTL(n)
	ids := s.ledger.WorkerIDs()
	s.live.Prune(func(id string) bool { _, ok := ids[id]; return ok })
	cands, removal := s.ledger.ExpiryCandidates(now, ttl)
	silent := s.live.Silent(term, now, ttl, cands)
	if len(silent) == 0 && !removal {
		return
	}
	if len(silent) > maxExpirePerCommand {
		silent = silent[:maxExpirePerCommand]
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.FailureTimeout)
	defer cancel()
	res, _, err := s.propose(pctx, &fsmpb.Command{Cmd: &fsmpb.Command_Expire{Expire: &fsmpb.ExpireWorkersCmd{
		TimeoutNano: ttl.Nanoseconds(), ByLeader: true, Workers: silent}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		s.log.Debug("failure scan proposal failed", "error", err)
		return
	}
	for _, id := range res.Expired {
		s.live.Forget(id)
	}
	if len(res.Expired) > 0 {
		s.log.Warn("workers expired; their items are pending again", "workers", res.Expired, "repended", res.Repended, "ttl", ttl)
	}
	if len(res.Removed) > 0 {
		s.log.Info("lost workers silent past the retention removed; they must register again", "workers", res.Removed)
	}
}

// LiveSummary is the leader's liveness figures for metrics.
type LiveSummary struct {
	// Serving is false on a replica that is not the serving leader (the
	// other figures are then zero).
	Serving bool
	// Live counts registered workers heard from within the TTL (or still in
	// the grace period of this leadership).
	Live int
	// Heartbeats counts the heartbeats this replica has received.
	Heartbeats uint64
	// TTL and Interval as the fleet sets them now.
	TTL, Interval time.Duration
}

// Liveness returns the leader's liveness figures.
func (s *Server) Liveness() LiveSummary {
	out := LiveSummary{Heartbeats: s.live.Heartbeats()}
	term, ok := s.node.ServingTerm()
	if !ok {
		return out
	}
	n := s.fleetSize()
	out.Serving, out.TTL, out.Interval = true, s.liveCfg.TTL(n), s.liveCfg.Interval(n)
	ids := s.ledger.LiveWorkerIDs()
	out.Live = len(ids) - len(s.live.Silent(term, time.Now(), out.TTL, ids))
	return out
}

// WorkerViews overlays the leader's memory on the ledger's workers: last
// heartbeat, backlog, rate and executing come from the leader when it has
// heard from the worker in its term (the ledger's last-command time
// otherwise).
func (s *Server) WorkerViews(ws []fsm.WorkerStatus) []fsm.WorkerStatus {
	term, ok := s.node.ServingTerm()
	if !ok {
		return ws
	}
	for i := range ws {
		v, heard := s.live.Get(term, ws[i].ID)
		if !heard {
			continue
		}
		w := &ws[i]
		if v.Last.After(w.LastHeartbeat) {
			w.LastHeartbeat = v.Last
		}
		w.Backlog, w.ItemsPerSec = v.Progress.Backlog, v.Progress.ItemsPerSec
		w.Executing = nil
		for _, k := range v.Progress.Executing {
			w.Executing = append(w.Executing, fsm.ItemKey{Run: k.Run, ID: k.ID, Attempt: k.Attempt})
		}
	}
	return ws
}

// seen is the leader's view for fsm.Ledger.RunningConditions.
func (s *Server) seen() fsm.WorkerSeen {
	term, ok := s.node.ServingTerm()
	if !ok {
		return nil
	}
	return func(id string) (time.Time, float64, bool) {
		v, heard := s.live.Get(term, id)
		return v.Last, v.Progress.ItemsPerSec, heard
	}
}

// notIdle is the refusal of a steal from a thief with a backlog.
func notIdle(thief string, backlog uint32) error {
	return fmt.Errorf("%w: %q reports a backlog of %d", fsm.ErrNotIdle, thief, backlog)
}
