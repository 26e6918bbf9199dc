package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/internal/certrenew"
	"github.com/rollout/rollout/internal/mtls"
)

// renewOpts is a mutual-TLS cluster whose replicas hold the CA key (when
// withKey) and sign for validFor.
func (c testCerts) renewOpts(t *testing.T, withKey bool, validFor time.Duration) clusterOpts {
	opts := c.tlsOpts(t)
	var ca *mtls.CA
	if withKey {
		var err error
		ca, err = mtls.LoadCA(filepath.Join(c.dir, "ca.pem"), filepath.Join(c.dir, "ca-key.pem"))
		require.NoError(t, err)
	}
	opts.server = func(sc *Config) {
		sc.FailureTimeout = time.Hour
		sc.RenewCA, sc.RenewValidFor = ca, validFor
	}
	return opts
}

// csrFor is a CSR with subject, signed by a new P-256 key.
func csrFor(t *testing.T, subject pkix.Name) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject}, k)
	require.NoError(t, err)
	return der
}

// TestRenewRPC: over real mutual TLS, each role renews its own certificate
// (same name, role and SANs, the replica's validity); a CSR for another
// name or role is PermissionDenied, one that does not verify or carries a
// weak key InvalidArgument, and a replica without the CA key or without
// TLS answers FailedPrecondition pointing to the by-hand docs.
func TestRenewRPC(t *testing.T) {
	certs := newTestCerts(t)
	c := newTestCluster(t, 1, certs.renewOpts(t, true, 10*time.Minute))
	l, _ := c.waitLeader()
	renew := func(caller string, csr []byte) (*rolloutv1.RenewResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return rolloutv1.NewCoordinatorClient(dial(t, l.grpcAddr, certs.tls(t, caller))).Renew(ctx, &rolloutv1.RenewRequest{Csr: csr})
	}

	for name, role := range map[string]string{"w1": "worker", "c9": "replica", "cli": "client", "ops": "admin"} {
		resp, err := renew(name, csrFor(t, pkix.Name{CommonName: name, OrganizationalUnit: []string{role}}))
		require.NoError(t, err, name)
		require.NotZero(t, resp.GetHeader().GetTerm())
		got, err := x509.ParseCertificate(resp.GetCertificate())
		require.NoError(t, err)
		id, err := mtls.IdentityOf(got)
		require.NoError(t, err)
		require.Equal(t, mtls.Identity{Name: name, Role: mtls.Role(role)}, id)
		cur, err := mtls.ReadCertFile(mtls.FilesFor(certs.dir, name).Cert)
		require.NoError(t, err)
		require.Equal(t, cur.DNSNames, got.DNSNames, "SANs kept")
		require.WithinDuration(t, time.Now().Add(10*time.Minute), got.NotAfter, 5*time.Second)
	}

	for _, tc := range []struct {
		name, caller string
		csr          func() []byte
		code         codes.Code
		msg          string
	}{
		{"another name", "w1", func() []byte { return csrFor(t, pkix.Name{CommonName: "w2", OrganizationalUnit: []string{"worker"}}) },
			codes.PermissionDenied, "only its own name and role"},
		{"another role", "w1", func() []byte { return csrFor(t, pkix.Name{CommonName: "w1", OrganizationalUnit: []string{"admin"}}) },
			codes.PermissionDenied, "only its own name and role"},
		{"client named w1 asks for the worker", "as-w1", func() []byte { return csrFor(t, pkix.Name{CommonName: "w1", OrganizationalUnit: []string{"worker"}}) },
			codes.PermissionDenied, "only its own name and role"},
		{"signature does not verify", "w1", func() []byte {
			der := csrFor(t, pkix.Name{CommonName: "w1", OrganizationalUnit: []string{"worker"}})
			der[len(der)-3] ^= 0xff
			return der
		}, codes.InvalidArgument, "signature does not verify"},
		{"weak key", "w1", func() []byte {
			k, err := rsa.GenerateKey(rand.Reader, 1024)
			require.NoError(t, err)
			der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "w1", OrganizationalUnit: []string{"worker"}}}, k)
			require.NoError(t, err)
			return der
		}, codes.InvalidArgument, "weak"},
		{"no CSR", "w1", func() []byte { return nil }, codes.InvalidArgument, "signing request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renew(tc.caller, tc.csr())
			require.Equal(t, tc.code, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tc.msg)
		})
	}

	t.Run("no CA key", func(t *testing.T) {
		nokey := newTestCluster(t, 1, certs.renewOpts(t, false, 0))
		nl, _ := nokey.waitLeader()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := rolloutv1.NewCoordinatorClient(dial(t, nl.grpcAddr, certs.tls(t, "w1"))).Renew(ctx,
			&rolloutv1.RenewRequest{Csr: csrFor(t, pkix.Name{CommonName: "w1", OrganizationalUnit: []string{"worker"}})})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "holds no CA key")
		require.Contains(t, status.Convert(err).Message(), "docs/SECURITY.md")
	})
	t.Run("insecure", func(t *testing.T) {
		plain := newTestCluster(t, 1, clusterOpts{server: func(sc *Config) { sc.FailureTimeout = time.Hour }})
		pl, _ := plain.waitLeader()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := rolloutv1.NewCoordinatorClient(dial(t, pl.grpcAddr, nil)).Renew(ctx, &rolloutv1.RenewRequest{})
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	})
}

// TestWorkerRenewsItsShortLivedCertificate: a worker whose certificate is
// valid for one minute and two thirds through its life renews it from a
// replica that holds the CA key, over its current mutual-TLS connection
// (coordclient and the certrenew loop, as rollout-worker runs them): the
// new files are on disk with the same name and role and a later NotAfter,
// and a connection made with them is accepted.
func TestWorkerRenewsItsShortLivedCertificate(t *testing.T) {
	certs := newTestCerts(t)
	c := newTestCluster(t, 3, certs.renewOpts(t, true, time.Minute))
	c.waitLeader()

	// w1's certificate: valid for a minute, issued 41 s ago (renewal is due
	// from 2/3 of its life on).
	ca, err := mtls.LoadCA(filepath.Join(certs.dir, "ca.pem"), filepath.Join(certs.dir, "ca-key.pem"))
	require.NoError(t, err)
	files := mtls.FilesFor(certs.dir, "w1")
	cur, err := mtls.ReadCertFile(files.Cert)
	require.NoError(t, err)
	key, err := mtls.NewRenewalKey()
	require.NoError(t, err)
	csr, err := mtls.CreateCSR(mtls.Identity{Name: "w1", Role: mtls.RoleWorker}, key)
	require.NoError(t, err)
	der, err := mtls.SignRenewal(ca, csr, cur, time.Minute, time.Now().Add(-41*time.Second))
	require.NoError(t, err)
	require.NoError(t, mtls.WritePairAtomic(files.Cert, files.Key, der, key))
	old, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	_, due, err := certrenew.Next(old, time.Now())
	require.NoError(t, err)
	require.True(t, due)

	conf, err := files.Load()
	require.NoError(t, err)
	cc := coordclient.DefaultConfig()
	cc.Addrs, cc.TLS, cc.CallTimeout = c.addrs(), conf, 3*time.Second
	client, err := coordclient.New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })

	rc := certrenew.DefaultConfig()
	rc.CertFile, rc.KeyFile, rc.CAFile = files.Cert, files.Key, files.CA
	rc.Identity = mtls.Identity{Name: "w1", Role: mtls.RoleWorker}
	rc.RetryMin, rc.RetryMax = 50*time.Millisecond, time.Second
	rc.Logger = testLogger("renew")
	rc.Renew = func(ctx context.Context, csr []byte) ([]byte, error) {
		resp, err := client.Renew(ctx, &rolloutv1.RenewRequest{Csr: csr})
		return resp.GetCertificate(), err
	}
	renewed := make(chan *x509.Certificate, 4)
	rc.OnRenewed = func(c *x509.Certificate) { renewed <- c }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- certrenew.Run(ctx, rc) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	select {
	case <-renewed:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker's certificate was not renewed")
	}
	onDisk, err := mtls.ReadCertFile(files.Cert)
	require.NoError(t, err)
	id, err := mtls.IdentityOf(onDisk)
	require.NoError(t, err)
	require.Equal(t, mtls.Identity{Name: "w1", Role: mtls.RoleWorker}, id)
	require.True(t, onDisk.NotAfter.After(old.NotAfter), "later NotAfter: %v vs %v", onDisk.NotAfter, old.NotAfter)
	require.NotEqual(t, old.SerialNumber, onDisk.SerialNumber)
	require.Equal(t, old.DNSNames, onDisk.DNSNames)

	// The renewed files make a connection the cluster accepts.
	newConf, err := files.Load()
	require.NoError(t, err)
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	require.NoError(t, err)
	require.Equal(t, onDisk.Raw, pair.Certificate[0])
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	_, err = rolloutv1.NewCoordinatorClient(dial(t, c.addrs()[0], newConf)).Cluster(cctx, &rolloutv1.ClusterRequest{})
	require.NoError(t, err)
}

// TestClientRenewFindsTheReplicaWithTheKey: coordclient.Renew asks the
// other replicas when the first holds no CA key; when none does, the
// FailedPrecondition comes back.
func TestClientRenewFindsTheReplicaWithTheKey(t *testing.T) {
	certs := newTestCerts(t)
	ca, err := mtls.LoadCA(filepath.Join(certs.dir, "ca.pem"), filepath.Join(certs.dir, "ca-key.pem"))
	require.NoError(t, err)
	opts := certs.tlsOpts(t)
	opts.server = func(sc *Config) {
		sc.FailureTimeout = time.Hour
		if sc.ReplicaID == "c3" {
			sc.RenewCA = ca
		}
	}
	c := newTestCluster(t, 3, opts)
	c.waitLeader()
	addrs := c.addrs()
	require.Len(t, addrs, 3)
	client := func(addrs []string) *coordclient.Client {
		cc := coordclient.DefaultConfig()
		cc.Addrs, cc.TLS, cc.CallTimeout = addrs, certs.tls(t, "w1"), 3*time.Second
		cl, err := coordclient.New(cc)
		require.NoError(t, err)
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	csr := csrFor(t, pkix.Name{CommonName: "w1", OrganizationalUnit: []string{"worker"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	resp, err := client(addrs).Renew(ctx, &rolloutv1.RenewRequest{Csr: csr})
	require.NoError(t, err)
	got, err := x509.ParseCertificate(resp.GetCertificate())
	require.NoError(t, err)
	require.Equal(t, "w1", got.Subject.CommonName)

	_, err = client(addrs[:2]).Renew(ctx, &rolloutv1.RenewRequest{Csr: csr})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "holds no CA key")
	require.ErrorContains(t, err, "no other replica signed")
}
