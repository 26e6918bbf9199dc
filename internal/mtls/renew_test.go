package mtls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// renewFixture makes a dev CA with a worker w1 (extra SANs) in a temporary
// directory and returns the directory, the loaded CA and w1's certificate.
func renewFixture(t *testing.T) (string, *CA, *x509.Certificate) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, GenerateDevCAHosts(dir, []Cert{{"w1", RoleWorker}, {"c1", RoleReplica}}, []string{"10.1.2.3", "node.example"}, time.Hour))
	ca, err := LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	cur, err := ReadCertFile(filepath.Join(dir, "w1.pem"))
	require.NoError(t, err)
	return dir, ca, cur
}

// TestSignRenewalKeepsIdentityAndSANs: a CSR for the caller's own name and
// role is signed; the new certificate carries the CSR's key, the caller's
// name, role and (a replica's) SANs, verifies against the CA and ends
// validFor after now. A worker's renewal is for client use only, without
// SANs, even when its current certificate (issued before) had both.
func TestSignRenewalKeepsIdentityAndSANs(t *testing.T) {
	dir, ca, worker := renewFixture(t)
	// An old-style worker certificate: server and client use, SANs.
	wkey, err := NewRenewalKey()
	require.NoError(t, err)
	csr, err := CreateCSR(Identity{Name: "w1", Role: RoleWorker}, wkey)
	require.NoError(t, err)
	old := *worker
	old.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	old.DNSNames = []string{"localhost", "w1", "node.example"}
	wder, err := SignRenewal(ca, csr, &old, 10*time.Minute, time.Now())
	require.NoError(t, err)
	wgot, err := x509.ParseCertificate(wder)
	require.NoError(t, err)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, wgot.ExtKeyUsage, "a worker is renewed for client use only")
	require.Empty(t, wgot.DNSNames)
	require.Empty(t, wgot.IPAddresses)

	cur, err := ReadCertFile(filepath.Join(dir, "c1.pem"))
	require.NoError(t, err)
	key, err := NewRenewalKey()
	require.NoError(t, err)
	csr, err = CreateCSR(Identity{Name: "c1", Role: RoleReplica}, key)
	require.NoError(t, err)
	now := time.Now()
	der, err := SignRenewal(ca, csr, cur, 10*time.Minute, now)
	require.NoError(t, err)
	got, err := x509.ParseCertificate(der)
	require.NoError(t, err)

	id, err := IdentityOf(got)
	require.NoError(t, err)
	require.Equal(t, Identity{Name: "c1", Role: RoleReplica}, id)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, got.ExtKeyUsage)
	require.Contains(t, got.DNSNames, "node.example")
	require.Equal(t, cur.DNSNames, got.DNSNames)
	require.Len(t, got.IPAddresses, len(cur.IPAddresses))
	for i := range cur.IPAddresses {
		require.True(t, cur.IPAddresses[i].Equal(got.IPAddresses[i]))
	}
	require.True(t, key.PublicKey.Equal(got.PublicKey), "the CSR's key")
	require.WithinDuration(t, now.Add(10*time.Minute), got.NotAfter, time.Second)
	require.True(t, got.NotBefore.Before(now) && !got.NotBefore.Before(now.Add(-time.Minute-time.Second)), "backdated by a tenth at most: %v", got.NotBefore)
	require.NotEqual(t, cur.SerialNumber, got.SerialNumber)

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	_, err = got.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, DNSName: "node.example"})
	require.NoError(t, err)

	// Never beyond the CA.
	der, err = SignRenewal(ca, csr, cur, 10*365*24*time.Hour, now)
	require.NoError(t, err)
	got, err = x509.ParseCertificate(der)
	require.NoError(t, err)
	require.Equal(t, ca.Cert.NotAfter, got.NotAfter)
}

// TestSignRenewalRefuses: each bad request is refused with the sentinel
// naming what was wrong.
func TestSignRenewalRefuses(t *testing.T) {
	_, ca, cur := renewFixture(t)
	now := time.Now()
	good, err := NewRenewalKey()
	require.NoError(t, err)
	csrFor := func(subject pkix.Name, key crypto.Signer) []byte {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject}, key)
		require.NoError(t, err)
		return der
	}
	w1 := pkix.Name{CommonName: "w1", OrganizationalUnit: []string{"worker"}}

	t.Run("signature does not verify", func(t *testing.T) {
		der := csrFor(w1, good)
		der[len(der)-3] ^= 0xff // inside the signature
		_, err := SignRenewal(ca, der, cur, time.Hour, now)
		require.ErrorIs(t, err, ErrBadCSR)
		require.Contains(t, err.Error(), "signature")
	})
	t.Run("not a CSR", func(t *testing.T) {
		_, err := SignRenewal(ca, []byte("junk"), cur, time.Hour, now)
		require.ErrorIs(t, err, ErrBadCSR)
	})
	t.Run("small RSA key", func(t *testing.T) {
		k, err := rsa.GenerateKey(rand.Reader, 1024)
		require.NoError(t, err)
		_, err = SignRenewal(ca, csrFor(w1, k), cur, time.Hour, now)
		require.ErrorIs(t, err, ErrWeakKey)
		require.Contains(t, err.Error(), "1024")
	})
	t.Run("P-224", func(t *testing.T) {
		k, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
		require.NoError(t, err)
		_, err = SignRenewal(ca, csrFor(w1, k), cur, time.Hour, now)
		require.ErrorIs(t, err, ErrWeakKey)
		require.Contains(t, err.Error(), "P-224")
	})
	t.Run("other name", func(t *testing.T) {
		_, err := SignRenewal(ca, csrFor(pkix.Name{CommonName: "w2", OrganizationalUnit: []string{"worker"}}, good), cur, time.Hour, now)
		require.ErrorIs(t, err, ErrIdentityMismatch)
		require.Contains(t, err.Error(), `"w2"`)
	})
	t.Run("other role", func(t *testing.T) {
		_, err := SignRenewal(ca, csrFor(pkix.Name{CommonName: "w1", OrganizationalUnit: []string{"admin"}}, good), cur, time.Hour, now)
		require.ErrorIs(t, err, ErrIdentityMismatch)
	})
	t.Run("an extra role", func(t *testing.T) {
		_, err := SignRenewal(ca, csrFor(pkix.Name{CommonName: "w1", OrganizationalUnit: []string{"worker", "admin"}}, good), cur, time.Hour, now)
		require.ErrorIs(t, err, ErrIdentityMismatch)
	})
	t.Run("no role", func(t *testing.T) {
		_, err := SignRenewal(ca, csrFor(pkix.Name{CommonName: "w1"}, good), cur, time.Hour, now)
		require.ErrorIs(t, err, ErrIdentityMismatch)
	})
	t.Run("caller without a role", func(t *testing.T) {
		noRole := *cur
		noRole.Subject = pkix.Name{CommonName: "w1"}
		_, err := SignRenewal(ca, csrFor(w1, good), &noRole, time.Hour, now)
		require.ErrorIs(t, err, ErrNoRole)
	})
	t.Run("expired CA", func(t *testing.T) {
		_, err := SignRenewal(ca, csrFor(w1, good), cur, time.Hour, ca.Cert.NotAfter.Add(time.Second))
		require.ErrorIs(t, err, ErrCAExpired)
	})
	t.Run("no validity", func(t *testing.T) {
		_, err := SignRenewal(ca, csrFor(w1, good), cur, 0, now)
		require.ErrorIs(t, err, ErrBadValidity)
	})
	t.Run("Ed25519 and RSA 2048 are accepted", func(t *testing.T) {
		_, ek, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		_, err = SignRenewal(ca, csrFor(w1, ek), cur, time.Hour, now)
		require.NoError(t, err)
		rk, err := rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(t, err)
		_, err = SignRenewal(ca, csrFor(w1, rk), cur, time.Hour, now)
		require.NoError(t, err)
	})
}

func TestLoadCARefusesBadFiles(t *testing.T) {
	dir, _, _ := renewFixture(t)
	_, err := LoadCA(filepath.Join(dir, "nope.pem"), filepath.Join(dir, "ca-key.pem"))
	require.ErrorIs(t, err, ErrNoCA)
	_, err = LoadCA(filepath.Join(dir, "w1.pem"), filepath.Join(dir, "w1-key.pem"))
	require.ErrorIs(t, err, ErrBadPEM)
	require.Contains(t, err.Error(), "no CA certificate")
	_, err = LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "w1-key.pem"))
	require.ErrorIs(t, err, ErrBadPEM)
	require.Contains(t, err.Error(), "not the key of")

	// A bundle of two CAs (a rotation): the one of the key is loaded.
	other := t.TempDir()
	newCA, err := NewDevCA(other, time.Hour)
	require.NoError(t, err)
	oldPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	newPEM, err := os.ReadFile(filepath.Join(other, "ca.pem"))
	require.NoError(t, err)
	bundle := filepath.Join(other, "bundle.pem")
	require.NoError(t, os.WriteFile(bundle, append(oldPEM, newPEM...), 0o644))
	got, err := LoadCA(bundle, filepath.Join(other, "ca-key.pem"))
	require.NoError(t, err)
	require.Equal(t, newCA.Cert.Raw, got.Cert.Raw)
	got, err = LoadCA(bundle, filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	require.Equal(t, oldPEM, pemOf(got.Cert))
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func TestCheckValidity(t *testing.T) {
	_, ca, _ := renewFixture(t)
	now := time.Now()
	require.NoError(t, ca.CheckValidity(now, 30*time.Minute))
	err := ca.CheckValidity(now, 2*time.Hour)
	require.ErrorIs(t, err, ErrBadValidity)
	require.Contains(t, err.Error(), "CA's own expiry")
	require.ErrorIs(t, ca.CheckValidity(now, -time.Second), ErrBadValidity)
}

// TestNewDevCAOutlivesCertificates: a CA from NewDevCA lives validFor;
// IssueCerts issues shorter certificates from it.
func TestNewDevCAOutlivesCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewDevCA(dir, 48*time.Hour)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(48*time.Hour), ca.Cert.NotAfter, time.Minute)
	require.True(t, HasCA(dir))
	require.NoError(t, IssueCerts(dir, []Cert{{"w1", RoleWorker}}, nil, time.Hour))
	leaf, err := ReadCertFile(filepath.Join(dir, "w1.pem"))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Hour), leaf.NotAfter, time.Minute)
	st, err := os.Stat(filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	_, err = NewDevCA(t.TempDir(), 0)
	require.ErrorIs(t, err, ErrBadValidity)
}

func TestRenewDue(t *testing.T) {
	nb := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &x509.Certificate{NotBefore: nb, NotAfter: nb.Add(90 * time.Minute)}
	require.Equal(t, nb.Add(60*time.Minute), RenewDue(c))
}

// TestWritePairAtomic: the renewed pair replaces the old files, loads as a
// key pair, the key is 0600, and no temporary file is left behind.
func TestWritePairAtomic(t *testing.T) {
	dir, ca, cur := renewFixture(t)
	f := FilesFor(dir, "w1")
	key, err := NewRenewalKey()
	require.NoError(t, err)
	csr, err := CreateCSR(Identity{Name: "w1", Role: RoleWorker}, key)
	require.NoError(t, err)
	der, err := SignRenewal(ca, csr, cur, 30*time.Minute, time.Now())
	require.NoError(t, err)
	require.NoError(t, os.Chmod(f.Key, 0o644)) // the new file's mode is set, not inherited
	require.NoError(t, WritePairAtomic(f.Cert, f.Key, der, key))

	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	require.NoError(t, err)
	require.Equal(t, der, pair.Certificate[0])
	st, err := os.Stat(f.Key)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	_, err = f.Load()
	require.NoError(t, err)
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		require.NotContains(t, e.Name(), ".tmp-")
	}

	// An Ed25519 key is written as PKCS#8 and loads too.
	_, ek, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	csr, err = CreateCSR(Identity{Name: "w1", Role: RoleWorker}, ek)
	require.NoError(t, err)
	der, err = SignRenewal(ca, csr, cur, 30*time.Minute, time.Now())
	require.NoError(t, err)
	require.NoError(t, WritePairAtomic(f.Cert, f.Key, der, ek))
	_, err = tls.LoadX509KeyPair(f.Cert, f.Key)
	require.NoError(t, err)

	// A directory that cannot be written leaves the old files.
	require.Error(t, WritePairAtomic(filepath.Join(dir, "missing", "w1.pem"), filepath.Join(dir, "missing", "w1-key.pem"), der, ek))
}
