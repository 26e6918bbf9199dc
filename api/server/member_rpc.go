package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm/fsmpb"
)

// Cluster describes the replica set from this replica's local view.
func (s *Server) Cluster(ctx context.Context, _ *rolloutv1.ClusterRequest) (*rolloutv1.ClusterResponse, error) {
	st := s.node.Stats()
	resp := &rolloutv1.ClusterResponse{
		Header: s.header(st.Term), State: st.State, CommitIndex: st.CommitIndex,
		AppliedIndex: st.AppliedIndex, LastLogIndex: st.LastLogIndex, LedgerEpoch: s.ledger.Epoch(),
		Insecure: s.cfg.Insecure,
	}
	resp.Limits = s.cfg.Limits.Proto()
	members, err := s.node.Members()
	if err != nil {
		return nil, s.toStatus(err)
	}
	leaderID, _ := s.node.Leader()
	for _, m := range members {
		pm := &rolloutv1.Member{Id: m.ID, RaftAddr: m.Address, Suffrage: m.Suffrage, Leader: m.ID == leaderID}
		if m.ID == s.cfg.ReplicaID {
			pm.GrpcAddr = s.cfg.GRPCAddr
		} else if lm, ok := s.ledger.Member(m.ID); ok {
			pm.GrpcAddr = lm.GRPCAddr
		}
		resp.Members = append(resp.Members, pm)
	}
	return resp, nil
}

// Join adds a replica as a voter. A non-leader answers Unavailable with the
// leader's hint; the joining replica's client follows it.
func (s *Server) Join(ctx context.Context, req *rolloutv1.JoinRequest) (*rolloutv1.JoinResponse, error) {
	if req.GetId() == "" || req.GetRaftAddr() == "" || req.GetGrpcAddr() == "" {
		return nil, status.Error(codes.InvalidArgument, "join needs id, raft_addr and grpc_addr")
	}
	if _, ok := s.node.ServingTerm(); !ok {
		return nil, s.notLeader("")
	}
	if err := s.node.AddVoter(ctx, req.GetId(), req.GetRaftAddr()); err != nil {
		return nil, s.toStatus(fmt.Errorf("add voter %s: %w", req.GetId(), err))
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_SetMember{SetMember: &fsmpb.SetMemberCmd{
		Id: req.GetId(), RaftAddr: req.GetRaftAddr(), GrpcAddr: req.GetGrpcAddr()}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	s.log.Info("replica joined", "id", req.GetId(), "raft", req.GetRaftAddr(), "grpc", req.GetGrpcAddr())
	return &rolloutv1.JoinResponse{Header: s.header(term)}, nil
}

// RemoveMember removes a replica. Removing the leader itself transfers
// leadership first and answers Unavailable so the caller retries at the new
// leader.
func (s *Server) RemoveMember(ctx context.Context, req *rolloutv1.RemoveMemberRequest) (*rolloutv1.RemoveMemberResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "id is empty")
	}
	if _, ok := s.node.ServingTerm(); !ok {
		return nil, s.notLeader("")
	}
	if req.GetId() == s.cfg.ReplicaID {
		if err := s.node.TransferLeadership(ctx); err != nil {
			return nil, s.toStatus(err)
		}
		return nil, s.notLeader("leadership transferred before removing this replica; retry")
	}
	if err := s.node.RemoveServer(ctx, req.GetId()); err != nil {
		return nil, s.toStatus(err)
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_RemoveMember{RemoveMember: &fsmpb.RemoveMemberCmd{Id: req.GetId()}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	return &rolloutv1.RemoveMemberResponse{Header: s.header(term)}, nil
}
