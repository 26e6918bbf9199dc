package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/tenancy"
)

// submitter applies the tenant rule of the replicas (tenancy.SubmitAs) to a
// submit of run naming tenant ("" for the certificate's own) by the
// certificate id, before the cluster is asked anything or a byte is
// uploaded. It returns the tenant the submit acts as ("" for none), or an
// error matching ErrSubmitRefused and tenancy's sentinel that names the
// certificate, its role and the tenant.
func submitter(id mtls.Identity, run, tenant string) (string, error) {
	as, err := tenancy.SubmitAs(id, tenant)
	if err != nil {
		return "", fmt.Errorf("%w: the cluster does not let this certificate submit run %q: %w; nothing was uploaded", ErrSubmitRefused, run, err)
	}
	return as, nil
}

// checkRunOwner refuses a submit by the certificate id acting as tenant as
// (submitter) into run, which exists with counters rc, when the run
// belongs to another tenant (tenancy.CheckOwner). A cluster that reports no
// tenant is not checked here (the ledger checks every submit).
func checkRunOwner(run string, id mtls.Identity, as string, rc *rolloutv1.RunCounters) error {
	if rc.GetTenant() == "" {
		return nil
	}
	if err := tenancy.CheckOwner(as, rc.GetTenant()); err != nil {
		by := ""
		if id.Role != "" {
			by = fmt.Sprintf(" by the certificate %q (role %s)", id.Name, id.Role)
		}
		return fmt.Errorf("%w: submit of run %q%s: %w; nothing was uploaded", ErrSubmitRefused, run, by, err)
	}
	return nil
}

// CheckSubmitter tells a caller that uploads a run's data itself before it
// submits (rollout train stores its payloads, then calls SubmitItems)
// whether the cluster would let the certificate id (the zero Identity on
// a cluster without TLS) submit run for tenant ("" for the certificate's
// own): the replicas' rule (package tenancy) applied locally, then, when
// the run exists, its owner (Status). A refusal matches ErrSubmitRefused
// and names the certificate and both tenants; nothing was sent.
func CheckSubmitter(ctx context.Context, c Coordinator, run string, id mtls.Identity, tenant string, timeout time.Duration) error {
	as, err := submitter(id, run, tenant)
	if err != nil {
		return err
	}
	_, rc, err := Status(ctx, c, run, orDefault(timeout, DefaultTimeout))
	switch {
	case errors.Is(err, ErrRunNotFound):
		return nil // a new run: it will be the tenant's
	case err != nil:
		return err
	}
	return checkRunOwner(run, id, as, rc)
}
