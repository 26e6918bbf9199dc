package server

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
)

// Method-name prefixes of the standard services a replica also serves.
const (
	healthPrefix          = "/grpc.health.v1.Health/"
	reflectionPrefix      = "/grpc.reflection.v1.ServerReflection/"
	reflectionAlphaPrefix = "/grpc.reflection.v1alpha.ServerReflection/"
)

// Authz decides, for every gRPC call a replica receives, whether the caller's
// certificate role allows it, before any handler runs (so a refused call
// changes nothing). The rules:
//
//   - Worker RPCs (Claim, Report, ReportRange, Heartbeat, Deregister,
//     OwnedItems, Steal, Register): role worker, and worker_id equal to the certificate's name.
//   - SubmitItems, SubmitRanges, Results, CancelRun, DeleteRun: role client,
//     admin or gateway; the handlers hold a client to its own tenant's runs
//     (tenant.go).
//   - RunStatus, Events, ListTenants: role client, admin, gateway or replica
//     (a replica's web dashboard reads them through the leader; a replica
//     holds the whole ledger already, so this reveals nothing it does not
//     have).
//   - SetTenant: role admin.
//   - Cluster, grpc health and reflection: any role.
//   - Renew: any role, for the caller's own name and role only (the
//     handler compares the CSR with the certificate).
//   - Join: role admin, or a replica certificate whose name is the id it
//     joins (a replica's own join).
//   - RemoveMember, EvictWorker, RevokeCertificate, Revocations: role admin.
//   - Any other method: refused.
//
// A certificate without a role authorizes nothing. Every refusal is
// codes.PermissionDenied naming the method, the role needed and the role
// held. A replica running with Insecure has no caller identity: every call
// is allowed (insecure is announced at start and in Cluster).
type Authz struct {
	insecure bool
	revs     *mtls.Revocations
}

// NewAuthz returns the authorization layer of a replica; insecure must be
// true exactly when the replica serves gRPC without TLS.
func NewAuthz(insecure bool) *Authz { return &Authz{insecure: insecure} }

// WithRevocations makes the layer refuse every request whose certificate
// revs holds (Unauthenticated), and returns it.
func (a *Authz) WithRevocations(revs *mtls.Revocations) *Authz {
	a.revs = revs
	return a
}

// ServerOptions returns the interceptors as gRPC server options, chained
// ahead of any other interceptor given later, and a handler for unknown
// methods so that those too pass through Authorize (refused with
// PermissionDenied; Unimplemented on an insecure replica).
func (a *Authz) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.Unary),
		grpc.ChainStreamInterceptor(a.Stream),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			m, _ := grpc.MethodFromServerStream(ss)
			return status.Errorf(codes.Unimplemented, "unknown method %s", m)
		}),
	}
}

// Unary is the unary server interceptor: it authorizes the call before the
// handler runs.
func (a *Authz) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.Authorize(ctx, info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream is the stream server interceptor (health Watch, reflection). A
// stream's request is not known when it opens, so a method whose rule needs
// the request is refused.
func (a *Authz) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := a.Authorize(ss.Context(), info.FullMethod, nil); err != nil {
		return err
	}
	return handler(srv, ss)
}

// Authorize returns nil when the caller of method (a full gRPC method name)
// in ctx may make the call with req, else a PermissionDenied status naming
// why.
func (a *Authz) Authorize(ctx context.Context, method string, req any) error {
	if a.insecure {
		return nil
	}
	if a.revs != nil {
		// A revoked certificate is told, on every call, that and why it is
		// revoked (the gRPC handshake admits it: see
		// mtls.Source.ConfigAdmittingRevoked); a request that raced the
		// close of a newly revoked certificate's connection too.
		if c, err := mtls.PeerCertificate(ctx); err == nil {
			if rec, revoked := a.revs.Record(c); revoked {
				return RevokedStatus(method, c, rec)
			}
		}
	}
	id, err := mtls.PeerIdentity(ctx)
	switch {
	case errors.Is(err, mtls.ErrNoPeerIdentity):
		return denied(method, "the caller presented no verified client certificate (this replica requires mutual TLS)")
	case errors.Is(err, mtls.ErrNoRole):
		return denied(method, fmt.Sprintf("the certificate %q carries no role (issue it with rollout certs --names NAME:ROLE)", id.Name))
	case err != nil:
		return denied(method, err.Error())
	}
	return authorizeIdentity(id, method, req)
}

// authorizeIdentity applies the rules to a caller with a role.
func authorizeIdentity(id mtls.Identity, method string, req any) error {
	held := fmt.Sprintf("the certificate %q has role %s", id.Name, id.Role)
	need := func(roles ...mtls.Role) error {
		for _, r := range roles {
			if id.Role == r {
				return nil
			}
		}
		names := make([]string, len(roles))
		for i, r := range roles {
			names[i] = string(r)
		}
		return denied(method, fmt.Sprintf("needs role %s; %s", strings.Join(names, " or "), held))
	}
	switch method {
	case rolloutv1.Coordinator_Claim_FullMethodName, rolloutv1.Coordinator_Report_FullMethodName,
		rolloutv1.Coordinator_Heartbeat_FullMethodName, rolloutv1.Coordinator_Deregister_FullMethodName,
		rolloutv1.Coordinator_OwnedItems_FullMethodName, rolloutv1.Coordinator_Steal_FullMethodName,
		rolloutv1.Coordinator_Register_FullMethodName,
		rolloutv1.Coordinator_ReportRange_FullMethodName:
		if err := need(mtls.RoleWorker); err != nil {
			return err
		}
		w, ok := req.(interface{ GetWorkerId() string })
		if !ok {
			return denied(method, "the request names no worker")
		}
		if workerIdentityEnforced && w.GetWorkerId() != id.Name {
			return denied(method, fmt.Sprintf("worker %q may act only as itself, not as worker %q", id.Name, w.GetWorkerId()))
		}
		return nil
	case rolloutv1.Coordinator_SubmitItems_FullMethodName, rolloutv1.Coordinator_SubmitRanges_FullMethodName,
		rolloutv1.Coordinator_Results_FullMethodName,
		rolloutv1.Coordinator_CancelRun_FullMethodName, rolloutv1.Coordinator_DeleteRun_FullMethodName:
		// Which runs: the handler holds a client to its own tenant's.
		return need(mtls.RoleClient, mtls.RoleAdmin, mtls.RoleGateway)
	case rolloutv1.Coordinator_RunStatus_FullMethodName, rolloutv1.Coordinator_Events_FullMethodName,
		rolloutv1.Coordinator_ListTenants_FullMethodName:
		return need(mtls.RoleClient, mtls.RoleAdmin, mtls.RoleGateway, mtls.RoleReplica)
	case rolloutv1.Coordinator_SetTenant_FullMethodName:
		return need(mtls.RoleAdmin)
	case rolloutv1.Coordinator_Cluster_FullMethodName:
		return nil
	case rolloutv1.Coordinator_Renew_FullMethodName:
		// Any role renews; the handler holds the request to the caller's
		// own name and role.
		return nil
	case rolloutv1.Coordinator_Join_FullMethodName:
		if id.Role == mtls.RoleReplica {
			j, ok := req.(*rolloutv1.JoinRequest)
			if ok && j.GetId() == id.Name {
				return nil
			}
			return denied(method, fmt.Sprintf("a replica certificate may join only itself: %q may not join %q (or the role admin is needed)", id.Name, j.GetId()))
		}
		return need(mtls.RoleAdmin)
	case rolloutv1.Coordinator_RemoveMember_FullMethodName, rolloutv1.Coordinator_EvictWorker_FullMethodName,
		rolloutv1.Coordinator_RevokeCertificate_FullMethodName, rolloutv1.Coordinator_Revocations_FullMethodName:
		return need(mtls.RoleAdmin)
	}
	if strings.HasPrefix(method, healthPrefix) || strings.HasPrefix(method, reflectionPrefix) ||
		strings.HasPrefix(method, reflectionAlphaPrefix) {
		return nil
	}
	return denied(method, "unknown method; "+held)
}

// denied is the PermissionDenied status for method with reason.
func denied(method, reason string) error {
	return status.Errorf(codes.PermissionDenied, "permission denied for %s: %s", method, reason)
}

// RevokedStatus is the PERMISSION_DENIED a call of method made with the
// revoked certificate c gets (rolloutv1.RevokedError): it names c and the
// record rec that revokes it (who revoked it, when, why).
func RevokedStatus(method string, c *x509.Certificate, rec mtls.Revocation) error {
	id, _ := mtls.IdentityOf(c)
	return rolloutv1.RevokedError(method, rolloutv1.Revoked{Name: c.Subject.CommonName, Role: string(id.Role), Serial: mtls.SerialOf(c),
		RevokedAt: rec.At, By: rec.By, Reason: rec.Reason})
}
