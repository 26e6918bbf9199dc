package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"

	"google.golang.org/grpc/credentials"
)

var (
	// ErrRevoked means a peer's certificate is revoked (by serial number or
	// by name).
	ErrRevoked = errors.New("mtls: certificate revoked")
	// ErrBadSerial means a serial number is not hexadecimal.
	ErrBadSerial = errors.New("mtls: bad certificate serial number")
)

// SerialOf returns the serial number of c as rollout writes it: lowercase
// hexadecimal, no separators.
func SerialOf(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// ParseSerial parses a serial number written in hexadecimal, with or
// without colons between bytes and an optional 0x prefix (as openssl and
// SerialOf write it), and returns it as SerialOf writes it.
func ParseSerial(s string) (string, error) {
	t := strings.TrimPrefix(strings.ToLower(strings.ReplaceAll(s, ":", "")), "0x")
	n, ok := new(big.Int).SetString(t, 16)
	if !ok || t == "" || n.Sign() < 0 {
		return "", fmt.Errorf("%w: %q (want hexadecimal, e.g. 3f:a1:... or 3fa1...)", ErrBadSerial, s)
	}
	return n.Text(16), nil
}

// Revocations is the set of revoked certificates a node enforces: by
// serial number (SerialOf) and by name (the Common Name: every certificate
// of that name is revoked, whatever its serial). It also tracks the live
// connections accepted with each peer certificate, and closes those of a
// certificate as soon as Set revokes it.
//
// A Revocations is safe for concurrent use; the zero value is not usable
// (NewRevocations).
type Revocations struct {
	mu      sync.Mutex
	serials map[string]struct{}
	names   map[string]struct{}
	conns   map[*trackedConn]struct{}
	closed  func(id Identity, serial string, n int)
}

// NewRevocations returns an empty set. onClose, when set, is told each
// time Set closes the live connections (n of them) of a newly revoked
// certificate.
func NewRevocations(onClose func(id Identity, serial string, n int)) *Revocations {
	return &Revocations{serials: map[string]struct{}{}, names: map[string]struct{}{}, conns: map[*trackedConn]struct{}{}, closed: onClose}
}

// Set replaces the set with serials (as SerialOf writes them) and names,
// and closes every tracked connection whose certificate is now revoked. It
// returns how many it closed.
func (r *Revocations) Set(serials, names []string) int {
	r.mu.Lock()
	r.serials = make(map[string]struct{}, len(serials))
	for _, s := range serials {
		r.serials[s] = struct{}{}
	}
	r.names = make(map[string]struct{}, len(names))
	for _, n := range names {
		r.names[n] = struct{}{}
	}
	var doomed []*trackedConn
	for c := range r.conns {
		if r.revokedLocked(c.serial, c.id.Name) {
			doomed = append(doomed, c)
			delete(r.conns, c)
		}
	}
	r.mu.Unlock()
	type key struct {
		id     Identity
		serial string
	}
	counts := map[key]int{}
	for _, c := range doomed {
		_ = c.Conn.Close()
		counts[key{c.id, c.serial}]++
	}
	if r.closed != nil {
		for k, n := range counts {
			r.closed(k.id, k.serial, n)
		}
	}
	return len(doomed)
}

func (r *Revocations) revokedLocked(serial, name string) bool {
	if _, ok := r.serials[serial]; ok {
		return true
	}
	_, ok := r.names[name]
	return ok
}

// Revoked reports whether c is revoked.
func (r *Revocations) Revoked(c *x509.Certificate) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.revokedLocked(SerialOf(c), c.Subject.CommonName)
}

// Check returns ErrRevoked, naming the certificate, when c is revoked.
func (r *Revocations) Check(c *x509.Certificate) error {
	if r.Revoked(c) {
		return fmt.Errorf("%w: %q (serial %s)", ErrRevoked, c.Subject.CommonName, SerialOf(c))
	}
	return nil
}

// Live returns how many tracked connections are open.
func (r *Revocations) Live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// Track registers conn as accepted with peer certificate c, until it is
// closed; a certificate already revoked has conn closed at once. It
// returns the connection to use in conn's place.
func (r *Revocations) Track(conn net.Conn, c *x509.Certificate) net.Conn {
	id, _ := IdentityOf(c)
	tc := &trackedConn{Conn: conn, r: r, serial: SerialOf(c), id: id}
	r.mu.Lock()
	revoked := r.revokedLocked(tc.serial, id.Name)
	if !revoked {
		r.conns[tc] = struct{}{}
	}
	r.mu.Unlock()
	if revoked {
		_ = conn.Close()
	}
	return tc
}

// TrackTLS wraps a server-side TLS connection whose handshake has not run
// yet: the first Read or Write completes the handshake and then tracks the
// connection by its peer certificate (see Track).
func (r *Revocations) TrackTLS(conn net.Conn) net.Conn {
	return &lazyTracked{Conn: conn, r: r}
}

// trackedConn is a connection registered under its peer certificate.
type trackedConn struct {
	net.Conn
	r      *Revocations
	serial string
	id     Identity
	once   sync.Once
}

// Close closes the connection and forgets it.
func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.r.mu.Lock()
		delete(c.r.conns, c)
		c.r.mu.Unlock()
	})
	return c.Conn.Close()
}

// handshaker is a TLS connection (*tls.Conn, or a wrapper embedding one).
type handshaker interface {
	HandshakeContext(ctx context.Context) error
	ConnectionState() tls.ConnectionState
}

// lazyTracked tracks a TLS connection once its handshake completes.
type lazyTracked struct {
	net.Conn
	r    *Revocations
	once sync.Once
	err  error
	tc   *trackedConn
	mu   sync.Mutex
}

func (c *lazyTracked) start() error {
	c.once.Do(func() {
		h, ok := c.Conn.(handshaker)
		if !ok {
			return
		}
		if c.err = h.HandshakeContext(context.Background()); c.err != nil {
			return
		}
		if pc := h.ConnectionState().PeerCertificates; len(pc) > 0 {
			tc := c.r.Track(c.Conn, pc[0]).(*trackedConn)
			c.mu.Lock()
			c.tc = tc
			c.mu.Unlock()
		}
	})
	return c.err
}

func (c *lazyTracked) Read(b []byte) (int, error) {
	if err := c.start(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *lazyTracked) Write(b []byte) (int, error) {
	if err := c.start(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *lazyTracked) Close() error {
	c.mu.Lock()
	tc := c.tc
	c.mu.Unlock()
	if tc != nil {
		return tc.Close()
	}
	return c.Conn.Close()
}

// NetConn returns the wrapped connection, for callers that unwrap.
func (c *lazyTracked) NetConn() net.Conn { return c.Conn }

// TrackingCreds wraps gRPC server transport credentials so that every
// connection they accept is tracked by its peer certificate (see Track):
// revoking the certificate closes the connection and all its streams.
func (r *Revocations) TrackingCreds(inner credentials.TransportCredentials) credentials.TransportCredentials {
	return &trackingCreds{TransportCredentials: inner, r: r}
}

type trackingCreds struct {
	credentials.TransportCredentials
	r *Revocations
}

func (t *trackingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, auth, err := t.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return conn, auth, err
	}
	if ti, ok := auth.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		conn = t.r.Track(conn, ti.State.PeerCertificates[0])
	}
	return conn, auth, nil
}

func (t *trackingCreds) Clone() credentials.TransportCredentials {
	return &trackingCreds{TransportCredentials: t.TransportCredentials.Clone(), r: t.r}
}
