package main

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

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
		if role != mtls.RoleReplica {
			// Not a server: client use only, none of the hosts.
			require.Empty(t, leaf.DNSNames, n)
			require.Empty(t, leaf.IPAddresses, n)
			continue
		}
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

// TestCertsValidFor: certificates are valid for --valid-for (30 days by
// default) and a new CA for --ca-valid-for (10 years); a validity beyond
// the CA's expiry is refused naming --valid-for, and nothing is written.
func TestCertsValidFor(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "c1:replica")
	require.Equal(t, exitOK, r.code, r.stderr)
	leaf, _ := leafOf(t, dir, "c1")
	require.WithinDuration(t, time.Now().Add(720*time.Hour), leaf.NotAfter, time.Minute)
	ca, err := mtls.ReadCertFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(10*365*24*time.Hour), ca.NotAfter, time.Minute)

	r = runCLI(t, newFakeCoord(), "certs", "--dir", dir, "--names", "w1:worker", "--valid-for", "90m")
	require.Equal(t, exitOK, r.code, r.stderr)
	leaf, _ = leafOf(t, dir, "w1")
	require.WithinDuration(t, time.Now().Add(90*time.Minute), leaf.NotAfter, time.Minute)

	short := t.TempDir()
	r = runCLI(t, newFakeCoord(), "certs", "--dir", short, "--names", "c1:replica", "--valid-for", "1h", "--ca-valid-for", "2h")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runCLI(t, newFakeCoord(), "certs", "--dir", short, "--names", "w9:worker", "--valid-for", "3h")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--valid-for")
	require.Contains(t, r.stderr, "CA's own expiry")
	require.NoFileExists(t, filepath.Join(short, "w9.pem"))

	r = runCLI(t, newFakeCoord(), "certs", "--dir", t.TempDir(), "--names", "c1:replica", "--valid-for", "3h", "--ca-valid-for", "2h")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--valid-for")
	require.Contains(t, r.stderr, "--ca-valid-for")
	for _, bad := range []string{"0s", "-1h"} {
		r = runCLI(t, newFakeCoord(), "certs", "--dir", t.TempDir(), "--names", "c1:replica", "--valid-for", bad)
		require.Equal(t, exitUsage, r.code)
		require.Contains(t, r.stderr, "--valid-for must be positive")
	}
	empty := t.TempDir()
	r = runCLI(t, newFakeCoord(), "certs", "--dir", empty, "--names", "c1:replica", "--hosts", "h:80")
	require.Equal(t, exitUsage, r.code)
	require.False(t, mtls.HasCA(empty), "bad input writes no CA")
}
