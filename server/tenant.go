package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/tenancy"
)

// Tenants (issue 30): who owns a run, and who may act on it.
//
// A run belongs to a tenant, fixed when it is created. A submit's tenant
// is decided here from the caller's certificate and RunSpec.tenant:
//
//   - role client: the certificate's name. A spec naming another tenant is
//     PermissionDenied (a client submits as itself only).
//   - role gateway (a front end that authenticates its own users, the
//     OpenAI gateway): the spec's tenant (its API key's name), else the
//     certificate's name.
//   - role admin: the spec's tenant when it names one (then the run must be
//     that tenant's), else the certificate's name for a run it creates; an
//     admin may add to any run.
//   - role peer (another cluster, federation: peerrole.go): the certificate's
//     name, the calling cluster's; a spec naming another tenant is
//     PermissionDenied. Its runs are named under "NAME/" (Authz).
//   - an insecure replica (no certificates): the spec's tenant, else the
//     default tenant (fsm.DefaultTenant).
//
// The ledger checks the tenant again when it applies the command
// (fsm.ErrNotOwner, PermissionDenied), so a race with another tenant
// creating the same run name cannot hand one tenant's submit to another's
// run.
//
// CancelRun, DeleteRun and Results of a run are its tenant's: a client
// certificate of another name is PermissionDenied, naming the run's owner.
// Admins may act on every run; a gateway on every run (it keeps its API
// keys' batches apart itself). RunStatus, Events and ListTenants show every
// tenant's runs to every client: a team sees what it shares the fleet
// with (names, counters, tenant, priority, share), never another's
// results.

// submitAs returns, for a submit of run with spec, the tenant the ledger
// command acts as ("" for none: an admin adding to an existing run without
// naming a tenant, or an insecure caller that names none) and the spec to
// propose. A refusal is a PermissionDenied status.
func (s *Server) submitAs(ctx context.Context, method, run string, spec *fsmpb.RunSpec) (string, *fsmpb.RunSpec, error) {
	as, sp, err := s.submitTenant(ctx, method, run, spec)
	if err != nil || as == "" {
		return as, sp, err
	}
	// Refused here, before anything is proposed, when the local ledger
	// already holds the run for another tenant (the ledger checks again).
	if r, err := s.ledger.Run(run); err == nil && tenancy.CheckOwner(as, runTenant(r)) != nil {
		return "", nil, status.Errorf(codes.PermissionDenied,
			"%s of run %q as tenant %q refused, nothing was changed: the run belongs to tenant %q", method, run, as, runTenant(r))
	}
	return as, sp, nil
}

// submitTenant is submitAs without the check against the local ledger:
// the rule of package tenancy (which the clients apply too, before they
// upload anything).
func (s *Server) submitTenant(ctx context.Context, method, run string, spec *fsmpb.RunSpec) (string, *fsmpb.RunSpec, error) {
	id, err := mtls.PeerIdentity(ctx)
	switch {
	case errors.Is(err, mtls.ErrNoPeerIdentity):
		id = mtls.Identity{} // an insecure replica: the spec's tenant
	case err != nil:
		return "", nil, status.Errorf(codes.PermissionDenied, "%s: %v", method, err)
	}
	spec, err = markOrigin(method, run, id, spec)
	if err != nil {
		return "", nil, err
	}
	named := spec.GetTenant()
	as, err := tenancy.SubmitAs(id, named)
	switch {
	case errors.Is(err, tenancy.ErrOtherTenant) && id.Role == mtls.RolePeer:
		return "", nil, status.Errorf(codes.PermissionDenied, "%s of run %q refused, nothing was changed: %v", method, run, err)
	case errors.Is(err, tenancy.ErrOtherTenant):
		return "", nil, status.Errorf(codes.PermissionDenied,
			"%s of run %q for tenant %q refused: the certificate %q (role client) submits as itself only (an admin or gateway certificate may name a tenant)",
			method, run, named, id.Name)
	case err != nil:
		return "", nil, status.Errorf(codes.PermissionDenied, "%s: role %s may not submit", method, id.Role)
	}
	if as == "" && id.Role == mtls.RoleAdmin {
		if _, err := s.ledger.Run(run); err == nil {
			// An existing run, whoever's: the admin adds to it.
			return "", spec, nil
		}
		// A run it creates is its own.
		return tenancy.Creator(id, as), spec, nil
	}
	return as, spec, nil
}

// markOrigin returns the spec a submit of run by the caller id proposes,
// with RunSpec.origin, the one-hop marker of federation, set by the
// replica only: a peer certificate's submit names its cluster (a spec
// naming another origin is INVALID_ARGUMENT); any other caller's spec
// must name none (INVALID_ARGUMENT). A run with an origin is never handed
// on to a further cluster.
func markOrigin(method, run string, id mtls.Identity, spec *fsmpb.RunSpec) (*fsmpb.RunSpec, error) {
	o := spec.GetOrigin()
	if id.Role != mtls.RolePeer {
		if o != "" {
			return nil, status.Errorf(codes.InvalidArgument,
				"%s of run %q refused, nothing was changed: spec origin %q is set by the replica for a peer cluster's runs only", method, run, o)
		}
		return spec, nil
	}
	if o != "" && o != id.Name {
		return nil, status.Errorf(codes.InvalidArgument,
			"%s of run %q refused, nothing was changed: spec origin %q is not the calling cluster %q", method, run, o, id.Name)
	}
	if spec == nil {
		spec = &fsmpb.RunSpec{}
	} else {
		spec = proto.Clone(spec).(*fsmpb.RunSpec)
	}
	spec.Origin = id.Name
	return spec, nil
}

// checkOwner refuses (PermissionDenied, naming the owner) a client's
// method on a run of another tenant. Admins, gateways and insecure callers
// pass; an unknown run passes (the handler answers NotFound).
func (s *Server) checkOwner(ctx context.Context, method, run string) error {
	id, err := mtls.PeerIdentity(ctx)
	if errors.Is(err, mtls.ErrNoPeerIdentity) {
		return nil
	}
	if err != nil {
		return status.Errorf(codes.PermissionDenied, "%s: %v", method, err)
	}
	if id.Role == mtls.RoleAdmin || id.Role == mtls.RoleGateway {
		return nil
	}
	r, err := s.ledger.Run(run)
	if err != nil {
		return nil
	}
	if owner := runTenant(r); owner != id.Name {
		return status.Errorf(codes.PermissionDenied,
			"%s of run %q refused: the run belongs to tenant %q; the certificate %q (role %s) may act only on its own runs (an admin may act on any)",
			method, run, owner, id.Name, id.Role)
	}
	return nil
}

// runTenant is the tenant of a run as the ledger reports it.
func runTenant(r fsm.RunStatus) string {
	if t := r.Spec.GetTenant(); t != "" {
		return t
	}
	return fsm.DefaultTenant
}

// runPriority is the priority of a run (1 to 5).
func runPriority(r fsm.RunStatus) uint32 {
	if p := r.Spec.GetPriority(); p != 0 {
		return p
	}
	return fsm.DefaultPriority
}

// tenants converts the ledger's tenants, each with its share of the items
// Running now.
func (s *Server) tenants() []*rolloutv1.Tenant {
	ts := s.ledger.Tenants()
	var running uint64
	for _, t := range ts {
		running += t.Running
	}
	out := make([]*rolloutv1.Tenant, len(ts))
	for i, t := range ts {
		out[i] = &rolloutv1.Tenant{Name: t.Name, Weight: t.Weight, MaxQueued: t.MaxQueued, MaxRunning: t.MaxRunning, MaxPriority: t.MaxPriority,
			Queued: t.Queued, Running: t.Running, Done: t.Done, Runs: uint32(t.Runs), Active: uint32(t.Active),
			Usage: t.Usage, Share: share(t.Running, running)}
	}
	return out
}

// share is part/whole, 0 when whole is 0.
func share(part, whole uint64) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// quotaStatus is the status of a refused submit past a tenant's quota:
// RESOURCE_EXHAUSTED with an errdetails.QuotaFailure whose violation's
// subject is "tenant:NAME" (and no RetryInfo: retrying the same submit
// cannot help until the tenant's queue drains), so that a client (the
// gateway's 429) can tell it from a replica's overload.
func quotaStatus(err error) error {
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("submit refused, nothing was changed: %v", err))
	var q *fsm.QuotaError
	if errors.As(err, &q) {
		v := &errdetails.QuotaFailure_Violation{Subject: "tenant:" + q.Tenant,
			Description: fmt.Sprintf("max_queued %d; %d queued; the submit of run %q adds %d", q.Limit, q.Queued, q.Run, q.Adds)}
		if d, derr := st.WithDetails(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{v}}); derr == nil {
			st = d
		}
	}
	return st.Err()
}
