package checker_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
)

// tenantHistory is a history of three runs: ra (tenant a) and rb (tenant
// b) at priority 3, rc (tenant c) at priority 5, each of two items,
// submitted in that order; done reports in the order given (run names).
func tenantHistory(order ...string) (*builder, checker.Input) {
	b := newBuilder()
	for _, r := range []string{"ra", "rb", "rc"} {
		b.op("submit", "SubmitItems", "", []history.Item{{Run: r, ID: r + "0", Index: 0}, {Run: r, ID: r + "1", Index: 1}}, history.TypeOK, 2, nil)
	}
	n := map[string]int{}
	for _, r := range order {
		id := fmt.Sprintf("%s%d", r, n[r])
		n[r]++
		b.op("w1/1", "Report", "w1", []history.Item{{Run: r, ID: id, Attempt: 1, Outcome: "DONE", Result: "h"}}, history.TypeOK, 2,
			[]history.Item{{Run: r, ID: id, Attempt: 1, Outcome: "DONE", Status: "APPLIED"}})
	}
	var final []history.Item
	for _, r := range []string{"ra", "rb", "rc"} {
		for i := range 2 {
			final = append(final, history.Item{Run: r, ID: fmt.Sprintf("%s%d", r, i), Index: uint64(i), State: "DONE", Owner: "w1", Attempt: 1, Result: "h"})
		}
	}
	in := checker.Input{
		Final: final, Totals: map[string]uint64{"ra": 2, "rb": 2, "rc": 2},
		Tenants: checker.TenantsInput{
			Runs: []checker.TenantRun{{Run: "ra", Tenant: "a"}, {Run: "rb", Tenant: "b", Priority: 3}, {Run: "rc", Tenant: "c", Priority: 5}},
			Seen: map[string]checker.TenantSeen{"ra": {Tenant: "a", Priority: 3}, "rb": {Tenant: "b", Priority: 3}, "rc": {Tenant: "c", Priority: 5}},
		},
	}
	return b, in
}

type built struct {
	b  *builder
	in checker.Input
}

func must(b *builder, in checker.Input) built { return built{b, in} }

func tenantVerdicts(t *testing.T, h built) (checker.Verdict, checker.Verdict) {
	t.Helper()
	return tenantVerdictsOf(t, h.b, h.in)
}

func tenantVerdictsOf(t *testing.T, b *builder, in checker.Input) (checker.Verdict, checker.Verdict) {
	t.Helper()
	in.Events = b.evs
	res := checker.Check(in)
	fin, ok := res.Verdict(checker.TenantsFinish)
	require.True(t, ok)
	st, ok := res.Verdict(checker.TenantsStarved)
	require.True(t, ok)
	return fin, st
}

// TestTenantCheckers: interleaved progress of two tenants of one priority
// passes; one served wholly before the other, which was queued first,
// is starvation (whichever of the two it is), while a higher priority
// served first is not; a run left unfinished, missing from the cluster's
// status or reported under another tenant or priority fails
// tenant-runs-finish; without tenants neither checker runs.
func TestTenantCheckers(t *testing.T) {
	fin, st := tenantVerdicts(t, must(tenantHistory("rc", "rc", "ra", "rb", "ra", "rb")))
	require.True(t, fin.OK, "%+v", fin)
	require.True(t, st.OK, "%+v", st)
	require.Contains(t, st.Detail, "2 ordered pairs")

	// b served wholly before a (queued first): a starved.
	_, st = tenantVerdicts(t, must(tenantHistory("rb", "rb", "ra", "ra", "rc", "rc")))
	require.False(t, st.OK)
	require.Equal(t, 1, st.Count)
	require.Contains(t, st.Examples[0], "tenant a (priority 3) had work queued from")
	require.Contains(t, st.Examples[0], "until tenant b of the same priority had made all of its (2 reports")

	// a served wholly first: b was queued after a, but before a's first
	// progress: b starved.
	_, st = tenantVerdicts(t, must(tenantHistory("ra", "ra", "rb", "rb")))
	require.False(t, st.OK)
	require.Contains(t, st.Examples[0], "tenant b (priority 3)")

	// Priority 5 served wholly first is the rule.
	_, st = tenantVerdicts(t, must(tenantHistory("rc", "rc", "ra", "rb", "rb", "ra")))
	require.True(t, st.OK, "%+v", st)

	b, in := tenantHistory("rc", "rc", "ra", "rb", "ra", "rb")
	in.Final[3].State = "PENDING"
	in.Tenants.Seen = map[string]checker.TenantSeen{"ra": {Tenant: "a", Priority: 0}, "rc": {Tenant: "a", Priority: 5}}
	fin, _ = tenantVerdictsOf(t, b, in)
	require.False(t, fin.OK)
	require.Equal(t, 3, fin.Count, "%v", fin.Examples)
	require.Contains(t, fin.Examples[0], "tenant b: run rb has 1 of 2 items Done or Dead at the end")
	require.Contains(t, fin.Examples[1], "tenant b: run rb is not in the cluster's status at the end")
	require.Contains(t, fin.Examples[2], `run rc: submitted as tenant c at priority 5, the cluster reports tenant "a" at priority 5`)

	b, in = tenantHistory("ra", "rb")
	in.Tenants.SeenErr = "no leader"
	fin, _ = tenantVerdictsOf(t, b, in)
	require.False(t, fin.OK)
	require.Contains(t, fin.Examples[len(fin.Examples)-1], "could not be read at the end: no leader")

	b, in = tenantHistory("ra", "rb")
	in.Tenants = checker.TenantsInput{}
	in.Events = b.evs
	_, ok := checker.Check(in).Verdict(checker.TenantsFinish)
	require.False(t, ok, "no tenants: the tenant checkers do not run")
}
