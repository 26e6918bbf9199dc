package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollout/rollout/fsm"
)

// Tenant is one tenant's state as the state collector exports it: its
// fair-share weight and quotas (0: none), its work in items over the runs
// the ledger holds, its decayed usage in items and its part of every
// Running item now (0 to 1).
type Tenant struct {
	Name                  string
	Weight                uint32
	MaxQueued, MaxRunning uint64
	Queued, Running, Done uint64
	Usage, Share          float64
}

// TenantLedger is what LedgerTenants reads; *fsm.Ledger implements it.
type TenantLedger interface {
	Tenants() []fsm.Tenant
}

var _ TenantLedger = (*fsm.Ledger)(nil)

// LedgerTenants returns a StateConfig.Tenants that reads l's tenants (one
// read of the ledger per scrape, O(tenants + runs)); a tenant's share is
// its Running items over every tenant's (0 when nothing runs).
func LedgerTenants(l TenantLedger) func() []Tenant {
	return func() []Tenant {
		ts := l.Tenants()
		var running uint64
		for _, t := range ts {
			running += t.Running
		}
		out := make([]Tenant, 0, len(ts))
		for _, t := range ts {
			v := Tenant{Name: t.Name, Weight: t.Weight, MaxQueued: t.MaxQueued, MaxRunning: t.MaxRunning,
				Queued: t.Queued, Running: t.Running, Done: t.Done, Usage: t.Usage}
			if running > 0 {
				v.Share = float64(t.Running) / float64(running)
			}
			out = append(out, v)
		}
		return out
	}
}

// DefaultMaxTenants is StateConfig.MaxTenants's default.
const DefaultMaxTenants = 1000

// tenantDescs are the per-tenant metrics' descriptions.
type tenantDescs struct {
	count, items, share, weight, usage, quota *prometheus.Desc
}

func newTenantDescs() tenantDescs {
	return tenantDescs{
		count: prometheus.NewDesc("rollout_tenants",
			"Tenants the ledger knows (all of them, exported or not).", nil, nil),
		items: prometheus.NewDesc("rollout_tenant_items",
			"A tenant's items over its runs the ledger holds, by state (queued, running, done).", []string{"tenant", "state"}, nil),
		share: prometheus.NewDesc("rollout_tenant_share",
			"A tenant's part of every Running item of the cluster now, 0 to 1.", []string{"tenant"}, nil),
		weight: prometheus.NewDesc("rollout_tenant_weight",
			"A tenant's fair-share weight (rollout tenant set NAME --weight).", []string{"tenant"}, nil),
		usage: prometheus.NewDesc("rollout_tenant_usage_items",
			"A tenant's decayed usage: items claimed, each halving every half-life since.", []string{"tenant"}, nil),
		quota: prometheus.NewDesc("rollout_tenant_quota_items",
			"A tenant's quota (max_queued, max_running), exported only where one is set.", []string{"tenant", "quota"}, nil),
	}
}

func (d tenantDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.count, d.items, d.share, d.weight, d.usage, d.quota}
}

// collectTenants exports the tenants list gives, the first max by name.
func collectTenants(d tenantDescs, list []Tenant, max int, gauge func(*prometheus.Desc, float64, ...string)) {
	gauge(d.count, float64(len(list)))
	ts := append([]Tenant(nil), list...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	if len(ts) > max {
		ts = ts[:max]
	}
	for _, t := range ts {
		gauge(d.items, float64(t.Queued), t.Name, "queued")
		gauge(d.items, float64(t.Running), t.Name, "running")
		gauge(d.items, float64(t.Done), t.Name, "done")
		gauge(d.share, t.Share, t.Name)
		gauge(d.weight, float64(t.Weight), t.Name)
		gauge(d.usage, t.Usage, t.Name)
		if t.MaxQueued > 0 {
			gauge(d.quota, float64(t.MaxQueued), t.Name, "max_queued")
		}
		if t.MaxRunning > 0 {
			gauge(d.quota, float64(t.MaxRunning), t.Name, "max_running")
		}
	}
}
