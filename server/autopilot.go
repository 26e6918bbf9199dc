package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/raftnode"
)

// DefaultDeadServerAfter is how long a replica may go without Raft contact
// with the leader before the leader removes it (rollout-coord
// --dead-server-after): long enough that a rescheduled pod or a rebooted
// host comes back first, short enough that a scaled-down replica does not
// hold a vote for long.
const DefaultDeadServerAfter = 10 * time.Minute

// DefaultMinVoters is the fewest voters the dead-server cleanup leaves
// when rollout-coord is given neither --min-voters nor --bootstrap-expect.
const DefaultMinVoters = 3

// ErrDeadServerConfig names a bad DeadServerCleanup argument.
var ErrDeadServerConfig = errors.New("server: invalid dead-server cleanup")

// deadServerTick bounds how often the cleanup looks at the members.
const deadServerTick = time.Second

// DeadServerCleanup is Consul autopilot's dead-server cleanup. On the
// serving leader, every tick (at most a second, at least after/4 and
// 100 ms), it removes one member that has had no successful Raft contact
// with this leader for after (raftnode.Node.Unreachable), non-voters
// first, then the voter silent longest. A voter is removed only when the
// voters left are at least minVoters, and when the voters left that
// answer (this leader, and every other voter whose heartbeats succeed and
// that answers at its gRPC address as a follower of this leader; see
// checkQuorum) are a quorum of them: the cleanup never costs the cluster
// its majority; and no member is removed that answers at its gRPC
// address as a follower of this leader. This replica is never removed by
// itself. A removal is a
// Raft configuration change followed by a RemoveMember ledger command
// whose event (member-removed) says why; both are logged. It runs until
// ctx ends. after and minVoters must be positive (ErrDeadServerConfig).
func (s *Server) DeadServerCleanup(ctx context.Context, after time.Duration, minVoters int) error {
	if after <= 0 || minVoters < 1 {
		return fmt.Errorf("%w: after (%v) and minVoters (%d) must be positive", ErrDeadServerConfig, after, minVoters)
	}
	tick := min(deadServerTick, max(after/4, 100*time.Millisecond))
	t := time.NewTicker(tick)
	defer t.Stop()
	held := map[string]string{} // member -> why it is kept (logged once)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s.cleanupOnce(ctx, after, minVoters, held)
	}
}

// deadMember is a member the leader has not reached for a while.
type deadMember struct {
	raftnode.Member
	silent time.Duration
}

// cleanupOnce is one tick of DeadServerCleanup: it removes at most one
// member and returns its id ("" when none).
func (s *Server) cleanupOnce(ctx context.Context, after time.Duration, minVoters int, held map[string]string) string {
	if _, ok := s.node.ServingTerm(); !ok {
		clear(held)
		return ""
	}
	failing := s.node.Unreachable()
	if len(failing) == 0 {
		clear(held)
		return ""
	}
	members, err := s.node.Members()
	if err != nil {
		return ""
	}
	now := time.Now()
	var dead []deadMember
	for _, m := range members {
		last, ok := failing[m.ID]
		if !ok || m.ID == s.cfg.ReplicaID {
			continue
		}
		if d := now.Sub(last); d >= after {
			dead = append(dead, deadMember{Member: m, silent: d})
		}
	}
	for id := range held {
		if _, ok := failing[id]; !ok {
			delete(held, id)
		}
	}
	// Non-voters first (they cost no vote), then the longest silent.
	slices.SortFunc(dead, func(a, b deadMember) int {
		if av, bv := a.Suffrage == voter, b.Suffrage == voter; av != bv {
			if av {
				return 1
			}
			return -1
		}
		return cmp.Compare(b.silent, a.silent)
	})
	for _, d := range dead {
		why, ok := s.mayRemoveDead(ctx, members, failing, d, minVoters)
		if !ok {
			if held[d.ID] != why {
				held[d.ID] = why
				s.log.Warn("dead-server cleanup keeps an unreachable replica", "id", d.ID, "silent", d.silent.Round(time.Second), "why", why)
			}
			continue
		}
		reason := fmt.Sprintf("dead-server cleanup by leader %s: no Raft contact for %s (--dead-server-after %s)",
			s.cfg.ReplicaID, d.silent.Round(100*time.Millisecond), after)
		if err := s.removeDead(ctx, d.ID, reason); err != nil {
			s.log.Warn("dead-server cleanup could not remove a replica", "id", d.ID, "error", err)
			return ""
		}
		delete(held, d.ID)
		s.log.Warn("dead-server cleanup removed a replica", "id", d.ID, "suffrage", d.Suffrage, "silent", d.silent.Round(time.Second), "after", after)
		return d.ID
	}
	return ""
}

// mayRemoveDead decides whether d may go: a non-voter unless it answers
// (stillAnswers); a voter only if at least minVoters voters stay, the
// voters that stay and answer heartbeats are a quorum of them, and it does
// not answer either. It returns why not.
func (s *Server) mayRemoveDead(ctx context.Context, members []raftnode.Member, failing map[string]time.Time, d deadMember, minVoters int) (string, bool) {
	if d.Suffrage != voter {
		return s.stillAnswers(ctx, d.Member)
	}
	var rest []raftnode.Member
	live := 0
	for _, m := range members {
		if m.ID == d.ID || m.Suffrage != voter {
			continue
		}
		rest = append(rest, m)
		if _, bad := failing[m.ID]; !bad || m.ID == s.cfg.ReplicaID {
			live++
		}
	}
	if len(rest) < minVoters {
		return fmt.Sprintf("removing it would leave %d voters, fewer than --min-voters %d", len(rest), minVoters), false
	}
	if need := raftnode.Quorum(len(rest)); live < need {
		return fmt.Sprintf("the %d voters left would need %d live, but only %d answer heartbeats", len(rest), need, live), false
	}
	if err := s.checkQuorum(ctx, rest, 0, fmt.Sprintf("removing %q", d.ID)); err != nil {
		return err.Error(), false
	}
	return s.stillAnswers(ctx, d.Member)
}

// stillAnswers is the last check before a removal: the member must not
// answer at its gRPC address as a follower of this leader in this term.
// Raft's heartbeat observations are delivered without blocking Raft, so a
// lost "resumed" one could leave a live member counted as dead; this
// catches it.
func (s *Server) stillAnswers(ctx context.Context, m raftnode.Member) (string, bool) {
	if len(s.unreachable(ctx, []raftnode.Member{m})) == 0 {
		return "its Raft heartbeats fail, but it answers at its gRPC address as a follower of this leader", false
	}
	return "", true
}

// removeDead removes id from the Raft configuration and the ledger,
// recording reason in the member-removed event.
func (s *Server) removeDead(ctx context.Context, id, reason string) error {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	release, err := s.lockMembers(lctx)
	if err != nil {
		return err
	}
	defer release()
	if err := s.node.RemoveServer(lctx, id); err != nil && !errors.Is(err, raftnode.ErrNotMember) {
		return err
	}
	res, _, err := s.propose(lctx, &fsmpb.Command{Cmd: &fsmpb.Command_RemoveMember{RemoveMember: &fsmpb.RemoveMemberCmd{Id: id, Reason: reason}}})
	if err == nil {
		err = res.Err
	}
	return err
}
