package connlimit

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Reasons a connection is refused, as reported to Observer.Refused.
const (
	ReasonPerIP       = "per_ip"
	ReasonTotal       = "total"
	ReasonAcceptError = "accept_error"
	// ReasonFirstByteTimeout counts a connection that sent nothing (TLS:
	// did not complete its handshake) within Limits.FirstByteTimeout.
	ReasonFirstByteTimeout = "first_byte_timeout"
)

// DefaultPerIP is the default per-IP connection limit of a listener.
const DefaultPerIP = 100

// DefaultFirstByteTimeout is the default time a connection has to deliver
// its first bytes (or, under TLS, to complete its handshake).
const DefaultFirstByteTimeout = 5 * time.Second

// Backoff bounds of Accept after a temporary error.
const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
)

// ErrInvalidLimits is wrapped by New's refusal of negative limits.
var ErrInvalidLimits = errors.New("connlimit: invalid limits")

// Observer receives a listener's events. Its methods must be safe for
// concurrent use and must not block.
type Observer interface {
	// ConnRefused counts a connection closed at accept (or an accept
	// error) on listener, for reason.
	ConnRefused(listener, reason string)
	// ConnOpened and ConnClosed report a connection admitted by listener
	// and its release (its first Close).
	ConnOpened(listener string)
	ConnClosed(listener string)
}

// Limits configures a Listener; see the package comment.
type Limits struct {
	// Name labels the listener in the Observer's events ("grpc", "raft",
	// "dashboard", "metrics", "pprof").
	Name string
	// PerIP is the most connections open at once from one remote IP (0:
	// no limit).
	PerIP int
	// Total is the most connections open at once (0: no limit).
	Total int
	// Exempt, when set, reports the IPs exempt from PerIP (see the package
	// comment); it is called on every accept, so it must be cheap.
	Exempt func(netip.Addr) bool
	// Reserve is how many connections past Total exempt IPs may still open.
	Reserve int
	// FirstByteTimeout closes a connection that has not sent its first
	// bytes (TLS: completed its handshake) in time (0: no deadline).
	FirstByteTimeout time.Duration
	// TLS, when set, makes Accept return TLS server connections with this
	// configuration; the handshake runs on the first Read or Write (or
	// Handshake), within FirstByteTimeout.
	TLS *tls.Config
	// Observer, when set, is told of refusals and of the open count.
	Observer Observer
	// Tally, when set, adds up the refusals with their source addresses
	// (for the coordinator's conns-refused events).
	Tally *Tally
}

// Listener is a net.Listener enforcing Limits.
type Listener struct {
	net.Listener
	lim Limits

	mu    sync.Mutex
	open  int
	perIP map[netip.Addr]int
	// fullSince is when the listener last came under pressure (a refusal
	// for the total or an accept error with no admission below the total
	// since; zero: not under pressure); lastFull is the latest such event.
	fullSince, lastFull time.Time

	closeOnce sync.Once
	closed    chan struct{}
}

// New wraps inner with lim.
func New(inner net.Listener, lim Limits) (*Listener, error) {
	if lim.PerIP < 0 || lim.Total < 0 || lim.Reserve < 0 || lim.FirstByteTimeout < 0 {
		return nil, fmt.Errorf("%w: per-IP %d, total %d, reserve %d and first-byte timeout %s must not be negative",
			ErrInvalidLimits, lim.PerIP, lim.Total, lim.Reserve, lim.FirstByteTimeout)
	}
	return &Listener{Listener: inner, lim: lim, perIP: make(map[netip.Addr]int), closed: make(chan struct{})}, nil
}

// Open returns the number of connections the listener holds.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Close closes the inner listener; connections already accepted stay open.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// Accept returns the next connection within the limits, closing (and
// counting) those over them, and waiting out temporary accept errors.
func (l *Listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !temporary(err) {
				return nil, err
			}
			l.pressed(time.Now())
			l.refused(ReasonAcceptError, netip.Addr{})
			delay = min(max(2*delay, minAcceptBackoff), maxAcceptBackoff)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-l.closed:
				t.Stop()
				return nil, net.ErrClosed
			}
			continue
		}
		delay = 0
		ip := remoteIP(c.RemoteAddr())
		if reason := l.admit(ip); reason != "" {
			// Counted before the close: whoever sees the connection
			// closed sees the refusal counted too.
			l.refused(reason, ip)
			_ = c.Close()
			continue
		}
		lc := &conn{Conn: c, l: l, ip: ip}
		if d := l.lim.FirstByteTimeout; d > 0 {
			lc.firstByte = time.Now().Add(d)
			_ = c.SetDeadline(lc.firstByte)
			lc.pending = l.lim.TLS == nil
		}
		if l.lim.TLS != nil {
			return &tlsConn{Conn: tls.Server(lc, l.lim.TLS), raw: c, l: l, ip: ip, deadline: l.lim.FirstByteTimeout > 0}, nil
		}
		return lc, nil
	}
}

// admit takes a slot for a connection from ip, or returns why not.
func (l *Listener) admit(ip netip.Addr) string {
	exempt := l.lim.Exempt != nil && ip.IsValid() && l.lim.Exempt(ip)
	l.mu.Lock()
	total := l.lim.Total
	if exempt && total > 0 {
		total += l.lim.Reserve
	}
	switch {
	case total > 0 && l.open >= total:
		l.pressedLocked(time.Now())
		l.mu.Unlock()
		return ReasonTotal
	case !exempt && l.lim.PerIP > 0 && l.perIP[ip] >= l.lim.PerIP:
		l.mu.Unlock()
		return ReasonPerIP
	}
	l.open++
	l.perIP[ip]++
	if l.lim.Total == 0 || l.open < l.lim.Total {
		l.fullSince = time.Time{} // room to spare: the pressure is over
	}
	l.mu.Unlock()
	if o := l.lim.Observer; o != nil {
		o.ConnOpened(l.lim.Name)
	}
	return ""
}

// pressed records a refusal for the total or an accept error at now.
func (l *Listener) pressed(now time.Time) {
	l.mu.Lock()
	l.pressedLocked(now)
	l.mu.Unlock()
}

func (l *Listener) pressedLocked(now time.Time) {
	if l.fullSince.IsZero() {
		l.fullSince = now
	}
	l.lastFull = now
}

// Saturated reports since when the listener has been unable to take new
// connections: every accept since then was refused for the total or failed
// (out of files), with no connection admitted below the total in between,
// and the latest such refusal was within the last second of now. A
// listener that is not saturated returns ok false.
func (l *Listener) Saturated(now time.Time) (since time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fullSince.IsZero() || now.Sub(l.lastFull) > time.Second {
		return time.Time{}, false
	}
	return l.fullSince, true
}

// release frees ip's slot.
func (l *Listener) release(ip netip.Addr) {
	l.mu.Lock()
	l.open--
	if l.perIP[ip]--; l.perIP[ip] <= 0 {
		delete(l.perIP, ip)
	}
	l.mu.Unlock()
	if o := l.lim.Observer; o != nil {
		o.ConnClosed(l.lim.Name)
	}
}

func (l *Listener) refused(reason string, from netip.Addr) {
	if o := l.lim.Observer; o != nil {
		o.ConnRefused(l.lim.Name, reason)
	}
	if t := l.lim.Tally; t != nil {
		t.Refused(l.lim.Name, reason, from)
	}
}

// remoteIP is a's IP (unmapped from IPv4-in-IPv6), or the zero Addr for an
// address that is not TCP/UDP (all such connections share one slot
// count).
func remoteIP(a net.Addr) netip.Addr {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		if a == nil {
			return netip.Addr{}
		}
		p, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.Addr{}
		}
		ap = p
	}
	return ap.Addr().Unmap()
}

// temporary reports whether an Accept error is worth waiting out.
func temporary(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// conn is an accepted connection holding a slot until its first Close.
//
// While the first-byte deadline is pending, a deadline its owner sets
// (an HTTP server's header timeout, Raft's I/O timeout) is kept: the
// connection's deadline is the earlier of the two, and the first byte
// restores the owner's own deadlines instead of clearing every deadline.
type conn struct {
	net.Conn
	l    *Listener
	ip   netip.Addr
	once sync.Once

	mu sync.Mutex
	// pending: the first-byte deadline (firstByte) is set and no byte has
	// arrived.
	pending   bool
	firstByte time.Time
	// ownerRead and ownerWrite are the deadlines the connection's owner
	// set (zero: none).
	ownerRead, ownerWrite time.Time
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pending {
		return n, err
	}
	if n > 0 {
		c.pending = false
		_ = c.Conn.SetReadDeadline(c.ownerRead)
		_ = c.Conn.SetWriteDeadline(c.ownerWrite)
		return n, err
	}
	if isTimeout(err) && (c.ownerRead.IsZero() || !c.ownerRead.Before(c.firstByte)) {
		// The first-byte deadline, not the owner's, expired.
		c.l.refused(ReasonFirstByteTimeout, c.ip)
		return 0, io.EOF
	}
	return n, err
}

// SetDeadline sets the owner's read and write deadlines (see conn).
func (c *conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the owner's read deadline (see conn).
func (c *conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ownerRead = t
	return c.Conn.SetReadDeadline(c.effective(t))
}

// SetWriteDeadline sets the owner's write deadline (see conn).
func (c *conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ownerWrite = t
	return c.Conn.SetWriteDeadline(c.effective(t))
}

// effective is the deadline to set for the owner's t: the earlier of t
// and a pending first-byte deadline. The caller holds c.mu.
func (c *conn) effective(t time.Time) time.Time {
	if !c.pending || (!t.IsZero() && t.Before(c.firstByte)) {
		return t
	}
	return c.firstByte
}

// isTimeout reports whether err is a deadline's timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// tlsConn is a TLS server connection whose handshake must complete before
// the first-byte deadline set on raw; the deadline is cleared after it.
type tlsConn struct {
	*tls.Conn
	raw      net.Conn
	l        *Listener
	ip       netip.Addr
	deadline bool
	once     sync.Once
	hsErr    error
}

// handshake runs the handshake once, clearing the deadline after success.
func (c *tlsConn) handshake() error {
	c.once.Do(func() {
		c.hsErr = c.Conn.Handshake()
		switch {
		case c.hsErr == nil && c.deadline:
			_ = c.raw.SetDeadline(time.Time{})
		case c.deadline && isTimeout(c.hsErr):
			c.l.refused(ReasonFirstByteTimeout, c.ip)
			c.hsErr = io.EOF
		}
	})
	return c.hsErr
}

func (c *tlsConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *tlsConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// NetConn returns the TLS connection, for callers that unwrap.
func (c *tlsConn) NetConn() net.Conn { return c.Conn }
