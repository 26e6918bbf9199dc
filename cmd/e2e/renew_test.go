package e2e

import (
	"context"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/internal/mtls"
)

// makeDue rewrites name's certificate in dir as one valid for a minute and
// issued 41 s ago: two thirds through its life, due for renewal.
func makeDue(t *testing.T, dir, name string, role mtls.Role) *x509.Certificate {
	t.Helper()
	ca, err := mtls.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	f := mtls.FilesFor(dir, name)
	cur, err := mtls.ReadCertFile(f.Cert)
	require.NoError(t, err)
	key, err := mtls.NewRenewalKey()
	require.NoError(t, err)
	csr, err := mtls.CreateCSR(mtls.Identity{Name: name, Role: role}, key)
	require.NoError(t, err)
	der, err := mtls.SignRenewal(ca, csr, cur, time.Minute, time.Now().Add(-41*time.Second))
	require.NoError(t, err)
	require.NoError(t, mtls.WritePairAtomic(f.Cert, f.Key, der, key))
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return c
}

// waitRenewed waits until name's certificate file ends later than old and
// checks that it keeps the name and role.
func waitRenewed(t *testing.T, dir, name string, role mtls.Role, old *x509.Certificate, logs func() string) *x509.Certificate {
	t.Helper()
	f := mtls.FilesFor(dir, name)
	var got *x509.Certificate
	require.Eventually(t, func() bool {
		c, err := mtls.ReadCertFile(f.Cert)
		if err != nil || !c.NotAfter.After(old.NotAfter) {
			return false
		}
		got = c
		return true
	}, time.Minute, 50*time.Millisecond, "%s's certificate was not renewed:\n%s", name, logs())
	id, err := mtls.IdentityOf(got)
	require.NoError(t, err)
	require.Equal(t, mtls.Identity{Name: name, Role: role}, id)
	require.Equal(t, old.DNSNames, got.DNSNames, "SANs kept")
	_, err = f.Load()
	require.NoError(t, err, "the renewed pair loads")
	return got
}

// TestCertificatesRenewedByTheCluster runs real replicas started with
// --tls-ca-key: a worker whose one-minute certificate is two thirds
// through its life renews it over its connection, and so does a replica
// restarted with such a certificate; the new files hold the same name and
// role with a later expiry, and the replica restarted on them serves.
func TestCertificatesRenewedByTheCluster(t *testing.T) {
	dir := t.TempDir()
	tlsDir := filepath.Join(dir, "tls")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{BinDir: binDir, Dir: dir, Replicas: 3, TLS: true, CertWorkers: 2,
		CoordArgs: []string{"--tls-ca-key", filepath.Join(tlsDir, "ca-key.pem"), "--tls-valid-for", "10m"}})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range c.Replicas {
				t.Logf("---- %s log tail ----\n%s", r.Name, r.Tail(4000))
			}
			for _, w := range c.Workers() {
				t.Logf("---- %s log tail ----\n%s", w.Name, w.Tail(3000))
			}
		}
		c.Stop()
	})
	require.Equal(t, tlsDir, c.TLSDir())

	oldW := makeDue(t, tlsDir, "w1", mtls.RoleWorker)
	w, err := c.StartWorker("w1", "--backend", "mock", "--heartbeat", "200ms")
	require.NoError(t, err)
	gotW := waitRenewed(t, tlsDir, "w1", mtls.RoleWorker, oldW, func() string { return w.Tail(3000) })
	require.WithinDuration(t, time.Now().Add(10*time.Minute), gotW.NotAfter, time.Minute, "the replicas' --tls-valid-for")
	require.Eventually(t, func() bool { return strings.Contains(w.Tail(20000), "certificate renewed") }, 30*time.Second, 50*time.Millisecond)

	// A replica restarted with a certificate due for renewal renews it.
	r := c.Replica("c2")
	require.NoError(t, r.Stop(10*time.Second))
	oldR := makeDue(t, tlsDir, "c2", mtls.RoleReplica)
	require.NoError(t, r.Restart())
	waitRenewed(t, tlsDir, "c2", mtls.RoleReplica, oldR, func() string { return r.Tail(4000) })

	// ... and a replica restarted on the renewed files serves.
	require.NoError(t, r.Stop(10*time.Second))
	require.NoError(t, r.Restart())
	cl := clientAs(t, c, "cli")
	require.Eventually(t, func() bool {
		v, err := cl.Cluster(ctx, r.GRPCAddr)
		return err == nil && v.GetState() != rolloutv1.ReplicaState_REPLICA_STATE_UNSPECIFIED
	}, time.Minute, 100*time.Millisecond, "c2 does not serve on its renewed certificate:\n%s", r.Tail(4000))
}
