package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
)

// tenantItems are n items of run.
func tenantItems(run string, n int) []*rolloutv1.SubmitItem {
	out := make([]*rolloutv1.SubmitItem, n)
	for i := range out {
		out[i] = &rolloutv1.SubmitItem{Id: testID(run + string(rune('a'+i))), Index: uint64(i), Payload: []byte(`{"prompt":"p"}`)}
	}
	return out
}

func requireCode(t *testing.T, err error, code codes.Code, contains ...string) {
	t.Helper()
	require.Equal(t, code, status.Code(err), "%v", err)
	for _, c := range contains {
		require.Contains(t, status.Convert(err).Message(), c)
	}
}

func runOf(t *testing.T, cl *coordclient.Client, run string) *rolloutv1.RunCounters {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: run})
	require.NoError(t, err)
	require.Len(t, resp.GetRuns(), 1)
	return resp.GetRuns()[0]
}

// TestTenantsOverTLS: on a mutual-TLS replica, a run is its submitter's
// certificate's tenant; another client's cancel, delete, results and
// submit of it are PermissionDenied naming the owner and change nothing;
// a client may not name another tenant, a gateway may; an admin sets
// weights and quotas and may act on any run; a submit past max_queued is
// ResourceExhausted naming the tenant, the limit and what is in use, and
// changes nothing; every client sees every run in status.
func TestTenantsOverTLS(t *testing.T) {
	certs := newTestCerts(t)
	c := newTestCluster(t, 1, certs.tlsOpts(t))
	c.waitLeader()
	admin := c.client()
	cli := clientAs(t, c, certs.tls(t, "cli"))
	other := clientAs(t, c, certs.tls(t, "as-w1")) // a client named w1
	gw := clientAs(t, c, certs.tls(t, "gw"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err := cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "mine", Spec: &rolloutv1.RunSpec{Total: 2, Priority: 4},
		Items: tenantItems("mine", 2)})
	require.NoError(t, err)
	rc := runOf(t, cli, "mine")
	require.Equal(t, "cli", rc.GetTenant())
	require.Equal(t, uint32(4), rc.GetPriority())

	// Another client: refused, naming the owner; nothing changes.
	owner := `belongs to tenant "cli"`
	_, err = other.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "mine"})
	requireCode(t, err, codes.PermissionDenied, owner, `certificate "w1"`)
	_, err = other.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: "mine"})
	requireCode(t, err, codes.PermissionDenied, owner)
	_, err = other.Results(ctx, &rolloutv1.ResultsRequest{Run: "mine"})
	requireCode(t, err, codes.PermissionDenied, owner)
	_, err = other.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "mine", Items: tenantItems("mine", 3)})
	requireCode(t, err, codes.PermissionDenied, `the run belongs to tenant "cli"`)
	_, err = other.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "theirs", Spec: &rolloutv1.RunSpec{Tenant: "cli"},
		Items: tenantItems("theirs", 1)})
	requireCode(t, err, codes.PermissionDenied, "submits as itself only")
	rc = runOf(t, other, "mine") // status shows every tenant's runs
	require.False(t, rc.GetCancelled())
	require.Equal(t, uint64(2), rc.GetTotal())

	// A gateway names the tenant (its API key's name).
	_, err = gw.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "batch_1", Spec: &rolloutv1.RunSpec{Tenant: "team-a"},
		Items: tenantItems("batch_1", 1)})
	require.NoError(t, err)
	require.Equal(t, "team-a", runOf(t, admin, "batch_1").GetTenant())

	// Quotas and weights: admin only.
	one, three := uint32(3), uint64(3)
	_, err = cli.SetTenant(ctx, &rolloutv1.SetTenantRequest{Name: "cli", Weight: &one})
	requireCode(t, err, codes.PermissionDenied, "needs role admin")
	_, err = admin.SetTenant(ctx, &rolloutv1.SetTenantRequest{Name: "cli", Weight: new(uint32)})
	requireCode(t, err, codes.InvalidArgument, "weight 0")
	resp, err := admin.SetTenant(ctx, &rolloutv1.SetTenantRequest{Name: "cli", Weight: &one, MaxQueued: &three})
	require.NoError(t, err)
	require.Equal(t, uint32(3), resp.GetTenant().GetWeight())
	require.Equal(t, uint64(3), resp.GetTenant().GetMaxQueued())
	require.Equal(t, uint64(2), resp.GetTenant().GetQueued())

	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "more", Spec: &rolloutv1.RunSpec{Total: 2}, Items: tenantItems("more", 2)})
	requireCode(t, err, codes.ResourceExhausted, `tenant "cli" may queue at most 3 items (max_queued); 2 are queued`, "adds 2", "nothing was changed")
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		if x, ok := d.(*errdetails.QuotaFailure); ok {
			qf = x
		}
	}
	require.NotNil(t, qf, "a quota refusal carries a QuotaFailure")
	require.Equal(t, "tenant:cli", qf.GetViolations()[0].GetSubject())
	_, err = cli.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "more"})
	requireCode(t, err, codes.NotFound)
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "more", Spec: &rolloutv1.RunSpec{Priority: 6}, Items: tenantItems("more", 1)})
	requireCode(t, err, codes.InvalidArgument, "priority is 6")

	list, err := other.ListTenants(ctx, &rolloutv1.ListTenantsRequest{})
	require.NoError(t, err)
	names := map[string]*rolloutv1.Tenant{}
	for _, tn := range list.GetTenants() {
		names[tn.GetName()] = tn
	}
	require.Contains(t, names, "cli")
	require.Contains(t, names, "team-a")
	require.Equal(t, uint32(1), names["cli"].GetRuns())
	require.Equal(t, uint64(1), names["team-a"].GetQueued())

	// The admin may act on any run: add to one, and a run it creates is
	// its own.
	_, err = admin.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "adm", Spec: &rolloutv1.RunSpec{Total: 1}, Items: tenantItems("adm", 1)})
	require.NoError(t, err)
	require.Equal(t, "ops", runOf(t, admin, "adm").GetTenant())
	_, err = admin.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "batch_1", Items: tenantItems("batch_1", 2)})
	require.NoError(t, err)
	require.Equal(t, uint64(2), runOf(t, admin, "batch_1").GetTotal())
	_, err = admin.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "mine"})
	require.NoError(t, err)
	_, err = admin.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: "mine"})
	require.NoError(t, err)
	// The owner may cancel and delete its own.
	_, err = gw.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "batch_1"})
	require.NoError(t, err)
}
