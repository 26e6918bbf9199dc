package raftnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/rollout/rollout/internal/connlimit"
	"github.com/rollout/rollout/internal/mtls"
)

// streamLayer is the raft.StreamLayer under the NetworkTransport: a TCP
// listener, optionally wrapped in mutual TLS, plus a matching dialer. Addr
// reports the advertised address, which is what peers store in the raft
// configuration.
//
// With TLS the Raft port admits only replicas: the listener completes a
// handshake only with a certificate of role replica whose name is a server
// id of the latest raft configuration (or any replica certificate while
// this node has no configuration yet: a fresh node being added by its
// cluster's leader), and the dialer only talks to a peer presenting a
// replica certificate. A worker's or client's certificate from the same CA
// can therefore not write the log.
type streamLayer struct {
	net.Listener
	advertise advertisedAddr
	clientTLS *tls.Config // nil: plain TCP
	// members returns the server ids of the latest raft configuration; set
	// once raft runs (see admitFrom). Until then no peer is admitted.
	members atomic.Pointer[func() ([]string, error)]
	// servers returns the raft addresses of the latest configuration; set
	// with members. peers caches their IPs for the per-IP exemption.
	servers    atomic.Pointer[func() ([]string, error)]
	peers      atomic.Pointer[peerIPs]
	refreshing atomic.Bool
	// conns is the connection-limited listener under any TLS.
	conns *connlimit.Listener
	// revs, when set, tracks accepted connections by peer certificate.
	revs *mtls.Revocations
	// logRevoked, when set, is told of a replica refused for a revoked
	// certificate.
	logRevoked func(name string, err error)
}

// peerIPs is the set of the configuration's replica IPs, as of when.
type peerIPs struct {
	ips  map[netip.Addr]bool
	when time.Time
}

// peerIPsTTL is how long the exempt set is used before it is refreshed
// (in the background; the stale set serves meanwhile).
const peerIPsTTL = time.Second

var _ raft.StreamLayer = (*streamLayer)(nil)

// advertisedAddr is a net.Addr that reports a host:port verbatim (a host name
// stays a host name rather than being resolved).
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// newStreamLayer binds bindAddr and returns a stream layer advertising
// advertise (or, when advertise is empty, the bound address). With tlsCfg
// non-nil the listener and dialer run mutual TLS. lim bounds the listener's
// connections (see Config.Conns); its Name, Exempt and TLS are set here.
func newStreamLayer(bindAddr, advertise string, tlsCfg *tls.Config, lim connlimit.Limits) (*streamLayer, error) {
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
	s := &streamLayer{advertise: advertisedAddr(advertise)}
	lim.Name = "raft"
	lim.Exempt = s.isPeer
	lim.TLS = nil
	if tlsCfg != nil {
		server := tlsCfg.Clone()
		if server.ClientAuth < tls.RequireAndVerifyClientCert {
			server.ClientAuth = tls.RequireAndVerifyClientCert
		}
		server.VerifyConnection = chainVerify(tlsCfg.VerifyConnection, s.verifyPeer)
		if get := tlsCfg.GetConfigForClient; get != nil {
			// The per-handshake config (mtls.Source's) replaces this one:
			// give it the same client-certificate rule and peer check.
			server.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
				c, err := get(hi)
				if c == nil || err != nil {
					return c, err
				}
				c = c.Clone()
				if c.ClientAuth < tls.RequireAndVerifyClientCert {
					c.ClientAuth = tls.RequireAndVerifyClientCert
				}
				c.VerifyConnection = chainVerify(c.VerifyConnection, s.verifyPeer)
				c.VerifyConnection = s.noteRevoked(c.VerifyConnection)
				return c, nil
			}
		}
		server.VerifyConnection = s.noteRevoked(server.VerifyConnection)
		lim.TLS = server // the handshake runs within lim.FirstByteTimeout
		s.clientTLS = tlsCfg.Clone()
		s.clientTLS.VerifyConnection = s.noteRevoked(chainVerify(tlsCfg.VerifyConnection, verifyReplica))
	}
	cl, err := connlimit.New(ln, lim)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	s.conns, s.Listener = cl, cl
	return s, nil
}

// isPeer reports whether ip is the IP of a replica of the latest
// configuration (Config.Conns's exemption). It answers from a cached set,
// refreshing it in the background once it is older than peerIPsTTL.
func (s *streamLayer) isPeer(ip netip.Addr) bool {
	p := s.peers.Load()
	if (p == nil || time.Since(p.when) > peerIPsTTL) && s.servers.Load() != nil && s.refreshing.CompareAndSwap(false, true) {
		go s.refreshPeers()
	}
	return p != nil && p.ips[ip]
}

// refreshPeers recomputes the exempt set from the configuration's raft
// addresses, resolving host names.
func (s *streamLayer) refreshPeers() {
	defer s.refreshing.Store(false)
	servers := s.servers.Load()
	if servers == nil {
		return
	}
	addrs, err := (*servers)()
	if err != nil {
		return
	}
	ips := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			ips[ip.Unmap()] = true
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), peerIPsTTL)
		found, _ := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		cancel()
		for _, ip := range found {
			ips[ip.Unmap()] = true
		}
	}
	s.peers.Store(&peerIPs{ips: ips, when: time.Now()})
}

// admitFrom makes the listener admit the replicas of r's latest
// configuration.
func (s *streamLayer) admitFrom(r *raft.Raft) {
	f := func() ([]string, error) {
		fut := r.GetConfiguration()
		if err := fut.Error(); err != nil {
			return nil, err
		}
		servers := fut.Configuration().Servers
		ids := make([]string, len(servers))
		for i, srv := range servers {
			ids[i] = string(srv.ID)
		}
		return ids, nil
	}
	s.members.Store(&f)
	addrs := func() ([]string, error) {
		fut := r.GetConfiguration()
		if err := fut.Error(); err != nil {
			return nil, err
		}
		var out []string
		for _, srv := range fut.Configuration().Servers {
			out = append(out, string(srv.Address))
		}
		return out, nil
	}
	s.servers.Store(&addrs)
	go s.refreshPeers()
}

// verifyPeer admits a connecting peer whose verified certificate is a
// replica's named in the latest configuration (any replica's while the
// configuration is empty).
func (s *streamLayer) verifyPeer(cs tls.ConnectionState) error {
	id, err := replicaIdentity(cs)
	if err != nil {
		return err
	}
	members := s.members.Load()
	if members == nil {
		return fmt.Errorf("raftnode: refusing replica %q: raft is not running yet", id.Name)
	}
	ids, err := (*members)()
	if err != nil {
		return fmt.Errorf("raftnode: refusing replica %q: read configuration: %w", id.Name, err)
	}
	if len(ids) > 0 && !slices.Contains(ids, id.Name) {
		return fmt.Errorf("%w: replica %q is not in the raft configuration %v", ErrPeerRefused, id.Name, ids)
	}
	return nil
}

// verifyReplica accepts a peer whose verified certificate has role replica.
func verifyReplica(cs tls.ConnectionState) error {
	_, err := replicaIdentity(cs)
	return err
}

// replicaIdentity returns the identity of the peer's verified certificate,
// which must have role replica.
func replicaIdentity(cs tls.ConnectionState) (mtls.Identity, error) {
	if len(cs.PeerCertificates) == 0 {
		return mtls.Identity{}, fmt.Errorf("%w: no peer certificate", ErrPeerRefused)
	}
	id, err := mtls.IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return id, fmt.Errorf("%w: %v", ErrPeerRefused, err)
	}
	if id.Role != mtls.RoleReplica {
		return id, fmt.Errorf("%w: %q has role %s; the raft port admits only role replica", ErrPeerRefused, id.Name, id.Role)
	}
	return id, nil
}

// chainVerify runs the caller's VerifyConnection (if any), then ours.
func chainVerify(first, then func(tls.ConnectionState) error) func(tls.ConnectionState) error {
	if first == nil {
		return then
	}
	return func(cs tls.ConnectionState) error {
		if err := first(cs); err != nil {
			return err
		}
		return then(cs)
	}
}

// noteRevoked wraps a verification so that a peer refused for a revoked
// certificate is logged with what the operator should do.
func (s *streamLayer) noteRevoked(verify func(tls.ConnectionState) error) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		err := verify(cs)
		if err != nil && errors.Is(err, mtls.ErrRevoked) && s.logRevoked != nil && len(cs.PeerCertificates) > 0 {
			s.logRevoked(cs.PeerCertificates[0].Subject.CommonName, err)
		}
		return err
	}
}

// Accept returns the next connection, tracked by its peer certificate when
// revocations are enforced.
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil || s.revs == nil || s.clientTLS == nil {
		return c, err
	}
	return s.revs.TrackTLS(c), nil
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
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || s.revs == nil {
		return c, err
	}
	// Pooled connections to a replica whose certificate is revoked later
	// are closed too.
	if tc, ok := c.(*tls.Conn); ok {
		if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
			return s.revs.Track(c, pc[0]), nil
		}
	}
	return c, nil
}
