package server

import (
	"context"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// ReplicaInfo answers another replica's question "who are you, and do you
// belong to a formed cluster?" from this replica's local view: its id (in
// the header), its advertised Raft and gRPC addresses, whether it started
// from Raft state, the configuration it holds, the leader it knows, and
// formed (any of those three). It is served whether or not this replica
// leads, has a configuration, or has applied anything (a replica that
// waits for its peers at start answers it). Authz admits role replica
// only; an insecure replica answers anyone.
func (s *Server) ReplicaInfo(ctx context.Context, _ *rolloutv1.ReplicaInfoRequest) (*rolloutv1.ReplicaInfoResponse, error) {
	st := s.node.Stats()
	resp := &rolloutv1.ReplicaInfoResponse{
		Header:   s.header(st.Term),
		RaftAddr: s.node.Addr(),
		GrpcAddr: s.cfg.GRPCAddr,
		HasState: s.node.HasState(),
	}
	members, err := s.node.Members()
	if err != nil {
		return nil, s.toStatus(err)
	}
	leaderID, _ := s.node.Leader()
	resp.LeaderId = leaderID
	for _, m := range members {
		pm := &rolloutv1.Member{Id: m.ID, RaftAddr: m.Address, Suffrage: suffrage(m.Suffrage), Leader: m.ID == leaderID}
		if m.ID == s.cfg.ReplicaID {
			pm.GrpcAddr = s.cfg.GRPCAddr
		} else if lm, ok := s.ledger.Member(m.ID); ok {
			pm.GrpcAddr = lm.GRPCAddr
		}
		resp.Members = append(resp.Members, pm)
	}
	resp.Formed = resp.HasState || len(members) > 0 || leaderID != ""
	return resp, nil
}
