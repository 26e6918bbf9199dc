package server

import (
	"context"
	"time"
)

// RunFailureScan runs the leader's failure scan until ctx ends: every
// ScanInterval, when this replica is the serving leader, it proposes an
// ExpireWorkers command naming the workers neither its heartbeat timers
// (leader-local: server/liveness) nor the ledger have heard from within the
// TTL, or forgetting Lost workers holding nothing that stayed silent past the
// ledger's retention (fsm.Config.LostWorkerRetention TTLs). The TTL is the
// failure timeout, grown with the fleet (Config.HeartbeatBudget); a newly
// elected leader counts every worker's silence from its election.
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
		s.expireSilent(ctx)
	}
}
