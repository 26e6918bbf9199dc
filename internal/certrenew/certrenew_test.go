package certrenew

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/mtls"
)

// fixture is a dev CA with the worker w1, whose certificate the test
// replaces with one of a chosen window.
type fixture struct {
	dir   string
	ca    *mtls.CA
	files mtls.Files
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "w1", Role: mtls.RoleWorker}}, time.Hour))
	ca, err := mtls.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	return fixture{dir: dir, ca: ca, files: mtls.FilesFor(dir, "w1")}
}

// setWindow rewrites w1's certificate (and key) to be valid from nb to na.
func (f fixture) setWindow(t *testing.T, nb, na time.Time) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "w1", OrganizationalUnit: []string{"worker"}},
		NotBefore:    nb, NotAfter: na,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost", "w1"},
	}, f.ca.Cert, &key.PublicKey, f.ca.Key)
	require.NoError(t, err)
	require.NoError(t, mtls.WritePairAtomic(f.files.Cert, f.files.Key, der, key))
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return c
}

// signer is a RenewFunc that signs like a replica with the CA key would,
// for the certificate currently in the file, for validFor; it counts its
// calls and fails the first failFirst of them.
func (f fixture) signer(t *testing.T, validFor time.Duration, failFirst int, calls *atomic.Int64) RenewFunc {
	return func(_ context.Context, csr []byte) ([]byte, error) {
		if calls.Add(1) <= int64(failFirst) {
			return nil, errors.New("replica c1 holds no CA key (test)")
		}
		cur, err := mtls.ReadCertFile(f.files.Cert)
		if err != nil {
			return nil, err
		}
		return mtls.SignRenewal(f.ca, csr, cur, validFor, time.Now())
	}
}

// syncBuf is a bytes.Buffer safe for the logger and the test at once.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (f fixture) config(renew RenewFunc, logs *syncBuf) Config {
	cfg := DefaultConfig()
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = f.files.Cert, f.files.Key, f.files.CA
	cfg.Identity = mtls.Identity{Name: "w1", Role: mtls.RoleWorker}
	cfg.Renew = renew
	cfg.RetryMin, cfg.RetryMax = 10*time.Millisecond, 100*time.Millisecond
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	return cfg
}

// runLoop runs the loop until the test ends.
func runLoop(t *testing.T, cfg Config) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

func TestNext(t *testing.T) {
	nb := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &x509.Certificate{NotBefore: nb, NotAfter: nb.Add(3 * time.Hour)}
	wait, due, err := Next(c, nb.Add(time.Hour))
	require.NoError(t, err)
	require.False(t, due)
	require.Equal(t, time.Hour, wait, "due once a third of the life is left")
	_, due, err = Next(c, nb.Add(2*time.Hour))
	require.NoError(t, err)
	require.True(t, due)
	_, _, err = Next(c, nb.Add(3*time.Hour))
	require.ErrorIs(t, err, ErrExpired)
}

// TestRunRenewsADueCertificate: a certificate with less than a third of its
// life left is renewed: new files with the same name and role, a later
// NotAfter, a new key (0600), and they load as a TLS pair.
func TestRunRenewsADueCertificate(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	old := f.setWindow(t, now.Add(-40*time.Second), now.Add(20*time.Second))
	var calls atomic.Int64
	logs := &syncBuf{}
	renewed := make(chan *x509.Certificate, 16)
	cfg := f.config(f.signer(t, time.Hour, 0, &calls), logs)
	cfg.OnRenewed = func(c *x509.Certificate) { renewed <- c }
	runLoop(t, cfg)

	var got *x509.Certificate
	select {
	case got = <-renewed:
	case <-time.After(30 * time.Second):
		t.Fatalf("no renewal; logs:\n%s", logs)
	}
	onDisk, err := mtls.ReadCertFile(f.files.Cert)
	require.NoError(t, err)
	require.Equal(t, got.Raw, onDisk.Raw)
	id, err := mtls.IdentityOf(onDisk)
	require.NoError(t, err)
	require.Equal(t, mtls.Identity{Name: "w1", Role: mtls.RoleWorker}, id)
	require.True(t, onDisk.NotAfter.After(old.NotAfter))
	require.NotEqual(t, old.PublicKey, onDisk.PublicKey)
	st, err := os.Stat(f.files.Key)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	_, err = tls.LoadX509KeyPair(f.files.Cert, f.files.Key)
	require.NoError(t, err)
	require.Contains(t, logs.String(), "certificate renewed")
	// The new certificate has an hour: it is not due, and not renewed again.
	_, due, err := Next(onDisk, time.Now())
	require.NoError(t, err)
	require.False(t, due)
}

// TestRunRetriesFailuresWithTheReason: a refused renewal is logged with the
// replica's reason and retried until it succeeds; nothing is written before.
func TestRunRetriesFailuresWithTheReason(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	old := f.setWindow(t, now.Add(-40*time.Second), now.Add(20*time.Second))
	var calls atomic.Int64
	logs := &syncBuf{}
	renewed := make(chan *x509.Certificate, 16)
	cfg := f.config(f.signer(t, time.Hour, 3, &calls), logs)
	cfg.OnRenewed = func(c *x509.Certificate) { renewed <- c }
	runLoop(t, cfg)
	select {
	case <-renewed:
	case <-time.After(30 * time.Second):
		t.Fatalf("no renewal; logs:\n%s", logs)
	}
	require.GreaterOrEqual(t, calls.Load(), int64(4))
	require.Contains(t, logs.String(), "certificate renewal failed; will retry")
	require.Contains(t, logs.String(), "holds no CA key")
	onDisk, err := mtls.ReadCertFile(f.files.Cert)
	require.NoError(t, err)
	require.True(t, onDisk.NotAfter.After(old.NotAfter))
}

// TestRunLeavesAnExpiredCertificate: an expired certificate is not sent;
// the loop says to renew it by hand.
func TestRunLeavesAnExpiredCertificate(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	f.setWindow(t, now.Add(-time.Hour), now.Add(-time.Minute))
	var calls atomic.Int64
	logs := &syncBuf{}
	runLoop(t, f.config(f.signer(t, time.Hour, 0, &calls), logs))
	require.Eventually(t, func() bool { return bytes.Count([]byte(logs.String()), []byte("renew it by hand")) >= 2 },
		30*time.Second, 10*time.Millisecond, "logs:\n%s", logs)
	require.Zero(t, calls.Load(), "an expired certificate is not sent")
}

// TestOnceRefusesBadReplies: a reply for another identity, another key, or
// no later end is not written.
func TestOnceRefusesBadReplies(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	f.setWindow(t, now.Add(-40*time.Second), now.Add(20*time.Second))
	before, err := os.ReadFile(f.files.Cert)
	require.NoError(t, err)
	logs := &syncBuf{}

	// Another identity: the replica signs a certificate for admin ops.
	require.NoError(t, mtls.IssueCerts(f.dir, []mtls.Cert{{Name: "ops", Role: mtls.RoleAdmin}}, nil, time.Hour))
	ops, err := mtls.ReadCertFile(filepath.Join(f.dir, "ops.pem"))
	require.NoError(t, err)
	other := f.config(func(_ context.Context, _ []byte) ([]byte, error) { return ops.Raw, nil }, logs)
	_, err = Once(context.Background(), other)
	require.ErrorIs(t, err, ErrBadReply)

	// Another key: a certificate for w1 signed for a different CSR.
	k, err := mtls.NewRenewalKey()
	require.NoError(t, err)
	csr, err := mtls.CreateCSR(mtls.Identity{Name: "w1", Role: mtls.RoleWorker}, k)
	require.NoError(t, err)
	cur, err := mtls.ReadCertFile(f.files.Cert)
	require.NoError(t, err)
	foreign, err := mtls.SignRenewal(f.ca, csr, cur, time.Hour, time.Now())
	require.NoError(t, err)
	_, err = Once(context.Background(), f.config(func(_ context.Context, _ []byte) ([]byte, error) { return foreign, nil }, logs))
	require.ErrorIs(t, err, ErrBadReply)
	require.Contains(t, err.Error(), "new key")

	// No later end (the replica's validity is shorter than what is left).
	var calls atomic.Int64
	_, err = Once(context.Background(), f.config(f.signer(t, time.Second, 0, &calls), logs))
	require.ErrorIs(t, err, ErrBadReply)
	require.Contains(t, err.Error(), "no later")

	after, err := os.ReadFile(f.files.Cert)
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing written")

	// A certificate file of another node is not renewed.
	cfg := f.config(f.signer(t, time.Hour, 0, &calls), logs)
	cfg.Identity = mtls.Identity{Name: "w2", Role: mtls.RoleWorker}
	_, err = Once(context.Background(), cfg)
	require.ErrorIs(t, err, ErrWrongIdentity)
}

func TestConfigValidate(t *testing.T) {
	require.ErrorIs(t, DefaultConfig().Validate(), ErrInvalidConfig)
	cfg := DefaultConfig()
	cfg.CertFile, cfg.KeyFile = "a", "b"
	require.ErrorIs(t, cfg.Validate(), ErrInvalidConfig, "no Renew")
	cfg.Renew = func(context.Context, []byte) ([]byte, error) { return nil, nil }
	require.NoError(t, cfg.Validate())
	cfg.RetryMax = time.Millisecond
	require.ErrorIs(t, cfg.Validate(), ErrInvalidConfig)
}
