package dashboard

import (
	"context"
	"slices"
	"sort"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// TenantReader lists the ledger's tenants (their weights, quotas and
// decayed usage). When Config.Reader also implements it (a
// coordclient.Client does), the dashboard reads the tenants at every
// sample; without it the tenant view is made from the runs alone (no
// weight, quotas or usage).
type TenantReader interface {
	ListTenants(ctx context.Context, req *rolloutv1.ListTenantsRequest) (*rolloutv1.ListTenantsResponse, error)
}

// TenantView is one tenant's row: what it has in the ledger and its part
// of the fleet now. Counts are items over the tenant's runs the ledger
// holds.
type TenantView struct {
	Name string `json:"name"`
	// Weight is its fair-share weight and MaxQueued and MaxRunning its
	// quotas (0: none), from the ledger's tenant record; Known is false
	// when the record could not be read (then these are 0) or the ledger
	// holds none for a tenant of a run.
	Known      bool    `json:"known"`
	Weight     uint32  `json:"weight"`
	MaxQueued  uint64  `json:"max_queued"`
	MaxRunning uint64  `json:"max_running"`
	Usage      float64 `json:"usage"`
	// Runs and Active count its runs and those not finished; Priorities
	// are its active runs' priorities, highest first, each once.
	Runs       int      `json:"runs"`
	Active     int      `json:"active"`
	Priorities []uint32 `json:"priorities"`
	Pending    uint64   `json:"pending"`
	Running    uint64   `json:"running"`
	Done       uint64   `json:"done"`
	Dead       uint64   `json:"dead"`
	Total      uint64   `json:"total"`
	// Share is its part of every Running item of the cluster now (0 to 1);
	// RatePerSec its runs' items finished per second over the rate window.
	Share      float64 `json:"share"`
	RatePerSec float64 `json:"rate_per_sec"`
}

// readTenants lists the tenants when the Reader can (nil, nil when it
// cannot).
func (d *Dashboard) readTenants(ctx context.Context) (*rolloutv1.ListTenantsResponse, error) {
	tr, ok := d.cfg.Reader.(TenantReader)
	if !ok {
		return nil, nil
	}
	return tr.ListTenants(ctx, &rolloutv1.ListTenantsRequest{})
}

// tenantViews makes one row per tenant, of the runs' rows (their counts,
// share and rate) and the ledger's tenant records, sorted by name. A run
// that names no tenant (a ledger of before tenants) counts as tenant "".
// A tenant with a record and no run is listed too (its weight and quotas
// are set). Its share is the ledger's when the record says, else the sum
// of its runs' shares.
func tenantViews(runs []RunView, tenants []*rolloutv1.Tenant) []TenantView {
	by := map[string]*TenantView{}
	get := func(name string) *TenantView {
		v := by[name]
		if v == nil {
			v = &TenantView{Name: name, Priorities: []uint32{}}
			by[name] = v
		}
		return v
	}
	runShare := map[string]float64{}
	for _, r := range runs {
		v := get(r.Tenant)
		v.Runs++
		if !r.Finished {
			v.Active++
			if !slices.Contains(v.Priorities, r.Priority) {
				v.Priorities = append(v.Priorities, r.Priority)
			}
			v.RatePerSec += r.RatePerSec
		}
		v.Pending += r.Pending
		v.Running += r.Running
		v.Done += r.Done
		v.Dead += r.Dead
		v.Total += r.Total
		runShare[r.Tenant] += r.Share
	}
	for name, s := range runShare {
		by[name].Share = s
	}
	for _, t := range tenants {
		v := get(t.GetName())
		v.Known = true
		v.Weight, v.MaxQueued, v.MaxRunning, v.Usage = t.GetWeight(), t.GetMaxQueued(), t.GetMaxRunning(), t.GetUsage()
		v.Share = t.GetShare()
	}
	out := make([]TenantView, 0, len(by))
	for _, v := range by {
		sort.Slice(v.Priorities, func(i, j int) bool { return v.Priorities[i] > v.Priorities[j] })
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
