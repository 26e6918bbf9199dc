package coordclient

import (
	"context"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// SetTenant (admin) sets a tenant's weight and quotas (unset fields keep
// their value).
func (c *Client) SetTenant(ctx context.Context, req *rolloutv1.SetTenantRequest) (*rolloutv1.SetTenantResponse, error) {
	return call(ctx, c, "SetTenant", req, 0, nil, rolloutv1.CoordinatorClient.SetTenant)
}

// ListTenants lists every tenant the ledger knows, with its weight, quotas,
// work and share (linearizable).
func (c *Client) ListTenants(ctx context.Context, req *rolloutv1.ListTenantsRequest) (*rolloutv1.ListTenantsResponse, error) {
	return call(ctx, c, "ListTenants", req, 0, nil, rolloutv1.CoordinatorClient.ListTenants)
}
