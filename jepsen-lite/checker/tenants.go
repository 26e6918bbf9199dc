package checker

import (
	"fmt"
	"slices"
	"sort"

	"github.com/rollout/rollout/jepsen-lite/history"
)

// The checkers of a workload with several tenants (Input.Tenants).
const (
	// TenantsFinish fails when a tenant's run did not finish (an index or
	// item neither Done nor Dead, or fewer than submitted, in the final
	// ledger), or when the cluster reported a run under another tenant or
	// priority than it was submitted with.
	TenantsFinish = "tenant-runs-finish"
	// TenantsStarved fails when a tenant was starved by another of the
	// same priority: it had work submitted before the other made its
	// first progress, and made none of its own until the other's last.
	// (A lower priority waiting for a higher one is the rule, not
	// starvation: only tenants of one priority are compared.)
	TenantsStarved = "tenant-starvation"
)

// TenantRun is one run of a tenant as the workload submitted it.
type TenantRun struct {
	Run, Tenant string
	// Priority as submitted (0: the default, 3).
	Priority uint32
}

// TenantSeen is a run's tenant and priority as the cluster reported them
// (RunStatus) at the end.
type TenantSeen struct {
	Tenant   string
	Priority uint32
}

// TenantsInput is what the tenant checkers need besides the history and
// the final ledger: each run's tenant and priority as submitted, and as
// the cluster reported them at the end (Seen; SeenErr when it could not be
// read).
type TenantsInput struct {
	Runs    []TenantRun
	Seen    map[string]TenantSeen
	SeenErr string
}

// defaultPriority is the priority of a run submitted with 0.
const defaultPriority = 3

func effectivePriority(p uint32) uint32 {
	if p == 0 {
		return defaultPriority
	}
	return p
}

// tenantsFinish checks that every tenant's runs finished, as the final
// ledger holds them, and that the cluster reports each run's tenant and
// priority as submitted.
func tenantsFinish(in Input) Verdict {
	var bad []string
	if in.FinalErr != "" {
		bad = append(bad, "the final ledger could not be read: "+in.FinalErr)
	}
	finished := map[string]uint64{} // run -> indexes Done or Dead
	for _, it := range in.Final {
		if it.State != "DONE" && it.State != "DEAD" {
			continue
		}
		finished[it.Run] += max(it.Count, 1)
	}
	byTenant := map[string][]TenantRun{}
	for _, r := range in.Tenants.Runs {
		byTenant[r.Tenant] = append(byTenant[r.Tenant], r)
	}
	tenants := sortedStrings(byTenant)
	for _, t := range tenants {
		for _, r := range byTenant[t] {
			total := in.Totals[r.Run]
			if in.FinalErr == "" && finished[r.Run] < total {
				bad = append(bad, fmt.Sprintf("tenant %s: run %s has %d of %d items Done or Dead at the end", t, r.Run, finished[r.Run], total))
			}
			switch seen, ok := in.Tenants.Seen[r.Run]; {
			case in.Tenants.SeenErr != "":
			case !ok:
				bad = append(bad, fmt.Sprintf("tenant %s: run %s is not in the cluster's status at the end", t, r.Run))
			case seen.Tenant != t || effectivePriority(seen.Priority) != effectivePriority(r.Priority):
				bad = append(bad, fmt.Sprintf("run %s: submitted as tenant %s at priority %d, the cluster reports tenant %q at priority %d",
					r.Run, t, effectivePriority(r.Priority), seen.Tenant, seen.Priority))
			}
		}
	}
	if in.Tenants.SeenErr != "" {
		bad = append(bad, "the runs' tenants could not be read at the end: "+in.Tenants.SeenErr)
	}
	return verdict(TenantsFinish, fmt.Sprintf("%d tenants, %d runs: every run Done or Dead at the end, under the tenant and priority it was submitted with",
		len(tenants), len(in.Tenants.Runs)), bad)
}

// tenantActivity is what the history shows of one tenant's work: when its
// first submit was acknowledged and when its reports moved work (an
// applied report or range report).
type tenantActivity struct {
	submitted int64 // first acknowledged submit (0: none)
	progress  []int64
}

// tenantsStarved compares the tenants of each priority pairwise (see
// TenantsStarved).
func tenantsStarved(in Input, ops []*Op) Verdict {
	tenantOf := map[string]TenantRun{}
	for _, r := range in.Tenants.Runs {
		tenantOf[r.Run] = r
	}
	act := map[string]*tenantActivity{}
	get := func(t string) *tenantActivity {
		a := act[t]
		if a == nil {
			a = &tenantActivity{}
			act[t] = a
		}
		return a
	}
	for _, op := range ops {
		if op.Type != history.TypeOK {
			continue
		}
		switch op.Name {
		case "SubmitItems", "SubmitRanges":
			for _, it := range op.In {
				if r, ok := tenantOf[it.Run]; ok {
					if a := get(r.Tenant); a.submitted == 0 || op.Return < a.submitted {
						a.submitted = op.Return
					}
				}
			}
		case "Report", "ReportRange":
			for _, it := range op.Out {
				if r, ok := tenantOf[it.Run]; ok && it.Status == "APPLIED" {
					get(r.Tenant).progress = append(get(r.Tenant).progress, op.Return)
				}
			}
		}
	}
	priorityOf := map[string]uint32{}
	for _, r := range in.Tenants.Runs {
		priorityOf[r.Tenant] = effectivePriority(r.Priority)
	}
	for _, a := range act {
		slices.Sort(a.progress)
	}
	names := sortedStrings(priorityOf)
	var bad []string
	pairs := 0
	for _, x := range names {
		for _, y := range names {
			if x == y || priorityOf[x] != priorityOf[y] {
				continue
			}
			ax, ay := act[x], act[y]
			if ax == nil || ay == nil || ax.submitted == 0 || len(ay.progress) == 0 {
				continue
			}
			pairs++
			yFirst, yLast := ay.progress[0], ay.progress[len(ay.progress)-1]
			if ax.submitted >= yFirst {
				continue // x came after y was already served
			}
			if len(ax.progress) == 0 || ax.progress[0] > yLast {
				bad = append(bad, fmt.Sprintf("tenant %s (priority %d) had work queued from %s and no progress until tenant %s of the same priority had made all of its (%d reports, the last at %s)",
					x, priorityOf[x], at(ax.submitted), y, len(ay.progress), at(yLast)))
			}
		}
	}
	return verdict(TenantsStarved, fmt.Sprintf("%d ordered pairs of tenants of one priority compared: each made progress before the other's last", pairs), bad)
}

// at renders a history time.
func at(t int64) string { return fmt.Sprintf("t=%.3fs", float64(t)/1e9) }

func sortedStrings[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
