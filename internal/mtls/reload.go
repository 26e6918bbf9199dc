package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	// ErrKeyMismatch means a private key is not the key of the certificate
	// beside it.
	ErrKeyMismatch = errors.New("mtls: the key does not match the certificate")
	// ErrPeerUnverified means a peer's certificate does not chain to a CA of
	// the current bundle (or does not name the host dialled).
	ErrPeerUnverified = errors.New("mtls: peer certificate not verified")
)

// ExpiringFraction is the share of a certificate's life under which it is
// reported as expiring (Material.Expiring): a tenth.
const ExpiringFraction = 10

// Material is one loaded set of a node's TLS files: its certificate and
// key, and the CA bundle (one or more CAs) peers are verified against.
type Material struct {
	Cert *tls.Certificate
	Leaf *x509.Certificate
	// CAs are the certificates of the bundle, in file order.
	CAs    []*x509.Certificate
	pool   *x509.CertPool
	loaded time.Time
}

// Expiring reports whether the certificate is within a tenth of its life
// (NotBefore to NotAfter) of expiring at now, or past it.
func (m *Material) Expiring(now time.Time) bool { return CertExpiring(m.Leaf, now) }

// CertExpiring reports whether c is within a tenth of its life of expiring
// at now, or past it.
func CertExpiring(c *x509.Certificate, now time.Time) bool {
	return expiring(c.NotBefore, c.NotAfter, now)
}

func expiring(notBefore, notAfter, now time.Time) bool {
	return notAfter.Sub(now) <= notAfter.Sub(notBefore)/ExpiringFraction
}

// fileStamp is what changes when a file is replaced or rewritten.
type fileStamp struct {
	mtime time.Time
	size  int64
	ino   uint64
	dev   uint64
}

func stampOf(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	s := fileStamp{mtime: st.ModTime(), size: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino, s.dev = uint64(sys.Ino), uint64(sys.Dev) //nolint:unconvert // widths differ by platform
	}
	return s, nil
}

// Source serves a node's TLS material from its files and re-reads them
// when they change: at each new handshake it compares the files' mtime,
// size and inode with the last load (three stat calls) and reloads the
// ones that changed; Reload re-reads them unconditionally (on SIGHUP).
// Material that does not load (a file that does not parse, a key that
// does not match its certificate, a bundle with no CA) is refused: the
// previous material stays in use and Warn is told, naming the file.
//
// Config returns a *tls.Config that takes its certificate, key and CA
// bundle from the Source at each handshake, for both ends of a connection;
// every listener and dialer built on it picks up new material at its next
// handshake. It also refuses any peer certificate Revocations holds.
//
// A Source is safe for concurrent use.
type Source struct {
	files Files
	warn  func(msg string, args ...any)
	info  func(msg string, args ...any)
	revs  *Revocations
	want  *Identity

	cur atomic.Pointer[Material]

	mu     sync.Mutex // serializes loads
	stamps [3]fileStamp
}

// SourceOptions are the optional parts of a Source.
type SourceOptions struct {
	// Warn logs a refused reload (hclog's Logger.Warn fits); nil: silent.
	Warn func(msg string, args ...any)
	// Info logs a reload that took new material; nil: silent.
	Info func(msg string, args ...any)
	// Revocations, when set, is consulted at every handshake: a peer whose
	// certificate it holds is refused (ErrRevoked).
	Revocations *Revocations
	// Expect, when set, is the node's own identity: a certificate of
	// another role (or, when Expect.Name is set, another name) is refused
	// at every load, the first one included (ErrWrongIdentity, naming the
	// file and the identity found); a reload keeps the previous material.
	Expect *Identity
}

// NewSource loads the files (all three must be set: ErrIncompleteFlags
// otherwise) and returns a Source serving them. A first load that fails is
// an error naming the file.
func (f Files) NewSource(opts SourceOptions) (*Source, error) {
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return nil, ErrIncompleteFlags
	}
	s := &Source{files: f, warn: opts.Warn, info: opts.Info, revs: opts.Revocations, want: opts.Expect}
	if _, err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// Files returns the files the Source reads.
func (s *Source) Files() Files { return s.files }

// Revocations returns the revocation set the Source consults (nil: none).
func (s *Source) Revocations() *Revocations { return s.revs }

// Current returns the material in use.
func (s *Source) Current() *Material { return s.cur.Load() }

// Reload re-reads the files now whether or not they changed. On error the
// previous material stays in use (and Warn is told).
func (s *Source) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked()
}

// maybeReload reloads when a file's stamp changed since the last load.
func (s *Source) maybeReload() {
	var now [3]fileStamp
	for i, p := range []string{s.files.CA, s.files.Cert, s.files.Key} {
		now[i], _ = stampOf(p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now == s.stamps {
		return
	}
	// Even a refused load remembers the stamps: the same bad files are not
	// re-read (and re-logged) at every handshake; the next change is.
	_ = s.reloadLocked()
	s.stamps = now
}

func (s *Source) reloadLocked() error {
	m, err := s.loadLocked()
	if err != nil {
		if s.warn != nil {
			s.warn("TLS files not reloaded; the previous certificate, key and CA bundle stay in use", "error", err)
		}
		return err
	}
	if s.info != nil {
		s.info("TLS files reloaded", "cert", s.files.Cert, "subject", m.Leaf.Subject.CommonName,
			"serial", SerialOf(m.Leaf), "not_after", m.Leaf.NotAfter, "cas", len(m.CAs))
	}
	return nil
}

func (s *Source) load() (*Material, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadLocked()
}

// loadLocked reads and checks the three files and installs them.
func (s *Source) loadLocked() (*Material, error) {
	var stamps [3]fileStamp
	for i, p := range []string{s.files.CA, s.files.Cert, s.files.Key} {
		stamps[i], _ = stampOf(p)
	}
	m, err := LoadMaterial(s.files)
	if err != nil {
		return nil, err
	}
	if err := checkExpect(s.want, s.files.Cert, m); err != nil {
		return nil, err
	}
	s.cur.Store(m)
	s.stamps = stamps
	return m, nil
}

// LoadMaterial reads and checks a node's files: the CA bundle must hold at
// least one CA certificate and nothing that does not parse, the
// certificate must parse and the key must be its key. Errors name the file.
func LoadMaterial(f Files) (*Material, error) {
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("mtls: read --tls-ca: %w", err)
	}
	cas, err := parseBundle(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: --tls-ca %s: %v", ErrBadPEM, f.CA, err)
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	certPEM, err := os.ReadFile(f.Cert)
	if err != nil {
		return nil, fmt.Errorf("mtls: read --tls-cert: %w", err)
	}
	keyPEM, err := os.ReadFile(f.Key)
	if err != nil {
		return nil, fmt.Errorf("mtls: read --tls-key: %w", err)
	}
	if b, _ := pem.Decode(certPEM); b == nil {
		return nil, fmt.Errorf("%w: --tls-cert %s holds no PEM block", ErrBadPEM, f.Cert)
	}
	if b, _ := pem.Decode(keyPEM); b == nil {
		return nil, fmt.Errorf("%w: --tls-key %s holds no PEM block", ErrBadPEM, f.Key)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if isMismatch(err) {
			return nil, fmt.Errorf("%w: --tls-key %s is not the key of --tls-cert %s", ErrKeyMismatch, f.Key, f.Cert)
		}
		return nil, fmt.Errorf("%w: --tls-cert %s / --tls-key %s: %v", ErrBadPEM, f.Cert, f.Key, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%w: --tls-cert %s: %v", ErrBadPEM, f.Cert, err)
		}
		cert.Leaf = leaf
	}
	return &Material{Cert: &cert, Leaf: leaf, CAs: cas, pool: pool, loaded: time.Now()}, nil
}

func isMismatch(err error) bool {
	msg := err.Error()
	return msg == "tls: private key does not match public key" || msg == "tls: private key type does not match public key type"
}

// parseBundle returns every certificate of a PEM bundle; a block that is not
// a certificate, or does not parse, or a bundle with none, is an error.
func parseBundle(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a %q block where a CA certificate belongs", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %v", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("holds no certificate")
	}
	return out, nil
}

// Config returns the mutual-TLS configuration served from the Source (see
// Source). As a server it requires and verifies a client certificate
// against the current bundle; as a client it verifies the server's
// certificate against the current bundle and the name dialled, in
// VerifyConnection (InsecureSkipVerify is set only because the standard
// verification would use a bundle fixed at creation). Callers may Clone it
// and chain their own VerifyConnection after the returned one; a server
// side that changes ClientAuth or VerifyConnection must also wrap
// GetConfigForClient (which supplies the per-handshake server config).
func (s *Source) Config() *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		ClientAuth:           tls.RequireAndVerifyClientCert,
		GetCertificate:       s.getCertificate,
		GetClientCertificate: s.getClientCertificate,
		GetConfigForClient:   s.configForClient,
		InsecureSkipVerify:   true, //nolint:gosec // verified in VerifyConnection against the current bundle
		VerifyConnection:     s.verifyServer,
	}
}

// ConfigAdmittingRevoked is Config for a replica's gRPC server: the server
// side completes the handshake with a revoked client certificate too, so
// that the RPC layer can tell its holder, on every call, that and why it
// is revoked (PermissionDenied with the revocation record) instead of a
// bare "bad certificate" a client would retry forever. Pair it with
// Revocations.TellingCreds, and an RPC layer that refuses every call of a
// revoked certificate. The Raft port keeps Config (refused at the
// handshake).
func (s *Source) ConfigAdmittingRevoked() *tls.Config {
	c := s.Config()
	c.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		sc, err := s.configForClient(hi)
		if sc != nil {
			sc.VerifyConnection = nil
		}
		return sc, err
	}
	return c
}

func (s *Source) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.maybeReload()
	return s.cur.Load().Cert, nil
}

func (s *Source) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	s.maybeReload()
	return s.cur.Load().Cert, nil
}

// configForClient is the server side of a handshake: the current
// certificate and bundle, client certificates required and verified, and
// revoked ones refused. Session tickets are off so that every connection
// is verified against the bundle and revocations of its time.
func (s *Source) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	s.maybeReload()
	m := s.cur.Load()
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{*m.Cert},
		ClientCAs:              m.pool,
		ClientAuth:             tls.RequireAndVerifyClientCert,
		SessionTicketsDisabled: true,
		VerifyConnection:       s.checkRevoked,
	}, nil
}

// verifyServer verifies a server's chain against the current bundle and
// the name dialled (the client side), its role (replica: the only role that
// serves rollout's gRPC API and Raft; ErrNotReplica), then its revocation. A client checks
// the server's certificate before it is asked for its own, so this is where
// a client's handshake first looks at the files (maybeReload).
func (s *Source) verifyServer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: the server sent no certificate", ErrPeerUnverified)
	}
	s.maybeReload()
	m := s.cur.Load()
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: m.pool, Intermediates: inter, DNSName: cs.ServerName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("%w: %v", ErrPeerUnverified, err)
	}
	if err := CheckReplica(cs.ServerName, cs.PeerCertificates[0]); err != nil {
		return err
	}
	return s.checkRevoked(cs)
}

func (s *Source) checkRevoked(cs tls.ConnectionState) error {
	if s.revs == nil || len(cs.PeerCertificates) == 0 {
		return nil
	}
	return s.revs.Check(cs.PeerCertificates[0])
}

// ReloadOn reloads the files (Reload) each time ch delivers, until ctx
// ends; wire it to SIGHUP. A reload that fails keeps the previous material
// (Warn is told). A nil Source only logs the signal.
func (s *Source) ReloadOn(ctx context.Context, ch <-chan os.Signal, info func(msg string, args ...any)) {
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-ch:
			if s == nil {
				if info != nil {
					info("signal received: no TLS files to reload", "signal", sig.String())
				}
				continue
			}
			if info != nil {
				info("signal received: reloading the TLS files", "signal", sig.String(), "ca", s.files.CA, "cert", s.files.Cert, "key", s.files.Key)
			}
			_ = s.Reload()
		}
	}
}

// LoadReloading is Load served from a Source (see NewSource): it returns
// nils when no file is set (plaintext), ErrIncompleteFlags when some are.
func (f Files) LoadReloading(opts SourceOptions) (*tls.Config, *Source, error) {
	if !f.Enabled() {
		return nil, nil, nil
	}
	src, err := f.NewSource(opts)
	if err != nil {
		return nil, nil, err
	}
	return src.Config(), src, nil
}

// VerifiedServerCert returns the certificate a server presented on a
// client connection made with conf: the leaf of the verified chain, or,
// for a conf that verifies in VerifyConnection instead (InsecureSkipVerify
// with VerifyConnection set, as Source.Config), the peer's leaf, which the
// handshake accepted only once VerifyConnection had verified it. ok is
// false when there is none.
func VerifiedServerCert(conf *tls.Config, cs tls.ConnectionState) (*x509.Certificate, bool) {
	if len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
		return cs.VerifiedChains[0][0], true
	}
	if conf != nil && conf.InsecureSkipVerify && conf.VerifyConnection != nil && len(cs.PeerCertificates) > 0 {
		return cs.PeerCertificates[0], true
	}
	return nil, false
}
