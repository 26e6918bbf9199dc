// Package certrenew keeps a node's certificate fresh: a background loop that,
// once less than a third of the certificate's life is left, makes a new key,
// asks the cluster to sign a certificate signing request for the node's own
// name and role over its current mutual-TLS connection (the Renew RPC), and
// puts the new certificate and key files in place of the old ones
// atomically, for the node's TLS configuration to pick up at its next
// handshake. Workers and replicas run it (rollout-worker and rollout-coord
// --tls-renew).
//
// Only a replica that holds the CA key signs; where none does, each attempt
// fails with the replicas' reason, logged, and the operator renews by hand
// (docs/SECURITY.md). An expired certificate is not sent (no replica would
// accept the connection); the loop logs it and keeps watching the file for a
// certificate renewed by hand.
package certrenew

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/internal/mtls"
)

var (
	// ErrInvalidConfig wraps every Config problem; the message names the
	// field.
	ErrInvalidConfig = errors.New("certrenew: invalid config")
	// ErrExpired means the certificate has expired: the cluster cannot
	// renew it (its holder cannot connect); it must be renewed by hand.
	ErrExpired = errors.New("certrenew: the certificate has expired")
	// ErrBadReply means the cluster returned a certificate that is not the
	// one asked for: another name or role, another key, one that does not
	// chain to the CA file, or one that ends no later than the current one.
	// Nothing is written then.
	ErrBadReply = errors.New("certrenew: the renewed certificate is not usable")
	// ErrWrongIdentity means the certificate file names an identity other
	// than the node's (Config.Identity).
	ErrWrongIdentity = errors.New("certrenew: the certificate is not this node's")
)

// RenewFunc sends a certificate signing request (DER) to the cluster over
// the node's mutual-TLS connection and returns the signed certificate (DER).
type RenewFunc func(ctx context.Context, csrDER []byte) ([]byte, error)

// maxSleep bounds one wait of the loop, so that a certificate replaced by
// hand with a shorter one is seen in time.
const maxSleep = time.Hour

// Config configures a renewal loop.
type Config struct {
	// CertFile and KeyFile are the node's certificate and key files
	// (--tls-cert, --tls-key); they are read at each check and replaced on
	// renewal.
	CertFile, KeyFile string
	// CAFile, when set (--tls-ca), is the CA bundle a renewed certificate
	// must chain to before it is written.
	CAFile string
	// Identity, when set, is the node's own identity: a certificate file
	// naming another is not renewed (ErrWrongIdentity).
	Identity mtls.Identity
	// Renew sends the request (required).
	Renew RenewFunc
	// RetryMin and RetryMax bound the backoff between failed attempts
	// (doubling, jittered); RetryMin is also the least time between two
	// renewals.
	RetryMin, RetryMax time.Duration
	// CallTimeout bounds one Renew call.
	CallTimeout time.Duration
	// Logger receives the loop's logs (nil: none).
	Logger hclog.Logger
	// OnRenewed, when set, is called with each certificate written.
	OnRenewed func(*x509.Certificate)
}

// DefaultConfig returns a Config with the defaults; CertFile, KeyFile and
// Renew must still be set.
func DefaultConfig() Config {
	return Config{RetryMin: 5 * time.Second, RetryMax: 10 * time.Minute, CallTimeout: 30 * time.Second}
}

// Validate reports the first invalid field, wrapped in ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case c.CertFile == "" || c.KeyFile == "":
		return fmt.Errorf("%w: CertFile and KeyFile are required", ErrInvalidConfig)
	case c.Renew == nil:
		return fmt.Errorf("%w: Renew is required", ErrInvalidConfig)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("%w: RetryMin must be > 0 and RetryMax >= RetryMin", ErrInvalidConfig)
	case c.CallTimeout <= 0:
		return fmt.Errorf("%w: CallTimeout must be > 0", ErrInvalidConfig)
	}
	return nil
}

// Next says what to do about cert at now: renew it now (due), or wait
// until it is due (wait > 0). An expired certificate is ErrExpired.
func Next(cert *x509.Certificate, now time.Time) (wait time.Duration, due bool, err error) {
	if !now.Before(cert.NotAfter) {
		return 0, false, fmt.Errorf("%w at %s", ErrExpired, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	at := mtls.RenewDue(cert)
	if now.Before(at) {
		return at.Sub(now), false, nil
	}
	return 0, true, nil
}

// Run checks the certificate file and renews it when due, until ctx ends;
// it returns nil then, or a Config error at once. Every failure is logged
// with its reason and retried with backoff.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	failures := 0
	for {
		wait := cfg.backoff(failures)
		cert, err := mtls.ReadCertFile(cfg.CertFile)
		var due bool
		if err == nil {
			var w time.Duration
			w, due, err = Next(cert, time.Now())
			if err == nil && !due {
				wait, failures = min(w, maxSleep), 0
			}
		}
		if due {
			var renewed *x509.Certificate
			renewed, err = Once(ctx, cfg)
			if err == nil {
				failures = 0
				log.Info("certificate renewed", "file", cfg.CertFile, "serial", renewed.SerialNumber.Text(16),
					"not_after", renewed.NotAfter.UTC().Format(time.RFC3339))
				if cfg.OnRenewed != nil {
					cfg.OnRenewed(renewed)
				}
				wait = cfg.RetryMin
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failures++
			wait = cfg.backoff(failures)
			if errors.Is(err, ErrExpired) {
				log.Error("certificate expired: the cluster cannot renew it; renew it by hand (docs/SECURITY.md)",
					"file", cfg.CertFile, "error", err, "check_again_in", wait)
			} else {
				log.Warn("certificate renewal failed; will retry", "file", cfg.CertFile, "error", err, "retry_in", wait)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Once renews the certificate in cfg.CertFile now, whether due or not: a
// new key, a CSR for the file's identity, cfg.Renew, checks of the reply,
// then the new files in place (mtls.WritePairAtomic). It returns the new
// certificate. An expired certificate is ErrExpired, a reply that is not
// the one asked for ErrBadReply; nothing is written on any error.
func Once(ctx context.Context, cfg Config) (*x509.Certificate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cur, err := mtls.ReadCertFile(cfg.CertFile)
	if err != nil {
		return nil, err
	}
	if !time.Now().Before(cur.NotAfter) {
		return nil, fmt.Errorf("%w at %s", ErrExpired, cur.NotAfter.UTC().Format(time.RFC3339))
	}
	id, err := mtls.IdentityOf(cur)
	if err != nil {
		return nil, fmt.Errorf("certrenew: %s: %w", cfg.CertFile, err)
	}
	if cfg.Identity != (mtls.Identity{}) && id != cfg.Identity {
		return nil, fmt.Errorf("%w: %s is for %s, this node is %s", ErrWrongIdentity, cfg.CertFile, id, cfg.Identity)
	}
	key, err := mtls.NewRenewalKey()
	if err != nil {
		return nil, err
	}
	csr, err := mtls.CreateCSR(id, key)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
	der, err := cfg.Renew(cctx, csr)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("certrenew: the cluster did not renew %s: %w", id, err)
	}
	got, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadReply, err)
	}
	gotID, err := mtls.IdentityOf(got)
	switch {
	case err != nil || gotID != id:
		return nil, fmt.Errorf("%w: it names %s, not %s", ErrBadReply, gotID, id)
	case !key.PublicKey.Equal(got.PublicKey):
		return nil, fmt.Errorf("%w: it does not carry the new key", ErrBadReply)
	case !got.NotAfter.After(cur.NotAfter):
		return nil, fmt.Errorf("%w: it ends %s, no later than the current one (%s): the CA may expire soon; rotate it",
			ErrBadReply, got.NotAfter.UTC().Format(time.RFC3339), cur.NotAfter.UTC().Format(time.RFC3339))
	}
	if cfg.CAFile != "" {
		if err := verifyAgainst(cfg.CAFile, got); err != nil {
			return nil, err
		}
	}
	if err := mtls.WritePairAtomic(cfg.CertFile, cfg.KeyFile, der, key); err != nil {
		return nil, err
	}
	return got, nil
}

// verifyAgainst checks that cert chains to a CA of the bundle in caFile.
func verifyAgainst(caFile string, cert *x509.Certificate) error {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("certrenew: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return fmt.Errorf("%w: %s holds no certificate", mtls.ErrBadPEM, caFile)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("%w: it does not chain to a CA of %s: %v", ErrBadReply, caFile, err)
	}
	return nil
}

// backoff is the wait after the n-th consecutive failure (n 0: RetryMin),
// jittered by up to a fifth, at most RetryMax.
func (c Config) backoff(n int) time.Duration {
	d := c.RetryMin
	for i := 1; i < n && d < c.RetryMax; i++ {
		d *= 2
	}
	d = min(d, c.RetryMax)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// Start runs Run in the background and returns a function that waits until
// it has ended (after ctx ends). A configuration that Run refuses is logged
// to log as "certificate renewal not started".
func Start(ctx context.Context, cfg Config, log hclog.Logger) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := Run(ctx, cfg); err != nil {
			log.Error("certificate renewal not started", "error", err)
		}
	}()
	return func() { <-done }
}
