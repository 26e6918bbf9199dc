package raftnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is the raft.StreamLayer under the NetworkTransport: a TCP
// listener, optionally wrapped in mutual TLS, plus a matching dialer. Addr
// reports the advertised address, which is what peers store in the raft
// configuration.
type streamLayer struct {
	net.Listener
	advertise advertisedAddr
	clientTLS *tls.Config // nil: plain TCP
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// advertisedAddr is a net.Addr that reports a host:port verbatim (a host name
// stays a host name rather than being resolved).
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// newStreamLayer binds bindAddr and returns a stream layer advertising
// advertise (or, when advertise is empty, the bound address). With tlsCfg
// non-nil the listener and dialer run mutual TLS.
func newStreamLayer(bindAddr, advertise string, tlsCfg *tls.Config) (*streamLayer, error) {
	ln, err := net.Listen("tcp", bindAddr)
	if err != nil {
		return nil, fmt.Errorf("raftnode: bind raft transport on %s: %w", bindAddr, err)
	}
	if advertise == "" {
		advertise = ln.Addr().String()
		if host, _, _ := net.SplitHostPort(bindAddr); host != "" && net.ParseIP(host) == nil {
			// A host name in RaftAddr with port 0: keep the name, take the port.
			_, port, _ := net.SplitHostPort(advertise)
			advertise = net.JoinHostPort(host, port)
		}
	}
	s := &streamLayer{Listener: ln, advertise: advertisedAddr(advertise)}
	if tlsCfg != nil {
		server := tlsCfg.Clone()
		if server.ClientAuth < tls.RequireAndVerifyClientCert {
			server.ClientAuth = tls.RequireAndVerifyClientCert
		}
		s.Listener = tls.NewListener(ln, server)
		s.clientTLS = tlsCfg.Clone()
	}
	return s, nil
}

// Addr returns the advertised address.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to a peer's raft transport, completing the TLS handshake
// (when TLS is configured) within timeout.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	addr := string(address)
	if s.clientTLS == nil {
		return net.DialTimeout("tcp", addr, timeout)
	}
	cfg := s.clientTLS
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("raftnode: dial %q: %w", addr, err)
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: cfg}
	return d.DialContext(ctx, "tcp", addr)
}
