package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/server"
)

// startReplicaLike serves Cluster (answering) and the rest of the API
// (unimplemented) behind the replica's authorization layer, over mutual
// TLS with the certificate of c1 in dir, or plaintext when dir is "".
func startReplicaLike(t *testing.T, dir string) string {
	t.Helper()
	opts := server.NewAuthz(dir == "").ServerOptions()
	if dir != "" {
		conf, err := mtls.FilesFor(dir, "c1").Load()
		require.NoError(t, err)
		opts = append(opts, grpc.Creds(credentials.NewTLS(conf)))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	gs := grpc.NewServer(opts...)
	rolloutv1.RegisterCoordinatorServer(gs, &clusterServer{resp: &rolloutv1.ClusterResponse{
		Header:  &rolloutv1.ReplyHeader{Term: 7, LeaderId: "c1", LeaderAddr: addr, ReplicaId: "c1"},
		Members: []*rolloutv1.Member{{Id: "c1", GrpcAddr: addr, Suffrage: rolloutv1.Suffrage_SUFFRAGE_VOTER, Leader: true}},
		State:   rolloutv1.ReplicaState_REPLICA_STATE_LEADER, Insecure: dir == "",
	}})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return addr
}

// issueCert writes NAME.pem/NAME-key.pem into dir, signed by dir's CA,
// with role ("" for none), valid until notAfter.
func issueCert(t *testing.T, dir, name, role string, notAfter time.Time) {
	t.Helper()
	read := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		blk, _ := pem.Decode(b)
		require.NotNil(t, blk)
		return blk.Bytes
	}
	ca, err := x509.ParseCertificate(read("ca.pem"))
	require.NoError(t, err)
	caKey, err := x509.ParseECPrivateKey(read("ca-key.pem"))
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(caKey.Curve, rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(77), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if role != "" {
		tmpl.Subject.OrganizationalUnit = []string{role}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
}

// TestTLSMismatchNamesTheCause: a client with another cluster's CA, an
// expired certificate, a certificate without a role or of the wrong role,
// a plaintext client against a TLS replica and a TLS client against a
// plaintext one each get an error naming the cause, not only "no replica
// answered" or a timeout.
func TestTLSMismatchNamesTheCause(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "c1", Role: mtls.RoleReplica}, {Name: "cli", Role: mtls.RoleClient}, {Name: "w1", Role: mtls.RoleWorker}}, time.Hour))
	require.NoError(t, mtls.GenerateDevCA(other, []mtls.Cert{{Name: "cli", Role: mtls.RoleClient}}, time.Hour))
	issueCert(t, dir, "old", "client", time.Now().Add(-time.Hour))
	issueCert(t, dir, "norole", "", time.Now().Add(time.Hour))
	tlsAddr := startReplicaLike(t, dir)
	plainAddr := startReplicaLike(t, "")
	flags := func(d, n string) []string {
		f := mtls.FilesFor(d, n)
		return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
	}
	for _, tc := range []struct {
		name      string
		args      []string
		want      string
		transport bool // the connection fails (else the call is refused)
		waits     bool // the failure may be a busy replica: it is waited out
	}{
		{"another cluster's CA", append([]string{"--coord", tlsAddr}, flags(other, "cli")...), "not signed by the CA in --tls-ca", true, false},
		{"expired certificate", append([]string{"--coord", tlsAddr}, flags(dir, "old")...), "expired at", false, false},
		{"certificate without a role", append([]string{"--coord", tlsAddr}, flags(dir, "norole")...), `the certificate "norole" carries no role`, false, false},
		{"worker certificate", append([]string{"--coord", tlsAddr}, flags(dir, "w1")...), "needs role client or admin or gateway or replica; the certificate \"w1\" has role worker", false, false},
		{"plaintext client, TLS replica", []string{"--coord", tlsAddr, "--insecure"}, "a replica with TLS does that to a plaintext client", true, true},
		{"TLS client, plaintext replica", append([]string{"--coord", plainAddr}, flags(dir, "cli")...), "the replica speaks plaintext (it was started with --insecure)", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A mismatch that waiting cannot fix fails at once: with a
			// --timeout far beyond the test's own 30 s, waiting would end in
			// "interrupted" instead.
			timeout := "10m"
			if tc.waits {
				timeout = "2s"
			}
			r := runCLI(t, nil, append(append([]string{"status", "--run", "r"}, tc.args...), "--timeout", timeout)...)
			require.Equal(t, exitFailure, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.want)
			require.NotContains(t, r.stderr, "interrupted")
			if !tc.waits {
				require.NotContains(t, r.stderr, "waiting for the cluster")
			}
			if tc.transport {
				r = runCLI(t, nil, append(append([]string{"cluster"}, tc.args...), "--timeout", timeout, "--replica-timeout", "1s")...)
				require.Equal(t, exitFailure, r.code, r.stderr)
				require.Contains(t, r.stderr, "no replica answered")
				require.Contains(t, r.stderr, tc.want)
				require.Contains(t, r.stdout, tc.want, "the replica's row names it too")
				require.NotContains(t, r.stderr, "interrupted")
				if !tc.waits {
					require.NotContains(t, r.stderr, "waiting for the cluster")
				}
			}
		})
	}
}

// TestClusterShowsInsecureReplicas: rollout cluster marks each replica's
// transport and warns about insecure ones.
func TestClusterShowsInsecureReplicas(t *testing.T) {
	r := runCLI(t, nil, "cluster", "--coord", startReplicaLike(t, ""), "--insecure")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `EPOCH\s+SECURITY`, r.stdout)
	require.Regexp(t, `c1\s+\S+\s+Leader\s+.*INSECURE`, r.stdout)
	require.Contains(t, r.stdout, "WARNING: c1 run with --insecure")
	require.Contains(t, r.stderr, insecureWarning)

	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "c1", Role: mtls.RoleReplica}, {Name: "cli", Role: mtls.RoleClient}}, time.Hour))
	f := mtls.FilesFor(dir, "cli")
	r = runCLI(t, nil, "cluster", "--coord", startReplicaLike(t, dir), "--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `c1\s+\S+\s+Leader\s+.*mTLS`, r.stdout)
	require.NotContains(t, r.stdout, "INSECURE")
}

// TestRefusesWithoutTLSOrInsecure: a command that connects names the flags
// when given neither TLS nor --insecure, and refuses both together.
func TestRefusesWithoutTLSOrInsecure(t *testing.T) {
	var out, errOut bytes.Buffer
	a := newApp(&out, &errOut, false)
	a.connect = connectFake(newFakeCoord(), nil)
	code := a.execute(context.Background(), []string{"status", "--coord", "127.0.0.1:1"})
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut.String(), "no TLS configured: give --tls-ca, --tls-cert and --tls-key")
	require.Contains(t, errOut.String(), "or --insecure")

	r := runCLI(t, newFakeCoord(), "status", "--coord", "127.0.0.1:1", "--insecure", "--tls-ca", "x.pem")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--insecure cannot be combined")
}
