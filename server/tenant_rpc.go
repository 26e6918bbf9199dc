package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/mtls"
)

// SetTenant and ListTenants: an admin sets a tenant's weight and quotas; anyone who reads runs lists tenants.

// tenantRPCs declares the tenant RPCs' authorization: SetTenant is admin
// only; ListTenants is read as RunStatus is.
func tenantRPCs() []rpcSpec {
	return []rpcSpec{
		{Method: rolloutv1.Coordinator_SetTenant_FullMethodName, Roles: []mtls.Role{mtls.RoleAdmin}},
		{Method: rolloutv1.Coordinator_ListTenants_FullMethodName, Roles: readerRoles()},
	}
}

// SetTenant (admin) sets a tenant's weight, quotas and maximum priority
// (fsm tenants.go: a higher priority of a run it creates is clamped to
// it): one ledger command.
func (s *Server) SetTenant(ctx context.Context, req *rolloutv1.SetTenantRequest) (*rolloutv1.SetTenantResponse, error) {
	if err := s.cfg.Limits.Tenant(req.GetName()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "set tenant refused, nothing was changed: %v", err)
	}
	if req.Weight != nil && (req.GetWeight() < 1 || req.GetWeight() > fsm.MaxTenantWeight) {
		return nil, status.Errorf(codes.InvalidArgument, "set tenant %q refused, nothing was changed: weight %d, must be 1 to %d",
			req.GetName(), req.GetWeight(), fsm.MaxTenantWeight)
	}
	if req.GetMaxPriority() > fsm.MaxPriority {
		return nil, status.Errorf(codes.InvalidArgument, "set tenant %q refused, nothing was changed: max_priority %d, must be %d to %d (0: none)",
			req.GetName(), req.GetMaxPriority(), fsm.MinPriority, fsm.MaxPriority)
	}
	cmd := &fsmpb.SetTenantCmd{Name: req.GetName(), Weight: req.Weight, MaxQueued: req.MaxQueued, MaxRunning: req.MaxRunning,
		MaxPriority: req.MaxPriority}
	res, term, err := s.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_SetTenant{SetTenant: cmd}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return nil, s.toStatus(err)
	}
	s.log.Info("tenant set", "tenant", req.GetName(), "by", caller(ctx), "weight", req.Weight, "max_queued", req.MaxQueued, "max_running", req.MaxRunning, "max_priority", req.MaxPriority)
	resp := &rolloutv1.SetTenantResponse{Header: s.header(term)}
	for _, t := range s.tenants() {
		if t.GetName() == req.GetName() {
			resp.Tenant = t
		}
	}
	return resp, nil
}

// ListTenants lists every tenant the ledger knows (linearizable).
func (s *Server) ListTenants(ctx context.Context, _ *rolloutv1.ListTenantsRequest) (*rolloutv1.ListTenantsResponse, error) {
	term, err := s.readBarrier(ctx)
	if err != nil {
		return nil, err
	}
	return &rolloutv1.ListTenantsResponse{Header: s.header(term), Tenants: s.tenants()}, nil
}
