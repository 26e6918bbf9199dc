package main

import (
	"context"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/testbin"
)

// dueWorkerCert rewrites w1's certificate in dir as one valid for a minute
// and issued 41 s ago (two thirds through its life: due for renewal), and
// returns it.
func dueWorkerCert(t *testing.T, dir string, ca *mtls.CA) *x509.Certificate {
	t.Helper()
	f := mtls.FilesFor(dir, "w1")
	cur, err := mtls.ReadCertFile(f.Cert)
	require.NoError(t, err)
	key, err := mtls.NewRenewalKey()
	require.NoError(t, err)
	csr, err := mtls.CreateCSR(mtls.Identity{Name: "w1", Role: mtls.RoleWorker}, key)
	require.NoError(t, err)
	der, err := mtls.SignRenewal(ca, csr, cur, time.Minute, time.Now().Add(-41*time.Second))
	require.NoError(t, err)
	require.NoError(t, mtls.WritePairAtomic(f.Cert, f.Key, der, key))
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return c
}

// TestWorkerRenewsItsCertificate: a worker whose certificate is due sends
// a CSR over its mutual-TLS connection and writes the signed certificate
// over its --tls-cert and --tls-key; with --tls-renew=false it does not.
func TestWorkerRenewsItsCertificate(t *testing.T) {
	for _, renew := range []bool{true, false} {
		dir := t.TempDir()
		require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "coord", Role: mtls.RoleReplica}, {Name: "w1", Role: mtls.RoleWorker}}, time.Hour))
		ca, err := mtls.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
		require.NoError(t, err)
		old := dueWorkerCert(t, dir, ca)
		serverTLS, err := mtls.FilesFor(dir, "coord").Load()
		require.NoError(t, err)
		srv := coordtest.Start(t, "a", grpc.Creds(credentials.NewTLS(serverTLS)))
		// The fake signs as a replica with the CA key would.
		srv.Intercept("Renew", func(ctx context.Context, req any) (any, error) {
			cur, err := mtls.PeerCertificate(ctx)
			if err != nil {
				return nil, err
			}
			der, err := mtls.SignRenewal(ca, req.(*rolloutv1.RenewRequest).GetCsr(), cur, 10*time.Minute, time.Now())
			if err != nil {
				return nil, err
			}
			return &rolloutv1.RenewResponse{Header: &rolloutv1.ReplyHeader{Term: 1}, Certificate: der}, nil
		})
		addItems(srv, 3)
		files := mtls.FilesFor(dir, "w1")
		args := []string{"--id", "w1", "--coord", srv.Addr(), "--mock-latency", "0", "--heartbeat", "50ms", "--claim-wait", "200ms",
			"--tls-ca", files.CA, "--tls-cert", files.Cert, "--tls-key", files.Key, "--log-level", "info"}
		if !renew {
			args = append(args, "--tls-renew=false")
		}
		ctx, cancel := context.WithCancel(context.Background())
		var stdout, stderr testbin.Output
		done := make(chan int, 1)
		go func() { done <- execute(ctx, args, &stdout, &stderr) }()
		require.Eventually(t, func() bool { return srv.Count(coordtest.Done) == 3 }, 20*time.Second, 10*time.Millisecond, stderr.String())
		if renew {
			require.Eventually(t, func() bool {
				c, err := mtls.ReadCertFile(files.Cert)
				return err == nil && c.NotAfter.After(old.NotAfter)
			}, 20*time.Second, 10*time.Millisecond, stderr.String())
			got, err := mtls.ReadCertFile(files.Cert)
			require.NoError(t, err)
			id, err := mtls.IdentityOf(got)
			require.NoError(t, err)
			require.Equal(t, mtls.Identity{Name: "w1", Role: mtls.RoleWorker}, id)
			_, err = files.Load()
			require.NoError(t, err, "the new pair loads")
			require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "certificate renewed") }, 10*time.Second, 10*time.Millisecond)
		}
		cancel()
		select {
		case code := <-done:
			require.Equal(t, exitOK, code, stderr.String())
		case <-time.After(20 * time.Second):
			t.Fatal("worker did not stop")
		}
		if !renew {
			require.Zero(t, srv.Calls("Renew"), "--tls-renew=false sends nothing")
			got, err := mtls.ReadCertFile(files.Cert)
			require.NoError(t, err)
			require.Equal(t, old.Raw, got.Raw)
		}
	}
}
