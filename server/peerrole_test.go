package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/mtls"
)

// TestPeerRole: over real mutual TLS on loopback, a peer certificate "a"
// (another cluster, issued by this cluster's CA) submits, reads, cancels
// and deletes runs named "a/..." as tenant a; everything else it tries is
// PermissionDenied naming the rule, and leaves the ledger and the log as
// they were: runs outside its prefix (another peer's, a client's, a bare
// name, the prefix alone), another tenant, the worker RPCs (claiming
// work), every-role methods (Cluster, Renew), the admin ones, a listing of
// every run or every event. A client cannot act on the peer's run, nor a
// second peer b.
func TestPeerRole(t *testing.T) {
	certs := newTestCerts(t)
	c := newTestCluster(t, 1, certs.tlsOpts(t))
	l, _ := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, certs.tls(t, "a")))
	b := rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, certs.tls(t, "b")))
	cli := rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, certs.tls(t, "cli")))
	w1 := rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, certs.tls(t, "w1")))
	_, err := w1.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "w1"})
	require.NoError(t, err)
	_, err = cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "cli-run", Spec: &rolloutv1.RunSpec{Total: 1}, Items: tenantItems("cli-run", 1)})
	require.NoError(t, err)

	// Its own prefix: accepted, as tenant a.
	_, err = a.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "a/r1", Spec: &rolloutv1.RunSpec{Total: 2}, Items: tenantItems("a/r1", 2)})
	require.NoError(t, err)
	_, err = a.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "a/ranges", Spec: &rolloutv1.RunSpec{Store: "file:///srv/store"},
		Ranges: []*rolloutv1.InputRange{{Index: 0, Count: 2, PayloadRef: &rolloutv1.DataRef{Object: "runs/a%2Franges/inputs/c", Length: 20}}}})
	require.NoError(t, err)
	r1, err := l.ledger.Run("a/r1")
	require.NoError(t, err)
	require.Equal(t, "a", r1.Spec.GetOrigin(), "the one-hop marker names the calling cluster")
	st, err := a.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "a/r1"})
	require.NoError(t, err)
	require.Len(t, st.GetRuns(), 1)
	require.Equal(t, "a", st.GetRuns()[0].GetTenant())
	require.Equal(t, uint64(2), st.GetRuns()[0].GetTotal())
	require.Empty(t, st.GetWorkers(), "a peer does not see this cluster's workers")
	st, err = cli.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "a/r1"})
	require.NoError(t, err)
	require.NotEmpty(t, st.GetWorkers(), "a client does (the worker registered)")
	ev, err := a.Events(ctx, &rolloutv1.EventsRequest{Run: "a/r1"})
	require.NoError(t, err)
	for _, e := range ev.GetEvents() {
		require.Equal(t, "a/r1", e.GetRun())
	}
	res, err := a.Results(ctx, &rolloutv1.ResultsRequest{Run: "a/r1"})
	require.NoError(t, err)
	require.Len(t, res.GetItems(), 2)

	before := stateOf(t, l)
	refused := []struct {
		name string
		call func() error
		want string
	}{
		{"submit a bare name", func() error {
			_, err := a.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r1", Items: tenantItems("r1", 1)})
			return err
		}, `may act only on runs named "a/"..., not on run "r1"`},
		{"submit under another peer's prefix", func() error {
			_, err := a.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "b/r1", Items: tenantItems("b/r1", 1)})
			return err
		}, `not on run "b/r1"`},
		{"submit under a longer name", func() error {
			_, err := a.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "ab/r1", Items: tenantItems("ab/r1", 1)})
			return err
		}, `not on run "ab/r1"`},
		{"submit the prefix alone", func() error {
			_, err := a.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "a/", Items: tenantItems("a/", 1)})
			return err
		}, `not on run "a/"`},
		{"submit ranges outside", func() error {
			_, err := a.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "cli-ranges", Spec: &rolloutv1.RunSpec{Store: "file:///srv/store"},
				Ranges: []*rolloutv1.InputRange{{Index: 0, Count: 1, PayloadRef: &rolloutv1.DataRef{Object: "runs/cli-ranges/inputs/c", Length: 10}}}})
			return err
		}, `not on run "cli-ranges"`},
		{"submit as another tenant", func() error {
			_, err := a.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "a/r2", Spec: &rolloutv1.RunSpec{Tenant: "cli"}, Items: tenantItems("a/r2", 1)})
			return err
		}, `submits as tenant "a" only, not "cli"`},
		{"read a client's run", func() error {
			_, err := a.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "cli-run"})
			return err
		}, `not on run "cli-run"`},
		{"list every run", func() error {
			_, err := a.RunStatus(ctx, &rolloutv1.RunStatusRequest{})
			return err
		}, `must name one of its runs`},
		{"read every event", func() error {
			_, err := a.Events(ctx, &rolloutv1.EventsRequest{})
			return err
		}, `must name one of its runs`},
		{"read a client's results", func() error {
			_, err := a.Results(ctx, &rolloutv1.ResultsRequest{Run: "cli-run"})
			return err
		}, `not on run "cli-run"`},
		{"cancel a client's run", func() error {
			_, err := a.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "cli-run"})
			return err
		}, `not on run "cli-run"`},
		{"delete a client's run", func() error {
			_, err := a.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: "cli-run"})
			return err
		}, `not on run "cli-run"`},
		{"claim work", func() error {
			_, err := a.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "a", MaxItems: 1})
			return err
		}, "a peer certificate (another cluster) may only"},
		{"register as a worker", func() error {
			_, err := a.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "a"})
			return err
		}, "may only"},
		{"read the replica set", func() error {
			_, err := a.Cluster(ctx, &rolloutv1.ClusterRequest{})
			return err
		}, "may only"},
		{"renew", func() error {
			_, err := a.Renew(ctx, &rolloutv1.RenewRequest{})
			return err
		}, "may only"},
		{"list the tenants", func() error {
			_, err := a.ListTenants(ctx, &rolloutv1.ListTenantsRequest{})
			return err
		}, "may only"},
		{"set its own tenant", func() error {
			w := uint32(1000)
			_, err := a.SetTenant(ctx, &rolloutv1.SetTenantRequest{Name: "a", Weight: &w})
			return err
		}, "may only"},
		{"evict a worker", func() error {
			_, err := a.EvictWorker(ctx, &rolloutv1.EvictWorkerRequest{WorkerId: "w1"})
			return err
		}, "may only"},
		{"another peer reads a's run", func() error {
			_, err := b.Results(ctx, &rolloutv1.ResultsRequest{Run: "a/r1"})
			return err
		}, `the peer certificate "b"`},
		{"another peer cancels a's run", func() error {
			_, err := b.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "a/r1"})
			return err
		}, `not on run "a/r1"`},
		{"a client cancels the peer's run", func() error {
			_, err := cli.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "a/r1"})
			return err
		}, `belongs to tenant "a"`},
		{"a client adds to the peer's run", func() error {
			_, err := cli.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "a/r1", Items: tenantItems("a/r1", 3)})
			return err
		}, `belongs to tenant "a"`},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tc.want)
			require.Equal(t, before, stateOf(t, l), "a refused call changed the ledger")
		})
	}

	// Its own run's end: cancel, then delete.
	_, err = a.CancelRun(ctx, &rolloutv1.CancelRunRequest{Run: "a/r1"})
	require.NoError(t, err)
	_, err = a.DeleteRun(ctx, &rolloutv1.DeleteRunRequest{Run: "a/r1"})
	require.NoError(t, err)
	_, err = a.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "a/r1"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
}

// TestPeerOfAnotherCA: a peer certificate issued by another cluster's CA
// (the calling cluster's own, by mistake) does not reach this cluster at
// all: the handshake fails before any RPC.
func TestPeerOfAnotherCA(t *testing.T) {
	certs := newTestCerts(t)
	c := newTestCluster(t, 1, certs.tlsOpts(t))
	l, _ := c.waitLeader()
	other := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(other, []mtls.Cert{{Name: "a", Role: mtls.RolePeer}}, time.Hour))
	f := mtls.FilesFor(other, "a")
	f.CA = mtls.FilesFor(certs.dir, "c1").CA // it trusts this cluster's replicas
	conf, err := f.Load()
	require.NoError(t, err)
	before := stateOf(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, conf)).SubmitItems(ctx,
		&rolloutv1.SubmitItemsRequest{Run: "a/r1", Items: tenantItems("a/r1", 1)})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, before, stateOf(t, l))
}

// TestRevokedPeerRefused: once the operator revokes the peer certificate
// (by serial, as any identity), its next call is refused and names the
// revocation; its run stays as it was.
func TestRevokedPeerRefused(t *testing.T) {
	certs, c, leader := newReloadingCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := rolloutv1.NewCoordinatorClient(dial(t, leader.grpcAddr, certs.tls(t, "a")))
	_, err := a.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "a/r1", Spec: &rolloutv1.RunSpec{Total: 1}, Items: tenantItems("a/r1", 1)})
	require.NoError(t, err, "the peer submits before its revocation")

	peerCert, err := mtls.LoadMaterial(mtls.FilesFor(certs.dir, "a"))
	require.NoError(t, err)
	_, err = c.client().RevokeCertificate(ctx, &rolloutv1.RevokeCertificateRequest{Serial: mtls.SerialOf(peerCert.Leaf), Reason: "peer retired"})
	require.NoError(t, err)
	fresh := rolloutv1.NewCoordinatorClient(dial(t, leader.grpcAddr, certs.tls(t, "a")))
	_, err = fresh.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "a/r2", Spec: &rolloutv1.RunSpec{Total: 1}, Items: tenantItems("a/r2", 1)})
	require.Error(t, err, "the leader accepted a call of the peer certificate it had just revoked")
	require.NotEqual(t, codes.OK, status.Code(err))
	_, err = leader.ledger.Run("a/r2")
	require.Error(t, err, "the revoked peer's submit created a run")
	r, err := leader.ledger.Run("a/r1")
	require.NoError(t, err)
	require.Equal(t, "a", runTenant(r))
}

// TestMarkOrigin: the replica sets RunSpec.origin (the one-hop marker) for
// a peer's submit, with or without a spec, and refuses an origin a caller
// names that is not its own peer cluster's, without changing the spec it
// was given.
func TestMarkOrigin(t *testing.T) {
	peer := mtls.Identity{Name: "a", Role: mtls.RolePeer}
	sp, err := markOrigin("submit", "a/r", peer, nil)
	require.NoError(t, err)
	require.Equal(t, "a", sp.GetOrigin())
	given := &fsmpb.RunSpec{Model: "m"}
	sp, err = markOrigin("submit", "a/r", peer, given)
	require.NoError(t, err)
	require.Equal(t, "a", sp.GetOrigin())
	require.Equal(t, "m", sp.GetModel())
	require.Empty(t, given.GetOrigin(), "the caller's spec is not changed")
	_, err = markOrigin("submit", "a/r", peer, &fsmpb.RunSpec{Origin: "a"})
	require.NoError(t, err)
	_, err = markOrigin("submit", "a/r", peer, &fsmpb.RunSpec{Origin: "b"})
	requireCode(t, err, codes.InvalidArgument, `spec origin "b" is not the calling cluster "a"`)
	for _, id := range []mtls.Identity{{Name: "cli", Role: mtls.RoleClient}, {Name: "ops", Role: mtls.RoleAdmin}, {Name: "gw", Role: mtls.RoleGateway}, {}} {
		_, err = markOrigin("submit", "r", id, &fsmpb.RunSpec{Origin: "a"})
		requireCode(t, err, codes.InvalidArgument, "set by the replica for a peer cluster's runs only")
		sp, err = markOrigin("submit", "r", id, &fsmpb.RunSpec{Model: "m"})
		require.NoError(t, err)
		require.Empty(t, sp.GetOrigin())
	}
}

// TestPeerTenantMaxPriority: the callee's operator caps the peer's tenant
// at priority 2 (rollout tenant set a --max-priority 2); the peer's run
// asking for 5 is created at 2 (clamped, not refused), and the peer's next
// chunk with the same spec is accepted. A cap out of range is refused.
func TestPeerTenantMaxPriority(t *testing.T) {
	certs := newTestCerts(t)
	c := newTestCluster(t, 1, certs.tlsOpts(t))
	l, _ := c.waitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, certs.tls(t, "ops")))
	a := rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, certs.tls(t, "a")))
	six, two := uint32(6), uint32(2)
	before := stateOf(t, l)
	_, err := admin.SetTenant(ctx, &rolloutv1.SetTenantRequest{Name: "a", MaxPriority: &six})
	requireCode(t, err, codes.InvalidArgument, "max_priority 6, must be 1 to 5 (0: none)")
	require.Equal(t, before, stateOf(t, l))
	resp, err := admin.SetTenant(ctx, &rolloutv1.SetTenantRequest{Name: "a", MaxPriority: &two})
	require.NoError(t, err)
	require.Equal(t, uint32(2), resp.GetTenant().GetMaxPriority())

	spec := &rolloutv1.RunSpec{Total: 2, Priority: 5}
	_, err = a.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "a/hi", Spec: spec, Items: tenantItems("a/hi", 1)})
	require.NoError(t, err)
	st, err := a.RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: "a/hi"})
	require.NoError(t, err)
	require.Equal(t, uint32(2), st.GetRuns()[0].GetPriority())
	require.Equal(t, "a", st.GetRuns()[0].GetTenant())
	_, err = a.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "a/hi", Spec: spec, Items: tenantItems("a/hi", 2)})
	require.NoError(t, err, "the peer's next chunk names the priority it asked for")
	ts, err := admin.ListTenants(ctx, &rolloutv1.ListTenantsRequest{})
	require.NoError(t, err)
	for _, tn := range ts.GetTenants() {
		if tn.GetName() == "a" {
			require.Equal(t, uint32(2), tn.GetMaxPriority())
			require.Equal(t, uint64(2), tn.GetQueued())
		}
	}
}
