package coordclient

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// Renew asks the cluster to sign a new certificate for the caller's own
// identity (see the Renew RPC), over the client's mutual-TLS connections.
// Like every call it goes first to the replica believed to lead, retrying
// elsewhere while replicas are unreachable. Only replicas that hold the CA
// key sign: when that one answers FAILED_PRECONDITION, every other
// configured address is asked once in turn (a replica that signs need not
// lead); if none signs, the first refusal is returned with its status. Other
// refusals (PERMISSION_DENIED, INVALID_ARGUMENT) are returned at once.
func (c *Client) Renew(ctx context.Context, req *rolloutv1.RenewRequest) (*rolloutv1.RenewResponse, error) {
	resp, err := call(ctx, c, "Renew", req, 0, nil, rolloutv1.CoordinatorClient.Renew)
	if status.Code(err) != codes.FailedPrecondition {
		return resp, err
	}
	first := err
	tried := c.Leader()
	for _, addr := range c.cfg.Addrs {
		if addr == tried || ctx.Err() != nil {
			continue
		}
		cc, cerr := c.conn(addr)
		if cerr != nil {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		r, rerr := rolloutv1.NewCoordinatorClient(cc).Renew(actx, req)
		cancel()
		if rerr == nil {
			// Renew decides nothing in the ledger: the reply's term is not
			// held to the epoch guard.
			return r, nil
		}
		c.log.Debug("renew refused", "addr", addr, "error", rerr)
	}
	return nil, fmt.Errorf("%w (no other replica signed either)", first)
}
