package coordclient

import (
	"context"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// Renew asks the cluster to sign a new certificate for the caller's own
// identity (see the Renew RPC). Like every call it goes to the replica
// believed to lead and retries elsewhere while replicas are unreachable; a
// refusal (FAILED_PRECONDITION when the replica holds no CA key,
// PERMISSION_DENIED, INVALID_ARGUMENT) is returned at once with its status.
func (c *Client) Renew(ctx context.Context, req *rolloutv1.RenewRequest) (*rolloutv1.RenewResponse, error) {
	return call(ctx, c, "Renew", req, 0, nil, rolloutv1.CoordinatorClient.Renew)
}
