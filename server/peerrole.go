package server

import (
	"context"

	"github.com/rollout/rollout/internal/mtls"
)

// The callee's side of federation (docs/FEDERATION.md): what another
// cluster, holding a peer certificate issued by this cluster's CA and named
// after the calling cluster (NAME), may do here. Authz lets it call only
// SubmitItems, SubmitRanges, RunStatus, Events, Results, CancelRun and
// DeleteRun of runs named "NAME/..." (PeerRunPrefix), and the peer RPCs
// declared for role peer; the handlers then hold it to tenant NAME
// (tenant.go, package tenancy), whose weight, quotas and maximum priority
// the operator sets like any tenant's. A revoked peer certificate is
// refused like any other (Authz). RunStatus answers a peer without this
// cluster's workers.

// peerCaller returns the cluster name of the caller of ctx when it holds a
// peer certificate, and whether it does. An insecure replica has no
// callers' identities, hence no peers.
func peerCaller(ctx context.Context) (string, bool) {
	id, err := mtls.PeerIdentity(ctx)
	if err != nil || id.Role != mtls.RolePeer {
		return "", false
	}
	return id.Name, true
}
