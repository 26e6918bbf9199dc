package server

import (
	"context"
	"fmt"
	"time"

	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/connlimit"
	"github.com/rollout/rollout/internal/limits"
)

// DefaultRefusalReportInterval is how often rollout-coord has
// ReportRefusals summarise the refused connections: at most one
// conns-refused event per listener per interval.
const DefaultRefusalReportInterval = time.Minute

// RefusalSource is what ReportRefusals reads; *connlimit.Tally is one.
type RefusalSource interface {
	// Take returns the refusals counted since the previous Take, one per
	// listener, and starts afresh.
	Take() []connlimit.Refusals
}

var _ RefusalSource = (*connlimit.Tally)(nil)

// ReportRefusals records this replica's refused connections in the
// ledger's event history until ctx ends. Every interval it takes what src
// counted since the previous tick and, while this replica is the serving
// leader, proposes one fsm.EventConnsRefused note per listener that
// refused anything (Count: the refusals; Detail: the listener, the reasons
// and the source refused most; Member: this replica). However large a
// flood, it costs at most one event per listener per interval, never one
// per connection.
//
// Only the leader proposes. A follower's listeners' refusals do not flow
// to the leader, so a follower discards its counts at each tick: the
// history holds the leader's own refusals (a follower's are in its
// rollout_conns_refused_total). A proposal that fails is logged and its
// counts are dropped, not carried over.
func (s *Server) ReportRefusals(ctx context.Context, src RefusalSource, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.reportRefusals(ctx, src); err != nil {
			s.log.Debug("could not record refused connections", "error", err)
		}
	}
}

// reportRefusals is one tick of ReportRefusals: it returns how many notes
// it proposed.
func (s *Server) reportRefusals(ctx context.Context, src RefusalSource) (int, error) {
	taken := src.Take()
	if len(taken) == 0 {
		return 0, nil
	}
	if _, ok := s.node.ServingTerm(); !ok {
		return 0, nil
	}
	cmds := make([]*fsmpb.Command, 0, len(taken))
	for _, r := range taken {
		cmds = append(cmds, s.note(fsm.EventConnsRefused, r.Detail(), r.Count))
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	results, _, err := s.proposeAll(pctx, cmds)
	if err != nil {
		return 0, err
	}
	for _, r := range results {
		if r.Err != nil {
			return 0, r.Err
		}
	}
	return len(cmds), nil
}

// NoteSteppedAside records, while this replica is the serving leader,
// that it hands leadership to the replica to because of why (an
// fsm.EventLeaderSteppedAside naming this replica). Call it just before
// the transfer: once leadership has moved this replica cannot propose. An
// error means nothing may have been recorded; the transfer should go on
// regardless.
func (s *Server) NoteSteppedAside(ctx context.Context, why, to string) error {
	detail := fmt.Sprintf("%s; handing leadership to %s", why, to)
	res, _, err := s.propose(ctx, s.note(fsm.EventLeaderSteppedAside, detail, 0))
	if err == nil {
		err = res.Err
	}
	return err
}

// note is a NoteCmd about this replica; detail is cut to the ledger's
// bound.
func (s *Server) note(kind fsm.EventKind, detail string, count uint64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Note{Note: &fsmpb.NoteCmd{
		Kind: uint32(kind), Member: s.cfg.ReplicaID, Detail: limits.CleanText(detail, fsm.MaxEventDetailBytes), Count: count,
	}}}
}
