package server

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
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
// changes nothing). The rules are declared beside each handler (rpcSpec,
// in <group>_rpc.go); they come to:
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
//   - Cluster: any role but peer; grpc health and reflection: any role.
//   - Renew: any role but peer, for the caller's own name and role only (the
//     handler compares the CSR with the certificate).
//   - Join: role admin, or a replica certificate whose name is the id it
//     joins (a replica's own join).
//   - RemoveMember, EvictWorker, RevokeCertificate, Revocations: role admin.
//   - ReplicaInfo: role replica.
//   - Role peer (another rollout cluster, federation: docs/FEDERATION.md),
//     whose certificate names the calling cluster NAME: SubmitItems,
//     SubmitRanges, RunStatus, Events, Results, CancelRun and DeleteRun
//     of a run named "NAME/..." only (RunStatus and Events must name
//     one); the handlers make it tenant NAME (tenant.go). The peer RPCs
//     declared for role peer (PeerRuns, PeerInfo) too. Nothing else, not
//     even the methods open to any role (Cluster, Renew): only grpc
//     health and reflection.
//   - Any other method: refused.
//
// A certificate without a role authorizes nothing. Every refusal is
// codes.PermissionDenied naming the method, the role needed and the role
// held. A replica running with Insecure has no caller identity: every call
// is allowed (insecure is announced at start and in Cluster).
type Authz struct {
	insecure bool
	revs     *mtls.Revocations
	table    map[string]rpcSpec // from rpcSpecs
}

// NewAuthz returns the authorization layer of a replica; insecure must be
// true exactly when the replica serves gRPC without TLS. The rules are the
// rpcSpecs declared beside the handlers; it panics if those are malformed
// (a bug that TestEveryRPCDeclared catches first).
func NewAuthz(insecure bool) *Authz {
	t, err := rpcTable(rpcSpecs())
	if err != nil {
		panic(err)
	}
	return &Authz{insecure: insecure, table: t}
}

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
	return authorizeIdentity(a.table, id, method, req)
}

// rpcSpec is one RPC's authorization, declared beside its handler in the
// group's <group>_rpc.go (see doc.go): who may call Method. The rules are
// data, read by the interceptor (Authz) and by the authorization-matrix
// test alike; a Coordinator method without an rpcSpec is refused.
type rpcSpec struct {
	// Method is the full gRPC method name
	// (rolloutv1.Coordinator_X_FullMethodName).
	Method string
	// Roles are the certificate roles allowed, any of them.
	Roles []mtls.Role
	// AnyRole allows every certificate that carries a role; Roles is then
	// empty.
	AnyRole bool
	// WorkerSelf holds the request's worker_id to the certificate's name
	// (a worker acts only as itself).
	WorkerSelf bool
	// ReplicaSelf also allows a replica certificate whose name is the
	// request's id (a replica's own Join).
	ReplicaSelf bool
	// PeerRun also allows a peer certificate (another cluster, NAME) when
	// the request names a run (GetRun) under "NAME/" (PeerRunPrefix).
	PeerRun bool
}

// rpcSpecs is every Coordinator RPC's declaration, gathered from the groups'
// files. A new RPC adds its rpcSpec to its group's list; a new group adds
// its list here.
func rpcSpecs() []rpcSpec {
	return slices.Concat(submitRPCs(), statusRPCs(), resultsRPCs(), rangesRPCs(), eventsRPCs(),
		workerRPCs(), heartbeatRPCs(), lifecycleRPCs(), tenantRPCs(), memberRPCs(), renewRPCs(),
		evictRPCs(), revokeRPCs(), peerRPCs())
}

// rpcTable indexes specs by method; a method declared twice is a bug
// (ErrDuplicateRPCSpec).
func rpcTable(specs []rpcSpec) (map[string]rpcSpec, error) {
	t := make(map[string]rpcSpec, len(specs))
	for _, sp := range specs {
		if _, dup := t[sp.Method]; dup {
			return nil, fmt.Errorf("%w: %s", ErrDuplicateRPCSpec, sp.Method)
		}
		if sp.AnyRole == (len(sp.Roles) > 0) {
			return nil, fmt.Errorf("%w: %s must name roles or AnyRole, not both or neither", ErrBadRPCSpec, sp.Method)
		}
		t[sp.Method] = sp
	}
	return t, nil
}

// ErrDuplicateRPCSpec: two rpcSpecs declare one method.
var ErrDuplicateRPCSpec = errors.New("server: an RPC is declared twice")

// ErrBadRPCSpec: an rpcSpec names no roles, or roles and AnyRole.
var ErrBadRPCSpec = errors.New("server: an RPC declaration is malformed")

// authorizeIdentity applies the rules of table to a caller with a role.
func authorizeIdentity(table map[string]rpcSpec, id mtls.Identity, method string, req any) error {
	held := fmt.Sprintf("the certificate %q has role %s", id.Name, id.Role)
	need := func(roles ...mtls.Role) error {
		if slices.Contains(roles, id.Role) {
			return nil
		}
		return denied(method, fmt.Sprintf("needs role %s; %s", joinRoles(roles), held))
	}
	sp, ok := table[method]
	if !ok {
		if strings.HasPrefix(method, healthPrefix) || strings.HasPrefix(method, reflectionPrefix) ||
			strings.HasPrefix(method, reflectionAlphaPrefix) {
			return nil
		}
		return denied(method, "unknown method; "+held)
	}
	if id.Role == mtls.RolePeer && !slices.Contains(sp.Roles, mtls.RolePeer) {
		// A peer may do only what is declared for it: runs under its
		// prefix, and the peer RPCs; not even what any role may.
		if !sp.PeerRun {
			return denied(method, fmt.Sprintf("%s; a peer certificate (another cluster) may only submit, read, cancel and delete runs named %q, and call the peer RPCs",
				held, PeerRunPrefix(id.Name)+"..."))
		}
		return peerRunAllowed(method, id, req)
	}
	if sp.ReplicaSelf && id.Role == mtls.RoleReplica {
		j, ok := req.(interface{ GetId() string })
		if ok && j.GetId() == id.Name {
			return nil
		}
		var named string
		if ok {
			named = j.GetId()
		}
		return denied(method, fmt.Sprintf("a replica certificate may join only itself: %q may not join %q (or the role %s is needed)",
			id.Name, named, joinRoles(sp.Roles)))
	}
	if sp.AnyRole {
		return nil
	}
	if err := need(sp.Roles...); err != nil {
		return err
	}
	if sp.WorkerSelf {
		w, ok := req.(interface{ GetWorkerId() string })
		if !ok {
			return denied(method, "the request names no worker")
		}
		if workerIdentityEnforced && w.GetWorkerId() != id.Name {
			return denied(method, fmt.Sprintf("worker %q may act only as itself, not as worker %q", id.Name, w.GetWorkerId()))
		}
	}
	return nil
}

// PeerRunPrefix is the prefix of the names of the runs the peer cluster
// name may create and act on: name + "/".
func PeerRunPrefix(name string) string { return name + "/" }

// peerRunAllowed holds a peer certificate's call of a PeerRun method to a
// run under its prefix: the request must name one.
func peerRunAllowed(method string, id mtls.Identity, req any) error {
	r, ok := req.(interface{ GetRun() string })
	var run string
	if ok {
		run = r.GetRun()
	}
	prefix := PeerRunPrefix(id.Name)
	switch {
	case run == "":
		return denied(method, fmt.Sprintf("the peer certificate %q (another cluster) must name one of its runs (a name starting with %q)", id.Name, prefix))
	case !strings.HasPrefix(run, prefix) || len(run) == len(prefix):
		return denied(method, fmt.Sprintf("the peer certificate %q (another cluster) may act only on runs named %q..., not on run %q", id.Name, prefix, run))
	}
	return nil
}

// joinRoles names roles as a refusal does ("admin or client").
func joinRoles(roles []mtls.Role) string {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	return strings.Join(names, " or ")
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

// submitterRoles may submit, read results of and end runs: a client (its
// own tenant's runs), an admin or a gateway (the tenant it names).
func submitterRoles() []mtls.Role {
	return []mtls.Role{mtls.RoleClient, mtls.RoleAdmin, mtls.RoleGateway}
}

// readerRoles may read every run's status and the events: the submitters
// and a replica (whose dashboard reads through the leader).
func readerRoles() []mtls.Role {
	return []mtls.Role{mtls.RoleClient, mtls.RoleAdmin, mtls.RoleGateway, mtls.RoleReplica}
}

// workerSelf is the declaration of a worker RPC: role worker, acting only
// as itself.
func workerSelf(method string) rpcSpec {
	return rpcSpec{Method: method, Roles: []mtls.Role{mtls.RoleWorker}, WorkerSelf: true}
}

// adminOnly is the declaration of an RPC only an admin may call.
func adminOnly(method string) rpcSpec {
	return rpcSpec{Method: method, Roles: []mtls.Role{mtls.RoleAdmin}}
}
