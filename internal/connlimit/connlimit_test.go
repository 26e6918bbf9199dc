package connlimit_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/connlimit"
)

// counts is a connlimit.Observer for tests.
type counts struct {
	mu      sync.Mutex
	refused map[string]int
	open    map[string]int
}

func newCounts() *counts { return &counts{refused: map[string]int{}, open: map[string]int{}} }

func (c *counts) ConnRefused(l, reason string) {
	c.mu.Lock()
	c.refused[l+"/"+reason]++
	c.mu.Unlock()
}
func (c *counts) ConnOpened(l string) { c.mu.Lock(); c.open[l]++; c.mu.Unlock() }
func (c *counts) ConnClosed(l string) { c.mu.Lock(); c.open[l]--; c.mu.Unlock() }
func (c *counts) get(key string) (refused int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused[key]
}
func (c *counts) opened(l string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open[l]
}

// serve wraps a loopback listener with lim and accepts into a channel until
// the test ends.
func serve(t *testing.T, lim connlimit.Limits) (*connlimit.Listener, <-chan net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l, err := connlimit.New(raw, lim)
	require.NoError(t, err)
	ch := make(chan net.Conn, 1024)
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			ch <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return l, ch
}

// dialFrom connects to addr from the local IP from (a 127/8 address).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reports whether the server closed c (a read sees EOF or a
// reset) within a few seconds.
func closedByPeer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// stillOpen reports whether c is open: a short read times out.
func stillOpen(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestPerIPLimitRefusesOnlyTheFloodingAddress(t *testing.T) {
	obs := newCounts()
	l, accepted := serve(t, connlimit.Limits{Name: "test", PerIP: 3, Observer: obs})
	addr := l.Addr().String()
	for range 3 {
		dialFrom(t, "127.0.0.2", addr)
		<-accepted
	}
	over := dialFrom(t, "127.0.0.2", addr)
	require.True(t, closedByPeer(over), "the 4th connection from 127.0.0.2 must be closed")
	require.Equal(t, 1, obs.get("test/"+connlimit.ReasonPerIP))

	// Another address is not affected.
	other := dialFrom(t, "127.0.0.1", addr)
	srv := <-accepted
	require.True(t, stillOpen(other))
	require.Equal(t, 4, l.Open())
	require.Equal(t, 4, obs.opened("test"))

	// Closing frees the slot (once, however often Close is called).
	require.NoError(t, srv.Close())
	_ = srv.Close()
	require.Equal(t, 3, l.Open())
	require.Equal(t, 3, obs.opened("test"))
}

func TestTotalLimitAndReserveForExemptAddresses(t *testing.T) {
	obs := newCounts()
	peer := netip.MustParseAddr("127.0.0.1")
	l, accepted := serve(t, connlimit.Limits{Name: "raft", PerIP: 1, Total: 4, Reserve: 2, Observer: obs,
		Exempt: func(ip netip.Addr) bool { return ip == peer }})
	addr := l.Addr().String()
	for _, from := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		dialFrom(t, from, addr)
		<-accepted
	}
	over := dialFrom(t, "127.0.0.6", addr)
	require.True(t, closedByPeer(over))
	require.Equal(t, 1, obs.get("raft/"+connlimit.ReasonTotal))

	// The exempt peer ignores the per-IP limit and has the reserve past the total.
	for range 2 {
		c := dialFrom(t, "127.0.0.1", addr)
		<-accepted
		require.True(t, stillOpen(c))
	}
	require.True(t, closedByPeer(dialFrom(t, "127.0.0.1", addr)), "past Total+Reserve even a peer is refused")
	require.Equal(t, 2, obs.get("raft/"+connlimit.ReasonTotal))
	require.Equal(t, 6, l.Open())
}

func TestFirstByteTimeoutClosesSilentConnection(t *testing.T) {
	obs := newCounts()
	l, accepted := serve(t, connlimit.Limits{Name: "raft", FirstByteTimeout: 200 * time.Millisecond, Observer: obs})
	addr := l.Addr().String()

	_ = dialFrom(t, "127.0.0.1", addr)
	talker := dialFrom(t, "127.0.0.1", addr)
	sSilent, sTalker := <-accepted, <-accepted
	_, err := talker.Write([]byte("x"))
	require.NoError(t, err)
	_, err = io.ReadFull(sTalker, make([]byte, 1))
	require.NoError(t, err)

	// The silent client's server side reads EOF at the deadline, counted.
	errc := make(chan error, 1)
	go func() { _, err := sSilent.Read(make([]byte, 1)); errc <- err }()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, io.EOF)
		require.Equal(t, 1, obs.get("raft/"+connlimit.ReasonFirstByteTimeout))
	case <-time.After(5 * time.Second):
		t.Fatal("the silent connection's read did not time out")
	}

	// Once the first bytes arrive the deadline is gone: a later read waits
	// past the timeout.
	time.AfterFunc(400*time.Millisecond, func() { _, _ = talker.Write([]byte("y")) })
	start := time.Now()
	_, err = io.ReadFull(sTalker, make([]byte, 1))
	require.NoError(t, err)
	require.Greater(t, time.Since(start), 300*time.Millisecond)
}

// TestFirstByteTimeoutKeepsOwnersDeadlines: a deadline the connection's
// owner sets while the first-byte deadline is pending (an HTTP server's
// header timeout) survives the first byte, and an owner's deadline earlier
// than the first-byte one expires as the owner's timeout, not as a refusal.
func TestFirstByteTimeoutKeepsOwnersDeadlines(t *testing.T) {
	obs := newCounts()
	l, accepted := serve(t, connlimit.Limits{Name: "health", FirstByteTimeout: 2 * time.Second, Observer: obs})
	addr := l.Addr().String()

	talker := dialFrom(t, "127.0.0.1", addr)
	sTalker := <-accepted
	require.NoError(t, sTalker.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := talker.Write([]byte("x"))
	require.NoError(t, err)
	_, err = io.ReadFull(sTalker, make([]byte, 1))
	require.NoError(t, err)
	// The owner's 5 s deadline is still in force after the first byte: a
	// half-sent request cannot hold the connection for good.
	start := time.Now()
	_, err = sTalker.Read(make([]byte, 1))
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "the owner's deadline was cleared: %v", err)
	require.Greater(t, time.Since(start), 3*time.Second)

	// An owner's deadline before the first-byte one: a timeout of its
	// own, not counted as a refusal.
	_ = dialFrom(t, "127.0.0.1", addr)
	sSilent := <-accepted
	require.NoError(t, sSilent.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	_, err = sSilent.Read(make([]byte, 1))
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout())
	require.Equal(t, 0, obs.get("health/"+connlimit.ReasonFirstByteTimeout))
}

func TestTLSHandshakeDeadlineClosesSlowloris(t *testing.T) {
	cert := selfSigned(t)
	obs := newCounts()
	l, accepted := serve(t, connlimit.Limits{Name: "raft", FirstByteTimeout: 300 * time.Millisecond, Observer: obs,
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	addr := l.Addr().String()

	// A slowloris: the first bytes of a ClientHello, then nothing.
	slow := dialFrom(t, "127.0.0.1", addr)
	_, err := slow.Write([]byte{0x16, 0x03, 0x01, 0x00})
	require.NoError(t, err)
	srv := <-accepted
	errc := make(chan error, 1)
	go func() { _, err := srv.Read(make([]byte, 1)); errc <- err; srv.Close() }()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, io.EOF)
		require.Equal(t, 1, obs.get("raft/"+connlimit.ReasonFirstByteTimeout))
	case <-time.After(5 * time.Second):
		t.Fatal("a partial ClientHello held the connection past the handshake deadline")
	}
	require.True(t, closedByPeer(slow))

	// A real TLS client completes, and then may stay quiet past the deadline.
	type result struct {
		s   string
		err error
	}
	res := make(chan result, 1)
	go func() {
		srv := <-accepted
		buf := make([]byte, 4)
		_, err := io.ReadFull(srv, buf) // runs the handshake, then waits
		res <- result{string(buf), err}
	}()
	good, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	require.NoError(t, err)
	defer good.Close()
	time.Sleep(600 * time.Millisecond) // twice the handshake deadline
	_, err = good.Write([]byte("late"))
	require.NoError(t, err)
	select {
	case r := <-res:
		require.NoError(t, r.err)
		require.Equal(t, "late", r.s)
	case <-time.After(5 * time.Second):
		t.Fatal("no data after the handshake")
	}
}

// flaky is a net.Listener whose Accept fails with EMFILE n times.
type flaky struct {
	net.Listener
	fails atomic.Int32
	calls atomic.Int32
}

func (f *flaky) Accept() (net.Conn, error) {
	f.calls.Add(1)
	if f.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return f.Listener.Accept()
}

func TestAcceptBacksOffOnEMFILE(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &flaky{Listener: raw}
	f.fails.Store(1 << 30) // out of files until further notice
	obs := newCounts()
	l, err := connlimit.New(f, connlimit.Limits{Name: "grpc", Observer: obs})
	require.NoError(t, err)
	defer l.Close()
	got := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if c != nil {
			c.Close()
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	// 5+10+20+40+80 ms = 155 ms, +160 = 315: at most about 6 tries, never a spin.
	calls := f.calls.Load()
	require.LessOrEqual(t, calls, int32(8), "Accept spun on EMFILE: %d calls in 300ms", calls)
	require.GreaterOrEqual(t, calls, int32(3))
	require.Equal(t, int(calls), obs.get("grpc/"+connlimit.ReasonAcceptError))

	// Files come back: the pending Accept returns a connection.
	f.fails.Store(0)
	dialFrom(t, "127.0.0.1", raw.Addr().String())
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not recover after EMFILE")
	}

	// Close ends an Accept that is backing off.
	f.fails.Store(1 << 30)
	go func() { _, err := l.Accept(); got <- err }()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, l.Close())
	select {
	case err := <-got:
		require.ErrorIs(t, err, net.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a backing-off Accept")
	}
}

func TestNewRefusesNegativeLimits(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer raw.Close()
	_, err = connlimit.New(raw, connlimit.Limits{PerIP: -1})
	require.ErrorIs(t, err, connlimit.ErrInvalidLimits)
}

func TestShareAndFileLimit(t *testing.T) {
	require.Equal(t, 10000, connlimit.Share(20000, 1, 2))
	require.Equal(t, 2500, connlimit.Share(20000, 1, 8))
	require.Equal(t, 16, connlimit.Share(100, 1, 16), "a tiny limit still leaves a few")
	require.Equal(t, 0, connlimit.Share(100, 0, 1))
	n, _, err := connlimit.FileLimit()
	require.NoError(t, err)
	require.Positive(t, n)
}

func TestSaturated(t *testing.T) {
	l, accepted := serve(t, connlimit.Limits{Total: 2})
	addr := l.Addr().String()
	_, ok := l.Saturated(time.Now())
	require.False(t, ok)
	dialFrom(t, "127.0.0.2", addr)
	first := <-accepted
	dialFrom(t, "127.0.0.3", addr)
	<-accepted
	_, ok = l.Saturated(time.Now())
	require.False(t, ok, "full but nobody refused yet")

	before := time.Now()
	require.True(t, closedByPeer(dialFrom(t, "127.0.0.4", addr)))
	since, ok := l.Saturated(time.Now())
	require.True(t, ok)
	require.False(t, since.Before(before))
	// Still saturated after another refusal, since the first one.
	require.True(t, closedByPeer(dialFrom(t, "127.0.0.5", addr)))
	again, ok := l.Saturated(time.Now())
	require.True(t, ok)
	require.Equal(t, since, again)
	// Without a refusal for over a second, it is over.
	_, ok = l.Saturated(time.Now().Add(2 * time.Second))
	require.False(t, ok)

	// A freed slot refilled up to the total does not end it (a flood does
	// exactly that).
	first.Close()
	dialFrom(t, "127.0.0.6", addr)
	<-accepted
	_, ok = l.Saturated(time.Now())
	require.True(t, ok, "refilled to the total: still under pressure")
}
