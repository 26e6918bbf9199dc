package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// tenantReader is a fakeReader that also lists tenants.
type tenantReader struct {
	*fakeReader
	tenants []*rolloutv1.Tenant
	err     error
}

func (r *tenantReader) ListTenants(_ context.Context, _ *rolloutv1.ListTenantsRequest) (*rolloutv1.ListTenantsResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nil, r.err
	}
	return &rolloutv1.ListTenantsResponse{Tenants: r.tenants}, nil
}

func tenantStatus(nowMs int64, doneA uint64) *rolloutv1.RunStatusResponse {
	return &rolloutv1.RunStatusResponse{
		Header:    &rolloutv1.ReplyHeader{Term: 3, LeaderId: "c1", ReplicaId: "c1"},
		NowUnixMs: nowMs,
		Runs: []*rolloutv1.RunCounters{
			{Name: "a-big", Tenant: "team-a", Priority: 3, Share: 0.6, Total: 1000, ExpectedTotal: 1000, Pending: 1000 - doneA - 6, Running: 6, Done: doneA},
			{Name: "a-urgent", Tenant: "team-a", Priority: 5, Share: 0.2, Total: 10, ExpectedTotal: 10, Pending: 8, Running: 2},
			{Name: "a-old", Tenant: "team-a", Priority: 1, Total: 5, ExpectedTotal: 5, Done: 4, Dead: 1},
			{Name: "b-eval", Tenant: "team-b", Priority: 3, Share: 0.2, Total: 200, ExpectedTotal: 200, Pending: 198, Running: 2},
		},
	}
}

// TestTenantView: /api/overview has a row per tenant, summing its runs'
// items, its active runs' priorities (highest first) and rates, with its
// weight, quotas, usage and share from the ledger's tenant record when the
// reader lists tenants; a tenant with a record and no run is listed; a
// failed ListTenants keeps the rows from the runs and says why; each run
// names its tenant, priority and share.
func TestTenantView(t *testing.T) {
	tr := &tenantReader{fakeReader: &fakeReader{}}
	f := newFixture(t, func(c *Config) { c.Reader = tr })
	f.setLocal(localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 3))
	tr.set(func(r *fakeReader) { r.status = tenantStatus(1_000_000, 100) })
	tr.tenants = []*rolloutv1.Tenant{
		{Name: "team-a", Weight: 1, MaxQueued: 5000, Usage: 812.5, Share: 0.75, Queued: 900, Running: 8, Done: 104},
		{Name: "team-b", Weight: 3, MaxRunning: 16, Usage: 20, Share: 0.25},
		{Name: "team-c", Weight: 2},
	}
	t0 := time.UnixMilli(1_000_000)
	f.d.Sample(context.Background(), t0)
	tr.set(func(r *fakeReader) { r.status = tenantStatus(1_002_000, 140) })
	f.d.Sample(context.Background(), t0.Add(2*time.Second))

	ov, _ := getJSON[Overview](t, f.srv.URL+"/api/overview")
	require.Empty(t, ov.TenantsError)
	require.Len(t, ov.Tenants, 3)
	a, b, c := ov.Tenants[0], ov.Tenants[1], ov.Tenants[2]
	require.Equal(t, "team-a", a.Name)
	require.True(t, a.Known)
	require.Equal(t, uint32(1), a.Weight)
	require.Equal(t, uint64(5000), a.MaxQueued)
	require.Equal(t, 812.5, a.Usage)
	require.Equal(t, 0.75, a.Share, "the ledger's share when it says")
	require.Equal(t, 3, a.Runs)
	require.Equal(t, 2, a.Active)
	require.Equal(t, []uint32{5, 3}, a.Priorities, "active runs' priorities, highest first")
	require.Equal(t, uint64(1015), a.Total)
	require.Equal(t, uint64(144), a.Done)
	require.Equal(t, uint64(1), a.Dead)
	require.Equal(t, uint64(8), a.Running)
	require.InDelta(t, 20.0, a.RatePerSec, 0.01, "40 items in 2 s")
	require.Equal(t, "team-b", b.Name)
	require.Equal(t, uint32(3), b.Weight)
	require.Equal(t, uint64(16), b.MaxRunning)
	require.Equal(t, 1, b.Active)
	require.Equal(t, TenantView{Name: "team-c", Known: true, Weight: 2, Priorities: []uint32{}}, c, "a tenant set with no run yet")
	var urgent RunView
	for _, r := range ov.Runs {
		if r.Name == "a-urgent" {
			urgent = r
		}
	}
	require.Equal(t, "team-a", urgent.Tenant)
	require.Equal(t, uint32(5), urgent.Priority)
	require.Equal(t, 0.2, urgent.Share)

	// ListTenants fails: the rows come from the runs, with their shares
	// summed; the records read before stay; the error is said.
	tr.mu.Lock()
	tr.err = status.Error(codes.Unavailable, "no leader")
	tr.mu.Unlock()
	f.d.Sample(context.Background(), t0.Add(3*time.Second))
	ov, _ = getJSON[Overview](t, f.srv.URL+"/api/overview")
	require.Contains(t, ov.TenantsError, "no leader")
	require.Len(t, ov.Tenants, 3)
	require.Equal(t, uint32(3), ov.Tenants[1].Weight, "the records last read stay")
}

// TestTenantViewWithoutTenantReader: a Reader that cannot list tenants
// still gets a row per tenant of the runs, with no record (Known false)
// and the runs' shares summed; a run of before tenants counts as "".
func TestTenantViewWithoutTenantReader(t *testing.T) {
	f := newFixture(t, nil)
	f.setLocal(localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 3))
	st := tenantStatus(1_000_000, 0)
	st.Runs = append(st.Runs, &rolloutv1.RunCounters{Name: "legacy", Total: 3, ExpectedTotal: 3, Pending: 3})
	f.reader.set(func(r *fakeReader) { r.status = st })
	f.d.Sample(context.Background(), time.UnixMilli(1_000_000))
	ov, _ := getJSON[Overview](t, f.srv.URL+"/api/overview")
	require.Empty(t, ov.TenantsError)
	var names []string
	for _, v := range ov.Tenants {
		names = append(names, v.Name)
		require.False(t, v.Known)
		require.Zero(t, v.Weight)
	}
	require.Equal(t, []string{"", "team-a", "team-b"}, names)
	require.InDelta(t, 0.8, ov.Tenants[1].Share, 1e-9, "team-a's runs' shares summed")
}
