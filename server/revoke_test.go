package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
)

// TestRevokedWorkerIsCutOff: three replicas on reloading TLS sources that
// enforce the ledger's revocation list. An admin revokes worker w1 by
// name while it holds items: its items are pending again at once (and w2
// can claim them), its live connection to the leader is closed within 2 s,
// its RPCs and new handshakes are refused by every replica, and the list
// reads back. Repeats, unknown names and the last admin are refused.
func TestRevokedWorkerIsCutOff(t *testing.T) {
	certs, c, leader := newReloadingCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	admin := c.client()
	var items []*rolloutv1.SubmitItem
	for i := range 6 {
		items = append(items, &rolloutv1.SubmitItem{Id: testID(fmt.Sprintf("i%d", i)), Index: uint64(i), Payload: []byte(`{}`)})
	}
	_, err := admin.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r", Spec: &rolloutv1.RunSpec{Total: 6}, Items: items})
	require.NoError(t, err)

	w1conn := dial(t, leader.grpcAddr, certs.tls(t, "w1"))
	w1 := rolloutv1.NewCoordinatorClient(w1conn)
	w2 := rolloutv1.NewCoordinatorClient(dial(t, leader.grpcAddr, certs.tls(t, "w2")))
	for id, w := range map[string]rolloutv1.CoordinatorClient{"w1": w1, "w2": w2} {
		_, err := w.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: id})
		require.NoError(t, err)
	}
	claimed, err := w1.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 4})
	require.NoError(t, err)
	require.Len(t, claimed.GetItems(), 4)
	require.Equal(t, connectivity.Ready, w1conn.GetState())

	// An unknown name is refused; the last (only) known admin may not
	// revoke itself.
	_, err = admin.RevokeCertificate(ctx, &rolloutv1.RevokeCertificateRequest{Name: "nobody"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	_, err = admin.RevokeCertificate(ctx, &rolloutv1.RevokeCertificateRequest{Name: "ops"})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)

	resp, err := admin.RevokeCertificate(ctx, &rolloutv1.RevokeCertificateRequest{Name: "w1", Reason: "key leaked"})
	require.NoError(t, err)
	revokedAt := time.Now()
	require.Equal(t, uint64(4), resp.GetRepended(), "w1's items are pending again at once")
	require.Equal(t, "worker", resp.GetRevocation().GetRole())

	// The live connection is closed within 2 s of the commit.
	require.Eventually(t, func() bool { return w1conn.GetState() != connectivity.Ready }, 2*time.Second, 10*time.Millisecond,
		"the revoked worker's connection stays open")
	t.Logf("w1's connection closed %v after the revoke returned", time.Since(revokedAt))

	// Its RPCs are refused, at every replica.
	for _, r := range c.replicas() {
		w := rolloutv1.NewCoordinatorClient(dial(t, r.grpcAddr, certs.tls(t, "w1")))
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		require.Eventually(t, func() bool {
			_, err := w.Heartbeat(cctx, &rolloutv1.HeartbeatRequest{WorkerId: "w1"})
			return err != nil && status.Code(err) != codes.OK
		}, 10*time.Second, 50*time.Millisecond)
		_, err := w.Register(cctx, &rolloutv1.RegisterRequest{WorkerId: "w1"})
		require.Error(t, err, "replica %s accepts the revoked certificate", r.id)
		ccancel()
	}
	// Its items went to the others.
	got, err := w2.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w2", MaxItems: 10})
	require.NoError(t, err)
	require.Len(t, got.GetItems(), 6, "w2 takes w1's items and the rest")

	_, err = admin.RevokeCertificate(ctx, &rolloutv1.RevokeCertificateRequest{Name: "w1"})
	require.Equal(t, codes.AlreadyExists, status.Code(err), "%v", err)
	// A serial number is always accepted.
	_, err = admin.RevokeCertificate(ctx, &rolloutv1.RevokeCertificateRequest{Serial: "AB:CD"})
	require.NoError(t, err)

	list, err := admin.Revocations(ctx, &rolloutv1.RevocationsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetRevocations(), 2)
	require.Equal(t, "w1", list.GetRevocations()[0].GetName())
	require.Equal(t, "ops", list.GetRevocations()[0].GetBy())
	require.Equal(t, "key leaked", list.GetRevocations()[0].GetReason())
	require.Equal(t, "abcd", list.GetRevocations()[1].GetSerial())

	// Cluster reports the replica's own certificate (fresh: not expiring).
	cl, err := admin.Cluster(ctx, leader.grpcAddr)
	require.NoError(t, err)
	require.Equal(t, cl.GetHeader().GetReplicaId(), cl.GetCertificate().GetName())
	require.Equal(t, "replica", cl.GetCertificate().GetRole())
	require.False(t, cl.GetCertificate().GetExpiring())
	require.Empty(t, cl.GetExpiringPeers())

	// A client may not revoke.
	cli := rolloutv1.NewCoordinatorClient(dial(t, leader.grpcAddr, certs.tls(t, "cli")))
	_, err = cli.RevokeCertificate(ctx, &rolloutv1.RevokeCertificateRequest{Name: "w2"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
}

// TestRevokedReplicaIsCutOff: revoking a follower replica's name makes the
// others refuse its Raft traffic (it stops applying new entries while the
// two others commit), and the operator can then remove it.
func TestRevokedReplicaIsCutOff(t *testing.T) {
	certs, c, leader := newReloadingCluster(t)
	var victim *replica
	for _, r := range c.replicas() {
		if r != leader {
			victim = r
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.client()
	resp, err := admin.RevokeCertificate(ctx, &rolloutv1.RevokeCertificateRequest{Name: victim.id})
	require.NoError(t, err)
	require.Equal(t, "replica", resp.GetRevocation().GetRole())

	// Every healthy replica enforces the list; then new entries commit
	// without the victim.
	m, err := mtls.LoadMaterial(mtls.FilesFor(certs.dir, victim.id))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, r := range c.replicas() {
			if r != victim && !r.revs.Revoked(m.Leaf) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	for i := range 5 {
		_, err := admin.SubmitItems(ctx, &rolloutv1.SubmitItemsRequest{Run: "r", Spec: &rolloutv1.RunSpec{Total: 5},
			Items: []*rolloutv1.SubmitItem{{Id: testID(fmt.Sprintf("i%d", i)), Index: uint64(i), Payload: []byte(`{}`)}}})
		require.NoError(t, err)
	}
	final := leader.node.Stats().CommitIndex
	require.Never(t, func() bool { return victim.node.Stats().AppliedIndex >= final }, 2*time.Second, 50*time.Millisecond,
		"the revoked replica still receives the log")

	_, err = admin.RemoveMember(ctx, &rolloutv1.RemoveMemberRequest{Id: victim.id})
	require.NoError(t, err)
}

// TestRevokeEnforcedBeforeItAnswers: the leader enforces a revocation before
// RevokeCertificate answers, so the revoked certificate's very next call
// there is refused (the follow-up poll of the list is for the replicas that
// only apply the commit).
func TestRevokeEnforcedBeforeItAnswers(t *testing.T) {
	certs, c, leader := newReloadingCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cliCert, err := mtls.LoadMaterial(mtls.FilesFor(certs.dir, "cli"))
	require.NoError(t, err)
	cli := rolloutv1.NewCoordinatorClient(dial(t, leader.grpcAddr, certs.tls(t, "cli")))
	_, err = cli.RunStatus(ctx, &rolloutv1.RunStatusRequest{})
	require.NoError(t, err, "cli reads before its revocation")

	_, err = c.client().RevokeCertificate(ctx, &rolloutv1.RevokeCertificateRequest{Serial: mtls.SerialOf(cliCert.Leaf), Reason: "left"})
	require.NoError(t, err)
	fresh := rolloutv1.NewCoordinatorClient(dial(t, leader.grpcAddr, certs.tls(t, "cli")))
	_, err = fresh.RunStatus(ctx, &rolloutv1.RunStatusRequest{})
	require.Error(t, err, "the leader accepted a call of the certificate it had just revoked")
	require.NotEqual(t, codes.OK, status.Code(err))
}

// newReloadingCluster starts 3 TLS replicas that serve their files (as
// rollout-coord does, revocations enforced) and waits for a leader.
func newReloadingCluster(t *testing.T) (testCerts, *testCluster, *replica) {
	t.Helper()
	certs := newTestCerts(t)
	opts := certs.tlsOpts(t)
	opts.tls = nil
	opts.tlsFiles = func(id string) mtls.Files { return mtls.FilesFor(certs.dir, id) }
	c := newTestCluster(t, 3, opts)
	leader, _ := c.waitLeader()
	return certs, c, leader
}
