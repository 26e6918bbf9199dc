package runner

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/workload"
)

// TestRunTenants: the chaos runs go to the first Config.Tenants tenants in
// turn, the harness's run clients are the admin then (cli without
// tenants), and the checkers get every run's tenant and priority, with a
// missing end-of-run read said as such.
func TestRunTenants(t *testing.T) {
	cfg := DefaultConfig()
	h := &harness{cfg: cfg}
	require.Equal(t, 3, cfg.Tenants)
	runs := []string{"chaos-1", "chaos-2", "chaos-ranges-1", "chaos-3"}
	require.Equal(t, map[string]workload.RunTenant{
		"chaos-1": {Tenant: "team-a", Priority: 3}, "chaos-2": {Tenant: "team-b", Priority: 3}, "chaos-ranges-1": {Tenant: "team-c", Priority: 5}, "chaos-3": {Tenant: "team-a", Priority: 3},
	}, h.runTenants(runs))
	require.Equal(t, "admin", h.runIdentity())

	h.cfg.Tenants = 2
	require.Equal(t, map[string]workload.RunTenant{
		"chaos-1": {Tenant: "team-a", Priority: 3}, "chaos-2": {Tenant: "team-b", Priority: 3}, "chaos-ranges-1": {Tenant: "team-a", Priority: 3}, "chaos-3": {Tenant: "team-b", Priority: 3},
	}, h.runTenants(runs))
	h.tenants = h.runTenants(runs[:2])
	require.Equal(t, checker.TenantsInput{
		Runs:    []checker.TenantRun{{Run: "chaos-1", Tenant: "team-a", Priority: 3}, {Run: "chaos-2", Tenant: "team-b", Priority: 3}},
		SeenErr: "not read: the run ended before the final read",
	}, h.tenantsInput())
	require.Equal(t, "team-a (priority 3, weight 1), team-b (priority 3, weight 3)", tenantsNote(2))

	h.cfg.Tenants = 0
	require.Nil(t, h.runTenants(runs))
	require.Equal(t, "cli", h.runIdentity())
	h.cfg.Tenants, h.cfg.Scenario = 3, ScenarioStraggler
	require.Nil(t, h.runTenants(runs), "only the chaos scenario has tenants")
	require.Equal(t, "cli", h.runIdentity())
}
