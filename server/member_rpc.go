package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/raftnode"
)

// Cluster describes the replica set from this replica's local view.
func (s *Server) Cluster(ctx context.Context, _ *rolloutv1.ClusterRequest) (*rolloutv1.ClusterResponse, error) {
	st := s.node.Stats()
	resp := &rolloutv1.ClusterResponse{
		Header: s.header(st.Term), State: replicaState(st.State), CommitIndex: st.CommitIndex,
		AppliedIndex: st.AppliedIndex, LastLogIndex: st.LastLogIndex, LedgerEpoch: s.ledger.Epoch(),
		Insecure: s.cfg.Insecure,
	}
	resp.ClusterId = s.ledger.ClusterID()
	resp.ClusterName = s.cfg.ClusterName
	resp.Peers = s.peerStatuses()
	resp.Limits = s.cfg.Limits.Proto()
	resp.Limits.MaxSummaryBytes = limits.MaxSummaryBytes
	resp.Limits.CapacityItems, resp.Limits.CapacityBytes = s.cfg.CapacityItems, s.cfg.CapacityBytes
	resp.Limits.UsedItems, resp.Limits.UsedBytes = s.ledger.Usage()
	now := time.Now()
	if src := s.cfg.TLSSource; src != nil {
		leaf := src.Current().Leaf
		id, _ := mtls.IdentityOf(leaf)
		resp.Certificate = certInfo(mtls.PeerCert{Identity: id, Serial: mtls.SerialOf(leaf), NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter}, now)
	}
	if revs := s.cfg.Revocations; revs != nil {
		for _, p := range revs.ExpiringPeers(now) {
			resp.ExpiringPeers = append(resp.ExpiringPeers, certInfo(p, now))
		}
	}
	members, err := s.node.Members()
	if err != nil {
		return nil, s.toStatus(err)
	}
	leaderID, _ := s.node.Leader()
	for _, m := range members {
		pm := &rolloutv1.Member{Id: m.ID, RaftAddr: m.Address, Suffrage: suffrage(m.Suffrage), Leader: m.ID == leaderID}
		if m.ID == s.cfg.ReplicaID {
			pm.GrpcAddr = s.cfg.GRPCAddr
		} else if lm, ok := s.ledger.Member(m.ID); ok {
			pm.GrpcAddr = lm.GRPCAddr
		}
		resp.Members = append(resp.Members, pm)
	}
	return resp, nil
}

// certInfo describes a certificate for Cluster.
func certInfo(p mtls.PeerCert, now time.Time) *rolloutv1.CertificateInfo {
	return &rolloutv1.CertificateInfo{Name: p.Name, Role: string(p.Role), Serial: p.Serial,
		NotBeforeUnixNano: p.NotBefore.UnixNano(), NotAfterUnixNano: p.NotAfter.UnixNano(),
		Expiring: p.NotAfter.Sub(now) <= p.NotAfter.Sub(p.NotBefore)/mtls.ExpiringFraction}
}

// replicaState maps raftnode's state names (hashicorp/raft's RaftState
// strings) onto the API's enum; an unknown name is unspecified.
func replicaState(s string) rolloutv1.ReplicaState {
	switch s {
	case "Follower":
		return rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER
	case "Candidate":
		return rolloutv1.ReplicaState_REPLICA_STATE_CANDIDATE
	case "Leader":
		return rolloutv1.ReplicaState_REPLICA_STATE_LEADER
	case "Shutdown":
		return rolloutv1.ReplicaState_REPLICA_STATE_SHUTDOWN
	default:
		return rolloutv1.ReplicaState_REPLICA_STATE_UNSPECIFIED
	}
}

// suffrage maps raftnode's suffrage names (hashicorp/raft's ServerSuffrage
// strings) onto the API's enum; an unknown name is unspecified.
func suffrage(s string) rolloutv1.Suffrage {
	switch s {
	case voter:
		return rolloutv1.Suffrage_SUFFRAGE_VOTER
	case "Nonvoter":
		return rolloutv1.Suffrage_SUFFRAGE_NONVOTER
	case "Staging":
		return rolloutv1.Suffrage_SUFFRAGE_STAGING
	default:
		return rolloutv1.Suffrage_SUFFRAGE_UNSPECIFIED
	}
}

// Join adds a replica to the cluster without ever risking its quorum.
// Every check runs before the configuration changes: the id and both
// addresses are validated (InvalidArgument), the joining replica must
// answer at grpc_addr as that id (with TLS, with a replica certificate for
// it), and the voters this leader can reach now must still be a quorum of
// the larger voter set (FailedPrecondition, naming who is unreachable).
// The replica then enters as a non-voter and is promoted to voter only once
// it answers as a follower of this leader in this term with everything up
// to the leader's commit index applied; if it does not within
// JoinCatchUpTimeout it is removed again and Join fails with
// FailedPrecondition. A rejoin of a voter at the same address changes
// nothing. A non-leader answers Unavailable with the leader's hint; the
// joining replica's client follows it.
func (s *Server) Join(ctx context.Context, req *rolloutv1.JoinRequest) (*rolloutv1.JoinResponse, error) {
	id, raftAddr, grpcAddr := req.GetId(), req.GetRaftAddr(), req.GetGrpcAddr()
	if err := validJoin(id, raftAddr, grpcAddr); err != nil {
		return nil, err
	}
	if _, ok := s.node.ServingTerm(); !ok {
		return nil, s.notLeader("")
	}
	release, err := s.lockMembers(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := s.join(ctx, id, raftAddr, grpcAddr); err != nil {
		return nil, err
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_SetMember{SetMember: &fsmpb.SetMemberCmd{
		Id: id, RaftAddr: raftAddr, GrpcAddr: grpcAddr}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	s.log.Info("replica joined", "id", id, "raft", raftAddr, "grpc", grpcAddr)
	return &rolloutv1.JoinResponse{Header: s.header(term)}, nil
}

// RemoveMember removes a replica. An id that is not a member is NotFound.
// A voter is removed only if the voters left that this leader can reach
// are a quorum of the smaller voter set, and never the last voter
// (FailedPrecondition). Removing the leader itself transfers leadership
// first and answers Unavailable so the caller retries at the new leader.
func (s *Server) RemoveMember(ctx context.Context, req *rolloutv1.RemoveMemberRequest) (*rolloutv1.RemoveMemberResponse, error) {
	// Only the size is checked: a malformed id is not a member (NotFound),
	// unless an old release let it into the configuration, and then this is
	// how it leaves.
	id := req.GetId()
	if id == "" || len(id) > maxRemoveIDBytes {
		return nil, status.Errorf(codes.InvalidArgument, "remove member: id must be 1 to %d bytes, got %d", maxRemoveIDBytes, len(id))
	}
	if _, ok := s.node.ServingTerm(); !ok {
		return nil, s.notLeader("")
	}
	release, err := s.lockMembers(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	members, err := s.node.Members()
	if err != nil {
		return nil, s.toStatus(err)
	}
	target, ok := findMember(members, id)
	if !ok {
		if _, inLedger := s.ledger.Member(id); !inLedger {
			return nil, status.Errorf(codes.NotFound, "replica %q is not a member of the cluster (members: %s)", id, memberList(members))
		}
		// Raft already dropped it (an earlier removal whose ledger update
		// did not happen): finish that removal.
	} else {
		if target.Suffrage == voter {
			var rest []raftnode.Member
			for _, m := range members {
				if m.ID != id {
					rest = append(rest, m)
				}
			}
			if countVoters(rest) == 0 {
				return nil, status.Errorf(codes.FailedPrecondition, "refused to remove %q: it is the last voter", id)
			}
			if err := s.checkQuorum(ctx, rest, 0, fmt.Sprintf("removing %q", id)); err != nil {
				return nil, err
			}
		}
		if id == s.cfg.ReplicaID {
			if err := s.node.TransferLeadership(ctx); err != nil {
				return nil, s.toStatus(err)
			}
			return nil, s.notLeader("leadership transferred before removing this replica; retry")
		}
		if err := s.node.RemoveServer(ctx, id); err != nil {
			return nil, s.toStatus(err)
		}
	}
	if _, inLedger := s.ledger.Member(id); !inLedger {
		s.log.Info("replica removed", "id", id)
		term, _ := s.node.ServingTerm()
		return &rolloutv1.RemoveMemberResponse{Header: s.header(term)}, nil
	}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_RemoveMember{RemoveMember: &fsmpb.RemoveMemberCmd{Id: id}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	s.log.Info("replica removed", "id", id)
	return &rolloutv1.RemoveMemberResponse{Header: s.header(term)}, nil
}

// memberRPCs declares the membership RPCs' authorization: Cluster any
// role; Join an admin, or a replica certificate whose name is the id it
// joins (a replica's own join); RemoveMember an admin; ReplicaInfo a
// replica (the peers of a replica started with --bootstrap-expect).
func memberRPCs() []rpcSpec {
	return []rpcSpec{
		{Method: rolloutv1.Coordinator_Cluster_FullMethodName, AnyRole: true},
		{Method: rolloutv1.Coordinator_Join_FullMethodName, Roles: []mtls.Role{mtls.RoleAdmin}, ReplicaSelf: true},
		adminOnly(rolloutv1.Coordinator_RemoveMember_FullMethodName),
		{Method: rolloutv1.Coordinator_ReplicaInfo_FullMethodName, Roles: []mtls.Role{mtls.RoleReplica}},
	}
}
