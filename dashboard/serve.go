package dashboard

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rollout/rollout/internal/connlimit"
)

// CheckAddr checks an --http-addr: host:port, and when served without TLS
// (tlsOn false) a loopback host unless insecure is given
// (ErrPlaintextAddr). An empty host or an unspecified address (0.0.0.0,
// ::) is not loopback.
func CheckAddr(addr string, tlsOn, insecure bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %q is not host:port: %v", ErrInvalidConfig, addr, err)
	}
	if tlsOn || insecure {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %q would serve run names and worker ids without TLS to anyone who reaches it; "+
		"use a loopback address (127.0.0.1:PORT), run with TLS, or give --insecure", ErrPlaintextAddr, addr)
}

// ServerTLS derives the dashboard's HTTPS configuration from a replica's
// mutual-TLS configuration: the same certificate, TLS 1.2 or later (what
// browsers speak), and no client certificate asked for (a browser has
// none). It returns nil for nil.
func ServerTLS(replica *tls.Config) *tls.Config {
	if replica == nil {
		return nil
	}
	return &tls.Config{
		Certificates:   replica.Certificates,
		GetCertificate: replica.GetCertificate,
		MinVersion:     tls.VersionTLS12,
		ClientAuth:     tls.NoClientCert,
		NextProtos:     []string{"h2", "http/1.1"},
	}
}

// Server serves a Dashboard's handler on a listener: HTTPS when tlsConf is
// set, plain HTTP otherwise.
type Server struct {
	srv   *http.Server
	lis   net.Listener
	https bool
}

// Listen listens on addr for d's handler (see CheckAddr for the address
// rules; tlsConf is ServerTLS of the replica's TLS config, or nil), with
// DefaultLimits.
func Listen(d *Dashboard, addr string, tlsConf *tls.Config, insecure bool) (*Server, error) {
	return ListenLimited(d, addr, tlsConf, insecure, DefaultLimits(nil))
}

// DefaultLimits are the dashboard listener's connection limits (package
// internal/connlimit), reported to o: connlimit.DefaultPerIP per IP, 512 in
// all. The HTTP server's ReadHeaderTimeout (10 s, which also bounds the
// TLS handshake) closes a client that says nothing.
func DefaultLimits(o connlimit.Observer) connlimit.Limits {
	return connlimit.Limits{Name: "dashboard", PerIP: connlimit.DefaultPerIP, Total: 512, Observer: o}
}

// ListenLimited is Listen with the listener's connections bounded by lim
// (counted before the TLS handshake).
func ListenLimited(d *Dashboard, addr string, tlsConf *tls.Config, insecure bool, lim connlimit.Limits) (*Server, error) {
	if err := CheckAddr(addr, tlsConf != nil, insecure); err != nil {
		return nil, err
	}
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	var lis net.Listener
	if lis, err = connlimit.New(raw, lim); err != nil {
		raw.Close()
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	if tlsConf != nil {
		lis = tls.NewListener(lis, tlsConf)
	}
	srv := &http.Server{
		Handler:           d.Handler(tlsConf == nil),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	return &Server{srv: srv, lis: lis, https: tlsConf != nil}, nil
}

// URL is the address to open in a browser.
func (s *Server) URL() string {
	scheme := "http"
	if s.https {
		scheme = "https"
	}
	return scheme + "://" + s.lis.Addr().String() + "/"
}

// Addr is the address listened on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Serve serves until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops serving, waiting for requests in flight until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }
