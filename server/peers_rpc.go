package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
)

// PeerRuns and PeerInfo: the callee side of federation (issue 42), what a
// parent cluster's leader polls.

// peerRPCs declares PeerRuns's and PeerInfo's authorization: an admin, or
// a replica (its dashboard); the peer role is added by the peer-role
// permissions (a peer certificate reads only its own runs).
func peerRPCs() []rpcSpec {
	return []rpcSpec{
		{Method: rolloutv1.Coordinator_PeerRuns_FullMethodName, Roles: []mtls.Role{mtls.RoleAdmin, mtls.RoleReplica}},
		{Method: rolloutv1.Coordinator_PeerInfo_FullMethodName, Roles: []mtls.Role{mtls.RoleAdmin, mtls.RoleReplica}},
	}
}

// PeerRuns lists the runs under a calling cluster's name prefix.
func (s *Server) PeerRuns(ctx context.Context, req *rolloutv1.PeerRunsRequest) (*rolloutv1.PeerRunsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "PeerRuns is not implemented yet")
}

// PeerInfo tells a calling cluster who this cluster is and what it serves.
func (s *Server) PeerInfo(ctx context.Context, req *rolloutv1.PeerInfoRequest) (*rolloutv1.PeerInfoResponse, error) {
	return nil, status.Error(codes.Unimplemented, "PeerInfo is not implemented yet")
}
