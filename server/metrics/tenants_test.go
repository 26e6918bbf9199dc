package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/server/metrics"
)

// TestTenantSeries: with StateConfig.Tenants the collector exports, per
// tenant, its items by state, share, weight, decayed usage and the quotas
// that are set (none for a tenant without), the first MaxTenants by name,
// and rollout_tenants counts every tenant; without it no tenant series.
func TestTenantSeries(t *testing.T) {
	ledger, err := fsm.New(fsm.DefaultConfig())
	require.NoError(t, err)
	tenants := []metrics.Tenant{
		{Name: "team-b", Weight: 3, MaxRunning: 16, Queued: 198, Running: 2, Done: 40, Usage: 20.5, Share: 0.2},
		{Name: "team-a", Weight: 1, MaxQueued: 5000, Queued: 900, Running: 8, Done: 104, Usage: 812.25, Share: 0.8},
		{Name: "team-c", Weight: 2},
	}
	reg := prometheus.NewRegistry()
	require.NoError(t, metrics.RegisterState(reg, stubNode{}, ledger, metrics.StateConfig{
		Tenants: func() []metrics.Tenant { return tenants }, MaxTenants: 2}))
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rollout_tenants", nil, 3},
		{"rollout_tenant_items", map[string]string{"tenant": "team-a", "state": "queued"}, 900},
		{"rollout_tenant_items", map[string]string{"tenant": "team-a", "state": "running"}, 8},
		{"rollout_tenant_items", map[string]string{"tenant": "team-a", "state": "done"}, 104},
		{"rollout_tenant_items", map[string]string{"tenant": "team-b", "state": "queued"}, 198},
		{"rollout_tenant_share", map[string]string{"tenant": "team-a"}, 0.8},
		{"rollout_tenant_share", map[string]string{"tenant": "team-b"}, 0.2},
		{"rollout_tenant_weight", map[string]string{"tenant": "team-b"}, 3},
		{"rollout_tenant_usage_items", map[string]string{"tenant": "team-a"}, 812.25},
		{"rollout_tenant_quota_items", map[string]string{"tenant": "team-a", "quota": "max_queued"}, 5000},
		{"rollout_tenant_quota_items", map[string]string{"tenant": "team-b", "quota": "max_running"}, 16},
	} {
		v, ok := value(t, reg, c.name, c.labels)
		require.True(t, ok, "%s %v", c.name, c.labels)
		require.Equal(t, c.want, v, "%s %v", c.name, c.labels)
	}
	for _, absent := range []map[string]string{
		{"tenant": "team-a", "quota": "max_running"},
		{"tenant": "team-b", "quota": "max_queued"},
	} {
		_, ok := value(t, reg, "rollout_tenant_quota_items", absent)
		require.False(t, ok, "a quota not set is not exported: %v", absent)
	}
	_, ok := value(t, reg, "rollout_tenant_weight", map[string]string{"tenant": "team-c"})
	require.False(t, ok, "past MaxTenants (by name) a tenant has no series")

	plain := prometheus.NewRegistry()
	require.NoError(t, metrics.RegisterState(plain, stubNode{}, ledger, metrics.StateConfig{}))
	_, ok = value(t, plain, "rollout_tenants", nil)
	require.False(t, ok)
	require.ErrorIs(t, metrics.RegisterState(prometheus.NewRegistry(), stubNode{}, ledger, metrics.StateConfig{MaxTenants: -1}), metrics.ErrInvalidConfig)
}

// fakeTenants is a TenantLedger.
type fakeTenants []fsm.Tenant

func (f fakeTenants) Tenants() []fsm.Tenant { return f }

// TestLedgerTenants: the ledger's tenants become the collector's, each
// share its Running items over all tenants' (0 when nothing runs).
func TestLedgerTenants(t *testing.T) {
	got := metrics.LedgerTenants(fakeTenants{
		{Name: "a", Weight: 1, MaxQueued: 10, Queued: 5, Running: 3, Done: 7, Usage: 1.5},
		{Name: "b", Weight: 3, MaxRunning: 4, Running: 1},
	})()
	require.Equal(t, []metrics.Tenant{
		{Name: "a", Weight: 1, MaxQueued: 10, Queued: 5, Running: 3, Done: 7, Usage: 1.5, Share: 0.75},
		{Name: "b", Weight: 3, MaxRunning: 4, Running: 1, Share: 0.25},
	}, got)
	idle := metrics.LedgerTenants(fakeTenants{{Name: "a", Weight: 1}})()
	require.Zero(t, idle[0].Share)
}
