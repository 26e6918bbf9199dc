package main

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/mtls"
)

// leafOf loads the certificate of name in dir.
func leafOf(t *testing.T, dir, name string) (*x509.Certificate, *x509.CertPool) {
	t.Helper()
	conf, err := mtls.FilesFor(dir, name).Load()
	require.NoError(t, err, name)
	leaf, err := x509.ParseCertificate(conf.Certificates[0].Certificate[0])
	require.NoError(t, err)
	return leaf, conf.RootCAs
}

func TestCertsWritesLoadableIdentities(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "c1:replica,w1:worker,cli:client,ops:admin", "--hosts", "10.0.0.7,node-a.example")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "new dev CA and 4 certificates")
	for n, role := range map[string]mtls.Role{"c1": mtls.RoleReplica, "w1": mtls.RoleWorker, "cli": mtls.RoleClient, "ops": mtls.RoleAdmin} {
		leaf, _ := leafOf(t, dir, n)
		id, err := mtls.IdentityOf(leaf)
		require.NoError(t, err)
		require.Equal(t, mtls.Identity{Name: n, Role: role}, id)
		require.Contains(t, leaf.DNSNames, "node-a.example")
		require.Condition(t, func() bool {
			for _, ip := range leaf.IPAddresses {
				if ip.Equal(net.ParseIP("10.0.0.7")) {
					return true
				}
			}
			return false
		}, "--hosts IP in %s", n)
	}
	require.FileExists(t, filepath.Join(dir, "ca.pem"))

	r = runCLI(t, newFakeCoord(), "certs", "--dir", t.TempDir(), "--names", "../escape:worker")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "escape")
	r = runCLI(t, newFakeCoord(), "certs", "--dir", t.TempDir(), "--names", "w1")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "NAME:ROLE")
	r = runCLI(t, newFakeCoord(), "certs", "--dir", t.TempDir(), "--names", "w1:worker", "--hosts", "h:80")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--hosts")
	r = runCLI(t, newFakeCoord(), "certs", "--names", "a:worker")
	require.Equal(t, exitUsage, r.code)
}

// TestCertsReusesTheCA: adding a worker to a directory that holds a CA
// issues it from that CA; the CA and the certificates issued before are
// unchanged and stay valid.
func TestCertsReusesTheCA(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "c1:replica,w1:worker")
	require.Equal(t, exitOK, r.code, r.stderr)
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	c1, err := os.ReadFile(filepath.Join(dir, "c1.pem"))
	require.NoError(t, err)

	r = runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "w2:worker")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "reusing the CA in "+dir)
	ca2, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	require.Equal(t, ca, ca2, "the CA is kept")
	c1b, err := os.ReadFile(filepath.Join(dir, "c1.pem"))
	require.NoError(t, err)
	require.Equal(t, c1, c1b, "earlier certificates are kept")
	for _, n := range []string{"c1", "w1", "w2"} {
		leaf, pool := leafOf(t, dir, n)
		_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		require.NoError(t, err, "%s chains to the one CA", n)
	}
}

func TestCertsHelpShowsRoles(t *testing.T) {
	r := runCLI(t, nil, "certs", "--help")
	require.Equal(t, exitOK, r.code, r.stderr)
	for _, s := range []string{"replica  a coordinator replica", "worker   a worker", "client   rollout submit", "admin    what a client may do", "--hosts"} {
		require.Contains(t, r.stdout, s)
	}
}
