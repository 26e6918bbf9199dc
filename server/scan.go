package server

import (
	"context"
	"time"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// RunFailureScan runs the leader's failure scan until ctx ends: whenever
// this replica is the serving leader and its ledger shows a worker silent for
// longer than FailureTimeout, or a Lost worker holding nothing silent past the
// ledger's retention (fsm.Config.LostWorkerRetention failure timeouts), it
// proposes an ExpireWorkers command (the ledger decides from stamped times
// which workers really expired and which it removes).
func (s *Server) RunFailureScan(ctx context.Context) {
	t := time.NewTicker(s.cfg.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, ok := s.node.ServingTerm(); !ok {
			continue
		}
		s.sweepRetention(ctx)
		if !s.ledger.ExpiryDue(time.Now(), s.cfg.FailureTimeout) {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, s.cfg.FailureTimeout)
		res, _, err := s.propose(pctx, &fsmpb.Command{Cmd: &fsmpb.Command_Expire{Expire: &fsmpb.ExpireWorkersCmd{
			TimeoutNano: s.cfg.FailureTimeout.Nanoseconds()}}})
		cancel()
		if err != nil {
			s.log.Debug("failure scan proposal failed", "error", err)
			continue
		}
		if len(res.Expired) > 0 {
			s.log.Warn("workers expired; their items are pending again", "workers", res.Expired, "repended", res.Repended)
		}
		if len(res.Removed) > 0 {
			s.log.Info("lost workers silent past the retention removed; they must register again", "workers", res.Removed)
		}
	}
}
