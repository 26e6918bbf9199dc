package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

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
	// records are the revocation records of SetRecords, by serial and by
	// name.
	bySerial, byName map[string]Revocation
	// seen maps the serials of certificates tracked so far to their
	// identities (at most maxSeen, the oldest dropped first).
	seen     map[string]Identity
	seenList []string
}

// maxSeen bounds the certificates Revocations remembers having seen.
const maxSeen = 4096

// NewRevocations returns an empty set. onClose, when set, is told each
// time Set closes the live connections (n of them) of a newly revoked
// certificate.
func NewRevocations(onClose func(id Identity, serial string, n int)) *Revocations {
	return &Revocations{serials: map[string]struct{}{}, names: map[string]struct{}{}, conns: map[*trackedConn]struct{}{},
		closed: onClose, seen: map[string]Identity{}}
}

// Revocation is one revocation record, as the ledger holds it: what was
// revoked (Serial or Name), whose it was (Holder, Role: where known), who
// revoked it (By), when and why.
type Revocation struct {
	Serial, Name, Holder, Role, By, Reason string
	At                                     time.Time
}

// SetRecords is Set with the records themselves, which Record then returns
// for the certificates they revoke.
func (r *Revocations) SetRecords(recs []Revocation) int {
	var serials, names []string
	bySerial, byName := map[string]Revocation{}, map[string]Revocation{}
	for _, rec := range recs {
		if rec.Serial != "" {
			serials = append(serials, rec.Serial)
			bySerial[rec.Serial] = rec
		}
		if rec.Name != "" {
			names = append(names, rec.Name)
			byName[rec.Name] = rec
		}
	}
	r.mu.Lock()
	r.bySerial, r.byName = bySerial, byName
	r.mu.Unlock()
	return r.Set(serials, names)
}

// Record returns the record that revokes c: by its serial first, then by
// its name. ok is false when c is not revoked; a certificate revoked by
// Set alone (no record) gets a record naming only the serial or name.
func (r *Revocations) Record(c *x509.Certificate) (Revocation, bool) {
	serial, name := SerialOf(c), c.Subject.CommonName
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.serials[serial]; ok {
		if rec, ok := r.bySerial[serial]; ok {
			return rec, true
		}
		return Revocation{Serial: serial}, true
	}
	if _, ok := r.names[name]; ok {
		if rec, ok := r.byName[name]; ok {
			return rec, true
		}
		return Revocation{Name: name}, true
	}
	return Revocation{}, false
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

// Note remembers that a certificate was seen (see Seen).
func (r *Revocations) Note(c *x509.Certificate) {
	id, _ := IdentityOf(c)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteLocked(SerialOf(c), id)
}

func (r *Revocations) noteLocked(serial string, id Identity) {
	if _, ok := r.seen[serial]; ok {
		return
	}
	if len(r.seenList) >= maxSeen {
		delete(r.seen, r.seenList[0])
		r.seenList = r.seenList[1:]
	}
	r.seen[serial] = id
	r.seenList = append(r.seenList, serial)
}

// Seen returns the identity of the certificate of serial if a connection
// was tracked (or Note was called) with it.
func (r *Revocations) Seen(serial string) (Identity, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.seen[serial]
	return id, ok
}

// SeenName returns the role of a certificate of that name seen (see Seen).
func (r *Revocations) SeenName(name string) (Role, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range r.seen {
		if id.Name == name {
			return id.Role, true
		}
	}
	return "", false
}

// PeerCert describes the certificate of a tracked connection.
type PeerCert struct {
	Identity
	Serial              string
	NotBefore, NotAfter time.Time
}

// ExpiringPeers returns the certificates of the live tracked connections
// that are within a tenth of their life of expiring at now (or past it),
// one per serial, ordered by NotAfter.
func (r *Revocations) ExpiringPeers(now time.Time) []PeerCert {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	var out []PeerCert
	for c := range r.conns {
		if seen[c.serial] {
			continue
		}
		seen[c.serial] = true
		if expiring(c.notBefore, c.notAfter, now) {
			out = append(out, PeerCert{Identity: c.id, Serial: c.serial, NotBefore: c.notBefore, NotAfter: c.notAfter})
		}
	}
	slices.SortFunc(out, func(a, b PeerCert) int { return a.NotAfter.Compare(b.NotAfter) })
	return out
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
	tc := &trackedConn{Conn: conn, r: r, serial: SerialOf(c), id: id, notBefore: c.NotBefore, notAfter: c.NotAfter}
	r.mu.Lock()
	revoked := r.revokedLocked(tc.serial, id.Name)
	if !revoked {
		r.conns[tc] = struct{}{}
	}
	r.noteLocked(tc.serial, id)
	r.mu.Unlock()
	if revoked {
		_ = conn.Close()
	}
	return tc
}

// TrackTLS wraps a server-side TLS connection whose handshake has not run
// yet: once a Read or Write has completed the handshake, the connection is
// tracked by its peer certificate (see Track).
func (r *Revocations) TrackTLS(conn net.Conn) net.Conn {
	return &lazyTracked{Conn: conn, r: r}
}

// trackedConn is a connection registered under its peer certificate.
type trackedConn struct {
	net.Conn
	r         *Revocations
	serial    string
	id        Identity
	notBefore time.Time
	notAfter  time.Time
	once      sync.Once
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

// stater is a TLS connection (*tls.Conn, or a wrapper embedding one).
type stater interface {
	ConnectionState() tls.ConnectionState
}

// lazyTracked tracks a TLS connection once its handshake has completed
// (checked after each Read and Write, which run the handshake).
type lazyTracked struct {
	net.Conn
	r  *Revocations
	mu sync.Mutex
	tc *trackedConn
	ok bool // tracked, or not a TLS connection
}

func (c *lazyTracked) track() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok {
		return
	}
	st, isTLS := c.Conn.(stater)
	if !isTLS {
		c.ok = true
		return
	}
	cs := st.ConnectionState()
	if !cs.HandshakeComplete {
		return
	}
	c.ok = true
	if len(cs.PeerCertificates) > 0 {
		c.tc = c.r.Track(c.Conn, cs.PeerCertificates[0]).(*trackedConn)
	}
}

func (c *lazyTracked) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.track()
	return n, err
}

func (c *lazyTracked) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.track()
	return n, err
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

// TellingCreds is TrackingCreds for a server whose handshake admits revoked
// certificates (Source.ConfigAdmittingRevoked): a connection made with a
// certificate already revoked is kept open, untracked, so that the RPC
// layer can answer each of its calls with why it is refused (the holder is
// told once and stops, instead of retrying a failed handshake forever); a
// connection whose certificate is revoked while it is open is closed, as
// TrackingCreds does, and its holder's next connection is told.
func (r *Revocations) TellingCreds(inner credentials.TransportCredentials) credentials.TransportCredentials {
	return &trackingCreds{TransportCredentials: inner, r: r, tell: true}
}

type trackingCreds struct {
	credentials.TransportCredentials
	r    *Revocations
	tell bool
}

func (t *trackingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, auth, err := t.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return conn, auth, err
	}
	if ti, ok := auth.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		c := ti.State.PeerCertificates[0]
		if t.tell && t.r.Revoked(c) {
			t.r.Note(c)
			return conn, auth, nil
		}
		conn = t.r.Track(conn, c)
	}
	return conn, auth, nil
}

func (t *trackingCreds) Clone() credentials.TransportCredentials {
	return &trackingCreds{TransportCredentials: t.TransportCredentials.Clone(), r: t.r, tell: t.tell}
}
