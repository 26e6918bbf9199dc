package server

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/raftnode"
)

// voter is a voter's suffrage as raftnode.Member reports it.
const voter = "Voter"

// catchUpPoll is how often a Join asks the joining replica how far it is.
const catchUpPoll = 50 * time.Millisecond

// maxRemoveIDBytes bounds the id of a RemoveMember request.
const maxRemoveIDBytes = 1024

// rollbackTimeout bounds removing a non-voter that did not catch up.
const rollbackTimeout = 10 * time.Second

// validJoin checks a Join request's fields before anything happens; the
// error is InvalidArgument naming the field.
func validJoin(id, raftAddr, grpcAddr string) error {
	if err := raftnode.ValidateServerID(id); err != nil {
		return status.Errorf(codes.InvalidArgument, "join: id: %v", err)
	}
	if err := raftnode.ValidateServerAddr("raft_addr", raftAddr); err != nil {
		return status.Errorf(codes.InvalidArgument, "join %q: %v", id, err)
	}
	if err := raftnode.ValidateServerAddr("grpc_addr", grpcAddr); err != nil {
		return status.Errorf(codes.InvalidArgument, "join %q: %v", id, err)
	}
	return nil
}

// lockMembers waits (bounded by ctx) until no other membership change runs
// on this replica, and returns the function that lets the next one in.
func (s *Server) lockMembers(ctx context.Context) (func(), error) {
	select {
	case s.members <- struct{}{}:
		return func() { <-s.members }, nil
	case <-ctx.Done():
		return nil, status.Errorf(codes.DeadlineExceeded, "waiting for another membership change to finish: %v", ctx.Err())
	}
}

// join brings id into the raft configuration as a voter (see Join); the
// ledger's member record is the caller's. It returns a gRPC status error.
func (s *Server) join(ctx context.Context, id, raftAddr, grpcAddr string) error {
	members, err := s.node.Members()
	if err != nil {
		return s.toStatus(err)
	}
	if cur, ok := findMember(members, id); ok && cur.Suffrage == voter {
		if cur.Address == raftAddr {
			return nil // a rejoin: nothing to change
		}
		return status.Errorf(codes.FailedPrecondition,
			"replica %q is already a voter at raft address %s; remove it first (rollout cluster remove %s) to add it at %s", id, cur.Address, id, raftAddr)
	}
	var others []raftnode.Member
	for _, m := range members {
		if m.ID == id {
			continue
		}
		if m.Address == raftAddr {
			return status.Errorf(codes.InvalidArgument, "join %q: raft_addr %s already belongs to replica %q", id, raftAddr, m.ID)
		}
		others = append(others, m)
	}
	for _, lm := range s.ledger.Members() {
		if lm.ID != id && lm.GRPCAddr == grpcAddr {
			return status.Errorf(codes.InvalidArgument, "join %q: grpc_addr %s already belongs to replica %q", id, grpcAddr, lm.ID)
		}
	}

	cc, err := s.dialPeer(grpcAddr)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "join %q: grpc_addr %s: %v", id, grpcAddr, err)
	}
	defer cc.Close()
	pctx, cancel := context.WithTimeout(ctx, s.cfg.MemberProbeTimeout)
	_, err = s.askReplica(pctx, cc, id)
	cancel()
	if err != nil {
		return status.Errorf(codes.FailedPrecondition,
			"refused to add %q: it does not answer at grpc_addr %s as that replica (%v); nothing was changed", id, grpcAddr, err)
	}
	what := fmt.Sprintf("adding %q", id)
	if err := s.checkQuorum(ctx, others, 1, what); err != nil {
		return err
	}

	if err := s.node.AddNonvoter(ctx, id, raftAddr); err != nil {
		return s.toStatus(fmt.Errorf("add non-voter %s: %w", id, err))
	}
	term, ok := s.node.ServingTerm()
	if !ok {
		return s.notLeader("leadership lost while adding " + id)
	}
	target := s.node.Stats().CommitIndex
	if err := s.waitCaughtUp(ctx, cc, id, term, target); err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
			return err // not leader any more: the new leader decides
		}
		return s.rollbackJoin(id, err)
	}
	if err := s.checkQuorum(ctx, others, 1, what); err != nil {
		return s.rollbackJoin(id, err)
	}
	if err := s.node.PromoteNonvoter(ctx, id); err != nil {
		return s.rollbackJoin(id, s.toStatus(fmt.Errorf("promote %s: %w", id, err)))
	}
	s.log.Info("joining replica caught up and was promoted to voter", "id", id, "applied_at_least", target)
	return nil
}

// rollbackJoin removes the non-voter id again after its join failed with
// cause, and returns cause (a status error), noting a failed removal.
func (s *Server) rollbackJoin(id string, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	st := status.Convert(cause)
	code := st.Code()
	if err := s.node.RemoveServer(ctx, id); err != nil && !errors.Is(err, raftnode.ErrNotMember) {
		s.log.Warn("could not remove the non-voter of a failed join", "id", id, "error", err)
		// Not undone: where leadership was lost (Unavailable) the next
		// leader holds the non-voter, and the caller's retry there
		// finishes the join (adding a member again is idempotent).
		if code == codes.DeadlineExceeded || code == codes.Canceled {
			code = codes.FailedPrecondition
		}
		return status.Errorf(code, "%s; removing the non-voter %q again failed too: %v", st.Message(), id, err)
	}
	if code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Canceled {
		// Retrying would not help the caller: the join was undone.
		code = codes.FailedPrecondition
	}
	s.log.Warn("join failed; the non-voter was removed again", "id", id, "error", st.Message())
	return status.Errorf(code, "%s; %q was removed again", st.Message(), id)
}

// waitCaughtUp polls the joining replica until it answers as id, following
// this leader in term, with at least target applied. It gives up after
// JoinCatchUpTimeout (FailedPrecondition), when ctx ends, or when this
// replica stops serving term (Unavailable with a leader hint).
func (s *Server) waitCaughtUp(ctx context.Context, cc *grpc.ClientConn, id string, term, target uint64) error {
	deadline := time.Now().Add(s.cfg.JoinCatchUpTimeout)
	tick := time.NewTicker(catchUpPoll)
	defer tick.Stop()
	last := "no answer yet"
	for {
		if t, ok := s.node.ServingTerm(); !ok || t != term {
			return s.notLeader(fmt.Sprintf("leadership lost while %q was catching up", id))
		}
		pctx, cancel := context.WithTimeout(ctx, s.cfg.MemberProbeTimeout)
		resp, err := s.askReplica(pctx, cc, id)
		cancel()
		if err != nil {
			last = err.Error()
		} else {
			h := resp.GetHeader()
			if h.GetTerm() == term && h.GetLeaderId() == s.cfg.ReplicaID && resp.GetAppliedIndex() >= target {
				return nil
			}
			last = fmt.Sprintf("it is in term %d following %q with index %d applied", h.GetTerm(), h.GetLeaderId(), resp.GetAppliedIndex())
		}
		if time.Now().After(deadline) {
			return status.Errorf(codes.FailedPrecondition,
				"refused to promote %q: it did not catch up within %v (needs term %d, leader %q, index %d applied; last: %s)",
				id, s.cfg.JoinCatchUpTimeout, term, s.cfg.ReplicaID, target, last)
		}
		select {
		case <-ctx.Done():
			return status.Errorf(codes.FailedPrecondition, "stopped waiting for %q to catch up: %v (last: %s)", id, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// checkQuorum refuses (FailedPrecondition) a change after which the voters
// this leader can reach would be fewer than a quorum: voters are the voters
// of the new configuration other than the extra ones (a joining replica
// that has just answered), which count as reachable. This replica is
// reachable; every other voter is asked for its view at its gRPC address.
func (s *Server) checkQuorum(ctx context.Context, members []raftnode.Member, extra int, what string) error {
	var vs []raftnode.Member
	for _, m := range members {
		if m.Suffrage == voter {
			vs = append(vs, m)
		}
	}
	total := len(vs) + extra
	need := raftnode.Quorum(total)
	unreachable := s.unreachable(ctx, vs)
	reachable := total - len(unreachable)
	if reachable >= need {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition,
		"refused %s: the configuration would have %d voters, needing %d reachable, but only %d are (unreachable: %s); nothing was changed",
		what, total, need, reachable, strings.Join(unreachable, "; "))
}

// unreachable asks every voter but this replica, in parallel, whether it
// answers as itself, following this leader in this term. It returns one
// line per voter that does not, naming it and why.
func (s *Server) unreachable(ctx context.Context, voters []raftnode.Member) []string {
	term, _ := s.node.ServingTerm()
	var (
		mu  sync.Mutex
		out []string
		wg  sync.WaitGroup
	)
	add := func(line string) {
		mu.Lock()
		out = append(out, line)
		mu.Unlock()
	}
	for _, v := range voters {
		if v.ID == s.cfg.ReplicaID {
			continue
		}
		lm, ok := s.ledger.Member(v.ID)
		if !ok || lm.GRPCAddr == "" {
			add(fmt.Sprintf("%s (no gRPC address known)", v.ID))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc, err := s.dialPeer(lm.GRPCAddr)
			if err != nil {
				add(fmt.Sprintf("%s at %s (%v)", v.ID, lm.GRPCAddr, err))
				return
			}
			defer cc.Close()
			pctx, cancel := context.WithTimeout(ctx, s.cfg.MemberProbeTimeout)
			defer cancel()
			resp, err := s.askReplica(pctx, cc, v.ID)
			switch {
			case err != nil:
				add(fmt.Sprintf("%s at %s (%v)", v.ID, lm.GRPCAddr, err))
			case resp.GetHeader().GetTerm() != term || resp.GetHeader().GetLeaderId() != s.cfg.ReplicaID:
				add(fmt.Sprintf("%s at %s (in term %d following %q, not this leader in term %d)",
					v.ID, lm.GRPCAddr, resp.GetHeader().GetTerm(), resp.GetHeader().GetLeaderId(), term))
			}
		}()
	}
	wg.Wait()
	slices.Sort(out)
	return out
}

// dialPeer returns a connection to another replica's gRPC address over
// PeerTLS (plaintext when nil). grpc.NewClient connects lazily.
func (s *Server) dialPeer(addr string) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if s.cfg.PeerTLS != nil {
		creds = credentials.NewTLS(s.cfg.PeerTLS.Clone())
	}
	return grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
}

// askReplica asks the replica behind cc for its Cluster view and checks
// that it answers as replica id: the reply's header names it and, over
// TLS, its certificate is a replica certificate for id.
func (s *Server) askReplica(ctx context.Context, cc *grpc.ClientConn, id string) (*rolloutv1.ClusterResponse, error) {
	var p peer.Peer
	resp, err := rolloutv1.NewCoordinatorClient(cc).Cluster(ctx, &rolloutv1.ClusterRequest{}, grpc.Peer(&p))
	if err != nil {
		if st, ok := status.FromError(err); ok {
			return nil, fmt.Errorf("%s: %s", st.Code(), st.Message())
		}
		return nil, err
	}
	if got := resp.GetHeader().GetReplicaId(); got != id {
		return nil, fmt.Errorf("it answers as replica %q", got)
	}
	if s.cfg.PeerTLS != nil {
		ti, ok := p.AuthInfo.(credentials.TLSInfo)
		var leaf *x509.Certificate
		if ok {
			leaf, ok = mtls.VerifiedServerCert(s.cfg.PeerTLS, ti.State)
		}
		if !ok {
			return nil, errors.New("it presented no verified certificate")
		}
		ident, err := mtls.IdentityOf(leaf)
		if err != nil {
			return nil, fmt.Errorf("its certificate: %w", err)
		}
		if ident.Role != mtls.RoleReplica || ident.Name != id {
			return nil, fmt.Errorf("its certificate is %s, not a replica certificate for %q", ident, id)
		}
	}
	return resp, nil
}

func findMember(members []raftnode.Member, id string) (raftnode.Member, bool) {
	for _, m := range members {
		if m.ID == id {
			return m, true
		}
	}
	return raftnode.Member{}, false
}

func countVoters(members []raftnode.Member) int {
	n := 0
	for _, m := range members {
		if m.Suffrage == voter {
			n++
		}
	}
	return n
}

// memberList names members for an error message: "c1 (Voter), c2 (Nonvoter)".
func memberList(members []raftnode.Member) string {
	parts := make([]string, len(members))
	for i, m := range members {
		parts[i] = fmt.Sprintf("%s (%s)", m.ID, m.Suffrage)
	}
	return strings.Join(parts, ", ")
}
