package runner

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/workload"
)

// chaosTenant is one tenant of the chaos workload (Config.Tenants picks
// the first N): two of one priority with weights 1 and 3, and one of a
// higher priority, so that claims choose by priority and by weight while
// the nemeses run.
type chaosTenant struct {
	name     string
	priority uint32
	weight   uint32
}

var chaosTenants = [...]chaosTenant{
	{name: "team-a", priority: 3, weight: 1},
	{name: "team-b", priority: 3, weight: 3},
	{name: "team-c", priority: 5, weight: 1},
}

// maxTenants bounds Config.Tenants.
const maxTenants = len(chaosTenants)

// tenantIdentity is the certificate the harness's run clients use when the
// workload has tenants: an admin may submit for, read and cancel any
// tenant's runs (a client certificate only its own).
const tenantIdentity = "admin"

// runIdentity is the identity of the harness's clients that submit and
// read runs.
func (h *harness) runIdentity() string {
	if h.cfg.Scenario == ScenarioFederation {
		// The peer's runs are the parent's tenant's: the harness reads
		// them as the peer's admin.
		return "admin"
	}
	if h.cfg.Scenario == ScenarioChaos && h.cfg.Tenants > 0 {
		return tenantIdentity
	}
	return "cli"
}

// runTenants assigns the chaos scenario's runs (item runs, then range
// runs) to the first Config.Tenants tenants in turn; nil without tenants.
func (h *harness) runTenants(runs []string) map[string]workload.RunTenant {
	if h.cfg.Scenario != ScenarioChaos || h.cfg.Tenants == 0 {
		return nil
	}
	out := map[string]workload.RunTenant{}
	for k, r := range runs {
		t := chaosTenants[k%h.cfg.Tenants]
		out[r] = workload.RunTenant{Tenant: t.name, Priority: t.priority}
	}
	return out
}

// setTenantWeights sets the weight of each tenant of the workload (an admin
// command), retrying until the cluster takes it or the minute is up.
func (h *harness) setTenantWeights(ctx context.Context) error {
	if h.cfg.Tenants == 0 {
		return nil
	}
	cl, err := h.clientAs("tenants", tenantIdentity)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, t := range chaosTenants[:h.cfg.Tenants] {
		w := t.weight
		for {
			_, err := cl.SetTenant(sctx, &rolloutv1.SetTenantRequest{Name: t.name, Weight: &w})
			if err == nil {
				break
			}
			if !workload.Sleep(sctx, 300*time.Millisecond) {
				return fmt.Errorf("%w: setting tenant %s's weight to %d: %v", ErrHarness, t.name, w, err)
			}
		}
	}
	h.note("tenants: %s", tenantsNote(h.cfg.Tenants))
	return nil
}

// tenantsNote describes the first n tenants.
func tenantsNote(n int) string {
	s := ""
	for i, t := range chaosTenants[:n] {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s (priority %d, weight %d)", t.name, t.priority, t.weight)
	}
	return s
}

// readTenants reads every run's tenant and priority as the cluster reports
// them (RunStatus), for tenant-runs-finish.
func (h *harness) readTenants(ctx context.Context, cl *workload.Client) {
	if len(h.tenants) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		resp, err := cl.Status(rctx)
		if err == nil {
			h.tenantsSeen = map[string]checker.TenantSeen{}
			for _, rc := range resp.GetRuns() {
				h.tenantsSeen[rc.GetName()] = checker.TenantSeen{Tenant: rc.GetTenant(), Priority: rc.GetPriority()}
			}
			return
		}
		if !workload.Sleep(rctx, 500*time.Millisecond) {
			h.tenantsSeenErr = err.Error()
			return
		}
	}
}

// tenantsInput is the tenant checkers' input.
func (h *harness) tenantsInput() checker.TenantsInput {
	in := checker.TenantsInput{Seen: h.tenantsSeen, SeenErr: h.tenantsSeenErr}
	for _, run := range slices.Sorted(maps.Keys(h.tenants)) {
		t := h.tenants[run]
		in.Runs = append(in.Runs, checker.TenantRun{Run: run, Tenant: t.Tenant, Priority: t.Priority})
	}
	if len(in.Runs) > 0 && in.Seen == nil && in.SeenErr == "" {
		in.SeenErr = "not read: the run ended before the final read"
	}
	return in
}
