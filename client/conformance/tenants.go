package conformance

import (
	"context"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// The tenants step's names: a tenant and its two runs.
const (
	Tenant     = "conformance-tenant"
	TenantRun  = "conformance-tenant-run"
	TenantRun2 = "conformance-tenant-run-2"
)

// tenants is the scenario's last step (its run stays queued, so that it
// cannot meet the other steps' claims): a run submitted for a tenant at
// priority 5 reports both; SetTenant sets the tenant's weight and a
// max_queued of 1; a submit past it is RESOURCE_EXHAUSTED naming the
// tenant and changes nothing; ListTenants reports the tenant. Without the
// Tenants group, SetTenant and ListTenants answer Unimplemented.
func (s *scenario) tenants() {
	if !s.caps.Has(Tenants) {
		s.unimplemented("SetTenant", func(ctx context.Context) error {
			_, err := s.cl.SetTenant(ctx, &rolloutv1.SetTenantRequest{Name: Tenant})
			return err
		})
		s.unimplemented("ListTenants", func(ctx context.Context) error {
			_, err := s.cl.ListTenants(ctx, &rolloutv1.ListTenantsRequest{})
			return err
		})
		return
	}
	t := s.t
	ctx, cancel := s.ctx()
	defer cancel()
	item := func(i int) []*rolloutv1.SubmitItem {
		it := Items()[i]
		it.DependsOn = nil
		return []*rolloutv1.SubmitItem{it}
	}
	_, err := s.cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: TenantRun,
		Spec: &rolloutv1.RunSpec{Tenant: Tenant, Priority: 5, Total: 1}, Items: item(A)})
	require.NoError(t, err)
	st, err := s.cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: TenantRun})
	require.NoError(t, err)
	require.Len(t, st.GetRuns(), 1)
	require.Equal(t, Tenant, st.GetRuns()[0].GetTenant())
	require.Equal(t, uint32(5), st.GetRuns()[0].GetPriority())

	weight, queued := uint32(2), uint64(1)
	set, err := s.cl.SetTenant(ctx, &rolloutv1.SetTenantRequest{Name: Tenant, Weight: &weight, MaxQueued: &queued})
	require.NoError(t, err)
	require.Equal(t, weight, set.GetTenant().GetWeight())
	require.Equal(t, queued, set.GetTenant().GetMaxQueued())
	require.Equal(t, uint64(1), set.GetTenant().GetQueued())

	_, err = s.cl.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: TenantRun2,
		Spec: &rolloutv1.RunSpec{Tenant: Tenant}, Items: item(B)})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), Tenant)
	_, err = s.cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: TenantRun2})
	require.Equal(t, codes.NotFound, status.Code(err), "a refused submit created the run: %v", err)

	list, err := s.cl.ListTenants(ctx, &rolloutv1.ListTenantsRequest{})
	require.NoError(t, err)
	var found *rolloutv1.Tenant
	for _, x := range list.GetTenants() {
		if x.GetName() == Tenant {
			found = x
		}
	}
	require.NotNil(t, found, "ListTenants lists %q", Tenant)
	require.Equal(t, weight, found.GetWeight())
	require.Equal(t, uint32(1), found.GetRuns())
	require.Equal(t, uint64(1), found.GetQueued())
}
