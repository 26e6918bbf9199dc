// Package tenancy is the rule of which tenant a submit acts as (issue
// 30), decided from the submitting certificate's identity and the tenant
// the run's spec names. The replica enforces it (server/tenant.go); the
// clients apply the same rule before they upload a byte (client/runs), so
// a submit the cluster would refuse leaves nothing in the store.
package tenancy

import (
	"errors"
	"fmt"

	"github.com/rollout/rollout/internal/mtls"
)

var (
	// ErrOtherTenant: a client certificate named a tenant other than its
	// own (a client submits as itself only).
	ErrOtherTenant = errors.New("a client certificate submits as itself only")
	// ErrMayNotSubmit: the certificate's role may not submit at all
	// (worker, replica).
	ErrMayNotSubmit = errors.New("this role may not submit")
	// ErrNotOwner: the run exists and belongs to another tenant than the
	// one the submit acts as.
	ErrNotOwner = errors.New("the run belongs to another tenant")
)

// SubmitAs returns the tenant a submit by the certificate id, whose run
// spec names tenant named ("" for none), acts as:
//
//   - role client: id.Name. Naming another tenant is ErrOtherTenant.
//   - role gateway (a front end that authenticates its own users): named,
//     else id.Name.
//   - role admin: named, else "": an admin naming no tenant adds to any
//     existing run, and a run it creates is id.Name's (the caller knows
//     whether the run exists; see Creator).
//   - the zero Identity (the caller of a replica without TLS, which has no
//     identity): named, "" for none.
//   - role peer (another cluster, federation): id.Name, the cluster's
//     name. Naming another tenant is ErrOtherTenant. (The replica holds
//     its runs to names under "NAME/" besides.)
//   - any other role: ErrMayNotSubmit.
//
// Every error names the certificate, its role and the tenant named.
func SubmitAs(id mtls.Identity, named string) (string, error) {
	switch id.Role {
	case "":
		return named, nil
	case mtls.RoleClient:
		if named != "" && named != id.Name {
			return "", fmt.Errorf("%w: the certificate %q (role client) may not submit for tenant %q (an admin or gateway certificate may name a tenant)",
				ErrOtherTenant, id.Name, named)
		}
		return id.Name, nil
	case mtls.RolePeer:
		if named != "" && named != id.Name {
			return "", fmt.Errorf("%w: the peer certificate %q (another cluster) submits as tenant %q only, not %q",
				ErrOtherTenant, id.Name, id.Name, named)
		}
		return id.Name, nil
	case mtls.RoleGateway, mtls.RoleAdmin:
		if named != "" {
			return named, nil
		}
		if id.Role == mtls.RoleGateway {
			return id.Name, nil
		}
		return "", nil
	}
	return "", fmt.Errorf("%w: the certificate %q has role %s (client, gateway, admin or peer submit)", ErrMayNotSubmit, id.Name, id.Role)
}

// Creator is the tenant of a run that a submit acting as as (SubmitAs)
// creates: as, or for an admin naming none (as == "") its own name; ""
// without an identity.
func Creator(id mtls.Identity, as string) string {
	if as == "" && id.Role == mtls.RoleAdmin {
		return id.Name
	}
	return as
}

// CheckOwner refuses (ErrNotOwner, naming both tenants) a submit acting
// as as (SubmitAs) into an existing run of tenant owner. A submit acting
// as no tenant ("": an admin naming none, an insecure caller naming none)
// adds to any run.
func CheckOwner(as, owner string) error {
	if as != "" && as != owner {
		return fmt.Errorf("%w: the submit acts as tenant %q, the run belongs to tenant %q", ErrNotOwner, as, owner)
	}
	return nil
}
