package server

import (
	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
)

// PeerRuns and PeerInfo: the callee side of federation (issue 42), what a
// parent cluster's leader polls.

// peerRPCs declares PeerRuns's and PeerInfo's authorization: a peer
// certificate (its own runs only: the handler takes the prefix from the
// certificate's name) or an admin; PeerInfo a replica too.
func peerRPCs() []rpcSpec {
	return []rpcSpec{
		{Method: rolloutv1.Coordinator_PeerRuns_FullMethodName, Roles: []mtls.Role{mtls.RolePeer, mtls.RoleAdmin}},
		{Method: rolloutv1.Coordinator_PeerInfo_FullMethodName, Roles: []mtls.Role{mtls.RolePeer, mtls.RoleAdmin, mtls.RoleReplica}},
	}
}
